//! Watching who holds a lock, as a stream of its holders each time they
//! change. Woken by every message on the lock's own channel (through the
//! hub's observer notification, so a waiter's wake-up is never taken), and
//! read again every `recheck_interval`: an acquisition, or a holder whose
//! lease ran out, sends no message.

use std::time::Duration;

use futures::Stream;

use crate::engine::hub::Subscription;
use crate::engine::raw::{Holder, RawLock};
use crate::error::{Error, Result};

struct Watch {
    lock: RawLock,
    subscription: Option<Subscription>,
    last: Option<Vec<Holder>>,
    /// After an error, wait a recheck period before reading again.
    pause: bool,
    /// After a message found the lock free, the next reads come sooner
    /// (doubling up to the recheck period): the waiter it woke takes the
    /// lock without a message of its own.
    follow_up: Option<Duration>,
    ended: bool,
}

/// The holders of `lock` now, then each time they change.
pub(crate) fn holders(lock: RawLock) -> impl Stream<Item = Result<Vec<Holder>>> + Send + 'static {
    let watch = Watch {
        lock,
        subscription: None,
        last: None,
        pause: false,
        follow_up: None,
        ended: false,
    };
    futures::stream::unfold(watch, |mut w| async move {
        if w.ended {
            return None;
        }
        let recheck = w
            .lock
            .engine
            .config
            .recheck_interval
            .max(Duration::from_millis(10));
        loop {
            if std::mem::take(&mut w.pause) {
                tokio::time::sleep(recheck).await;
            }
            let outcome = next_change(&mut w, recheck).await;
            if let Some(outcome) = outcome {
                match &outcome {
                    Ok(holders) => w.last = Some(holders.clone()),
                    Err(Error::Shutdown) => w.ended = true,
                    Err(_) => w.pause = true,
                }
                return Some((outcome, w));
            }
        }
    })
}

/// One read of the holders: `Some` when they changed (or the read failed),
/// `None` after waiting for the next message or recheck.
async fn next_change(w: &mut Watch, recheck: Duration) -> Option<Result<Vec<Holder>>> {
    if let Err(e) = w.lock.engine.ensure_open() {
        return Some(Err(e));
    }
    let subscription = match w.subscription.take() {
        Some(subscription) => subscription,
        None => {
            let engine = &w.lock.engine;
            let Some(channel) = w.lock.kind.channel(&w.lock.name, "") else {
                // A kind without a channel is read every recheck.
                return read_or_wait(w, None, recheck).await;
            };
            match engine
                .hub
                .join(
                    &channel,
                    w.lock.kind.wake(),
                    engine.config.subscription_timeout,
                )
                .await
            {
                Ok(subscription) => subscription,
                Err(e) => return Some(Err(e)),
            }
        }
    };
    let outcome = read_or_wait(w, Some(&subscription), recheck).await;
    w.subscription = Some(subscription);
    outcome
}

async fn read_or_wait(
    w: &mut Watch,
    subscription: Option<&Subscription>,
    recheck: Duration,
) -> Option<Result<Vec<Holder>>> {
    // Enabled before the read: a message sent during it is not missed.
    let observed = subscription.map(|s| s.observed());
    tokio::pin!(observed);
    if let Some(observed) = observed.as_mut().as_pin_mut() {
        observed.enable();
    }
    let read = w.lock.holders().await;
    if let Ok(holders) = &read {
        if !holders.is_empty() {
            w.follow_up = None;
        }
    }
    match read {
        Ok(holders) if w.last.as_ref() != Some(&holders) => Some(Ok(holders)),
        Ok(_) => {
            let limit = w.follow_up.unwrap_or(recheck);
            let messaged = match observed.as_pin_mut() {
                Some(observed) => tokio::time::timeout(limit, observed).await.is_ok(),
                None => {
                    tokio::time::sleep(limit).await;
                    false
                }
            };
            w.follow_up = match (messaged, w.follow_up) {
                (true, _) => Some(FIRST_FOLLOW_UP),
                (false, Some(after)) if after * 2 < recheck => Some(after * 2),
                _ => None,
            };
            None
        }
        Err(e) => Some(Err(e)),
    }
}

/// The first read after a message that found the lock free.
const FIRST_FOLLOW_UP: Duration = Duration::from_millis(5);
