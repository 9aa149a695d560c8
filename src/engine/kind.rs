//! How a lock object describes itself to the engine.
//!
//! The engine knows how to attempt, wait, release, settle and renew; it does
//! not know any Redisson object. Each object kind (RLock, fair lock, read
//! lock, write lock, ...) is a stateless [`LockKind`]: the scripts it runs and
//! the keys and arguments it passes them, the channel its waiters listen on
//! and how a message there wakes them, how its holds are renewed, and what a
//! waiter that gives up must clean up.

use std::time::Duration;

use fred::types::Value;

use crate::engine::hub::Wake;
use crate::engine::script::{Latch, Script, ScriptCall};
use crate::engine::Engine;
use crate::error::Error;
use crate::owner::OwnerId;

/// One kind of lock object.
pub(crate) trait LockKind: Send + Sync + 'static {
    /// Short name, for logs.
    fn name(&self) -> &'static str;

    /// The Redis key the lock `lock` lives in, which its scripts' first key
    /// and every key derived from it (the unlock latch, the hash slot) go
    /// by. The lock's own name for every kind but the group lock, whose name
    /// also lists its values (`group[value,...]`): one hold per value set.
    fn key<'a>(&self, lock: &'a str) -> &'a str {
        lock
    }

    /// The hash fields of [`LockKind::key`] that tell `field`'s hold count,
    /// read together; [`LockKind::hold_count`] reads their values. By
    /// default the owner's field itself, whose value is the count.
    fn count_fields(&self, _lock: &str, field: &str) -> Vec<String> {
        vec![field.to_string()]
    }

    /// `field`'s hold count from the values of [`LockKind::count_fields`];
    /// 0 when not held.
    fn hold_count(&self, _field: &str, values: &[Option<String>]) -> i64 {
        values
            .first()
            .and_then(|v| v.as_deref())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Where this kind keeps an owner's hold count: kinds with the same
    /// place write the same field of the same hash for one lock name and
    /// owner, so the client counts their holds together, as Redis does.
    fn count_place(&self) -> CountPlace {
        CountPlace::OwnerField
    }

    /// The hash field that identifies `owner` in the lock: Redisson's
    /// `lockName` (`<client-id>:<owner-id>`), with a suffix for some kinds.
    fn field(&self, client_id: &str, owner: OwnerId) -> String {
        crate::naming::field_name(client_id, owner)
    }

    /// The channel a waiter with this `field` listens on; `None` for a kind
    /// without pub/sub (the spin lock), whose waiters poll with a back-off.
    fn channel(&self, lock: &str, field: &str) -> Option<String>;

    /// How a message on that channel wakes local waiters.
    fn wake(&self) -> Wake {
        Wake::OneOrAll
    }

    /// One acquire attempt. Its reply, read by [`LockKind::grant`]: by
    /// default nil when acquired, else the lock's PTTL.
    fn acquire(&self, call: &Call) -> ScriptCall;

    /// Reads an acquire reply; `None` for a reply of an unexpected shape.
    fn grant(&self, reply: &Value) -> Option<Grant> {
        match reply {
            Value::Null => Some(Grant::Acquired { token: None }),
            other => crate::engine::script::as_i64(other).map(Grant::Refused),
        }
    }

    /// Where the token of an acquisition whose reply was lost can be read
    /// back, once it is known to have run (the fenced lock's counter: no one
    /// else can increment it while this owner holds the lock).
    fn token_key(&self, _lock: &str) -> Option<String> {
        None
    }

    /// One release through the unlock latch `latch`. Its reply: 1 released,
    /// 0 still held (one hold fewer), nil not held by this field.
    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall;

    /// Takes back one acquisition the replicas did not confirm, through the
    /// unlock latch `latch`; reply as [`LockKind::unlock`]'s. By default the
    /// kind's unlock (which tells the waiters: the lock is free). A kind that
    /// queues puts the owner back at the head of its queue instead, so an
    /// unconfirmed grant costs the waiter no place and wakes nobody.
    fn undo(&self, call: &Call, latch: &Latch) -> ScriptCall {
        self.unlock(call, latch)
    }

    /// Whether a partial release sets the key's TTL to `call.lease_ms` (the
    /// read lock's recomputes it from its other holds instead).
    fn unlock_resets_ttl(&self) -> bool {
        true
    }

    /// Deletes the lock whoever holds it and wakes its waiters; with
    /// `only_while`, a hash field, only while that field is in the lock (an
    /// operator's precondition: the holder they inspected still holds it).
    /// Reply: 1 a lock was deleted, 0 there was none (or not that holder's).
    fn force_unlock(&self, engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall;

    /// How held locks of this kind are renewed by the watchdog: by default
    /// Redisson's LockTask, for a hold that is a field of the lock's hash.
    fn renewal(&self) -> &'static Renewal {
        &FIELD_RENEWAL
    }

    /// What a waiter that gives up (deadline passed, future dropped) runs to
    /// leave no trace, for kinds whose waiters leave state on Redis (a queue
    /// entry): the fair lock's `acquireFailed`.
    fn give_up(&self, _call: &Call) -> Option<ScriptCall> {
        None
    }

    /// How `is_locked` asks Redis whether the lock is held in this kind's
    /// sense (Redisson's `isLocked()`).
    fn locked_when(&self) -> LockedWhen {
        LockedWhen::KeyExists
    }

    /// Whether a field of the lock's hash is a holder of this kind, and its
    /// `<client-id>:<owner-id>` part.
    fn holder<'a>(&self, field: &'a str) -> Option<&'a str> {
        Some(field)
    }

    /// The error reply the acquire script gives an owner that already holds
    /// the lock, for kinds that refuse re-entry (Redisson 4.4's
    /// non-reentrant locks); `None` for kinds that re-enter. Such an
    /// acquisition fails at once with [`crate::Error::AlreadyHeld`]; it is
    /// refused before anything is sent when this client knows the owner
    /// holds it.
    fn reentry_refusal(&self) -> Option<&'static str> {
        None
    }

    /// A kind of the same lock whose live hold by the same owner makes an
    /// acquisition of this kind one that could never succeed, and why (a
    /// reader asking for the write lock would wait for itself). Checked
    /// before anything is sent (`Holds::take`).
    fn refused_while_holding(&self) -> Option<(&'static dyn LockKind, &'static str)> {
        None
    }
}

