//! Waiting, for any object: Redisson's algorithm, driven by messages.
//!
//! 1. Try once. 2. Join the object's channel (one subscription per client).
//! 3. Loop: arm the wake-up, try again, then sleep until a wake-up, the
//!    time the attempt said to look again (a lock's TTL, an expirable
//!    permit's expiry), the caller's deadline or the client's shutdown,
//!    whichever comes first.
//!
//! Trying again after joining closes the race with a release that happened
//! before the subscription existed. Where nothing but a message would end
//! the sleep (a semaphore, a count-down latch, a lock without TTL), the
//! sleep is bounded by `Config::recheck_interval`, so a lost message costs
//! at most that, never a hang.
//!
//! What an attempt is belongs to the object ([`Attempts`]); the locks' is
//! here too ([`acquire`]): the lock's TTL bounds the sleep, a TTL of 0 (the
//! fair lock: free, but another waiter is first in line) is re-checked with
//! a bounded back-off instead of in a tight loop, and a kind without pub/sub
//! (the spin lock) polls. If the caller drops the waiting future while an
//! attempt is in flight, that attempt is settled in the background
//! (`settle`), and a waiter that leaves without the lock runs its kind's
//! give-up (the fair lock's queue entry goes), so no cancelled waiter keeps
//! a lock or blocks a queue.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::config::Delays;
use crate::engine::attempt::{acquire_once, Attempt};
use crate::engine::hub::Wake;
use crate::engine::kind::{Call, Patience};
use crate::engine::lease::lease_millis;
use crate::engine::lifecycle::until_set;
use crate::engine::raw::{Granted, RawLock};
use crate::engine::settle::GiveUpOnDrop;
use crate::engine::telemetry::{self, AcquireEnd, AcquireTrace};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::owner::OwnerId;

/// What one attempt of a waiter found.
pub(crate) enum Step<T> {
    /// Got it.
    Done(T),
    /// Not yet. Try again after a wake-up, or after this long at most;
    /// `None` when only a message would say (bounded by the re-check).
    Again(Option<Duration>),
    /// Stop without it: the attempt could not be made in time.
    GiveUp,
}

/// The attempts of one waiter.
pub(crate) trait Attempts {
    type Output;
    /// One attempt. Cancel-safe: dropped mid-way, it leaves nothing taken.
    async fn attempt(&mut self) -> Result<Step<Self::Output>>;
}

/// Where a waiter listens and until when it waits.
pub(crate) struct Waiter<'a> {
    pub(crate) engine: &'a Engine,
    /// The channel whose messages wake it, and how; `None`: it polls.
    pub(crate) channel: Option<(String, Wake)>,
    /// `None`: no limit.
    pub(crate) deadline: Option<Instant>,
    /// Also wakes it: the deployment's view changing (a waiter held back
    /// for want of replicas tries again at once).
    pub(crate) topology: Option<tokio::sync::watch::Receiver<u64>>,
}

