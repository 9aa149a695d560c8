//! Owner identity: the `<owner-id>` half of a lock field `<client-id>:<owner-id>`.
//!
//! Redisson keys reentrancy by Java thread id. Here the default owner is the
//! current tokio task, so a nested `lock()` in the same task re-enters, as a Java
//! thread does; code running outside a task uses its OS thread instead.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Thread-based owner ids are taken from this range so they never collide
/// with tokio task ids (which count up from 1) and stay a positive Java `long`.
const THREAD_OWNER_BASE: u64 = 1 << 62;

static NEXT_THREAD_OWNER: AtomicU64 = AtomicU64::new(THREAD_OWNER_BASE);

thread_local! {
    static THREAD_OWNER: u64 = NEXT_THREAD_OWNER.fetch_add(1, Ordering::Relaxed);
}

/// Identifies who holds a lock within one client: the equivalent of
/// Redisson's `threadId`.
///
/// ```
/// use redisson_lock::OwnerId;
/// // An explicit owner lets one task take a lock and another release it,
/// // as Redisson's `lockAsync(threadId)` does.
/// let owner = OwnerId::new(42);
/// assert_eq!(owner.get(), 42);
/// assert_eq!(owner.to_string(), "42");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(u64);

impl OwnerId {
    /// An explicit owner id, written in decimal in the lock field.
    pub const fn new(id: u64) -> Self {
        OwnerId(id)
    }

    /// The numeric id.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The owner of the running code: the current tokio task, or the current
    /// OS thread when not inside a task.
    pub fn current() -> Self {
        if let Some(id) = tokio::task::try_id() {
            // tokio prints its task id as the bare u64.
            if let Ok(id) = id.to_string().parse::<u64>() {
                return OwnerId(id);
            }
        }
        OwnerId(THREAD_OWNER.with(|id| *id))
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
    fn thread_owner_is_stable_and_distinct_per_thread() {
        let here = OwnerId::current();
        assert_eq!(here, OwnerId::current());
        assert!(here.get() >= THREAD_OWNER_BASE);
        let other = std::thread::spawn(OwnerId::current).join().unwrap();
        assert_ne!(here, other);
    }

    #[tokio::test]
    async fn task_owner_differs_per_task() {
        let a = tokio::spawn(async { (OwnerId::current(), OwnerId::current()) })
            .await
            .unwrap();
        let b = tokio::spawn(async { OwnerId::current() }).await.unwrap();
        assert_eq!(a.0, a.1);
        assert_ne!(a.0, b);
        assert!(a.0.get() < THREAD_OWNER_BASE);
    }
}
