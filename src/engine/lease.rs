//! Lease deadlines, the at-risk and the lost-lock signals.
//!
//! A hold's deadline is the moment Redis may let its key expire, less a drift
//! margin, measured on the local monotonic clock from when the last confirmed
//! acquire, renewal or partial unlock was *sent* (not answered), so it falls
//! before the server-side expiry. Passing the deadline, or a renewal finding
//! the field gone, marks the hold lost, and every guard of it is told.
//!
//! Lost is not the same as gone. A hold whose deadline passed (renewals
//! failed for a while) may still be this owner's on Redis: the watchdog keeps
//! renewing it, as Redisson does, so the key does not expire under a holder
//! that is winding down, and its unlock still sends the script. Only a
//! renewal that finds the field missing (or a force unlock) makes it gone,
//! and a gone hold is never renewed again.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{Error, Result};

pub use crate::config::MAX_LEASE;

/// Validates a lease and converts it to whole milliseconds, the unit Redis and
/// Redisson use.
pub(crate) fn lease_millis(lease: Duration, what: &str) -> Result<i64> {
    let ms = lease.as_millis();
    if ms == 0 {
        return Err(Error::InvalidArgument(format!(
            "{what} must be at least 1 ms, got {lease:?}"
        )));
    }
    if lease > MAX_LEASE {
        return Err(Error::InvalidArgument(format!(
            "{what} must be at most {} ms, got {lease:?}",
            MAX_LEASE.as_millis()
        )));
    }
    Ok(ms as i64)
}

/// How much earlier than `sent_at + lease` a hold counts as lost: Redis
/// expires keys on its own clock and timers round up, so a margin of 1% of the
/// lease plus 2 ms (Redlock's drift allowance) keeps the signal ahead of the
/// server-side expiry.
pub(crate) fn safety_margin(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// When a hold confirmed by a command sent at `sent_at` with `lease` counts
/// as lost unless renewed.
pub(crate) fn expires_by(sent_at: Instant, lease: Duration) -> Instant {
    sent_at + lease.saturating_sub(safety_margin(lease))
}

struct Deadline {
    /// When the newest confirmed command was sent; older confirmations that
    /// arrive late must not move the deadline.
    sent_at: Instant,
    at: Instant,
}

/// Deadline, risk and lost flags of one hold (inline in it: the watchdog's
/// table holds one per held lock) or of one loan of permits.
pub(crate) struct LeaseState {
    deadline: Mutex<Deadline>,
    /// The last renewal failed or was not confirmed by the replicas, or the
    /// acquisition itself was not: a failover or a longer outage may cost
    /// the lock. Cleared by the next confirmed renewal.
    at_risk: AtomicBool,
    lost: AtomicBool,
    /// Redis no longer has the field (renewal found it missing, force unlock).
    gone: AtomicBool,
    /// Wakes this hold's signal waiters when it is put at risk or lost: in a
    /// failover that puts every hold at risk, each waiter is woken once, by
    /// its own hold. Made by the first waiter: a `Notify` in every hold
    /// would cost every held lock 32 bytes, and few are ever waited on.
    changed: OnceLock<Box<Notify>>,
}

impl LeaseState {
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        Self::with_deadline(now, now + MAX_LEASE)
    }

    /// Granted by a command sent at `sent_at` that set a TTL of `lease`
    /// (a loan of permits: nothing renews before it is made).
    pub(crate) fn granted(sent_at: Instant, lease: Duration) -> Self {
        Self::with_deadline(sent_at, expires_by(sent_at, lease))
    }

    fn with_deadline(sent_at: Instant, at: Instant) -> Self {
        LeaseState {
            deadline: Mutex::new(Deadline { sent_at, at }),
            at_risk: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            changed: OnceLock::new(),
        }
    }

    /// Redis (and the replicas the quorum asks for) confirmed a command sent
    /// at `sent_at` that set the key's TTL to `lease`.
    pub(crate) fn confirm(&self, sent_at: Instant, lease: Duration) {
        if self.is_lost() {
            return;
        }
        self.at_risk.store(false, Ordering::Release);
        self.extend(sent_at, lease);
    }

    /// As [`Lease::confirm`], for a command confirmed for now only (a
    /// replica that could be promoted again once back was left out): the
    /// deadline moves, and the hold stays at risk if it was.
    pub(crate) fn extend(&self, sent_at: Instant, lease: Duration) {
        if self.is_lost() {
            return;
        }
        let mut d = self.deadline.lock();
        if sent_at >= d.sent_at {
            d.sent_at = sent_at;
            d.at = expires_by(sent_at, lease);
        }
    }

    /// A command sent at `sent_at` sets the key's TTL to `lease`, maybe shorter
    /// than the current one: move the deadline earlier now, before the reply
    /// (a later `confirm` sets it exactly).
    /// Returns the deadline before, for [`Lease::unshorten`].
    pub(crate) fn shorten(&self, sent_at: Instant, lease: Duration) -> Instant {
        let mut d = self.deadline.lock();
        let before = d.at;
        d.at = d.at.min(expires_by(sent_at, lease));
        before
    }

    /// The command `shorten` was for was never sent: the deadline is
    /// `before` again (or later, if a renewal confirmed one meanwhile).
    pub(crate) fn unshorten(&self, before: Instant) {
        let mut d = self.deadline.lock();
        d.at = d.at.max(before);
    }

    /// Marks the hold at risk; returns true if it was not already.
    pub(crate) fn mark_at_risk(&self) -> bool {
        let first = !self.at_risk.swap(true, Ordering::AcqRel);
        if first {
            self.wake();
        }
        first
    }

    /// Wakes the waiters, if any waited. The fence pairs with the one in
    /// [`LeaseState::wait_until`]: either this sees their `Notify`, or they
    /// see the flag set before it.
    fn wake(&self) {
        fence(Ordering::SeqCst);
        if let Some(changed) = self.changed.get() {
            changed.notify_waiters();
        }
    }

    /// At risk, or lost.
    pub(crate) fn is_at_risk(&self) -> bool {
        self.at_risk.load(Ordering::Acquire) || self.is_lost()
    }

    /// Marks the hold lost; returns true the first time.
    pub(crate) fn mark_lost(&self) -> bool {
        let first = !self.lost.swap(true, Ordering::AcqRel);
        if first {
            self.wake();
        }
        first
    }

    /// Redis no longer has the hold's field: lost for good, never renewed.
    /// Returns true if this also made it lost.
    pub(crate) fn mark_gone(&self) -> bool {
        self.gone.store(true, Ordering::Release);
        self.mark_lost()
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.deadline.lock().at
    }

    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if Instant::now() >= self.deadline() {
            self.mark_lost();
            return true;
        }
        false
    }

    async fn wait_lost(&self) {
        self.wait_until(Self::is_lost).await
    }

    async fn wait_at_risk(&self) {
        self.wait_until(Self::is_at_risk).await
    }

    /// Waits until `state` holds; it is re-checked after every change of
    /// this hold and at its deadline.
    async fn wait_until(&self, state: fn(&Self) -> bool) {
        let changed = self.changed.get_or_init(|| Box::new(Notify::new()));
        loop {
            let woken = changed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            // See `wake`.
            fence(Ordering::SeqCst);
            if state(self) {
                return;
            }
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(self.deadline()) => {}
            }
        }
    }
}

