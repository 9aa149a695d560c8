//! [`RFairLock`]: Redisson's fair lock (`getFairLock(name)`): first come,
//! first served, across Java and Rust waiters.
//!
//! On the wire: RLock's hash `name`, plus the waiting queue
//! `redisson_lock_queue:{name}` (a list of fields) and the waiters' deadlines
//! `redisson_lock_timeout:{name}` (a sorted set, wall-clock ms: the client's
//! clock goes in as `now`, as Redisson's does). Each waiter listens on a
//! channel of its own, `redisson_lock__channel:{name}:<field>`; a release
//! tells only the first in line. Scripts in `lua/fair/`.

use std::sync::LazyLock;

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::engine::hub::UNLOCK_MESSAGE;
use crate::engine::kind::{Call, LockKind, Patience};
use crate::engine::script::{Latch, Script, ScriptCall};
use crate::engine::Engine;
use crate::error::Result;
use crate::lock::handle::{sealed, Kind, Lock};
use crate::lock::LockGuard;
use crate::naming;

/// Redisson's fair lock (`getFairLock(name)`): waiters get it in the order
/// they asked for it, whichever side they are on. See [`Lock`] for the
/// operations; owners, re-entry and guards work as for [`crate::RLock`].
///
/// A waiter that gives up (its `try_lock_for` deadline passes, its future is
/// dropped, its task is cancelled, or its client shuts down) leaves the queue
/// at once, so it never holds up those behind it. `try_lock()` never joins
/// the queue: it only succeeds when the lock is free and nobody waits.
///
/// Redisson's own `lock()` does not leave the queue when interrupted: a JVM
/// waiter that dies while queued keeps its place until its deadline, up to
/// the lock's TTL plus `fairLockWaitTimeout` (5 min by default). A Rust
/// waiter behind it waits that long too (re-checking with a bounded
/// back-off, without spinning).
///
/// ```no_run
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let lock = client.fair_lock("payouts")?;
/// let guard = lock.lock().await?; // behind everyone who asked before
/// guard.unlock().await?;          // the next in line is told
/// # Ok(()) }
/// ```
pub type RFairLock = Lock<Fair>;

/// The kind of an [`RFairLock`].
#[derive(Debug)]
pub enum Fair {}

impl Kind for Fair {
    type Guard = LockGuard;

    fn guard(granted: sealed::Granted) -> crate::error::Result<LockGuard> {
        Ok(LockGuard::new(granted.0))
    }
}

impl sealed::Sealed for Fair {
    fn describe() -> sealed::Described {
        sealed::Described(&FAIR)
    }
}

/// The kinds whose waiters wait in line, first come, first served:
/// [`Fair`] ([`RFairLock`]) and [`crate::kind::NonReentrantFair`]
/// ([`crate::RNonReentrantFairLock`]). Their locks share the queue, the
/// deadlines and [`Lock::queue`] / [`Lock::delete`]. Sealed.
pub trait Queued: Kind {}

impl Queued for Fair {}

impl<K: Queued> Lock<K> {
    /// The waiters in line, first first, as their fields
    /// (`<client-id>:<owner-id>`, Java or Rust).
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::Connection`] / [`crate::error::Error::Timeout`], and
    /// [`crate::error::Error::WrongType`] for a queue key of another type.
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RFairLock) -> redisson_lock::Result<()> {
    /// let waiting = lock.queue().await?; // fields of Java and Rust waiters alike
    /// match waiting.first() {
    ///     Some(next) => println!("{} payout workers waiting, {next} next", waiting.len()),
    ///     None => println!("no payout worker is waiting"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn queue(&self) -> Result<Vec<String>> {
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

    /// Deletes the lock, its queue and its waiters' deadlines, whoever holds
    /// it (Redisson's `delete()` of a fair lock: one `DEL` of the three
    /// keys). Returns whether any of them existed. No message is published,
    /// as in Redisson: waiters, Java or Rust, find out when their wait's
    /// pause ends and try again (re-queueing). Holders in this client are
    /// told at once (their guards are lost); others at their next renewal.
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::Connection`] / [`crate::error::Error::Timeout`] (whether the
    /// keys were deleted is then unknown); [`crate::error::Error::ReplicasNotSynced`]
    /// when too few replicas confirmed it (it did happen on the primary).
    ///
    /// # Cancel safety
    ///
    /// Sent once; dropping the future does not stop it.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RFairLock) -> redisson_lock::Result<()> {
    /// // Retire the payout lock for good: holder, line and deadlines all go.
    /// if lock.delete().await? {
    ///     println!("payouts lock deleted");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        self.raw.delete(keys(&self.raw.name)).await
    }
}

