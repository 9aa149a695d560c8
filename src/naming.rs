//! Redis key and channel names, exactly as Redisson derives them from a lock name.

use crate::error::{Error, Result};

/// Prefix of the channel on which unlocks are announced.
const CHANNEL_PREFIX: &str = "redisson_lock__channel";
/// Prefix of the per-request unlock latch key (Redisson 3.24+).
pub(crate) const LATCH_PREFIX: &str = "redisson_unlock_latch";
/// Prefix of the per-request latch of a semaphore or latch write (this crate's).
pub(crate) const REQUEST_LATCH_PREFIX: &str = "redisson_request_latch";
/// Prefix of a semaphore's channel (RSemaphore, RPermitExpirableSemaphore).
const SEMAPHORE_CHANNEL_PREFIX: &str = "redisson_sc";
/// Prefix of a count-down latch's channel; braces are always added.
const COUNT_DOWN_CHANNEL_PREFIX: &str = "redisson_countdownlatch__channel__";
/// Prefix of a fenced lock's token counter.
pub(crate) const TOKEN_PREFIX: &str = "redisson_lock_token";
/// Prefix of the highest fencing token that wrote a key (this crate's).
pub(crate) const FENCE_PREFIX: &str = "redisson_fence";
/// Prefix of a read-write lock's channel.
const RWLOCK_CHANNEL_PREFIX: &str = "redisson_rwlock";
/// Prefixes of a fair lock's waiting queue (list) and deadlines (sorted set).
pub(crate) const FAIR_QUEUE_PREFIX: &str = "redisson_lock_queue";
pub(crate) const FAIR_TIMEOUT_PREFIX: &str = "redisson_lock_timeout";

