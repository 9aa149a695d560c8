//! [`RLock`]: Redisson's reentrant lock (`getLock(name)`).
//!
//! On the wire: hash `name`, field `<client-id>:<owner-id>` → hold count,
//! with a PX lease; unlock publishes `0` on `redisson_lock__channel:{name}`.
//! Scripts in `lua/lock/`. The operations are [`Lock`]'s; everything else
//! (waiting, settlement, renewal) is the engine's.

use std::sync::LazyLock;

use fred::types::Value;

use crate::engine::hub::UNLOCK_MESSAGE;
use crate::engine::kind::{Call, LockKind};
use crate::engine::script::{Latch, Script, ScriptCall};
use crate::engine::Engine;
use crate::lock::handle::{sealed, Kind, Lock};
use crate::lock::LockGuard;
use crate::naming;

/// Redisson's reentrant lock (`getLock(name)`): one owner at a time, who may
/// take it again inside its guard's scope. See [`Lock`] for the operations.
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
pub type RLock = Lock<Reentrant>;

/// The kind of an [`RLock`].
#[derive(Debug)]
pub enum Reentrant {}

impl Kind for Reentrant {
    type Guard = LockGuard;

    fn guard(granted: sealed::Granted) -> crate::error::Result<LockGuard> {
        Ok(LockGuard::new(granted.0))
    }
}

impl sealed::Sealed for Reentrant {
    fn describe() -> sealed::Described {
        sealed::Described(&REENTRANT)
    }
}

impl Lock<Reentrant> {
    /// The channel on which unlocks of this lock are published.
    pub fn channel(&self) -> String {
        naming::channel_name(&self.raw.name)
    }
}

/// RLock as the engine sees it.
struct ReentrantKind;

static REENTRANT: ReentrantKind = ReentrantKind;

/// `lua/lock/acquire.lua`.
static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock/acquire.lua")));
/// `lua/lock/unlock.lua`.
static UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock/unlock.lua")));
/// `lua/lock/force_unlock.lua`.
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lock/force_unlock.lua")));

impl LockKind for ReentrantKind {
    fn name(&self) -> &'static str {
        "lock"
    }

    fn channel(&self, lock: &str, _field: &str) -> Option<String> {
        Some(naming::channel_name(lock))
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        acquire(call)
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        unlock(call, latch)
    }

    fn force_unlock(&self, engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
        force_unlock(engine, lock, only_while)
    }
}

/// RLock's acquire; also the spin lock's.
pub(super) fn acquire(call: &Call) -> ScriptCall {
    ScriptCall {
        script: &ACQUIRE,
        keys: vec![call.lock.to_string()],
        args: vec![call.lease_ms.into(), call.field.into()],
    }
}

/// RLock's unlock through the latch, publishing `0` on the lock's channel;
/// also the fenced lock's.
pub(super) fn unlock(call: &Call, latch: &Latch) -> ScriptCall {
    ScriptCall {
        script: &UNLOCK,
        keys: vec![
            call.lock.to_string(),
            naming::channel_name(call.lock),
            latch.key.clone(),
        ],
        args: vec![
            UNLOCK_MESSAGE.into(),
            call.lease_ms.into(),
            call.field.into(),
            call.engine.publish_arg(),
            latch.ttl_ms.into(),
        ],
    }
}

/// RLock's force unlock: deletes the hash and publishes `0`; also the fenced
/// lock's.
pub(super) fn force_unlock(engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
    let mut args = vec![UNLOCK_MESSAGE.into(), engine.publish_arg()];
    args.extend(only_while.map(Value::from));
    ScriptCall {
        script: &FORCE_UNLOCK,
        keys: vec![lock.to_string(), naming::channel_name(lock)],
        args,
    }
}
