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
    /// but at most one command timeout, never the whole retry policy (a drop
    /// while a panic unwinds must not hang for seconds): past that, the
    /// release goes on in the background (`release` is cancel-safe: dropped,
    /// it finishes on the runtime). Inside a runtime, in the background at
    /// once, by the async guard's own drop.
    pub(crate) fn release_dropped<T, F: Future>(&self, held: T, release: impl FnOnce(T) -> F) {
        if Shared::may_block() {
            let patience = self.client.config().timeout;
            // The timer is made on the runtime (here there is none).
            let release = release(held);
            let _ = self.block_on(async move { tokio::time::timeout(patience, release).await });
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
