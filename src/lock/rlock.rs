//! [`RLock`]: Redisson's reentrant lock (`getLock(name)`).
//!
//! On the wire: hash `name`, field `<client-id>:<owner-id>` → hold count,
//! with a PX lease; unlock publishes `0` on `redisson_lock__channel:{name}`.
//! Scripts in `lua/lock/`. Everything else (waiting, settlement, renewal) is
//! the engine's.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::engine::hub::UNLOCK_MESSAGE;
use crate::engine::kind::{Call, Latch, LockKind, Patience, Renewal, ScriptCall};
use crate::engine::raw::RawLock;
use crate::engine::script::Script;
use crate::engine::watchdog::FieldRenewal;
use crate::engine::Engine;
use crate::error::Result;
use crate::lock::{Holder, LockGuard, Ttl, Unlocked};
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
/// in one Java thread does); outside it, a second `lock()` waits for the
/// first guard like anyone else. [`RLock::with_owner`] fixes the owner
/// instead, as Redisson's `lockAsync(threadId)` does.
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
    raw: RawLock,
}

impl RLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        RLock {
            raw: RawLock::new(engine, &REENTRANT, name),
        }
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    /// The channel on which unlocks of this lock are published.
    pub fn channel(&self) -> String {
        naming::channel_name(&self.raw.name)
    }

    /// The same lock, acting for a fixed owner: Redisson's
    /// `lockAsync(threadId)`. Every acquisition through this handle re-enters
    /// that owner's hold, wherever it runs; it lets one task acquire and
    /// another release, or several tasks share one reentrant hold.
    pub fn with_owner(&self, owner: OwnerId) -> RLock {
        RLock {
            raw: self.raw.with_owner(owner),
        }
    }

    /// The owner an acquisition would re-enter with right now: the explicit
    /// owner of [`RLock::with_owner`], else the owner of the innermost
    /// enclosing [`LockGuard::scope`] of this lock, else `None` (the next
    /// acquisition gets an owner of its own).
    pub fn current_owner(&self) -> Option<OwnerId> {
        self.raw.current_owner()
    }

    /// The hash field of an owner: `<client-id>:<owner-id>`.
    pub fn field_of(&self, owner: OwnerId) -> String {
        self.raw.field_of(owner)
    }

    /// Waits as long as it takes, then holds the lock; the watchdog renews it
    /// until released.
    ///
    /// # Errors
    ///
    /// [`crate::Error::WrongType`] if the key is not a lock hash,
    /// [`crate::Error::Connection`] / [`crate::Error::Timeout`] if Redis
    /// fails (a waiter then stops waiting), [`crate::Error::Shutdown`] once
    /// the client shuts down, [`crate::Error::LockLost`] for a re-entry into
    /// a hold that was lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future never leaves the lock held. If an
    /// attempt is in flight, a background task reads back whether it took
    /// the lock and gives it back.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// // Give up after a second; nothing stays held either way.
    /// if let Ok(guard) = tokio::time::timeout(Duration::from_secs(1), lock.lock()).await {
    ///     guard?.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, Patience::Forever)
            .await
            .map(|g| g.expect("waiting forever only ends once acquired"))
    }

    /// Waits as long as it takes, then holds the lock for `lease`; it is never
    /// renewed and expires after `lease` unless released first.
    ///
    /// # Errors
    ///
    /// As [`RLock::lock`], and [`crate::Error::InvalidArgument`] for a lease
    /// under 1 ms or over [`crate::MAX_LEASE`].
    ///
    /// # Cancel safety
    ///
    /// As [`RLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(Some(lease), Patience::Forever)
            .await
            .map(|g| g.expect("waiting forever only ends once acquired"))
    }

    /// One attempt, no waiting. `None` when someone else holds the lock.
    ///
    /// # Errors
    ///
    /// As [`RLock::lock`]; [`crate::Error::Timeout`] also when an operation
    /// of the same owner is still settling after one command timeout.
    ///
    /// # Cancel safety
    ///
    /// As [`RLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(None, Patience::Once).await
    }

    /// Waits up to `wait` for the lock; `None` when it stayed taken.
    ///
    /// # Errors
    ///
    /// As [`RLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`RLock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(None, Patience::For(wait)).await
    }

    /// Waits up to `wait`, then holds the lock for `lease` (never renewed).
    ///
    /// # Errors
    ///
    /// As [`RLock::lock_with_lease`].
    ///
    /// # Cancel safety
    ///
    /// As [`RLock::lock`].
    pub async fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire(Some(lease), Patience::For(wait)).await
    }

    async fn acquire(
        &self,
        lease: Option<Duration>,
        patience: Patience,
    ) -> Result<Option<LockGuard>> {
        Ok(self.raw.acquire(lease, patience).await?.map(LockGuard::new))
    }

    /// Releases one hold of the current owner ([`RLock::current_owner`])
    /// without a guard, like Redisson's `unlock()`: for holds whose guard was
    /// given up, or to check that a non-owner cannot unlock. Prefer
    /// [`LockGuard::unlock`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::NotHeld`] when the current owner does not hold it
    /// (Redisson's `IllegalMonitorStateException`); otherwise as
    /// [`RLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// The release of a hold this client tracks finishes in the background
    /// if the future is dropped.
    pub async fn unlock(&self) -> Result<Unlocked> {
        self.raw.unlock().await
    }

    /// Deletes the lock whoever holds it and wakes its waiters (Redisson's
    /// `forceUnlock`). Returns whether there was a lock. Holders in this
    /// client are told at once; others at their next renewal.
    ///
    /// # Errors
    ///
    /// [`crate::Error::WrongType`] for a key of another type (left alone).
    ///
    /// # Cancel safety
    ///
    /// The script is sent once; dropping the future does not stop it.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.raw.force_unlock().await
    }

    /// Whether anyone holds the lock (`EXISTS`).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Connection`] / [`crate::Error::Timeout`].
    pub async fn is_locked(&self) -> Result<bool> {
        self.raw.exists().await
    }

    /// Whether the current owner ([`RLock::current_owner`]) holds the lock:
    /// Redisson's `isHeldByCurrentThread`. Outside a scope and without an
    /// explicit owner there is no current owner, and this is `false`; ask a
    /// guard instead ([`LockGuard::hold_count`]).
    ///
    /// # Errors
    ///
    /// As [`RLock::is_locked`], and [`crate::Error::WrongType`].
    pub async fn is_held(&self) -> Result<bool> {
        match self.raw.current_owner() {
            Some(owner) => self.is_held_by(owner).await,
            None => self.raw.engine.ensure_open().map(|()| false),
        }
    }

    /// Whether `owner` of this client holds the lock (`HEXISTS`).
    ///
    /// # Errors
    ///
    /// As [`RLock::is_held`].
    pub async fn is_held_by(&self, owner: OwnerId) -> Result<bool> {
        self.raw.is_held_by(owner).await
    }

    /// How many times the current owner ([`RLock::current_owner`]) holds the
    /// lock: Redisson's `getHoldCount`. 0 when not held, and outside a scope
    /// without an explicit owner.
    ///
    /// # Errors
    ///
    /// As [`RLock::is_held`].
    pub async fn hold_count(&self) -> Result<u32> {
        self.raw.engine.ensure_open()?;
        match self.raw.current_owner() {
            Some(owner) => self.hold_count_of(owner).await,
            None => Ok(0),
        }
    }

    /// How many times `owner` of this client holds the lock (`HGET`).
    ///
    /// # Errors
    ///
    /// As [`RLock::is_held`].
    pub async fn hold_count_of(&self, owner: OwnerId) -> Result<u32> {
        self.raw.hold_count_of(owner).await
    }

    /// Every holder recorded in the lock's hash, from any client (`HGETALL`).
    /// Empty when the lock is free.
    ///
    /// # Errors
    ///
    /// As [`RLock::is_held`].
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.raw.holders(|field| Some(field)).await
    }

    /// The lock's remaining time to live (`PTTL`).
    ///
    /// # Errors
    ///
    /// As [`RLock::is_locked`].
    pub async fn remaining_ttl(&self) -> Result<Ttl> {
        self.raw.remaining_ttl().await
    }
}

