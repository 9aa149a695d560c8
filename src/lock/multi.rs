//! [`RMultiLock`]: Redisson's multi lock and RedLock, client-side over member
//! [`crate::RLock`]s that may live on different servers (through different
//! clients). No keys of its own: each member is an ordinary RLock, so a JVM
//! multi lock over the same members excludes this one and the reverse.
//!
//! Redisson's rules, per `tryLock(wait, lease)`:
//! * members are tried in order; each gets `min(its share, what is left)`
//!   of the wait: all of it for a multi lock, `max(wait / n, 1 ms)` for a
//!   RedLock;
//! * with a lease, members are taken with a lease of twice the wait (so they
//!   outlive the acquisition) and set to the lease once all are held;
//!   without one, the watchdog renews them;
//! * a multi lock needs every member: at the first refusal the members held
//!   so far are released and, while time is left, it starts over. A RedLock
//!   needs a majority (`n / 2 + 1`): it tolerates `n - majority` refusals.
//!
//! Everything is all-or-nothing: a partial acquisition is released before
//! the call returns, and also when its future is dropped (the member guards
//! it holds are released on drop, and an attempt in flight is settled by the
//! engine).

use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use crate::acquire::sealed::{Sealed, Until, Within};
use crate::acquire::{Acquirable, Acquire, BoxFuture};
use crate::engine::lease::LostSignal;
use crate::error::{Error, Result};
use crate::lock::rlock::RLock;
use crate::lock::{LockGuard, Unlocked};

/// Locks several [`RLock`]s as one, with Redisson's semantics: a multi lock
/// ([`RMultiLock::new`], Redisson's `getMultiLock`) needs every member, a
/// RedLock ([`RMultiLock::red_lock`]) a majority.
///
/// Members may come from different clients (different servers). RedLock's
/// guarantee leans on timing: a majority of independent servers, each
/// expiring the lock on its own clock, protects against one server's loss
/// only while client pauses, network delays and clock drift stay well below
/// the lease; it gives no fencing token. Redisson deprecates it in favour of
/// an RLock on a replicated deployment (with `checkLockSyncedSlaves`), and a
/// fenced lock where correctness matters (`docs/interop.md`).
///
/// ```no_run
/// use std::time::Duration;
/// use redisson_lock::RMultiLock;
/// # async fn demo(a: redisson_lock::RedissonClient, b: redisson_lock::RedissonClient,
/// #               c: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// // Both accounts at once, or neither.
/// let transfer = RMultiLock::new(vec![a.lock("account:1")?, a.lock("account:2")?])?;
/// let guard = transfer.lock().await?;
/// guard.unlock().await?;
/// // A majority of three independent servers.
/// let red = RMultiLock::red_lock(vec![a.lock("job")?, b.lock("job")?, c.lock("job")?])?;
/// if let Some(guard) = red.try_lock_for(Duration::from_secs(1)).await? {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RMultiLock {
    members: Vec<RLock>,
    /// Refusals tolerated: 0 for a multi lock, `n - (n/2 + 1)` for RedLock.
    tolerated: usize,
}

/// Holds the members of an [`RMultiLock`] that it acquired.
#[must_use = "dropping the guard releases every member at once"]
#[derive(Debug)]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
    /// Members that must stay held for the whole to count as held.
    needed: usize,
    tolerant: bool,
}

impl RMultiLock {
    /// A multi lock: held only while every member is held.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] without members.
    pub fn new(members: Vec<RLock>) -> Result<Self> {
        Self::build(members, false)
    }

    /// A RedLock: held while a majority (`n / 2 + 1`) of the members is.
    /// Redisson deprecates it; see the type's docs.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] without members.
    pub fn red_lock(members: Vec<RLock>) -> Result<Self> {
        Self::build(members, true)
    }

    fn build(members: Vec<RLock>, red: bool) -> Result<Self> {
        if members.is_empty() {
            return Err(Error::InvalidArgument(
                "a multi lock needs at least one member".into(),
            ));
        }
        let majority = members.len() / 2 + 1;
        let tolerated = if red { members.len() - majority } else { 0 };
        Ok(RMultiLock { members, tolerated })
    }

