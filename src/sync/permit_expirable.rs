//! [`RPermitExpirableSemaphore`]: Redisson's permit-expirable semaphore
//! (`getPermitExpirableSemaphore(name)`).
//!
//! On the wire: the string `name` holds the available permits, and the
//! sorted set `{name}:timeout` every leased permit: its id (16 random bytes,
//! stored raw as Redisson 3.17+ does) scored by the wall-clock ms its lease
//! ends, or `922337203685477` for never. Every script first returns expired
//! leases to the pool. Channel `redisson_sc:{name}`, shared with
//! [`crate::RSemaphore`]'s wake-up rule. Scripts in `lua/permit_expirable/`.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::interfaces::{KeysInterface, SortedSetsInterface};
use fred::types::Value;
use tokio::time::Instant;

use crate::engine::hub::Wake;
use crate::engine::lease::lease_millis;
use crate::engine::loan::{detached, Loan};
use crate::engine::object::Object;
use crate::engine::request::Request;
use crate::engine::safety::Synced;
use crate::engine::script::{self, Script, ScriptCall};
use crate::engine::wait::{Attempts, Step, Waiter};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::naming;
use crate::sync::now_ms;
use crate::sync::semaphore::{flag, TRY_SET_PERMITS};

static TRY_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/permit_expirable/try_acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../lua/permit_expirable/release.lua")));
static COUNTS: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../lua/permit_expirable/counts.lua")));
static SET_PERMITS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/permit_expirable/set_permits.lua")));
static ADD_PERMITS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/permit_expirable/add_permits.lua")));
/// Returns every ended lease first: never batched.
static LEASE_TIME: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../lua/permit_expirable/lease_time.lua")));
static UPDATE_LEASE: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../lua/permit_expirable/update_lease.lua")));

/// The score Redisson gives a lease that never ends.
const NEVER: i64 = 922_337_203_685_477;

/// One leased permit's id: 16 random bytes, written as 32 lowercase hex
/// digits, as Redisson's `acquire()` returns it. Parse one a JVM service
/// handed over with [`str::parse`].
///
/// ```
/// let id: redisson_lock::PermitId = "00112233445566778899aabbccddeeff".parse().unwrap();
/// assert_eq!(id.to_string(), "00112233445566778899aabbccddeeff");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId([u8; 16]);

impl PermitId {
    fn random() -> Self {
        PermitId(rand::random())
    }

    /// The id's bytes, as stored in the lease set.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    fn to_value(self) -> Value {
        Value::Bytes(self.0.to_vec().into())
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = || {
            Error::InvalidArgument(format!(
                "`{text}` is not a permit id (32 hexadecimal digits)"
            ))
        };
        if text.len() != 32 || !text.is_ascii() {
            return Err(bad());
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(PermitId(bytes))
    }
}

/// A leased permit as the lease set records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PermitLease {
    /// The permit's id.
    #[serde(serialize_with = "as_text")]
    pub id: PermitId,
    /// When its lease ends (wall clock); `None` for a permit that never
    /// expires.
    pub expires: Option<SystemTime>,
}

fn as_text<S: serde::Serializer>(id: &PermitId, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(id)
}

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
/// let permit = slots.acquire(1, Some(Duration::from_secs(60))).await?;
/// println!("rendering under permit {}", permit.ids()[0]);
/// permit.release().await?; // or drop it; or let the lease end
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RPermitExpirableSemaphore {
    object: Object,
}

