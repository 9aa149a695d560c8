//! [`RFencedLock`]: Redisson's fenced lock (`getFencedLock(name)`): an RLock
//! whose every acquisition hands out a fencing token, larger than any
//! handed out before, Java or Rust.
//!
//! On the wire: RLock's hash `name` and channel, plus the counter
//! `redisson_lock_token:{name}` (never expires). The acquire script
//! increments it with every acquisition, re-entries included, and returns
//! it. Unlock, renewal and force unlock are RLock's. Scripts in
//! `lua/fenced/`.
//!
//! Where this differs from Redisson, a JVM peer cannot tell: the data and
//! the messages are the same. Redisson's token path never undoes an
//! acquisition that no replica confirmed (this one does, as for RLock),
//! ignores the lease in `lockAndGetToken(lease)` (this one applies it), and
//! reads a PTTL of -1 (a key without TTL) as a grant (this one does not).

use std::ops::Deref;
use std::sync::LazyLock;

use fred::interfaces::KeysInterface;
use fred::types::Value;

use crate::engine::kind::{Call, Grant, LockKind};
use crate::engine::safety::Synced;
use crate::engine::script::{self, Latch, Script, ScriptCall};
use crate::engine::Engine;
use crate::error::Result;
use crate::lock::handle::{sealed, Kind, Lock};
use crate::lock::{rlock, LockGuard, Unlocked};
use crate::naming;

/// Redisson's fenced lock (`getFencedLock(name)`). See [`Lock`] for the
/// operations; each acquisition returns a [`FencedGuard`] with its token.
///
/// A token lets the resource the lock protects refuse a holder that lost
/// its lock without knowing it (paused past its lease, say), after a newer
/// holder wrote: the resource remembers the highest token that wrote and
/// refuses smaller ones. [`FencedGuard::set_if_newest`] does that for a
/// Redis key; for a database, keep the token in the row:
/// `UPDATE t SET v = $1, fence = $token WHERE id = $2 AND fence <= $token`.
///
/// ```no_run
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let lock = client.fenced_lock("ledger")?;
/// let guard = lock.lock().await?;
/// // Refused if a newer holder has written the key meanwhile.
/// if !guard.set_if_newest("ledger:balance", "42").await? {
///     eprintln!("token {} is stale: someone else holds the lock", guard.token());
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type RFencedLock = Lock<Fenced>;

/// The kind of an [`RFencedLock`].
#[derive(Debug)]
pub enum Fenced {}

impl Kind for Fenced {
    type Guard = FencedGuard;

    fn guard(granted: sealed::Granted) -> crate::error::Result<FencedGuard> {
        let guard = LockGuard::new(granted.0);
        // The engine gives back a grant whose token it could not read, so
        // this is only a guard against that ever changing: the hold goes
        // back as the guard drops.
        let Some(token) = granted.1 else {
            return Err(crate::error::Error::redis(format!(
                "the fenced lock `{}` was granted without a fencing token",
                guard.name()
            )));
        };
        Ok(FencedGuard { token, guard })
    }
}

impl sealed::Sealed for Fenced {
    fn describe() -> sealed::Described {
        sealed::Described(&FENCED)
    }
}

impl Lock<Fenced> {
    /// The channel on which unlocks of this lock are published (RLock's).
    pub fn channel(&self) -> String {
        naming::channel_name(&self.raw.name)
    }