impl Waiter<'_> {
    /// Attempts until one succeeds (`Some`), the deadline passes (`None`),
    /// or an attempt fails (`Err`). [`Error::Shutdown`] as soon as the client
    /// closes.
    pub(crate) async fn wait<A: Attempts>(&self, attempts: &mut A) -> Result<Option<A::Output>> {
        let engine = self.engine;
        match attempts.attempt().await? {
            Step::Done(done) => return Ok(Some(done)),
            Step::GiveUp => return Ok(None),
            Step::Again(_) => {}
        }
        let Some(left) = time_left(self.deadline) else {
            return Ok(None);
        };
        let closing = engine.lifecycle.closing();
        // Redisson: a waiter without a limit gives its subscription
        // `subscriptionTimeout`, one with a limit the rest of it.
        let subscription = match &self.channel {
            None => None,
            Some((channel, wake)) => {
                let limit = match self.deadline {
                    Some(_) => left,
                    None => engine.config.subscription_timeout,
                };
                let joined = tokio::select! {
                    joined = engine.hub.join(channel, *wake, limit) => joined,
                    _ = until_set(closing.clone()) => return Err(Error::Shutdown),
                };
                match joined {
                    Err(Error::Timeout(_))
                        if self.deadline.is_some_and(|d| Instant::now() >= d) =>
                    {
                        return Ok(None)
                    }
                    other => Some(other?),
                }
            }
        };
        loop {
            let woken = std::pin::pin!(subscription.as_ref().map(|s| s.woken()));
            let mut woken = woken;
            if let Some(woken) = woken.as_mut().as_pin_mut() {
                woken.enable();
            }
            let pause = match attempts.attempt().await? {
                Step::Done(done) => return Ok(Some(done)),
                Step::GiveUp => return Ok(None),
                Step::Again(pause) => pause.unwrap_or(engine.config.recheck_interval),
            };
            let Some(left) = time_left(self.deadline) else {
                return Ok(None);
            };
            let pause = pause.min(left);
            let slept = async {
                match woken.as_mut().as_pin_mut() {
                    Some(woken) => {
                        if tokio::time::timeout(pause, woken).await.is_ok() {
                            telemetry::woken();
                        }
                    }
                    None => tokio::time::sleep(pause).await,
                }
            };
            let mut topology = self.topology.clone();
            let view_changed = async {
                match topology.as_mut() {
                    Some(changes) => {
                        changes.borrow_and_update();
                        if changes.changed().await.is_err() {
                            std::future::pending::<()>().await
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = slept => {}
                _ = view_changed => {}
                _ = until_set(closing.clone()) => return Err(Error::Shutdown),
            }
            // No attempt starts past the caller's deadline.
            if time_left(self.deadline).is_none() {
                return Ok(None);
            }
        }
    }
}

/// Back-off while the lock is free but another waiter goes first.
const FIRST_BACKOFF: Duration = Duration::from_millis(2);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Acquires a lock of any kind, waiting as `patience` allows, in an
/// `acquire` span (see `telemetry`).
pub(crate) async fn acquire(
    lock: &RawLock,
    lease: Option<Duration>,
    patience: Patience,
) -> Result<Option<Granted>> {
    let owner = lock.acquiring_owner();
    let mut tally = Tally::default();
    // Not boxed: a box here would allocate and copy the whole acquisition
    // (fred's future included) on every call. What deepens callers' types
    // (a multi lock's members) is boxed where it is nested instead.
    let acquisition = acquire_traced(lock, owner, lease, patience, &mut tally);
    let trace = AcquireTrace::start(telemetry::Subject {
        kind: lock.kind.name(),
        lock: &lock.name,
        owner,
    });
    let outcome = acquisition.instrument(trace.span().clone()).await;
    let end = match &outcome {
        Ok(Some((held, _))) => AcquireEnd::Acquired(held.safety()),
        Ok(None) => AcquireEnd::TimedOut,
        Err(_) => AcquireEnd::Failed,
    };
    trace.finish(end, tally.attempts, tally.first_refusal);
    outcome
}

/// What the acquire span records of the attempts.
#[derive(Default)]
struct Tally {
    attempts: u32,
    /// When an attempt first found the lock taken.
    first_refusal: Option<Instant>,
}

impl Tally {
    /// Counts one attempt; `refused` when it found the lock taken.
    fn attempted(&mut self, refused: bool) {
        self.attempts += 1;
        if refused && self.first_refusal.is_none() {
            self.first_refusal = Some(Instant::now());
        }
    }
}

async fn acquire_traced(
    lock: &RawLock,
    owner: OwnerId,
    lease: Option<Duration>,
    patience: Patience,
    tally: &mut Tally,
) -> Result<Option<Granted>> {
    let engine = &lock.engine;
    // A refused re-entry fails at once, before any attempt or queue place.
    lock.refuse_reentry(owner)?;
    let watchdog = lease.is_none();
    let lease = lease.unwrap_or(engine.config.lock_watchdog_timeout);
    lease_millis(lease, "lease")?;
    let field = lock.field_of(owner);
    // What every attempt sends, and what a give-up sends: built once.
    let call = lock.call(&field, lease, patience);
    let deadline = match patience {
        Patience::Once => {
            // One attempt, which may first wait a command's time for the
            // owner's previous operation to settle.
            let slot_deadline = Some(Instant::now() + engine.timeout());
            let attempt = bounded(
                attempt_until(engine, Some(Instant::now())),
                acquire_once(lock, &call, owner, lease, watchdog, slot_deadline),
            )
            .await
            .unwrap_or_else(|| Err(Error::Timeout(attempt_time(engine))));
            tally.attempted(matches!(attempt, Ok(Attempt::Held(_))));
            return match attempt? {
                Attempt::Acquired(held, token) => Ok(Some((held, token))),
                Attempt::Held(_) => Ok(None),
                Attempt::Busy => Err(Error::Timeout(engine.timeout())),
                // One try: no second chance within it.
                Attempt::Unconfirmed { synced, .. } => Err(engine
                    .replica_sync
                    .not_synced("acquire", &lock.name, synced)),
            };
        }
        // A deadline too far to represent is no deadline.
        Patience::For(wait) => Instant::now().checked_add(wait),
        Patience::Forever => None,
    };
    // From the first attempt on, the waiter may be queued (the fair lock):
    // leaving without the lock, in any way, must clean that up.
    let give_up = GiveUpOnDrop::new(lock, &call, owner);
    let channel = lock
        .kind
        .channel(&lock.name, &field)
        .map(|channel| (channel, lock.kind.wake()));
    let polls = channel.is_none();
    let waiter = Waiter {
        engine,
        channel,
        deadline,
        topology: engine
            .replica_sync
            .is_enabled()
            .then(|| engine.replica_sync.topology().changes()),
    };
    let mut attempts = LockAttempts {
        lock,
        call,
        owner,
        lease,
        watchdog,
        deadline,
        polling: polls.then(|| lock.backoff().start()),
        backoff: FIRST_BACKOFF,
        tried: false,
        first: true,
        no_primary_since: None,
        unconfirmed: 0,
        last_short: None,
        tally,
    };
    let outcome = waiter.wait(&mut attempts).await;
    let outcome = match (outcome, attempts.last_short.take()) {
        // The wait ran out while the replicas kept refusing: say so, rather
        // than that someone held the lock.
        (Ok(None), Some(synced)) => Err(engine
            .replica_sync
            .not_synced("acquire", &lock.name, synced)),
        (outcome, _) => outcome,
    };
    match outcome {
        Ok(Some(granted)) => {
            give_up.disarm();
            Ok(Some(granted))
        }
        // Past the caller's deadline, the give-up is not the caller's to
        // wait for (the owner's slot, a script, its `WAIT`).
        other if deadline.is_some() => {
            give_up.in_background();
            other
        }
        other => {
            give_up.now().await;
            other
        }
    }
}

/// A lock's attempts, and how long each refusal lets the waiter sleep.
struct LockAttempts<'a> {
    lock: &'a RawLock,
    call: Call<'a>,
    owner: OwnerId,
    lease: Duration,
    watchdog: bool,
    deadline: Option<Instant>,
    /// The spin lock's back-off; `None` for kinds woken by messages.
    polling: Option<Delays>,
    /// The back-off while the lock is free but not ours to take.
    backoff: Duration,
    /// Whether the first attempt (before joining the channel) was made.
    tried: bool,
    /// No attempt was started yet.
    first: bool,
    /// Since when attempts have found no primary to write to.
    no_primary_since: Option<Instant>,
    /// Attempts in a row the replicas did not confirm.
    unconfirmed: u32,
    /// The last of them, while the refusals last.
    last_short: Option<crate::engine::safety::Synced>,
    tally: &'a mut Tally,
}

impl Attempts for LockAttempts<'_> {
    type Output = Granted;

    async fn attempt(&mut self) -> Result<Step<Granted>> {
        let attempt = acquire_once(
            self.lock,
            &self.call,
            self.owner,
            self.lease,
            self.watchdog,
            self.deadline,
        );
        // The first attempt gets its normal time whatever the deadline;
        // every later one ends at the deadline.
        let until = match std::mem::replace(&mut self.first, false) {
            true => attempt_until(&self.lock.engine, self.deadline),
            false => self.deadline,
        };
        let Some(attempt) = bounded(until, attempt).await else {
            // Past the caller's deadline: what the attempt left is settled
            // in the background (as when its caller drops it).
            return Ok(Step::GiveUp);
        };
        self.tally
            .attempted(matches!(attempt, Ok(Attempt::Held(_))));
        if let Err(Error::NoPrimary(reason)) = &attempt {
            // A failover the sentinels do not agree on yet: nothing was
            // sent, so the waiter waits it out within its patience, and
            // for no longer than an unlock would retry (a primary that
            // never appears is an error, not a hang).
            let since = *self.no_primary_since.get_or_insert_with(Instant::now);
            if since.elapsed() < self.lock.engine.settle_budget() {
                tracing::debug!(%reason, "no primary yet; trying again");
                // Jittered, so the waiters of a client (and of a fleet) do
                // not all come back at once when the primary appears.
                let pause = jittered(self.backoff);
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                return Ok(Step::Again(Some(pause)));
            }
        } else {
            self.no_primary_since = None;
        }
        let ttl = match attempt? {
            Attempt::Acquired(held, token) => return Ok(Step::Done((held, token))),
            Attempt::Held(ttl) => ttl,
            Attempt::Busy => return Ok(Step::GiveUp),
            Attempt::Unconfirmed { synced, retry_at } => {
                // Within a bounded wait, tried again until it runs out; a
                // wait without a limit, `retryAttempts` times.
                self.unconfirmed += 1;
                let engine = &self.lock.engine;
                if self.deadline.is_none() && self.unconfirmed >= engine.config.retry_attempts {
                    return Err(engine
                        .replica_sync
                        .not_synced("acquire", &self.lock.name, synced));
                }
                self.last_short = Some(synced);
                self.tried = true;
                // The gate lets every waiter of that primary through at
                // one instant: each comes back somewhat after it.
                let spread = jittered(engine.config.retry_delay) / 2;
                return Ok(Step::Again(Some(
                    retry_at.saturating_duration_since(Instant::now()) + spread,
                )));
            }
        };
        self.unconfirmed = 0;
        self.last_short = None;
        if !std::mem::replace(&mut self.tried, true) {
            // The first refusal only leads to joining the channel.
            return Ok(Step::Again(None));
        }
        Ok(Step::Again(match (&mut self.polling, ttl) {
            // No message will come: poll, never past the TTL.
            (Some(polling), ttl) => Some(polling.next_delay().min(ttl.unwrap_or(Duration::MAX))),
            (None, Some(Duration::ZERO)) => {
                let pause = self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                Some(pause)
            }
            (None, Some(ttl)) => {
                self.backoff = FIRST_BACKOFF;
                Some(ttl)
            }
            // A key without TTL: a message, or the re-check.
            (None, None) => None,
        }))
    }
}

