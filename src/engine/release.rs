//! One release, for any kind of lock, with the hold's `ops` slot taken: the
//! kind's unlock script through an unlock latch
//! (`redisson_unlock_latch:{name}:<request-id>`, a [`Request`]), so that a
//! retry replays the first outcome instead of releasing twice; and giving
//! back holds Redis counts that this client does not. What happens when the
//! caller stops waiting is `settle`'s.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::engine::hold::Hold;
use crate::engine::kind::Patience;
use crate::engine::raw::{RawLock, Unlocked};
use crate::engine::request::{Confirm, Request, Target};
use crate::engine::safety::Synced;
use crate::engine::script;
use crate::engine::telemetry;
use crate::error::{Error, Result};
use crate::naming;

/// Who holds a hold's `ops` slot after a release.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Still the caller, who gives it back.
    Kept,
    /// A background task, which gives it back when done.
    PassedOn,
}

/// Releases one hold, with the hold's `ops` slot taken. After the script's
/// reply nothing here waits, so a cancelled caller can only leave it before
/// the bookkeeping, never halfway through.
///
/// A lost hold is released like any other (the script only touches this
/// owner's field, and the key may well still be ours), but the caller hears
/// [`Error::LockLost`]: it did not hold the lock throughout.
///
/// Returns what became of the slot: kept (the caller gives it back), or
/// passed on to a background drain of untracked holds, which gives it back
/// when done, so nothing of this owner on this lock runs meanwhile.
pub(crate) async fn release_locked(
    lock: &RawLock,
    hold: &Arc<Hold>,
    watchdog: bool,
    request: &Request,
) -> (Result<Unlocked>, Slot) {
    let span = telemetry::release_span(hold.subject());
    // Not boxed, as in `wait::acquire`.
    let (outcome, slot) = release_traced(lock, hold, watchdog, request)
        .instrument(span.clone())
        .await;
    telemetry::released(
        &span,
        match &outcome {
            Ok(Unlocked::Released) => "released",
            Ok(Unlocked::StillHeld) => "still_held",
            Err(Error::LockLost { .. }) => "lost",
            Err(Error::NotHeld { .. }) => "not_held",
            Err(_) => "error",
        },
    );
    (outcome, slot)
}

async fn release_traced(
    lock: &RawLock,
    hold: &Arc<Hold>,
    watchdog: bool,
    request: &Request,
) -> (Result<Unlocked>, Slot) {
    let engine = &lock.engine;
    let field = hold.field(&engine.id);
    if hold.count() == 0 {
        engine.holds.retire_if_done(hold);
        let err = Error::NotHeld {
            name: lock.name.to_string(),
            field,
        };
        return (Err(err), Slot::Kept);
    }
    let was_lost = hold.lease.is_lost();
    if was_lost && !hold.lease.is_gone() && hold.count() == 1 {
        // Noticed only now: the lease ran out before a renewal was
        // confirmed. (A renewal that found it gone reported it already.)
        telemetry::lost(hold.subject(), "lease_expired");
    }
    let lost = |outcome: Result<Unlocked>| match outcome {
        Ok(_) | Err(Error::NotHeld { .. }) if was_lost => Err(Error::LockLost {
            name: lock.name.to_string(),
        }),
        other => other,
    };
    let lease = hold.lease_after_release(watchdog, engine.config.lock_watchdog_timeout);
    let outcome = send_unlock(lock, &field, lease, request).await;
    let left = hold.on_released(watchdog);
    match &outcome {
        Ok((Unlocked::StillHeld, sent_at)) if left > 0 => {
            if lock.kind.unlock_resets_ttl() {
                hold.lease.confirm(*sent_at, lease);
            }
        }
        Ok((Unlocked::StillHeld, _)) => {
            // Redis counts holds this client no longer tracks (re-acquired
            // after a local loss, or an acquire whose outcome stayed
            // unknown). They are this owner's: give them back too, or the
            // lock would sit there unrenewed for a whole lease. The drain
            // takes over the `ops` slot and the hold stays in the table until
            // it is done, so a new acquire of this owner waits for it instead
            // of having its hold given back.
            let (lock, hold) = (lock.clone(), hold.clone());
            let busy = engine.lifecycle.track();
            tokio::spawn(async move {
                give_back_untracked(&lock, &hold).await;
                hold.ops.add_permits(1);
                drop(busy);
            });
            return (lost(outcome.map(|(unlocked, _)| unlocked)), Slot::PassedOn);
        }
        Ok((Unlocked::Released, _)) if left > 0 => {
            // Another release path freed it: the remaining guards have lost it.
            hold.lease.mark_gone();
        }
        Ok((Unlocked::Released, _)) => {}
        Err(Error::NotHeld { .. }) => {
            hold.lease.mark_gone();
        }
        Err(_) => {}
    }
    engine.holds.retire_if_done(hold);
    (lost(outcome.map(|(unlocked, _)| unlocked)), Slot::Kept)
}

