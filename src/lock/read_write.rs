//! [`RReadWriteLock`]: Redisson's read-write lock (`getReadWriteLock(name)`),
//! its two halves [`ReadLock`] and [`WriteLock`], and their guards.
//!
//! On the wire: hash `name` with field `mode` (`read`/`write`), readers
//! `<client-id>:<owner-id>` → read hold count, the writer
//! `<client-id>:<owner-id>:write` → write hold count; every read hold `n` has
//! its own expiring key `{name}:<client-id>:<owner-id>:rwlock_timeout:<n>`,
//! and the hash lives as long as its longest hold. Channel
//! `redisson_rwlock:{name}`: a read unlock publishes `0` (wakes one waiter), a
//! writer's full release `1` (wakes every waiter: readers may all go).
//! Scripts in `lua/rwlock/`.

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use fred::interfaces::HashesInterface;
use fred::types::Value;

use crate::engine::hold::Hold;
use crate::engine::hub::{UNLOCK_MESSAGE, WAKE_ALL_MESSAGE};
use crate::engine::kind::{Call, Latch, LockKind, Patience, Renewal, ScriptCall};
use crate::engine::raw::{Held, RawLock};
use crate::engine::script::{self, Script};
use crate::engine::watchdog::FieldRenewal;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::lock::{Holder, Ttl, Unlocked};
use crate::naming;
use crate::{LostSignal, OwnerId};

/// A read-write lock named `name`, shared with JVM Redisson clients that call
/// `getReadWriteLock(name)`: any number of readers at once, or one writer.
/// Cheap to clone; creating one sends nothing to Redis.
///
/// Owners work as for [`crate::RLock`]: every acquisition is its own owner,
/// and inside a guard's `scope` acquisitions of this lock (either half)
/// re-enter with the guard's owner. So a writer can take the read lock in its
/// scope (Redisson's downgrade: when the write lock is then released, the
/// lock stays read-locked); a reader asking for the write lock in its scope
/// could never get it, and is refused with [`Error::InvalidArgument`] instead
/// of waiting forever.
///
/// ```no_run
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let rw = client.read_write_lock("catalog")?;
/// let reading = rw.read().lock().await?;   // many readers may hold it at once
/// reading.unlock().await?;
/// let writing = rw.write().lock().await?;  // one writer, no reader
/// let downgraded = writing.scope(rw.read().lock()).await?;
/// writing.unlock().await?;                 // still read-locked, by us
/// downgraded.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RReadWriteLock {
    read: ReadLock,
    write: WriteLock,
}

