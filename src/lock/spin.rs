//! [`RSpinLock`]: Redisson's spin lock (`getSpinLock(name)`): RLock's data,
//! no pub/sub at all. Waiters poll with a back-off; releases publish
//! nothing. For deployments where pub/sub is not allowed (see
//! docs/acl.md).
//!
//! On the wire: RLock's hash `name` and acquire script; its own unlock
//! (latch, no message) and force unlock (no message) in `lua/spin/`.
//! An RLock waiter on the same name is not woken by a spin-lock release:
//! it retries at the lock's TTL, as in Redisson.

use std::sync::LazyLock;

use fred::types::Value;

use crate::config::BackOff;
use crate::engine::kind::{Call, LockKind};
use crate::engine::script::{Latch, Script, ScriptCall};
use crate::engine::Engine;
use crate::lock::handle::{sealed, Kind, Lock};
use crate::lock::{rlock, LockGuard};

/// Redisson's spin lock (`getSpinLock(name)`): a reentrant lock whose
/// waiters poll instead of subscribing, with the client's
/// [`crate::Config::spin_lock_backoff`] (Redisson's default: 1 ms doubling
/// to 128 ms, with jitter) or [`Lock::with_backoff`]. See [`Lock`] for the
/// operations.
///
/// ```no_run
/// use std::time::Duration;
/// use redisson_lock::BackOff;
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let lock = client
///     .spin_lock("batch")?
///     .with_backoff(BackOff::Constant(Duration::from_millis(20)));
/// if let Some(guard) = lock.try_lock_for(Duration::from_secs(1)).await? {
///     guard.unlock().await?; // publishes nothing: waiters find out by polling
/// }
/// # Ok(()) }
/// ```
pub type RSpinLock = Lock<Spin>;

/// The kind of an [`RSpinLock`].
#[derive(Debug)]
pub enum Spin {}

impl Kind for Spin {
    type Guard = LockGuard;

    fn guard(granted: sealed::Granted) -> crate::error::Result<LockGuard> {
        Ok(LockGuard::new(granted.0))
    }
}

impl sealed::Sealed for Spin {
    fn describe() -> sealed::Described {
        sealed::Described(&SPIN)
    }
}

impl Lock<Spin> {
    /// The same lock, its waiters polling with `backoff` instead of the
    /// client's [`crate::Config::spin_lock_backoff`].
    pub fn with_backoff(&self, backoff: BackOff) -> Self {
        Lock::from_raw(self.raw.with_backoff(backoff))
    }
}

/// The spin lock as the engine sees it.
struct SpinKind;

static SPIN: SpinKind = SpinKind;

static UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/spin/unlock.lua")));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/spin/force_unlock.lua")));

impl LockKind for SpinKind {
    fn name(&self) -> &'static str {
        "spin"
    }

    fn channel(&self, _lock: &str, _field: &str) -> Option<String> {
        None
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        rlock::acquire(call)
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        ScriptCall {
            script: &UNLOCK,
            keys: vec![call.lock.to_string(), latch.key.clone()],
            args: vec![call.lease_ms.into(), call.field.into(), latch.ttl_ms.into()],
        }
    }

    fn force_unlock(&self, _engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
        ScriptCall {
            script: &FORCE_UNLOCK,
            keys: vec![lock.to_string()],
            args: only_while.map(Value::from).into_iter().collect(),
        }
    }
}
