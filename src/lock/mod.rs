//! The public lock objects, one file each with its guards, and the value
//! types they share. Each object is a thin handle on the engine's `RawLock`
//! plus a `LockKind` that tells the engine its scripts, keys and channel.

pub(crate) mod fair;
pub(crate) mod guard;
pub(crate) mod read_write;
pub(crate) mod rlock;

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
pub struct Holder {
    /// Id of the client (Rust or JVM) that holds the lock.
    pub client_id: String,
    /// Owner within that client: an owner id here, a thread id on the JVM.
    pub owner: String,
    /// Reentrant hold count.
    pub hold_count: i64,
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
