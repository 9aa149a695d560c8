//! [`RPermitExpirableSemaphore`]: Redisson's permit-expirable semaphore
//! (`getPermitExpirableSemaphore(name)`).
//!
//! On the wire: the string `name` holds the available permits, and the
//! sorted set `{name}:timeout` every leased permit: its id (16 random bytes,
//! stored raw as Redisson 3.17+ does) scored by the wall-clock ms its lease
//! ends, or `922337203685477` for never. Every script first returns expired
//! leases to the pool. Channel `redisson_sc:{name}`, shared with
//! [`crate::RSemaphore`]'s wake-up rule. Scripts in `lua/permit_expirable/`.
//! What it shares with [`crate::RSemaphore`] (waiting, taking, loans) is in
//! `sync::pool`; here, its scripts' arguments and its API, with the permit
//! ids (`id`), the leases (`lease`) and the guard (`guard`) apart.

mod guard;
mod id;
mod lease;
mod take;

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use fred::types::Value;
use tokio::time::Instant;

use crate::acquire::sealed::{Leasable, Sealed, Until, Within};
use crate::acquire::{Acquirable, Acquire, BoxFuture, Keep};
use crate::engine::script::{self, Script};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::naming;
use crate::sync::now_ms;
use crate::sync::pool::Pool;
pub use guard::ExpirablePermits;
pub use id::{PermitId, PermitLease};
use take::{release, take, Terms};

static COUNTS: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../../lua/permit_expirable/counts.lua")));
static SET_PERMITS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../lua/permit_expirable/set_permits.lua"
    ))
});
static ADD_PERMITS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../lua/permit_expirable/add_permits.lua"
    ))
});

/// Redisson's permit-expirable semaphore (`getPermitExpirableSemaphore`):
/// a semaphore whose permits are leased under an id. A permit whose lease
/// ends goes back to the pool by itself, so a holder that dies cannot keep
/// one forever. [`RPermitExpirableSemaphore::acquire`] hands out an
/// [`ExpirablePermits`] guard that gives its permits back when dropped.
///
/// ```no_run
/// use std::time::Duration;
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let slots = client.permit_expirable_semaphore("render-slots")?;
/// slots.try_set_permits(8).await?;
/// let permit = slots.acquire(1).lease(Duration::from_secs(60)).await?;
/// println!("rendering under permit {}", permit.ids()[0]);
/// permit.release().await?; // or drop it; or let the lease end
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RPermitExpirableSemaphore {
    pool: Pool,
}

