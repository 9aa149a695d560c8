//! How a lock object describes itself to the engine.
//!
//! The engine knows how to attempt, wait, release, settle and renew; it does
//! not know any Redisson object. Each object kind (RLock, fair lock, read
//! lock, write lock, ...) is a stateless [`LockKind`]: the scripts it runs and
//! the keys and arguments it passes them, the channel its waiters listen on
//! and how a message there wakes them, how its holds are renewed, and what a
//! waiter that gives up must clean up.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;

use crate::engine::hold::Hold;
use crate::engine::hub::Wake;
use crate::engine::script::Script;
use crate::engine::Engine;
use crate::OwnerId;

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

    /// Deletes the lock whoever holds it and wakes its waiters. Reply: 1 a
    /// lock was deleted, 0 there was none.
    fn force_unlock(&self, engine: &Engine, lock: &str) -> ScriptCall;

    /// How held locks of this kind are renewed by the watchdog.
    fn renewal(&self) -> &'static dyn Renewal;

    /// Whether a waiter of this kind leaves state on Redis (a queue entry)
    /// that it must clean up when it gives up.
    fn queues(&self) -> bool {
        false
    }

    /// What a waiter that gives up (deadline passed, future dropped) runs to
    /// leave no trace, when [`LockKind::queues`]: the fair lock's
    /// `acquireFailed`.
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

    /// Checked before an acquisition by an owner that already holds other
    /// kinds of this lock (a reader asking for the write lock), for a
    /// request that could never succeed.
    fn refuse(&self, _engine: &Engine, _lock: &str, _owner: OwnerId) -> Option<crate::Error> {
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

/// Everything about one call that a [`LockKind`] builds its scripts from.
pub(crate) struct Call<'a> {
    pub(crate) engine: &'a Engine,
    /// The lock's name (its main key).
    pub(crate) lock: &'a str,
    /// The owner's field, from [`LockKind::field`].
    pub(crate) field: &'a str,
    /// The lease in ms: what an acquire sets, what a partial release applies.
    pub(crate) lease_ms: i64,
    /// How long the acquisition this call belongs to may wait (the fair lock
    /// queues with it, or not at all for a single try).
    pub(crate) patience: Patience,
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

/// The unlock latch of one release request.
pub(crate) struct Latch {
    pub(crate) key: String,
    pub(crate) ttl_ms: i64,
}

/// A script and what to run it with.
#[derive(Clone)]
pub(crate) struct ScriptCall {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Value>,
}

impl ScriptCall {
    /// `EVALSHA`'s or `EVAL`'s arguments: `head` (the SHA or the text), the
    /// key count, the keys, the arguments. The keys' strings are moved, not
    /// copied.
    pub(crate) fn into_argv(self, head: Value) -> Vec<Value> {
        let mut argv = Vec::with_capacity(2 + self.keys.len() + self.args.len());
        argv.push(head);
        argv.push((self.keys.len() as i64).into());
        argv.extend(self.keys.into_iter().map(Value::from));
        argv.extend(self.args);
        argv
    }
}

/// One of Redisson's renewal tasks: renews a batch of holds (all of this
/// renewal, all in one hash slot) with one script.
pub(crate) trait Renewal: Send + Sync + 'static {
    /// Tells renewals apart when the watchdog groups holds.
    fn name(&self) -> &'static str;

    /// The script renewing `holds` to `lease_ms`, and for each entry of its
    /// reply (1 renewed, 0 gone) the indexes of the holds it speaks for.
    fn batch(
        &self,
        engine: &Engine,
        holds: &[Arc<Hold>],
        lease_ms: i64,
    ) -> (ScriptCall, Vec<Vec<usize>>);
}
