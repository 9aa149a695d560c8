//! [`RawLock`], what every public lock object wraps, and [`Held`], what every
//! guard wraps: the engine's view of one lock of one kind, and of one hold.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::BackOff;
use crate::engine::hold::Hold;
use crate::engine::kind::{Call, LockKind, Patience};
use crate::engine::lease::LostSignal;
use crate::engine::safety::SafetyLevel;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::owner::OwnerId;

/// An acquisition: the hold, and the fencing token if the kind has one.
pub(crate) type Granted = (Held, Option<i64>);

/// What an unlock left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlocked {
    /// The last hold was released: the lock is free and waiters were told.
    Released,
    /// The owner still holds the lock reentrantly (the hold count went down by one).
    StillHeld,
}

/// One holder of a lock, decoded from its hash field `<client-id>:<owner-id>`.
/// Holders of JVM Redisson clients decode the same way (owner = thread id).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Holder {
    /// Id of the client (Rust or JVM) that holds the lock.
    pub client_id: String,
    /// Owner within that client: an owner id here, a thread id on the JVM.
    pub owner: String,
    /// Reentrant hold count (0 where the field holds no count).
    pub hold_count: u32,
    /// Whether `client_id` is the id of the client that read the lock
    /// ([`crate::RedissonClient::id`]): the hold is this process's own.
    pub this_client: bool,
}

impl Holder {
    /// Decodes `<client-id>:<owner-id>` (without the write lock's `:write`)
    /// and its hold count, as read by the client `reader_id`.
    pub(crate) fn from_field(field: &str, count: &str, reader_id: &str) -> Option<Holder> {
        let (client_id, owner) = field.rsplit_once(':')?;
        Some(Holder {
            client_id: client_id.to_string(),
            owner: owner.to_string(),
            hold_count: count.trim().parse().unwrap_or(0),
            this_client: client_id == reader_id,
        })
    }
}

/// A lock's remaining time to live, as `PTTL` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// No such key: the lock is free.
    Absent,
    /// The key exists without a TTL (not written by a lock client).
    Persistent,
    /// The key expires after this long unless renewed.
    Expires(Duration),
}

/// One lock of one kind, as the engine sees it, and who acquires it: a
/// fixed owner ([`RawLock::with_owner`]), else the owner of the enclosing
/// scope of this lock, else a new owner per acquisition.
#[derive(Clone)]
pub(crate) struct RawLock {
    pub(crate) engine: Arc<Engine>,
    pub(crate) kind: &'static dyn LockKind,
    pub(crate) name: Arc<str>,
    owner: Option<OwnerId>,
    /// How a waiter polls when the kind has no channel; the client's
    /// `spinLockBackoff` unless set on the handle.
    backoff: Option<BackOff>,
}

impl RawLock {
    pub(crate) fn new(engine: Arc<Engine>, kind: &'static dyn LockKind, name: &str) -> Self {
        RawLock {
            engine,
            kind,
            name: name.into(),
            owner: None,
            backoff: None,
        }
    }

    /// The lock of `kind` a hold is of.
    pub(crate) fn of_hold(engine: Arc<Engine>, kind: &'static dyn LockKind, hold: &Hold) -> Self {
        RawLock {
            engine,
            kind,
            name: hold.name.clone(),
            owner: None,
            backoff: None,
        }
    }

    /// The same lock, acting for a fixed owner.
    pub(crate) fn with_owner(&self, owner: OwnerId) -> Self {
        RawLock {
            owner: Some(owner),
            ..self.clone()
        }
    }

    /// The same lock, polling with `backoff` where it has no channel.
    pub(crate) fn with_backoff(&self, backoff: BackOff) -> Self {
        RawLock {
            backoff: Some(backoff),
            ..self.clone()
        }
    }

    /// How a waiter of this lock polls when its kind has no channel.
    pub(crate) fn backoff(&self) -> BackOff {
        self.backoff.unwrap_or(self.engine.config.spin_lock_backoff)
    }

    pub(crate) fn fixed_owner(&self) -> Option<OwnerId> {
        self.owner
    }

    /// The owner an acquisition would re-enter with right now.
    pub(crate) fn current_owner(&self) -> Option<OwnerId> {
        self.owner
            .or_else(|| crate::engine::reentry::owner_in_scope(&self.engine.id, &self.name))
    }

    /// The owner a new acquisition uses: the current one, or a new one.
    pub(crate) fn acquiring_owner(&self) -> OwnerId {
        self.current_owner().unwrap_or_else(OwnerId::unique)
    }

    /// The hash field of `owner` for this kind.
    pub(crate) fn field_of(&self, owner: OwnerId) -> String {
        self.kind.field(&self.engine.id, owner)
    }