/// Where a kind keeps an owner's hold count on Redis (see
/// [`LockKind::count_place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CountPlace {
    /// The owner's field `<client-id>:<owner-id>` of the hash named after the
    /// lock: RLock, fair, fenced, spin, the non-reentrant locks, and the
    /// read lock (whose protocol differs; see `Holds::admit`).
    OwnerField,
    /// The write lock's `<client-id>:<owner-id>:write`.
    WriteField,
    /// A group lock's per-value fields, for the value set in its name.
    GroupValues,
}

/// What an acquire attempt's reply said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Acquired (or re-entered), with the fencing token if the kind has one.
    Acquired { token: Option<i64> },
    /// Not acquired; the lock's PTTL (-1 no TTL, -2 no key).
    Refused(i64),
}

/// How a kind answers `is_locked`.
pub(crate) enum LockedWhen {
    /// The lock's key exists (`EXISTS`).
    KeyExists,
    /// The hash's `mode` field has this value.
    ModeIs(&'static str),
    /// This script (one key: the lock) returns 1.
    Script(&'static Script),
}

/// Everything about one call that a [`LockKind`] builds its scripts from,
/// and all that the stages below an attempt or a release need to know of
/// the lock: built once, at the top of one.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) engine: &'a Engine,
    pub(crate) kind: &'static dyn LockKind,
    /// The lock's name.
    pub(crate) lock: &'a str,
    /// The Redis key it lives in ([`LockKind::key`]).
    pub(crate) key: &'a str,
    /// The owner's field, from [`LockKind::field`].
    pub(crate) field: &'a str,
    /// The lease in ms: what an acquire sets, what a partial release applies.
    pub(crate) lease_ms: i64,
    /// How long the acquisition this call belongs to may wait (the fair lock
    /// queues with it, or not at all for a single try).
    pub(crate) patience: Patience,
}

impl Call<'_> {
    /// The call's error, typed: a key of another type is
    /// [`Error::WrongType`].
    pub(crate) fn wrong_type(&self, e: Error) -> Error {
        e.of_type(self.lock, "lock")
    }

