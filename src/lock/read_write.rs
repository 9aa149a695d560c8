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

use std::sync::{Arc, LazyLock};

use fred::interfaces::HashesInterface;
use fred::types::Value;

use crate::engine::hub::{UNLOCK_MESSAGE, WAKE_ALL_MESSAGE};
use crate::engine::kind::{Call, LockKind, LockedWhen, Renewal};
use crate::engine::script::{Latch, Script, ScriptCall};
use crate::engine::Engine;
use crate::error::Result;
use crate::lock::handle::{sealed, Kind, Lock};
use crate::lock::{LockGuard, Ttl};
use crate::naming;
use crate::owner::OwnerId;

/// A read-write lock named `name`, shared with JVM Redisson clients that call
/// `getReadWriteLock(name)`: any number of readers at once, or one writer.
/// Cheap to clone; creating one sends nothing to Redis.
///
/// Its halves are [`Lock`]s: [`ReadLock`] and [`WriteLock`], with every
/// operation of [`crate::RLock`], handing out [`crate::LockGuard`]s. Owners work as
/// for RLock: every acquisition is its own owner, and inside a guard's
/// `scope` acquisitions of this lock (either half) re-enter with the guard's
/// owner. So a writer can take the read lock in its scope (Redisson's
/// downgrade: when the write lock is then released, the lock stays
/// read-locked); a reader asking for the write lock in its scope could never
/// get it, and is refused with [`Error::InvalidArgument`](crate::Error::InvalidArgument) instead of waiting
/// forever.
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
            read: Lock::new(engine.clone(), name),
            write: Lock::new(engine, name),
        }
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &str {
        self.read.name()
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
    /// [`Error::Connection`](crate::Error::Connection) / [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(rw: redisson_lock::RReadWriteLock) -> redisson_lock::Result<()> {
    /// if !rw.is_locked().await? {
    ///     println!("nobody reads or writes the price list right now");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.read.raw.exists().await
    }

    /// The mode the lock is held in, `None` when free (`HGET name mode`).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) for a key that is not a lock hash; otherwise as
    /// [`RReadWriteLock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// use redisson_lock::RwMode;
    /// # async fn demo(rw: redisson_lock::RReadWriteLock) -> redisson_lock::Result<()> {
    /// match rw.mode().await? {
    ///     Some(RwMode::Read) => println!("price list being read; a writer would wait"),
    ///     Some(RwMode::Write) => println!("price list being updated"),
    ///     None => println!("price list is free"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn mode(&self) -> Result<Option<RwMode>> {
        let raw = &self.read.raw;
        raw.engine.ensure_open()?;
        let mode: Option<String> = raw.query(raw.engine.redis.hget(&*raw.name, "mode")).await?;
        Ok(match mode.as_deref() {
            Some("read") => Some(RwMode::Read),
            Some("write") => Some(RwMode::Write),
            _ => None,
        })
    }

    /// The lock's remaining time to live (`PTTL`).
    ///
    /// # Errors
    ///
    /// As [`RReadWriteLock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// use redisson_lock::Ttl;
    /// # async fn demo(rw: redisson_lock::RReadWriteLock) -> redisson_lock::Result<()> {
    /// // The hash lives as long as its longest hold, read or write.
    /// if let Ttl::Expires(left) = rw.remaining_ttl().await? {
    ///     println!("price-list lock expires in {left:?} unless renewed");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remaining_ttl(&self) -> Result<Ttl> {
        self.read.remaining_ttl().await
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

/// The mode a read-write lock is held in (the hash's `mode` field; `read`
/// or `write` in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RwMode {
    /// One or more readers (and maybe the writer that downgraded).
    Read,
    /// The writer (and maybe its own read holds).
    Write,
}

/// The read half of an [`RReadWriteLock`] (Redisson's `readLock()`): shared
/// with other readers, excluded by a writer (unless the writer is this very
/// owner). Its last release publishes `0`. See [`Lock`] for the operations;
/// `is_locked` is Redisson's read-lock test (read mode, or a writer that
/// also reads), `holders` lists the readers.
pub type ReadLock = Lock<Read>;

/// The write half of an [`RReadWriteLock`] (Redisson's `writeLock()`):
/// excludes every other reader and writer. A re-entry adds its lease to the
/// remaining TTL, as in Redisson. Its last release publishes `1` (every
/// waiter wakes), unless the writer still reads: then the lock stays
/// read-locked and nothing is published. See [`Lock`] for the operations.
pub type WriteLock = Lock<Write>;

