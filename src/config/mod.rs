//! Client configuration, with Redisson's setting names and defaults; reading
//! a JVM Redisson config file; TLS roots.

mod backoff;
#[cfg(feature = "redisson-config")]
mod redisson_file;
mod registry;
pub(crate) mod tls;

pub(crate) use backoff::{retry_pause, retry_step};
pub use backoff::{BackOff, Delays};
#[cfg(feature = "redisson-config")]
pub use redisson_file::RedissonFile;
pub use registry::Registry;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Longest lease (and watchdog timeout) accepted: 100 years. Config holds
/// it, the engine checks leases against it.
pub const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Which pub/sub commands carry unlock messages. Must match the JVM fleet:
/// Redisson's `shardedSubscriptionMode` (3.29+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ShardedSubscriptionMode {
    /// Sharded (`SPUBLISH` / `SSUBSCRIBE`) on a Redis 7+ cluster, classic elsewhere.
    /// Redisson's default.
    #[default]
    Auto,
    /// Always sharded pub/sub.
    On,
    /// Always classic `PUBLISH` / `SUBSCRIBE`.
    Off,
}

/// How many replicas must confirm a lock write (acquire, unlock, renewal)
/// before it counts, on a cluster or sentinel deployment. The write is
/// followed by `WAIT <n> <slavesSyncTimeout>` on the same connection, as
/// Redisson does.
///
/// The replicas counted are those a failover **could promote**, by the
/// deployment's own rule (Sentinel's: answering pings, priority above 0, its
/// link to the primary not down too long; the cluster's: reachable, not
/// `nofailover`): not those connected at that instant (a freshly promoted
/// primary whose replicas are still re-attaching cannot confirm a write),
/// and not every replica listed (a dead one, passed over by the next
/// failover anyway, does not hold every lock write up). See
/// docs/safety.md, "What must confirm a write".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReplicaQuorum {
    /// At least one promotable replica, when the primary has any
    /// (Redisson's `checkLockSyncedSlaves = true`, its default).
    #[default]
    Any,
    /// Every promotable replica.
    All,
    /// At least this many promotable replicas; fails while fewer can confirm.
    AtLeast(u32),
}

impl ReplicaQuorum {
    /// How many of `promotable` replicas must confirm a write.
    pub(crate) fn required(self, promotable: u32) -> u32 {
        match self {
            ReplicaQuorum::Any => promotable.min(1),
            ReplicaQuorum::All => promotable,
            ReplicaQuorum::AtLeast(n) => n,
        }
    }
}

