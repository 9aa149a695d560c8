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

use fred::interfaces::KeysInterface;
use tokio::time::Instant;

use crate::engine::hold::Hold;
use crate::engine::kind::{Grant, Patience};
use crate::engine::lease::{expires_by, lease_millis};
use crate::engine::raw::{Held, RawLock};
use crate::engine::release::{give_back_untracked, send_release, Release};
use crate::engine::request::Request;
use crate::engine::safety::Synced;
use crate::engine::script;
use crate::engine::settle::{FinishOnDrop, Unfinished};
use crate::engine::telemetry;
use crate::error::{Error, Result};
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

/// What reading the state said about an acquire whose reply was lost.
enum Resolved {
    /// The script ran and took the lock (or one more hold of it); the
    /// token it handed out, for kinds with one.
    Taken(Option<i64>),
    /// Someone holds it; the lock's PTTL.
    Held(i64),
    /// Nobody holds it: the script has not run.
    Free,
}

/// One acquire attempt for `owner`. On success the hold is recorded (and
/// renewed by the watchdog when `lease` is `None`). Waiting for the owner's
/// `ops` slot (a previous operation of the same owner still settling) ends at
/// `slot_deadline` with [`Attempt::Busy`]. `patience` is the whole
/// acquisition's, for kinds that queue with it.
pub(crate) async fn acquire_once(
    lock: &RawLock,
    owner: OwnerId,
    lease: Option<Duration>,
    slot_deadline: Option<Instant>,
    patience: Patience,
) -> Result<Attempt> {
    let busy = lock.engine.lifecycle.enter()?;
    if let Some(refusal) = lock.kind.refuse(&lock.engine, &lock.name, owner) {
        return Err(refusal);
    }
    let watchdog = lease.is_none();
    let lease = lease.unwrap_or(lock.engine.config.lock_watchdog_timeout);
    lease_millis(lease, "lease")?;
    let Some(hold) = lock
        .engine
        .holds
        .take(lock.kind, &lock.name, owner, slot_deadline)
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
    let outcome = acquire_locked(lock, &hold, lease, watchdog, patience).await;
    finish.complete();
    outcome
}

async fn acquire_locked(
    lock: &RawLock,
    hold: &Arc<Hold>,
    lease: Duration,
    watchdog: bool,
    patience: Patience,
) -> Result<Attempt> {
    let engine = &lock.engine;
    let field = hold.field(&engine.id);
    let (writer, slot) = (engine.writer(lock.key()), naming::slot(lock.key()));
    // Judged from the deployment's view, before anything is sent: nothing
    // could be confirmed now, or the same primary fell short a moment ago.
    match engine.replica_sync.admit(writer, slot) {
        Ok(None) => {}
        Ok(Some((synced, retry_at))) => {
            return Ok(Attempt::Unconfirmed { synced, retry_at });
        }
        Err(e) => {
            return Err(e);
        }
    }
    let sent_at = Instant::now();
    if hold.count() > 0 {
        // A re-entry resets the key's TTL to this lease, maybe a shorter one.
        hold.lease.shorten(sent_at, lease);
    }
    let call = || lock.kind.acquire(&lock.call(&field, lease, patience));
    let (grant, synced) = match engine.write(call).await {
        Ok((value, synced)) => match lock.kind.grant(&value) {
            Some(grant) => (grant, synced),
            None => {
                return Err(script::unexpected("acquire", &value));
            }
        },
        // Whether the replicas have it stays unknown here; the watchdog's
        // synced renewals cover it from the next cycle.
        Err(e) if e.outcome_unknown() => {
            match Box::pin(resolve_acquire(lock, hold, &field, &e)).await {
                Ok(Resolved::Taken(token)) => (Grant::Acquired { token }, Synced::NotWaited),
                Ok(Resolved::Held(ttl)) => (Grant::Refused(ttl), Synced::NotWaited),
                // It did not run, but after a timeout or a lost connection an
                // old copy might still arrive: the error goes to the caller,
                // as in Redisson.
                Ok(Resolved::Free) => {
                    return Err(e);
                }
                Err(e) => {
                    return Err(e);
                }
            }
        }
        Err(e) => {
            return Err(lock.acquire_error(e, hold.owner));
        }
    };
    if let Grant::Acquired { .. } = grant {
        if synced != Synced::NotWaited {
            let retry_at = engine.replica_sync.note_acquire(writer, slot, &synced);
            if synced.is_short() {
                // Taken on the primary only: a failover now would lose it
                // while we believe we hold it. Taken back (a fair waiter
                // keeps its place), and the caller decides whether to try
                // again (Redisson's NoSyncedSlavesException handling).
                let undone = Box::pin(give_back_one(lock, hold, &field, patience)).await;
                if !undone {
                    return Err(engine
                        .replica_sync
                        .not_synced("acquire", &lock.name, synced));
                }
                tracing::info!(lock = %lock.name, ?synced, "acquire not confirmed by replicas; taken back");
                return Ok(Attempt::Unconfirmed { synced, retry_at });
            }
        }
    }
    match grant {
        Grant::Acquired { .. } if Instant::now() >= expires_by(sent_at, lease) => {
            // The grant arrived after the lease it set could have run
            // out: someone else may hold the lock by now. Not an
            // acquisition: give back what may still be ours, and let the
            // caller try again within its budget.
            tracing::warn!(lock = %lock.name, ?lease, "acquire confirmed after its lease; giving it back");
            Box::pin(give_back_one(lock, hold, &field, Patience::Once)).await;
            Ok(Attempt::Held(Some(Duration::ZERO)))
        }
        Grant::Acquired { token } => {
            hold.on_acquired(lock.kind, sent_at, lease, watchdog);
            if synced == Synced::NotWaited && engine.replica_sync.is_enabled() {
                // Resolved by reading the hold count: whether the
                // replicas have it is unknown until the next confirmed
                // renewal.
                if hold.lease.mark_at_risk() {
                    telemetry::at_risk(hold.subject(), "acquire_unconfirmed");
                }
            }
            let level = synced.level();
            telemetry::acquired_at(lock.kind.name(), level);
            Ok(Attempt::Acquired(
                Held::new(
                    lock.engine.clone(),
                    lock.kind,
                    hold.clone(),
                    watchdog,
                    level,
                ),
                token,
            ))
        }
        Grant::Refused(ttl) => {
            Ok(Attempt::Held(match ttl {
                // A key without a TTL: only a message can end the wait.
                -1 => None,
                // No key, yet not acquired (the fair lock: someone else
                // is first in line): try again soon.
                ttl if ttl < 0 => Some(Duration::ZERO),
                ttl => Some(Duration::from_millis(ttl as u64)),
            }))
        }
    }
}

