//! Reading key names back: which object a key belongs to and what it is to
//! that object. The inverse of [`crate::naming`], which derives the keys.

use crate::naming::{
    FAIR_QUEUE_PREFIX, FAIR_TIMEOUT_PREFIX, FENCE_PREFIX, LATCH_PREFIX, REQUEST_LATCH_PREFIX,
    TOKEN_PREFIX,
};

/// What a key derived from an object's name is to that object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Derived {
    /// `redisson_lock_queue:{name}`: a fair lock's waiting line (list).
    FairQueue,
    /// `redisson_lock_timeout:{name}`: a fair lock's waiter deadlines (zset).
    FairDeadlines,
    /// `redisson_lock_token:{name}`: a fenced lock's token counter.
    FenceToken,
    /// `{name}:timeout`: a permit-expirable semaphore's leases (zset).
    PermitLeases,
    /// `redisson_unlock_latch:{name}:<id>`: one unlock request's outcome.
    UnlockLatch(String),
    /// `redisson_request_latch:{name}:<id>`: one semaphore or latch write's outcome.
    RequestLatch(String),
    /// `{name}:<field>:rwlock_timeout:<n>`: read hold `n` of a reader.
    ReadHold { field: String, n: u32 },
}

/// What a scanned key is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyName {
    /// A key derived from the object `name`.
    Derived { name: String, role: Derived },
    /// A key no Redisson object uses as its own (`redisson_fence:{key}`, the
    /// crate's fencing record of a guarded key).
    Bookkeeping,
    /// Any other key: possibly an object's own key, `name` itself.
    Own,
}

/// Reads a key's name. Names are ambiguous where Redisson's are: `prefix:{a}`
/// is derived from both `a` and `{a}`; it is read as `a`'s.
pub(crate) fn read(key: &str) -> KeyName {
    let derived = |name: String, role| KeyName::Derived { name, role };
    if let Some(name) = prefixed(key, FAIR_QUEUE_PREFIX) {
        return derived(name, Derived::FairQueue);
    }
    if let Some(name) = prefixed(key, FAIR_TIMEOUT_PREFIX) {
        return derived(name, Derived::FairDeadlines);
    }
    if let Some(name) = prefixed(key, TOKEN_PREFIX) {
        return derived(name, Derived::FenceToken);
    }
    if let Some((name, id)) = prefixed_with_id(key, LATCH_PREFIX) {
        return derived(name, Derived::UnlockLatch(id));
    }
    if let Some((name, id)) = prefixed_with_id(key, REQUEST_LATCH_PREFIX) {
        return derived(name, Derived::RequestLatch(id));
    }
    if key.starts_with(FENCE_PREFIX) && key[FENCE_PREFIX.len()..].starts_with(':') {
        return KeyName::Bookkeeping;
    }
    if let Some((head, n)) = key.rsplit_once(":rwlock_timeout:") {
        if let (Ok(n), Some((head, owner))) = (n.parse::<u32>(), head.rsplit_once(':')) {
            if let Some((head, client)) = head.rsplit_once(':') {
                if let Some(name) = unsuffixed(head) {
                    if is_client_id(client) && is_owner_id(owner) && n > 0 {
                        let field = format!("{client}:{owner}");
                        return derived(name, Derived::ReadHold { field, n });
                    }
                }
            }
        }
    }
    if let Some(head) = key.strip_suffix(":timeout") {
        if let Some(name) = unsuffixed(head) {
            return derived(name, Derived::PermitLeases);
        }
    }
    KeyName::Own
}

/// The name inside Redisson's `prefixName(prefix, name)`.
fn prefixed(key: &str, prefix: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(':')?;
    braced(rest)
}

/// The name and the request id of `prefix:{name}:<id>`.
fn prefixed_with_id(key: &str, prefix: &str) -> Option<(String, String)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(':')?;
    let (head, id) = rest.rsplit_once(':')?;
    if id.is_empty() {
        return None;
    }
    Some((braced(head)?, id.to_string()))
}

/// The name inside Redisson's `suffixName(name, ...)`'s head: `{name}`, or a
/// name that carries its own `{`.
fn unsuffixed(head: &str) -> Option<String> {
    braced(head)
}

/// `{name}` (a name without `{`, which got braces) or a name with its own `{`.
fn braced(text: &str) -> Option<String> {
    if let Some(inner) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        if !inner.is_empty() && !inner.contains('{') {
            return Some(inner.to_string());
        }
    }
    text.contains('{').then(|| text.to_string())
}

/// A Redisson client id: a UUID, `8-4-4-4-12` hexadecimal digits.
pub(crate) fn is_client_id(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A Redisson owner (thread) id: a Java `long` in decimal.
pub(crate) fn is_owner_id(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    !digits.is_empty() && digits.len() <= 19 && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `field` is a lock hash field `<client-id>:<owner-id>`.
pub(crate) fn is_lock_field(field: &str) -> bool {
    field
        .rsplit_once(':')
        .is_some_and(|(client, owner)| is_client_id(client) && is_owner_id(owner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming;

    const FIELD: &str = "8743c9c0-0795-4907-87fd-6c719a6b4586:1";

    #[test]
    fn every_derived_key_reads_back_to_its_object() {
        for name in ["orders:42", "a{t}b", "x"] {
            let of = |role| KeyName::Derived {
                name: name.to_string(),
                role,
            };
            assert_eq!(read(&naming::fair_queue_name(name)), of(Derived::FairQueue));
            assert_eq!(
                read(&naming::fair_timeout_name(name)),
                of(Derived::FairDeadlines)
            );
            assert_eq!(read(&naming::token_name(name)), of(Derived::FenceToken));
            assert_eq!(
                read(&naming::permit_timeout_name(name)),
                of(Derived::PermitLeases)
            );
            let id = "0123456789abcdef0123456789abcdef";
            assert_eq!(
                read(&naming::latch_name(name, id)),
                of(Derived::UnlockLatch(id.into()))
            );
            assert_eq!(
                read(&naming::request_latch_name(name, id)),
                of(Derived::RequestLatch(id.into()))
            );
            assert_eq!(
                read(&format!("{}:3", naming::read_timeout_prefix(name, FIELD))),
                of(Derived::ReadHold {
                    field: FIELD.into(),
                    n: 3
                })
            );
            assert_eq!(read(name), KeyName::Own);
        }
        assert_eq!(read(&naming::fence_name("stock")), KeyName::Bookkeeping);
    }

    #[test]
    fn keys_that_only_look_derived_are_own_keys() {
        for key in [
            "redisson_lock_token:plain",
            "session:timeout",
            "redisson_lock_queue:",
            "x:rwlock_timeout:1",
            "{doc}:not-a-uuid:1:rwlock_timeout:1",
        ] {
            assert_eq!(read(key), KeyName::Own, "{key}");
        }
    }

    #[test]
    fn lock_fields_are_a_uuid_and_a_long() {
        assert!(is_lock_field(FIELD));
        assert!(is_lock_field("8743C9C0-0795-4907-87FD-6C719A6B4586:-7"));
        assert!(!is_lock_field("mode"));
        assert!(!is_lock_field("user:1"));
        assert!(!is_lock_field(&format!("{FIELD}:write")));
    }
}