impl RPermitExpirableSemaphore {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        RPermitExpirableSemaphore {
            object: Object::new(engine, name, "permit-expirable semaphore"),
        }
    }

    pub(crate) fn check_name(name: &str, slot_grouped: bool) -> Result<()> {
        naming::validate_name(
            name,
            slot_grouped,
            "semaphore",
            &[
                naming::semaphore_channel_name(name),
                naming::permit_timeout_name(name),
                naming::request_latch_name(name, "0"),
            ],
        )
    }

    /// The semaphore's name: the key holding its available permits.
    pub fn name(&self) -> &str {
        &self.object.name
    }

    /// The channel on which the semaphore announces available permits.
    pub fn channel(&self) -> String {
        naming::semaphore_channel_name(&self.object.name)
    }

    /// The sorted set of leased permits: `{name}:timeout`.
    pub fn leases_key(&self) -> String {
        naming::permit_timeout_name(&self.object.name)
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
        let permits = permits_arg(permits)?;
        let _busy = self.object.enter()?;
        let (name, channel) = (self.name().to_string(), self.channel());
        let publish = self.object.engine.publish_command;
        let reply = self
            .object
            .synced_request("try_set_permits", |latch| ScriptCall {
                script: &TRY_SET_PERMITS,
                keys: vec![name.clone(), channel.clone(), latch.key.clone()],
                args: vec![
                    permits.into(),
                    publish.into(),
                    latch.ttl_ms.into(),
                    0.into(),
                ],
            })
            .await?;
        flag("try_set_permits", &reply)
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
        let _busy = self.object.enter()?;
        self.object
            .run(self.object.call(
                &SET_PERMITS,
                vec![self.name().into(), self.channel(), self.leases_key()],
                vec![
                    i64::from(permits).into(),
                    self.object.engine.publish_command.into(),
                ],
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
        crate::sync::add_permits(&self.object, &ADD_PERMITS, permits).await
    }

    /// Returns expired leases to the pool, then counts:
    /// `(exists, available, leased)`.
    async fn counts(&self) -> Result<(bool, i64, i64)> {
        let _busy = self.object.enter()?;
        let reply = self
            .object
            .run(self.object.call(
                &COUNTS,
                vec![self.name().into(), self.leases_key(), self.channel()],
                vec![now_ms().into(), self.object.engine.publish_command.into()],
            ))
            .await?;
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
        Ok(if exists { available + leased } else { 0 })
    }

    /// Every permit leased now, with its lease's end, earliest first
    /// (expired leases not yet returned are left out).
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
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// for lease in slots.leases().await? {
    ///     match lease.expires {
    ///         Some(at) => println!("slot {} leased until {at:?}", lease.id),
    ///         None => println!("slot {} leased until released", lease.id),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leases(&self) -> Result<Vec<PermitLease>> {
        let _busy = self.object.enter()?;
        let now = now_ms();
        let entries: Vec<(Value, f64)> = self
            .object
            .query(
                self.object
                    .reader()
                    .zrange(self.leases_key(), 0, -1, None, false, None, true),
            )
            .await?;
        Ok(entries
            .into_iter()
            .filter_map(|(member, score)| {
                let bytes = member.as_bytes()?;
                let id = PermitId(bytes.try_into().ok()?);
                let deadline = score as i64;
                if deadline <= now {
                    return None;
                }
                let expires = (deadline != NEVER)
                    .then(|| UNIX_EPOCH + Duration::from_millis(deadline as u64));
                Some(PermitLease { id, expires })
            })
            .collect())
    }

    /// Takes `permits`, each leased for `lease` (`None`: never expires),
    /// waiting as long as it takes (Redisson's `acquire(permits, lease)`).
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
    /// let permit = slots.acquire(1, Some(Duration::from_secs(120))).await?;
    /// // ... render the invoice PDF ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, permits: u32, lease: Option<Duration>) -> Result<ExpirablePermits> {
        self.wait_for(permits, lease, None)
            .await?
            .ok_or(Error::Timeout(Duration::MAX))
    }

    /// Takes `permits` leased for `lease` if that many are available now
    /// (Redisson's `tryAcquire`); `None` otherwise.
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
    /// if let Some(permits) = slots.try_acquire(2, None).await? {
    ///     // ... render both halves of the statement; no lease, so no expiry ...
    ///     permits.release().await?;
    /// } else {
    ///     println!("fewer than 2 render slots free right now");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(
        &self,
        permits: u32,
        lease: Option<Duration>,
    ) -> Result<Option<ExpirablePermits>> {
        let terms = Terms::new(permits, lease)?;
        let taken = detached(&self.object.engine, take(self.clone(), terms)).await?;
        Ok(match taken {
            Taken::Permits(permits) => Some(permits),
            Taken::Not(_) => None,
        })
    }

    /// Takes `permits` leased for `lease`, waiting at most `wait` (Redisson's
    /// `tryAcquire(permits, wait, lease)`); `None` if not in time.
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
    /// let (wait, lease) = (Duration::from_secs(5), Some(Duration::from_secs(60)));
    /// let Some(permit) = slots.try_acquire_for(1, wait, lease).await? else {
    ///     return Ok(()); // no slot within 5 s: render the PDF later
    /// };
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        permits: u32,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<ExpirablePermits>> {
        self.wait_for(permits, lease, Instant::now().checked_add(wait))
            .await
    }

    async fn wait_for(
        &self,
        permits: u32,
        lease: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Option<ExpirablePermits>> {
        let terms = Terms::new(permits, lease)?;
        let waiter = Waiter {
            engine: &self.object.engine,
            channel: Some((self.channel(), Wake::UpTo)),
            deadline,
            topology: None,
        };
        waiter
            .wait(&mut Takes {
                semaphore: self,
                terms,
            })
            .await
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
        let returned = self.try_release(ids).await?;
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
    /// let ids = slots.acquire(3, Some(Duration::from_secs(30))).await?.forget();
    /// // ... a slow batch of invoice PDFs ...
    /// let returned = slots.try_release(&ids).await?;
    /// println!("{returned} returned, {} had expired already", ids.len() - returned);
    /// # Ok(()) }
    /// ```
    pub async fn try_release(&self, ids: &[PermitId]) -> Result<usize> {
        if ids.is_empty() {
            return Err(Error::InvalidArgument("no permit ids to release".into()));
        }
        let _busy = self.object.enter()?;
        release(&self.object, ids).await
    }

    /// Moves the end of permit `id`'s lease to `lease` from now (`None`:
    /// never), as Redisson's `updateLeaseTime`. False if it is no longer
    /// leased (released, or expired).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 1 ms or beyond
    /// [`crate::MAX_LEASE`]; [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: setting the same end twice sets it once.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let permit = slots.acquire(1, Some(Duration::from_secs(60))).await?;
    /// let id = permit.ids()[0];
    /// // The year-end statement runs long: 5 more minutes from now.
    /// if !slots.update_lease(id, Some(Duration::from_secs(300))).await? {
    ///     eprintln!("lease {id} had ended already: the slot went back to the pool");
    /// }
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn update_lease(&self, id: PermitId, lease: Option<Duration>) -> Result<bool> {
        let deadline = deadline(lease)?;
        let _busy = self.object.enter()?;
        let reply = self
            .object
            .run(self.object.call(
                &UPDATE_LEASE,
                vec![self.name().into(), self.leases_key(), self.channel()],
                vec![
                    id.to_value(),
                    deadline.into(),
                    now_ms().into(),
                    self.object.engine.publish_command.into(),
                ],
            ))
            .await?;
        flag("update_lease", &reply)
    }

    /// How long permit `id`'s lease has left: `Some(left)`, or `None` for a
    /// permit leased without an end (Redisson's `getLeaseTime`, which answers
    /// `-1` for that). Ended leases are returned to the pool first, as by
    /// every call of this object.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `id` is not leased (released, its
    /// lease ended, or never leased): Redisson's `IllegalArgumentException`
    /// "Permit with id ... has already been released or doesn't exist";
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a read, but for returning ended leases, which any call
    /// would do.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let permit = slots.acquire(1, Some(Duration::from_secs(60))).await?;
    /// if let Some(left) = slots.lease_time(permit.ids()[0]).await? {
    ///     println!("render slot leased for {left:?} more");
    /// }
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lease_time(&self, id: PermitId) -> Result<Option<Duration>> {
        let _busy = self.object.enter()?;
        let reply = self
            .object
            .run(self.object.call(
                &LEASE_TIME,
                vec![self.name().into(), self.leases_key(), self.channel()],
                vec![
                    id.to_value(),
                    NEVER.into(),
                    now_ms().into(),
                    self.object.engine.publish_command.into(),
                ],
            ))
            .await?;
        match script::as_i64(&reply) {
            Some(-1) => Ok(None),
            Some(left) if left > 0 => Ok(Some(Duration::from_millis(left as u64))),
            Some(0) => Err(Error::InvalidArgument(format!(
                "permit {id} of `{}` has already been released, its lease ended, or it does not exist",
                self.name()
            ))),
            _ => Err(script::unexpected("lease_time", &reply)),
        }
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
        let _busy = self.object.enter()?;
        let deleted: i64 = self
            .object
            .query(
                self.object
                    .reader()
                    .del(vec![self.name().to_string(), self.leases_key()]),
            )
            .await?;
        Ok(deleted > 0)
    }
}

impl fmt::Debug for RPermitExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RPermitExpirableSemaphore")
            .field("name", &self.name())
            .finish()
    }
}