/// Client settings. Field names in serialized form are Redisson's
/// (`lockWatchdogTimeout`, `timeout`, ...) and durations are milliseconds, so
/// the values a Java service uses can be copied as they are.
///
/// ```
/// use std::time::Duration;
/// use redisson_lock::Config;
///
/// let config: Config = serde_json::from_str(
///     r#"{"address": "redis://127.0.0.1:6379", "lockWatchdogTimeout": 10000}"#,
/// ).unwrap();
/// assert_eq!(config.lock_watchdog_timeout, Duration::from_secs(10));
/// assert_eq!(config.lock_watchdog_batch_size, 100);
/// ```
///
/// Build one with [`Config::from_url`] (or `Default`) and set fields; new
/// settings may be added in minor releases. Unknown keys in a serialized
/// config are an error, so a misspelt setting is not silently ignored.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// Server URL: `redis://[user:pass@]host:port[/db]`, `rediss://...`, or
    /// fred's cluster / sentinel URL forms.
    #[serde(alias = "url")]
    pub address: String,
    /// ACL user name; overrides one given in the URL.
    pub username: Option<String>,
    /// Password; overrides one given in the URL. Never printed by `Debug`;
    /// serialized (a serialized config reads back as it was: log
    /// [`Config::redacted`] instead).
    pub password: Option<String>,
    /// Database index (standalone and sentinel only); overrides the URL's.
    pub database: Option<u8>,
    /// PEM file of the CA certificates to trust for a `rediss://` address
    /// (any of its forms), instead of the system's roots. Not a Redisson
    /// setting (Redisson takes a Java truststore, `sslTruststore`).
    pub tls_ca_file: Option<PathBuf>,
    /// Lease of locks taken without an explicit lease; the watchdog renews
    /// them every third of it. Redisson default: 30 s.
    #[serde(with = "millis")]
    pub lock_watchdog_timeout: Duration,
    /// Most locks renewed by one script. Redisson default: 100.
    pub lock_watchdog_batch_size: usize,
    /// How long to wait for any one reply from Redis. Redisson default: 3 s.
    #[serde(with = "millis")]
    pub timeout: Duration,
    /// How long to wait for a TCP (and TLS) connection. Redisson default: 10 s.
    #[serde(with = "millis")]
    pub connect_timeout: Duration,
    /// How long a waiting `lock()` may take to subscribe to the lock's
    /// channel before it fails with [`Error::Timeout`]. A `try_lock_for(d)`
    /// gives its subscription the rest of `d` instead. Redisson default: 7.5 s.
    #[serde(with = "millis")]
    pub subscription_timeout: Duration,
    /// Attempts for a write whose reply was lost or that the replicas did
    /// not confirm: an unlock (replayed safely through the unlock latch), a
    /// `lock()` that waits without a limit. A bounded wait
    /// (`try_lock_for(d)`) retries within `d` instead, and a single try
    /// (`try_lock()`) never. Redisson default: 4.
    pub retry_attempts: u32,
    /// The first pause between those attempts; each next one doubles (up to
    /// 10 s), and the pause actually taken is a random draw between zero and
    /// that step (full jitter), so clients that failed together do not come
    /// back together. Redisson default: 1 s (its jitter draws from the upper
    /// half).
    #[serde(with = "millis")]
    pub retry_delay: Duration,
    /// Reconnect after a lost connection. On by default; without it a client
    /// never recovers from a Redis restart.
    pub reconnect: bool,
    /// First reconnect delay, doubled on each failure up to the maximum.
    #[serde(with = "millis")]
    pub reconnect_min_delay: Duration,
    /// Largest reconnect delay.
    #[serde(with = "millis")]
    pub reconnect_max_delay: Duration,
    /// Pub/sub flavour for unlock messages.
    pub sharded_subscription_mode: ShardedSubscriptionMode,
    /// How spin-lock waiters space their attempts (Redisson's default
    /// exponential back-off, 1 ms to 128 ms). Not read from Redisson's
    /// files (Redisson sets it per lock).
    pub spin_lock_backoff: BackOff,
    /// How long a fair-lock waiter that waits without a limit (`lock()`)
    /// keeps its place in the queue: the budget its queue deadline is
    /// counted with (Redisson's `fairLockWaitTimeout`, default 5 min). Use
    /// the JVM fleet's value, so deadlines agree.
    #[serde(with = "millis")]
    pub fair_lock_wait_timeout: Duration,
    /// The longest a waiter that only a message can wake sleeps before it
    /// looks again on its own: a semaphore acquire, a count-down latch
    /// `wait`, a lock whose key has no TTL. It bounds what a lost message
    /// (a dropped subscriber connection, a release that published nothing)
    /// costs; normally the message comes first and no re-check is sent. Not
    /// a Redisson setting: Redisson's waiters in these cases wait for the
    /// next message. Default 5 s.
    #[serde(with = "millis")]
    pub recheck_interval: Duration,
    /// On a cluster or sentinel deployment, refuse a lock write that no
    /// replica confirmed (Redisson's `checkLockSyncedSlaves`, default true):
    /// an acquire is undone and retried up to `retryAttempts` times. When
    /// false, the `WAIT` is still sent and a shortfall is only logged. A
    /// single-server address never waits for replicas, as in Redisson.
    pub check_lock_synced_slaves: bool,
    /// How long a lock write waits for replicas (Redisson's
    /// `slavesSyncTimeout`, default 1 s).
    #[serde(with = "millis")]
    pub slaves_sync_timeout: Duration,
    /// How many replicas must confirm (when `checkLockSyncedSlaves` is on).
    /// Not a Redisson setting: Redisson always uses [`ReplicaQuorum::Any`].
    pub replica_quorum: ReplicaQuorum,
    /// Connections per primary for lock writes on a cluster or sentinel
    /// deployment, where every write ends with a `WAIT` that occupies its
    /// connection until the replicas answer (Redisson's
    /// `masterConnectionPoolSize`; Redisson defaults to 64, this crate to 8).
    /// A single-server client uses one multiplexed connection.
    pub master_connection_pool_size: usize,
    /// Whether `connect` starts the cheap part of the audit in the
    /// background (each primary's eviction policy, `WAIT` where lock writes
    /// need it, a `PUBLISH` on a probe channel), logging a warning for each
    /// finding that can break exclusion. Default true; a read-only tool
    /// turns it off. Not a Redisson setting.
    pub connect_audit: bool,
    /// The client's entry in the client registry (who it is, so tools can
    /// name a lock's holder); on by default. Not a Redisson setting.
    pub registry: Registry,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("address", &crate::naming::redact_url(&self.address))
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("database", &self.database)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("lock_watchdog_timeout", &self.lock_watchdog_timeout)
            .field("lock_watchdog_batch_size", &self.lock_watchdog_batch_size)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("subscription_timeout", &self.subscription_timeout)
            .field("retry_attempts", &self.retry_attempts)
            .field("retry_delay", &self.retry_delay)
            .field("reconnect", &self.reconnect)
            .field("sharded_subscription_mode", &self.sharded_subscription_mode)
            .field("fair_lock_wait_timeout", &self.fair_lock_wait_timeout)
            .field("recheck_interval", &self.recheck_interval)
            .field("spin_lock_backoff", &self.spin_lock_backoff)
            .field("check_lock_synced_slaves", &self.check_lock_synced_slaves)
            .field("slaves_sync_timeout", &self.slaves_sync_timeout)
            .field("replica_quorum", &self.replica_quorum)
            .field(
                "master_connection_pool_size",
                &self.master_connection_pool_size,
            )
            .field("connect_audit", &self.connect_audit)
            .field("registry", &self.registry)
            .finish()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            address: "redis://127.0.0.1:6379".into(),
            username: None,
            password: None,
            database: None,
            tls_ca_file: None,
            lock_watchdog_timeout: Duration::from_secs(30),
            lock_watchdog_batch_size: 100,
            timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(10),
            subscription_timeout: Duration::from_millis(7_500),
            retry_attempts: 4,
            retry_delay: Duration::from_secs(1),
            reconnect: true,
            reconnect_min_delay: Duration::from_millis(100),
            reconnect_max_delay: Duration::from_secs(5),
            sharded_subscription_mode: ShardedSubscriptionMode::Auto,
            fair_lock_wait_timeout: Duration::from_secs(300),
            recheck_interval: Duration::from_secs(5),
            spin_lock_backoff: BackOff::default(),
            check_lock_synced_slaves: true,
            slaves_sync_timeout: Duration::from_secs(1),
            replica_quorum: ReplicaQuorum::Any,
            master_connection_pool_size: 8,
            connect_audit: true,
            registry: Registry::default(),
        }
    }
}

