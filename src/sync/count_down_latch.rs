//! [`RCountDownLatch`]: Redisson's count-down latch (`getCountDownLatch(name)`).
//!
//! On the wire: the string `name` holds the count; the channel is
//! `redisson_countdownlatch__channel__{name}`, braces always added. Messages
//! are a level: `0` (the count reached zero, the key is gone) opens the latch
//! for every waiter, `1` (a new count was set, or the latch deleted) closes
//! it. Scripts in `lua/count_down_latch/`; each write records its outcome in
//! a request latch, so a lost reply is replayed, never applied twice.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use fred::interfaces::KeysInterface;
use tokio::time::Instant;

use crate::engine::hub::Wake;
use crate::engine::object::Object;
use crate::engine::script::{self, Script, ScriptCall};
use crate::engine::wait::{Attempts, Step, Waiter};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::naming;
use crate::sync::semaphore::{flag, parse_count};

static TRY_SET_COUNT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/count_down_latch/try_set_count.lua")));
static COUNT_DOWN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/count_down_latch/count_down.lua")));
static DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/count_down_latch/delete.lua")));

/// Redisson's count-down latch (`getCountDownLatch(name)`): waiters, Java or
/// Rust, are let through once the count, set by
/// [`RCountDownLatch::try_set_count`], has been counted down to zero.
///
/// ```no_run
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let shards_loaded = client.count_down_latch("shards-loaded")?;
/// shards_loaded.try_set_count(3).await?;
/// // ... each of 3 loaders, anywhere in the fleet: ...
/// shards_loaded.count_down().await?;
/// // ... and whoever needs all of them:
/// shards_loaded.wait().await?;
/// # Ok(()) }
/// ```
///
/// A name with its own hash tag (`a{t}b`) cannot be used on a cluster:
/// Redisson wraps the whole name in braces for the channel, which then lands
/// in another slot than the latch, and the scripts would fail with
/// `CROSSSLOT` from either side. [`crate::RedissonClient::count_down_latch`]
/// refuses such a name there.
#[derive(Clone)]
pub struct RCountDownLatch {
    object: Object,
}