    /// An acquire script's error, typed: a key of another type
    /// ([`Error::WrongType`]), or the kind's refusal of a re-entry
    /// ([`Error::AlreadyHeld`]; matched as a substring: Redis 7 prefixes a
    /// script's error text with `ERR`, Redis 6 does not).
    pub(crate) fn acquire_error(&self, e: Error) -> Error {
        match self.kind.reentry_refusal() {
            Some(text) if e.reply().is_some_and(|reply| reply.contains(text)) => {
                Error::AlreadyHeld {
                    name: self.lock.to_string(),
                    field: self.field.to_string(),
                }
            }
            _ => self.wrong_type(e),
        }
    }
}

/// How long an acquisition may wait.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Patience {
    /// One attempt.
    Once,
    /// Up to this long in all.
    For(Duration),
    /// As long as it takes.
    Forever,
}

/// One of Redisson's renewal tasks, as data: the watchdog renews a batch
/// of holds of one renewal (and, where multi-key scripts must stay in one
/// slot, of one slot) with one call of `script`, built by [`Renewal::batch`].
/// Its arguments are the lease, the client's wall clock when `with_now`,
/// then what each hold adds; its reply has one entry per lock (`per_lock`)
/// or per hold: 1 renewed, 0 gone.
pub(crate) struct Renewal {
    /// Tells renewals apart when the watchdog groups holds.
    pub(crate) name: &'static str,
    pub(crate) script: fn() -> &'static Script,
    pub(crate) with_now: bool,
    /// Holds of one lock share an entry: its keys once, then the number of
    /// its holds and what each adds (the read lock's).
    pub(crate) per_lock: bool,
    /// The keys of an entry, for the lock `name`.
    pub(crate) keys: fn(&str) -> Vec<String>,
    /// What one hold (`field` on the lock `name`) adds to its entry.
    pub(crate) hold_args: fn(&str, &str) -> Vec<Value>,
}

impl Renewal {
    /// The call renewing `holds` (lock name, owner field; holds of one lock
    /// next to each other) to `lease_ms`, and for each entry of its reply
    /// the indexes of the holds it speaks for.
    pub(crate) fn batch(
        &self,
        holds: &[(&str, String)],
        lease_ms: i64,
    ) -> (ScriptCall, Vec<Vec<usize>>) {
        let mut keys = vec![];
        let mut args: Vec<Value> = vec![lease_ms.into()];
        if self.with_now {
            args.push(wall_clock_ms().into());
        }
        let mut entries: Vec<Vec<usize>> = vec![];
        let mut count_at = 0;
        for (i, (lock, field)) in holds.iter().enumerate() {
            let new_entry = !self.per_lock || i == 0 || holds[i - 1].0 != *lock;
            if new_entry {
                keys.extend((self.keys)(lock));
                entries.push(vec![]);
                if self.per_lock {
                    count_at = args.len();
                    args.push(0.into());
                }
            }
            if let Some(entry) = entries.last_mut() {
                entry.push(i);
                if self.per_lock {
                    args[count_at] = (entry.len() as i64).into();
                }
            }
            args.extend((self.hold_args)(lock, field));
        }
        let call = ScriptCall {
            script: (self.script)(),
            keys,
            args,
        };
        (call, entries)
    }
}

/// Redisson's LockTask: for every lock held by a hash field, `HEXISTS` then
/// `PEXPIRE` to the lease; one reply entry per hold. Every kind whose hold
/// is a field of the lock's hash (RLock, fair, fenced, spin, write, the
/// non-reentrant locks) renews this way.
pub(crate) static FIELD_RENEWAL: Renewal = Renewal {
    name: "field",
    script: || &RENEW,
    with_now: false,
    per_lock: false,
    keys: |lock| vec![lock.to_string()],
    hold_args: |_, field| vec![field.into()],
};

/// `lua/lock/renew.lua`.
static RENEW: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(include_str!("../../lua/lock/renew.lua")));

/// The client's wall clock in ms, as Redisson passes `now` to some scripts.
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