impl RReadWriteLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        RReadWriteLock {
            read: ReadLock {
                raw: RawLock::new(engine.clone(), &READ, name),
            },
            write: WriteLock {
                raw: RawLock::new(engine, &WRITE, name),
            },
        }
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.read.raw.name
    }

    /// The channel on which both halves announce releases.
    pub fn channel(&self) -> String {
        naming::rwlock_channel_name(self.name())
    }

    /// The read half (Redisson's `readLock()`).
    pub fn read(&self) -> ReadLock {
        self.read.clone()
    }

    /// The write half (Redisson's `writeLock()`).
    pub fn write(&self) -> WriteLock {
        self.write.clone()
    }

    /// The same lock, both halves acting for a fixed owner (Redisson's
    /// `lockAsync(threadId)`).
    pub fn with_owner(&self, owner: OwnerId) -> RReadWriteLock {
        RReadWriteLock {
            read: self.read.with_owner(owner),
            write: self.write.with_owner(owner),
        }
    }

    /// Whether the lock is held in either mode (`EXISTS`).
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] / [`Error::Timeout`].
    pub async fn is_locked(&self) -> Result<bool> {
        self.read.raw.exists().await
    }

    /// The mode the lock is held in, `None` when free (`HGET name mode`).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] for a key that is not a lock hash; otherwise as
    /// [`RReadWriteLock::is_locked`].
    pub async fn mode(&self) -> Result<Option<RwMode>> {
        mode_of(&self.read.raw).await
    }

    /// The lock's remaining time to live (`PTTL`).
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::is_locked`].
    pub async fn remaining_ttl(&self) -> Result<Ttl> {
        self.read.raw.remaining_ttl().await
    }
}

impl std::fmt::Debug for RReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RReadWriteLock")
            .field("name", &self.name())
            .field("owner", &self.read.raw.fixed_owner())
            .finish()
    }
}

/// The mode a read-write lock is held in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwMode {
    /// One or more readers (and maybe the writer that downgraded).
    Read,
    /// The writer (and maybe its own read holds).
    Write,
}

/// The read half of an [`RReadWriteLock`]: shared with other readers,
/// excluded by a writer (unless the writer is this very owner).
#[derive(Clone)]
pub struct ReadLock {
    raw: RawLock,
}

/// The write half of an [`RReadWriteLock`]: excludes every other reader and
/// writer.
#[derive(Clone)]
pub struct WriteLock {
    raw: RawLock,
}

impl ReadLock {
    /// The same half, acting for a fixed owner.
    pub fn with_owner(&self, owner: OwnerId) -> ReadLock {
        ReadLock {
            raw: self.raw.with_owner(owner),
        }
    }

    /// Waits as long as it takes, then holds a read lock, renewed by the
    /// watchdog until released.
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future never leaves a read hold behind (an
    /// attempt in flight is settled in the background).
    pub async fn lock(&self) -> Result<ReadGuard> {
        acquire(&self.raw, None, Patience::Forever)
            .await
            .map(|g| ReadGuard::new(g.expect("waiting forever only ends once acquired")))
    }

    /// Waits as long as it takes, then holds a read lock for `lease` (never
    /// renewed).
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::lock_with_lease`].
    ///
    /// # Cancel safety
    ///
    /// As [`ReadLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<ReadGuard> {
        acquire(&self.raw, Some(lease), Patience::Forever)
            .await
            .map(|g| ReadGuard::new(g.expect("waiting forever only ends once acquired")))
    }

    /// One attempt; `None` while a writer holds the lock.
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::try_lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`ReadLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<ReadGuard>> {
        Ok(acquire(&self.raw, None, Patience::Once)
            .await?
            .map(ReadGuard::new))
    }

    /// Waits up to `wait`; `None` when a writer kept it.
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`ReadLock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<ReadGuard>> {
        Ok(acquire(&self.raw, None, Patience::For(wait))
            .await?
            .map(ReadGuard::new))
    }

    /// Waits up to `wait`, then holds a read lock for `lease`.
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::lock_with_lease`].
    ///
    /// # Cancel safety
    ///
    /// As [`ReadLock::lock`].
    pub async fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<ReadGuard>> {
        Ok(acquire(&self.raw, Some(lease), Patience::For(wait))
            .await?
            .map(ReadGuard::new))
    }

    /// Releases one read hold of the current owner without a guard
    /// (Redisson's `unlock()`).
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the current owner holds no read lock.
    ///
    /// # Cancel safety
    ///
    /// As [`crate::RLock::unlock`].
    pub async fn unlock(&self) -> Result<Unlocked> {
        self.raw.unlock().await
    }

    /// Deletes the lock if it is read-locked, whoever holds it, and wakes its
    /// waiters (Redisson's `readLock().forceUnlock()`). Readers' hold keys are
    /// left to expire.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] for a key of another type.
    ///
    /// # Cancel safety
    ///
    /// The script is sent once; dropping the future does not stop it.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.raw.force_unlock().await
    }

    /// Whether the lock is read-locked (Redisson's `readLock().isLocked()`):
    /// in read mode, or write-locked by a writer that also reads.
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::mode`].
    pub async fn is_locked(&self) -> Result<bool> {
        let raw = &self.raw;
        raw.engine.ensure_open()?;
        let reply = READ_IS_LOCKED
            .run(
                raw.engine.writer(&raw.name),
                raw.engine.timeout(),
                &[&raw.name],
                vec![],
            )
            .await
            .map_err(|e| raw.wrong_type(e))?;
        Ok(script::as_i64(&reply) == Some(1))
    }

    /// How many read holds `owner` of this client has (`HGET`).
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::mode`].
    pub async fn hold_count_of(&self, owner: OwnerId) -> Result<u32> {
        self.raw.hold_count_of(owner).await
    }

    /// How many read holds the current owner (explicit, or the enclosing
    /// scope's) has; 0 outside a scope without an explicit owner.
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::mode`].
    pub async fn hold_count(&self) -> Result<u32> {
        self.raw.engine.ensure_open()?;
        match self.raw.current_owner() {
            Some(owner) => self.hold_count_of(owner).await,
            None => Ok(0),
        }
    }

    /// Every reader recorded in the lock's hash, from any client.
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::mode`].
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.raw
            .holders(|field| (field != "mode" && !field.ends_with(":write")).then_some(field))
            .await
    }
}

impl WriteLock {
    /// The same half, acting for a fixed owner.
    pub fn with_owner(&self, owner: OwnerId) -> WriteLock {
        WriteLock {
            raw: self.raw.with_owner(owner),
        }
    }

    /// Waits as long as it takes (for every reader and any other writer to
    /// leave), then holds the write lock, renewed by the watchdog.
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::lock`], and [`Error::InvalidArgument`] when this
    /// owner holds the read lock (a reader cannot upgrade).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future never leaves the write lock held.
    pub async fn lock(&self) -> Result<WriteGuard> {
        acquire(&self.raw, None, Patience::Forever)
            .await
            .map(|g| WriteGuard::new(g.expect("waiting forever only ends once acquired")))
    }

    /// Waits as long as it takes, then holds the write lock for `lease`
    /// (never renewed). A re-entry adds `lease` to the remaining TTL, as in
    /// Redisson.
    ///
    /// # Errors
    ///
    /// As [`WriteLock::lock`], and [`crate::RLock::lock_with_lease`].
    ///
    /// # Cancel safety
    ///
    /// As [`WriteLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<WriteGuard> {
        acquire(&self.raw, Some(lease), Patience::Forever)
            .await
            .map(|g| WriteGuard::new(g.expect("waiting forever only ends once acquired")))
    }

    /// One attempt; `None` while anyone else reads or writes.
    ///
    /// # Errors
    ///
    /// As [`WriteLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`WriteLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<WriteGuard>> {
        Ok(acquire(&self.raw, None, Patience::Once)
            .await?
            .map(WriteGuard::new))
    }

    /// Waits up to `wait`; `None` when it stayed taken.
    ///
    /// # Errors
    ///
    /// As [`WriteLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`WriteLock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<WriteGuard>> {
        Ok(acquire(&self.raw, None, Patience::For(wait))
            .await?
            .map(WriteGuard::new))
    }

    /// Waits up to `wait`, then holds the write lock for `lease`.
    ///
    /// # Errors
    ///
    /// As [`WriteLock::lock_with_lease`].
    ///
    /// # Cancel safety
    ///
    /// As [`WriteLock::lock`].
    pub async fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<WriteGuard>> {
        Ok(acquire(&self.raw, Some(lease), Patience::For(wait))
            .await?
            .map(WriteGuard::new))
    }

    /// Releases one write hold of the current owner without a guard.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the current owner does not hold the write lock.
    ///
    /// # Cancel safety
    ///
    /// As [`crate::RLock::unlock`].
    pub async fn unlock(&self) -> Result<Unlocked> {
        self.raw.unlock().await
    }

    /// Deletes the lock if it is write-locked, whoever holds it, and wakes
    /// every waiter (Redisson's `writeLock().forceUnlock()`).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] for a key of another type.
    ///
    /// # Cancel safety
    ///
    /// The script is sent once; dropping the future does not stop it.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.raw.force_unlock().await
    }

    /// Whether the lock is write-locked (Redisson's `writeLock().isLocked()`).
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::mode`].
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(mode_of(&self.raw).await? == Some(RwMode::Write))
    }

    /// How many write holds `owner` of this client has (`HGET ...:write`).
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::mode`].
    pub async fn hold_count_of(&self, owner: OwnerId) -> Result<u32> {
        self.raw.hold_count_of(owner).await
    }

    /// How many write holds the current owner (explicit, or the enclosing
    /// scope's) has; 0 outside a scope without an explicit owner.
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::mode`].
    pub async fn hold_count(&self) -> Result<u32> {
        self.raw.engine.ensure_open()?;
        match self.raw.current_owner() {
            Some(owner) => self.hold_count_of(owner).await,
            None => Ok(0),
        }
    }

    /// The writer recorded in the lock's hash, if any, from any client.
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::mode`].
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.raw.holders(|field| field.strip_suffix(":write")).await
    }
}