impl Config {
    /// A copy safe to log or show: the URL's password and
    /// [`Config::password`] replaced by `***` (`Debug` hides them too).
    /// Serialize this where it will be read by people; the config itself
    /// serializes whole, so that it reads back as it was.
    ///
    /// ```
    /// let config = redisson_lock::Config::from_url("redis://app:s3cret@10.0.0.5:6379");
    /// let shown = serde_json::to_string(&config.redacted()).unwrap();
    /// assert!(shown.contains("redis://app:***@10.0.0.5:6379") && !shown.contains("s3cret"));
    /// ```
    pub fn redacted(&self) -> Config {
        Config {
            address: crate::naming::redact_url(&self.address),
            password: self.password.as_ref().map(|_| "***".to_string()),
            ..self.clone()
        }
    }

    /// Default settings for the server at `url`.
    pub fn from_url(url: impl Into<String>) -> Self {
        Config {
            address: url.into(),
            ..Config::default()
        }
    }

    /// Not part of the API (it names the Redis library's types, and exists
    /// only with the project's own `__testkit` feature): the settings the
    /// project's tests open connections of their own with.
    #[doc(hidden)]
    #[cfg(feature = "__testkit")]
    pub fn __fred_config(&self) -> Result<fred::types::config::Config> {
        self.to_fred_config()
    }

    /// The fred connection settings these describe: the address parsed (any
    /// of fred's URL forms), credentials and database applied, and TLS
    /// trusting [`Config::tls_ca_file`] when set.
    pub(crate) fn to_fred_config(&self) -> Result<fred::types::config::Config> {
        let mut fred = fred::types::config::Config::from_url(&self.address).map_err(|e| {
            let redacted = crate::naming::redact_url(&self.address);
            let details = crate::naming::redact(e.details(), &self.address);
            Error::Config(format!("{redacted}: {details}"))
        })?;
        if self.username.is_some() {
            fred.username = self.username.clone();
        }
        if self.password.is_some() {
            fred.password = self.password.clone();
        }
        if self.database.is_some() {
            fred.database = self.database;
        }
        tls::apply(&mut fred, &self.address, self.tls_ca_file.as_deref())?;
        Ok(fred)
    }

