//! [`LockGuard`]: proof of one hold, released by `unlock().await` or on drop.

use std::sync::Arc;

use crate::engine::hold::Hold;
use crate::engine::lease::LostSignal;
use crate::error::Result;
use crate::{OwnerId, RLock};

/// What an unlock left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlocked {
    /// The last hold was released: the lock is free and waiters were told.
    Released,
    /// The owner still holds the lock reentrantly (the hold count went down by one).
    StillHeld,
}

/// One hold on a lock. Release it with [`LockGuard::unlock`], which reports
/// errors; dropping the guard instead releases it in the background.
///
/// Code that needs to take the lock again while holding it (a function that
/// holds the lock calls another that takes it) runs inside
/// [`LockGuard::scope`]: there, acquiring the same lock re-enters this hold
/// and raises the hold count on Redis, as a nested `lock()` in one Java
/// thread does. The lock is free once every guard is released.
///
/// ```no_run
/// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
/// let outer = lock.lock().await?;
/// outer
///     .scope(async {
///         let inner = lock.lock().await?; // re-enters: hold count 2
///         assert_eq!(inner.hold_count().await?, 2);
///         inner.unlock().await
///     })
///     .await?;
/// outer.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    lock: RLock,
    hold: Arc<Hold>,
    watchdog: bool,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(lock: RLock, hold: Arc<Hold>, watchdog: bool) -> Self {
        LockGuard {
            lock,
            hold,
            watchdog,
            released: false,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> OwnerId {
        self.hold.owner
    }

    /// The hash field of the owner on Redis: `<client-id>:<owner-id>`.
    pub fn field(&self) -> String {
        self.hold.field(&self.lock.client.id)
    }

    /// Runs `work` inside this hold's scope: an acquisition of the same lock
    /// (through the same client) made by `work` re-enters this hold instead
    /// of waiting for it. Scopes nest, and they follow the future they wrap:
    /// a task spawned inside starts outside, and a future joined with the
    /// scoped one is not in it.
    ///
    /// Futures that `work` polls concurrently (a `join!` inside the scope)
    /// all act for this hold's owner, as code inside one Java thread's
    /// critical section would; run them outside the scope to make them
    /// exclude each other.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `work`; the scope holds nothing of
    /// its own.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// async fn audit(lock: &redisson_lock::RLock) -> redisson_lock::Result<()> {
    ///     let guard = lock.lock().await?; // re-enters when called inside a scope
    ///     guard.unlock().await.map(drop)
    /// }
    /// let guard = lock.lock().await?;
    /// guard.scope(audit(&lock)).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn scope<F: std::future::Future>(
        &self,
        work: F,
    ) -> impl std::future::Future<Output = F::Output> {
        crate::engine::reentry::enter(
            self.lock.client.id.clone(),
            self.hold.name.clone(),
            self.hold.owner,
            work,
        )
    }

    /// How many times this guard's owner holds the lock, as Redis counts it
    /// (`HGET`): 1 for a single hold, more after re-entries.
    pub async fn hold_count(&self) -> Result<u32> {
        self.lock.hold_count_of(self.hold.owner).await
    }

    /// True when the watchdog renews this hold (no explicit lease was given).
    pub fn is_renewed(&self) -> bool {
        self.watchdog
    }

    /// True once the lock is known lost or its lease deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.hold.lease.is_lost()
    }

    /// Completes when the lock is lost. See [`LostSignal`].
    pub async fn lost(&self) {
        self.lost_signal().lost().await
    }

    /// A `'static` handle on the lost signal, to move into another task.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::new(self.hold.clone())
    }

    /// Releases this hold. The last release of a lock deletes it and publishes
    /// the unlock message. The release runs to completion even if this future
    /// is dropped (a timeout around it, say).
    ///
    /// Fails with [`crate::Error::LockLost`] if the lock was lost meanwhile, or
    /// [`crate::Error::NotHeld`] if Redis says this owner no longer holds it.
    /// If Redis counts more holds for this owner than the client recorded (an
    /// acquire whose outcome could not be resolved), the last release returns
    /// [`Unlocked::StillHeld`] and gives those back in the background.
    pub async fn unlock(mut self) -> Result<Unlocked> {
        self.released = true;
        self.lock.release(&self.hold.clone(), self.watchdog).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.hold.is_retired() {
            // Nothing left to release (the client's shutdown released it).
            return;
        }
        let (lock, hold, watchdog) = (self.lock.clone(), self.hold.clone(), self.watchdog);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                // Counted before the spawn, so a shutdown waits for it.
                let busy = lock.client.lifecycle.track();
                runtime.spawn(async move {
                    match lock.release(&hold, watchdog).await {
                        Ok(_) | Err(crate::Error::LockLost { .. } | crate::Error::Shutdown) => {}
                        Err(e) => {
                            tracing::warn!(lock = %hold.name, error = %e, "background unlock of a dropped guard failed")
                        }
                    }
                    drop(busy);
                });
            }
            // No runtime to talk to Redis: stop renewing so the lease expires.
            Err(_) => lock.forget(&hold, watchdog),
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("field", &self.field())
            .field("renewed", &self.watchdog)
            .field("lost", &self.is_lost())
            .finish()
    }
}