/// Tells a lock holder that its lock is gone.
///
/// It fires when the lease deadline passes without a confirmed renewal (the
/// lease counted from when the last acquire or renewal was sent, less a drift
/// margin of 1% + 2 ms), so before the lock can expire and another client take
/// it; or earlier, when a renewal finds the holder's field gone (deleted by a
/// force unlock, say), which the watchdog notices at its next renewal.
/// Cloneable and `'static`, so it can be moved into a `select!` or another task.
///
/// ```no_run
/// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
/// let guard = lock.lock().await?;
/// let lost = guard.lost_signal();
/// tokio::select! {
///     _ = do_the_work() => { guard.unlock().await?; }
///     _ = lost.lost() => eprintln!("lock lost: stop writing"),
/// }
/// # Ok(()) }
/// # async fn do_the_work() {}
/// ```
#[derive(Clone)]
pub struct LostSignal {
    /// The hold or the loan whose lease it tells of.
    of: Arc<dyn AsRef<LeaseState> + Send + Sync>,
}

impl AsRef<LeaseState> for LeaseState {
    fn as_ref(&self) -> &LeaseState {
        self
    }
}

impl LostSignal {
    pub(crate) fn new(of: Arc<dyn AsRef<LeaseState> + Send + Sync>) -> Self {
        LostSignal { of }
    }

    fn lease(&self) -> &LeaseState {
        (*self.of).as_ref()
    }

    /// Non-blocking check: true once the lock is known lost or its lease
    /// deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.lease().is_lost()
    }

    /// Completes when the lock is lost.
    ///
    /// # Cancel safety
    ///
    /// It only waits: dropping the future changes nothing, and it can be polled again.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// let lost = guard.lost_signal(); // 'static: moves into another task
    /// let watcher = tokio::spawn(async move {
    ///     lost.lost().await;
    ///     eprintln!("invoice-export lock lost: stop the export");
    /// });
    /// guard.unlock().await?; // once the invoices are exported
    /// watcher.abort();
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.lease().wait_lost().await
    }

    /// The instant (monotonic clock) after which the lock counts as lost unless
    /// a renewal is confirmed first.
    pub fn deadline(&self) -> Instant {
        self.lease().deadline()
    }

    /// Non-blocking check: true while the lock is at risk (see
    /// [`LostSignal::at_risk`]), and once it is lost.
    pub fn is_at_risk(&self) -> bool {
        self.lease().is_at_risk()
    }

    /// Completes when the lock is at risk: its last renewal failed (Redis
    /// did not answer within the command timeout, or refused it), or the
    /// replicas did not confirm it, or the acquisition itself could not be
    /// confirmed (its reply was lost and the hold count read back). Until a
    /// renewal is confirmed, the lease deadline does not move, so this
    /// comes before [`LostSignal::lost`], which it also completes with. A
    /// later confirmed renewal clears the risk ([`LostSignal::is_at_risk`]
    /// turns false), and this future can be awaited again.
    ///
    /// Redisson only logs failed renewals; this is the place to stop
    /// starting work that cannot be undone, or to checkpoint.
    ///
    /// # Cancel safety
    ///
    /// It only waits: dropping the future changes nothing, and it can be polled again.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// let signal = guard.lost_signal();
    /// tokio::select! {
    ///     _ = signal.at_risk() => eprintln!("renewal of the ledger lock failed: pausing"),
    ///     _ = async { /* copy the ledger, a page at a time */ } => {}
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn at_risk(&self) {
        self.lease().wait_at_risk().await
    }
}