/// What one attempt normally takes at most: a command's wait for the
/// owner's previous operation, then the script and its `WAIT`.
fn attempt_time(engine: &Engine) -> Duration {
    engine.timeout() * 2 + engine.replica_sync.extra_time()
}

/// Runs one `attempt` until `until` (`None`: for as long as it takes).
/// `None` when it ran out: the attempt is dropped, and what it left (a
/// grant being read back or undone, which can take retries up to an unlock
/// latch's lifetime) is settled in the background, as when its caller drops
/// it; so a fault never makes `try_lock()` or `try_lock_for(d)` overrun by
/// more than one attempt's normal time.
fn bounded<F: std::future::Future>(
    until: Option<Instant>,
    attempt: F,
) -> impl std::future::Future<Output = Option<F::Output>> {
    use futures::future::{Either, FutureExt};
    // Not an `async fn`: one would keep `attempt` twice in its state (the
    // argument, and the future it awaits), and copy it from one to the
    // other (issue 38).
    match until {
        // Boxed under the timer: an attempt is a deep future, and the
        // timer's layer on top of it would be inlined into every caller's
        // (see `engine::boxed_reply`). Without one (`lock()`), no box: it
        // cost every acquisition an allocation and a copy.
        Some(until) => {
            Either::Left(tokio::time::timeout_at(until, Box::pin(attempt)).map(Result::ok))
        }
        None => Either::Right(attempt.map(Some)),
    }
}

