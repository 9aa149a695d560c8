//! The client's local record of the locks it holds: one [`Hold`] per place
//! an owner's hold count lives on Redis (lock name, owner, and the kind's
//! [`CountPlace`]), with the hold count, the lease mode and the lease state.
//!
//! Holds are counted where Redis counts them, not per kind: an RLock, a fair
//! lock, a fenced lock and a non-reentrant lock of one name all write the
//! owner's field of the same hash, so one owner's holds of any of them are
//! one hold with one count (Redisson's: `{T: 2}` after a non-reentrant lock
//! and an RLock in one thread). A read hold and a write hold of one owner on
//! one read-write lock are two holds (the write field has its own name).
//! The watchdog renews from this table; guards release through it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::engine::kind::{CountPlace, LockKind};
use crate::engine::lease::LeaseState;
use crate::engine::telemetry;
use crate::error::{Error, Result};
use crate::owner::OwnerId;

/// One owner's holds on one lock, as seen by this client. Kept small: the
/// watchdog's table holds one per held lock.
pub(crate) struct Hold {
    pub(crate) name: Arc<str>,
    pub(crate) owner: OwnerId,
    /// Inline: one allocation per held lock, not two.
    pub(crate) lease: LeaseState,
    /// One slot: serializes this owner's scripts on this lock, so that an
    /// unknown outcome can be resolved by comparing the hold count on Redis
    /// with ours. A semaphore rather than a mutex so that an abandoned
    /// operation can hand its slot to the task that finishes it.
    pub(crate) ops: tokio::sync::Semaphore,
    state: Mutex<HoldState>,
}

struct HoldState {
    /// The kind whose renewal and release serve the hold: the kind of its
    /// first acquisition (every kind sharing a count place renews the same
    /// way, see [`Holds::entry`]).
    kind: &'static dyn LockKind,
    /// Holds this client believes it has (guards not yet released), of
    /// every kind that counts in this place.
    count: u32,
    /// How many of them were taken without an explicit lease.
    watchdog_holds: u32,
    /// Lease (ms) of the newest explicit-lease acquire, applied by partial
    /// unlocks once no watchdog hold is left; 0 for none. Milliseconds, not
    /// an `Option<Duration>`, to keep a held lock small.
    explicit_lease_ms: u64,
    /// Removed from the table: a new acquire must start a new `Hold`.
    retired: bool,
}

impl AsRef<LeaseState> for Hold {
    fn as_ref(&self) -> &LeaseState {
        &self.lease
    }
}