    /// The members, in the order they are acquired.
    pub fn members(&self) -> &[RLock] {
        &self.members
    }

    /// Builds an acquisition (see [`Acquire`]).
    pub fn acquire(&self) -> Acquire<'_, Self> {
        Acquire::new(self)
    }

    /// Waits as long as it takes, then holds the members (renewed by the
    /// watchdog). As Redisson, it retries `try_lock_for(n × 1.5 s)` until it
    /// succeeds.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::lock`], for the first member error that leaves too
    /// few members.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: every member already held is released when the future is
    /// dropped, and an attempt in flight is settled.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// let transfer = client.multi_lock(&["account:17", "account:42"])?;
    /// let guard = transfer.lock().await?; // both accounts, renewed by the watchdog
    /// // ... move the funds ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<MultiGuard> {
        self.acquire().await
    }

    /// One pass over the members without waiting; `None` unless enough of
    /// them were free.
    ///
    /// # Errors
    ///
    /// As [`RMultiLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`RMultiLock::lock`].
    ///
    /// ```no_run
    /// # async fn demo(transfer: redisson_lock::RMultiLock) -> redisson_lock::Result<()> {
    /// if let Some(guard) = transfer.try_lock().await? {
    ///     // ... post the transfer ...
    ///     guard.unlock().await?;
    /// } else {
    ///     println!("an account is busy; the accounts taken were released");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<MultiGuard>> {
        self.acquire().no_wait().await
    }

    /// Waits up to `wait` in all; `None` when enough members stayed taken.
    ///
    /// # Errors
    ///
    /// As [`RMultiLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`RMultiLock::lock`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(red: redisson_lock::RMultiLock) -> redisson_lock::Result<()> {
    /// // A RedLock over three servers: `Some` once a majority is held.
    /// if let Some(guard) = red.try_lock_for(Duration::from_secs(3)).await? {
    ///     println!("holding the scheduler lock on {} servers", guard.guards().len());
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<MultiGuard>> {
        self.acquire().wait(wait).await
    }

    async fn lock_inner(&self, lease: Option<Duration>) -> Result<MultiGuard> {
        let wait = Duration::from_millis(1_500) * self.members.len() as u32;
        loop {
            if let Some(guard) = self.try_acquire(Some(wait), lease).await? {
                return Ok(guard);
            }
        }
    }

    /// Redisson's `tryLock(wait, lease)` over the members.
    async fn try_acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<MultiGuard>> {
        if let Some(lease) = lease {
            crate::engine::lease::lease_millis(lease, "lease")?;
        }
        let n = self.members.len();
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        // Members outlive the acquisition, then get the real lease.
        let member_lease = lease.map(|lease| match wait {
            Some(wait) => wait.saturating_mul(2).max(lease),
            None => lease,
        });
        'attempt: loop {
            let mut held: Vec<LockGuard> = Vec::with_capacity(n);
            let mut refusals_left = self.tolerated;
            let mut last_error = None;
            for member in &self.members {
                let wait = deadline.map(|deadline| {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let share = if self.tolerated > 0 {
                        (left / n as u32).max(Duration::from_millis(1))
                    } else {
                        left
                    };
                    share.min(left)
                });
                let terms = Within {
                    lease: member_lease,
                    wait,
                    permits: 1,
                    keep: Default::default(),
                };
                // Boxed (by the trait): a member's acquisition is a whole
                // lock's future; inline it would push a caller's async fn past
                // rustc's layout depth.
                match member.acquire_within(terms).await {
                    Ok(Some(guard)) => held.push(guard),
                    refused => {
                        if let Err(e) = refused {
                            tracing::debug!(lock = %member.name(), error = %e, "a member of a multi lock failed");
                            last_error = Some(e);
                        }
                        if n - held.len() == self.tolerated {
                            // As many missing as a RedLock tolerates: enough held.
                            break;
                        }
                        if refusals_left == 0 {
                            release(held).await;
                            if deadline.is_some_and(|d| Instant::now() < d) {
                                continue 'attempt;
                            }
                            return match last_error {
                                Some(e) if self.tolerated == 0 => Err(e),
                                _ => Ok(None),
                            };
                        }
                        refusals_left -= 1;
                    }
                }
                if deadline.is_some_and(|d| Instant::now() >= d) && held.len() < n - self.tolerated
                {
                    release(held).await;
                    return Ok(None);
                }
            }
            if held.len() < n - self.tolerated {
                release(held).await;
                return Ok(None);
            }
            if let Some(lease) = lease {
                let set = join_all(held.iter().map(|g| g.set_lease(lease))).await;
                if set.iter().filter(|ok| matches!(ok, Ok(true))).count() < n - self.tolerated {
                    release(held).await;
                    return Ok(None);
                }
            }
            return Ok(Some(MultiGuard {
                guards: held,
                needed: n - self.tolerated,
                tolerant: self.tolerated > 0,
            }));
        }
    }
}