/// Until when an attempt started now may run for a caller whose wait ends
/// at `deadline`: never less than one attempt's normal time, so a first try
/// always gets its chance.
fn attempt_until(engine: &Engine, deadline: Option<Instant>) -> Option<Instant> {
    let normal = Instant::now() + attempt_time(engine);
    deadline.map(|deadline| deadline.max(normal))
}

/// Between half of `pause` and all of it, at random.
fn jittered(pause: Duration) -> Duration {
    let ms = pause.as_millis().min(u128::from(u64::MAX)) as u64;
    Duration::from_millis(rand::random_range(ms / 2..=ms))
}

/// Time until the deadline; `None` once it has passed. No deadline: forever.
pub(crate) fn time_left(deadline: Option<Instant>) -> Option<Duration> {
    match deadline {
        None => Some(Duration::MAX),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            (!left.is_zero()).then_some(left)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waiters sent back by the same refusal come back spread over half a
    /// pause, not at one instant (issue 37 item 10).
    #[test]
    fn jittered_pauses_spread_between_half_and_all() {
        let pause = Duration::from_millis(200);
        let pauses: std::collections::HashSet<Duration> =
            (0..200).map(|_| jittered(pause)).collect();
        assert!(pauses.iter().all(|p| *p >= pause / 2 && *p <= pause));
        assert!(pauses.len() > 20, "{} distinct pauses", pauses.len());
    }
}
