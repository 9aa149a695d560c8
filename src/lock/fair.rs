//! [`RFairLock`]: Redisson's fair lock (`getFairLock(name)`): first come,
//! first served, across Java and Rust waiters.
//!
//! On the wire: RLock's hash `name`, plus the waiting queue
//! `redisson_lock_queue:{name}` (a list of fields) and the waiters' deadlines
//! `redisson_lock_timeout:{name}` (a sorted set, wall-clock ms: the client's
//! clock goes in as `now`, as Redisson's does). Each waiter listens on a
//! channel of its own, `redisson_lock__channel:{name}:<field>`; a release
//! tells only the first in line. Scripts in `lua/fair/`.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::types::Value;

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

/// A fair lock named `name`, shared with JVM Redisson clients that call
/// `getFairLock(name)`: waiters get it in the order they asked for it,
/// whichever side they are on. Cheap to clone; creating one sends nothing.
///
/// Owners, re-entry and guards work as for [`crate::RLock`]. A waiter that
/// gives up (its `try_lock_for` deadline passes, its future is dropped, its
/// task is cancelled, or its client shuts down) leaves the queue at once, so
/// it never holds up those behind it.
///
/// Redisson's own `lock()` does not do that: a JVM waiter that dies while
/// queued keeps its place until its deadline, up to the lock's TTL plus
/// `fairLockWaitTimeout` (5 min by default). A Rust waiter behind it waits
/// that long too (re-checking with a bounded back-off, without spinning).
///
/// ```no_run
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let lock = client.fair_lock("payouts")?;
/// let guard = lock.lock().await?; // behind everyone who asked before
/// guard.unlock().await?;          // the next in line is told
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RFairLock {
    raw: RawLock,
}

impl RFairLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        RFairLock {
            raw: RawLock::new(engine, &FAIR, name),
        }
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    /// The same lock, acting for a fixed owner (Redisson's
    /// `lockAsync(threadId)`).
    pub fn with_owner(&self, owner: OwnerId) -> RFairLock {
        RFairLock {
            raw: self.raw.with_owner(owner),
        }
    }

    /// The owner an acquisition would re-enter with right now (see
    /// [`crate::RLock::current_owner`]).
    pub fn current_owner(&self) -> Option<OwnerId> {
        self.raw.current_owner()
    }

    /// The hash field (and queue entry) of an owner: `<client-id>:<owner-id>`.
    pub fn field_of(&self, owner: OwnerId) -> String {
        self.raw.field_of(owner)
    }

    /// Joins the queue and waits as long as it takes; the watchdog renews
    /// the lock once held. The queue deadline is counted with
    /// `fairLockWaitTimeout`.
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future never leaves the lock held nor a
    /// place in the queue (both are given back in the background).
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, Patience::Forever)
            .await
            .map(|g| g.expect("waiting forever only ends once acquired"))
    }

    /// As [`RFairLock::lock`], holding the lock for `lease` (never renewed).
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::lock_with_lease`].
    ///
    /// # Cancel safety
    ///
    /// As [`RFairLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(Some(lease), Patience::Forever)
            .await
            .map(|g| g.expect("waiting forever only ends once acquired"))
    }

    /// One try, without joining the queue: only succeeds if the lock is
    /// free and nobody is waiting for it.
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::try_lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`RFairLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(None, Patience::Once).await
    }

    /// Joins the queue and waits up to `wait`; `None` when the turn did not
    /// come, and then the place in the queue is given up.
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`RFairLock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(None, Patience::For(wait)).await
    }

    /// As [`RFairLock::try_lock_for`], holding the lock for `lease`.
    ///
    /// # Errors
    ///
    /// As [`crate::RLock::lock_with_lease`].
    ///
    /// # Cancel safety
    ///
    /// As [`RFairLock::lock`].
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

    /// Releases one hold of the current owner without a guard. Releasing a
    /// fair lock that is already gone is not an error, as in Redisson.
    ///
    /// # Errors
    ///
    /// [`crate::Error::NotHeld`] when someone else holds it.
    ///
    /// # Cancel safety
    ///
    /// As [`crate::RLock::unlock`].
    pub async fn unlock(&self) -> Result<Unlocked> {
        self.raw.unlock().await
    }

    /// Deletes the lock whoever holds it and tells the first waiter in line.
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

    /// How many times `owner` of this client holds the lock (`HGET`).
    ///
    /// # Errors
    ///
    /// As [`RFairLock::is_locked`], and [`crate::Error::WrongType`].
    pub async fn hold_count_of(&self, owner: OwnerId) -> Result<u32> {
        self.raw.hold_count_of(owner).await
    }

    /// Every holder recorded in the lock's hash, from any client.
    ///
    /// # Errors
    ///
    /// As [`RFairLock::hold_count_of`].
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.raw.holders(|field| Some(field)).await
    }

    /// The waiters in line, first first, as their fields
    /// (`<client-id>:<owner-id>`, Java or Rust).
    ///
    /// # Errors
    ///
    /// As [`RFairLock::hold_count_of`].
    pub async fn queue(&self) -> Result<Vec<String>> {
        use fred::interfaces::ClientLike;
        use fred::types::{ClusterHash, CustomCommand};
        self.raw.engine.ensure_open()?;
        let queue = naming::fair_queue_name(&self.raw.name);
        let lrange = CustomCommand::new_static("LRANGE", ClusterHash::FirstKey, false);
        self.raw
            .query(
                self.raw
                    .engine
                    .redis
                    .custom(lrange, vec![queue, "0".into(), "-1".into()]),
            )
            .await
    }

    /// The lock's remaining time to live (`PTTL`).
    ///
    /// # Errors
    ///
    /// As [`RFairLock::is_locked`].
    pub async fn remaining_ttl(&self) -> Result<Ttl> {
        self.raw.remaining_ttl().await
    }
}

