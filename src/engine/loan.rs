//! Loans: what this client took from a shared pool and must give back
//! (semaphore permits). A permit has no owner on Redis, so nothing there
//! would ever return it: the loan does, when its guard is dropped, when its
//! holder releases it, or at the client's shutdown, exactly once. A guard
//! holds its loan through a [`Lent`], which does the giving back on drop.
//!
//! [`detached`] is the other half: an acquire attempt runs as its own task,
//! so if its caller stops waiting mid-attempt the attempt still completes,
//! and the guard it produced, which nobody receives, is dropped, which gives
//! the permits back.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::engine::Engine;
use crate::error::{Error, Result};

/// How a loan is given back: a future that returns it to Redis, with how
/// many permits went back.
type GiveBack = Box<dyn Fn() -> BoxFuture<'static, Result<usize>> + Send + Sync>;

/// One loan. Given back at most once.
pub(crate) struct Loan {
    engine: Arc<Engine>,
    id: u64,
    settled: AtomicBool,
    give_back: GiveBack,
}

/// The loans a client has open, for its shutdown.
#[derive(Default)]
pub(crate) struct Loans {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Weak<Loan>>>,
}

impl Loans {
    /// Open loans, to give back at shutdown.
    pub(crate) fn all(&self) -> Vec<Arc<Loan>> {
        self.open
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.open.lock().len()
    }
}

impl Loan {
    /// Records a loan; `give_back` returns it.
    pub(crate) fn open(
        engine: &Arc<Engine>,
        give_back: impl Fn() -> BoxFuture<'static, Result<usize>> + Send + Sync + 'static,
    ) -> Arc<Loan> {
        let id = engine.loans.next.fetch_add(1, Ordering::Relaxed);
        let loan = Arc::new(Loan {
            engine: engine.clone(),
            id,
            settled: AtomicBool::new(false),
            give_back: Box::new(give_back),
        });
        engine.loans.open.lock().insert(id, Arc::downgrade(&loan));
        loan
    }

    /// Takes the loan off the books; false if it was settled already.
    fn close(&self) -> bool {
        if self.settled.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.engine.loans.open.lock().remove(&self.id);
        true
    }

    /// Gives it back now. [`Error::Shutdown`] if the client's shutdown gave
    /// it back already. Cancel-safe: the giving back runs as a task of its
    /// own, so a caller who stops waiting does not leave it half done.
    pub(crate) async fn settle(&self) -> Result<usize> {
        if !self.close() {
            return Err(Error::Shutdown);
        }
        let giving = self.give_back_task();
        match tokio::spawn(giving).await {
            Ok(outcome) => outcome,
            Err(e) => Err(Error::redis(format!("giving back permits failed: {e}"))),
        }
    }

    /// Gives it back without waiting (a guard was dropped). Outside a tokio
    /// runtime nothing can be sent; the loan then stays on the books for the
    /// client's shutdown.
    pub(crate) fn settle_in_background(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("a permit guard was dropped outside a tokio runtime; its permits are given back at shutdown");
            return;
        };
        if !self.close() {
            return;
        }
        let giving = self.give_back_task();
        runtime.spawn(async move {
            if let Err(e) = giving.await {
                tracing::warn!(error = %e, "giving back dropped permits failed");
            }
        });
    }

    /// The giving back, counted as busy for the client's shutdown.
    fn give_back_task(&self) -> impl Future<Output = Result<usize>> + Send + 'static {
        let busy = self.engine.lifecycle.track();
        let giving = (self.give_back)();
        async move {
            let outcome = giving.await;
            drop(busy);
            outcome
        }
    }

    /// Ends the loan without giving anything back (the holder keeps the
    /// permits, to release them later by hand).
    pub(crate) fn forget(&self) {
        self.close();
    }

    /// Whether it is still open.
    pub(crate) fn is_open(&self) -> bool {
        !self.settled.load(Ordering::Acquire)
    }
}

/// A guard's loan: given back when the guard is dropped (in the
/// background), unless it was settled or forgotten first.
pub(crate) struct Lent(Arc<Loan>);

impl Lent {
    /// Opens a loan that `give_back` returns.
    pub(crate) fn open(
        engine: &Arc<Engine>,
        give_back: impl Fn() -> BoxFuture<'static, Result<usize>> + Send + Sync + 'static,
    ) -> Self {
        Lent(Loan::open(engine, give_back))
    }

    /// Gives it back now (see [`Loan::settle`]).
    pub(crate) async fn settle(&self) -> Result<usize> {
        self.0.settle().await
    }

    /// Ends the loan without giving anything back.
    pub(crate) fn forget(&self) {
        self.0.forget();
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if self.0.is_open() {
            self.0.settle_in_background();
        }
    }
}

/// Runs `work` as a task of its own and waits for it, counted as busy for
/// the client's shutdown. If the caller stops waiting, the task runs to its
/// end anyway and its output is dropped there: an output that owns
/// something (a permit guard) gives it back.
pub(crate) async fn detached<T: Send + 'static>(
    engine: &Arc<Engine>,
    work: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let busy = engine.lifecycle.enter()?;
    let task = tokio::spawn(async move {
        let output = work.await;
        drop(busy);
        output
    });
    match task.await {
        Ok(output) => output,
        Err(e) => Err(Error::redis(format!("an acquire attempt failed: {e}"))),
    }
}
