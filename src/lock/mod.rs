//! The public lock objects and the value types they share. [`Lock<K>`](handle::Lock)
//! is the handle every lock kind is (lock_api-style: the operations once,
//! the protocol in the kind); each kind's file (`rlock.rs`, `fair.rs`,
//! `read_write.rs`) holds its alias, its `LockKind` for the engine (scripts,
//! keys, channel) and what only it has. One guard, [`LockGuard`], for all.

pub(crate) mod acquire;
pub(crate) mod fair;
pub(crate) mod fenced;
pub(crate) mod group;
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod multi;
pub(crate) mod non_reentrant;
pub(crate) mod read_write;
pub(crate) mod rlock;
pub(crate) mod spin;

use std::time::Duration;

pub use guard::LockGuard;

/// What an unlock left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlocked {
    /// The last hold was released: the lock is free and waiters were told.
    Released,
    /// The owner still holds the lock reentrantly (the hold count went down by one).
    StillHeld,
}

/// One holder of a lock, decoded from its hash field `<client-id>:<owner-id>`.
/// Holders of JVM Redisson clients decode the same way (owner = thread id).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Holder {
    /// Id of the client (Rust or JVM) that holds the lock.
    pub client_id: String,
    /// Owner within that client: an owner id here, a thread id on the JVM.
    pub owner: String,
    /// Reentrant hold count.
    pub hold_count: i64,
    /// Whether `client_id` is the id of the client that read the lock
    /// ([`crate::RedissonClient::id`]): the hold is this process's own.
    pub this_client: bool,
}

impl Holder {
    /// Decodes `<client-id>:<owner-id>` (without the write lock's `:write`)
    /// and its hold count, as read by the client `reader_id`.
    pub(crate) fn from_field(field: &str, count: &str, reader_id: &str) -> Option<Holder> {
        let (client_id, owner) = field.rsplit_once(':')?;
        Some(Holder {
            client_id: client_id.to_string(),
            owner: owner.to_string(),
            hold_count: count.trim().parse().unwrap_or(0),
            this_client: client_id == reader_id,
        })
    }
}

/// A lock's remaining time to live, as `PTTL` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// No such key: the lock is free.
    Absent,
    /// The key exists without a TTL (not written by a lock client).
    Persistent,
    /// The key expires after this long unless renewed.
    Expires(Duration),
}

#[cfg(test)]
mod tests {
    use super::handle::sealed::Sealed;

    /// Kinds are told apart by name in logs and metrics.
    #[test]
    fn every_kind_has_its_own_name() {
        let kinds = [
            super::rlock::Reentrant::describe().0,
            super::fair::Fair::describe().0,
            super::read_write::Read::describe().0,
            super::read_write::Write::describe().0,
            super::fenced::Fenced::describe().0,
            super::spin::Spin::describe().0,
            super::non_reentrant::NonReentrant::describe().0,
            super::non_reentrant::NonReentrantFair::describe().0,
            &super::group::GROUP,
        ];
        let names: std::collections::BTreeSet<&str> = kinds.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), kinds.len());
    }
}