impl std::fmt::Debug for RFairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RFairLock")
            .field("name", &self.raw.name)
            .field("owner", &self.raw.fixed_owner())
            .finish()
    }
}

/// The fair lock as the engine sees it.
pub(crate) struct Fair;

pub(crate) static FAIR: Fair = Fair;

/// The fair scripts share a prelude (Lua scripts cannot include each other).
macro_rules! fair_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../lua/fair/prelude.lua"),
                include_str!(concat!("../../lua/fair/", $file))
            ))
        })
    };
}

static TRY_ACQUIRE: LazyLock<Script> = fair_script!("try_acquire.lua");
static ACQUIRE: LazyLock<Script> = fair_script!("acquire.lua");
static UNLOCK: LazyLock<Script> = fair_script!("unlock.lua");
static FORCE_UNLOCK: LazyLock<Script> = fair_script!("force_unlock.lua");
static GIVE_UP: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/fair/give_up.lua")));

/// The client's wall clock in ms, as Redisson passes `now` to the fair scripts.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The budget a waiter's queue deadline is counted with: its wait, or
/// `fairLockWaitTimeout` when it waits without a limit.
fn wait_ms(call: &Call) -> i64 {
    let wait = match call.patience {
        Patience::For(wait) => wait,
        Patience::Once | Patience::Forever => call.engine.config.fair_lock_wait_timeout,
    };
    wait.as_millis().clamp(1, i64::MAX as u128) as i64
}

/// The lock, its queue and its deadlines: the first keys of every fair script.
fn keys(lock: &str) -> Vec<String> {
    vec![
        lock.to_string(),
        naming::fair_queue_name(lock),
        naming::fair_timeout_name(lock),
    ]
}

impl LockKind for Fair {
    fn name(&self) -> &'static str {
        "fair"
    }

    fn channel(&self, lock: &str, field: &str) -> String {
        naming::fair_waiter_channel(lock, field)
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        let (lease, field): (Value, Value) = (call.lease_ms.into(), call.field.into());
        match call.patience {
            Patience::Once => ScriptCall {
                script: &TRY_ACQUIRE,
                keys: keys(call.lock),
                args: vec![lease, field, now_ms().into(), wait_ms(call).into()],
            },
            Patience::For(_) | Patience::Forever => ScriptCall {
                script: &ACQUIRE,
                keys: keys(call.lock),
                args: vec![lease, field, wait_ms(call).into(), now_ms().into()],
            },
        }
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        let mut keys = keys(call.lock);
        keys.push(naming::channel_name(call.lock));
        keys.push(latch.key.clone());
        ScriptCall {
            script: &UNLOCK,
            keys,
            args: vec![
                UNLOCK_MESSAGE.into(),
                call.lease_ms.into(),
                call.field.into(),
                now_ms().into(),
                call.engine.publish_command.into(),
                latch.ttl_ms.into(),
            ],
        }
    }

    fn force_unlock(&self, engine: &Engine, lock: &str) -> ScriptCall {
        let mut keys = keys(lock);
        keys.push(naming::channel_name(lock));
        ScriptCall {
            script: &FORCE_UNLOCK,
            keys,
            args: vec![
                UNLOCK_MESSAGE.into(),
                now_ms().into(),
                engine.publish_command.into(),
            ],
        }
    }

    fn renewal(&self) -> &'static dyn Renewal {
        &FieldRenewal
    }

    fn queues(&self) -> bool {
        true
    }

    fn give_up(&self, call: &Call) -> Option<ScriptCall> {
        Some(ScriptCall {
            script: &GIVE_UP,
            keys: vec![
                naming::fair_queue_name(call.lock),
                naming::fair_timeout_name(call.lock),
            ],
            args: vec![call.field.into(), wait_ms(call).into()],
        })
    }
}
