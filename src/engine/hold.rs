//! The client's local record of the locks it holds: one [`Hold`] per
//! (kind, lock name, owner), with the hold count, the lease mode and the lease
//! state. The kind is part of the key: a read hold and a write hold of one
//! owner on one read-write lock are two holds. The watchdog renews from this
//! table; guards release through it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::engine::kind::LockKind;
use crate::engine::lease::LeaseState;
use crate::engine::telemetry;
use crate::OwnerId;

/// One owner's holds on one lock, as seen by this client. Kept small: the
/// watchdog's table holds one per held lock.
pub(crate) struct Hold {
    pub(crate) kind: &'static dyn LockKind,
    pub(crate) name: Arc<str>,
    pub(crate) owner: OwnerId,
    pub(crate) lease: LeaseState,
    /// One slot: serializes this owner's scripts on this lock, so that an
    /// unknown outcome can be resolved by comparing the hold count on Redis
    /// with ours. A semaphore rather than a mutex so that an abandoned
    /// operation can hand its slot to the task that finishes it.
    pub(crate) ops: tokio::sync::Semaphore,
    state: Mutex<HoldState>,
}

#[derive(Default)]
struct HoldState {
    /// Holds this client believes it has (guards not yet released).
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

impl Hold {
    /// The owner's hash field, as its kind names it.
    pub(crate) fn field(&self, client_id: &str) -> String {
        self.kind.field(client_id, self.owner)
    }

    pub(crate) fn count(&self) -> u32 {
        self.state.lock().count
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.state.lock().retired
    }

    /// Records a confirmed acquire sent at `sent_at`.
    pub(crate) fn on_acquired(&self, sent_at: Instant, lease: Duration, watchdog: bool) {
        let mut s = self.state.lock();
        s.count += 1;
        if s.count == 1 {
            telemetry::held(self.kind, true);
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
            telemetry::held(self.kind, false);
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

/// Whether a new acquire may use a hold.
pub(crate) enum Admit {
    Yes,
    /// Retired: take a fresh entry from the table.
    Retired,
    /// Lost while still held: re-entry is refused with `LockLost`.
    Lost,
}

/// (kind, lock name, owner); the kind by its one-byte id.
type HoldKey = (u8, Arc<str>, OwnerId);

fn kind_key(kind: &'static dyn LockKind) -> u8 {
    kind.id()
}

/// All holds of one client.
#[derive(Default)]
pub(crate) struct Holds {
    map: Mutex<HashMap<HoldKey, Arc<Hold>>>,
}

impl Holds {
    /// The live hold of `owner` on `name` (of `kind`), created empty if there
    /// is none. Take its `ops` slot, then [`Holds::admit`] it before use.
    pub(crate) fn entry(
        &self,
        kind: &'static dyn LockKind,
        name: &Arc<str>,
        owner: OwnerId,
    ) -> Arc<Hold> {
        self.map
            .lock()
            .entry((kind_key(kind), name.clone(), owner))
            .or_insert_with(|| {
                Arc::new(Hold {
                    kind,
                    name: name.clone(),
                    owner,
                    lease: LeaseState::new(),
                    ops: tokio::sync::Semaphore::new(1),
                    state: Mutex::new(HoldState::default()),
                })
            })
            .clone()
    }

    /// With the hold's `ops` lock taken: whether a new acquire may use it.
    pub(crate) fn admit(&self, hold: &Arc<Hold>) -> Admit {
        if hold.is_retired() {
            return Admit::Retired;
        }
        if hold.lease.is_lost() {
            if hold.count() > 0 {
                // The flow was told it lost the lock: it releases what it
                // has before taking the lock again.
                return Admit::Lost;
            }
            // Nothing held: start afresh with a new lease state.
            self.retire(hold);
            return Admit::Retired;
        }
        Admit::Yes
    }

    /// The live hold of `owner` on `name` (of `kind`), if this client has one.
    pub(crate) fn get(
        &self,
        kind: &'static dyn LockKind,
        name: &Arc<str>,
        owner: OwnerId,
    ) -> Option<Arc<Hold>> {
        self.map
            .lock()
            .get(&(kind_key(kind), name.clone(), owner))
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
        hold.state.lock().retired = true;
        let key = (kind_key(hold.kind), hold.name.clone(), hold.owner);
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

    /// Every hold of `owner` of `kind` (any lock name).
    pub(crate) fn of_owner(&self, kind: &'static dyn LockKind, owner: OwnerId) -> Vec<Arc<Hold>> {
        let id = kind_key(kind);
        self.map
            .lock()
            .iter()
            .filter(|((k, _, o), _)| *k == id && *o == owner)
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
