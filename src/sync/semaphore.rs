//! [`RSemaphore`]: Redisson's semaphore (`getSemaphore(name)`).
//!
//! On the wire: the string `name` holds the available permits (no TTL unless
//! set with one); every change that makes permits available publishes the
//! new total on `redisson_sc:{name}`, which wakes up to that many waiters,
//! Java or Rust. Scripts in `lua/semaphore/`; each write records its outcome
//! in a request latch, so a lost reply is replayed, never applied twice.
//! What it shares with the permit-expirable semaphore (waiting, taking,
//! loans) is in `sync::pool`.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use fred::interfaces::KeysInterface;
use tokio::time::Instant;

use crate::acquire::sealed::{Sealed, Until, Within};
use crate::acquire::{Acquirable, Acquire, BoxFuture};
use crate::engine::loan::{Lent, LoanLease};
use crate::engine::script::{self, Script, ScriptCall};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::sync::pool::{parse_count, permits_arg, Answer, Pool, Taken};

static TRY_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/semaphore/try_acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/semaphore/release.lua")));
static ADD_PERMITS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/semaphore/add_permits.lua")));
static DRAIN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/semaphore/drain.lua")));

/// Redisson's semaphore (`getSemaphore(name)`): a number of permits shared
/// by every client, Java or Rust. A permit has no owner: whoever took it, any
/// client may release it. [`RSemaphore::acquire`] hands out a
/// [`SemaphorePermits`] guard that gives its permits back when dropped, for
/// the common "at most N at once" use; [`SemaphorePermits::forget`] and
/// [`RSemaphore::release`] are the Java-style alternative.
///
/// ```no_run
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let exports = client.semaphore("exports")?;
/// exports.try_set_permits(4).await?; // once, by whoever comes first
/// let permit = exports.acquire(1).await?; // waits on pub/sub while none is free
/// // ... at most 4 of these run at once, across the fleet ...
/// permit.release().await?; // or drop it
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RSemaphore {
    pool: Pool,
}

