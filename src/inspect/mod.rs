//! What is in Redis: every Redisson object's state, read from its keys the
//! way an operator needs it, for Java and Rust holders alike.
//!
//! * [`RedissonClient::inspect`] reads one object: each holder and hold
//!   count, the lease left, a fair lock's line with each waiter's deadline,
//!   a read-write lock's readers with their hold keys, a semaphore's permits
//!   and leases, a latch's count, a fenced lock's last token, and the
//!   subscribers of each of its channels.
//! * [`RedissonClient::scan_objects`] lists every object whose name matches a
//!   pattern, with `SCAN` on every primary, in calls of bounded size.
//!
//! Both only read: plain commands (`SCAN`, `TYPE`, `PTTL`, `HSCAN`,
//! `GETRANGE`, `LLEN`, `LRANGE`, `ZCARD`, `ZCOUNT`, `ZRANGE`, `PUBSUB`), each
//! with bounded work, never a script, on the client's command connection.
//! The keys of one object are read one after the other, not atomically.
//!
//! ## How a key's kind is told
//!
//! | key | kind |
//! |---|---|
//! | hash whose fields are `<client-id>:<owner-id>` → count | lock; **fenced lock** when `redisson_lock_token:{name}` exists, **fair lock** when `redisson_lock_queue:{name}` or `redisson_lock_timeout:{name}` does |
//! | hash with a `mode` field (`read` / `write`), readers' fields and the writer's `...:write` | read-write lock |
//! | hash of `<h>` → owner, `<h>:<owner>:lock_count`, `<h>:<owner>:expire_time` | group multi lock (Redisson's `getMultiLock(group, values)`) |
//! | string integer with `{name}:timeout` (zset) | expirable semaphore |
//! | string integer | see below |
//!
//! A semaphore and a count-down latch are both a bare integer string, and so
//! is any counter (Redisson's `RAtomicLong`). The value is read as a
//! **semaphore** when it is 0 or less (a latch's key is deleted when it
//! reaches 0), when it has a TTL (a latch's never has one), or when its
//! semaphore channel `redisson_sc:{name}` has subscribers; as a **count-down
//! latch** when its latch channel has subscribers. Otherwise it is a
//! [`ObjectKind::Counter`]: a semaphore's permits or a latch's count, which
//! its keys alone cannot tell. A fair lock that nobody waits for has no queue
//! and reads as a plain lock; a spin lock reads as a lock too.
//!
//! ```no_run
//! use redisson_lock::inspect::ObjectState;
//!
//! # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
//! let info = client.inspect("orders:42").await?;
//! if let ObjectState::Lock(lock) = &info.state {
//!     for holder in &lock.holders {
//!         println!("{}:{} holds it {} time(s)", holder.client_id, holder.owner, holder.hold_count);
//!     }
//! }
//! println!("{}", serde_json::to_string(&info).unwrap()); // for a health page
//! # Ok(()) }
//! ```

mod channels;
mod clients;
mod glob;
mod keys;
mod read;
mod scan;
mod shape;
mod wire;

use std::collections::BTreeMap;

use serde::Serialize;

pub use channels::{ChannelMessage, ChannelWatch, Watched};

use crate::client::RedissonClient;
use crate::engine::registry::ClientIdentity;
use crate::error::Result;
use crate::lock::read_write::RwMode;
use crate::lock::Holder;

/// How many entries of one collection (a fair queue, a lease set, a
/// reader's holds) [`RedissonClient::inspect`] lists; the totals are always
/// given.
pub const LISTED: usize = 1000;

