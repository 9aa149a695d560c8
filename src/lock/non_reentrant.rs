//! [`RNonReentrantLock`] and [`RNonReentrantFairLock`]: Redisson 4.4's
//! non-reentrant locks (`getNonReentrantLock(name)`,
//! `getNonReentrantFairLock(name)`).
//!
//! On the wire they are RLock and the fair lock: the same hash, queue,
//! deadlines, channels, messages, unlock, force unlock and renewal, so a
//! non-reentrant lock and an ordinary one of the same name are one lock on
//! Redis. Only the acquire differs: an owner that already holds the lock is
//! refused by the script with the error reply `NON_REENTRANT_REACQUIRE` (the
//! text travels in ARGV, as Redisson sends it), and nothing is written.
//! Scripts `lua/lock/acquire_non_reentrant.lua` and
//! `lua/fair/{try_,}acquire_non_reentrant.lua`.

use std::sync::LazyLock;

use fred::types::Value;

use crate::engine::kind::{Call, LockKind, Patience};
use crate::engine::script::{Latch, Script, ScriptCall};
use crate::engine::Engine;
use crate::lock::fair::{self, fair_script, Queued};
use crate::lock::handle::{sealed, Kind, Lock};
use crate::lock::{rlock, LockGuard};
use crate::naming;

/// The error text Redisson's non-reentrant acquire scripts reply with when
/// the owner holds the lock already (sent as an argument, as Redisson does).
const REACQUIRE: &str = "NON_REENTRANT_REACQUIRE";

/// Redisson's non-reentrant lock (`getNonReentrantLock(name)`, 4.4+): an
/// [`crate::RLock`] that its holder cannot take again. See [`Lock`] for the
/// operations.
///
/// A second acquisition by the owner that holds it (inside the guard's
/// [`LockGuard::scope`], through the same [`Lock::with_owner`] owner, or
/// after an `RLock` of the same name and owner took it) fails at once with
/// [`crate::error::Error::AlreadyHeld`], never waits, and changes nothing; Java
/// throws `IllegalMonitorStateException` there. Everyone else waits for it
/// as for an `RLock`, and it waits for them: Java's non-reentrant lock, its
/// `getLock` and Rust's `RLock` of the same name all exclude it.
///
/// ```no_run
/// use redisson_lock::Error;
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let lock = client.non_reentrant_lock("ledger:close")?;
/// let guard = lock.lock().await?;
/// // Calling back into code that takes it again is a bug it reports at once.
/// match guard.scope(lock.lock()).await {
///     Err(Error::AlreadyHeld { name, .. }) => eprintln!("{name} taken twice"),
///     other => drop(other),
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type RNonReentrantLock = Lock<NonReentrant>;

/// Redisson's non-reentrant fair lock (`getNonReentrantFairLock(name)`,
/// 4.4+): an [`crate::RFairLock`] that its holder cannot take again. Waiters
/// are served in line with the fair lock's own (Java or Rust, reentrant or
/// not); a re-entry fails at once with [`crate::error::Error::AlreadyHeld`] and never
/// joins the queue. See [`Lock`] for the operations, and
/// [`Lock::queue`] / [`Lock::delete`].
///
/// ```no_run
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let lock = client.non_reentrant_fair_lock("payouts")?;
/// let guard = lock.lock().await?; // behind everyone who asked before
/// assert!(guard.scope(lock.try_lock()).await.is_err()); // no re-entry
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type RNonReentrantFairLock = Lock<NonReentrantFair>;

/// The kind of an [`RNonReentrantLock`].
#[derive(Debug)]
pub enum NonReentrant {}

/// The kind of an [`RNonReentrantFairLock`].
#[derive(Debug)]
pub enum NonReentrantFair {}

impl Kind for NonReentrant {
    type Guard = LockGuard;

    fn guard(granted: sealed::Granted) -> crate::error::Result<LockGuard> {
        Ok(LockGuard::new(granted.0))
    }
}

impl sealed::Sealed for NonReentrant {
    fn describe() -> sealed::Described {
        sealed::Described(&NON_REENTRANT)
    }
}

impl Kind for NonReentrantFair {
    type Guard = LockGuard;

    fn guard(granted: sealed::Granted) -> crate::error::Result<LockGuard> {
        Ok(LockGuard::new(granted.0))
    }
}

impl sealed::Sealed for NonReentrantFair {
    fn describe() -> sealed::Described {
        sealed::Described(&NON_REENTRANT_FAIR)
    }
}

impl Queued for NonReentrantFair {}

impl Lock<NonReentrant> {
    /// The channel on which unlocks of this lock are published (RLock's).
    pub fn channel(&self) -> String {
        naming::channel_name(&self.raw.name)
    }
}

/// The non-reentrant lock as the engine sees it: RLock's, but for its
/// acquire.
struct NonReentrantKind;

static NON_REENTRANT: NonReentrantKind = NonReentrantKind;

/// The non-reentrant fair lock as the engine sees it: the fair lock's, but
/// for its acquires.
struct NonReentrantFairKind;

static NON_REENTRANT_FAIR: NonReentrantFairKind = NonReentrantFairKind;

/// `lua/lock/acquire_non_reentrant.lua`.
static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock/acquire_non_reentrant.lua")));
static FAIR_ACQUIRE: LazyLock<Script> = fair_script!("acquire_non_reentrant.lua");
static FAIR_TRY_ACQUIRE: LazyLock<Script> = fair_script!("try_acquire_non_reentrant.lua");

impl LockKind for NonReentrantKind {
    fn name(&self) -> &'static str {
        "non-reentrant"
    }

    fn channel(&self, lock: &str, _field: &str) -> Option<String> {
        Some(naming::channel_name(lock))
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        ScriptCall {
            script: &ACQUIRE,
            keys: vec![call.lock.to_string()],
            args: vec![call.lease_ms.into(), call.field.into(), REACQUIRE.into()],
        }
    }

    fn reentry_refusal(&self) -> Option<&'static str> {
        Some(REACQUIRE)
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        rlock::unlock(call, latch)
    }

    fn force_unlock(&self, engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
        rlock::force_unlock(engine, lock, only_while)
    }
}

impl LockKind for NonReentrantFairKind {
    fn name(&self) -> &'static str {
        "non-reentrant-fair"
    }

    fn channel(&self, lock: &str, field: &str) -> Option<String> {
        Some(naming::fair_waiter_channel(lock, field))
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        let (lease, field): (Value, Value) = (call.lease_ms.into(), call.field.into());
        let (now, wait) = (fair::now_ms().into(), fair::wait_ms(call).into());
        // Redisson's argument order, with `now` and the wait swapped between
        // the try and the queueing acquire.
        let (script, mut args) = match call.patience {
            Patience::Once => (&FAIR_TRY_ACQUIRE, vec![lease, field, now, wait]),
            Patience::For(_) | Patience::Forever => (&FAIR_ACQUIRE, vec![lease, field, wait, now]),
        };
        args.push(REACQUIRE.into());
        ScriptCall {
            script,
            keys: fair::keys(call.lock),
            args,
        }
    }

    fn reentry_refusal(&self) -> Option<&'static str> {
        Some(REACQUIRE)
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        fair::unlock(call, latch)
    }

    fn undo(&self, call: &Call, latch: &Latch) -> ScriptCall {
        fair::undo(call, latch)
    }

    fn force_unlock(&self, engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
        fair::force_unlock(engine, lock, only_while)
    }

    fn give_up(&self, call: &Call) -> Option<ScriptCall> {
        Some(fair::give_up(call))
    }
}