impl RPermitExpirableSemaphore {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        RPermitExpirableSemaphore {
            pool: Pool::new(engine, name, "permit-expirable semaphore"),
        }
    }

    pub(crate) fn check_name(name: &str, slot_grouped: bool) -> Result<()> {
        Pool::check_name(name, slot_grouped, &[naming::permit_timeout_name(name)])
    }

    /// The semaphore's name: the key holding its available permits.
    pub fn name(&self) -> &str {
        self.pool.name()
    }

    /// The channel on which the semaphore announces available permits.
    pub fn channel(&self) -> String {
        self.pool.channel()
    }

    /// The sorted set of leased permits: `{name}:timeout`.
    pub fn leases_key(&self) -> String {
        naming::permit_timeout_name(self.name())
    }

    /// Sets the number of permits if the semaphore does not exist yet
    /// (Redisson's `trySetPermits`), and wakes waiters. True if it was set.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or more than `i32::MAX` permits;
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, the permits may or may not have been set.
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// if slots.try_set_permits(8).await? {
    ///     println!("PDF render pool created with 8 slots");
    /// } // else it existed already, and keeps its size
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.pool.try_set_permits(permits, None).await
    }

    /// Makes the semaphore's size (available plus leased permits) `permits`,
    /// creating it if needed (Redisson's `setPermits`); waiters are woken
    /// when it changed.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for more than `i32::MAX` permits;
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: setting the size twice sets it once.
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// // Resize the render pool to 12, whatever it was; leased slots count.
    /// slots.set_permits(12).await?;
    /// println!("{} render slots free now", slots.available_permits().await?);
    /// # Ok(()) }
    /// ```
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        if permits > i32::MAX as u32 {
            return Err(Error::InvalidArgument(format!(
                "permits must be at most {} (a Java int), not {permits}",
                i32::MAX
            )));
        }
        let object = &self.pool.object;
        let _busy = object.enter()?;
        object
            .run(object.call(
                &SET_PERMITS,
                vec![self.name().into(), self.channel(), self.leases_key()],
                vec![i64::from(permits).into(), self.pool.publish()],
            ))
            .await
            .map(|_| ())
    }

    /// Adds `permits` to the available ones (a negative number takes some
    /// away, Redisson's `addPermits`), creating the semaphore if needed.
    /// Returns the new number available.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when it would leave the Java `int` range
    /// (nothing is changed); [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, the permits may or may not have been added,
    /// never twice.
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let free = slots.add_permits(-2).await?; // two renderers down for maintenance
    /// println!("{free} render slots left available");
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, permits: i32) -> Result<i64> {
        self.pool.add_permits(&ADD_PERMITS, permits).await
    }

    /// Returns expired leases to the pool, then counts:
    /// `(exists, available, leased)`.
    async fn counts(&self) -> Result<(bool, i64, i64)> {
        let reply = self.reclaiming(&COUNTS, vec![]).await?;
        let numbers: Vec<i64> = match &reply {
            Value::Array(items) => items.iter().filter_map(script::as_i64).collect(),
            _ => vec![],
        };
        match numbers[..] {
            [exists, available, leased] => Ok((exists == 1, available, leased)),
            _ => Err(script::unexpected("permit counts", &reply)),
        }
    }

    /// The permits available now, after expired leases went back (Redisson's
    /// `availablePermits`).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// // Expired leases go back to the pool before counting.
    /// if slots.available_permits().await? == 0 {
    ///     println!("every render slot is busy: queue the invoice PDF");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        Ok(self.counts().await?.1)
    }

    /// The permits leased now, expired leases excluded (Redisson's
    /// `acquiredPermits`).
    ///
    /// # Errors
    ///
    /// As [`RPermitExpirableSemaphore::available_permits`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let busy = slots.acquired_permits().await?; // expired leases not counted
    /// println!("{busy} invoice PDF(s) rendering now");
    /// # Ok(()) }
    /// ```
    pub async fn acquired_permits(&self) -> Result<i64> {
        Ok(self.counts().await?.2)
    }

    /// The semaphore's size, available plus leased (Redisson's
    /// `getPermits`); 0 when it does not exist.
    ///
    /// # Errors
    ///
    /// As [`RPermitExpirableSemaphore::available_permits`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let (size, free) = (slots.permits().await?, slots.available_permits().await?);
    /// println!("render pool: {free} of {size} slots free");
    /// # Ok(()) }
    /// ```
    pub async fn permits(&self) -> Result<i64> {
        let (exists, available, leased) = self.counts().await?;
        // Saturating: the counts are whatever the server said.
        Ok(if exists {
            available.saturating_add(leased)
        } else {
            0
        })
    }

    /// Runs one of the scripts that first return ended leases to the pool
    /// (KEYS: the semaphore, its leases, its channel; ARGV: `own`, then now
    /// and the publish command).
    async fn reclaiming(&self, script: &'static Script, own: Vec<Value>) -> Result<Value> {
        let object = &self.pool.object;
        let _busy = object.enter()?;
        let mut args = own;
        args.extend([now_ms().into(), self.pool.publish()]);
        let keys = vec![self.name().into(), self.leases_key(), self.channel()];
        object.run(object.call(script, keys, args)).await
    }

    /// Takes `permits`, waiting as long as it takes (Redisson's
    /// `acquire(permits)`): an [`Acquire`] builder, as a lock's `acquire()`.
    /// Without more, the permits are kept alive as a lock is (leased for the
    /// watchdog timeout and renewed until given back: a crashed holder's
    /// come back); [`Acquire::kept_alive_for`] with a lease of their own,
    /// [`Acquire::lease`] for a fixed time (Redisson's `acquire(permits,
    /// lease)`), and [`Acquire::forever`] never expiring (Redisson's
    /// `acquire(permits)`). [`Acquire::wait`] and [`Acquire::no_wait`] bound the
    /// wait (the result is then an `Option`: Redisson's `tryAcquire`).
    /// Waiters wake on a release's message, when the earliest lease ends, or
    /// at most [`crate::Config::recheck_interval`] apart.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or more than `i32::MAX` permits, or a
    /// lease under 1 ms or beyond [`crate::MAX_LEASE`]; [`Error::WrongType`];
    /// [`Error::Shutdown`] as soon as the client shuts down; connection
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped `acquire` never keeps a permit; an attempt in
    /// flight completes in the background and gives back what it took.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// // One slot for at most 2 minutes: a crashed renderer cannot keep it.
    /// let permit = slots.acquire(1).lease(Duration::from_secs(120)).await?;
    /// // ... render the invoice PDF ...
    /// permit.release().await?;
    /// // Two slots within 5 s, kept while the batch runs, however long.
    /// if let Some(two) = slots.acquire(2).wait(Duration::from_secs(5)).await? {
    ///     two.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, permits: u32) -> Acquire<'_, RPermitExpirableSemaphore> {
        Acquire::of_permits(self, permits)
    }

    /// Takes `permits`, never expiring, if that many are available now
    /// (Redisson's `tryAcquire(permits)`); `None` otherwise. With a lease:
    /// `acquire(permits).no_wait().lease(lease)`.
    ///
    /// # Errors
    ///
    /// As [`RPermitExpirableSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`RPermitExpirableSemaphore::acquire`].
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// if let Some(permits) = slots.try_acquire(2).await? {
    ///     // ... render both halves of the statement; no lease, so no expiry ...
    ///     permits.release().await?;
    /// } else {
    ///     println!("fewer than 2 render slots free right now");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, permits: u32) -> Result<Option<ExpirablePermits>> {
        self.acquire(permits).no_wait().forever().await
    }

    /// Takes `permits`, never expiring, waiting at most `wait` (Redisson's
    /// `tryAcquire(permits, wait)`); `None` if not in time. With a lease:
    /// `acquire(permits).wait(wait).lease(lease)`.
    ///
    /// # Errors
    ///
    /// As [`RPermitExpirableSemaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`RPermitExpirableSemaphore::acquire`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let Some(permit) = slots.try_acquire_for(1, Duration::from_secs(5)).await? else {
    ///     return Ok(()); // no slot within 5 s: render the PDF later
    /// };
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<ExpirablePermits>> {
        self.acquire(permits).wait(wait).forever().await
    }

    /// Returns the leased permits `ids` (Redisson's `release(ids)`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for no ids, or when some of them were
    /// already released or had expired (the others are returned, as
    /// Redisson does); [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, the permits may or may not have been
    /// returned, never twice.
    ///
    /// ```no_run
    /// use redisson_lock::PermitId;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// // A permit id handed over by the JVM renderer that leased it.
    /// let id: PermitId = "00112233445566778899aabbccddeeff".parse()?;
    /// slots.release(&[id]).await?; // Err(InvalidArgument) if it expired or was returned
    /// # Ok(()) }
    /// ```
    pub async fn release(&self, ids: &[PermitId]) -> Result<()> {
        let returned = self.try_release(ids).await? as usize;
        if returned < ids.len() {
            return Err(Error::InvalidArgument(format!(
                "{} of the permits {ids:?} of `{}` were already released or had expired",
                ids.len() - returned,
                self.name()
            )));
        }
        Ok(())
    }

    /// Returns those of the permits `ids` still leased, and says how many
    /// (Redisson's `tryRelease`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for no ids; [`Error::WrongType`];
    /// connection errors.
    ///
    /// # Cancel safety
    ///
    /// As [`RPermitExpirableSemaphore::release`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let ids = slots.acquire(3).lease(Duration::from_secs(30)).await?.forget();
    /// // ... a slow batch of invoice PDFs ...
    /// let returned = slots.try_release(&ids).await?;
    /// println!("{returned} returned, {} had expired already", ids.len() as u32 - returned);
    /// # Ok(()) }
    /// ```
    pub async fn try_release(&self, ids: &[PermitId]) -> Result<u32> {
        if ids.is_empty() {
            return Err(Error::InvalidArgument("no permit ids to release".into()));
        }
        let _busy = self.pool.object.enter()?;
        // At most the ids given, which `acquire(permits: u32)` bounds.
        release(&self.pool, ids).await.map(|n| n as u32)
    }

    /// Deletes the semaphore and its leases (Redisson's `delete`: `DEL name
    /// {name}:timeout`, no message). True if there was anything.
    ///
    /// # Errors
    ///
    /// Connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect.
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// // Retire the pool: the counter and every lease go, and nobody is told.
    /// if slots.delete().await? {
    ///     println!("render-slots removed");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        let keys = vec![self.name().to_string(), self.leases_key()];
        self.pool.delete(keys).await
    }
}

