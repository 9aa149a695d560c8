//! [`Lock`]: the blocking handle every lock kind is, over the async
//! [`crate::Lock`] of the same kind; [`ReadWriteLock`] for its two halves.

use std::sync::Arc;
use std::time::Duration;

use super::guard::{AsyncGuard, Guard};
use super::runtime::Shared;
use crate::error::Result;
use crate::kind::{
    Fair, Fenced, Kind, NonReentrant, NonReentrantFair, Read, Reentrant, Spin, Write,
};
use crate::lock::{Holder, Ttl, Unlocked};
use crate::owner::OwnerId;
use crate::RwMode;

/// Redisson's `RLock`, blocking.
pub type RLock = Lock<Reentrant>;
/// Redisson's `RFairLock`, blocking.
pub type FairLock = Lock<Fair>;
/// Redisson's `RFencedLock`, blocking: its guard carries the fencing token.
pub type FencedLock = Lock<Fenced>;
/// Redisson's spin lock, blocking.
pub type SpinLock = Lock<Spin>;
/// Redisson's non-reentrant lock, blocking.
pub type NonReentrantLock = Lock<NonReentrant>;
/// Redisson's non-reentrant fair lock, blocking.
pub type NonReentrantFairLock = Lock<NonReentrantFair>;
/// The read half of a [`ReadWriteLock`].
pub type ReadLock = Lock<Read>;
/// The write half of a [`ReadWriteLock`].
pub type WriteLock = Lock<Write>;

/// A blocking handle on one Redisson lock of kind `K`: [`crate::Lock`] for
/// synchronous code, with the calling thread as the owner, as in Java (a
/// second acquisition on the thread that holds it re-enters; another thread
/// waits), unless [`Guard::scope`] or [`Lock::with_owner`] says otherwise.
/// Cheap to clone.
///
/// ```no_run
/// # fn demo(client: redisson_lock::blocking::RedissonClient) -> redisson_lock::Result<()> {
/// let lock = client.lock("invoices:export")?;
/// let guard = lock.lock()?; // waits, woken by the unlock message
/// // ... export ...
/// guard.unlock()?;
/// # Ok(()) }
/// ```
pub struct Lock<K: Kind> {
    inner: crate::Lock<K>,
    shared: Arc<Shared>,
}

impl<K: Kind> Clone for Lock<K> {
    fn clone(&self) -> Self {
        Lock {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<K: Kind> Lock<K>
where
    K::Guard: AsyncGuard,
{
    pub(crate) fn new(inner: crate::Lock<K>, shared: Arc<Shared>) -> Self {
        Lock { inner, shared }
    }

    fn guard(&self, inner: K::Guard) -> Guard<K::Guard> {
        Guard::new(inner, self.shared.clone())
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The async handle on the same lock, for code inside a runtime.
    pub fn as_async(&self) -> &crate::Lock<K> {
        &self.inner
    }

    /// The same lock acting for a fixed owner, as [`crate::Lock::with_owner`]
    /// (Redisson's `lock(threadId)`): one thread may acquire and another release.
    pub fn with_owner(&self, owner: OwnerId) -> Self {
        Lock::new(self.inner.with_owner(owner), self.shared.clone())
    }

    /// Acquires the lock, waiting as long as it takes (woken by the unlock
    /// message, Java's or Rust's); the watchdog renews it until released.
    ///
    /// # Errors
    ///
    /// Those of [`crate::Lock::lock`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn lock(&self) -> Result<Guard<K::Guard>> {
        let held = self.shared.block_on(self.inner.lock())??;
        Ok(self.guard(held))
    }

    /// Acquires the lock if it is free now.
    ///
    /// # Errors
    ///
    /// Those of [`crate::Lock::try_lock`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn try_lock(&self) -> Result<Option<Guard<K::Guard>>> {
        let held = self.shared.block_on(self.inner.try_lock())??;
        Ok(held.map(|held| self.guard(held)))
    }

    /// Acquires the lock, waiting at most `wait` for it.
    ///
    /// # Errors
    ///
    /// Those of [`crate::Lock::try_lock_for`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<Guard<K::Guard>>> {
        let held = self.shared.block_on(self.inner.try_lock_for(wait))??;
        Ok(held.map(|held| self.guard(held)))
    }

    /// Acquires with a fixed `lease` (no watchdog: the lock expires after
    /// it), waiting at most `wait` (`None`: as long as it takes).
    ///
    /// # Errors
    ///
    /// Those of [`crate::Acquire`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn try_lock_leased(
        &self,
        wait: Option<Duration>,
        lease: Duration,
    ) -> Result<Option<Guard<K::Guard>>> {
        let held = self.shared.block_on(async {
            let acquire = self.inner.acquire().lease(lease);
            match wait {
                Some(wait) => acquire.wait(wait).await,
                None => acquire.await.map(Some),
            }
        })??;
        Ok(held.map(|held| self.guard(held)))
    }