    /// What the kind's scripts are built from, for one call.
    pub(crate) fn call<'a>(
        &'a self,
        field: &'a str,
        lease: Duration,
        patience: Patience,
    ) -> Call<'a> {
        Call {
            engine: &self.engine,
            kind: self.kind,
            lock: &self.name,
            key: self.key(),
            field,
            lease_ms: lease.as_millis().min(i64::MAX as u128) as i64,
            patience,
        }
    }

    /// The Redis key the lock lives in (its name, but for the group lock).
    pub(crate) fn key(&self) -> &str {
        self.kind.key(&self.name)
    }

    /// Runs a read, mapping its error (a key of another type is `WrongType`).
    pub(crate) fn query<'a, T: 'a>(
        &'a self,
        call: impl Future<Output = std::result::Result<T, fred::error::Error>> + Send + 'a,
    ) -> impl Future<Output = Result<T>> + 'a {
        self.engine.query(call, |e| self.wrong_type(e))
    }

    /// Refuses, before anything is sent, a re-entry into a kind that does not
    /// allow it, when this client knows `owner` holds the lock.
    pub(crate) fn refuse_reentry(&self, owner: OwnerId) -> Result<()> {
        if self.kind.reentry_refusal().is_none() {
            return Ok(());
        }
        match self.engine.holds.get(self.kind, &self.name, owner) {
            Some(hold) if hold.count() > 0 => Err(self.already_held(owner)),
            _ => Ok(()),
        }
    }

    fn already_held(&self, owner: OwnerId) -> Error {
        Error::AlreadyHeld {
            name: self.name.to_string(),
            field: self.field_of(owner),
        }
    }

    pub(crate) fn wrong_type(&self, e: Error) -> Error {
        e.of_type(&self.name, "lock")
    }
}

impl std::fmt::Debug for RawLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawLock")
            .field("kind", &self.kind.name())
            .field("name", &self.name)
            .field("owner", &self.owner)
            .finish()
    }
}

/// One hold: what every public guard wraps. Released by [`Held::unlock`], or
/// in the background when dropped. Kept small (the hold knows its kind, lock
/// and owner): a client may keep many thousands.
pub(crate) struct Held {
    pub(crate) engine: Arc<Engine>,
    /// The kind this hold was taken as, whose unlock releases it (the hold
    /// may count other kinds' holds of the same field too).
    pub(crate) kind: &'static dyn LockKind,
    pub(crate) hold: Arc<Hold>,
    pub(crate) watchdog: bool,
    /// What the replicas confirmed of the acquisition.
    pub(crate) safety: SafetyLevel,
    pub(crate) released: bool,
}

impl Held {
    pub(crate) fn new(
        engine: Arc<Engine>,
        kind: &'static dyn LockKind,
        hold: Arc<Hold>,
        watchdog: bool,
        safety: SafetyLevel,
    ) -> Self {
        Held {
            engine,
            kind,
            hold,
            watchdog,
            safety,
            released: false,
        }
    }

    /// Leaves the hold, its count and its renewal in place with no guard
    /// for it: its owner's unlock releases that count.
    #[cfg(feature = "blocking")]
    pub(crate) fn keep(mut self) {
        self.released = true;
    }

    pub(crate) fn safety(&self) -> SafetyLevel {
        self.safety
    }

    pub(crate) fn is_at_risk(&self) -> bool {
        self.hold.lease.is_at_risk()
    }

    /// The client's engine.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The lock this hold is of, as the engine sees it.
    pub(crate) fn lock(&self) -> RawLock {
        RawLock::of_hold(self.engine.clone(), self.kind, &self.hold)
    }

    pub(crate) fn name(&self) -> &str {
        &self.hold.name
    }

    pub(crate) fn owner(&self) -> OwnerId {
        self.hold.owner
    }

    pub(crate) fn field(&self) -> String {
        self.kind.field(&self.engine.id, self.hold.owner)
    }

    /// Runs `work` so that acquisitions of this lock name through this
    /// client inside it re-enter with this hold's owner.
    pub(crate) fn scope<F: Future>(&self, work: F) -> impl Future<Output = F::Output> {
        crate::engine::reentry::enter(
            self.engine.id.clone(),
            self.hold.name.clone(),
            self.hold.owner,
            work,
        )
    }

    /// Runs the closure `work` on this thread so that acquisitions of this
    /// lock name through this client's blocking API inside it re-enter with
    /// this hold's owner.
    #[cfg(feature = "blocking")]
    pub(crate) fn scope_thread<R>(&self, work: impl FnOnce() -> R) -> R {
        crate::engine::reentry::enter_thread(
            self.engine.id.clone(),
            self.hold.name.clone(),
            self.hold.owner,
            work,
        )
    }

    /// The owner's hold count on Redis.
    pub(crate) async fn hold_count(&self) -> Result<u32> {
        self.lock().hold_count_of(self.hold.owner).await
    }

    pub(crate) fn is_renewed(&self) -> bool {
        self.watchdog
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.hold.lease.is_lost()
    }

    pub(crate) fn lost_signal(&self) -> LostSignal {
        LostSignal::new(self.hold.clone())
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("name", &self.name())
            .field("field", &self.field())
            .field("renewed", &self.watchdog)
            .field("lost", &self.is_lost())
            .finish()
    }
}
