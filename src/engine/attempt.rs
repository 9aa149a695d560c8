//! One acquire attempt, for any kind of lock.
//!
//! Every script of one owner on one lock (of one kind) runs with that hold's
//! `ops` slot taken, so that a lost reply can be resolved by comparing the
//! hold count on Redis with ours. An attempt keeps the slot until it is
//! settled: if its caller stops waiting, the slot passes to the background
//! task that finishes it (`settle::FinishOnDrop`), and nothing else of that
//! owner on that lock runs in between. Every attempt, and every settlement,
//! counts as `Busy` for the client's shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::hold::Hold;
use crate::engine::kind::{Call, Grant, Patience};
use crate::engine::lease::expires_by;
use crate::engine::raw::{Held, RawLock};
use crate::engine::resolve;
use crate::engine::safety::Synced;
use crate::engine::script;
use crate::engine::settle::{FinishOnDrop, Unfinished};
use crate::error::Result;
use crate::naming;
use crate::owner::OwnerId;

/// What one acquire attempt found.
pub(crate) enum Attempt {
    /// Acquired, with the fencing token if the kind hands one out.
    Acquired(Held, Option<i64>),
    /// Held by another owner; `None` when the key has no TTL.
    Held(Option<Duration>),
    /// Nothing was sent: a previous operation of the same owner was still
    /// settling when the attempt's deadline came.
    Busy,
    /// Not acquired for want of replicas: the grant was not confirmed (and
    /// was taken back), or a grant on the same primary fell short a moment
    /// ago and nothing was sent. Worth another try at `retry_at`, or as
    /// soon as the deployment's view changes.
    Unconfirmed { synced: Synced, retry_at: Instant },
}

/// One attempt of `call` (the kind's scripts for `owner`'s field, built once
/// per acquisition) on `lock`. On success the hold is recorded, with `lease`
/// (renewed by the watchdog when `watchdog`). Waiting for the owner's `ops`
/// slot (a previous operation of the same owner still settling) ends at
/// `slot_deadline` with [`Attempt::Busy`].
pub(crate) async fn acquire_once(
    lock: &RawLock,
    call: &Call<'_>,
    owner: OwnerId,
    lease: Duration,
    watchdog: bool,
    slot_deadline: Option<Instant>,
) -> Result<Attempt> {
    let busy = call.engine.lifecycle.enter()?;
    let Some(hold) = call
        .engine
        .holds
        .take(call.kind, &lock.name, owner, slot_deadline)
        .await?
    else {
        return Ok(Attempt::Busy);
    };
    // Nothing has been sent yet; from here the slot belongs to this attempt
    // until it completes or is settled in the background, which gives it
    // back and retires the hold if nothing is held.
    let finish = FinishOnDrop::new(Unfinished::Acquire {
        lock: lock.clone(),
        hold: hold.clone(),
        busy,
    });
    let outcome = acquire_locked(lock, call, &hold, lease, watchdog).await;
    finish.complete();
    outcome
}

async fn acquire_locked(
    lock: &RawLock,
    call: &Call<'_>,
    hold: &Arc<Hold>,
    lease: Duration,
    watchdog: bool,
) -> Result<Attempt> {
    let engine = call.engine;
    let (writer, slot) = (engine.writer(call.key), naming::slot(call.key));
    // Judged from the deployment's view, before anything is sent: nothing
    // could be confirmed now, or the same primary fell short a moment ago.
    if let Some((synced, retry_at)) = engine.replica_sync.admit(writer, slot)? {
        return Ok(Attempt::Unconfirmed { synced, retry_at });
    }
    let sent_at = Instant::now();
    // A re-entry resets the key's TTL to this lease, maybe a shorter one.
    let before = (hold.count() > 0).then(|| hold.lease.shorten(sent_at, lease));

    // 1. What the script did: its reply, or, if the reply was lost, what
    //    the state says (read with a write the replicas acknowledge, so
    //    what they confirmed is known either way).
    let (grant, synced) = match engine.write(|| call.kind.acquire(call)).await {
        Ok((value, synced)) => match call.kind.grant(&value) {
            Some(grant) => (grant, synced),
            None => return Err(script::unexpected("acquire", &value)),
        },
        Err(e) if e.outcome_unknown() => Box::pin(resolve::unknown_acquire(call, hold, e)).await?,
        // Refused before anything was sent (the connection still reaches
        // an old primary): the TTL on Redis is what it was.
        Err(e @ crate::error::Error::NoPrimary(_)) => {
            if let Some(before) = before {
                hold.lease.unshorten(before);
            }
            return Err(call.acquire_error(e));
        }
        Err(e) => return Err(call.acquire_error(e)),
    };
    let token = match grant {
        Grant::Acquired { token } => token,
        Grant::Refused(ttl) => return Ok(Attempt::Held(refused_for(ttl))),
    };

    // 2. Whether to keep it: not when the replicas fell short (a failover
    //    now would lose it while we believe we hold it; Redisson's
    //    NoSyncedSlavesException), nor when the grant arrived after the
    //    lease it set could have run out (someone else may hold it by now).
    let retry_at = match synced {
        Synced::NotWaited => None,
        _ => Some(engine.replica_sync.note_acquire(writer, slot, &synced)),
    };
    let short = synced.is_short();
    if short || Instant::now() >= expires_by(sent_at, lease) {
        // A fair waiter taken back for want of replicas keeps its place.
        let undo = match short {
            true => *call,
            false => Call {
                patience: Patience::Once,
                ..*call
            },
        };
        let undone = Box::pin(resolve::give_back_one(&undo, hold)).await;
        return match retry_at {
            Some(retry_at) if short && undone => {
                tracing::info!(lock = %call.lock, ?synced, "acquire not confirmed by replicas; taken back");
                Ok(Attempt::Unconfirmed { synced, retry_at })
            }
            _ if short => Err(engine.replica_sync.not_synced("acquire", call.lock, synced)),
            _ => {
                tracing::warn!(lock = %call.lock, ?lease, "acquire confirmed after its lease; given back");
                Ok(Attempt::Held(Some(Duration::ZERO)))
            }
        };
    }

    // 3. Recorded (and renewed by the watchdog when `watchdog`).
    hold.on_acquired(call.kind, sent_at, lease, watchdog);
    if synced.is_for_now() {
        // A replica that could be promoted again once back lacks it.
        hold.put_at_risk("replica_left_out");
    }
    let held = Held::new(
        lock.engine.clone(),
        call.kind,
        hold.clone(),
        watchdog,
        synced.level(),
    );
    Ok(Attempt::Acquired(held, token))
}

/// How long a refused attempt may sleep, from the lock's PTTL.
fn refused_for(ttl: i64) -> Option<Duration> {
    match ttl {
        // A key without a TTL: only a message can end the wait.
        -1 => None,
        // No key, yet not acquired (the fair lock: someone else is first in
        // line): try again soon.
        ttl if ttl < 0 => Some(Duration::ZERO),
        ttl => Some(Duration::from_millis(ttl as u64)),
    }
}