/// Releases what a failed attempt held, all at once.
async fn release(held: Vec<LockGuard>) {
    for outcome in join_all(held.into_iter().map(|guard| Box::pin(guard.unlock()))).await {
        if let Err(e) = outcome {
            tracing::debug!(error = %e, "releasing a member of a failed multi-lock attempt");
        }
    }
}

impl MultiGuard {
    /// The member holds, in member order (a RedLock may hold fewer than all).
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// True once too many members are lost: any for a multi lock, more than
    /// the majority allows for a RedLock.
    pub fn is_lost(&self) -> bool {
        let alive = self.guards.iter().filter(|g| !g.is_lost()).count();
        alive < self.needed
    }

    /// Completes when [`MultiGuard::is_lost`] turns true.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// ```no_run
    /// # async fn demo(red: redisson_lock::RMultiLock) -> redisson_lock::Result<()> {
    /// let leadership = red.lock().await?;
    /// // Leader until a majority of the servers is lost; one lost server is tolerated.
    /// leadership.lost().await;
    /// eprintln!("no longer the scheduler leader");
    /// drop(leadership);
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        let signals: Vec<LostSignal> = self.guards.iter().map(LockGuard::lost_signal).collect();
        loop {
            if self.is_lost() {
                return;
            }
            let pending: Vec<_> = signals
                .iter()
                .filter(|s| !s.is_lost())
                .map(|s| Box::pin(s.lost()))
                .collect();
            if pending.is_empty() {
                return;
            }
            futures::future::select_all(pending).await;
        }
    }

    /// Releases every member. A multi lock reports the first member that
    /// could not be released; a RedLock, as Redisson's, ignores member
    /// errors.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock`], for a multi lock.
    ///
    /// # Cancel safety
    ///
    /// Every member's release runs to completion even if the future is dropped.
    ///
    /// ```no_run
    /// # async fn demo(transfer: redisson_lock::RMultiLock) -> redisson_lock::Result<()> {
    /// let guard = transfer.lock().await?;
    /// // ... debit one account, credit the other ...
    /// if let Err(e) = guard.unlock().await {
    ///     eprintln!("an account lock was not released: {e}"); // it expires with its lease
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn unlock(self) -> Result<Unlocked> {
        let outcomes = join_all(
            self.guards
                .into_iter()
                .map(|guard| Box::pin(guard.unlock())),
        )
        .await;
        if self.tolerant {
            return Ok(Unlocked::Released);
        }
        for outcome in outcomes {
            outcome?;
        }
        Ok(Unlocked::Released)
    }
}

impl Sealed for RMultiLock {}
impl crate::acquire::sealed::Leasable for RMultiLock {}

impl Acquirable for RMultiLock {
    type Guard = MultiGuard;

    fn acquire_until(&self, terms: Until) -> BoxFuture<'_, Result<MultiGuard>> {
        Box::pin(self.lock_inner(terms.lease))
    }

    fn acquire_within(&self, terms: Within) -> BoxFuture<'_, Result<Option<MultiGuard>>> {
        Box::pin(self.try_acquire(terms.wait, terms.lease))
    }
}
