//! Waiting for a lock: Redisson's algorithm, driven by unlock messages.
//!
//! 1. Try once. 2. Join the lock's channel (one subscription per client).
//! 3. Loop: arm the wake-up, try again, then sleep until a wake-up, the
//!    lock's TTL, the caller's deadline or the client's shutdown, whichever
//!    comes first.
//!
//! Trying again after joining closes the race with an unlock that happened
//! before the subscription existed, and never sleeping past the TTL bounds
//! the cost of a lost message to one TTL. If the caller drops the waiting
//! future while an attempt is in flight, a background task reads the hold
//! count (ordered after the abandoned script on the same connection) and gives
//! the lock back if the attempt took it, so no cancelled waiter keeps a lock.

use std::time::Duration;

use tokio::time::Instant;

use crate::engine::lifecycle::until_set;
use crate::error::{Error, Result};
use crate::lock::guard::LockGuard;
use crate::lock::rlock::{Attempt, RLock};

/// How long an acquire may wait.
pub(crate) enum Patience {
    Once,
    For(Duration),
    Forever,
}

pub(crate) async fn acquire(
    lock: &RLock,
    lease: Option<Duration>,
    patience: Patience,
) -> Result<Option<LockGuard>> {
    let owner = lock.acquiring_owner();
    let client = &lock.client;
    let deadline = match patience {
        Patience::Once => {
            // One attempt, which may first wait a command's time for the
            // owner's previous operation to settle.
            let slot_deadline = Instant::now() + client.timeout();
            return match lock.acquire_once(owner, lease, Some(slot_deadline)).await? {
                Attempt::Acquired(guard) => Ok(Some(guard)),
                Attempt::Held(_) => Ok(None),
                Attempt::Busy => Err(Error::Timeout(client.timeout())),
            };
        }
        // A deadline too far to represent is no deadline.
        Patience::For(wait) => Instant::now().checked_add(wait),
        Patience::Forever => None,
    };
    if let Attempt::Acquired(guard) = lock.acquire_once(owner, lease, deadline).await? {
        return Ok(Some(guard));
    }
    let Some(left) = time_left(deadline) else {
        return Ok(None);
    };
    // Redisson: `lock()` gives the subscription `subscriptionTimeout`, a
    // `tryLock(wait)` the rest of its wait.
    let limit = match deadline {
        Some(_) => left,
        None => client.config.subscription_timeout,
    };
    let closing = client.lifecycle.closing();
    let channel = lock.channel();
    let joined = tokio::select! {
        joined = client.subscriptions.join(&channel, limit) => joined,
        _ = until_set(closing.clone()) => return Err(Error::Shutdown),
    };
    let subscription = match joined {
        Err(Error::Timeout(_)) if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(None),
        other => other?,
    };
    loop {
        let woken = subscription.woken();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let ttl = match lock.acquire_once(owner, lease, deadline).await? {
            Attempt::Acquired(guard) => return Ok(Some(guard)),
            Attempt::Held(ttl) => ttl,
            Attempt::Busy => return Ok(None),
        };
        let Some(left) = time_left(deadline) else {
            return Ok(None);
        };
        let pause = match ttl {
            Some(ttl) => ttl.min(left),
            None => left,
        };
        tokio::select! {
            _ = tokio::time::timeout(pause, woken) => {}
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