/// The kind of a Redisson object, as its keys show it (see the [module
/// docs](self) for how each is told).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ObjectKind {
    /// No key of this name.
    Absent,
    /// An `RLock` (or a spin lock, or a fair lock nobody waits for).
    Lock,
    /// An `RFairLock` with waiters (or their queue left behind).
    FairLock,
    /// An `RReadWriteLock`.
    ReadWriteLock,
    /// An `RFencedLock`: held, or free with its token counter.
    FencedLock,
    /// A group multi lock (Redisson's `getMultiLock(group, values)`).
    MultiLockGroup,
    /// An `RSemaphore`.
    Semaphore,
    /// An `RPermitExpirableSemaphore`.
    ExpirableSemaphore,
    /// An `RCountDownLatch`.
    CountDownLatch,
    /// An integer string that may be a semaphore or a count-down latch.
    Counter,
    /// Only keys a finished operation leaves for a while: unlock or request
    /// latches, read-hold keys (see [`ObjectSummary::side_keys`]).
    Leftovers,
    /// A key that is not a Redisson object.
    Other,
}

impl ObjectKind {
    /// The kind's name, as in JSON (`fair-lock`, `count-down-latch`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Absent => "absent",
            ObjectKind::Lock => "lock",
            ObjectKind::FairLock => "fair-lock",
            ObjectKind::ReadWriteLock => "read-write-lock",
            ObjectKind::FencedLock => "fenced-lock",
            ObjectKind::MultiLockGroup => "multi-lock-group",
            ObjectKind::Semaphore => "semaphore",
            ObjectKind::ExpirableSemaphore => "expirable-semaphore",
            ObjectKind::CountDownLatch => "count-down-latch",
            ObjectKind::Counter => "counter",
            ObjectKind::Leftovers => "leftovers",
            ObjectKind::Other => "other",
        }
    }
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything about one object, from [`RedissonClient::inspect`].
/// Serializes to JSON with the state's fields next to `name` and `kind`.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ObjectInfo {
    /// The object's name (its own key).
    pub name: String,
    /// What the object holds, by kind.
    #[serde(flatten)]
    pub state: ObjectState,
    /// The Redis type of the object's own key (`none` when absent).
    pub redis_type: String,
    /// Time left before the object's key expires, in ms; `None` when the key
    /// is absent or has no TTL.
    pub ttl_ms: Option<u64>,
    /// The key exists and never expires (`PTTL` -1). A lock key in this state
    /// stays until someone deletes it.
    pub no_ttl: bool,
    /// The object's pub/sub channels and how many connections listen on
    /// each: waiting clients (one connection per client, whatever its number
    /// of waiters), and any `watch`.
    pub channels: Vec<ChannelWaiters>,
    /// Who each client named above (holders, waiters) is, by client id, as
    /// it registered itself ([`crate::Registry`]); `null` for a client
    /// that did not register (a JVM Redisson client, or a Rust client with
    /// the registry off). A client whose entry cannot be read (an ACL
    /// without `~redisson_lock__client:*`) is not listed: unknown.
    pub clients: BTreeMap<String, Option<ClientIdentity>>,
}

impl ObjectInfo {
    /// The object's kind.
    pub fn kind(&self) -> ObjectKind {
        self.state.kind()
    }
}

/// One channel and its subscribers (`PUBSUB NUMSUB` plus `PUBSUB
/// SHARDNUMSUB`, summed over every primary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ChannelWaiters {
    /// The channel.
    pub channel: String,
    /// Connections subscribed to it.
    pub subscribers: u64,
}

/// An object's state, by kind (`"kind": "lock"`, ... in JSON).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ObjectState {
    /// No key of this name, and none derived from it.
    Absent,
    /// An `RLock`, a spin lock, or a fair lock nobody waits for.
    Lock(LockState),
    /// An `RFairLock` with its line of waiters.
    FairLock(FairLockState),
    /// An `RReadWriteLock`.
    ReadWriteLock(ReadWriteLockState),
    /// An `RFencedLock`.
    FencedLock(FencedLockState),
    /// A group multi lock.
    MultiLockGroup(GroupState),
    /// An `RSemaphore`.
    Semaphore(SemaphoreState),
    /// An `RPermitExpirableSemaphore`.
    ExpirableSemaphore(ExpirableSemaphoreState),
    /// An `RCountDownLatch`.
    CountDownLatch(LatchState),
    /// An integer string: a semaphore or a latch, which its keys cannot tell.
    Counter(CounterState),
    /// A key that is not a Redisson object (its type is in
    /// [`ObjectInfo::redis_type`]).
    Other,
}

