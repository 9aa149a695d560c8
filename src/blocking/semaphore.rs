//! [`Semaphore`]: Redisson's `RSemaphore`, blocking; [`Permits`], what an
//! acquisition holds.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use super::runtime::Shared;
use crate::error::Result;

/// Redisson's `RSemaphore`, blocking: [`crate::RSemaphore`] for synchronous
/// code. Cheap to clone.
///
/// ```no_run
/// # fn demo(client: redisson_lock::blocking::RedissonClient) -> redisson_lock::Result<()> {
/// let slots = client.semaphore("exports:slots")?;
/// slots.try_set_permits(3)?;
/// let permit = slots.acquire(1)?; // waits for a free slot
/// // ... one export ...
/// permit.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: crate::RSemaphore,
    shared: Arc<Shared>,
}

impl Semaphore {
    pub(crate) fn new(inner: crate::RSemaphore, shared: Arc<Shared>) -> Self {
        Semaphore { inner, shared }
    }

    fn permits(&self, inner: crate::SemaphorePermits) -> Permits {
        Permits {
            inner: Some(inner),
            shared: self.shared.clone(),
        }
    }

    /// The semaphore's name (its Redis key).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The async handle on the same semaphore.
    pub fn as_async(&self) -> &crate::RSemaphore {
        &self.inner
    }

    /// Takes `permits`, waiting as long as it takes (woken by releases).
    ///
    /// # Errors
    ///
    /// Those of [`crate::RSemaphore::acquire`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn acquire(&self, permits: u32) -> Result<Permits> {
        let taken = self
            .shared
            .block_on(self.inner.acquire(permits).into_future())??;
        Ok(self.permits(taken))
    }

    /// Takes `permits` if they are free now.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    pub fn try_acquire(&self, permits: u32) -> Result<Option<Permits>> {
        let taken = self.shared.block_on(self.inner.try_acquire(permits))??;
        Ok(taken.map(|taken| self.permits(taken)))
    }

    /// Takes `permits`, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    pub fn try_acquire_for(&self, permits: u32, wait: Duration) -> Result<Option<Permits>> {
        let taken = self
            .shared
            .block_on(self.inner.try_acquire_for(permits, wait))??;
        Ok(taken.map(|taken| self.permits(taken)))
    }

    /// Gives back `permits` not held through a [`Permits`] (Redisson's `release`).
    ///
    /// # Errors
    ///
    /// Those of [`crate::RSemaphore::release`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn release(&self, permits: u32) -> Result<()> {
        self.shared.block_on(self.inner.release(permits))?
    }

    /// Sets the number of permits if the semaphore does not exist yet.
    ///
    /// # Errors
    ///
    /// Those of [`crate::RSemaphore::try_set_permits`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.shared.block_on(self.inner.try_set_permits(permits))?
    }

    /// Adds `permits` (negative: removes); the new count.
    ///
    /// # Errors
    ///
    /// Those of [`crate::RSemaphore::add_permits`]; [`crate::Error::InsideAsyncRuntime`].
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

    /// Takes every free permit; how many.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::available_permits`].
    pub fn drain_permits(&self) -> Result<i64> {
        self.shared.block_on(self.inner.drain_permits())?
    }

    /// Deletes the semaphore; whether it existed.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::available_permits`].
    pub fn delete(&self) -> Result<bool> {
        self.shared.block_on(self.inner.delete())?
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Semaphore")
            .field(&self.inner)
            .finish()
    }
}

/// Permits taken from a [`Semaphore`], given back by [`Permits::release`]
/// or on drop (waiting for Redis's reply; in the background inside a tokio
/// runtime), exactly once.
#[must_use = "dropping the permits gives them back at once"]
pub struct Permits {
    inner: Option<crate::SemaphorePermits>,
    shared: Arc<Shared>,
}

impl Permits {
    fn held(&self) -> &crate::SemaphorePermits {
        self.inner
            .as_ref()
            .expect("taken only by release, forget and drop")
    }

    /// How many permits this holds.
    pub fn count(&self) -> u32 {
        self.held().count()
    }

    /// Gives the permits back; how many (all it holds).
    ///
    /// # Errors
    ///
    /// Those of [`crate::SemaphorePermits::release`];
    /// [`crate::Error::InsideAsyncRuntime`] on the client's own runtime (the
    /// permits are then given back in the background).
    pub fn release(mut self) -> Result<u32> {
        let held = self
            .inner
            .take()
            .expect("taken only by release, forget and drop");
        self.shared.block_on(held.release())?
    }

    /// Keeps the permits taken for good (Redisson's acquire without release);
    /// how many.
    pub fn forget(mut self) -> u32 {
        self.inner
            .take()
            .expect("taken only by release, forget and drop")
            .forget()
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if let Some(held) = self.inner.take() {
            self.shared
                .release_dropped(held, crate::SemaphorePermits::release);
        }
    }
}

impl std::fmt::Debug for Permits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Permits")
            .field(&self.inner)
            .finish()
    }
}
