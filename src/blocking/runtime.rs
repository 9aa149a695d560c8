//! The private runtime a blocking client owns, and the one way every
//! blocking call reaches it.

use std::future::Future;

use tokio::runtime::{Handle, Runtime};

use crate::error::{Error, Result};

/// A blocking client's runtime and async client, shared by every object and
/// guard made from it; the last one dropped shuts the client down.
pub(crate) struct Shared {
    pub(crate) client: crate::RedissonClient,
    runtime: Option<Runtime>,
}

/// Where a blocking call is made from.
enum Caller {
    /// A thread outside any tokio runtime: the runtime runs the call here.
    Plain,
    /// A thread of another runtime: `spawn_blocking`'s pool, where tokio
    /// tells async code to run sync code, or one of its workers (blocked
    /// for the call, as by `reqwest::blocking` or a `std` mutex). Tokio runs
    /// no runtime inside another's context, so a thread of ours runs it.
    OtherRuntime,
    /// This client's own runtime: the call would wait for the very thread
    /// that must make it progress. Refused.
    Own,
}

impl Caller {
    fn of(runtime: &Runtime) -> Caller {
        match Handle::try_current() {
            Err(_) => Caller::Plain,
            Ok(current) if current.id() == runtime.handle().id() => Caller::Own,
            Ok(_) => Caller::OtherRuntime,
        }
    }
}

impl Shared {
    /// A runtime with one worker thread: it drives the connections, the
    /// subscriptions and the watchdog while the caller's threads block.
    pub(crate) fn start() -> Result<Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redisson-lock-blocking")
            .enable_all()
            .build()
            .map_err(|e| Error::BlockingRuntime(format!("cannot start its runtime: {e}")))
    }

    pub(crate) fn new(client: crate::RedissonClient, runtime: Runtime) -> Self {
        Shared {
            client,
            runtime: Some(runtime),
        }
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime is taken only on drop")
    }

    /// Runs `work` to completion, blocking this thread, the runtime's worker
    /// driving the I/O and timers meanwhile (see [`run_on`]).
    pub(crate) fn block_on<F>(&self, work: F) -> Result<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        // Acquisitions made inside a blocking guard's scope re-enter it: the
        // scopes are this thread's, taken now.
        run_on(
            self.runtime(),
            crate::engine::reentry::with_thread_scopes(work),
        )
    }

    /// Gives back what a dropped blocking guard held: waiting for the reply
    /// where this thread may block (as a `MutexGuard`'s drop frees at once),
    /// but at most one command timeout, never the whole retry policy (a drop
    /// while a panic unwinds must not hang for seconds): past that, the
    /// release goes on in the background (`release` is cancel-safe: dropped,
    /// it finishes on the runtime). Inside a runtime, in the background at
    /// once, by the async guard's own drop.
    pub(crate) fn release_dropped<T, F>(&self, held: T, release: impl FnOnce(T) -> F)
    where
        F: Future + Send,
        F::Output: Send,
    {
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

    /// Whether this thread is outside every runtime (where a drop may wait).
    pub(crate) fn may_block() -> bool {
        Handle::try_current().is_err()
    }
}

/// Runs `work` on `runtime` to completion, blocking this thread: on this
/// thread outside any runtime; on a thread of ours from another runtime's
/// thread; [`Error::InsideAsyncRuntime`] on `runtime`'s own (nothing sent).
pub(crate) fn run_on<F>(runtime: &Runtime, work: F) -> Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    match Caller::of(runtime) {
        Caller::Plain => Ok(runtime.block_on(work)),
        Caller::Own => Err(Error::InsideAsyncRuntime),
        Caller::OtherRuntime => std::thread::scope(|scope| {
            let ours = std::thread::Builder::new()
                .name("redisson-lock-call".into())
                .spawn_scoped(scope, || runtime.block_on(work))
                .map_err(|e| {
                    Error::BlockingRuntime(format!("cannot start a thread for the call: {e}"))
                })?;
            // A panic in the call is the caller's, as on a plain thread.
            ours.join()
                .map_err(|panic| std::panic::resume_unwind(panic))
        }),
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        // Releases what is still held and wakes its waiters, as the async
        // client's shutdown does; then the runtime goes, on a thread where
        // it may.
        let shutdown = |runtime: Runtime| {
            runtime.block_on(self.client.shutdown());
            drop(runtime);
        };
        match Caller::of(&runtime) {
            Caller::Plain => shutdown(runtime),
            Caller::OtherRuntime => {
                // Taken back if no thread can be made: a runtime dropped
                // here (maybe an async task) would panic.
                let slot = parking_lot::Mutex::new(Some(runtime));
                std::thread::scope(|scope| {
                    let spawned = std::thread::Builder::new()
                        .name("redisson-lock-shutdown".into())
                        .spawn_scoped(scope, || {
                            if let Some(runtime) = slot.lock().take() {
                                shutdown(runtime);
                            }
                        });
                    if let Err(e) = spawned {
                        tracing::warn!(error = %e, "no thread to shut the blocking client down: its holds expire with their lease");
                        if let Some(runtime) = slot.lock().take() {
                            runtime.shutdown_background();
                        }
                    }
                })
            }
            // Its last handle dropped by one of its own tasks: nothing may
            // block here; the holds expire with their lease.
            Caller::Own => runtime.shutdown_background(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call from the client's own runtime would wait for the thread that
    /// must run it: refused, and `work` never runs.
    #[test]
    fn a_call_on_the_clients_own_runtime_is_refused() {
        let runtime = Shared::start().unwrap();
        let refused = runtime.block_on(async { run_on(&runtime, async { unreachable!() }) });
        assert!(
            matches!(refused, Err(Error::InsideAsyncRuntime)),
            "{refused:?}"
        );
        // From another runtime's task: made, on a thread of ours.
        let other = tokio::runtime::Runtime::new().unwrap();
        let made = other.block_on(async { run_on(&runtime, async { 7 }) });
        assert_eq!(made.unwrap(), 7);
    }
}