impl ObjectState {
    /// The kind of object this state is of.
    pub fn kind(&self) -> ObjectKind {
        match self {
            ObjectState::Absent => ObjectKind::Absent,
            ObjectState::Lock(_) => ObjectKind::Lock,
            ObjectState::FairLock(_) => ObjectKind::FairLock,
            ObjectState::ReadWriteLock(_) => ObjectKind::ReadWriteLock,
            ObjectState::FencedLock(_) => ObjectKind::FencedLock,
            ObjectState::MultiLockGroup(_) => ObjectKind::MultiLockGroup,
            ObjectState::Semaphore(_) => ObjectKind::Semaphore,
            ObjectState::ExpirableSemaphore(_) => ObjectKind::ExpirableSemaphore,
            ObjectState::CountDownLatch(_) => ObjectKind::CountDownLatch,
            ObjectState::Counter(_) => ObjectKind::Counter,
            ObjectState::Other => ObjectKind::Other,
        }
    }
}

/// A lock's holders (one, unless the key was written by hand).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct LockState {
    /// Each `<client-id>:<owner-id>` field and its hold count.
    pub holders: Vec<Holder>,
}

/// A fair lock: its holder and its line.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FairLockState {
    /// The holder, if the lock is taken.
    pub holders: Vec<Holder>,
    /// The first [`LISTED`] waiters in line, first first.
    pub queue: Vec<QueuedWaiter>,
    /// Waiters in line (`LLEN`).
    pub queue_length: u64,
    /// Deadlines of owners that are not in the line (left by an old
    /// Redisson's failure; harmless, and cleared as deadlines pass).
    pub stray_deadlines: Vec<QueuedWaiter>,
}

/// One waiter in a fair lock's line.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// Its field, `<client-id>:<owner-id>`.
    pub field: String,
    /// Its client's id.
    pub client_id: String,
    /// Its owner (a thread id on the JVM).
    pub owner: String,
    /// When it gives up its place unless it gets the lock first: wall-clock
    /// ms since the Unix epoch, by its own client's clock; `None` when the
    /// deadline set has no entry for it.
    pub deadline_ms: Option<i64>,
    /// The deadline is past by this client's clock: any fair-lock script
    /// that finds it first in line removes it.
    pub overdue: bool,
    /// Whether it is a waiter of the client that read it.
    pub this_client: bool,
    /// Subscribers of its own channel `redisson_lock__channel:{name}:<field>`.
    pub subscribers: u64,
}

/// A read-write lock.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ReadWriteLockState {
    /// The `mode` field.
    pub mode: Option<RwMode>,
    /// The writer (field `<client-id>:<owner-id>:write`), if any.
    pub writer: Option<Holder>,
    /// The readers, each with its hold keys.
    pub readers: Vec<Reader>,
}

/// One reader of a read-write lock.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Reader {
    /// The reader and its read hold count.
    #[serde(flatten)]
    pub holder: Holder,
    /// Hold `n` has the key `{name}:<field>:rwlock_timeout:<n>`, which
    /// expires when that hold's lease ends (up to [`LISTED`] listed).
    pub holds: Vec<ReadHold>,
}

/// One read hold's key.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ReadHold {
    /// The hold's number, from 1.
    pub n: u32,
    /// Its key.
    pub key: String,
    /// Whether the key exists.
    pub exists: bool,
    /// Time left on it, in ms (`None`: absent, or no TTL).
    pub ttl_ms: Option<u64>,
}

/// A fenced lock.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FencedLockState {
    /// The holder, if the lock is taken.
    pub holders: Vec<Holder>,
    /// The last token handed out (`redisson_lock_token:{name}`); the next
    /// acquisition gets a larger one.
    pub last_token: Option<i64>,
}

/// A group multi lock's hash.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct GroupState {
    /// Each locked value (by its hash `<h>`) and who holds it.
    pub members: Vec<GroupMember>,
}

