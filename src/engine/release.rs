//! One release, for any kind of lock, with the hold's `ops` slot taken: the
//! kind's unlock sent once as a replayable request (`unlock`), then the
//! books: the hold count, the lease the remaining holds keep, a lock found
//! lost, and holds Redis counts that this client does not (given back by
//! `resolve`). What happens when the caller stops waiting is `settle`'s.

use std::sync::Arc;

use tracing::Instrument;

use crate::engine::hold::Hold;
use crate::engine::kind::Patience;
use crate::engine::raw::{RawLock, Unlocked};
use crate::engine::request::Request;
use crate::engine::resolve::give_back_untracked;
use crate::engine::telemetry;
use crate::engine::unlock::send_unlock;
use crate::error::{Error, Result};

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
    let outcome = send_unlock(&lock.call(&field, lease, Patience::Once), request).await;
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
                let field = hold.field(&lock.engine.id);
                let call = lock.call(&field, lease, Patience::Once);
                give_back_untracked(&call, &hold).await;
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
