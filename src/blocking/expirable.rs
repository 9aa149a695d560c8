//! [`ExpirableSemaphore`]: Redisson's `RPermitExpirableSemaphore`, blocking;
//! [`ExpirablePermits`], what an acquisition holds.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use super::runtime::Shared;
use crate::error::Result;
use crate::sync::permit_expirable::PermitId;

/// How permits are held: [`crate::Acquire`]'s choices for expirable permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PermitHold {
    /// Kept alive as a lock is (the watchdog timeout, renewed while held):
    /// what `acquire(n)` does.
    KeptAlive,
    /// For this lease, renewed every third of it on a timer of its own.
    KeptAliveFor(Duration),
    /// For this long, never renewed.
    Fixed(Duration),
    /// Never expiring (Redisson's `acquire(n)`).
    Forever,
}

/// Redisson's `RPermitExpirableSemaphore`, blocking:
/// [`crate::RPermitExpirableSemaphore`] for synchronous code. Cheap to clone.
///
/// ```no_run
/// # fn demo(client: redisson_lock::blocking::RedissonClient) -> redisson_lock::Result<()> {
/// let slots = client.permit_expirable_semaphore("render:slots")?;
/// slots.try_set_permits(4)?;
/// let permit = slots.acquire(1)?; // kept alive while held: back if this process dies
/// // ... render ...
/// permit.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ExpirableSemaphore {
    inner: crate::RPermitExpirableSemaphore,
    shared: Arc<Shared>,
}

impl ExpirableSemaphore {
    pub(crate) fn new(inner: crate::RPermitExpirableSemaphore, shared: Arc<Shared>) -> Self {
        ExpirableSemaphore { inner, shared }
    }

    fn permits(&self, inner: crate::ExpirablePermits) -> ExpirablePermits {
        ExpirablePermits {
            inner: Some(inner),
            shared: self.shared.clone(),
        }
    }

    /// The semaphore's name (its Redis key).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The async handle on the same semaphore.
    pub fn as_async(&self) -> &crate::RPermitExpirableSemaphore {
        &self.inner
    }

    /// Takes `permits`, kept alive while held, waiting as long as it takes:
    /// [`crate::RPermitExpirableSemaphore::acquire`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::RPermitExpirableSemaphore::acquire`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn acquire(&self, permits: u32) -> Result<ExpirablePermits> {
        self.acquire_with(permits, PermitHold::KeptAlive, None)?
            .ok_or_else(unreachable_wait)
    }

    /// Takes `permits` held as `lease` says, waiting at most `wait` (`None`:
    /// as long as it takes; zero: one try).
    ///
    /// # Errors
    ///
    /// As [`ExpirableSemaphore::acquire`].
    pub fn acquire_with(
        &self,
        permits: u32,
        lease: PermitHold,
        wait: Option<Duration>,
    ) -> Result<Option<ExpirablePermits>> {
        let taken = self.shared.block_on(async {
            let acquire = self.inner.acquire(permits);
            let acquire = match lease {
                PermitHold::KeptAlive => acquire.kept_alive(),
                PermitHold::KeptAliveFor(l) => acquire.kept_alive_for(l),
                PermitHold::Fixed(l) => acquire.lease(l),
                PermitHold::Forever => acquire.forever(),
            };
            match wait {
                Some(wait) => acquire.wait(wait).await,
                None => acquire.into_future().await.map(Some),
            }
        })??;
        Ok(taken.map(|taken| self.permits(taken)))
    }

    /// Returns the leased permits `ids`: [`crate::RPermitExpirableSemaphore::release`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::RPermitExpirableSemaphore::release`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn release(&self, ids: &[PermitId]) -> Result<()> {
        self.shared.block_on(self.inner.release(ids))?
    }

    /// Sets the number of permits if the semaphore does not exist yet.
    ///
    /// # Errors
    ///
    /// Those of [`crate::RPermitExpirableSemaphore::try_set_permits`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.shared.block_on(self.inner.try_set_permits(permits))?
    }

    /// Adds `permits` (negative: removes); the new count.
    ///
    /// # Errors
    ///
    /// Those of [`crate::RPermitExpirableSemaphore::add_permits`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn add_permits(&self, permits: i32) -> Result<i64> {
        self.shared.block_on(self.inner.add_permits(permits))?
    }

    /// The permits free now.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Connection`], [`crate::Error::Timeout`],
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn available_permits(&self) -> Result<i64> {
        self.shared.block_on(self.inner.available_permits())?
    }
}

/// An acquisition without a bound returns its permits or an error.
fn unreachable_wait() -> crate::Error {
    crate::Error::redis("an acquisition without a wait bound came back empty")
}

impl std::fmt::Debug for ExpirableSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::ExpirableSemaphore")
            .field(&self.inner)
            .finish()
    }
}

/// Leased permits, blocking: [`crate::ExpirablePermits`]. Released on drop
/// (waiting at most one command timeout, then in the background).
#[must_use = "dropping the permits gives them back at once"]
pub struct ExpirablePermits {
    inner: Option<crate::ExpirablePermits>,
    shared: Arc<Shared>,
}

impl ExpirablePermits {
    fn held(&self) -> &crate::ExpirablePermits {
        self.inner
            .as_ref()
            .expect("taken only by release, forget and drop")
    }

    /// The permits' ids.
    pub fn ids(&self) -> &[PermitId] {
        self.held().ids()
    }

    /// True once the permits are lost (a lease ended, or they were
    /// released by id elsewhere).
    pub fn is_lost(&self) -> bool {
        self.held().is_lost()
    }

    /// True while a renewal failed, and once lost.
    pub fn is_at_risk(&self) -> bool {
        self.held().is_at_risk()
    }

    /// Gives the permits back; how many were still leased.
    ///
    /// # Errors
    ///
    /// Those of [`crate::ExpirablePermits::release`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn release(mut self) -> Result<u32> {
        let held = self
            .inner
            .take()
            .expect("taken only by release, forget and drop");
        self.shared.block_on(held.release())?
    }

    /// Keeps the permits (no longer renewed); their ids, to release later.
    pub fn forget(mut self) -> Vec<PermitId> {
        self.inner
            .take()
            .expect("taken only by release, forget and drop")
            .forget()
    }
}

impl Drop for ExpirablePermits {
    fn drop(&mut self) {
        if let Some(held) = self.inner.take() {
            self.shared
                .release_dropped(held, crate::ExpirablePermits::release);
        }
    }
}

impl std::fmt::Debug for ExpirablePermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::ExpirablePermits")
            .field(&self.inner)
            .finish()
    }
}