    /// Runs `work` on this thread under the lock: acquires it (waiting as
    /// long as it takes), runs `work` with the lost signal (this thread
    /// holds the lock, so `work` may take it again), and always releases
    /// it, a panic included (the guard drops while unwinding). A blocking
    /// closure cannot be stopped from outside: check the signal before
    /// writing. [`crate::Lock::run`], for threads.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`]; [`crate::Error::LockLost`] when the lock was lost
    /// before `work` returned (its result is dropped).
    ///
    /// ```no_run
    /// # fn demo(lock: redisson_lock::blocking::RLock) -> redisson_lock::Result<()> {
    /// let posted = lock.run(|lost| {
    ///     let batch = 42; // ... the critical section ...
    ///     if lost.is_lost() {
    ///         return None; // stop before writing
    ///     }
    ///     Some(batch)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn run<T>(&self, work: impl FnOnce(crate::LostSignal) -> T) -> Result<T> {
        let guard = self.lock()?;
        let out = work(guard.lost_signal());
        let lost = guard.is_lost();
        match guard.unlock() {
            Ok(_) if !lost => Ok(out),
            Ok(_) | Err(crate::Error::LockLost { .. }) => Err(crate::Error::LockLost {
                name: self.name().to_string(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Releases one hold of the current owner (this thread, the enclosing
    /// scope's, or the explicit owner of [`Lock::with_owner`]): Java's
    /// `unlock()`, for holds left to the thread by [`Guard::keep`]; a
    /// guard's own hold is better released by [`Guard::unlock`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::Lock::unlock`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn unlock(&self) -> Result<Unlocked> {
        self.shared.block_on(self.inner.unlock())?
    }

    /// Deletes the lock whoever holds it and wakes its waiters (Redisson's
    /// `forceUnlock`); whether there was one.
    ///
    /// # Errors
    ///
    /// Those of [`crate::Lock::force_unlock`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn force_unlock(&self) -> Result<bool> {
        self.shared.block_on(self.inner.force_unlock())?
    }

    /// [`Lock::force_unlock`](Self::force_unlock), only while the holder
    /// `client_id` and `owner` is in the lock (checked in the same script).
    ///
    /// # Errors
    ///
    /// Those of [`crate::Lock::force_unlock_if_held_by`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn force_unlock_if_held_by(&self, client_id: &str, owner: &str) -> Result<bool> {
        self.shared
            .block_on(self.inner.force_unlock_if_held_by(client_id, owner))?
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Connection`], [`crate::Error::Timeout`],
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn is_locked(&self) -> Result<bool> {
        self.shared.block_on(self.inner.is_locked())?
    }

    /// Whether the current owner (this thread, unless a scope or
    /// [`Lock::with_owner`] says otherwise) holds it: Redisson's
    /// `isHeldByCurrentThread`.
    ///
    /// # Errors
    ///
    /// As [`Lock::is_locked`].
    pub fn is_held(&self) -> Result<bool> {
        self.shared.block_on(self.inner.is_held())?
    }

    /// The current owner's hold count (0 when it holds none): Redisson's
    /// `getHoldCount`.
    ///
    /// # Errors
    ///
    /// As [`Lock::is_locked`].
    pub fn hold_count(&self) -> Result<u32> {
        self.shared.block_on(self.inner.hold_count())?
    }

    /// Every holder and its hold count, as Redis records them.
    ///
    /// # Errors
    ///
    /// As [`Lock::is_locked`].
    pub fn holders(&self) -> Result<Vec<Holder>> {
        self.shared.block_on(self.inner.holders())?
    }

    /// The lock's remaining time to live.
    ///
    /// # Errors
    ///
    /// As [`Lock::is_locked`].
    pub fn remaining_ttl(&self) -> Result<Ttl> {
        self.shared.block_on(self.inner.remaining_ttl())?
    }
}

impl<K: Kind> std::fmt::Debug for Lock<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Lock").field(&self.inner).finish()
    }
}

/// Redisson's `RReadWriteLock`, blocking: [`crate::RReadWriteLock`].
///
/// ```no_run
/// # fn demo(client: redisson_lock::blocking::RedissonClient) -> redisson_lock::Result<()> {
/// let prices = client.read_write_lock("prices")?;
/// let reading = prices.read().lock()?; // shared with other readers
/// reading.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    inner: crate::RReadWriteLock,
    shared: Arc<Shared>,
}

impl ReadWriteLock {
    pub(crate) fn new(inner: crate::RReadWriteLock, shared: Arc<Shared>) -> Self {
        ReadWriteLock { inner, shared }
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The read half: shared with other readers.
    pub fn read(&self) -> ReadLock {
        Lock::new(self.inner.read(), self.shared.clone())
    }

    /// The write half: exclusive. Inside a writer's scope, the read half may
    /// also be taken (Redisson's downgrade).
    pub fn write(&self) -> WriteLock {
        Lock::new(self.inner.write(), self.shared.clone())
    }

    /// The same lock acting for a fixed owner.
    pub fn with_owner(&self, owner: OwnerId) -> Self {
        ReadWriteLock::new(self.inner.with_owner(owner), self.shared.clone())
    }

    /// The mode it is held in (`None`: free).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Connection`], [`crate::Error::Timeout`],
    /// [`crate::Error::WrongType`], [`crate::Error::InsideAsyncRuntime`].
    pub fn mode(&self) -> Result<Option<RwMode>> {
        self.shared.block_on(self.inner.mode())?
    }

    /// Whether anyone holds it, in either mode.
    ///
    /// # Errors
    ///
    /// As [`ReadWriteLock::mode`].
    pub fn is_locked(&self) -> Result<bool> {
        self.shared.block_on(self.inner.is_locked())?
    }
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::ReadWriteLock")
            .field(&self.inner)
            .finish()
    }
}