impl Hold {
    /// The kind that renews and releases this hold (see [`HoldState::kind`]).
    pub(crate) fn kind(&self) -> &'static dyn LockKind {
        self.state.lock().kind
    }

    /// This hold, as logs and metrics name it.
    pub(crate) fn subject(&self) -> telemetry::Subject<'_> {
        telemetry::Subject {
            kind: self.kind().name(),
            lock: &self.name,
            owner: self.owner,
        }
    }

    /// Puts the hold at risk, and says so once (see `telemetry`).
    pub(crate) fn put_at_risk(&self, reason: &'static str) {
        if self.lease.mark_at_risk() {
            telemetry::at_risk(self.subject(), reason);
        }
    }

    /// Records that Redis no longer has the hold, and says so once; true the
    /// first time.
    pub(crate) fn found_gone(&self) -> bool {
        let first = self.lease.mark_gone();
        if first {
            telemetry::lost(self.subject(), "gone");
        }
        first
    }

    /// The owner's hash field, as its kind names it.
    pub(crate) fn field(&self, client_id: &str) -> String {
        self.kind().field(client_id, self.owner)
    }

    pub(crate) fn count(&self) -> u32 {
        self.state.lock().count
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.state.lock().retired
    }

    /// Records a confirmed acquire of `kind` sent at `sent_at`.
    pub(crate) fn on_acquired(
        &self,
        kind: &'static dyn LockKind,
        sent_at: Instant,
        lease: Duration,
        watchdog: bool,
    ) {
        let mut s = self.state.lock();
        if s.count == 0 {
            s.kind = kind;
        }
        s.count += 1;
        if s.count == 1 {
            telemetry::held(s.kind.name(), true);
        }
        if watchdog {
            s.watchdog_holds += 1;
        } else {
            s.explicit_lease_ms = lease.as_millis().clamp(1, u64::MAX as u128) as u64;
        }
        drop(s);
        self.lease.confirm(sent_at, lease);
    }

    /// From now on every hold of this owner is on an explicit `lease`:
    /// never renewed (a multi lock's members once all are held).
    pub(crate) fn set_explicit_lease(&self, lease: Duration) {
        let mut s = self.state.lock();
        s.watchdog_holds = 0;
        s.explicit_lease_ms = lease.as_millis().clamp(1, u64::MAX as u128) as u64;
    }

    /// Forgets one hold; returns how many are left.
    pub(crate) fn on_released(&self, watchdog: bool) -> u32 {
        let mut s = self.state.lock();
        if s.count == 1 {
            telemetry::held(s.kind.name(), false);
        }
        s.count = s.count.saturating_sub(1);
        if watchdog {
            s.watchdog_holds = s.watchdog_holds.saturating_sub(1);
        }
        s.count
    }

    /// Which kind of hold a release without a guard should give up: an
    /// explicit-lease hold first, so the watchdog keeps renewing while any
    /// watchdog hold remains.
    pub(crate) fn next_release_is_watchdog(&self) -> bool {
        let s = self.state.lock();
        s.count <= s.watchdog_holds
    }

    /// The lease a partial unlock re-applies, after releasing one hold of the
    /// given kind: the watchdog timeout while watchdog holds remain, otherwise
    /// the newest explicit lease (Redisson's `internalLockLeaseTime`).
    pub(crate) fn lease_after_release(
        &self,
        watchdog: bool,
        watchdog_timeout: Duration,
    ) -> Duration {
        let s = self.state.lock();
        let watchdog_left = s.watchdog_holds.saturating_sub(u32::from(watchdog));
        match (watchdog_left, s.explicit_lease_ms) {
            (0, ms) if ms > 0 => Duration::from_millis(ms),
            _ => watchdog_timeout,
        }
    }

    fn renewable(&self) -> bool {
        let s = self.state.lock();
        s.count > 0 && s.watchdog_holds > 0 && !s.retired
    }
}

/// (count place, lock name, owner).
type HoldKey = (CountPlace, Arc<str>, OwnerId);

/// All holds of one client.
#[derive(Default)]
pub(crate) struct Holds {
    map: Mutex<HashMap<HoldKey, Arc<Hold>>>,
}

impl Holds {
    /// The live hold of `owner` where `kind` counts on `name`, created
    /// empty if there is none: shared by every kind that counts in the same
    /// place. Take its `ops` slot, then [`Holds::admit`] it before use.
    pub(crate) fn entry(
        &self,
        kind: &'static dyn LockKind,
        name: &Arc<str>,
        owner: OwnerId,
    ) -> Arc<Hold> {
        self.map
            .lock()
            .entry((kind.count_place(), name.clone(), owner))
            .or_insert_with(|| {
                Arc::new(Hold {
                    name: name.clone(),
                    owner,
                    lease: LeaseState::new(),
                    ops: tokio::sync::Semaphore::new(1),
                    state: Mutex::new(HoldState {
                        kind,
                        count: 0,
                        watchdog_holds: 0,
                        explicit_lease_ms: 0,
                        retired: false,
                    }),
                })
            })
            .clone()
    }