impl RSemaphore {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        RSemaphore {
            pool: Pool::new(engine, name, "semaphore"),
        }
    }

    /// Checks a name for a semaphore on a client whose multi-key commands
    /// must stay in one slot (or not).
    pub(crate) fn check_name(name: &str, slot_grouped: bool) -> Result<()> {
        Pool::check_name(name, slot_grouped, &[])
    }

    /// The semaphore's name: the key holding its available permits.
    pub fn name(&self) -> &str {
        self.pool.name()
    }

    /// The channel on which the semaphore announces available permits.
    pub fn channel(&self) -> String {
        self.pool.channel()
    }

    /// Sets the number of permits if the semaphore does not exist yet
    /// (Redisson's `trySetPermits`), and wakes waiters. True if it was set.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or more than `i32::MAX` permits;
    /// [`Error::WrongType`] when the key holds something else; connection
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe in what it reports: dropped after sending, the
    /// permits may or may not have been set. Nothing is ever set twice.
    ///
    /// ```no_run
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// // Whoever starts first sizes the pool; later calls leave it alone.
    /// if !gateway.try_set_permits(10).await? {
    ///     println!("already sized: {} calls free", gateway.available_permits().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.pool.try_set_permits(permits, None).await
    }

    /// As [`RSemaphore::try_set_permits`], and the semaphore expires after
    /// `ttl` (Redisson's `trySetPermits(permits, ttl)`).
    ///
    /// # Errors
    ///
    /// As [`RSemaphore::try_set_permits`], and [`Error::InvalidArgument`] for
    /// a `ttl` under 1 ms or beyond [`crate::MAX_LEASE`].
    ///
    /// # Cancel safety
    ///
    /// As [`RSemaphore::try_set_permits`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(quota: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// // A flash sale's checkout quota, gone after an hour.
    /// let hour = Duration::from_secs(3600);
    /// if quota.try_set_permits_with_ttl(500, hour).await? {
    ///     println!("flash-sale quota opened: 500 checkouts");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits_with_ttl(&self, permits: u32, ttl: Duration) -> Result<bool> {
        let ttl = crate::engine::lease::lease_millis(ttl, "ttl")?;
        self.pool.try_set_permits(permits, Some(ttl)).await
    }

    /// Adds `permits` (a negative number takes some away, Redisson's
    /// `addPermits`), creating the semaphore if needed; a positive total
    /// wakes waiters. Returns the new total. Like Redisson, this drops a TTL
    /// the key had.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the total would leave the Java `int`
    /// range (nothing is changed); [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, the permits may or may not have been added,
    /// never twice.
    ///
    /// ```no_run
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// // The provider raised our rate limit: 5 more concurrent calls.
    /// let total = gateway.add_permits(5).await?;
    /// println!("{total} payment-gateway permits available");
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, permits: i32) -> Result<i64> {
        self.pool.add_permits(&ADD_PERMITS, permits).await
    }

    /// The permits available now (0 when the semaphore does not exist; may
    /// be negative after [`RSemaphore::add_permits`] took more than there
    /// were).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a read.
    ///
    /// ```no_run
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// let free = gateway.available_permits().await?; // negative when over-committed
    /// println!("payment gateway: {free} calls may start now");
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        let object = &self.pool.object;
        let _busy = object.enter()?;
        let value: Option<String> = object.query(object.reader().get(self.name())).await?;
        parse_count(self.name(), value)
    }

    /// Takes every available permit and returns how many that was
    /// (Redisson's `drainPermits`). The drained permits are not guarded:
    /// give them back with [`RSemaphore::release`].
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, the permits may have been drained with nobody
    /// told how many; never twice.
    ///
    /// ```no_run
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// // The provider's maintenance window: no new payment calls meanwhile.
    /// let drained = gateway.drain_permits().await?;
    /// // ... wait out the maintenance ...
    /// if drained > 0 {
    ///     gateway.release(drained as u32).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn drain_permits(&self) -> Result<i64> {
        let _busy = self.pool.object.enter()?;
        let name = self.name().to_string();
        let reply = self
            .pool
            .object
            .synced_request("drain_permits", |latch| ScriptCall {
                script: &DRAIN,
                keys: vec![name.clone(), latch.key.clone()],
                args: vec![latch.ttl_ms.into()],
            })
            .await?;
        script::as_i64(&reply).ok_or_else(|| script::unexpected("drain_permits", &reply))
    }

    /// Takes `permits`, waiting as long as it takes (Redisson's
    /// `acquire(permits)`). Waiters sleep until a release announces permits
    /// (up to `n` waiters per release of `n`), or at most
    /// [`crate::Config::recheck_interval`] before they look again, so a lost
    /// message never leaves one waiting forever. An [`Acquire`] builder, as
    /// a lock's `acquire()`: awaited, it waits as long as it takes;
    /// [`Acquire::wait`] and [`Acquire::no_wait`] bound the wait (the
    /// result is then an `Option`).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(semaphore: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// let permits = semaphore.acquire(2).await?;
    /// assert_eq!(permits.count(), 2);
    /// drop(permits); // given back in the background
    /// // The same builder as a lock's: one try, or a bounded wait.
    /// if let Some(one) = semaphore.acquire(1).wait(Duration::from_secs(2)).await? {
    ///     one.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or more than `i32::MAX` permits;
    /// [`Error::WrongType`]; [`Error::Shutdown`] as soon as the client shuts
    /// down; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped `acquire` never keeps a permit. An attempt in
    /// flight when it is dropped completes in the background, and gives back
    /// whatever it took.
    pub fn acquire(&self, permits: u32) -> Acquire<'_, RSemaphore> {
        Acquire::of_permits(self, permits)
    }

    /// Takes `permits` if that many are available now (Redisson's
    /// `tryAcquire(permits)`); `None` otherwise.
    ///
    /// # Errors
    ///
    /// As [`RSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`RSemaphore::acquire`].
    ///
    /// ```no_run
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// if let Some(permit) = gateway.try_acquire(1).await? {
    ///     // ... call the payment provider ...
    ///     permit.release().await?;
    /// } else {
    ///     println!("gateway saturated: answer 503, the client retries");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, permits: u32) -> Result<Option<SemaphorePermits>> {
        self.acquire(permits).no_wait().await
    }

    /// Takes `permits`, waiting at most `wait` (Redisson's
    /// `tryAcquire(permits, wait)`); `None` if they did not become available
    /// in time. A zero `wait` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`RSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`RSemaphore::acquire`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// let Some(permits) = gateway.try_acquire_for(3, Duration::from_millis(250)).await? else {
    ///     return Ok(()); // not 3 calls free within 250 ms: fail the batch fast
    /// };
    /// println!("charging a batch of {} cards", permits.count());
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<SemaphorePermits>> {
        self.acquire(permits).wait(wait).await
    }

    /// Returns `permits` to the semaphore, creating it if needed, and wakes
    /// up to that many waiters (Redisson's `release(permits)`). Any client may
    /// release, whoever took them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or more than `i32::MAX` permits, or
    /// when the total would pass `i32::MAX` (nothing is changed);
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, the permits may or may not have been returned,
    /// never twice.
    ///
    /// ```no_run
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// let taken = gateway.acquire(2).await?.forget(); // kept past the guard
    /// // ... the refund job finishes, in another task or service ...
    /// gateway.release(taken).await?; // wakes up to 2 waiters
    /// # Ok(()) }
    /// ```
    pub async fn release(&self, permits: u32) -> Result<()> {
        let permits = permits_arg(permits)?;
        let _busy = self.pool.object.enter()?;
        release(&self.pool, permits, false).await.map(|_| ())
    }

    /// As [`RSemaphore::release`], but only if the semaphore exists
    /// (Redisson's `releaseIfExists`): false, and nothing changed, if not.
    ///
    /// # Errors
    ///
    /// As [`RSemaphore::release`].
    ///
    /// # Cancel safety
    ///
    /// As [`RSemaphore::release`].
    ///
    /// ```no_run
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// // Don't recreate a semaphore an operator deleted meanwhile.
    /// if !gateway.release_if_exists(1).await? {
    ///     println!("payment-gateway semaphore is gone; nothing returned");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release_if_exists(&self, permits: u32) -> Result<bool> {
        let permits = permits_arg(permits)?;
        let _busy = self.pool.object.enter()?;
        release(&self.pool, permits, true).await
    }

    /// Deletes the semaphore (Redisson's `delete`, a plain `DEL`). Waiters,
    /// which Redisson does not wake, notice at their next re-check.
    ///
    /// # Errors
    ///
    /// Connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: deleting twice deletes once.
    ///
    /// ```no_run
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// if gateway.delete().await? {
    ///     println!("payment-gateway removed; waiters notice at their next re-check");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        self.pool.delete(vec![self.name().to_string()]).await
    }
}