/// The mode a read-write lock is held in (`HGET name mode`).
async fn mode_of(raw: &RawLock) -> Result<Option<RwMode>> {
    raw.engine.ensure_open()?;
    let mode: Option<String> = raw.query(raw.engine.redis.hget(&*raw.name, "mode")).await?;
    Ok(match mode.as_deref() {
        Some("read") => Some(RwMode::Read),
        Some("write") => Some(RwMode::Write),
        _ => None,
    })
}

async fn acquire(
    raw: &RawLock,
    lease: Option<Duration>,
    patience: Patience,
) -> Result<Option<Held>> {
    raw.acquire(lease, patience).await
}

impl std::fmt::Debug for ReadLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadLock")
            .field("name", &self.raw.name)
            .field("owner", &self.raw.fixed_owner())
            .finish()
    }
}

impl std::fmt::Debug for WriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLock")
            .field("name", &self.raw.name)
            .field("owner", &self.raw.fixed_owner())
            .finish()
    }
}

/// One read hold. Release it with [`ReadGuard::unlock`]; dropping it releases
/// it in the background. Inside [`ReadGuard::scope`], read acquisitions of
/// the same lock re-enter this hold.
#[must_use = "dropping the guard releases the read lock at once"]
#[derive(Debug)]
pub struct ReadGuard {
    held: Held,
}