/// Redisson's `prefixName`: `prefix:{name}`, or `prefix:name` when the name
/// already contains `{` (it then carries its own hash tag).
fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName`: `{name}:suffix`, or `name:suffix` when the name
/// already contains `{`.
fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The pub/sub channel of a lock (RLock, fair lock): `redisson_lock__channel:{name}`.
pub fn channel_name(name: &str) -> String {
    prefix_name(CHANNEL_PREFIX, name)
}

/// The pub/sub channel of a read-write lock: `redisson_rwlock:{name}`.
pub fn rwlock_channel_name(name: &str) -> String {
    prefix_name(RWLOCK_CHANNEL_PREFIX, name)
}

/// The prefix of one reader's per-hold timeout keys:
/// `{name}:<client-id>:<owner-id>:rwlock_timeout` (hold `n` is `...:n`).
pub fn read_timeout_prefix(name: &str, field: &str) -> String {
    format!("{}:rwlock_timeout", suffix_name(name, field))
}

/// What a read-write lock's scripts put in front of a field to find its
/// timeout keys: `{name}`, or `name` when the name has its own `{`.
pub fn read_key_prefix(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// A fenced lock's token counter: `redisson_lock_token:{name}` (never expires).
pub fn token_name(name: &str) -> String {
    prefix_name(TOKEN_PREFIX, name)
}

/// The highest fencing token that has written `key` through
/// [`crate::FencedGuard::set_if_newest`]: `redisson_fence:{key}`, in the
/// key's cluster slot.
pub fn fence_name(key: &str) -> String {
    prefix_name(FENCE_PREFIX, key)
}

/// A fair lock's waiting queue: `redisson_lock_queue:{name}` (a list).
pub fn fair_queue_name(name: &str) -> String {
    prefix_name(FAIR_QUEUE_PREFIX, name)
}

/// A fair lock's waiter deadlines: `redisson_lock_timeout:{name}` (a sorted set).
pub fn fair_timeout_name(name: &str) -> String {
    prefix_name(FAIR_TIMEOUT_PREFIX, name)
}

/// The channel one fair-lock waiter listens on:
/// `redisson_lock__channel:{name}:<client-id>:<owner-id>`.
pub fn fair_waiter_channel(name: &str, field: &str) -> String {
    format!("{}:{field}", channel_name(name))
}

/// The unlock latch key of one unlock request:
/// `redisson_unlock_latch:{name}:<request-id>`.
pub fn latch_name(name: &str, request_id: &str) -> String {
    format!("{}:{request_id}", prefix_name(LATCH_PREFIX, name))
}

/// The latch key of one semaphore or count-down latch write, which records
/// its outcome so that a replay returns it instead of applying it twice:
/// `redisson_request_latch:{name}:<request-id>` (this crate's; Redisson's
/// own objects of these kinds have no such latch).
pub fn request_latch_name(name: &str, request_id: &str) -> String {
    format!("{}:{request_id}", prefix_name(REQUEST_LATCH_PREFIX, name))
}

/// The pub/sub channel of a semaphore (both kinds): `redisson_sc:{name}`.
pub fn semaphore_channel_name(name: &str) -> String {
    prefix_name(SEMAPHORE_CHANNEL_PREFIX, name)
}

/// The lease deadlines of a permit-expirable semaphore:
/// `{name}:timeout` (a sorted set of permit ids).
pub fn permit_timeout_name(name: &str) -> String {
    suffix_name(name, "timeout")
}

/// The pub/sub channel of a count-down latch:
/// `redisson_countdownlatch__channel__{name}`. Redisson adds the braces even
/// when the name has its own hash tag, so such a channel lands in another
/// cluster slot than the latch (see [`crate::RCountDownLatch`]).
pub fn count_down_latch_channel_name(name: &str) -> String {
    format!("{COUNT_DOWN_CHANNEL_PREFIX}{{{name}}}")
}

/// The hash field of an owner: `<client-id>:<owner-id>`.
pub fn field_name(client_id: &str, owner: crate::OwnerId) -> String {
    format!("{client_id}:{owner}")
}

/// The cluster hash slot of a key (CRC16 of the key or of its `{hash tag}`,
/// mod 16384). Every key of one lock shares the lock name's slot.
///
/// ```
/// use redisson_lock::naming::{channel_name, slot};
/// assert_eq!(slot("orders"), slot(&channel_name("orders")));
/// assert_eq!(slot("{user1}:cart"), slot("{user1}:profile"));
/// ```
pub fn slot(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

/// Checks that a lock name is usable: not empty, and, where multi-key
/// commands must stay in one hash slot (`slot_grouped`: a cluster), every key
/// a script touches lands in the lock's slot. Redisson accepts a name such as
/// `a{`, `job{}` or `{}` everywhere; it works on a single server and Sentinel,
/// so it is accepted there too, but a cluster would refuse its scripts with
/// CROSSSLOT.
pub(crate) fn validate_lock_name(name: &str, slot_grouped: bool) -> Result<()> {
    validate_name(
        name,
        slot_grouped,
        "lock",
        &[channel_name(name), latch_name(name, "0")],
    )
}

/// Checks the name of any object (`what`) whose scripts also touch `keys`:
/// see [`validate_lock_name`].
pub(crate) fn validate_name(
    name: &str,
    slot_grouped: bool,
    what: &str,
    keys: &[String],
) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(format!("{what} name is empty")));
    }
    if !slot_grouped {
        return Ok(());
    }
    let own_slot = slot(name);
    if let Some(key) = keys.iter().find(|key| slot(key) != own_slot) {
        return Err(Error::InvalidArgument(format!(
            "{what} name `{name}`: on a cluster its key `{key}` would land in another slot \
             than the {what} (CROSSSLOT); Redisson derives that key the same way, so such \
             a name cannot work on a cluster from either side"
        )));
    }
    Ok(())
}

/// Two keys in different hash slots that the minimal ACL allows, for the
/// connect-time probe that detects a cluster behind a proxy.
pub(crate) const CROSS_SLOT_PROBE: [&str; 2] = [
    "redisson_lock__channel:{probe-1}",
    "redisson_lock__channel:{probe-2}",
];

/// A Redis URL with its password hidden: `redis://user:***@host:port`, and
/// the value of any query parameter whose name contains `password` too
/// (fred's `sentinelPassword`).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let (authority_end, _) = rest
        .char_indices()
        .find(|(_, c)| matches!(c, '/' | '?' | '#'))
        .unwrap_or((rest.len(), ' '));
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("***@{host}"),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) if k.to_ascii_lowercase().contains("password") => {
                        format!("{k}=***")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{authority}{tail}"),
        None => format!("{authority}{tail}"),
    }
}