impl fmt::Debug for RSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RSemaphore")
            .field("name", &self.name())
            .finish()
    }
}

impl Sealed for RSemaphore {}

impl Acquirable for RSemaphore {
    type Guard = SemaphorePermits;

    fn acquire_until(&self, terms: Until) -> BoxFuture<'_, Result<SemaphorePermits>> {
        Box::pin(async move {
            let permits = permits_arg(terms.permits)?;
            self.pool.wait(|| take(self.clone(), permits)).await
        })
    }

    fn acquire_within(&self, terms: Within) -> BoxFuture<'_, Result<Option<SemaphorePermits>>> {
        Box::pin(async move {
            let permits = permits_arg(terms.permits)?;
            match terms.wait {
                None => self.pool.try_once(take(self.clone(), permits)).await,
                Some(wait) => {
                    // A deadline too far to represent is no deadline.
                    let deadline = Instant::now().checked_add(wait);
                    self.pool
                        .wait_for(deadline, || take(self.clone(), permits))
                        .await
                }
            }
        })
    }
}

/// One acquire attempt (see [`Pool::take`]).
async fn take(semaphore: RSemaphore, permits: i64) -> Result<Taken<SemaphorePermits>> {
    let pool = semaphore.pool.clone();
    let name = pool.name().to_string();
    let taken = semaphore
        .pool
        .take(
            |latch| ScriptCall {
                script: &TRY_ACQUIRE,
                keys: vec![name.clone(), latch.key.clone()],
                args: vec![permits.into(), latch.ttl_ms.into()],
            },
            |reply| match script::as_i64(reply) {
                Some(1) => Ok(Answer::Granted),
                // Only a release (announced, or found by the re-check) helps.
                Some(0) => Ok(Answer::Refused(None)),
                _ => Err(script::unexpected("acquire", reply)),
            },
            move || {
                let pool = pool.clone();
                Box::pin(async move {
                    release(&pool, permits, false).await?;
                    Ok(permits as usize)
                })
            },
            // A plain semaphore's permits never expire.
            LoanLease::Forever,
        )
        .await?;
    Ok(taken.map(|lent| SemaphorePermits {
        semaphore,
        count: permits as u32,
        lent,
    }))
}