fn permits_arg(permits: u32) -> Result<i64> {
    crate::sync::permits(permits)
}

/// The lease deadline a lease means now, in wall-clock ms.
fn deadline(lease: Option<Duration>) -> Result<i64> {
    match lease {
        None => Ok(NEVER),
        Some(lease) => Ok(now_ms() + lease_millis(lease, "lease")?),
    }
}

/// What is asked for.
#[derive(Clone, Copy)]
struct Terms {
    permits: u32,
    lease: Option<Duration>,
}

impl Terms {
    fn new(permits: u32, lease: Option<Duration>) -> Result<Self> {
        crate::sync::permits(permits)?;
        if let Some(lease) = lease {
            lease_millis(lease, "lease")?;
        }
        Ok(Terms { permits, lease })
    }
}

/// What one attempt got.
enum Taken {
    Permits(ExpirablePermits),
    /// None free; the earliest lease ends at this wall-clock ms, if any does.
    Not(Option<i64>),
}

/// One acquire attempt with fresh ids, as a replayable request; runs detached
/// from its caller, so an unreceived guard gives the permits back.
async fn take(semaphore: RPermitExpirableSemaphore, terms: Terms) -> Result<Taken> {
    let object = &semaphore.object;
    let ids: Vec<PermitId> = (0..terms.permits).map(|_| PermitId::random()).collect();
    let deadline = deadline(terms.lease)?;
    let name = object.name.to_string();
    let keys = [name.clone(), semaphore.leases_key(), semaphore.channel()];
    let publish = object.engine.publish_command;
    let sent = object
        .request("acquire", &Request::new(), |latch| {
            let mut args: Vec<Value> = vec![
                i64::from(terms.permits).into(),
                deadline.into(),
                now_ms().into(),
                NEVER.into(),
                publish.into(),
                latch.ttl_ms.into(),
            ];
            args.extend(ids.iter().map(|id| id.to_value()));
            let mut call_keys = keys.to_vec();
            call_keys.push(latch.key.clone());
            ScriptCall {
                script: &TRY_ACQUIRE,
                keys: call_keys,
                args,
            }
        })
        .await?;
    let reply = match &sent.reply {
        Value::Null => return Ok(Taken::Not(None)),
        other => other.as_string().unwrap_or_default(),
    };
    if let Some(at) = reply.strip_prefix(':') {
        let at = at
            .parse::<f64>()
            .map_err(|_| script::unexpected("acquire", &sent.reply))?;
        return Ok(Taken::Not(Some(at as i64)));
    }
    if reply != "OK" {
        return Err(script::unexpected("acquire", &sent.reply));
    }
    let taken = ExpirablePermits::new(semaphore.clone(), ids);
    if let short @ Synced::Short { .. } = sent.synced {
        // Leased on the primary only: give them back (Redisson's
        // NoSyncedSlaves handling).
        let _ = taken.release().await;
        return Err(object
            .engine
            .replica_sync
            .not_synced("acquire", &name, short));
    }
    Ok(Taken::Permits(taken))
}

