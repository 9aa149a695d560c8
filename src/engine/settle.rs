//! Settling what a caller left unfinished, for any kind of lock.
//!
//! * An acquire attempt whose caller stopped waiting: whether its script ran
//!   is read back (the hold count, ordered after the script on the same
//!   connection) and a hold it took is given back.
//! * An unlock whose caller stopped waiting: the same request is finished,
//!   replayed through its latch if it already ran.
//! * A waiter that leaves without the lock: the kind's give-up script runs
//!   (the fair lock leaves its queue).
//!
//! Each runs with the owner's `ops` slot, handed over by the abandoned
//! operation, so nothing else of that owner on that lock runs in between;
//! and each counts as `Busy`, so a shutdown waits for it.

use std::sync::Arc;

use crate::engine::hold::Hold;
use crate::engine::kind::{Call, Patience};
use crate::engine::lifecycle::Busy;
use crate::engine::raw::{RawLock, Unlocked};
use crate::engine::release::{release_locked, Slot};
use crate::engine::request::Request;
use crate::engine::resolve::give_back_untracked;
use crate::engine::script::ScriptCall;
use crate::error::{Error, Result};
use crate::owner::OwnerId;

/// An operation whose caller may stop waiting before it completes.
pub(crate) enum Unfinished {
    /// An acquire attempt, holding the `ops` slot: settle whether its script
    /// ran, and give the hold back if it did.
    Acquire {
        lock: RawLock,
        hold: Arc<Hold>,
        busy: Busy,
    },
    /// An unlock: finish the same request (replayed through its latch).
    Release {
        lock: RawLock,
        hold: Arc<Hold>,
        watchdog: bool,
        request: Request,
        /// Whether it already holds the `ops` slot.
        owns_slot: bool,
        busy: Busy,
    },
}

/// Finishes, in the background, an operation whose caller stopped waiting,
/// and hands it the `ops` slot the operation held, so nothing of the same
/// owner on the same lock runs in between.
pub(crate) struct FinishOnDrop(Option<Unfinished>);

impl FinishOnDrop {
    pub(crate) fn new(operation: Unfinished) -> Self {
        FinishOnDrop(Some(operation))
    }

    /// The release now holds the `ops` slot.
    pub(crate) fn took_slot(&mut self) {
        if let Some(Unfinished::Release { owns_slot, .. }) = &mut self.0 {
            *owns_slot = true;
        }
    }

    /// The operation completed and its `ops` slot went to someone else.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }

    /// The operation completed: give its `ops` slot back (an acquire's hold
    /// leaves the table if it holds nothing).
    pub(crate) fn complete(mut self) {
        match self.0.take() {
            Some(Unfinished::Acquire { lock, hold, .. }) => {
                lock.engine.holds.retire_if_done(&hold);
                hold.ops.add_permits(1);
            }
            Some(Unfinished::Release {
                hold,
                owns_slot: true,
                ..
            }) => hold.ops.add_permits(1),
            _ => {}
        }
    }
}

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        let Some(pending) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Nothing can talk to Redis: stop tracking; leases expire.
            match pending {
                Unfinished::Acquire { lock, hold, .. } => {
                    lock.engine.holds.retire_if_done(&hold);
                    hold.ops.add_permits(1);
                }
                Unfinished::Release {
                    lock,
                    hold,
                    watchdog,
                    owns_slot,
                    ..
                } => {
                    forget(&lock, &hold, watchdog);
                    if owns_slot {
                        hold.ops.add_permits(1);
                    }
                }
            }
            return;
        };
        match pending {
            Unfinished::Acquire { lock, hold, busy } => {
                runtime.spawn(async move {
                    let field = hold.field(&lock.engine.id);
                    let lease = lock.engine.config.lock_watchdog_timeout;
                    give_back_untracked(&lock.call(&field, lease, Patience::Once), &hold).await;
                    hold.ops.add_permits(1);
                    drop(busy);
                });
            }
            Unfinished::Release {
                lock,
                hold,
                watchdog,
                request,
                owns_slot,
                busy,
            } => {
                runtime.spawn(async move {
                    if !owns_slot {
                        match hold.ops.acquire().await {
                            Ok(slot) => slot.forget(),
                            Err(_) => return,
                        }
                    }
                    let (outcome, slot) = release_locked(&lock, &hold, watchdog, &request).await;
                    if let Err(e) = outcome {
                        tracing::warn!(lock = %hold.name, error = %e, "finishing an abandoned unlock failed");
                    }
                    if slot == Slot::Kept {
                        hold.ops.add_permits(1);
                    }
                    drop(busy);
                });
            }
        }
    }
}

