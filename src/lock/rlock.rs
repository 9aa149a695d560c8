//! [`RLock`]: a handle on one Redisson-compatible reentrant lock.
//!
//! The public methods are thin: waiting lives in `wait`, the scripts in
//! `script` and `lua/`, the local hold count in `hold`. The crate-private
//! methods below are the raw lock: one acquire attempt, one release.

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{ClientLike, HashesInterface, KeysInterface};
use fred::types::Value;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::engine::hold::{Admit, Hold};
use crate::engine::hub::UNLOCK_MESSAGE;
use crate::engine::lease::lease_millis;
use crate::engine::lifecycle::Busy;
use crate::engine::replica_sync::Synced;
use crate::engine::script::{self, ACQUIRE, FORCE_UNLOCK, UNLOCK};
use crate::engine::wait::{self, Patience};
use crate::error::{Error, Result};
use crate::lock::guard::{LockGuard, Unlocked};
use crate::naming;
use crate::OwnerId;

/// A handle on a lock named `name`, shared with JVM Redisson clients that call
/// `getLock(name)`. Cheap to clone; creating one sends nothing to Redis.
///
/// Acquire methods return a [`LockGuard`]. Each acquisition is its own owner,
/// so two futures that wait for the same lock exclude each other even when
/// one task polls both (`join!`, `select!`, `FuturesUnordered`). Re-entry is
/// scoped: inside [`LockGuard::scope`], acquiring the same lock again
/// re-enters the guard's hold (the hold count goes up, as a nested `lock()`
/// in one Java thread does). [`RLock::with_owner`] fixes the owner instead,
/// as Redisson's `lockAsync(threadId)` does.
///
/// ```no_run
/// use std::time::Duration;
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let lock = client.lock("reports:daily")?;
/// if let Some(guard) = lock.try_lock_for(Duration::from_secs(5)).await? {
///     // held, renewed by the watchdog until unlocked
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RLock {
    pub(crate) client: Arc<ClientInner>,
    name: Arc<str>,
    owner: Option<OwnerId>,
}

/// What one acquire attempt found.
pub(crate) enum Attempt {
    Acquired(LockGuard),
    /// Held by another owner; `None` when the key has no TTL.
    Held(Option<Duration>),
    /// Nothing was sent: a previous operation of the same owner was still
    /// settling when the attempt's deadline came.
    Busy,
}

/// One holder of a lock, decoded from its hash field `<client-id>:<owner-id>`.
/// Holders of JVM Redisson clients decode the same way (owner = thread id).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Holder {
    /// Id of the client (Rust or JVM) that holds the lock.
    pub client_id: String,
    /// Owner within that client: task or explicit owner id here, thread id on the JVM.
    pub owner: String,
    /// Reentrant hold count.
    pub hold_count: i64,
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

impl RLock {
    pub(crate) fn new(client: Arc<ClientInner>, name: &str) -> Self {
        RLock {
            name: name.into(),
            client,
            owner: None,
        }
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The channel on which unlocks of this lock are published.
    pub fn channel(&self) -> String {
        naming::channel_name(&self.name)
    }

    /// The same lock, acting for a fixed owner: Redisson's
    /// `lockAsync(threadId)`. Every acquisition through this handle re-enters
    /// that owner's hold, wherever it runs; it lets one task acquire and
    /// another release, or several tasks share one reentrant hold.
    pub fn with_owner(&self, owner: OwnerId) -> RLock {
        RLock {
            owner: Some(owner),
            ..self.clone()
        }
    }

    /// The owner an acquisition would re-enter with right now: the explicit
    /// owner of [`RLock::with_owner`], else the owner of the innermost
    /// enclosing [`LockGuard::scope`] of this lock, else `None` (the next
    /// acquisition gets an owner of its own).
    pub fn current_owner(&self) -> Option<OwnerId> {
        self.owner
            .or_else(|| crate::engine::reentry::owner_in_scope(&self.client.id, &self.name))
    }

    /// The owner a new acquisition uses: the current one, or a new one.
    pub(crate) fn acquiring_owner(&self) -> OwnerId {
        self.current_owner().unwrap_or_else(OwnerId::unique)
    }

    /// The hash field of an owner: `<client-id>:<owner-id>`.
    pub fn field_of(&self, owner: OwnerId) -> String {
        naming::field_name(&self.client.id, owner)
    }

    /// Waits as long as it takes, then holds the lock; the watchdog renews it
    /// until released.
    pub async fn lock(&self) -> Result<LockGuard> {
        let guard = wait::acquire(self, None, Patience::Forever).await?;
        Ok(guard.expect("waiting forever only ends once acquired"))
    }

    /// Waits as long as it takes, then holds the lock for `lease`; it is never
    /// renewed and expires after `lease` unless released first.
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        lease_millis(lease, "lease")?;
        let guard = wait::acquire(self, Some(lease), Patience::Forever).await?;
        Ok(guard.expect("waiting forever only ends once acquired"))
    }

