//! Waiting for a lock, any kind: Redisson's algorithm, driven by messages.
//!
//! 1. Try once. 2. Join the kind's channel (one subscription per client).
//! 3. Loop: arm the wake-up, try again, then sleep until a wake-up, the
//!    lock's TTL, the caller's deadline or the client's shutdown, whichever
//!    comes first.
//!
//! Trying again after joining closes the race with an unlock that happened
//! before the subscription existed, and never sleeping past the TTL bounds
//! the cost of a lost message to one TTL. A TTL of 0 (the fair lock: free,
//! but another waiter is first in line) is re-checked with a bounded
//! back-off instead of in a tight loop. If the caller drops the waiting
//! future while an attempt is in flight, that attempt is settled in the
//! background (`settle`), and a waiter that leaves without the lock runs its
//! kind's give-up (the fair lock's queue entry goes), so no cancelled waiter
//! keeps a lock or blocks a queue.

use std::time::Duration;

use tokio::time::Instant;

use crate::engine::attempt::{acquire_once, Attempt};
use crate::engine::kind::Patience;
use crate::engine::lifecycle::until_set;
use crate::engine::raw::{Held, RawLock};
use crate::engine::settle::GiveUpOnDrop;
use crate::error::{Error, Result};
use crate::OwnerId;

/// Back-off while the lock is free but another waiter goes first.
const FIRST_BACKOFF: Duration = Duration::from_millis(2);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// An acquisition: the hold, and the fencing token if the kind has one.
pub(crate) type Granted = (Held, Option<i64>);

pub(crate) async fn acquire(
    lock: &RawLock,
    lease: Option<Duration>,
    patience: Patience,
) -> Result<Option<Granted>> {
    let owner = lock.acquiring_owner();
    let engine = &lock.engine;
    let deadline = match patience {
        Patience::Once => {
            // One attempt, which may first wait a command's time for the
            // owner's previous operation to settle.
            let slot_deadline = Instant::now() + engine.timeout();
            return match acquire_once(lock, owner, lease, Some(slot_deadline), patience).await? {
                Attempt::Acquired(held, token) => Ok(Some((held, token))),
                Attempt::Held(_) => Ok(None),
                Attempt::Busy => Err(Error::Timeout(engine.timeout())),
            };
        }
        // A deadline too far to represent is no deadline.
        Patience::For(wait) => Instant::now().checked_add(wait),
        Patience::Forever => None,
    };
    // From the first attempt on, the waiter may be queued (the fair lock):
    // leaving without the lock, in any way, must clean that up.
    let give_up = GiveUpOnDrop::new(lock, owner, patience);
    match wait(lock, owner, lease, patience, deadline).await {
        Ok(Some(granted)) => {
            give_up.disarm();
            Ok(Some(granted))
        }
        other => {
            give_up.now().await;
            other
        }
    }
}

async fn wait(
    lock: &RawLock,
    owner: OwnerId,
    lease: Option<Duration>,
    patience: Patience,
    deadline: Option<Instant>,
) -> Result<Option<Granted>> {
    let engine = &lock.engine;
    if let Attempt::Acquired(held, token) =
        acquire_once(lock, owner, lease, deadline, patience).await?
    {
        return Ok(Some((held, token)));
    }
    let Some(left) = time_left(deadline) else {
        return Ok(None);
    };
    let closing = engine.lifecycle.closing();
    // A kind without pub/sub (the spin lock) polls; the others join their
    // channel. Redisson: `lock()` gives the subscription
    // `subscriptionTimeout`, a `tryLock(wait)` the rest of its wait.
    let subscription = match lock.kind.channel(&lock.name, &lock.field_of(owner)) {
        None => None,
        Some(channel) => {
            let limit = match deadline {
                Some(_) => left,
                None => engine.config.subscription_timeout,
            };
            let joined = tokio::select! {
                joined = engine.hub.join(&channel, lock.kind.wake(), limit) => joined,
                _ = until_set(closing.clone()) => return Err(Error::Shutdown),
            };
            match joined {
                Err(Error::Timeout(_)) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Ok(None)
                }
                other => Some(other?),
            }
        }
    };
    let mut polling = lock.backoff().start();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let woken = std::pin::pin!(subscription.as_ref().map(|s| s.woken()));
        let mut woken = woken;
        if let Some(woken) = woken.as_mut().as_pin_mut() {
            woken.enable();
        }
        let ttl = match acquire_once(lock, owner, lease, deadline, patience).await? {
            Attempt::Acquired(held, token) => return Ok(Some((held, token))),
            Attempt::Held(ttl) => ttl,
            Attempt::Busy => return Ok(None),
        };
        let Some(left) = time_left(deadline) else {
            return Ok(None);
        };
        let pause = match (&subscription, ttl) {
            // No message will come: poll, never past the TTL.
            (None, ttl) => polling.next_delay().min(ttl.unwrap_or(Duration::MAX)),
            (Some(_), Some(Duration::ZERO)) => {
                let pause = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                pause
            }
            (Some(_), Some(ttl)) => {
                backoff = FIRST_BACKOFF;
                ttl
            }
            (Some(_), None) => Duration::MAX,
        };
        let pause = pause.min(left);
        let slept = async {
            match woken.as_mut().as_pin_mut() {
                Some(woken) => {
                    let _ = tokio::time::timeout(pause, woken).await;
                }
                None => tokio::time::sleep(pause).await,
            }
        };
        tokio::select! {
            _ = slept => {}
            _ = until_set(closing.clone()) => return Err(Error::Shutdown),
        }
    }
}

/// Time until the deadline; `None` once it has passed. No deadline: forever.
fn time_left(deadline: Option<Instant>) -> Option<Duration> {
    match deadline {
        None => Some(Duration::MAX),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            (!left.is_zero()).then_some(left)
        }
    }
}
