//! [`MultiLock`]: Redisson's `RedissonMultiLock` and RedLock, blocking, and
//! [`GroupLock`]: its group multi lock; [`MultiGuard`], what a multi lock's
//! acquisition holds.

use std::sync::Arc;
use std::time::Duration;

use super::guard::Guard;
use super::runtime::Shared;
use crate::error::Result;
use crate::lock::Unlocked;

/// A multi lock (every member) or a RedLock (a majority), blocking:
/// [`crate::RMultiLock`] for synchronous code. Cheap to clone.
///
/// ```no_run
/// # fn demo(client: redisson_lock::blocking::RedissonClient) -> redisson_lock::Result<()> {
/// let transfer = client.multi_lock(&["account:1", "account:2"])?;
/// let both = transfer.lock()?; // every member, or none
/// // ... debit one account, credit the other ...
/// both.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    inner: crate::RMultiLock,
    shared: Arc<Shared>,
}

impl MultiLock {
    pub(crate) fn new(inner: crate::RMultiLock, shared: Arc<Shared>) -> Self {
        MultiLock { inner, shared }
    }

    fn guard(&self, inner: crate::MultiGuard) -> MultiGuard {
        MultiGuard {
            inner: Some(inner),
            shared: self.shared.clone(),
        }
    }

    /// The async multi lock, for code inside a runtime.
    pub fn as_async(&self) -> &crate::RMultiLock {
        &self.inner
    }

    /// Acquires it, waiting as long as it takes: [`crate::RMultiLock::lock`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::RMultiLock::lock`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn lock(&self) -> Result<MultiGuard> {
        let held = self.shared.block_on(self.inner.lock())??;
        Ok(self.guard(held))
    }

    /// Acquires it if it is free now: [`crate::RMultiLock::try_lock`].
    ///
    /// # Errors
    ///
    /// As [`MultiLock::lock`].
    pub fn try_lock(&self) -> Result<Option<MultiGuard>> {
        let held = self.shared.block_on(self.inner.try_lock())??;
        Ok(held.map(|held| self.guard(held)))
    }

    /// Acquires it, waiting at most `wait`: [`crate::RMultiLock::try_lock_for`].
    ///
    /// # Errors
    ///
    /// As [`MultiLock::lock`].
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<MultiGuard>> {
        let held = self.shared.block_on(self.inner.try_lock_for(wait))??;
        Ok(held.map(|held| self.guard(held)))
    }
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::MultiLock")
            .field(&self.inner)
            .finish()
    }
}

/// The holds of a multi lock, blocking: [`crate::MultiGuard`]. Released on
/// drop (waiting at most one command timeout, then in the background).
#[must_use = "dropping the guard releases every member at once"]
pub struct MultiGuard {
    inner: Option<crate::MultiGuard>,
    shared: Arc<Shared>,
}

impl MultiGuard {
    fn held(&self) -> &crate::MultiGuard {
        self.inner.as_ref().expect("taken only by unlock and drop")
    }

    /// The members' holds.
    pub fn guards(&self) -> &[crate::LockGuard] {
        self.held().guards()
    }

    /// True once the multi lock is lost ([`crate::MultiGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.held().is_lost()
    }

    /// Releases every member: [`crate::MultiGuard::unlock`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::MultiGuard::unlock`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn unlock(mut self) -> Result<Unlocked> {
        let held = self.inner.take().expect("taken only by unlock and drop");
        self.shared.block_on(held.unlock())?
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        if let Some(held) = self.inner.take() {
            self.shared.release_dropped(held, crate::MultiGuard::unlock);
        }
    }
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::MultiGuard")
            .field(&self.inner)
            .finish()
    }
}

/// Redisson's group multi lock (`getMultiLock(group, values)`), blocking:
/// [`crate::RGroupLock`] for synchronous code, with the calling thread as
/// the owner. Cheap to clone.
#[derive(Clone)]
pub struct GroupLock {
    inner: crate::RGroupLock,
    shared: Arc<Shared>,
}

impl GroupLock {
    pub(crate) fn new(inner: crate::RGroupLock, shared: Arc<Shared>) -> Self {
        GroupLock { inner, shared }
    }

    /// The async group lock, for code inside a runtime.
    pub fn as_async(&self) -> &crate::RGroupLock {
        &self.inner
    }

    /// Acquires every value, waiting as long as it takes:
    /// [`crate::RGroupLock::lock`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::RGroupLock::lock`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn lock(&self) -> Result<Guard<crate::LockGuard>> {
        let held = self.shared.block_on(self.inner.lock())??;
        Ok(Guard::new(held, self.shared.clone()))
    }

    /// Acquires every value, waiting at most `wait` (zero: one try).
    ///
    /// # Errors
    ///
    /// As [`GroupLock::lock`].
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<Guard<crate::LockGuard>>> {
        let held = self.shared.block_on(self.inner.try_lock_for(wait))??;
        Ok(held.map(|held| Guard::new(held, self.shared.clone())))
    }

    /// Releases one of this thread's holds: [`crate::RGroupLock::unlock`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::RGroupLock::unlock`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn unlock(&self) -> Result<Unlocked> {
        self.shared.block_on(self.inner.unlock())?
    }

    /// Whether this thread holds every value: [`crate::RGroupLock::is_held`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::RGroupLock::is_held`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn is_held(&self) -> Result<bool> {
        self.shared.block_on(self.inner.is_held())?
    }

    /// Whether any value is held, by anyone: [`crate::RGroupLock::is_locked`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::RGroupLock::is_locked`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn is_locked(&self) -> Result<bool> {
        self.shared.block_on(self.inner.is_locked())?
    }
}

impl std::fmt::Debug for GroupLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::GroupLock")
            .field(&self.inner)
            .finish()
    }
}