impl std::fmt::Debug for RLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RLock")
            .field("name", &self.raw.name)
            .field("owner", &self.raw.fixed_owner())
            .finish()
    }
}

/// RLock as the engine sees it.
pub(crate) struct Reentrant;

/// The one [`Reentrant`] kind.
pub(crate) static REENTRANT: Reentrant = Reentrant;

/// `lua/lock/acquire.lua`.
static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock/acquire.lua")));
/// `lua/lock/unlock.lua`.
static UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock/unlock.lua")));
/// `lua/lock/force_unlock.lua`.
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock/force_unlock.lua")));

impl LockKind for Reentrant {
    fn name(&self) -> &'static str {
        "lock"
    }

    fn channel(&self, lock: &str, _field: &str) -> String {
        naming::channel_name(lock)
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        ScriptCall {
            script: &ACQUIRE,
            keys: vec![call.lock.to_string()],
            args: vec![call.lease_ms.into(), call.field.into()],
        }
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        unlock_call(&UNLOCK, call, latch)
    }

    fn force_unlock(&self, engine: &Engine, lock: &str) -> ScriptCall {
        ScriptCall {
            script: &FORCE_UNLOCK,
            keys: vec![lock.to_string(), naming::channel_name(lock)],
            args: vec![UNLOCK_MESSAGE.into(), engine.publish_command.into()],
        }
    }

    fn renewal(&self) -> &'static dyn Renewal {
        &FieldRenewal
    }
}

/// RLock's unlock: KEYS [name, channel, latch], ARGV [`0`, lease, field,
/// publish command, latch TTL]. Shared by kinds with RLock's unlock.
pub(crate) fn unlock_call(script: &'static Script, call: &Call, latch: &Latch) -> ScriptCall {
    ScriptCall {
        script,
        keys: vec![
            call.lock.to_string(),
            naming::channel_name(call.lock),
            latch.key.clone(),
        ],
        args: vec![
            UNLOCK_MESSAGE.into(),
            call.lease_ms.into(),
            call.field.into(),
            call.engine.publish_command.into(),
            latch.ttl_ms.into(),
        ],
    }
}
