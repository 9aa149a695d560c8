//! [`RawLock`], what every public lock object wraps, and [`Held`], what every
//! guard wraps: the engine's view of one lock of one kind, and of one hold.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{HashesInterface, KeysInterface};

use crate::config::BackOff;
use crate::engine::hold::Hold;
use crate::engine::kind::{Call, LockKind, LockedWhen, Patience, ScriptCall};
use crate::engine::lease::LostSignal;
use crate::engine::replica_sync::SafetyLevel;
use crate::engine::wait::{self, Granted};
use crate::engine::{release, script, Engine};
use crate::error::{Error, Result};
use crate::lock::{Holder, Ttl, Unlocked};
use crate::OwnerId;

/// `lua/engine/delete.lua`: deletes an object's keys.
static DELETE: std::sync::LazyLock<script::Script> =
    std::sync::LazyLock::new(|| script::Script::new(include_str!("../../lua/engine/delete.lua")));

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
            lock: &self.name,
            field,
            lease_ms: lease.as_millis().min(i64::MAX as u128) as i64,
            patience,
        }
    }

    /// Acquires for the current (or a new) owner, waiting as `patience` says.
    pub(crate) async fn acquire(
        &self,
        lease: Option<Duration>,
        patience: Patience,
    ) -> Result<Option<Granted>> {
        if let Some(lease) = lease {
            crate::engine::lease::lease_millis(lease, "lease")?;
        }
        wait::acquire(self, lease, patience).await
    }

    /// Releases one hold of the current owner without a guard (Redisson's
    /// `unlock()`).
    pub(crate) async fn unlock(&self) -> Result<Unlocked> {
        self.engine.ensure_open()?;
        // Outside a scope nobody is the current owner: an unused owner's
        // unlock finds nothing to release, on Redis as here.
        let owner = self.acquiring_owner();
        match self.engine.holds.get(self.kind, &self.name, owner) {
            Some(hold) => {
                let watchdog = hold.next_release_is_watchdog();
                release::release(self, &hold, watchdog).await
            }
            None => {
                let field = self.field_of(owner);
                let lease = self.engine.config.lock_watchdog_timeout;
                release::send_unlock(self, &field, lease, &crate::engine::request::Request::new())
                    .await
                    .map(|(unlocked, _)| unlocked)
            }
        }
    }

    /// Deletes the lock whoever holds it and wakes its waiters.
    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        self.engine.ensure_open()?;
        let call = || self.kind.force_unlock(&self.engine, &self.name);
        let (reply, synced) = self
            .engine
            .write(call)
            .await
            .map_err(|e| self.wrong_type(e))?;
        self.deleted("force_unlock", script::as_i64(&reply) == Some(1), synced)
    }

    /// Deletes `keys`, the lock's keys, whoever holds it and without a
    /// message (Redisson's `delete()`: one `DEL`, sent once here). Returns
    /// whether any of them existed.
    pub(crate) async fn delete(&self, keys: Vec<String>) -> Result<bool> {
        self.engine.ensure_open()?;
        let call = || ScriptCall {
            script: &DELETE,
            keys: keys.clone(),
            args: vec![],
        };
        let (reply, synced) = self.engine.write(call).await?;
        let deleted = script::as_i64(&reply).is_some_and(|n| n > 0);
        self.deleted("delete", deleted, synced)
    }

    /// What a forced delete reports: the local holds are dropped once the
    /// keys are gone, and a delete the replicas did not confirm is an error
    /// even so (it happened on the primary and may be undone by a failover).
    fn deleted(
        &self,
        operation: &'static str,
        deleted: bool,
        synced: crate::engine::replica_sync::Synced,
    ) -> Result<bool> {
        if deleted {
            self.mark_deleted();
        }
        if let crate::engine::replica_sync::Synced::Short { .. } = synced {
            return Err(self
                .engine
                .replica_sync
                .not_synced(operation, &self.name, synced));
        }
        Ok(deleted)
    }

    /// The lock's hash is gone: every hold on it, of any kind, is lost.
    /// Holds still at zero may belong to an acquire in flight that runs
    /// after the delete and really takes the lock.
    fn mark_deleted(&self) {
        for hold in self.engine.holds.of_name(&self.name) {
            if hold.count() > 0 {
                hold.lease.mark_gone();
            }
        }
    }

    /// Whether the lock's key exists (`EXISTS`).
    pub(crate) async fn exists(&self) -> Result<bool> {
        self.engine.ensure_open()?;
        let n: i64 = self.query(self.engine.redis.exists(&*self.name)).await?;
        Ok(n > 0)
    }

    /// Whether `owner` holds this kind of the lock (`HEXISTS`).
    pub(crate) async fn is_held_by(&self, owner: OwnerId) -> Result<bool> {
        self.engine.ensure_open()?;
        let field = self.field_of(owner);
        self.query(self.engine.redis.hexists(&*self.name, field))
            .await
    }

    /// How many times `owner` holds this kind of the lock (`HGET`).
    pub(crate) async fn hold_count_of(&self, owner: OwnerId) -> Result<u32> {
        self.engine.ensure_open()?;
        let field = self.field_of(owner);
        let count = self.count_on_redis(&self.engine.redis, &field).await?;
        Ok(count.clamp(0, u32::MAX as i64) as u32)
    }

    /// `field`'s hold count on Redis, read through `redis` where and as the
    /// kind says (`HGET <name> <field>` for every kind but the group lock).
    pub(crate) async fn count_on_redis<C: HashesInterface + Sync>(
        &self,
        redis: &C,
        field: &str,
    ) -> Result<i64> {
        let key = self.key();
        let mut fields = self.kind.count_fields(&self.name, field);
        let values: Vec<Option<String>> = if fields.len() == 1 {
            let one = fields.pop().expect("one field");
            vec![self.query(redis.hget(key, one)).await?]
        } else {
            self.query(redis.hmget(key, fields)).await?
        };
        Ok(self.kind.hold_count(field, &values))
    }

    /// The Redis key the lock lives in (its name, but for the group lock).
    pub(crate) fn key(&self) -> &str {
        self.kind.key(&self.name)
    }

    /// Every field of the lock's hash (`HGETALL`).
    pub(crate) async fn fields(&self) -> Result<HashMap<String, String>> {
        self.engine.ensure_open()?;
        self.query(self.engine.redis.hgetall(&*self.name)).await
    }

    /// Whether the lock is held in its kind's sense.
    pub(crate) async fn is_locked(&self) -> Result<bool> {
        self.engine.ensure_open()?;
        match self.kind.locked_when() {
            LockedWhen::KeyExists => self.exists().await,
            LockedWhen::ModeIs(mode) => {
                let held: Option<String> = self
                    .query(self.engine.redis.hget(&*self.name, "mode"))
                    .await?;
                Ok(held.as_deref() == Some(mode))
            }
            LockedWhen::Script(check) => {
                let call = || ScriptCall {
                    script: check,
                    keys: vec![self.name.to_string()],
                    args: vec![],
                };
                let reply = self
                    .engine
                    .run_unsynced(call)
                    .await
                    .map_err(|e| self.wrong_type(e))?;
                Ok(script::as_i64(&reply) == Some(1))
            }
        }
    }

    /// The holders of this kind among the hash's fields, decoded from
    /// `<client-id>:<owner-id>`.
    pub(crate) async fn holders(&self) -> Result<Vec<Holder>> {
        let fields = self.fields().await?;
        let mut holders: Vec<Holder> = fields
            .iter()
            .filter_map(|(field, count)| {
                Holder::from_field(self.kind.holder(field)?, count, &self.engine.id)
            })
            .collect();
        holders.sort_by(|a, b| (&a.client_id, &a.owner).cmp(&(&b.client_id, &b.owner)));
        Ok(holders)
    }

    /// The lock's remaining time to live (`PTTL`).
    pub(crate) async fn remaining_ttl(&self) -> Result<Ttl> {
        self.engine.ensure_open()?;
        let ms: i64 = self.query(self.engine.redis.pttl(&*self.name)).await?;
        Ok(match ms {
            -2 => Ttl::Absent,
            -1 => Ttl::Persistent,
            ms => Ttl::Expires(Duration::from_millis(ms.max(0) as u64)),
        })
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

    /// An acquire script's error, typed: a key of another type
    /// ([`Error::WrongType`]), or the kind's refusal of a re-entry
    /// ([`Error::AlreadyHeld`]; matched as a substring: Redis 7 prefixes a
    /// script's error text with `ERR`, Redis 6 does not).
    pub(crate) fn acquire_error(&self, e: Error, owner: OwnerId) -> Error {
        match self.kind.reentry_refusal() {
            Some(text) if e.reply().is_some_and(|reply| reply.contains(text)) => {
                self.already_held(owner)
            }
            _ => self.wrong_type(e),
        }
    }

    pub(crate) fn wrong_type(&self, e: Error) -> Error {
        if e.is_wrong_type() {
            Error::WrongType {
                name: self.name.to_string(),
                expected: "lock",
            }
        } else {
            e
        }
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
    engine: Arc<Engine>,
    /// The kind this hold was taken as, whose unlock releases it (the hold
    /// may count other kinds' holds of the same field too).
    kind: &'static dyn LockKind,
    hold: Arc<Hold>,
    watchdog: bool,
    /// What the replicas confirmed of the acquisition.
    safety: SafetyLevel,
    released: bool,
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
    fn lock(&self) -> RawLock {
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

    /// Sets the hold's lease (it is not renewed from then on), if the lock
    /// is still this owner's: the kind's renewal script for this one hold,
    /// to `lease`. Returns whether Redis still had it.
    pub(crate) async fn set_lease(&self, lease: Duration) -> Result<bool> {
        let lease_ms = crate::engine::lease::lease_millis(lease, "lease")?;
        let renewal = self.hold.kind().renewal();
        let (call, _) = renewal.batch(&self.engine, std::slice::from_ref(&self.hold), lease_ms);
        let sent_at = tokio::time::Instant::now();
        let (reply, _) = self.engine.write(|| call.clone()).await?;
        let held = match reply {
            fred::types::Value::Array(flags) => flags
                .first()
                .and_then(script::as_i64)
                .is_some_and(|flag| flag == 1),
            _ => false,
        };
        if held {
            self.hold.set_explicit_lease(lease);
            self.hold.lease.confirm(sent_at, lease);
        }
        Ok(held)
    }

    pub(crate) async fn unlock(mut self) -> Result<Unlocked> {
        self.released = true;
        release::release(&self.lock(), &self.hold.clone(), self.watchdog).await
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.released || self.hold.is_retired() {
            // Released, or nothing left to release (the client's shutdown did).
            return;
        }
        let (lock, hold, watchdog) = (self.lock(), self.hold.clone(), self.watchdog);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                // Counted before the spawn, so a shutdown waits for it.
                let busy = lock.engine.lifecycle.track();
                runtime.spawn(async move {
                    match release::release(&lock, &hold, watchdog).await {
                        Ok(_) | Err(Error::LockLost { .. } | Error::Shutdown) => {}
                        Err(e) => {
                            tracing::warn!(lock = %hold.name, error = %e, "background unlock of a dropped guard failed")
                        }
                    }
                    drop(busy);
                });
            }
            // No runtime to talk to Redis: stop renewing so the lease expires.
            Err(_) => crate::engine::settle::forget(&lock, &hold, watchdog),
        }
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