/// One locked value of a group multi lock.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct GroupMember {
    /// The value's hash (Redisson's HighwayHash of the encoded value).
    pub hash: String,
    /// Its holder and hold count (`<h>:<owner>:lock_count`).
    pub holder: Holder,
    /// Wall-clock ms when the hold expires (`<h>:<owner>:expire_time`).
    pub expires_at_ms: Option<i64>,
}

/// A semaphore.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct SemaphoreState {
    /// Permits available (negative after `add_permits` took more than were free).
    pub permits: i64,
}

/// A permit-expirable semaphore.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ExpirableSemaphoreState {
    /// Permits available, as stored: leases past their end are counted once
    /// any client's next call returns them; `None` without the key.
    pub available: Option<i64>,
    /// The first [`LISTED`] leases, soonest end first.
    pub leases: Vec<Lease>,
    /// Leases in the set (`ZCARD`), ended ones included.
    pub leases_total: u64,
}

/// One leased permit.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Lease {
    /// The permit id: 32 hex digits (Redisson 3.17+ and this crate store 16
    /// raw bytes), or the stored text as is (Redisson up to 3.16).
    pub id: String,
    /// Wall-clock ms when the lease ends; `None`: never.
    pub expires_at_ms: Option<i64>,
    /// Its end is past by this client's clock: the permit is back in the pool
    /// at any client's next call.
    pub expired: bool,
}

/// A count-down latch.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct LatchState {
    /// Count-downs left before waiters go on.
    pub count: i64,
}

/// An integer string that may be a semaphore or a count-down latch.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct CounterState {
    /// The value: permits available, or count-downs left.
    pub value: i64,
}

/// One object found by [`RedissonClient::scan_objects`]: what `ls` prints.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ObjectSummary {
    /// The object's name.
    pub name: String,
    /// Its kind.
    pub kind: ObjectKind,
    /// Time left before its key expires, in ms (`None`: absent or no TTL).
    pub ttl_ms: Option<u64>,
    /// Its key exists and never expires.
    pub no_ttl: bool,
    /// Holders: a lock's, a fenced or fair lock's, a read-write lock's
    /// readers, a group multi lock's.
    pub holders: Vec<Holder>,
    /// A read-write lock's writer.
    pub writer: Option<Holder>,
    /// A read-write lock's mode.
    pub mode: Option<RwMode>,
    /// A fair lock's waiters in line.
    pub queue_length: u64,
    /// A fair lock's deadlines already past by this client's clock.
    pub overdue_waiters: u64,
    /// A semaphore's permits, a latch's count, a counter's value.
    pub value: Option<i64>,
    /// An expirable semaphore's leased permits, ended ones included.
    pub leases: u64,
    /// Of those, leases past their end by this client's clock.
    pub expired_leases: u64,
    /// A fenced lock's last token.
    pub last_token: Option<i64>,
    /// Connections subscribed to its channels: waiting clients (and
    /// `watch`es). A fair lock's waiters are in `queue_length` instead.
    pub subscribers: u64,
    /// Keys that operations leave behind for a while, found by the scan.
    pub side_keys: Vec<SideKey>,
    /// Who each holder's client is, by client id (`null`: unregistered), as
    /// in [`ObjectInfo::clients`].
    pub clients: BTreeMap<String, Option<ClientIdentity>>,
}

impl ObjectSummary {
    fn new(name: String) -> Self {
        ObjectSummary {
            name,
            kind: ObjectKind::Leftovers,
            ttl_ms: None,
            no_ttl: false,
            holders: vec![],
            writer: None,
            mode: None,
            queue_length: 0,
            overdue_waiters: 0,
            value: None,
            leases: 0,
            expired_leases: 0,
            last_token: None,
            subscribers: 0,
            side_keys: vec![],
            clients: BTreeMap::new(),
        }
    }

    /// How contended the object is: waiters in line, then subscribed
    /// waiting clients. `top` sorts by it.
    pub fn contention(&self) -> u64 {
        self.queue_length + self.subscribers
    }
}

/// A key that an operation leaves behind for a while.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct SideKey {
    /// The key.
    pub key: String,
    /// What it is.
    pub role: SideKeyRole,
    /// Time left on it, in ms (`None`: no TTL, or gone).
    pub ttl_ms: Option<u64>,
    /// It exists and never expires.
    pub no_ttl: bool,
}