/// `text` with every secret of `url` (its password, its query passwords, in
/// raw and percent-decoded form) replaced by `***`, for messages of other
/// libraries that may quote the URL.
pub(crate) fn redact(text: &str, url: &str) -> String {
    let mut secrets: Vec<String> = vec![];
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            secrets.push(
                userinfo
                    .split_once(':')
                    .map_or(userinfo, |(_, p)| p)
                    .to_string(),
            );
        }
    }
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&') {
            if let Some((k, v)) = pair.split_once('=') {
                if k.to_ascii_lowercase().contains("password") {
                    secrets.push(v.to_string());
                }
            }
        }
    }
    let mut out = text.replace(url, &redact_url(url));
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(secret.as_str(), "***");
        // Passwords with reserved characters are written escaped in a URL.
        if let Ok(decoded) = percent_encoding::percent_decode_str(secret).decode_utf8() {
            if !decoded.is_empty() {
                out = out.replace(decoded.as_ref(), "***");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_and_fair_names_follow_redisson() {
        let field = "8743c9c0-0795-4907-87fd-6c719a6b4586:1";
        assert_eq!(rwlock_channel_name("doc"), "redisson_rwlock:{doc}");
        assert_eq!(
            read_timeout_prefix("doc", field),
            format!("{{doc}}:{field}:rwlock_timeout")
        );
        assert_eq!(
            read_timeout_prefix("a{t}b", field),
            format!("a{{t}}b:{field}:rwlock_timeout")
        );
        assert_eq!(read_key_prefix("doc"), "{doc}");
        assert_eq!(read_key_prefix("a{t}b"), "a{t}b");
        assert_eq!(fair_queue_name("q"), "redisson_lock_queue:{q}");
        assert_eq!(fair_timeout_name("q"), "redisson_lock_timeout:{q}");
        assert_eq!(
            fair_waiter_channel("q", field),
            format!("redisson_lock__channel:{{q}}:{field}")
        );
        // Every key of one lock shares its slot.
        for key in [
            rwlock_channel_name("doc"),
            read_timeout_prefix("doc", field),
            fair_queue_name("doc"),
            fair_timeout_name("doc"),
            fair_waiter_channel("doc", field),
        ] {
            assert_eq!(slot(&key), slot("doc"), "{key}");
        }
    }

    #[test]
    fn names_follow_redisson() {
        assert_eq!(
            channel_name("orders:42"),
            "redisson_lock__channel:{orders:42}"
        );
        assert_eq!(channel_name("a{t}b"), "redisson_lock__channel:a{t}b");
        assert_eq!(latch_name("x", "00ff"), "redisson_unlock_latch:{x}:00ff");
        assert_eq!(
            field_name(
                "8743c9c0-0795-4907-87fd-6c719a6b4586",
                crate::OwnerId::new(1).unwrap()
            ),
            "8743c9c0-0795-4907-87fd-6c719a6b4586:1"
        );
    }

    #[test]
    fn odd_names_are_refused_only_where_they_cannot_work() {
        for slot_grouped in [false, true] {
            assert!(validate_lock_name("", slot_grouped).is_err());
            assert!(validate_lock_name("a{t}b", slot_grouped).is_ok());
            assert!(validate_lock_name("orders:42", slot_grouped).is_ok());
            assert!(validate_lock_name("ключ", slot_grouped).is_ok());
        }
        for odd in ["a{", "a{}b", "job{}", "{}"] {
            assert!(validate_lock_name(odd, false).is_ok(), "{odd}");
            assert!(validate_lock_name(odd, true).is_err(), "{odd}");
        }
        assert_ne!(slot(CROSS_SLOT_PROBE[0]), slot(CROSS_SLOT_PROBE[1]));
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://app:s3cret@10.0.0.1:6379/2"),
            "redis://app:***@10.0.0.1:6379/2"
        );
        assert_eq!(redact_url("redis://:s3cret@h:1"), "redis://:***@h:1");
        assert_eq!(redact_url("rediss://s3cret@h"), "rediss://***@h");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(
            redact_url("redis-sentinel://h:1?sentinelServiceName=m&sentinelPassword=x@y&node=h:2"),
            "redis-sentinel://h:1?sentinelServiceName=m&sentinelPassword=***&node=h:2"
        );
        let url = "redis://app:p%40ss@h:1";
        assert_eq!(
            redact("cannot use redis://app:p%40ss@h:1 (auth p@ss)", url),
            "cannot use redis://app:***@h:1 (auth ***)"
        );
    }
}