/// Releases one hold recorded in `hold`. Safe to cancel: the unlock's request
/// id is fixed before anything is sent, and if the caller stops waiting (a
/// timeout around `unlock()`), a background task finishes the same request,
/// replayed through its latch if it already ran; a hold is never released
/// twice nor left in place and renewed forever.
pub(crate) async fn release(lock: &RawLock, hold: &Arc<Hold>, watchdog: bool) -> Result<Unlocked> {
    if hold.is_retired() && lock.engine.lifecycle.is_closing() {
        // Released by the client's shutdown already.
        return Err(Error::Shutdown);
    }
    let request = Request::new();
    // Armed before waiting for the slot: even a caller who gives up then
    // must not leave the hold in place.
    let mut finish = FinishOnDrop::new(Unfinished::Release {
        lock: lock.clone(),
        hold: hold.clone(),
        watchdog,
        request: request.clone(),
        owns_slot: false,
        busy: lock.engine.lifecycle.track(),
    });
    let slot = hold.ops.acquire().await.map_err(|_| Error::Shutdown);
    let Ok(slot) = slot else {
        finish.complete();
        return Err(Error::Shutdown);
    };
    slot.forget();
    finish.took_slot();
    let (outcome, slot) = release_locked(lock, hold, watchdog, &request).await;
    match slot {
        Slot::Kept => finish.complete(),
        Slot::PassedOn => finish.disarm(),
    }
    outcome
}

/// Drops one hold locally without telling Redis (no runtime to do it).
pub(crate) fn forget(lock: &RawLock, hold: &Arc<Hold>, watchdog: bool) {
    hold.on_released(watchdog);
    lock.engine.holds.retire_if_done(hold);
}

/// What a waiter that leaves without the lock sends: its kind's give-up
/// script (the fair lock leaves its queue), built with the acquisition's
/// other scripts.
struct GiveUp {
    lock: RawLock,
    owner: OwnerId,
    script: ScriptCall,
}

/// Runs a give-up after anything of that owner still settling (it takes the
/// owner's `ops` slot, unless `taken` says it holds it already).
async fn give_up(leave: GiveUp, taken: Option<Arc<Hold>>) {
    let GiveUp {
        lock,
        owner,
        script,
    } = leave;
    let hold = match taken {
        Some(hold) => hold,
        None => {
            let hold = lock.engine.holds.entry(lock.kind, &lock.name, owner);
            let Ok(slot) = hold.ops.acquire().await else {
                return;
            };
            slot.forget();
            hold
        }
    };
    if let Err(e) = lock.engine.write(|| script.clone()).await {
        tracing::warn!(lock = %lock.name, error = %e, "giving up a wait left a trace; it expires with its deadline");
    }
    lock.engine.holds.retire_if_done(&hold);
    hold.ops.add_permits(1);
}

/// Gives up a wait when dropped while armed: a waiter that stops waiting
/// (its future dropped) leaves nothing behind. Kinds without a give-up
/// script arm nothing.
pub(crate) struct GiveUpOnDrop(Option<GiveUp>);

impl GiveUpOnDrop {
    /// Armed with the kind's give-up for `call` (the acquisition of `owner`
    /// on `lock`), if it has one.
    pub(crate) fn new(lock: &RawLock, call: &Call<'_>, owner: OwnerId) -> Self {
        GiveUpOnDrop(call.kind.give_up(call).map(|script| GiveUp {
            lock: lock.clone(),
            owner,
            script,
        }))
    }

    /// Gives up now.
    pub(crate) async fn now(mut self) {
        if let Some(leave) = self.0.take() {
            give_up(leave, None).await;
        }
    }

    /// Gives up in the background: the caller's deadline has passed, and
    /// the give-up (its script, its `WAIT`, the wait for the owner's slot)
    /// is not the caller's to wait for. The owner's slot is taken now when
    /// it is free, so an acquisition the caller starts next on the same
    /// lock runs after the give-up (which would otherwise remove the queue
    /// place it just took); when something still settles, as when dropped.
    pub(crate) fn in_background(mut self) {
        let Some(leave) = self.0.take() else {
            return;
        };
        let hold = leave
            .lock
            .engine
            .holds
            .entry(leave.lock.kind, &leave.lock.name, leave.owner);
        let free = hold.ops.try_acquire().map(|slot| slot.forget()).is_ok();
        let taken = free.then_some(hold);
        let busy = leave.lock.engine.lifecycle.track();
        tokio::spawn(async move {
            give_up(leave, taken).await;
            drop(busy);
        });
    }

    /// The wait ended with the lock: nothing to give up.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        let Some(leave) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let busy = leave.lock.engine.lifecycle.track();
        runtime.spawn(async move {
            give_up(leave, None).await;
            drop(busy);
        });
    }
}