impl std::fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostSignal")
            .field("at_risk", &self.is_at_risk())
            .field("lost", &self.is_lost())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    #[test]
    fn lease_bounds() {
        assert!(lease_millis(Duration::ZERO, "lease").is_err());
        assert!(lease_millis(Duration::from_micros(999), "lease").is_err());
        assert!(lease_millis(Duration::MAX, "lease").is_err());
        assert_eq!(
            lease_millis(Duration::from_millis(1500), "lease").unwrap(),
            1500
        );
    }

    #[tokio::test(start_paused = true)]
    async fn fires_at_the_deadline_unless_renewed() {
        let state = LeaseState::new();
        let t0 = Instant::now();
        state.confirm(t0, Duration::from_secs(3));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!state.is_lost());
        // A renewal sent at t0+2s moves the deadline to t0+5s ...
        state.confirm(Instant::now(), Duration::from_secs(3));
        // ... and a late confirmation of an older command does not move it back.
        state.confirm(t0, Duration::from_secs(3));
        state.wait_lost().await;
        let lease = Duration::from_secs(3);
        assert_eq!(
            Instant::now(),
            t0 + Duration::from_secs(2) + lease - safety_margin(lease)
        );
        assert!(state.is_lost());
    }

    /// A re-entry or `set_lease` shortens the deadline before it is sent;
    /// one refused before anything was sent (`NoPrimary`) puts it back, so
    /// a command never sent cannot end in a lost signal (issue 37 item 12).
    #[tokio::test(start_paused = true)]
    async fn a_shortening_never_sent_is_undone() {
        let state = LeaseState::new();
        let t0 = Instant::now();
        state.confirm(t0, Duration::from_secs(30));
        let long = state.deadline();
        let before = state.shorten(t0, Duration::from_secs(3));
        assert_eq!(before, long);
        assert_eq!(state.deadline(), expires_by(t0, Duration::from_secs(3)));
        state.unshorten(before);
        assert_eq!(state.deadline(), long);
        // A renewal confirmed meanwhile is kept.
        let before = state.shorten(t0, Duration::from_secs(3));
        tokio::time::advance(Duration::from_secs(1)).await;
        state.confirm(Instant::now(), Duration::from_secs(60));
        let renewed = state.deadline();
        state.unshorten(before);
        assert_eq!(state.deadline(), renewed);
    }

    /// Marking one hold at risk or lost wakes the waiters of that hold
    /// only: in a failover that touches N holds, N wake-ups, not N².
    #[tokio::test]
    async fn a_change_wakes_only_its_own_holds_waiters() {
        use futures::task::ArcWake;
        use std::sync::atomic::AtomicUsize;

        struct Count(AtomicUsize);
        impl ArcWake for Count {
            fn wake_by_ref(me: &Arc<Self>) {
                me.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (a, b) = (LeaseState::new(), LeaseState::new());
        a.confirm(Instant::now(), Duration::from_secs(60));
        b.confirm(Instant::now(), Duration::from_secs(60));
        let woken = Arc::new(Count(AtomicUsize::new(0)));
        let waker = futures::task::waker(woken.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        let mut b_waits = std::pin::pin!(b.wait_at_risk());
        assert!(b_waits.as_mut().poll(&mut cx).is_pending());
        assert!(a.mark_at_risk());
        assert!(a.mark_lost());
        assert_eq!(
            woken.0.load(Ordering::SeqCst),
            0,
            "another hold's change woke b"
        );
        assert!(b.mark_at_risk());
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert!(b_waits.as_mut().poll(&mut cx).is_ready());
    }

    #[tokio::test]
    async fn mark_lost_wakes_waiters_once() {
        let state = Arc::new(LeaseState::new());
        state.confirm(Instant::now(), Duration::from_secs(60));
        let waiting = state.clone();
        let waiter = tokio::spawn(async move { waiting.wait_lost().await });
        assert!(state.mark_lost());
        assert!(!state.mark_lost());
        waiter.await.unwrap();
    }
}