impl RCountDownLatch {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        RCountDownLatch {
            object: Object::new(engine, name, "count-down latch"),
        }
    }

    pub(crate) fn check_name(name: &str, slot_grouped: bool) -> Result<()> {
        naming::validate_name(
            name,
            slot_grouped,
            "count-down latch",
            &[
                naming::count_down_latch_channel_name(name),
                naming::request_latch_name(name, "0"),
            ],
        )
    }

    /// The latch's name: the key holding its count.
    pub fn name(&self) -> &str {
        &self.object.name
    }

    /// The channel on which the latch announces that it opened (`0`) or got
    /// a new count (`1`).
    pub fn channel(&self) -> String {
        naming::count_down_latch_channel_name(&self.object.name)
    }

    /// Sets the count if the latch does not exist (Redisson's
    /// `trySetCount`): true if it was set. It publishes `1`, so JVM waiters
    /// of an earlier round wait for this one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a count of 0 or past `i64::MAX`;
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, the count may or may not have been set.
    ///
    /// ```no_run
    /// # async fn demo(latch: redisson_lock::RCountDownLatch) -> redisson_lock::Result<()> {
    /// if latch.try_set_count(3).await? {
    ///     println!("new round: waiting for 3 warehouse stock reports");
    /// } else {
    ///     println!("a round is already open: joining it");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        let count = match i64::try_from(count) {
            Ok(count) if count > 0 => count,
            _ => {
                return Err(Error::InvalidArgument(format!(
                "a count-down latch's count must be between 1 and {} (a Java long), not {count}",
                i64::MAX
            )))
            }
        };
        let _busy = self.object.enter()?;
        let (name, channel) = (self.name().to_string(), self.channel());
        let publish = self.object.engine.publish_command;
        let reply = self
            .object
            .synced_request("try_set_count", |latch| ScriptCall {
                script: &TRY_SET_COUNT,
                keys: vec![name.clone(), channel.clone(), latch.key.clone()],
                args: vec![count.into(), publish.into(), latch.ttl_ms.into()],
            })
            .await?;
        flag("try_set_count", &reply)
    }

    /// Counts down by one (Redisson's `countDown`) and returns the count
    /// left. Reaching zero deletes the latch and opens it for every waiter.
    /// Without a latch it does nothing and returns 0.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, it may or may not have counted down; never
    /// twice.
    ///
    /// ```no_run
    /// # async fn demo(latch: redisson_lock::RCountDownLatch) -> redisson_lock::Result<()> {
    /// // ... this warehouse's stock report is uploaded ...
    /// match latch.count_down().await? {
    ///     0 => println!("last report in: the latch is open for every waiter"),
    ///     left => println!("{left} warehouse report(s) still missing"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn count_down(&self) -> Result<u64> {
        let _busy = self.object.enter()?;
        let (name, channel) = (self.name().to_string(), self.channel());
        let publish = self.object.engine.publish_command;
        let reply = self
            .object
            .synced_request("count_down", |latch| ScriptCall {
                script: &COUNT_DOWN,
                keys: vec![name.clone(), channel.clone(), latch.key.clone()],
                args: vec![publish.into(), latch.ttl_ms.into()],
            })
            .await?;
        match script::as_i64(&reply) {
            Some(left) => Ok(left.max(0) as u64),
            None => Err(script::unexpected("count_down", &reply)),
        }
    }

    /// The count now; 0 once the latch is open (or was never set).
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
    /// # async fn demo(latch: redisson_lock::RCountDownLatch) -> redisson_lock::Result<()> {
    /// let missing = latch.count().await?; // 0 once open
    /// println!("{missing} warehouse report(s) still outstanding");
    /// # Ok(()) }
    /// ```
    pub async fn count(&self) -> Result<u64> {
        let _busy = self.object.enter()?;
        self.read_count().await
    }

    async fn read_count(&self) -> Result<u64> {
        let value: Option<String> = self
            .object
            .query(self.object.reader().get(self.name()))
            .await?;
        Ok(parse_count(self.name(), value)?.max(0) as u64)
    }

    /// Waits until the count is zero (Redisson's `await()`), woken by the
    /// `0` message; at most [`crate::Config::recheck_interval`] passes
    /// between looks at the count, so a lost message costs that much, never
    /// a hang. Returns at once if the count is zero.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`]; [`Error::Shutdown`] as soon as the client shuts
    /// down; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: waiting takes nothing.
    ///
    /// ```no_run
    /// # async fn demo(latch: redisson_lock::RCountDownLatch) -> redisson_lock::Result<()> {
    /// latch.wait().await?; // returns at once if already open
    /// println!("all warehouse reports are in: build the stock summary");
    /// # Ok(()) }
    /// ```
    pub async fn wait(&self) -> Result<()> {
        self.wait_until(None).await.map(|_| ())
    }

    /// As [`RCountDownLatch::wait`], for at most `timeout` (Redisson's
    /// `await(timeout)`): true if the latch opened in time.
    ///
    /// # Errors
    ///
    /// As [`RCountDownLatch::wait`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(latch: redisson_lock::RCountDownLatch) -> redisson_lock::Result<()> {
    /// if latch.wait_for(Duration::from_secs(30)).await? {
    ///     // ... build the stock summary ...
    /// } else {
    ///     eprintln!("reports still missing after 30 s: summary postponed");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.wait_until(Instant::now().checked_add(timeout)).await
    }

    async fn wait_until(&self, deadline: Option<Instant>) -> Result<bool> {
        let _busy = self.object.enter()?;
        let waiter = Waiter {
            engine: &self.object.engine,
            channel: Some((self.channel(), Wake::Level)),
            deadline,
            topology: None,
        };
        Ok(waiter.wait(&mut Looks(self)).await?.is_some())
    }

    /// Deletes the latch (Redisson's `delete`) and publishes `1`: JVM waiters
    /// keep waiting for a count set later. True if there was one.
    ///
    /// # Errors
    ///
    /// Connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, it may or may not have been deleted.
    ///
    /// ```no_run
    /// # async fn demo(latch: redisson_lock::RCountDownLatch) -> redisson_lock::Result<()> {
    /// // Abandon this round; a later `try_set_count` starts a new one.
    /// if latch.delete().await? {
    ///     println!("stock-report round cancelled");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        let _busy = self.object.enter()?;
        let (name, channel) = (self.name().to_string(), self.channel());
        let publish = self.object.engine.publish_command;
        let reply = self
            .object
            .synced_request("delete", |latch| ScriptCall {
                script: &DELETE,
                keys: vec![name.clone(), channel.clone(), latch.key.clone()],
                args: vec![publish.into(), latch.ttl_ms.into()],
            })
            .await?;
        flag("delete", &reply)
    }
}

impl fmt::Debug for RCountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RCountDownLatch")
            .field("name", &self.name())
            .finish()
    }
}

/// A waiter's looks at the count.
struct Looks<'a>(&'a RCountDownLatch);

impl Attempts for Looks<'_> {
    type Output = ();

    async fn attempt(&mut self) -> Result<Step<()>> {
        Ok(match self.0.read_count().await? {
            0 => Step::Done(()),
            _ => Step::Again(None),
        })
    }
}
