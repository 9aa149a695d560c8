//! The private runtime a blocking client owns, and the one way every
//! blocking call reaches it.

use std::future::Future;

use crate::error::{Error, Result};

/// A blocking client's runtime and async client, shared by every object and
/// guard made from it; the last one dropped shuts the client down.
pub(crate) struct Shared {
    pub(crate) client: crate::RedissonClient,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Shared {
    /// A runtime with one worker thread: it drives the connections, the
    /// subscriptions and the watchdog while the caller's threads block.
    pub(crate) fn start() -> Result<tokio::runtime::Runtime> {
        refuse_inside_runtime()?;
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redisson-lock-blocking")
            .enable_all()
            .build()
            .map_err(|e| Error::Config(format!("cannot start the blocking client's runtime: {e}")))
    }

    pub(crate) fn new(client: crate::RedissonClient, runtime: tokio::runtime::Runtime) -> Self {
        Shared {
            client,
            runtime: Some(runtime),
        }
    }

    pub(crate) fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime is taken only on drop")
    }

    /// Runs `work` to completion on this thread, the runtime's worker
    /// driving the I/O and timers meanwhile; refused inside a runtime.
    pub(crate) fn block_on<F: Future>(&self, work: F) -> Result<F::Output> {
        refuse_inside_runtime()?;
        // Acquisitions made inside a blocking guard's scope re-enter it.
        Ok(self
            .runtime()
            .block_on(crate::engine::reentry::with_thread_scopes(work)))
    }

    /// Gives back what a dropped blocking guard held: waiting for the reply
    /// where this thread may block (as a `MutexGuard`'s drop frees at once),
    /// else in the background, on this client's runtime, by the async
    /// guard's own drop.
    pub(crate) fn release_dropped<T, F: Future>(&self, held: T, release: impl FnOnce(T) -> F) {
        if Shared::may_block() {
            let _ = self.block_on(release(held));
        } else {
            let _context = self.runtime().enter();
            drop(held);
        }
    }

    /// Whether this thread may block on the runtime.
    pub(crate) fn may_block() -> bool {
        tokio::runtime::Handle::try_current().is_err()
    }
}

/// [`Error::InsideAsyncRuntime`] where blocking would stall a runtime.
pub(crate) fn refuse_inside_runtime() -> Result<()> {
    match Shared::may_block() {
        true => Ok(()),
        false => Err(Error::InsideAsyncRuntime),
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        if Shared::may_block() {
            // Releases what is still held and wakes its waiters, as the async
            // client's shutdown does.
            runtime.block_on(self.client.shutdown());
        } else {
            // Dropped inside someone's runtime: nothing may block here; the
            // holds expire with their lease.
            runtime.shutdown_background();
        }
    }
}