/// Returns the permits `ids`; how many were still leased.
async fn release(object: &Object, ids: &[PermitId]) -> Result<usize> {
    let name = object.name.to_string();
    let keys = [
        name.clone(),
        naming::semaphore_channel_name(&name),
        naming::permit_timeout_name(&name),
    ];
    let publish = object.engine.publish_command;
    let reply = object
        .synced_request("release", |latch| {
            let mut args: Vec<Value> = vec![now_ms().into(), publish.into(), latch.ttl_ms.into()];
            args.extend(ids.iter().map(|id| id.to_value()));
            let mut call_keys = keys.to_vec();
            call_keys.push(latch.key.clone());
            ScriptCall {
                script: &RELEASE,
                keys: call_keys,
                args,
            }
        })
        .await?;
    script::as_i64(&reply)
        .map(|n| n.max(0) as usize)
        .ok_or_else(|| script::unexpected("release", &reply))
}

/// A waiting acquire's attempts.
struct Takes<'a> {
    semaphore: &'a RPermitExpirableSemaphore,
    terms: Terms,
}

impl Attempts for Takes<'_> {
    type Output = ExpirablePermits;

    async fn attempt(&mut self) -> Result<Step<ExpirablePermits>> {
        let taken = detached(
            &self.semaphore.object.engine,
            take(self.semaphore.clone(), self.terms),
        )
        .await?;
        Ok(match taken {
            Taken::Permits(permits) => Step::Done(permits),
            // The earliest lease's end frees a permit without any message.
            Taken::Not(Some(at)) => {
                Step::Again(Some(Duration::from_millis((at - now_ms()).max(1) as u64)))
            }
            Taken::Not(None) => Step::Again(None),
        })
    }
}