/// With the `ops` slot taken: takes back one acquisition that Redis counted
/// but this client will not record (no replica confirmed it, or it was
/// confirmed too late), with the kind's undo for a waiter of `patience` (a
/// fair waiter keeps its place). If the undo's outcome is unknown, whatever
/// Redis counts beyond our holds is given back. False if the undo failed.
async fn give_back_one(lock: &RawLock, hold: &Arc<Hold>, field: &str, patience: Patience) -> bool {
    // The holds left after the undo keep their own lease.
    let remaining = hold.lease_after_release(false, lock.engine.config.lock_watchdog_timeout);
    let undo = Release::Undo(patience);
    match send_release(lock, field, remaining, &Request::new(), undo).await {
        Ok(_) => true,
        // Expired meanwhile: nothing of ours is left to give back.
        Err(Error::NotHeld { .. }) => true,
        Err(e) => {
            tracing::warn!(lock = %lock.name, error = %e, "undoing an acquire failed; checking what is left");
            give_back_untracked(lock, hold).await;
            false
        }
    }
}

/// The reply to an acquire was lost. Reads the hold count on the same
/// connection (so after the script, if it was sent): one more than ours means
/// the script ran.
async fn resolve_acquire(
    lock: &RawLock,
    hold: &Hold,
    field: &str,
    cause: &Error,
) -> Result<Resolved> {
    let unknown = |e: Error| Error::OutcomeUnknown {
        operation: "acquire",
        name: lock.name.to_string(),
        cause: format!("{cause}; then {e}"),
    };
    let redis = lock.engine.reader(lock.key());
    let count = lock.count_on_redis(&redis, field).await.map_err(unknown)?;
    let ours = i64::from(hold.count());
    tracing::info!(lock = %lock.name, count, ours, "resolved an acquire whose reply was lost");
    if count == ours + 1 {
        // Held by us, so nobody else can have advanced the token since.
        let token = match lock.kind.token_key(&lock.name) {
            Some(key) => {
                let token: Option<i64> = lock.query(redis.get(key)).await.map_err(unknown)?;
                token
            }
            None => None,
        };
        return Ok(Resolved::Taken(token));
    }
    if count != ours {
        return Err(unknown(Error::redis(format!(
            "hold count on Redis is {count}, expected {ours} or {}",
            ours + 1
        ))));
    }
    if ours > 0 {
        // A re-entry that did not run: the lock is still ours alone.
        return Ok(Resolved::Free);
    }
    let ttl: i64 = lock.query(redis.pttl(lock.key())).await.map_err(unknown)?;
    Ok(if ttl == -2 {
        Resolved::Free
    } else {
        Resolved::Held(ttl)
    })
}