/// What a release sends.
#[derive(Clone, Copy)]
pub(crate) enum Release {
    /// The kind's unlock, confirmed by the replicas (replayed until it is,
    /// then an error).
    Unlock,
    /// The kind's undo of a grant the replicas did not confirm, for a
    /// waiter with this patience; not waited for.
    Undo(Patience),
}

/// Sends the kind's unlock script for `field` as `request`: a lost reply is
/// replayed through its latch (see [`Request::send`]). Returns the outcome and
/// when the request was first sent: a replayed reply describes an execution
/// no earlier than that. A reply the replicas did not confirm is replayed
/// the same way, and is an error on the last attempt.
pub(crate) async fn send_unlock(
    lock: &RawLock,
    field: &str,
    lease: Duration,
    request: &Request,
) -> Result<(Unlocked, Instant)> {
    send_release(lock, field, lease, request, Release::Unlock).await
}

/// Sends a release of `field` as `request` (see [`send_unlock`]).
pub(crate) async fn send_release(
    lock: &RawLock,
    field: &str,
    lease: Duration,
    request: &Request,
    how: Release,
) -> Result<(Unlocked, Instant)> {
    let engine = &lock.engine;
    let (confirm, operation) = match how {
        Release::Unlock => (Confirm::Replay, "unlock"),
        Release::Undo(_) => (Confirm::Skip, "undo"),
    };
    let target = Target {
        operation,
        name: &lock.name,
        latch_key: naming::latch_name(lock.key(), request.id()),
        confirm,
    };
    let sent = request
        .send(engine, target, |latch| match how {
            Release::Unlock => lock
                .kind
                .unlock(&lock.call(field, lease, Patience::Once), latch),
            Release::Undo(patience) => lock.kind.undo(&lock.call(field, lease, patience), latch),
        })
        .await
        .map_err(|e| lock.wrong_type(e))?;
    if let short @ Synced::Short { .. } = sent.synced {
        return Err(engine.replica_sync.not_synced(operation, &lock.name, short));
    }
    let unlocked = match script::as_i64(&sent.reply) {
        Some(1) => Unlocked::Released,
        Some(0) => Unlocked::StillHeld,
        None if sent.reply.is_null() => {
            return Err(Error::NotHeld {
                name: lock.name.to_string(),
                field: field.to_string(),
            })
        }
        _ => return Err(script::unexpected(operation, &sent.reply)),
    };
    Ok((unlocked, sent.first_sent))
}

/// With the hold's `ops` slot taken: reads the owner's hold count on Redis
/// and releases whatever exceeds ours (acquires this client never recorded).
/// The read is ordered after any script this owner sent on the same
/// connection.
pub(crate) async fn give_back_untracked(lock: &RawLock, hold: &Arc<Hold>) {
    let engine = &lock.engine;
    let field = hold.field(&engine.id);
    // An abandoned acquire may still be queued for a batch: read after it.
    engine.after_abandoned(lock.key()).await;
    let count = lock
        .count_on_redis(&engine.reader(lock.key()), &field)
        .await;
    let extra = match count {
        Ok(count) => count - i64::from(hold.count()),
        Err(e) => {
            tracing::warn!(lock = %lock.name, error = %e, "could not check for untracked holds; any expire with their lease");
            0
        }
    };
    let lease = hold.lease_after_release(false, engine.config.lock_watchdog_timeout);
    for _ in 0..extra.clamp(0, 64) {
        tracing::info!(lock = %lock.name, "giving back a hold this client did not record");
        match send_unlock(lock, &field, lease, &Request::new()).await {
            Ok((Unlocked::StillHeld, _)) => {}
            Ok((Unlocked::Released, _)) => break,
            Err(e) => {
                tracing::warn!(lock = %lock.name, error = %e, "giving back an untracked hold failed; it expires with its lease");
                break;
            }
        }
    }
    engine.holds.retire_if_done(hold);
}