    /// One attempt, no waiting. `None` when someone else holds the lock.
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        wait::acquire(self, None, Patience::Once).await
    }

    /// Waits up to `wait` for the lock; `None` when it stayed taken.
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        wait::acquire(self, None, Patience::For(wait)).await
    }

    /// Waits up to `wait`, then holds the lock for `lease` (never renewed).
    pub async fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        lease_millis(lease, "lease")?;
        wait::acquire(self, Some(lease), Patience::For(wait)).await
    }

    /// Releases one hold of this handle's owner without a guard, like
    /// Redisson's `unlock()`: for holds whose guard was given up, or to check
    /// that a non-owner cannot unlock. Prefer [`LockGuard::unlock`].
    pub async fn unlock(&self) -> Result<Unlocked> {
        self.client.ensure_open()?;
        // Outside a scope nobody is the current owner: an unused owner's
        // unlock finds nothing to release, on Redis as here.
        let owner = self.acquiring_owner();
        match self.client.holds.get(&self.name, owner) {
            Some(hold) => {
                let watchdog = hold.next_release_is_watchdog();
                self.release(&hold, watchdog).await
            }
            None => {
                let field = self.field_of(owner);
                let lease = self.client.config.lock_watchdog_timeout;
                self.send_unlock(&field, lease, &UnlockRequest::new(), true)
                    .await
                    .map(|(unlocked, _)| unlocked)
            }
        }
    }

    /// Deletes the lock whoever holds it and wakes its waiters (Redisson's
    /// `forceUnlock`). Returns whether there was a lock. A key of another type
    /// is refused with [`Error::WrongType`] and left alone.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.client.ensure_open()?;
        let (reply, synced) = self
            .client
            .write(
                &FORCE_UNLOCK,
                &[&self.name, &self.channel()],
                vec![UNLOCK_MESSAGE.into(), self.client.publish_command.into()],
            )
            .await
            .map_err(|e| self.wrong_type(e))?;
        let deleted = script::as_i64(&reply) == Some(1);
        if deleted {
            // Holds still at zero may belong to an acquire in flight that
            // runs after the delete and really takes the lock.
            for hold in self.client.holds.of_name(&self.name) {
                if hold.count() > 0 {
                    hold.lease.mark_gone();
                }
            }
        }
        if let Synced::Short { .. } = synced {
            return Err(self
                .client
                .replica_sync
                .not_synced("force_unlock", &self.name, synced));
        }
        Ok(deleted)
    }

    /// Whether anyone holds the lock (`EXISTS`).
    pub async fn is_locked(&self) -> Result<bool> {
        self.client.ensure_open()?;
        let n: i64 = self.query(self.client.redis.exists(&*self.name)).await?;
        Ok(n > 0)
    }

    /// Whether the current owner ([`RLock::current_owner`]) holds the lock:
    /// Redisson's `isHeldByCurrentThread`. Outside a scope and without an
    /// explicit owner there is no current owner, and this is `false`; ask a
    /// guard instead ([`LockGuard::hold_count`]).
    pub async fn is_held(&self) -> Result<bool> {
        match self.current_owner() {
            Some(owner) => self.is_held_by(owner).await,
            None => {
                self.client.ensure_open()?;
                Ok(false)
            }
        }
    }

    /// Whether `owner` of this client holds the lock (`HEXISTS`).
    pub async fn is_held_by(&self, owner: OwnerId) -> Result<bool> {
        self.client.ensure_open()?;
        let field = self.field_of(owner);
        self.query(self.client.redis.hexists(&*self.name, field))
            .await
    }

    /// How many times the current owner ([`RLock::current_owner`]) holds the
    /// lock: Redisson's `getHoldCount`. 0 when not held, and outside a scope
    /// without an explicit owner.
    pub async fn hold_count(&self) -> Result<u32> {
        self.client.ensure_open()?;
        match self.current_owner() {
            Some(owner) => self.hold_count_of(owner).await,
            None => Ok(0),
        }
    }

    /// How many times `owner` of this client holds the lock (`HGET`).
    pub async fn hold_count_of(&self, owner: OwnerId) -> Result<u32> {
        self.client.ensure_open()?;
        let field = self.field_of(owner);
        let count: Option<i64> = self
            .query(self.client.redis.hget(&*self.name, field))
            .await?;
        Ok(count.unwrap_or(0).clamp(0, u32::MAX as i64) as u32)
    }

    /// Every holder recorded in the lock's hash, from any client (`HGETALL`).
    /// Empty when the lock is free.
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.client.ensure_open()?;
        let fields: std::collections::HashMap<String, String> =
            self.query(self.client.redis.hgetall(&*self.name)).await?;
        let mut holders: Vec<Holder> = fields
            .into_iter()
            .map(|(field, count)| {
                let (client_id, owner) = field.rsplit_once(':').unwrap_or((field.as_str(), ""));
                Holder {
                    client_id: client_id.to_string(),
                    owner: owner.to_string(),
                    hold_count: count.parse().unwrap_or(0),
                }
            })
            .collect();
        holders.sort_by(|a, b| (&a.client_id, &a.owner).cmp(&(&b.client_id, &b.owner)));
        Ok(holders)
    }

    /// The lock's remaining time to live (`PTTL`).
    pub async fn remaining_ttl(&self) -> Result<Ttl> {
        self.client.ensure_open()?;
        let ms: i64 = self.query(self.client.redis.pttl(&*self.name)).await?;
        Ok(match ms {
            -2 => Ttl::Absent,
            -1 => Ttl::Persistent,
            ms => Ttl::Expires(Duration::from_millis(ms.max(0) as u64)),
        })
    }

    async fn query<T>(
        &self,
        call: impl std::future::Future<Output = std::result::Result<T, fred::error::Error>>,
    ) -> Result<T> {
        call.await
            .map_err(|e| self.wrong_type(Error::from_redis(&e, self.client.timeout())))
    }

    fn wrong_type(&self, e: Error) -> Error {
        if e.is_wrong_type() {
            Error::WrongType {
                name: self.name.to_string(),
            }
        } else {
            e
        }
    }

    // ----- the raw lock -----
    //
    // Every script of one owner on one lock runs with that hold's `ops` slot
    // taken, so that a lost reply can be resolved by comparing the hold count
    // on Redis with ours. An operation keeps the slot until it is settled: if
    // its caller stops waiting, the slot passes to the background task that
    // finishes it (`FinishOnDrop`), and nothing else of that owner on that
    // lock runs in between. Every operation, and every settlement, counts as
    // `Busy` for the client's shutdown.

    /// One acquire attempt for `owner`. On success the hold is recorded (and
    /// renewed by the watchdog when `lease` is `None`). Waiting for the
    /// owner's `ops` slot (a previous operation of the same owner still
    /// settling) ends at `slot_deadline` with [`Attempt::Busy`].
    pub(crate) async fn acquire_once(
        &self,
        owner: OwnerId,
        lease: Option<Duration>,
        slot_deadline: Option<Instant>,
    ) -> Result<Attempt> {
        let busy = self.client.lifecycle.enter()?;
        let watchdog = lease.is_none();
        let lease = lease.unwrap_or(self.client.config.lock_watchdog_timeout);
        let lease_ms = lease_millis(lease, "lease")?;
        loop {
            let hold = self.client.holds.entry(&self.name, owner);
            let slot = match slot_deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, hold.ops.acquire()).await
                {
                    Ok(slot) => slot,
                    Err(_) => return Ok(Attempt::Busy),
                },
                None => hold.ops.acquire().await,
            };
            let slot = slot.map_err(|_| Error::Shutdown)?;
            match self.client.holds.admit(&hold) {
                Admit::Yes => {}
                Admit::Retired => continue,
                Admit::Lost => {
                    return Err(Error::LockLost {
                        name: self.name.to_string(),
                    })
                }
            }
            // Nothing has been sent yet; from here the slot belongs to this
            // attempt until it completes or is settled in the background.
            slot.forget();
            let finish = FinishOnDrop::new(Unfinished::Acquire {
                lock: self.clone(),
                hold: hold.clone(),
                busy,
            });
            let outcome = self.acquire_locked(&hold, lease, lease_ms, watchdog).await;
            finish.complete();
            return outcome;
        }
    }

    async fn acquire_locked(
        &self,
        hold: &Arc<Hold>,
        lease: Duration,
        lease_ms: i64,
        watchdog: bool,
    ) -> Result<Attempt> {
        let field = hold.field(&self.client.id);
        let mut attempt = 1;
        // Re-sends after a MOVED/ASK that fred refused to follow (one attempt
        // allowed): the server did not run the script.
        let mut resends = 0;
        loop {
            let sent_at = Instant::now();
            if hold.count() > 0 {
                // A re-entry resets the key's TTL to this lease, maybe a shorter one.
                hold.lease.shorten(sent_at, lease);
            }
            let reply = self
                .client
                .write(
                    &ACQUIRE,
                    &[&self.name],
                    vec![lease_ms.into(), field.as_str().into()],
                )
                .await;
            let (ttl, synced) = match reply {
                Ok((Value::Null, synced)) => (None, synced),
                Ok((value, synced)) => match script::as_i64(&value) {
                    Some(ttl) => (Some(ttl), synced),
                    None => {
                        self.client.holds.retire_if_done(hold);
                        return Err(script::unexpected("acquire", &value));
                    }
                },
                Err(e) if e.was_redirected() && resends < self.client.config.retry_attempts => {
                    // Refused by a node that no longer owns the slot: the
                    // script did not run, so sending it again (to the new
                    // owner) cannot take the lock twice.
                    resends += 1;
                    continue;
                }
                // Whether the replicas have it stays unknown here; the
                // watchdog's synced renewals cover it from the next cycle.
                Err(e) if e.outcome_unknown() => match self.resolve_acquire(hold, &field, &e).await
                {
                    Ok(Resolved::Taken) => (None, Synced::NotWaited),
                    Ok(Resolved::Held(ttl)) => (Some(ttl), Synced::NotWaited),
                    // It did not run, but after a timeout or a lost
                    // connection an old copy might still arrive: the error
                    // goes to the caller, as in Redisson.
                    Ok(Resolved::Free) => {
                        self.client.holds.retire_if_done(hold);
                        return Err(e);
                    }
                    Err(e) => {
                        self.client.holds.retire_if_done(hold);
                        return Err(e);
                    }
                },
                Err(e) => {
                    self.client.holds.retire_if_done(hold);
                    return Err(self.wrong_type(e));
                }
            };
            if let (None, Synced::Short { .. }) = (ttl, synced) {
                // Taken on the primary only: a failover now would lose it
                // while we believe we hold it. Undo, then retry (Redisson's
                // NoSyncedSlavesException handling).
                let config = &self.client.config;
                if !self.give_back_one(hold, &field).await || attempt >= config.retry_attempts {
                    self.client.holds.retire_if_done(hold);
                    return Err(self
                        .client
                        .replica_sync
                        .not_synced("acquire", &self.name, synced));
                }
                tracing::info!(lock = %self.name, attempt, ?synced, "acquire not confirmed by replicas; undone, retrying");
                attempt += 1;
                tokio::time::sleep(config.retry_delay).await;
                continue;
            }
            return match ttl {
                None if Instant::now() >= crate::engine::lease::expires_by(sent_at, lease) => {
                    // The grant arrived after the lease it set could have run
                    // out: someone else may hold the lock by now. Not an
                    // acquisition: give back what may still be ours, and let
                    // the caller try again within its budget.
                    tracing::warn!(lock = %self.name, ?lease, "acquire confirmed after its lease; giving it back");
                    self.give_back_one(hold, &field).await;
                    self.client.holds.retire_if_done(hold);
                    Ok(Attempt::Held(Some(Duration::ZERO)))
                }
                None => {
                    hold.on_acquired(sent_at, lease, watchdog);
                    Ok(Attempt::Acquired(LockGuard::new(
                        self.clone(),
                        hold.clone(),
                        watchdog,
                    )))
                }
                Some(ttl) => {
                    self.client.holds.retire_if_done(hold);
                    Ok(Attempt::Held(
                        (ttl >= 0).then(|| Duration::from_millis(ttl as u64)),
                    ))
                }
            };
        }
    }

    /// With the `ops` slot taken: undoes one acquisition that Redis counted
    /// but this client will not record (no replica confirmed it, or it was
    /// confirmed too late). If the undo's outcome is unknown, whatever Redis
    /// counts beyond our holds is given back. False if the undo failed.
    async fn give_back_one(&self, hold: &Arc<Hold>, field: &str) -> bool {
        // The holds left after the undo keep their own lease.
        let remaining = hold.lease_after_release(false, self.client.config.lock_watchdog_timeout);
        match self
            .send_unlock(field, remaining, &UnlockRequest::new(), false)
            .await
        {
            Ok(_) => true,
            // Expired meanwhile: nothing of ours is left to give back.
            Err(Error::NotHeld { .. }) => true,
            Err(e) => {
                tracing::warn!(lock = %self.name, error = %e, "undoing an acquire failed; checking what is left");
                self.give_back_untracked(hold).await;
                false
            }
        }
    }

    /// The reply to an acquire was lost. Reads the hold count on the same
    /// connection (so after the script, if it was sent): one more than ours
    /// means the script ran.
    async fn resolve_acquire(&self, hold: &Hold, field: &str, cause: &Error) -> Result<Resolved> {
        let unknown = |e: Error| Error::OutcomeUnknown {
            operation: "acquire",
            name: self.name.to_string(),
            cause: format!("{cause}; then {e}"),
        };
        // A read may be re-sent (and follow a redirect) safely.
        let options = fred::types::config::Options {
            max_attempts: Some(3),
            ..Default::default()
        };
        let redis = self.client.writer(&self.name).with_options(&options);
        let count: Option<i64> = self
            .query(redis.hget(&*self.name, field))
            .await
            .map_err(unknown)?;
        let count = count.unwrap_or(0);
        let ours = i64::from(hold.count());
        tracing::info!(lock = %self.name, count, ours, "resolved an acquire whose reply was lost");
        if count == ours + 1 {
            return Ok(Resolved::Taken);
        }
        if count != ours {
            return Err(unknown(Error::Redis(format!(
                "hold count on Redis is {count}, expected {ours} or {}",
                ours + 1
            ))));
        }
        if ours > 0 {
            // A re-entry that did not run: the lock is still ours alone.
            return Ok(Resolved::Free);
        }
        let ttl: i64 = self.query(redis.pttl(&*self.name)).await.map_err(unknown)?;
        Ok(if ttl == -2 {
            Resolved::Free
        } else {
            Resolved::Held(ttl)
        })
    }

    /// Releases one hold recorded in `hold`. Safe to cancel: the unlock's
    /// request id is fixed before anything is sent, and if the caller stops
    /// waiting (a timeout around `unlock()`), a background task finishes the
    /// same request, replayed through its latch if it already ran; a hold is
    /// never released twice nor left in place and renewed forever.
    pub(crate) async fn release(&self, hold: &Arc<Hold>, watchdog: bool) -> Result<Unlocked> {
        if hold.is_retired() && self.client.lifecycle.is_closing() {
            // Released by the client's shutdown already.
            return Err(Error::Shutdown);
        }
        let request = UnlockRequest::new();
        // Armed before waiting for the slot: even a caller who gives up then
        // must not leave the hold in place.
        let mut finish = FinishOnDrop::new(Unfinished::Release {
            lock: self.clone(),
            hold: hold.clone(),
            watchdog,
            request: request.clone(),
            owns_slot: false,
            busy: self.client.lifecycle.track(),
        });
        let slot = hold.ops.acquire().await.map_err(|_| Error::Shutdown);
        let Ok(slot) = slot else {
            finish.complete();
            return Err(Error::Shutdown);
        };
        slot.forget();
        finish.took_slot();
        let (outcome, slot) = self.release_locked(hold, watchdog, &request).await;
        match slot {
            Slot::Kept => finish.complete(),
            Slot::PassedOn => finish.disarm(),
        }
        outcome
    }

    /// Releases one hold, with the hold's `ops` slot taken. After the script's
    /// reply nothing here waits, so a cancelled caller can only leave it
    /// before the bookkeeping, never halfway through.
    ///
    /// A lost hold is released like any other (the script only touches this
    /// owner's field, and the key may well still be ours), but the caller
    /// hears [`Error::LockLost`]: it did not hold the lock throughout.
    ///
    /// Returns what became of the slot: kept (the caller gives it back), or
    /// passed on to a background drain of untracked holds, which gives it
    /// back when done, so nothing of this owner on this lock runs meanwhile.
    async fn release_locked(
        &self,
        hold: &Arc<Hold>,
        watchdog: bool,
        request: &UnlockRequest,
    ) -> (Result<Unlocked>, Slot) {
        let field = hold.field(&self.client.id);
        if hold.count() == 0 {
            self.client.holds.retire_if_done(hold);
            let err = Error::NotHeld {
                name: self.name.to_string(),
                field,
            };
            return (Err(err), Slot::Kept);
        }
        let was_lost = hold.lease.is_lost();
        let lost = |outcome: Result<Unlocked>| match outcome {
            Ok(_) | Err(Error::NotHeld { .. }) if was_lost => Err(Error::LockLost {
                name: self.name.to_string(),
            }),
            other => other,
        };
        let lease = hold.lease_after_release(watchdog, self.client.config.lock_watchdog_timeout);
        let outcome = self.send_unlock(&field, lease, request, true).await;
        let left = hold.on_released(watchdog);
        match &outcome {
            Ok((Unlocked::StillHeld, sent_at)) if left > 0 => hold.lease.confirm(*sent_at, lease),
            Ok((Unlocked::StillHeld, _)) => {
                // Redis counts holds this client no longer tracks (re-acquired
                // after a local loss, or an acquire whose outcome stayed
                // unknown). They are this owner's: give them back too, or the
                // lock would sit there unrenewed for a whole lease.
                // The drain takes over the `ops` slot and the hold stays in
                // the table until it is done, so a new acquire of this owner
                // waits for it instead of having its hold given back.
                let (lock, hold) = (self.clone(), hold.clone());
                let busy = self.client.lifecycle.track();
                tokio::spawn(async move {
                    lock.give_back_untracked(&hold).await;
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
        self.client.holds.retire_if_done(hold);
        (lost(outcome.map(|(unlocked, _)| unlocked)), Slot::Kept)
    }

    /// With the hold's `ops` slot taken: reads the owner's hold count on Redis
    /// and releases whatever exceeds ours (acquires this client never
    /// recorded). The read is ordered after any script this owner sent on the
    /// same connection.
    async fn give_back_untracked(&self, hold: &Arc<Hold>) {
        let field = hold.field(&self.client.id);
        let count: Result<Option<i64>> = self
            .query(self.client.writer(&self.name).hget(&*self.name, &field))
            .await;
        let extra = match count {
            Ok(count) => count.unwrap_or(0) - i64::from(hold.count()),
            Err(e) => {
                tracing::warn!(lock = %self.name, error = %e, "could not check for untracked holds; any expire with their lease");
                0
            }
        };
        let lease = hold.lease_after_release(false, self.client.config.lock_watchdog_timeout);
        for _ in 0..extra.clamp(0, 64) {
            tracing::info!(lock = %self.name, "giving back a hold this client did not record");
            match self
                .send_unlock(&field, lease, &UnlockRequest::new(), true)
                .await
            {
                Ok((Unlocked::StillHeld, _)) => {}
                Ok((Unlocked::Released, _)) => break,
                Err(e) => {
                    tracing::warn!(lock = %self.name, error = %e, "giving back an untracked hold failed; it expires with its lease");
                    break;
                }
            }
        }
        self.client.holds.retire_if_done(hold);
    }

    /// Drops one hold locally without telling Redis (no runtime to do it).
    pub(crate) fn forget(&self, hold: &Arc<Hold>, watchdog: bool) {
        hold.on_released(watchdog);
        self.client.holds.retire_if_done(hold);
    }

    /// Sends the unlock script for `field`. A lost reply is retried with the
    /// same latch key, so a retry replays the first outcome instead of
    /// releasing twice, and never after the latch could have expired. Returns
    /// the outcome and when the request was first sent: a replayed reply
    /// describes an execution no earlier than that. With `synced`, a reply
    /// the replicas did not confirm is replayed the same way, and is an error
    /// on the last attempt.
    async fn send_unlock(
        &self,
        field: &str,
        lease: Duration,
        request: &UnlockRequest,
        synced: bool,
    ) -> Result<(Unlocked, Instant)> {
        let config = &self.client.config;
        let latch = naming::latch_name(&self.name, &request.id);
        // Long enough to outlive every retry (Redisson: (timeout + delay) * attempts).
        // A synced write may also spend slavesSyncTimeout in its WAIT.
        let per_attempt = config.timeout + self.client.replica_sync.extra_time();
        let latch_ttl = (per_attempt.as_millis() + config.retry_delay.as_millis())
            .saturating_mul(u128::from(config.retry_attempts.max(1)))
            .clamp(1, crate::engine::lease::MAX_LEASE.as_millis()) as i64;
        // A send after the latch expired could apply the unlock a second
        // time. The latch lives from the first send, so only a request that
        // was sent already (by a caller who then left) can be too late.
        let too_late = |first: Instant, now: Instant| {
            now + per_attempt >= first + Duration::from_millis(latch_ttl as u64)
        };
        if let Some(first) = request.first_sent() {
            if too_late(first, Instant::now()) {
                return Err(Error::OutcomeUnknown {
                    operation: "unlock",
                    name: self.name.to_string(),
                    cause: "its latch may have expired, so it cannot be replayed safely".into(),
                });
            }
        }
        let channel = self.channel();
        let mut attempt = 0;
        let first = request.mark_sent();
        let reply = loop {
            let reply = self
                .client
                .write(
                    &UNLOCK,
                    &[&self.name, &channel, &latch],
                    vec![
                        UNLOCK_MESSAGE.into(),
                        (lease.as_millis() as i64).into(),
                        field.into(),
                        self.client.publish_command.into(),
                        latch_ttl.into(),
                    ],
                )
                .await;
            match reply {
                Ok((_, short @ Synced::Short { .. })) if synced => {
                    if attempt + 1 >= config.retry_attempts
                        || too_late(first, Instant::now() + config.retry_delay)
                    {
                        return Err(self
                            .client
                            .replica_sync
                            .not_synced("unlock", &self.name, short));
                    }
                    attempt += 1;
                    tracing::info!(lock = %self.name, attempt, ?short, "unlock not confirmed by replicas; replaying through the latch");
                    tokio::time::sleep(config.retry_delay).await;
                }
                Ok((reply, _)) => break reply,
                Err(e)
                    if e.outcome_unknown()
                        && attempt + 1 < config.retry_attempts
                        && !too_late(first, Instant::now() + config.retry_delay) =>
                {
                    attempt += 1;
                    tracing::info!(lock = %self.name, error = %e, attempt, "unlock reply lost; replaying through the latch");
                    tokio::time::sleep(config.retry_delay).await;
                }
                Err(e) => return Err(self.wrong_type(e)),
            }
        };
        let unlocked = match script::as_i64(&reply) {
            Some(1) => Unlocked::Released,
            Some(0) => Unlocked::StillHeld,
            None if reply.is_null() => {
                return Err(Error::NotHeld {
                    name: self.name.to_string(),
                    field: field.to_string(),
                })
            }
            _ => return Err(script::unexpected("unlock", &reply)),
        };
        // The latch only matters while a retry could still come; delete it now
        // (without waiting, as Redisson does) instead of leaving it to its TTL.
        self.client.latches.discard(latch);
        Ok((unlocked, first))
    }
}

impl std::fmt::Debug for RLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RLock")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .finish()
    }
}

/// Who holds a hold's `ops` slot after a release.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Still the caller, who gives it back.
    Kept,
    /// A background task, which gives it back when done.
    PassedOn,
}

