//! [`RedissonClient`]: the handle an application keeps; it hands out lock
//! objects that share its engine (connections, watchdog, subscriptions).

use std::sync::Arc;

use tokio::sync::watch;

use crate::audit::AuditReport;
use crate::config::Config;
use crate::engine::watchdog::WatchdogStats;
use crate::engine::Engine;
use crate::error::Result;
use crate::lock::fair::RFairLock;
use crate::lock::fenced::RFencedLock;
use crate::lock::group::{GroupValue, RGroupLock};
use crate::lock::multi::RMultiLock;
use crate::lock::non_reentrant::{RNonReentrantFairLock, RNonReentrantLock};
use crate::lock::read_write::RReadWriteLock;
use crate::lock::rlock::RLock;
use crate::lock::spin::RSpinLock;
use crate::naming;
use crate::sync::count_down_latch::RCountDownLatch;
use crate::sync::permit_expirable::RPermitExpirableSemaphore;
use crate::sync::semaphore::RSemaphore;

/// A connection to Redis that hands out locks, like Redisson's `RedissonClient`.
///
/// Each client has its own id (a UUID v4, the `<client-id>` of its lock
/// fields), one command connection, one subscriber connection and one
/// watchdog task. Cloning is cheap and shares all of them.
///
/// ```no_run
/// use redisson_lock::RedissonClient;
///
/// # async fn demo() -> redisson_lock::Result<()> {
/// let client = RedissonClient::from_url("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("orders:42")?;
/// let guard = lock.lock().await?;
/// // ... critical section; the watchdog keeps the lock alive ...
/// guard.unlock().await?;
/// client.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedissonClient {
    pub(crate) engine: Arc<Engine>,
}

impl RedissonClient {
    /// Connects with the given settings.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Config`] for invalid settings, [`crate::Error::Connection`]
    /// or [`crate::Error::Timeout`] if Redis cannot be reached within the connect
    /// timeout, [`crate::Error::Auth`] if it refuses the credentials.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the connections made so far; nothing was written to Redis.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redisson_lock::{Config, RedissonClient};
    ///
    /// # async fn demo() -> redisson_lock::Result<()> {
    /// let mut config = Config::from_url("redis://10.0.0.5:6379");
    /// config.timeout = Duration::from_secs(2); // per command, as Redisson's `timeout`
    /// let client = RedissonClient::connect(config).await?;
    /// println!("{client:?}"); // its id and address, any password in it redacted
    /// # Ok(()) }
    /// ```
    pub async fn connect(config: Config) -> Result<Self> {
        // Behind `dyn`, for the reason of `engine::boxed_reply`: starting
        // awaits many fred futures.
        let start: futures::future::BoxFuture<'static, _> = Box::pin(Engine::start(config));
        let engine = start.await?;
        // Named before the first lock: a holder is never shown unregistered
        // for want of its first watchdog cycle.
        crate::engine::registry::register(&engine).await;
        // The cheap part of the audit, in the background: a WARN per finding
        // that can break exclusion, never a wait or an error here.
        if engine.config.connect_audit {
            crate::audit::startup::spawn(&engine);
        }
        Ok(RedissonClient { engine })
    }

    /// Connects to `url` with default settings.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::connect`].
    ///
    /// # Cancel safety
    ///
    /// As [`RedissonClient::connect`]: nothing was written to Redis.
    ///
    /// ```no_run
    /// use redisson_lock::RedissonClient;
    ///
    /// # async fn demo() -> redisson_lock::Result<()> {
    /// let client = RedissonClient::from_url("redis://127.0.0.1:6379").await?;
    /// println!("billing connected; its lock fields start with {}", client.id());
    /// # Ok(()) }
    /// ```
    pub async fn from_url(url: &str) -> Result<Self> {
        Self::connect(Config::from_url(url)).await
    }