    /// Checks every setting; [`crate::RedissonClient::connect`] calls it.
    pub fn validate(&self) -> Result<()> {
        if self.address.trim().is_empty() {
            return Err(Error::Config("address is empty".into()));
        }
        if self.lock_watchdog_timeout < Duration::from_millis(30) {
            return Err(Error::Config(
                "lockWatchdogTimeout must be at least 30 ms".into(),
            ));
        }
        if self.lock_watchdog_timeout > MAX_LEASE {
            return Err(Error::Config(format!(
                "lockWatchdogTimeout must be at most {} ms",
                MAX_LEASE.as_millis()
            )));
        }
        if !(1..=10_000).contains(&self.lock_watchdog_batch_size) {
            return Err(Error::Config(
                "lockWatchdogBatchSize must be between 1 and 10000".into(),
            ));
        }
        for (what, value) in [
            ("timeout", self.timeout),
            ("connectTimeout", self.connect_timeout),
            ("subscriptionTimeout", self.subscription_timeout),
            ("fairLockWaitTimeout", self.fair_lock_wait_timeout),
            ("recheckInterval", self.recheck_interval),
        ] {
            if value.is_zero() || value > MAX_LEASE {
                return Err(Error::Config(format!(
                    "{what} must be between 1 ms and {} ms",
                    MAX_LEASE.as_millis()
                )));
            }
        }
        if self.reconnect_min_delay.is_zero() || self.reconnect_min_delay > self.reconnect_max_delay
        {
            return Err(Error::Config(
                "reconnect delays must satisfy 0 < reconnectMinDelay <= reconnectMaxDelay".into(),
            ));
        }
        if !(1..=100).contains(&self.retry_attempts) {
            return Err(Error::Config(
                "retryAttempts must be between 1 and 100".into(),
            ));
        }
        // `WAIT` takes whole milliseconds, and `WAIT n 0` waits forever:
        // under a millisecond would block a connection for good.
        if self.slaves_sync_timeout < Duration::from_millis(1)
            || self.slaves_sync_timeout > MAX_LEASE
        {
            return Err(Error::Config(format!(
                "slavesSyncTimeout must be between 1 ms and {} ms",
                MAX_LEASE.as_millis()
            )));
        }
        if !(1..=1024).contains(&self.master_connection_pool_size) {
            return Err(Error::Config(
                "masterConnectionPoolSize must be between 1 and 1024".into(),
            ));
        }
        if self.replica_quorum == ReplicaQuorum::AtLeast(0) {
            return Err(Error::Config(
                "replicaQuorum atLeast must be at least 1 (set checkLockSyncedSlaves to false instead)".into(),
            ));
        }
        if self.retry_delay > MAX_LEASE {
            return Err(Error::Config("retryDelay is too large".into()));
        }
        Ok(())
    }
}

/// Serde helper: a `Duration` as integer milliseconds, as Redisson writes them.
pub(crate) mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(value.as_millis().min(u64::MAX as u128) as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_redisson_and_validate() {
        let c = Config::default();
        assert_eq!(c.lock_watchdog_timeout, Duration::from_millis(30_000));
        assert_eq!(c.timeout, Duration::from_millis(3_000));
        assert_eq!(c.retry_attempts, 4);
        c.validate().unwrap();
    }

    #[test]
    fn bad_settings_are_refused() {
        let mut c = Config::from_url("redis://127.0.0.1:1");
        c.lock_watchdog_timeout = Duration::from_millis(1);
        assert!(matches!(c.validate(), Err(Error::Config(_))));
        let c = Config {
            lock_watchdog_batch_size: 0,
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            timeout: Duration::ZERO,
            ..Config::default()
        };
        assert!(c.validate().is_err());
        assert!(serde_json::from_str::<Config>(r#"{"timeout": -5}"#).is_err());
        // Sent as `WAIT n 0`, which never returns.
        let c = Config {
            slaves_sync_timeout: Duration::from_micros(500),
            ..Config::default()
        };
        assert!(
            matches!(c.validate(), Err(Error::Config(ref m)) if m.contains("slavesSyncTimeout")),
            "{:?}",
            c.validate()
        );
    }

    #[test]
    fn round_trips_through_json() {
        let c = Config {
            sharded_subscription_mode: ShardedSubscriptionMode::Off,
            ..Config::default()
        };
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains("\"lockWatchdogTimeout\":30000"));
        assert!(json.contains("\"shardedSubscriptionMode\":\"OFF\""));
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), c);
    }

    #[test]
    fn a_serialized_config_reads_back_whole_and_its_redacted_copy_has_no_secret() {
        let c = Config {
            address: "redis://app:url-s3cret@10.0.0.5:6379/2".into(),
            password: Some("field-s3cret".into()),
            spin_lock_backoff: BackOff::Constant(Duration::from_millis(64)),
            ..Config::default()
        };
        // Every setting comes back: the URL's password, the password, the
        // spin back-off (the first two were `***` or left out, the last
        // left out: a config read back sent `***`).
        let json = serde_json::to_string(&c).unwrap();
        assert!(
            json.contains("\"spinLockBackoff\":{\"constant\":64}"),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), c);
        // For logs: no secret.
        let json = serde_json::to_string(&c.redacted()).unwrap();
        assert!(!json.contains("s3cret"), "{json}");
        assert!(
            json.contains("\"address\":\"redis://app:***@10.0.0.5:6379/2\""),
            "{json}"
        );
        assert!(json.contains("\"password\":\"***\""), "{json}");
        assert_eq!(c.redacted().address, "redis://app:***@10.0.0.5:6379/2");
    }
}