/// The write hold. Release it with [`WriteGuard::unlock`]; dropping it
/// releases it in the background. Inside [`WriteGuard::scope`], write
/// acquisitions re-enter it and read acquisitions downgrade.
#[must_use = "dropping the guard releases the write lock at once"]
#[derive(Debug)]
pub struct WriteGuard {
    held: Held,
}

impl ReadGuard {
    fn new(held: Held) -> Self {
        ReadGuard { held }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> OwnerId {
        self.held.owner()
    }

    /// The reader's hash field: `<client-id>:<owner-id>`.
    pub fn field(&self) -> String {
        self.held.field()
    }

    /// Runs `work` so that acquisitions of this lock inside it re-enter with
    /// this hold's owner (see [`crate::LockGuard::scope`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `work`; the scope holds nothing.
    pub fn scope<F: Future>(&self, work: F) -> impl Future<Output = F::Output> {
        self.held.scope(work)
    }

    /// How many read holds this owner has on Redis.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] / [`Error::Timeout`].
    pub async fn hold_count(&self) -> Result<u32> {
        self.held.hold_count().await
    }

    /// True when the watchdog renews this hold.
    pub fn is_renewed(&self) -> bool {
        self.held.is_renewed()
    }

    /// True once the hold is known lost or its lease deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Completes when the hold is lost. See [`LostSignal`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        self.lost_signal().lost().await
    }