/// Returns permits; false when `if_exists` and there is no semaphore.
async fn release(pool: &Pool, permits: i64, if_exists: bool) -> Result<bool> {
    let reply = pool
        .object
        .announcing(
            "release",
            &RELEASE,
            pool.channel(),
            vec![permits.into()],
            vec![i64::from(if_exists).into()],
        )
        .await?;
    match script::as_i64(&reply) {
        Some(released) => Ok(released == 1),
        None if reply.is_null() => Err(Error::InvalidArgument(format!(
            "releasing {permits} permits would take `{}` past the Java int range",
            pool.name()
        ))),
        None => Err(script::unexpected("release", &reply)),
    }
}

/// Permits taken from an [`RSemaphore`], given back when this guard is
/// dropped (in the background), by [`SemaphorePermits::release`], or by the
/// client's shutdown; exactly once.
#[must_use = "dropping the guard gives the permits back at once"]
pub struct SemaphorePermits {
    semaphore: RSemaphore,
    count: u32,
    lent: Lent,
}

impl SemaphorePermits {
    /// How many permits this guard holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The semaphore they came from.
    pub fn semaphore(&self) -> &RSemaphore {
        &self.semaphore
    }

    /// Gives the permits back now, waking up to that many waiters; how many
    /// went back (all it holds; as [`ExpirablePermits::release`](crate::ExpirablePermits::release)
    /// says how many were still leased).
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] if the client's shutdown gave them back already;
    /// connection errors (the release was then attempted and may be unknown).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the release runs to its end in the background if the
    /// caller stops waiting.
    ///
    /// ```no_run
    /// # async fn demo(gateway: redisson_lock::RSemaphore) -> redisson_lock::Result<()> {
    /// let permits = gateway.acquire(2).await?;
    /// // ... two concurrent calls to the payment provider ...
    /// assert_eq!(permits.release().await?, 2); // wakes up to 2 waiters
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<u32> {
        self.lent.settle().await.map(|_| self.count)
    }

    /// Keeps the permits taken and drops the guard without giving them back
    /// (tokio's `SemaphorePermit::forget`): release them later with
    /// [`RSemaphore::release`], from any client. Returns how many.
    pub fn forget(self) -> u32 {
        self.lent.forget();
        self.count
    }
}

impl fmt::Debug for SemaphorePermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermits")
            .field("semaphore", &self.semaphore.name())
            .field("count", &self.count)
            .finish()
    }
}
