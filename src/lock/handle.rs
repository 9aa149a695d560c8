//! [`Lock`]: the handle every exclusive-or-shared Redisson lock object is,
//! generic over its [`Kind`] (as lock_api's `Mutex<R, T>` is over its raw
//! lock). [`crate::RLock`], [`crate::RFairLock`], [`crate::ReadLock`] and
//! [`crate::WriteLock`] are `Lock`s of their kind; each kind's file adds what
//! only it has.
//!
//! Long for its documentation: the twenty methods every lock has each carry
//! their `# Errors`, `# Cancel safety` and an example; some 60% of the file
//! is rustdoc.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::sealed::{Until, Within};
use crate::acquire::{Acquirable, Acquire, Bounded, BoxFuture, UntilAcquired};
use crate::engine::kind::Patience;
use crate::engine::raw::RawLock;
use crate::engine::Engine;
use crate::error::Result;
use crate::lock::{Holder, Ttl, Unlocked};
use crate::owner::OwnerId;

/// The kinds of lock a [`Lock`] can be: [`crate::kind::Reentrant`]
/// ([`crate::RLock`]), [`crate::kind::Fair`] ([`crate::RFairLock`]),
/// [`crate::kind::Read`] and [`crate::kind::Write`] (the halves of an
/// [`crate::RReadWriteLock`]), [`crate::kind::Fenced`], [`crate::kind::Spin`],
/// [`crate::kind::NonReentrant`] and [`crate::kind::NonReentrantFair`].
/// Sealed: each one is a Redisson protocol.
pub trait Kind: sealed::Sealed + Send + Sync + 'static {
    /// What an acquisition hands out: a [`crate::LockGuard`], or for the fenced
    /// lock a [`crate::FencedGuard`], which also carries its token.
    type Guard: Send + 'static;

    #[doc(hidden)]
    fn guard(granted: sealed::Granted) -> crate::error::Result<Self::Guard>;
}

pub(crate) mod sealed {
    use crate::engine::kind::LockKind;
    use crate::engine::raw::Held;