/// What a [`SideKey`] is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SideKeyRole {
    /// `redisson_unlock_latch:{name}:<id>`: the outcome of one unlock,
    /// kept so that a retry of it replays instead of releasing twice.
    UnlockLatch {
        /// The unlock request's id.
        request_id: String,
    },
    /// `redisson_request_latch:{name}:<id>`: the same for one semaphore or
    /// latch write of this crate.
    RequestLatch {
        /// The request's id.
        request_id: String,
    },
    /// `{name}:<field>:rwlock_timeout:<n>`: read hold `n` of a reader.
    ReadHold {
        /// The reader's field, `<client-id>:<owner-id>`.
        field: String,
        /// The hold's number.
        n: u32,
    },
}

impl RedissonClient {
    /// Reads everything about the object `name`, of any kind, Java's or
    /// Rust's: see [`ObjectInfo`] and the [module docs](crate::inspect).
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name;
    /// [`crate::Error::Connection`] / [`crate::Error::Timeout`] when Redis
    /// does not answer; [`crate::Error::Shutdown`] after
    /// [`RedissonClient::shutdown`]. A key of an unexpected type is not an
    /// error: it reads as [`ObjectState::Other`].
    ///
    /// # Cancel safety
    ///
    /// Only reads: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// use redisson_lock::inspect::ObjectState;
    /// let info = client.inspect("payouts").await?;
    /// if let ObjectState::FairLock(fair) = &info.state {
    ///     println!("{} waiting for payouts", fair.queue_length);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<ObjectInfo> {
        self.engine.ensure_open()?;
        if name.is_empty() {
            return Err(crate::error::Error::InvalidArgument(
                "object name is empty".into(),
            ));
        }
        let read: futures::future::BoxFuture<'_, _> = Box::pin(read::inspect(&self.engine, name));
        read.await
    }

    /// Lists every Redisson object whose name matches the glob `pattern`
    /// (Redis's `*`, `?`, `[...]`), sorted by name, with what `ls` shows.
    ///
    /// It sends `SCAN <cursor> MATCH *<pattern>* TYPE <t> COUNT <count>` for
    /// each type Redisson uses, on every primary of a cluster, so that it
    /// also finds the keys Redisson derives from each name; then bounded
    /// reads of the keys found (`PTTL`, `HSCAN ... COUNT 100`,
    /// `GETRANGE 0 23`, `LLEN`, `ZCARD`, `ZCOUNT`) and `PUBSUB NUMSUB` for
    /// 500 channels at a time. No call does more than about `count` steps of
    /// work on Redis. Needs Redis 6 (`SCAN ... TYPE`).
    ///
    /// Objects only some of whose keys are found (a key that changed between
    /// two calls) are listed as they were read; keys added or removed during
    /// the scan may be missed, as with any `SCAN`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty pattern or a `count`
    /// of 0; [`crate::Error::Connection`] / [`crate::Error::Timeout`];
    /// [`crate::Error::Redis`] for a server without `SCAN ... TYPE`
    /// (before 6.0); [`crate::Error::Shutdown`].
    ///
    /// # Cancel safety
    ///
    /// Only reads: dropping the future stops the scan and changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// for object in client.scan_objects("orders:*", 1000).await? {
    ///     println!("{} {} held by {}", object.name, object.kind, object.holders.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn scan_objects(&self, pattern: &str, count: u32) -> Result<Vec<ObjectSummary>> {
        self.engine.ensure_open()?;
        if pattern.is_empty() {
            return Err(crate::error::Error::InvalidArgument(
                "the pattern is empty (use `*` for every object)".into(),
            ));
        }
        if count == 0 {
            return Err(crate::error::Error::InvalidArgument(
                "the scan count must be at least 1".into(),
            ));
        }
        let scan: futures::future::BoxFuture<'_, _> =
            Box::pin(scan::scan(&self.engine, pattern, count));
        scan.await
    }
}

use crate::engine::now_ms;