    /// The last token handed out, by any client (Redisson's `getToken`);
    /// `None` before the first acquisition and after [`Lock::delete`], where
    /// Java's `getToken` reads `0`. Like Redisson's, it neither checks nor
    /// needs that the caller holds the lock.
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::Connection`] / [`crate::error::Error::Timeout`], and
    /// [`crate::error::Error::WrongType`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RFencedLock) -> redisson_lock::Result<()> {
    /// match lock.token().await? {
    ///     Some(last) => println!("the ledger lock's last token was {last}"),
    ///     None => println!("the ledger lock was never acquired"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn token(&self) -> Result<Option<i64>> {
        self.raw.engine.ensure_open()?;
        let key = naming::token_name(&self.raw.name);
        self.raw.query(self.raw.engine.redis.get(key)).await
    }

    /// Deletes the lock and its token counter, whoever holds it (Redisson's
    /// `delete()` of a fenced lock: one `DEL` of both keys). Returns whether
    /// either existed. No message is published; holders in this client are
    /// told at once (their guards are lost), others at their next renewal.
    ///
    /// The token sequence starts again at 1 afterwards, so tokens handed out
    /// before the delete are no longer smaller than the next ones: a
    /// resource that keeps the highest token it saw would refuse the new
    /// holders. Delete a fenced lock only together with what it fences.
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
    /// # async fn demo(lock: redisson_lock::RFencedLock) -> redisson_lock::Result<()> {
    /// // The ledger is being rebuilt from scratch: its lock and tokens go too.
    /// if lock.delete().await? {
    ///     assert_eq!(lock.token().await?, None);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        let name = self.raw.name.to_string();
        let token = naming::token_name(&name);
        self.raw.delete(vec![name, token]).await
    }
}

/// One hold of a fenced lock, with its token. Everything else is a
/// [`LockGuard`]'s (it derefs to one).
#[must_use = "dropping the guard releases the lock at once"]
pub struct FencedGuard {
    guard: LockGuard,
    token: i64,
}

impl FencedGuard {
    /// Leaves the hold in place without a guard (see [`LockGuard`]'s).
    #[cfg(feature = "blocking")]
    pub(crate) fn keep(self) {
        self.guard.keep();
    }

    /// The fencing token of this acquisition: larger than every token
    /// handed out before it, to Java or Rust holders.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// Sets `key` to `value` only if no holder with a newer token has
    /// written `key` this way: the highest token that wrote it is kept in
    /// `redisson_fence:{key}` (same cluster slot). Returns whether it wrote.
    ///
    /// On a cluster or Sentinel the write is confirmed by the replicas as a
    /// lock write is, so a failover does not bring back an older fence that
    /// a stale holder could pass.
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::Connection`] / [`crate::error::Error::Timeout`];
    /// [`crate::error::Error::WrongType`] if the fence key holds something else;
    /// [`crate::error::Error::ReplicasNotSynced`] if it was written on the primary
    /// but too few replicas confirmed it (calling it again with the same
    /// value is safe: the token check lets the same token write again).
    ///
    /// # Cancel safety
    ///
    /// The script is sent once; dropping the future does not stop it.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RFencedLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// if guard.set_if_newest("invoice:981:status", "paid").await? {
    ///     println!("invoice 981 marked paid under token {}", guard.token());
    /// } else {
    ///     // A holder with a newer token wrote it: this hold is stale, write nothing more.
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_if_newest(&self, key: &str, value: &str) -> Result<bool> {
        let engine = self.guard.engine();
        engine.ensure_open()?;
        let fence = naming::fence_name(key);
        let call = || ScriptCall {
            script: &SET_IF_NEWEST,
            keys: vec![key.to_string(), fence.clone()],
            args: vec![self.token.into(), value.into()],
        };
        let (reply, synced) = engine.write(call).await?;
        let written = script::as_i64(&reply) == Some(1);
        if written && matches!(synced, Synced::Short { .. }) {
            return Err(engine.replica_sync.not_synced("set_if_newest", key, synced));
        }
        Ok(written)
    }

    /// Releases this hold (see [`LockGuard::unlock`]).
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::unlock`].
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RFencedLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// let token = guard.token(); // outlives the guard
    /// // ... post the ledger entry, stamped with `token` ...
    /// guard.unlock().await?;
    /// println!("ledger released; the next holder gets a token above {token}");
    /// # Ok(()) }
    /// ```
    pub async fn unlock(self) -> Result<Unlocked> {
        self.guard.unlock().await
    }

    /// The hold without its token.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

impl Deref for FencedGuard {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl std::fmt::Debug for FencedGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedGuard")
            .field("guard", &self.guard)
            .field("token", &self.token)
            .finish()
    }
}

/// The fenced lock as the engine sees it.
struct FencedKind;

static FENCED: FencedKind = FencedKind;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/fenced/acquire.lua")));
static SET_IF_NEWEST: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/fenced/set_if_newest.lua")));

impl LockKind for FencedKind {
    fn name(&self) -> &'static str {
        "fenced"
    }

    fn channel(&self, lock: &str, _field: &str) -> Option<String> {
        Some(naming::channel_name(lock))
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        ScriptCall {
            script: &ACQUIRE,
            keys: vec![call.lock.to_string(), naming::token_name(call.lock)],
            args: vec![call.lease_ms.into(), call.field.into()],
        }
    }

    fn grant(&self, reply: &Value) -> Option<Grant> {
        let Value::Array(pair) = reply else {
            return None;
        };
        let [ttl, token] = pair.as_slice() else {
            return None;
        };
        match (script::as_i64(ttl)?, script::as_i64(token)?) {
            (_, token) if token >= 0 => Some(Grant::Acquired { token: Some(token) }),
            (ttl, _) => Some(Grant::Refused(ttl)),
        }
    }

    fn token_key(&self, lock: &str) -> Option<String> {
        Some(naming::token_name(lock))
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        rlock::unlock(call, latch)
    }

    fn force_unlock(&self, engine: &Engine, lock: &str, only_while: Option<&str>) -> ScriptCall {
        rlock::force_unlock(engine, lock, only_while)
    }
}