impl fmt::Debug for RPermitExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RPermitExpirableSemaphore")
            .field("name", &self.name())
            .finish()
    }
}

impl Sealed for RPermitExpirableSemaphore {}
impl Leasable for RPermitExpirableSemaphore {}

impl Acquirable for RPermitExpirableSemaphore {
    type Guard = ExpirablePermits;

    fn acquire_until(&self, terms: Until) -> BoxFuture<'_, Result<ExpirablePermits>> {
        Box::pin(async move {
            let terms = Terms::new(terms.permits, terms.lease, terms.keep)?;
            self.pool.wait(|| take(self.clone(), terms)).await
        })
    }

    fn acquire_within(&self, terms: Within) -> BoxFuture<'_, Result<Option<ExpirablePermits>>> {
        Box::pin(async move {
            let wait = terms.wait;
            let terms = Terms::new(terms.permits, terms.lease, terms.keep)?;
            match wait {
                None => self.pool.try_once(take(self.clone(), terms)).await,
                Some(wait) => {
                    // A deadline too far to represent is no deadline.
                    let deadline = Instant::now().checked_add(wait);
                    self.pool
                        .wait_for(deadline, || take(self.clone(), terms))
                        .await
                }
            }
        })
    }
}

// Here rather than beside `Acquire`: only this object's permits are kept alive.
impl<W> Acquire<'_, RPermitExpirableSemaphore, W> {
    /// Leases the permits for the watchdog timeout
    /// ([`Config::lock_watchdog_timeout`](crate::Config::lock_watchdog_timeout))
    /// and renews them every third of it until they are given back, as a
    /// lock taken without a lease: a crashed holder's permits return within
    /// that timeout, a live one's never run out. The guard tells when they
    /// are lost ([`ExpirablePermits::lost`](crate::ExpirablePermits::lost)).
    ///
    /// A renewal, like `updateLeaseTime`, is not confirmed by replicas (no
    /// `WAIT`), as a lock renewal is: after a failover that lost one, the
    /// permits can expire on the new primary up to one renewal interval
    /// before the next renewal finds them gone and the guard is told.
    ///
    /// This is the default: `slots.acquire(2).await` keeps its permits alive
    /// so; [`Acquire::forever`] asks for permits that never expire.
    pub fn kept_alive(mut self) -> Self {
        self.keep = Keep::KeptAlive;
        self.lease = None;
        self
    }

    /// Leases the permits for `lease` and renews them every third of it
    /// until they are given back, on a timer of their own: a crashed
    /// holder's permits return within `lease`, whatever the client's
    /// watchdog timeout. A `lease` under 3 ms is refused when acquiring
    /// ([`Error::InvalidArgument`]).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// // Back within 5 s if this process dies, however long the job runs.
    /// let permit = slots.acquire(1).kept_alive_for(Duration::from_secs(5)).await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn kept_alive_for(mut self, lease: Duration) -> Self {
        self.keep = Keep::KeptAliveFor(lease);
        self.lease = None;
        self
    }

    /// Permits that never expire (Redisson's `acquire()` without a lease):
    /// a holder that crashes keeps them until someone releases them by id.
    pub fn forever(mut self) -> Self {
        self.keep = Keep::Forever;
        self.lease = None;
        self
    }
}