/// The fair lock as the engine sees it.
struct FairKind;

static FAIR: FairKind = FairKind;

/// The fair scripts share a prelude (Lua scripts cannot include each other).
/// Each walks the queue and the deadlines, `KEYS[2]` and `KEYS[3]` (the
/// prelude drops the ended waiters at the queue's head; a grant shortens
/// every waiter's deadline), and nothing else: a call that finds neither
/// costs what it sends, and may go out in a batch (an uncontended lock);
/// any other goes out on its own.
macro_rules! fair_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::walking_over(
                concat!(
                    include_str!("../../lua/fair/prelude.lua"),
                    include_str!(concat!("../../lua/fair/", $file))
                ),
                &[2, 3],
            )
        })
    };
}

pub(super) use fair_script;

static TRY_ACQUIRE: LazyLock<Script> = fair_script!("try_acquire.lua");
static ACQUIRE: LazyLock<Script> = fair_script!("acquire.lua");
static UNLOCK: LazyLock<Script> = fair_script!("unlock.lua");
static FORCE_UNLOCK: LazyLock<Script> = fair_script!("force_unlock.lua");
/// Walks the whole queue: never batched.
static GIVE_UP: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../lua/fair/give_up.lua")));
/// Walks the deadlines when it puts a waiter back: never batched.
static UNDO: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../lua/fair/undo.lua")));

pub(super) use crate::engine::now_ms;

/// The budget a waiter's queue deadline is counted with: its wait, or
/// `fairLockWaitTimeout` when it waits without a limit.
pub(super) fn wait_ms(call: &Call) -> i64 {
    let wait = match call.patience {
        Patience::For(wait) => wait,
        Patience::Once | Patience::Forever => call.engine.config.fair_lock_wait_timeout,
    };
    wait.as_millis().clamp(1, i64::MAX as u128) as i64
}

/// The lock, its queue and its deadlines: the first keys of every fair script.
pub(super) fn keys(lock: &str) -> Vec<String> {
    vec![
        lock.to_string(),
        naming::fair_queue_name(lock),
        naming::fair_timeout_name(lock),
    ]
}

impl LockKind for FairKind {
    fn name(&self) -> &'static str {
        "fair"
    }

    fn channel(&self, lock: &str, field: &str) -> Option<String> {
        Some(naming::fair_waiter_channel(lock, field))
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
        unlock(call, latch)
    }

    fn undo(&self, call: &Call, latch: &Latch) -> ScriptCall {
        undo(call, latch)
    }

    fn force_unlock(&self, engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
        force_unlock(engine, lock, only_while)
    }

    fn give_up(&self, call: &Call) -> Option<ScriptCall> {
        Some(give_up(call))
    }
}

/// The fair unlock through the latch, telling the first waiter in line; also
/// the non-reentrant fair lock's.
pub(super) fn unlock(call: &Call, latch: &Latch) -> ScriptCall {
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
            call.engine.publish_arg(),
            latch.ttl_ms.into(),
        ],
    }
}

/// Takes back an unconfirmed grant, the owner back at the head of the queue
/// (when it queued: not for a single try); also the non-reentrant fair
/// lock's.
pub(super) fn undo(call: &Call, latch: &Latch) -> ScriptCall {
    let mut keys = keys(call.lock);
    keys.push(latch.key.clone());
    let wait = match call.patience {
        Patience::Once => 0,
        Patience::For(_) | Patience::Forever => wait_ms(call),
    };
    ScriptCall {
        script: &UNDO,
        keys,
        args: vec![
            call.field.into(),
            call.lease_ms.into(),
            wait.into(),
            now_ms().into(),
            latch.ttl_ms.into(),
        ],
    }
}

/// The fair force unlock, telling the first waiter in line; also the
/// non-reentrant fair lock's.
pub(super) fn force_unlock(engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
    let mut keys = keys(lock);
    keys.push(naming::channel_name(lock));
    let mut args = vec![UNLOCK_MESSAGE.into(), now_ms().into(), engine.publish_arg()];
    args.extend(only_while.map(Value::from));
    ScriptCall {
        script: &FORCE_UNLOCK,
        keys,
        args,
    }
}

/// A waiter's leaving the queue (Redisson's `acquireFailed`); also the
/// non-reentrant fair lock's.
pub(super) fn give_up(call: &Call) -> ScriptCall {
    ScriptCall {
        script: &GIVE_UP,
        keys: vec![
            naming::fair_queue_name(call.lock),
            naming::fair_timeout_name(call.lock),
        ],
        args: vec![call.field.into(), wait_ms(call).into()],
    }
}