    /// What the engine needs of a kind, opaque outside the crate.
    pub struct Described(pub(crate) &'static dyn LockKind);

    /// An acquisition, opaque outside the crate: the hold, and its fencing
    /// token if the kind hands one out.
    pub struct Granted(pub(crate) Held, pub(crate) Option<i64>);

    /// Not nameable outside the crate: only its kinds implement [`super::Kind`].
    pub trait Sealed {
        fn describe() -> Described;
    }
}

/// A handle on one Redisson lock object of kind `K`, shared with JVM
/// Redisson clients that use the same name. Cheap to clone; creating one
/// sends nothing to Redis. Use it through its aliases: [`crate::RLock`],
/// [`crate::RFairLock`], [`crate::ReadLock`], [`crate::WriteLock`].
///
/// Acquire methods return a [`crate::LockGuard`]. Each acquisition is its own owner,
/// so two futures that wait for the same lock exclude each other even when
/// one task polls both (`join!`, `select!`, `FuturesUnordered`). Re-entry is
/// scoped: inside [`crate::LockGuard::scope`], acquiring the same lock again
/// re-enters the guard's hold (the hold count goes up, as a nested `lock()`
/// in one Java thread does); outside it, a second `lock()` waits for the
/// first guard like anyone else. [`Lock::with_owner`] fixes the owner
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
pub struct Lock<K: Kind> {
    pub(crate) raw: RawLock,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Clone for Lock<K> {
    fn clone(&self) -> Self {
        Lock {
            raw: self.raw.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: Kind> Lock<K> {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        Lock {
            raw: RawLock::new(engine, K::describe().0, name),
            kind: PhantomData,
        }
    }

    pub(crate) fn from_raw(raw: RawLock) -> Self {
        Lock {
            raw,
            kind: PhantomData,
        }
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    /// The same lock, acting for a fixed owner: Redisson's
    /// `lockAsync(threadId)`. Every acquisition through this handle re-enters
    /// that owner's hold, wherever it runs; it lets one task acquire and
    /// another release, or several tasks share one reentrant hold.
    pub fn with_owner(&self, owner: OwnerId) -> Self {
        Lock::from_raw(self.raw.with_owner(owner))
    }

    /// The owner an acquisition would re-enter with right now: the explicit
    /// owner of [`Lock::with_owner`], else the owner of the innermost
    /// enclosing [`crate::LockGuard::scope`] of this lock name, else `None` (the
    /// next acquisition gets an owner of its own).
    pub fn current_owner(&self) -> Option<OwnerId> {
        self.raw.current_owner()
    }

    /// The hash field of an owner: `<client-id>:<owner-id>` (with `:write`
    /// for a [`crate::WriteLock`]).
    pub fn field_of(&self, owner: OwnerId) -> String {
        self.raw.field_of(owner)
    }

    /// Builds an acquisition: `lock.acquire().wait(d).lease(l).await`. The
    /// methods below are shorthands for its common forms.
    pub fn acquire(&self) -> Acquire<'_, Self> {
        Acquire::new(self)
    }

    /// Runs `work` under the lock: acquires it (waiting as long as it
    /// takes), runs `work` inside the guard's scope (so `work` may take the
    /// lock again), and always releases it. `work` gets the lost signal, to
    /// stop before writing; if the lock is lost first, `work` is dropped and
    /// the result is [`crate::error::Error::LockLost`]. A panic in `work` releases
    /// the lock too (the guard is dropped while unwinding). For a bounded
    /// wait or a lease: `lock.acquire().wait(d).lease(l).run(work)`.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`]; [`crate::error::Error::LockLost`] when the lock was lost
    /// before `work` finished or could not be released cleanly.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the
    /// background.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let total = lock
    ///     .run(|lost| async move {
    ///         let subtotal = 40; // ... the critical section ...
    ///         if lost.is_lost() {
    ///             return None; // stop before writing
    ///         }
    ///         Some(subtotal + 2)
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(crate::engine::lease::LostSignal) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        self.acquire().run(work).await
    }

    /// Waits as long as it takes, then holds the lock; the watchdog renews it
    /// until released.
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::WrongType`] if the key is not a lock hash,
    /// [`crate::error::Error::Connection`] / [`crate::error::Error::Timeout`] if Redis
    /// fails (a waiter then stops waiting), [`crate::error::Error::Shutdown`] once
    /// the client shuts down, [`crate::error::Error::LockLost`] for a re-entry into
    /// a hold that was lost, [`crate::error::Error::InvalidArgument`] for a request
    /// that could never succeed (a reader asking for the write lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future never leaves the lock held (an
    /// attempt in flight is settled in the background: whether it took the
    /// lock is read back and it is given back), nor a place in a fair lock's
    /// queue.
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
    pub async fn lock(&self) -> Result<K::Guard> {
        // Not through the builder, whose future is boxed: the box allocated
        // and copied the whole acquisition on every call (issue 38).
        let (held, token) = self.raw.acquire_forever(None).await?;
        K::guard(sealed::Granted(held, token))
    }

    /// One attempt, no waiting (a fair lock's is not queued either). `None`
    /// when someone else holds the lock.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`]; [`crate::error::Error::Timeout`] also when an operation
    /// of the same owner is still settling after one command timeout.
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::lock`].
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// if let Some(guard) = lock.try_lock().await? {
    ///     // ... send the payment reminders ...
    ///     guard.unlock().await?;
    /// } else {
    ///     println!("another instance is sending the reminders");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<K::Guard>> {
        self.acquire_inline(Patience::Once).await
    }

    /// Waits up to `wait` for the lock; `None` when it stayed taken (a fair
    /// lock's place in the queue is then given up).
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::lock`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let Some(guard) = lock.try_lock_for(Duration::from_millis(500)).await? else {
    ///     println!("checkout busy: ask the customer to retry");
    ///     return Ok(());
    /// };
    /// // ... reserve the stock ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<K::Guard>> {
        self.acquire_inline(Patience::For(wait)).await
    }

    /// A bounded acquisition with the watchdog's lease, its future inline
    /// in the caller's (see [`Lock::lock`]).
    async fn acquire_inline(&self, patience: Patience) -> Result<Option<K::Guard>> {
        let granted = self.raw.acquire(None, patience).await?;
        granted
            .map(|(held, token)| K::guard(sealed::Granted(held, token)))
            .transpose()
    }

    /// Releases one hold of the current owner ([`Lock::current_owner`])
    /// without a guard, like Redisson's `unlock()`: for holds whose guard was
    /// given up, or to check that a non-owner cannot unlock. Prefer
    /// [`crate::LockGuard::unlock`].
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::NotHeld`] when the current owner does not hold it
    /// (Redisson's `IllegalMonitorStateException`); otherwise as
    /// [`Lock::lock`].
    ///
    /// # Cancel safety
    ///
    /// The release of a hold this client tracks finishes in the background
    /// if the future is dropped.
    ///
    /// ```no_run
    /// use redisson_lock::{Error, OwnerId};
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let clerk = lock.with_owner(OwnerId::new(42)?);
    /// match clerk.unlock().await {
    ///     Ok(_) => println!("released one hold of owner 42"),
    ///     Err(Error::NotHeld { .. }) => println!("owner 42 does not hold the invoice lock"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self) -> Result<Unlocked> {
        self.raw.unlock().await
    }

