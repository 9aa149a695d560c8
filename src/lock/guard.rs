//! [`LockGuard`]: proof of one hold of any lock ([`crate::RLock`],
//! [`crate::RFairLock`], [`crate::ReadLock`], [`crate::WriteLock`]),
//! released by `unlock().await` or on drop.

use std::future::Future;

use crate::engine::lease::LostSignal;
use crate::engine::raw::Held;
use crate::engine::safety::SafetyLevel;
use crate::error::Result;
use crate::lock::Unlocked;
use crate::owner::OwnerId;

/// One hold on a lock. Release it with [`LockGuard::unlock`], which reports
/// errors; dropping the guard instead releases it in the background (with no
/// tokio runtime around, the hold is only forgotten and its lease expires).
///
/// Code that needs to take the lock again while holding it (a function that
/// holds the lock calls another that takes it) runs inside
/// [`LockGuard::scope`]: there, acquiring the same lock re-enters this hold
/// and raises the hold count on Redis, as a nested `lock()` in one Java
/// thread does (for a read-write lock, a writer's scope may also take the
/// read lock: Redisson's downgrade). The lock is free once every guard is
/// released.
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
    held: Held,
}

impl LockGuard {
    pub(crate) fn new(held: Held) -> Self {
        LockGuard { held }
    }

    /// Leaves the hold in place without a guard: its owner releases it with
    /// [`crate::Lock::unlock`] (the blocking API's Java-style `lock()`).
    #[cfg(feature = "blocking")]
    pub(crate) fn keep(self) {
        self.held.keep();
    }

    /// The client's engine.
    pub(crate) fn engine(&self) -> &crate::engine::Engine {
        self.held.engine()
    }

    /// Puts the hold on `lease` (no longer renewed), if Redis still has it.
    pub(crate) async fn set_lease(&self, lease: std::time::Duration) -> Result<bool> {
        self.held.set_lease(lease).await
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> OwnerId {
        self.held.owner()
    }

    /// The hash field of the owner on Redis: `<client-id>:<owner-id>`
    /// (`...:write` for a write hold).
    pub fn field(&self) -> String {
        self.held.field()
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
    pub fn scope<F: Future>(&self, work: F) -> impl Future<Output = F::Output> {
        self.held.scope(work)
    }

    /// [`LockGuard::scope`] for a closure run on this thread (the blocking API).
    #[cfg(feature = "blocking")]
    pub(crate) fn scope_thread<R>(&self, work: impl FnOnce() -> R) -> R {
        self.held.scope_thread(work)
    }

    /// How many times this guard's owner holds the lock, as Redis counts it
    /// (`HGET`): 1 for a single hold, more after re-entries.
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::Connection`] / [`crate::error::Error::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// let nested = guard.scope(lock.lock()).await?; // re-enters the same hold
    /// println!("orders lock held {} times", guard.hold_count().await?); // 2
    /// nested.unlock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        self.held.hold_count().await
    }

    /// True when the watchdog renews this hold (no explicit lease was given).
    pub fn is_renewed(&self) -> bool {
        self.held.is_renewed()
    }

    /// True once the lock is known lost or its lease deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// What the replicas had confirmed when this hold was acquired: how
    /// many of the replicas a failover could promote, or
    /// [`SafetyLevel::NotChecked`] (a single-server address; a server without
    /// `WAIT` with `checkLockSyncedSlaves` off; an acquisition whose reply
    /// was lost and was read back). `docs/safety.md` measures what each
    /// level survives.
    ///
    /// ```no_run
    /// use redisson_lock::SafetyLevel;
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// if let SafetyLevel::Replicas { acked, promotable } = guard.safety() {
    ///     if acked < promotable {
    ///         eprintln!("payout lock on {acked} of {promotable} replicas: a failover may lose it");
    ///     }
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn safety(&self) -> SafetyLevel {
        self.held.safety()
    }

    /// True while the lock is at risk (its last renewal failed or was not
    /// confirmed by the replicas), and once it is lost. See
    /// [`LostSignal::at_risk`].
    pub fn is_at_risk(&self) -> bool {
        self.held.is_at_risk()
    }

    /// Completes when the lock is at risk or lost. See [`LostSignal::at_risk`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     () = async { /* migrate the next batch of accounts */ } => {}
    ///     () = guard.at_risk() => eprintln!("renewal failing: finish this batch, start no other"),
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn at_risk(&self) {
        self.lost_signal().at_risk().await
    }

    /// Completes when the lock is lost. See [`LostSignal`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// let rebuild = async { /* ... rebuild the search index ... */ };
    /// tokio::select! {
    ///     () = rebuild => { guard.unlock().await?; }
    ///     () = guard.lost() => eprintln!("index lock lost: discard the half-built index"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.lost_signal().lost().await
    }

    /// A `'static` handle on the lost signal, to move into another task.
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// Releases this hold. The last release of a lock deletes it and publishes
    /// the unlock message.
    ///
    /// If Redis counts more holds for this owner than the client recorded (an
    /// acquire whose outcome could not be resolved), the last release returns
    /// [`Unlocked::StillHeld`] and gives those back in the background.
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::LockLost`] if the lock was lost meanwhile (the unlock
    /// script still ran: it touches only this owner's field);
    /// [`crate::error::Error::NotHeld`] if Redis says this owner no longer holds it;
    /// [`crate::error::Error::Shutdown`] if the client's shutdown released it.
    ///
    /// # Cancel safety
    ///
    /// The release runs to completion even if this future is dropped (a
    /// timeout around it, say), replayed through its unlock latch if needed,
    /// so the hold is released exactly once.
    ///
    /// ```no_run
    /// use redisson_lock::{Error, Unlocked};
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// // ... post the payroll batch ...
    /// match guard.unlock().await {
    ///     Ok(Unlocked::Released) => {}  // free: a waiter was woken
    ///     Ok(Unlocked::StillHeld) => {} // an outer hold of the same owner remains
    ///     Err(Error::LockLost { .. }) => eprintln!("payroll lock expired before the end"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn unlock(self) -> Result<Unlocked> {
        self.held.unlock().await
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("field", &self.field())
            .field("renewed", &self.is_renewed())
            .field("safety", &self.safety())
            .field("at_risk", &self.is_at_risk())
            .field("lost", &self.is_lost())
            .finish()
    }
}
