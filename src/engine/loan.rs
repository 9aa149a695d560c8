//! Loans: what this client took from a shared pool and must give back
//! (semaphore permits). A permit has no owner on Redis, so nothing there
//! would ever return it: the loan does, when its guard is dropped, when its
//! holder releases it, or at the client's shutdown, exactly once. A guard
//! holds its loan through a [`Lent`], which does the giving back on drop.
//!
//! A loan whose permits expire on Redis has a lease, as a held lock does:
//! a deadline the lost signal watches ([`LeaseState`]), fixed at the grant,
//! or moved by the watchdog each cycle for a loan kept alive
//! ([`renew_kept_alive`]).
//!
//! [`detached`] is the other half: an acquire attempt runs as its own task,
//! so if its caller stops waiting mid-attempt the attempt still completes,
//! and the guard it produced, which nobody receives, is dropped, which gives
//! the permits back.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::engine::lease::{LeaseState, LostSignal};
use crate::engine::Engine;
use crate::error::{Error, Result};

/// How a loan is given back: a future that returns it to Redis, with how
/// many permits went back.
type GiveBack = Box<dyn Fn() -> BoxFuture<'static, Result<usize>> + Send + Sync>;

/// How a kept-alive loan is renewed: a future that moves every permit's
/// lease to the given length from now, with how many were still leased.
pub(crate) type Renew = Box<dyn Fn(Duration) -> BoxFuture<'static, Result<usize>> + Send + Sync>;

/// How long a loan's permits stay taken on Redis.
pub(crate) enum LoanLease {
    /// Until given back.
    Forever,
    /// For this long from the grant, never renewed.
    Fixed(Duration),
    /// For the watchdog timeout, renewed by the watchdog every third of it
    /// until given back, or for a lease of its own (`own`), renewed every
    /// third of that on a timer of its own; `expected` permits are renewed
    /// each time.
    KeptAlive {
        renew: Renew,
        expected: usize,
        own: Option<Duration>,
    },
}

/// One loan. Given back at most once.
pub(crate) struct Loan {
    engine: Arc<Engine>,
    id: u64,
    settled: AtomicBool,
    give_back: GiveBack,
    /// When the permits expire on Redis, and whether they are known gone.
    lease: Arc<LeaseState>,
    /// Set for a loan kept alive.
    renew: Option<(Renew, usize)>,
    /// A kept-alive loan's own lease, renewed on its own timer (not the
    /// watchdog's).
    own_lease: Option<Duration>,
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

    /// Open loans the watchdog keeps alive (not those with a lease of their
    /// own).
    fn kept_alive(&self) -> Vec<Arc<Loan>> {
        self.all()
            .into_iter()
            .filter(|loan| {
                loan.renew.is_some() && loan.own_lease.is_none() && !loan.lease.is_gone()
            })
            .collect()
    }
}

/// One renewal of every kept-alive loan, side by side up to one per write
/// connection (each its own script: one per guard). A loan whose permits are not all still leased is
/// lost (an ended lease, or a release by id elsewhere); one whose renewal
/// failed is at risk until a renewal succeeds, and lost at its deadline.
/// The renewal sets the same deadline if run twice, so a reply lost in a
/// timeout is simply renewed again next cycle.
pub(crate) async fn renew_kept_alive(engine: &Engine) {
    let lease = engine.config.lock_watchdog_timeout;
    let loans = engine.loans.kept_alive();
    let renewals = futures::stream::iter(loans.into_iter().map(|loan| async move {
        loan.renew_once(lease).await;
    }));
    renewals
        .buffer_unordered(engine.writer_count().max(1))
        .for_each(|()| async {})
        .await;
}

/// Renews a loan with a lease of its own every third of it, until it is
/// given back or lost.
fn keep_alive_on_its_own(loan: &Arc<Loan>, lease: Duration) {
    let loan = Arc::downgrade(loan);
    let every = lease / 3;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(Instant::now() + every, every);
        loop {
            tick.tick().await;
            let Some(loan) = loan.upgrade() else {
                return;
            };
            if !loan.is_open() || loan.lease.is_gone() {
                return;
            }
            loan.renew_once(lease).await;
        }
    });
}

impl Loan {
    /// One renewal to `lease` from now: confirmed, found gone (lost), or
    /// failed (at risk until a renewal succeeds, lost at its deadline). The
    /// renewal sets the same deadline if run twice, so a reply lost in a
    /// timeout is simply renewed again next time.
    async fn renew_once(&self, lease: Duration) {
        let Some((renew, expected)) = &self.renew else {
            return;
        };
        let sent_at = Instant::now();
        match renew(lease).await {
            // Given back meanwhile: its permits are gone by design.
            _ if !self.is_open() => {}
            Ok(still) if still >= *expected => self.lease.confirm(sent_at, lease),
            Ok(still) => {
                if self.lease.mark_gone() {
                    tracing::warn!(
                        still,
                        expected,
                        "kept-alive permits found expired or released elsewhere: lost"
                    );
                }
            }
            Err(e) => {
                if self.lease.mark_at_risk() {
                    tracing::warn!(error = %e, "renewing kept-alive permits failed: at risk");
                }
            }
        }
    }

    /// Records a loan granted by a request first sent at `granted_at`;
    /// `give_back` returns it.
    pub(crate) fn open(
        engine: &Arc<Engine>,
        give_back: impl Fn() -> BoxFuture<'static, Result<usize>> + Send + Sync + 'static,
        lease: LoanLease,
        granted_at: Instant,
    ) -> Arc<Loan> {
        let id = engine.loans.next.fetch_add(1, Ordering::Relaxed);
        let (lasts, renew, own_lease) = match lease {
            LoanLease::Forever => (FOREVER, None, None),
            LoanLease::Fixed(lease) => (lease, None, None),
            LoanLease::KeptAlive {
                renew,
                expected,
                own,
            } => (
                own.unwrap_or(engine.config.lock_watchdog_timeout),
                Some((renew, expected)),
                own,
            ),
        };
        let state = Arc::new(LeaseState::granted(granted_at, lasts));
        let loan = Arc::new(Loan {
            engine: engine.clone(),
            id,
            settled: AtomicBool::new(false),
            give_back: Box::new(give_back),
            lease: state,
            renew,
            own_lease,
        });
        engine.loans.open.lock().insert(id, Arc::downgrade(&loan));
        if let Some(lease) = own_lease {
            keep_alive_on_its_own(&loan, lease);
        }
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

/// The deadline of permits that never expire: far enough that no lost
/// signal ever fires for them (a century; `Instant` arithmetic stays in range).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A guard's loan: given back when the guard is dropped (in the
/// background), unless it was settled or forgotten first.
pub(crate) struct Lent(Arc<Loan>);

impl Lent {
    /// Opens a loan that `give_back` returns (see [`Loan::open`]).
    pub(crate) fn open(
        engine: &Arc<Engine>,
        give_back: impl Fn() -> BoxFuture<'static, Result<usize>> + Send + Sync + 'static,
        lease: LoanLease,
        granted_at: Instant,
    ) -> Self {
        Lent(Loan::open(engine, give_back, lease, granted_at))
    }

    /// Fires when the permits are known gone from Redis, or their lease
    /// deadline passed without a confirmed renewal.
    pub(crate) fn lost_signal(&self) -> LostSignal {
        LostSignal::new(self.0.lease.clone())
    }

    /// Whether the last renewal failed (or the permits are lost).
    pub(crate) fn is_at_risk(&self) -> bool {
        self.0.lease.is_at_risk()
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