    /// Deletes the lock whoever holds it and wakes its waiters (Redisson's
    /// `forceUnlock`; a read or write lock only when held in that mode).
    /// Returns whether there was a lock to delete. Holders in this client
    /// are told at once; others at their next renewal.
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::WrongType`] for a key of another type (left alone).
    ///
    /// # Cancel safety
    ///
    /// The script is sent once; dropping the future does not stop it.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// // An operator clears the lock left by a crashed billing job.
    /// if lock.force_unlock().await? {
    ///     println!("billing lock deleted; its waiters were woken");
    /// } else {
    ///     println!("billing lock was already free");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.raw.force_unlock(None).await
    }

    /// [`Lock::force_unlock`], only while the holder `client_id` and
    /// `owner` (as [`crate::Holder`] shows them) is in the lock, checked in
    /// the same script: an operator who inspected a stale holder never
    /// deletes the hold of another who took the lock since. Returns whether
    /// the lock was deleted (false: free, or not that holder's).
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::InvalidArgument`] for an empty client id or an
    /// owner that is not a number (nothing is sent), and those of
    /// [`Lock::force_unlock`].
    ///
    /// # Cancel safety
    ///
    /// The script is sent once; dropping the future does not stop it.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// let lock = client.lock("billing")?;
    /// // The holder an operator saw as stuck, and decided to clear.
    /// for holder in lock.holders().await? {
    ///     if lock.force_unlock_if_held_by(&holder.client_id, &holder.owner).await? {
    ///         println!("cleared {}:{}", holder.client_id, holder.owner);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock_if_held_by(&self, client_id: &str, owner: &str) -> Result<bool> {
        self.raw.force_unlock(Some((client_id, owner))).await
    }

    /// Whether the lock is held (Redisson's `isLocked()`: any holder for a
    /// lock or fair lock, read mode for a read lock, write mode for a write
    /// lock).
    ///
    /// # Errors
    ///
    /// [`crate::error::Error::Connection`] / [`crate::error::Error::Timeout`], and
    /// [`crate::error::Error::WrongType`] where the kind reads the hash.
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// if lock.is_locked().await? {
    ///     println!("a nightly import is running somewhere: not starting another");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.raw.is_locked().await
    }

    /// Whether the current owner ([`Lock::current_owner`]) holds the lock:
    /// Redisson's `isHeldByCurrentThread`. Outside a scope and without an
    /// explicit owner there is no current owner, and this is `false`; ask a
    /// guard instead ([`crate::LockGuard::hold_count`]).
    ///
    /// # Errors
    ///
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// let inside = guard.scope(lock.is_held()).await?; // true: the scope's owner holds it
    /// let outside = lock.is_held().await?; // false: no current owner out here
    /// println!("held in scope: {inside}, outside: {outside}");
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
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
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// use redisson_lock::OwnerId;
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let dispatcher = OwnerId::new(17)?; // mirrors a worker thread id
    /// if lock.is_held_by(dispatcher).await? {
    ///     println!("dispatcher 17 still holds the route-planning lock");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by(&self, owner: OwnerId) -> Result<bool> {
        self.raw.is_held_by(owner).await
    }

    /// How many times the current owner ([`Lock::current_owner`]) holds the
    /// lock: Redisson's `getHoldCount`. 0 when not held, and outside a scope
    /// without an explicit owner.
    ///
    /// # Errors
    ///
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// use redisson_lock::OwnerId;
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let worker = lock.with_owner(OwnerId::new(3)?);
    /// let first = worker.lock().await?;
    /// let second = worker.lock().await?; // the same owner re-enters
    /// println!("shipping lock held {} times", worker.hold_count().await?); // 2
    /// second.unlock().await?;
    /// first.unlock().await?;
    /// # Ok(()) }
    /// ```
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
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// let count = lock.hold_count_of(guard.owner()).await?; // 1; 0 once released
    /// println!("shipping lock held {count} time(s) by owner {}", guard.owner());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn hold_count_of(&self, owner: OwnerId) -> Result<u32> {
        self.raw.hold_count_of(owner).await
    }

    /// Every holder of this kind recorded in the lock's hash, from any
    /// client, Java or Rust (`HGETALL`). Empty when the lock is free.
    ///
    /// # Errors
    ///
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// for holder in lock.holders().await? {
    ///     // Java holders show their thread id as the owner.
    ///     let (client, owner) = (&holder.client_id, &holder.owner);
    ///     println!("{client}:{owner} holds it {} time(s)", holder.hold_count);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.raw.holders().await
    }

    /// The lock's remaining time to live (`PTTL`).
    ///
    /// # Errors
    ///
    /// As [`Lock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// use redisson_lock::Ttl;
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// match lock.remaining_ttl().await? {
    ///     Ttl::Expires(left) => println!("invoice lock expires in {left:?} unless renewed"),
    ///     Ttl::Absent => println!("invoice lock is free"),
    ///     Ttl::Persistent => println!("the key has no TTL: not written by a lock client"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remaining_ttl(&self) -> Result<Ttl> {
        self.raw.remaining_ttl().await
    }
}