/// Permits leased from an [`RPermitExpirableSemaphore`], given back when
/// this guard is dropped (in the background), by
/// [`ExpirablePermits::release`], or by the client's shutdown; exactly once.
/// A lease that ends first returns them by itself.
#[must_use = "dropping the guard gives the permits back at once"]
pub struct ExpirablePermits {
    semaphore: RPermitExpirableSemaphore,
    ids: Vec<PermitId>,
    loan: Arc<Loan>,
}

impl ExpirablePermits {
    fn new(semaphore: RPermitExpirableSemaphore, ids: Vec<PermitId>) -> Self {
        let object = semaphore.object.clone();
        let owned = ids.clone();
        let loan = Loan::open(&semaphore.object.engine, move |_| {
            let (object, ids) = (object.clone(), owned.clone());
            Box::pin(async move { release(&object, &ids).await })
        });
        ExpirablePermits {
            semaphore,
            ids,
            loan,
        }
    }

    /// The permits' ids, as Redisson hands them out.
    pub fn ids(&self) -> &[PermitId] {
        &self.ids
    }

    /// The semaphore they came from.
    pub fn semaphore(&self) -> &RPermitExpirableSemaphore {
        &self.semaphore
    }

    /// Moves the end of every permit's lease to `lease` from now (`None`:
    /// never); how many were still leased.
    ///
    /// # Errors
    ///
    /// As [`RPermitExpirableSemaphore::update_lease`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let permits = slots.acquire(2, Some(Duration::from_secs(60))).await?;
    /// // ... rendering takes longer than planned ...
    /// let extended = permits.set_lease(Some(Duration::from_secs(600))).await?;
    /// println!("{extended} of 2 slots now leased for 10 more minutes");
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_lease(&self, lease: Option<Duration>) -> Result<usize> {
        let mut moved = 0;
        for id in &self.ids {
            moved += usize::from(self.semaphore.update_lease(*id, lease).await?);
        }
        Ok(moved)
    }

    /// Gives the permits back now; how many were still leased (the others'
    /// leases had ended, which returned them already).
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] if the client's shutdown gave them back already;
    /// connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the release runs to its end in the background.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let permit = slots.acquire(1, Some(Duration::from_secs(30))).await?;
    /// // ... render the invoice PDF ...
    /// let returned = permit.release().await?; // 0 if the lease ended first
    /// println!("{returned} render slot(s) returned to the pool");
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<usize> {
        self.loan.settle().await
    }

    /// Keeps the permits leased and drops the guard: release them later by
    /// id ([`RPermitExpirableSemaphore::release`]), from any client, or let
    /// their leases end. Returns the ids.
    pub fn forget(self) -> Vec<PermitId> {
        self.loan.forget();
        self.ids.clone()
    }
}

impl Drop for ExpirablePermits {
    fn drop(&mut self) {
        if self.loan.is_open() {
            self.loan.settle_in_background();
        }
    }
}

impl fmt::Debug for ExpirablePermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpirablePermits")
            .field("semaphore", &self.semaphore.name())
            .field("ids", &self.ids)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_ids_read_and_write_as_redisson_hex() {
        let id = PermitId::random();
        assert_eq!(id.to_string().len(), 32);
        assert_eq!(id.to_string().parse::<PermitId>().unwrap(), id);
        for bad in [
            "",
            "zz112233445566778899aabbccddeeff",
            "0011",
            "é0112233445566778899aabbccddeef",
        ] {
            assert!(
                matches!(bad.parse::<PermitId>(), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
    }
}