/// What reading the state said about an acquire whose reply was lost.
enum Resolved {
    /// The script ran and took the lock (or one more hold of it).
    Taken,
    /// Someone holds it; the lock's PTTL.
    Held(i64),
    /// Nobody holds it: the script has not run.
    Free,
}

/// One unlock request: its latch id, fixed before anything is sent, and when
/// it was first sent (the latch's lifetime starts there). Clones share both.
#[derive(Clone)]
pub(crate) struct UnlockRequest {
    id: String,
    first_sent: Arc<std::sync::OnceLock<Instant>>,
}

impl UnlockRequest {
    fn new() -> Self {
        UnlockRequest {
            id: format!("{:032x}", rand::random::<u128>()),
            first_sent: Arc::default(),
        }
    }

    fn first_sent(&self) -> Option<Instant> {
        self.first_sent.get().copied()
    }

    /// Records the first send (now, unless an earlier one was recorded).
    fn mark_sent(&self) -> Instant {
        *self.first_sent.get_or_init(Instant::now)
    }
}

/// An operation whose caller may stop waiting before it completes.
pub(crate) enum Unfinished {
    /// An acquire attempt, holding the `ops` slot: settle whether its script
    /// ran, and give the hold back if it did.
    Acquire {
        lock: RLock,
        hold: Arc<Hold>,
        busy: Busy,
    },
    /// An unlock: finish the same request (replayed through its latch).
    Release {
        lock: RLock,
        hold: Arc<Hold>,
        watchdog: bool,
        request: UnlockRequest,
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
    fn took_slot(&mut self) {
        if let Some(Unfinished::Release { owns_slot, .. }) = &mut self.0 {
            *owns_slot = true;
        }
    }

    /// The operation completed and its `ops` slot went to someone else.
    fn disarm(mut self) {
        self.0 = None;
    }

    /// The operation completed: give its `ops` slot back.
    pub(crate) fn complete(mut self) {
        match self.0.take() {
            Some(Unfinished::Acquire { hold, .. }) => hold.ops.add_permits(1),
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
                    lock.client.holds.retire_if_done(&hold);
                    hold.ops.add_permits(1);
                }
                Unfinished::Release {
                    lock,
                    hold,
                    watchdog,
                    owns_slot,
                    ..
                } => {
                    lock.forget(&hold, watchdog);
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
                    lock.give_back_untracked(&hold).await;
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
                    let (outcome, slot) = lock.release_locked(&hold, watchdog, &request).await;
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