impl<'a, K: Kind> Acquire<'a, Lock<K>, UntilAcquired> {
    /// Runs `work` under the lock acquired this way: see [`crate::Lock::run`].
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::run`].
    ///
    /// # Cancel safety
    ///
    /// As [`crate::Lock::run`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// // Held for at most 30 s, never renewed: the settlement must finish in time.
    /// let settled = lock
    ///     .acquire()
    ///     .lease(Duration::from_secs(30))
    ///     .run(|_lost| async { 12 /* invoices settled */ })
    ///     .await?;
    /// println!("settled {settled} invoices");
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(crate::engine::lease::LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        run_until(&self.target.raw, self.lease, work).await
    }
}

impl<'a, K: Kind> Acquire<'a, Lock<K>, Bounded> {
    /// Runs `work` under the lock if it is acquired within the wait: see
    /// [`crate::Lock::run`]. `None` when it was not acquired (`work` did not
    /// run).
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::run`].
    ///
    /// # Cancel safety
    ///
    /// As [`crate::Lock::run`].
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
    /// let rebuilt = lock.acquire().no_wait().run(|_lost| rebuild_report()).await?;
    /// match rebuilt {
    ///     Some(rows) => println!("daily report rebuilt: {rows} rows"),
    ///     None => println!("another node is rebuilding it"), // `work` did not run
    /// }
    /// # Ok(()) }
    /// # async fn rebuild_report() -> u64 { 0 }
    /// ```
    pub async fn run<F, Fut, T>(self, work: F) -> Result<Option<T>>
    where
        F: FnOnce(crate::engine::lease::LostSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let terms = Within {
            lease: self.lease,
            wait: self.wait.0,
            permits: 1,
            keep: Default::default(),
        };
        run_within(&self.target.raw, terms, work).await
    }
}

