//! Owner identity: the `<owner-id>` half of a lock field `<client-id>:<owner-id>`.
//!
//! Redisson keys reentrancy by Java thread id. A tokio task is not a thread:
//! one task can poll several futures at once (`join!`, `select!`,
//! `FuturesUnordered`), so the task cannot be the owner, or two of those
//! futures would share one hold and both run their critical sections at
//! once. Instead every acquisition gets an owner of its own, and re-entry is
//! scoped: see [`crate::LockGuard::scope`].
//!
//! Owner ids are Java `long`s on the wire (Redisson's `threadId`), so every id
//! is in `0..=i64::MAX`. The range is split in two so that ids the crate hands
//! out never collide with ids chosen by the caller.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// The first id of the range the crate allocates ([`OwnerId::unique`]);
/// explicit ids ([`OwnerId::new`]) are below it.
const UNIQUE_BASE: u64 = 1 << 62;

static NEXT_UNIQUE: AtomicU64 = AtomicU64::new(UNIQUE_BASE);

/// Identifies who holds a lock within one client: the equivalent of
/// Redisson's `threadId`, written in decimal after the client id in the
/// lock's hash field.
///
/// Ids come from two ranges that never overlap:
///
/// * `0 ..= OwnerId::MAX_EXPLICIT` (below 2^62): chosen by the caller with
///   [`OwnerId::new`], for example to mirror a Java thread id, or to take a
///   lock in one task and release it in another.
/// * `2^62 ..= i64::MAX`: handed out by [`OwnerId::unique`], one new id per
///   call. Every acquisition outside a [`crate::LockGuard::scope`] uses one.
///
/// ```
/// use redisson_lock::OwnerId;
///
/// let worker = OwnerId::new(42)?;
/// assert_eq!(worker.to_string(), "42");
/// assert!(OwnerId::new(1 << 62).is_err()); // reserved for unique ids
/// assert_ne!(OwnerId::unique(), OwnerId::unique());
/// # Ok::<(), redisson_lock::Error>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(u64);

impl OwnerId {
    /// The largest id [`OwnerId::new`] accepts: 2^62 - 1.
    pub const MAX_EXPLICIT: u64 = UNIQUE_BASE - 1;

    /// An explicit owner id, as Redisson's `lockAsync(threadId)` takes one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `id` is above [`OwnerId::MAX_EXPLICIT`]:
    /// larger ids are reserved for [`OwnerId::unique`] (and above `i64::MAX`
    /// a Java client could not read them).
    pub fn new(id: u64) -> Result<Self> {
        if id > Self::MAX_EXPLICIT {
            return Err(Error::InvalidArgument(format!(
                "explicit owner ids must be at most {} (2^62 - 1), got {id}; \
                 larger ids are allocated by OwnerId::unique",
                Self::MAX_EXPLICIT
            )));
        }
        Ok(OwnerId(id))
    }

    /// A new owner id, never returned before in this process and never equal
    /// to an explicit one.
    pub fn unique() -> Self {
        // 2^62 ids: at a billion a second, that lasts 146 years.
        OwnerId(NEXT_UNIQUE.fetch_add(1, Ordering::Relaxed))
    }

    /// The numeric id, as written in the lock field.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// An id read from a lock's field (another holder's, of any range).
    pub(crate) const fn read(id: u64) -> Self {
        OwnerId(id)
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_and_unique_ranges_never_meet() {
        assert_eq!(OwnerId::new(0).unwrap().get(), 0);
        assert_eq!(
            OwnerId::new(OwnerId::MAX_EXPLICIT).unwrap().get(),
            (1 << 62) - 1
        );
        assert!(matches!(
            OwnerId::new(1 << 62),
            Err(Error::InvalidArgument(_))
        ));
        assert!(OwnerId::new(u64::MAX).is_err());
        let (a, b) = (OwnerId::unique(), OwnerId::unique());
        assert_ne!(a, b);
        assert!(a.get() > OwnerId::MAX_EXPLICIT && a.get() <= i64::MAX as u64);
    }
}