    /// A `'static` handle on the lost signal.
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// Releases this read hold. The last hold of the lock frees it and
    /// publishes `0`.
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::unlock`].
    ///
    /// # Cancel safety
    ///
    /// The release runs to completion even if this future is dropped.
    pub async fn unlock(self) -> Result<Unlocked> {
        self.held.unlock().await
    }
}

impl WriteGuard {
    fn new(held: Held) -> Self {
        WriteGuard { held }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> OwnerId {
        self.held.owner()
    }

    /// The writer's hash field: `<client-id>:<owner-id>:write`.
    pub fn field(&self) -> String {
        self.held.field()
    }

    /// Runs `work` so that acquisitions of this lock inside it act for this
    /// hold's owner: the write lock re-enters, the read lock downgrades.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `work`; the scope holds nothing.
    pub fn scope<F: Future>(&self, work: F) -> impl Future<Output = F::Output> {
        self.held.scope(work)
    }

    /// How many write holds this owner has on Redis.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] / [`Error::Timeout`].
    pub async fn hold_count(&self) -> Result<u32> {
        self.held.hold_count().await
    }

    /// True when the watchdog renews this hold.
    pub fn is_renewed(&self) -> bool {
        self.held.is_renewed()
    }

    /// True once the hold is known lost or its lease deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Completes when the hold is lost. See [`LostSignal`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        self.lost_signal().lost().await
    }

    /// A `'static` handle on the lost signal.
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// Releases this write hold. The writer's last release frees the lock
    /// and publishes `1` (every waiter wakes), unless the writer still reads:
    /// then the lock stays read-locked and nothing is published.
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::unlock`].
    ///
    /// # Cancel safety
    ///
    /// The release runs to completion even if this future is dropped.
    pub async fn unlock(self) -> Result<Unlocked> {
        self.held.unlock().await
    }
}

/// The read half as the engine sees it.
pub(crate) struct Read;
/// The write half as the engine sees it.
pub(crate) struct Write;

pub(crate) static READ: Read = Read;
pub(crate) static WRITE: Write = Write;

static READ_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/read_acquire.lua")));
static READ_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/read_unlock.lua")));
static READ_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/read_renew.lua")));
static READ_IS_LOCKED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/read_is_locked.lua")));
static WRITE_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/write_acquire.lua")));
static WRITE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/write_unlock.lua")));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/force_unlock.lua")));

/// Force unlock in one mode.
fn force_unlock(engine: &Engine, lock: &str, mode: &str, message: i64) -> ScriptCall {
    ScriptCall {
        script: &FORCE_UNLOCK,
        keys: vec![lock.to_string(), naming::rwlock_channel_name(lock)],
        args: vec![mode.into(), message.into(), engine.publish_command.into()],
    }
}

impl LockKind for Read {
    fn name(&self) -> &'static str {
        "read"
    }

    fn channel(&self, lock: &str, _field: &str) -> String {
        naming::rwlock_channel_name(lock)
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        ScriptCall {
            script: &READ_ACQUIRE,
            keys: vec![
                call.lock.to_string(),
                naming::read_timeout_prefix(call.lock, call.field),
            ],
            args: vec![
                call.lease_ms.into(),
                call.field.into(),
                format!("{}:write", call.field).into(),
            ],
        }
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        ScriptCall {
            script: &READ_UNLOCK,
            keys: vec![
                call.lock.to_string(),
                naming::rwlock_channel_name(call.lock),
                naming::read_timeout_prefix(call.lock, call.field),
                naming::read_key_prefix(call.lock),
                latch.key.clone(),
            ],
            args: vec![
                UNLOCK_MESSAGE.into(),
                call.field.into(),
                call.engine.publish_command.into(),
                latch.ttl_ms.into(),
            ],
        }
    }

    fn unlock_resets_ttl(&self) -> bool {
        false
    }

    fn force_unlock(&self, engine: &Engine, lock: &str) -> ScriptCall {
        force_unlock(engine, lock, "read", UNLOCK_MESSAGE)
    }

    fn renewal(&self) -> &'static dyn Renewal {
        &ReadRenewal
    }
}

impl LockKind for Write {
    fn name(&self) -> &'static str {
        "write"
    }

    fn field(&self, client_id: &str, owner: OwnerId) -> String {
        format!("{}:write", naming::field_name(client_id, owner))
    }

    fn channel(&self, lock: &str, _field: &str) -> String {
        naming::rwlock_channel_name(lock)
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        ScriptCall {
            script: &WRITE_ACQUIRE,
            keys: vec![call.lock.to_string()],
            args: vec![call.lease_ms.into(), call.field.into()],
        }
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        ScriptCall {
            script: &WRITE_UNLOCK,
            keys: vec![
                call.lock.to_string(),
                naming::rwlock_channel_name(call.lock),
                latch.key.clone(),
            ],
            args: vec![
                WAKE_ALL_MESSAGE.into(),
                call.lease_ms.into(),
                call.field.into(),
                call.engine.publish_command.into(),
                latch.ttl_ms.into(),
            ],
        }
    }

    fn force_unlock(&self, engine: &Engine, lock: &str) -> ScriptCall {
        force_unlock(engine, lock, "write", WAKE_ALL_MESSAGE)
    }

    fn renewal(&self) -> &'static dyn Renewal {
        &FieldRenewal
    }

    fn refuse(&self, engine: &Engine, lock: &str, owner: OwnerId) -> Option<Error> {
        let reading = engine
            .holds
            .get(&READ, &Arc::from(lock), owner)
            .is_some_and(|hold| hold.count() > 0);
        reading.then(|| {
            Error::InvalidArgument(format!(
                "owner {owner} holds the read lock of `{lock}` and asks for its write lock: a \
                 reader cannot upgrade (it would wait for itself); release the read lock first"
            ))
        })
    }
}

/// Redisson's ReadLockTask (4.4+): per lock, every read hold of this
/// client's owners and then the lock, in one script; one reply entry per lock.
pub(crate) struct ReadRenewal;

impl Renewal for ReadRenewal {
    fn name(&self) -> &'static str {
        "read"
    }

    fn batch(
        &self,
        engine: &Engine,
        holds: &[Arc<Hold>],
        lease_ms: i64,
    ) -> (ScriptCall, Vec<Vec<usize>>) {
        // Holds arrive sorted by lock name: one pair of keys per lock, then
        // its readers' fields after their count.
        let mut keys = vec![];
        let mut args: Vec<Value> = vec![lease_ms.into()];
        let mut entries: Vec<Vec<usize>> = vec![];
        let mut count_at = 0;
        for (i, hold) in holds.iter().enumerate() {
            if i == 0 || holds[i - 1].name != hold.name {
                keys.push(hold.name.to_string());
                keys.push(naming::read_key_prefix(&hold.name));
                count_at = args.len();
                args.push(0.into());
                entries.push(vec![]);
            }
            let entry = entries.last_mut().expect("pushed above");
            entry.push(i);
            args[count_at] = (entry.len() as i64).into();
            args.push(hold.field(&engine.id).into());
        }
        let call = ScriptCall {
            script: &READ_RENEW,
            keys,
            args,
        };
        (call, entries)
    }
}