impl<K: Kind> crate::acquire::sealed::Sealed for Lock<K> {}
impl<K: Kind> crate::acquire::sealed::Leasable for Lock<K> {}

impl<K: Kind> Acquirable for Lock<K> {
    type Guard = K::Guard;

    fn acquire_until(&self, terms: Until) -> BoxFuture<'_, Result<K::Guard>> {
        Box::pin(async move {
            let (held, token) = self.raw.acquire_forever(terms.lease).await?;
            K::guard(sealed::Granted(held, token))
        })
    }

    fn acquire_within(&self, terms: Within) -> BoxFuture<'_, Result<Option<K::Guard>>> {
        Box::pin(async move {
            let granted = self.raw.acquire(terms.lease, terms.patience()).await?;
            granted
                .map(|(held, token)| K::guard(sealed::Granted(held, token)))
                .transpose()
        })
    }
}

impl<K: Kind> std::fmt::Debug for Lock<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("kind", &self.raw.kind.name())
            .field("name", &self.raw.name)
            .field("owner", &self.raw.fixed_owner())
            .finish()
    }
}

/// Runs `work` under `raw`'s lock, waiting as long as it takes (see
/// [`Lock::run`]). Every lock object's `run`.
pub(crate) async fn run_until<F, Fut, T>(
    raw: &RawLock,
    lease: Option<Duration>,
    work: F,
) -> Result<T>
where
    F: FnOnce(crate::engine::lease::LostSignal) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let (held, _token) = raw.acquire_forever(lease).await?;
    run_held(raw, held, work).await
}

/// Runs `work` under `raw`'s lock if it is acquired within `terms`; `None`
/// when it was not (`work` did not run).
pub(crate) async fn run_within<F, Fut, T>(
    raw: &RawLock,
    terms: Within,
    work: F,
) -> Result<Option<T>>
where
    F: FnOnce(crate::engine::lease::LostSignal) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    match raw.acquire(terms.lease, terms.patience()).await? {
        Some((held, _token)) => run_held(raw, held, work).await.map(Some),
        None => Ok(None),
    }
}

/// Runs `work` inside the scope of `held`, stops it if the lock is lost,
/// and always releases.
async fn run_held<F, Fut, T>(raw: &RawLock, held: crate::engine::raw::Held, work: F) -> Result<T>
where
    F: FnOnce(crate::engine::lease::LostSignal) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let guard = crate::lock::guard::LockGuard::new(held);
    let lost = guard.lost_signal();
    let outcome = {
        let work = guard.scope(work(lost.clone()));
        tokio::select! {
            biased;
            _ = lost.lost() => None,
            value = work => Some(value),
        }
    };
    let released = guard.unlock().await;
    match (outcome, released) {
        (Some(value), Ok(_)) => Ok(value),
        (None, _) | (_, Err(crate::error::Error::LockLost { .. })) => {
            Err(crate::error::Error::LockLost {
                name: raw.name.to_string(),
            })
        }
        (Some(_), Err(e)) => Err(e),
    }
}
