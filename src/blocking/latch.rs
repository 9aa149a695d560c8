//! [`CountDownLatch`]: Redisson's `RCountDownLatch`, blocking.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::Shared;
use crate::error::Result;

/// Redisson's `RCountDownLatch`, blocking: [`crate::RCountDownLatch`] for
/// synchronous code. Cheap to clone.
///
/// ```no_run
/// # fn demo(client: redisson_lock::blocking::RedissonClient) -> redisson_lock::Result<()> {
/// let ready = client.count_down_latch("deploy:ready")?;
/// ready.try_set_count(3)?;
/// // ... three workers call ready.count_down() ...
/// ready.wait()?; // woken by the latch's message when it reaches zero
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    inner: crate::RCountDownLatch,
    shared: Arc<Shared>,
}

impl CountDownLatch {
    pub(crate) fn new(inner: crate::RCountDownLatch, shared: Arc<Shared>) -> Self {
        CountDownLatch { inner, shared }
    }

    /// The latch's name (its Redis key).
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The async handle on the same latch.
    pub fn as_async(&self) -> &crate::RCountDownLatch {
        &self.inner
    }

    /// Sets the count if the latch is not set; whether it was set now.
    ///
    /// # Errors
    ///
    /// Those of [`crate::RCountDownLatch::try_set_count`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        self.shared.block_on(self.inner.try_set_count(count))?
    }

    /// Counts down by one; the count left.
    ///
    /// # Errors
    ///
    /// Those of [`crate::RCountDownLatch::count_down`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn count_down(&self) -> Result<u64> {
        self.shared.block_on(self.inner.count_down())?
    }

    /// The count now (0: open).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Connection`], [`crate::Error::Timeout`],
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn count(&self) -> Result<u64> {
        self.shared.block_on(self.inner.count())?
    }

    /// Waits until the count is zero.
    ///
    /// # Errors
    ///
    /// Those of [`crate::RCountDownLatch::wait`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn wait(&self) -> Result<()> {
        self.shared.block_on(self.inner.wait())?
    }

    /// Waits at most `timeout` for the count to reach zero; whether it did.
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::wait`].
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.shared.block_on(self.inner.wait_for(timeout))?
    }

    /// Deletes the latch (waking its waiters); whether it existed.
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::count`].
    pub fn delete(&self) -> Result<bool> {
        self.shared.block_on(self.inner.delete())?
    }
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::CountDownLatch")
            .field(&self.inner)
            .finish()
    }
}