    /// Audits the deployment this client talks to (see [`crate::audit`]):
    /// every finding with its severity, evidence, why and fix. The client's
    /// own holds are not counted as the fleet's.
    ///
    /// # Errors
    ///
    /// As [`crate::audit::audit()`]: only when not even the first connection can be made.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the audit's connections; the client is
    /// not affected.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// let report = client.audit().await?;
    /// if report.has_failures() {
    ///     eprintln!("this Redis can lose locks: {:?}", report.summary);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn audit(&self) -> Result<AuditReport> {
        crate::audit::of_engine(&self.engine, &crate::audit::AuditOptions::default()).await
    }

    /// As [`RedissonClient::audit`], with [`crate::audit::AuditOptions`]: a
    /// lock name to check the ACL's key patterns against, another ACL user.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::audit`]; [`crate::Error::InvalidArgument`] for an empty
    /// lock or user name.
    ///
    /// # Cancel safety
    ///
    /// As [`RedissonClient::audit`].
    pub async fn audit_with(&self, options: &crate::audit::AuditOptions) -> Result<AuditReport> {
        crate::audit::of_engine(&self.engine, options).await
    }

    /// This client's id: the `<client-id>` in its lock fields (Redisson's
    /// `RedissonClient#getId()`).
    pub fn id(&self) -> &str {
        &self.engine.id
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.engine.config
    }

    /// Checks a name for a lock object of this client.
    pub(crate) fn checked(&self, name: &str) -> Result<()> {
        self.engine.ensure_open()?;
        naming::validate_lock_name(name, self.engine.slot_grouped)
    }

    /// A handle on the lock `name` (Redisson's `getLock`). Nothing is sent to
    /// Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name, and on a cluster
    /// for a name whose `{` makes its channel land in another slot than the
    /// lock (`a{`, `job{}`: Redisson accepts those, and they work on a single
    /// server or Sentinel, but a cluster refuses their scripts with
    /// `CROSSSLOT`); [`crate::Error::Shutdown`] after
    /// [`RedissonClient::shutdown`].
    pub fn lock(&self, name: &str) -> Result<RLock> {
        self.checked(name)?;
        Ok(crate::lock::handle::Lock::new(self.engine.clone(), name))
    }

    /// A handle on the read-write lock `name` (Redisson's
    /// `getReadWriteLock`). Nothing is sent to Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`].
    pub fn read_write_lock(&self, name: &str) -> Result<RReadWriteLock> {
        self.checked(name)?;
        Ok(RReadWriteLock::new(self.engine.clone(), name))
    }

    /// A handle on the fair lock `name` (Redisson's `getFairLock`). Nothing
    /// is sent to Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`].
    pub fn fair_lock(&self, name: &str) -> Result<RFairLock> {
        self.checked(name)?;
        Ok(crate::lock::handle::Lock::new(self.engine.clone(), name))
    }

    /// A handle on the non-reentrant lock `name` (Redisson 4.4's
    /// `getNonReentrantLock`): an RLock of that name whose holder cannot take
    /// it again. Nothing is sent to Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`].
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// // The same lock as Java's redisson.getNonReentrantLock("month-end").
    /// let close = client.non_reentrant_lock("month-end")?;
    /// let guard = close.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn non_reentrant_lock(&self, name: &str) -> Result<RNonReentrantLock> {
        self.checked(name)?;
        Ok(crate::lock::handle::Lock::new(self.engine.clone(), name))
    }

    /// A handle on the non-reentrant fair lock `name` (Redisson 4.4's
    /// `getNonReentrantFairLock`): a fair lock of that name whose holder
    /// cannot take it again. Nothing is sent to Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`].
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// // The same lock as Java's redisson.getNonReentrantFairLock("payouts").
    /// let payouts = client.non_reentrant_fair_lock("payouts")?;
    /// let guard = payouts.lock().await?; // in line with Java and Rust waiters
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn non_reentrant_fair_lock(&self, name: &str) -> Result<RNonReentrantFairLock> {
        self.checked(name)?;
        Ok(crate::lock::handle::Lock::new(self.engine.clone(), name))
    }

    /// A handle on the fenced lock `name` (Redisson's `getFencedLock`).
    /// Nothing is sent to Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`].
    pub fn fenced_lock(&self, name: &str) -> Result<RFencedLock> {
        self.checked(name)?;
        Ok(crate::lock::handle::Lock::new(self.engine.clone(), name))
    }

    /// A handle on the spin lock `name` (Redisson's `getSpinLock`): no
    /// pub/sub, waiters poll. Nothing is sent to Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`].
    pub fn spin_lock(&self, name: &str) -> Result<RSpinLock> {
        self.checked(name)?;
        Ok(crate::lock::handle::Lock::new(self.engine.clone(), name))
    }

    /// A multi lock over the locks `names` of this client (Redisson's
    /// `getMultiLock`): held only while all are. For members on several
    /// servers, build [`RMultiLock::new`] from each client's locks.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`], for each name; [`crate::Error::InvalidArgument`]
    /// without names.
    pub fn multi_lock(&self, names: &[&str]) -> Result<RMultiLock> {
        let members = names.iter().map(|n| self.lock(n)).collect::<Result<_>>()?;
        RMultiLock::new(members)
    }

    /// A group multi lock over `values` of `group` (Redisson's
    /// `getMultiLock(String group, Collection<Object> values)`): every value
    /// held together or not at all, in the one hash `group`. Each value says
    /// how the Java side's codec writes it ([`GroupValue::kryo5`] for
    /// Redisson's default codec, [`GroupValue::string`] for `StringCodec`):
    /// the same string under another codec is another value, which would
    /// never exclude the Java side's. Duplicates count once. Nothing is sent
    /// to Redis; the group name is checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`], for the group's name;
    /// [`crate::Error::InvalidArgument`] without values.
    ///
    /// ```no_run
    /// use redisson_lock::GroupValue;
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// // A JVM service on Redisson's default codec locks the same values with
    /// // redisson.getMultiLock("students", List.of("student:001", "student:002")).
    /// let students = ["student:001", "student:002"].map(GroupValue::kryo5);
    /// let pair = client.group_lock("students", students)?;
    /// let guard = pair.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn group_lock(
        &self,
        group: &str,
        values: impl IntoIterator<Item = GroupValue>,
    ) -> Result<RGroupLock> {
        self.checked(group)?;
        RGroupLock::new(self.engine.clone(), group, values)
    }

    /// A RedLock over the locks `names` of this client (Redisson's
    /// `getRedLock`, deprecated there): held while a majority is. Its point
    /// is members on independent servers: build [`RMultiLock::red_lock`]
    /// from each client's locks.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::multi_lock`].
    pub fn red_lock(&self, names: &[&str]) -> Result<RMultiLock> {
        let members = names.iter().map(|n| self.lock(n)).collect::<Result<_>>()?;
        RMultiLock::red_lock(members)
    }

    /// Leader election on the [`RLock`] named `name`: whoever holds that lock
    /// (a Rust campaign, or a JVM service's `getLock(name)`) leads. See
    /// [`crate::Election`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// let election = client.election("billing:scheduler")?;
    /// if let Some(leader) = election.leader().await? {
    ///     println!("led by {}", leader.identity.map_or(leader.client_id, |who| who.describe()));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: &str) -> Result<crate::lock::election::Election> {
        Ok(crate::lock::election::Election::new(self.lock(name)?))
    }

    /// Leader election on the fenced lock named `name` (Redisson's
    /// `getFencedLock`; a JVM holder of it leads): each leadership has a
    /// term, its fencing token, above every earlier one
    /// ([`crate::Leadership::term`], [`crate::Leader::term`]), as etcd's
    /// elections have a revision. A former leader that resumes after a pause
    /// longer than its lease still believes it leads until it runs again; a
    /// resource that refuses writes with an older term refuses it.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// let election = client.fenced_election("ledger:writer")?;
    /// let leadership = election.campaign().await?;
    /// let term = leadership.term().expect("a fenced election has terms");
    /// // Written only if no later term wrote it since.
    /// leadership.set_if_newest("ledger:head", &format!("{term}:entry-42")).await?;
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub fn fenced_election(&self, name: &str) -> Result<crate::lock::election::Election> {
        Ok(crate::lock::election::Election::fenced(
            self.lock(name)?,
            self.fenced_lock(name)?,
        ))
    }

    /// A handle on the semaphore `name` (Redisson's `getSemaphore`). Nothing
    /// is sent to Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`].
    pub fn semaphore(&self, name: &str) -> Result<RSemaphore> {
        self.engine.ensure_open()?;
        RSemaphore::check_name(name, self.engine.slot_grouped)?;
        Ok(RSemaphore::new(self.engine.clone(), name))
    }

    /// A handle on the permit-expirable semaphore `name` (Redisson's
    /// `getPermitExpirableSemaphore`). Nothing is sent to Redis; the name is
    /// checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`].
    pub fn permit_expirable_semaphore(&self, name: &str) -> Result<RPermitExpirableSemaphore> {
        self.engine.ensure_open()?;
        RPermitExpirableSemaphore::check_name(name, self.engine.slot_grouped)?;
        Ok(RPermitExpirableSemaphore::new(self.engine.clone(), name))
    }

    /// A handle on the count-down latch `name` (Redisson's
    /// `getCountDownLatch`). Nothing is sent to Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::lock`]; on a cluster also for a name with its
    /// own hash tag (`a{t}b`), whose channel Redisson puts in another slot
    /// (see [`RCountDownLatch`]).
    pub fn count_down_latch(&self, name: &str) -> Result<RCountDownLatch> {
        self.engine.ensure_open()?;
        RCountDownLatch::check_name(name, self.engine.slot_grouped)?;
        Ok(RCountDownLatch::new(self.engine.clone(), name))
    }

    /// Number of permit guards ([`crate::SemaphorePermits`],
    /// [`crate::ExpirablePermits`]) this client has out.
    pub fn permits_out(&self) -> usize {
        self.engine.loans.len()
    }

    /// Whether unlock messages use sharded pub/sub (`SPUBLISH`).
    pub fn sharded_pubsub(&self) -> bool {
        self.engine.publish_command == "SPUBLISH"
    }

    /// Counters of the watchdog so far.
    pub fn watchdog_stats(&self) -> WatchdogStats {
        *self.engine.stats.borrow()
    }

    /// A receiver that sees the watchdog counters change after every cycle.
    pub fn watchdog_updates(&self) -> watch::Receiver<WatchdogStats> {
        self.engine.stats.subscribe()
    }

    /// Who client `client_id` is, as it registered itself in the client
    /// registry (see [`crate::Registry`]): `None` for a client that did not
    /// register (a JVM Redisson client, or a Rust client with the registry
    /// off) or has gone (its entry expired or was removed at shutdown).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Connection`] / [`crate::Error::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// for holder in client.lock("orders:42")?.holders().await? {
    ///     match client.client_identity(&holder.client_id).await? {
    ///         Some(who) => println!("held by {}", who.describe()),
    ///         None => println!("held by unregistered client {}", holder.client_id),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn client_identity(
        &self,
        client_id: &str,
    ) -> Result<Option<crate::engine::registry::ClientIdentity>> {
        self.engine.ensure_open()?;
        crate::engine::registry::identity(&self.engine, client_id).await
    }

    /// Number of holds this client currently tracks (one per lock, kind and
    /// owner).
    pub fn held_locks(&self) -> usize {
        self.engine.holds.len()
    }

    /// Sends one command of your own (`GET`, `TIME`, `EVAL`, ...) on the
    /// client's command connection: on a cluster to the node that serves
    /// `key` (any node when `key` is `None`), on Sentinel to the primary.
    /// Sent once: a lost reply is an error, never a silent re-send. Not for
    /// lock scripts, which only the lock objects send correctly.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for a command that is not one word;
    /// [`crate::Error::Redis`] for Redis's error reply;
    /// [`crate::Error::Connection`] / [`crate::Error::Timeout`];
    /// [`crate::Error::Shutdown`] after [`RedissonClient::shutdown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop a command already written.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// let orders = client.command(Some("orders:42"), "HLEN", ["orders:42"]).await?;
    /// println!("the orders lock has {:?} holders", orders.as_i64());
    /// # Ok(()) }
    /// ```
    pub async fn command<S: AsRef<[u8]>>(
        &self,
        key: Option<&str>,
        command: &str,
        args: impl IntoIterator<Item = S>,
    ) -> Result<crate::command::Reply> {
        self.engine.ensure_open()?;
        crate::command::send(&self.engine, key, command, args).await
    }

    /// Shuts the client down:
    ///
    /// 1. every waiting acquire returns [`crate::Error::Shutdown`] at once,
    ///    and no new operation starts;
    /// 2. operations already running, and the background settlement of
    ///    abandoned ones (a dropped acquire whose script ran, say), are
    ///    waited for, at most about one unlock's retry budget;
    /// 3. the permits of every permit guard still out are given back, and
    ///    every lock this client still holds is released (waking waiters,
    ///    Java or Rust); its lock guards report it lost;
    /// 4. the watchdog stops and the connections close.
    ///
    /// Later calls on any clone fail with [`crate::Error::Shutdown`].
    /// Calling it twice is harmless.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future part-way leaves the client closing: new work is
    /// refused, the background tasks run until the last clone is dropped,
    /// and locks not yet released expire with their lease.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// let guard = client.lock("payroll:run")?.lock().await?;
    /// let _ = tokio::signal::ctrl_c().await; // the service is asked to stop
    /// client.shutdown().await; // releases payroll:run and wakes its waiters
    /// eprintln!("payroll guard lost: {}", guard.is_lost()); // true; new calls fail
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) {
        self.engine.shutdown().await
    }
}

impl std::fmt::Debug for RedissonClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedissonClient")
            .field("id", &self.engine.id)
            .field("address", &naming::redact_url(&self.engine.config.address))
            .finish()
    }
}
