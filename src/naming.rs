//! Redis key and channel names, exactly as Redisson derives them from a lock name.

use crate::error::{Error, Result};

/// Prefix of the channel on which unlocks are announced.
const CHANNEL_PREFIX: &str = "redisson_lock__channel";
/// Prefix of the per-request unlock latch key (Redisson 3.24+).
const LATCH_PREFIX: &str = "redisson_unlock_latch";

/// Redisson's `prefixName`: `prefix:{name}`, or `prefix:name` when the name
/// already contains `{` (it then carries its own hash tag).
fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The pub/sub channel of a lock: `redisson_lock__channel:{name}`.
pub fn channel_name(name: &str) -> String {
    prefix_name(CHANNEL_PREFIX, name)
}

/// The unlock latch key of one unlock request:
/// `redisson_unlock_latch:{name}:<request-id>`.
pub fn latch_name(name: &str, request_id: &str) -> String {
    format!("{}:{request_id}", prefix_name(LATCH_PREFIX, name))
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

/// Checks that a lock name is usable: not empty, and every key a script touches
/// lands in the lock's cluster slot. Redisson does not check the latter, so a
/// name such as `a{` or `a{}b` fails there only on a cluster, with CROSSSLOT.
pub(crate) fn validate_lock_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument("lock name is empty".into()));
    }
    let lock_slot = slot(name);
    if slot(&channel_name(name)) != lock_slot || slot(&latch_name(name, "0")) != lock_slot {
        return Err(Error::InvalidArgument(format!(
            "lock name `{name}` has a `{{` but no usable hash tag, so its channel and \
             latch keys would land in other cluster slots than the lock"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn odd_names_are_refused() {
        assert!(validate_lock_name("").is_err());
        assert!(validate_lock_name("a{").is_err());
        assert!(validate_lock_name("a{}b").is_err());
        assert!(validate_lock_name("a{t}b").is_ok());
        assert!(validate_lock_name("orders:42").is_ok());
        assert!(validate_lock_name("ключ").is_ok());
    }
}