    /// The hold of `owner` where `kind` counts on `name`, with its `ops`
    /// slot taken (waited for until `slot_deadline`; `None` when it passed),
    /// ready for an acquisition of `kind`: a retired hold is replaced by a
    /// fresh one. The slot is the caller's from then on (the permit is
    /// forgotten): it gives it back with `hold.ops.add_permits(1)`.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] for a re-entry into a hold that was lost;
    /// [`Error::InvalidArgument`] when the owner holds the same field
    /// through a kind with another protocol (see [`Holds::entry`]), or
    /// holds what [`LockKind::refused_while_holding`] names; nothing is
    /// sent then. [`Error::Shutdown`] once the client closes.
    pub(crate) async fn take(
        &self,
        kind: &'static dyn LockKind,
        name: &Arc<str>,
        owner: OwnerId,
        slot_deadline: Option<Instant>,
    ) -> Result<Option<Arc<Hold>>> {
        if let Some((other, why)) = kind.refused_while_holding() {
            let holding = self
                .get(other, name, owner)
                .is_some_and(|hold| hold.count() > 0 && hold.kind().name() == other.name());
            if holding {
                return Err(Error::InvalidArgument(format!(
                    "owner {owner} on `{name}`: {why}"
                )));
            }
        }
        loop {
            let hold = self.entry(kind, name, owner);
            let slot = match slot_deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, hold.ops.acquire()).await
                {
                    Ok(slot) => slot,
                    Err(_) => return Ok(None),
                },
                None => hold.ops.acquire().await,
            };
            let slot = slot.map_err(|_| Error::Shutdown)?;
            if hold.is_retired() {
                continue;
            }
            if hold.lease.is_lost() {
                if hold.count() > 0 {
                    // The flow was told it lost the lock: it releases what
                    // it has before taking the lock again.
                    return Err(Error::LockLost {
                        name: name.to_string(),
                    });
                }
                // Nothing held: start afresh with a new lease state.
                self.retire(&hold);
                continue;
            }
            let held = hold.kind();
            if hold.count() > 0 && held.renewal().name != kind.renewal().name {
                // The read lock and the RLock write the same field of one
                // hash with different protocols (Redisson's read acquire
                // would overwrite the count, redisson#4023): refused, nothing
                // sent.
                return Err(Error::InvalidArgument(format!(
                    "owner {owner} holds `{name}` as a {} lock, and a {} lock of the same name \
                     writes the same hash field with another protocol (Redisson would \
                     overwrite the hold count, redisson#4023); release it first",
                    held.name(),
                    kind.name()
                )));
            }
            slot.forget();
            return Ok(Some(hold));
        }
    }

    /// The live hold of `owner` where `kind` counts on `name`, if this
    /// client has one (it may have been taken through another kind that
    /// counts in the same place).
    pub(crate) fn get(
        &self,
        kind: &'static dyn LockKind,
        name: &Arc<str>,
        owner: OwnerId,
    ) -> Option<Arc<Hold>> {
        self.map
            .lock()
            .get(&(kind.count_place(), name.clone(), owner))
            .cloned()
    }

    /// Removes the hold from the table once it holds nothing. A lost hold
    /// stays until its guards are released: it may still be this owner's on
    /// Redis, and is renewed until the renewal finds it gone. Call with its
    /// `ops` slot taken.
    pub(crate) fn retire_if_done(&self, hold: &Arc<Hold>) {
        if hold.count() == 0 {
            self.retire(hold);
        }
    }

    fn retire(&self, hold: &Arc<Hold>) {
        let mut map = self.map.lock();
        let place = {
            let mut s = hold.state.lock();
            s.retired = true;
            s.kind.count_place()
        };
        let key = (place, hold.name.clone(), hold.owner);
        if map.get(&key).is_some_and(|h| Arc::ptr_eq(h, hold)) {
            map.remove(&key);
        }
    }

    /// Holds the watchdog must renew now: every watchdog hold whose field
    /// Redis may still have, lost ones included (see `lease`).
    pub(crate) fn renewable(&self) -> Vec<Arc<Hold>> {
        self.map
            .lock()
            .values()
            .filter(|h| h.renewable() && !h.lease.is_gone())
            .cloned()
            .collect()
    }

    /// Every hold of one lock name (any owner).
    pub(crate) fn of_name(&self, name: &str) -> Vec<Arc<Hold>> {
        self.map
            .lock()
            .values()
            .filter(|h| &*h.name == name)
            .cloned()
            .collect()
    }

    /// Every hold of `owner` where `kind` counts (any lock name).
    pub(crate) fn of_owner(&self, kind: &'static dyn LockKind, owner: OwnerId) -> Vec<Arc<Hold>> {
        let place = kind.count_place();
        self.map
            .lock()
            .iter()
            .filter(|((p, _, o), _)| *p == place && *o == owner)
            .map(|(_, hold)| hold.clone())
            .collect()
    }

    /// Every hold in the table.
    pub(crate) fn all(&self) -> Vec<Arc<Hold>> {
        self.map.lock().values().cloned().collect()
    }

    /// Number of holds in the table.
    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }
}