/// The kind of a [`ReadLock`].
#[derive(Debug)]
pub enum Read {}

/// The kind of a [`WriteLock`].
#[derive(Debug)]
pub enum Write {}

impl Kind for Read {
    type Guard = LockGuard;

    fn guard(granted: sealed::Granted) -> crate::error::Result<LockGuard> {
        Ok(LockGuard::new(granted.0))
    }
}
impl Kind for Write {
    type Guard = LockGuard;

    fn guard(granted: sealed::Granted) -> crate::error::Result<LockGuard> {
        Ok(LockGuard::new(granted.0))
    }
}

impl sealed::Sealed for Read {
    fn describe() -> sealed::Described {
        sealed::Described(&READ)
    }
}

impl sealed::Sealed for Write {
    fn describe() -> sealed::Described {
        sealed::Described(&WRITE)
    }
}

/// The read half as the engine sees it.
struct ReadKind;
/// The write half as the engine sees it.
struct WriteKind;

static READ: ReadKind = ReadKind;
static WRITE: WriteKind = WriteKind;

static READ_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/read_acquire.lua")));
static READ_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../lua/rwlock/read_unlock.lua")));
static READ_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../lua/rwlock/read_renew.lua")));
static READ_IS_LOCKED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/read_is_locked.lua")));
static WRITE_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/write_acquire.lua")));
static WRITE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/write_unlock.lua")));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/rwlock/force_unlock.lua")));

/// Force unlock in one mode.
fn force_unlock(
    engine: &Engine,
    lock: &str,
    mode: &str,
    message: i64,
    only_while: Option<&str>,
) -> ScriptCall {
    let mut args = vec![mode.into(), message.into(), engine.publish_arg()];
    args.extend(only_while.map(Value::from));
    ScriptCall {
        script: &FORCE_UNLOCK,
        keys: vec![lock.to_string(), naming::rwlock_channel_name(lock)],
        args,
    }
}

impl LockKind for ReadKind {
    fn name(&self) -> &'static str {
        "read"
    }

    fn channel(&self, lock: &str, _field: &str) -> Option<String> {
        Some(naming::rwlock_channel_name(lock))
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
                call.engine.publish_arg(),
                latch.ttl_ms.into(),
            ],
        }
    }

    fn unlock_resets_ttl(&self) -> bool {
        false
    }

    fn locked_when(&self) -> LockedWhen {
        LockedWhen::Script(&READ_IS_LOCKED)
    }

    fn holder<'a>(&self, field: &'a str) -> Option<&'a str> {
        (field != "mode" && !field.ends_with(":write")).then_some(field)
    }

    fn force_unlock(&self, engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
        force_unlock(engine, lock, "read", UNLOCK_MESSAGE, only_while)
    }

    fn renewal(&self) -> &'static Renewal {
        &READ_RENEWAL
    }
}

impl LockKind for WriteKind {
    fn name(&self) -> &'static str {
        "write"
    }

    fn count_place(&self) -> crate::engine::kind::CountPlace {
        crate::engine::kind::CountPlace::WriteField
    }

    fn field(&self, client_id: &str, owner: OwnerId) -> String {
        format!("{}:write", naming::field_name(client_id, owner))
    }

    fn channel(&self, lock: &str, _field: &str) -> Option<String> {
        Some(naming::rwlock_channel_name(lock))
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
                call.engine.publish_arg(),
                latch.ttl_ms.into(),
            ],
        }
    }

    fn force_unlock(&self, engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
        force_unlock(engine, lock, "write", WAKE_ALL_MESSAGE, only_while)
    }

    fn locked_when(&self) -> LockedWhen {
        LockedWhen::ModeIs("write")
    }

    fn holder<'a>(&self, field: &'a str) -> Option<&'a str> {
        field.strip_suffix(":write")
    }

    fn refused_while_holding(&self) -> Option<(&'static dyn LockKind, &'static str)> {
        Some((
            &READ,
            "it holds the read lock and asks for the write lock: a reader cannot upgrade (it \
             would wait for itself); release the read lock first",
        ))
    }
}

/// Redisson's ReadLockTask (4.4+): per lock, every read hold of this
/// client's owners and then the lock, in one script; one reply entry per lock.
pub(crate) static READ_RENEWAL: Renewal = Renewal {
    name: "read",
    script: || &READ_RENEW,
    with_now: false,
    per_lock: true,
    keys: |lock| vec![lock.to_string(), naming::read_key_prefix(lock)],
    hold_args: |_, field| vec![field.into()],
};
