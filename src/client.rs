//! [`RedissonClient`]: connections, client id, watchdog and subscriptions.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, ReconnectPolicy, ServerConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use tokio::sync::watch;

use crate::config::{Config, ShardedSubscriptionMode};
use crate::engine::hold::Holds;
use crate::engine::hub::Subscriptions;
use crate::engine::lifecycle::Lifecycle;
use crate::engine::replica_sync::{ReplicaSync, Synced};
use crate::engine::script::Script;
use crate::engine::unlock_latch::LatchSweeper;
use crate::engine::watchdog::{self, WatchdogStats};
use crate::error::{Error, Result};
use crate::naming;
use crate::RLock;

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
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) id: Arc<str>,
    pub(crate) config: Config,
    pub(crate) redis: Client,
    /// Connections for lock writes; a lock always uses the same one, so a read
    /// that resolves a lost reply is ordered after the write. Just `redis` on
    /// a single server; a pool on replicated deployments, where each write's
    /// WAIT occupies its connection until the replicas answer.
    writers: Vec<Client>,
    pub(crate) replica_sync: ReplicaSync,
    pub(crate) subscriptions: Arc<Subscriptions>,
    pub(crate) holds: Holds,
    pub(crate) latches: LatchSweeper,
    /// Multi-key commands must stay within one hash slot: a Redis Cluster, or
    /// a cluster behind a single proxy address (found by a probe at connect).
    pub(crate) slot_grouped: bool,
    /// `PUBLISH` or `SPUBLISH`, passed to the scripts.
    pub(crate) publish_command: &'static str,
    pub(crate) stats: watch::Sender<WatchdogStats>,
    pub(crate) lifecycle: Arc<Lifecycle>,
}

impl ClientInner {
    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.lifecycle.is_closing() {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.config.timeout
    }

    /// How many write connections there are.
    pub(crate) fn writer_count(&self) -> usize {
        self.writers.len()
    }

    /// The connection that carries every write of lock `name`.
    pub(crate) fn writer(&self, name: &str) -> &Client {
        let i = usize::from(naming::slot(name)) % self.writers.len();
        &self.writers[i]
    }

    /// Runs a lock script once on the writer of `keys[0]`, then waits for
    /// replicas if the deployment has them.
    pub(crate) async fn write(
        &self,
        script: &Script,
        keys: &[&str],
        args: Vec<Value>,
    ) -> Result<(Value, Synced)> {
        self.replica_sync
            .run(self.writer(keys[0]), script, keys, args)
            .await
    }
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        self.lifecycle.stop();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let mut clients = vec![self.redis.clone()];
            clients.extend(self.writers.iter().cloned());
            runtime.spawn(async move {
                for client in clients {
                    let _ = client.quit().await;
                }
            });
        }
    }
}

impl RedissonClient {
    /// Connects with the given settings. Fails if Redis cannot be reached
    /// within the connect timeout or refuses the credentials.
    pub async fn connect(config: Config) -> Result<Self> {
        config.validate()?;
        let fred_config = config.to_fred_config()?;
        let cluster = matches!(fred_config.server, ServerConfig::Clustered { .. });
        let centralized = matches!(fred_config.server, ServerConfig::Centralized { .. });
        // Redisson waits for replicas on every deployment but a single server.
        let replicated = !centralized;

        // Single server: this connection carries the lock scripts too, so it
        // never re-sends. Replicated: scripts have their own connections and
        // this one only reads and deletes latches, which may follow a MOVED.
        let redis = builder(&config, fred_config.clone(), if replicated { 3 } else { 1 })
            .build()
            .map_err(|e| config_error(&config, &e))?;
        let writers = if replicated {
            (0..config.master_connection_pool_size)
                .map(|_| builder(&config, fred_config.clone(), 1).build())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| config_error(&config, &e))?
        } else {
            vec![redis.clone()]
        };
        let subscriber = builder(&config, fred_config, 3)
            .build_subscriber_client()
            .map_err(|e| config_error(&config, &e))?;
        let quit_all = || async {
            let _ = redis.quit().await;
            for writer in &writers {
                let _ = writer.quit().await;
            }
            let _ = subscriber.quit().await;
        };
        let limit = config.connect_timeout + config.timeout;
        let mut commands: Vec<&Client> = vec![&redis];
        if replicated {
            commands.extend(writers.iter());
        }
        let started = futures::future::join_all(commands.iter().map(|c| init(*c, limit))).await;
        let mut outcome = started.into_iter().collect::<Result<Vec<()>>>().map(drop);
        if outcome.is_ok() {
            outcome = init(&subscriber, limit).await;
        }
        if let Err(e) = outcome {
            quit_all().await;
            return Err(e.connecting_to(&naming::redact_url(&config.address)));
        }

        // Redisson decides the pub/sub flavour only on a cluster: a single
        // server or Sentinel always uses classic PUBLISH / SUBSCRIBE, whatever
        // the setting says, and so must we or JVM waiters would never hear us.
        let sharded = cluster
            && match config.sharded_subscription_mode {
                ShardedSubscriptionMode::On => true,
                ShardedSubscriptionMode::Off => false,
                ShardedSubscriptionMode::Auto => {
                    match supports_sharded_pubsub(&redis, config.timeout).await {
                        Ok(sharded) => sharded,
                        Err(e) => {
                            quit_all().await;
                            return Err(e);
                        }
                    }
                }
            };
        let slot_grouped = cluster
            || (centralized
                && match rejects_cross_slot_scripts(&redis, config.timeout).await {
                    Ok(proxied) => proxied,
                    Err(e) => {
                        quit_all().await;
                        return Err(e);
                    }
                });
        let lifecycle = Lifecycle::new();
        let subscriptions = Subscriptions::start(subscriber, sharded, &config, &lifecycle);
        let latches = LatchSweeper::start(redis.clone(), slot_grouped);
        let inner = Arc::new(ClientInner {
            id: uuid::Uuid::new_v4().to_string().into(),
            replica_sync: ReplicaSync::new(&config, replicated),
            config,
            redis,
            writers,
            subscriptions,
            holds: Holds::default(),
            latches,
            slot_grouped,
            publish_command: if sharded { "SPUBLISH" } else { "PUBLISH" },
            stats: watch::Sender::new(WatchdogStats::default()),
            lifecycle: lifecycle.clone(),
        });
        tokio::spawn(watchdog::run(Arc::downgrade(&inner), lifecycle.stopped()));
        Ok(RedissonClient { inner })
    }

    /// Connects to `url` with default settings.
    pub async fn from_url(url: &str) -> Result<Self> {
        Self::connect(Config::from_url(url)).await
    }

    /// This client's id: the `<client-id>` in its lock fields (Redisson's
    /// `RedissonClient#getId()`).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// A handle on the lock `name` (Redisson's `getLock`). Nothing is sent to
    /// Redis; the name is checked.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, and on a cluster for a
    /// name whose `{` makes its channel land in another slot than the lock
    /// (`a{`, `job{}`: Redisson accepts those, and they work on a single
    /// server or Sentinel, but a cluster refuses their scripts with
    /// `CROSSSLOT`); [`Error::Shutdown`] after [`RedissonClient::shutdown`].
    pub fn lock(&self, name: &str) -> Result<RLock> {
        self.inner.ensure_open()?;
        naming::validate_lock_name(name, self.inner.slot_grouped)?;
        Ok(RLock::new(self.inner.clone(), name))
    }

    /// Whether unlock messages use sharded pub/sub (`SPUBLISH`).
    pub fn sharded_pubsub(&self) -> bool {
        self.inner.publish_command == "SPUBLISH"
    }

    /// Counters of the watchdog so far.
    pub fn watchdog_stats(&self) -> WatchdogStats {
        *self.inner.stats.borrow()
    }

    /// A receiver that sees the watchdog counters change after every cycle.
    pub fn watchdog_updates(&self) -> watch::Receiver<WatchdogStats> {
        self.inner.stats.subscribe()
    }

    /// Number of locks this client currently tracks as held (one per lock and owner).
    pub fn held_locks(&self) -> usize {
        self.inner.holds.len()
    }

    /// The underlying command connection, for commands of your own (status
    /// queries, tests). Do not send lock scripts through it: on a cluster or
    /// sentinel deployment it re-sends commands after a reconnect.
    pub fn redis(&self) -> &Client {
        &self.inner.redis
    }

    /// Shuts the client down:
    ///
    /// 1. every waiting acquire returns [`Error::Shutdown`] at once, and no
    ///    new operation starts;
    /// 2. operations already running, and the background settlement of
    ///    abandoned ones (a dropped acquire whose script ran, say), are
    ///    waited for, at most about one unlock's retry budget;
    /// 3. every lock this client still holds is released (waking its
    ///    waiters, Java or Rust), and its guards report it lost;
    /// 4. the watchdog stops and the connections close.
    ///
    /// Later calls on any clone fail with [`Error::Shutdown`]. Calling it
    /// twice is harmless.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future part-way leaves the client closing: new work is
    /// refused, the background tasks run until the last clone is dropped,
    /// and locks not yet released expire with their lease.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        if !inner.lifecycle.begin_closing() {
            return;
        }
        if !inner.lifecycle.until_idle(inner.settle_budget()).await {
            tracing::warn!("shutdown: operations still running after the settle budget; going on");
        }
        for hold in inner.holds.all() {
            let lock = RLock::new(inner.clone(), &hold.name);
            while hold.count() > 0 && !hold.is_retired() {
                let watchdog = hold.next_release_is_watchdog();
                if lock.release(&hold, watchdog).await.is_err() {
                    break;
                }
            }
            // Guards still around hold nothing any more.
            hold.lease.mark_gone();
        }
        inner.lifecycle.stop();
        inner.subscriptions.quit().await;
        let _ = inner.redis.quit().await;
        for writer in &inner.writers {
            let _ = writer.quit().await;
        }
    }
}

impl ClientInner {
    /// How long shutdown waits for operations in flight: an unlock's whole
    /// retry budget (its latch lifetime) plus one more command.
    pub(crate) fn settle_budget(&self) -> Duration {
        let c = &self.config;
        let per_attempt = c.timeout + self.replica_sync.extra_time() + c.retry_delay;
        per_attempt * c.retry_attempts.max(1) + c.timeout
    }
}

impl std::fmt::Debug for RedissonClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedissonClient")
            .field("id", &self.inner.id)
            .field("address", &naming::redact_url(&self.inner.config.address))
            .finish()
    }
}

fn builder(config: &Config, fred_config: FredConfig, attempts: u32) -> Builder {
    let mut fred_config = fred_config;
    fred_config.fail_fast = true;
    let mut builder = Builder::from_config(fred_config);
    builder
        .with_connection_config(|c| {
            c.connection_timeout = config.connect_timeout;
            c.internal_command_timeout = config.timeout;
            c.max_command_attempts = attempts;
        })
        .with_performance_config(|p| {
            p.default_command_timeout = config.timeout;
            p.broadcast_channel_capacity = 4096;
        });
    if config.reconnect {
        let ms = |d: Duration| d.as_millis().min(u32::MAX as u128) as u32;
        builder.set_policy(ReconnectPolicy::new_exponential(
            0,
            ms(config.reconnect_min_delay),
            ms(config.reconnect_max_delay),
            2,
        ));
    }
    builder
}

/// A fred builder error, with any password in the address hidden.
fn config_error(config: &Config, e: &fred::error::Error) -> Error {
    Error::Config(naming::redact(e.details(), &config.address))
}

async fn init<C: ClientLike>(client: &C, limit: Duration) -> Result<()> {
    match tokio::time::timeout(limit, client.init()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::from_redis(&e, limit)),
        Err(_) => Err(Error::Timeout(limit)),
    }
}

/// Redisson's AUTO probe (3.50+): `PUBSUB SHARDNUMSUB 0` succeeds on Redis 7+.
/// Only an error *reply* means "not supported"; a transport failure must not
/// silently pick the classic flavour, or wake-ups would be lost for the
/// client's lifetime on a sharded fleet.
async fn supports_sharded_pubsub(redis: &Client, timeout: Duration) -> Result<bool> {
    let probe = CustomCommand::new_static("PUBSUB", ClusterHash::Random, false);
    match redis
        .custom::<Value, Value>(probe, vec!["SHARDNUMSUB".into(), "0".into()])
        .await
        .map_err(|e| Error::from_redis(&e, timeout))
    {
        Ok(_) => Ok(true),
        Err(Error::Redis(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether the server refuses a script whose keys lie in different hash
/// slots: a Redis Cluster behind one proxy address, which fred sees as a
/// single server (Redisson 4's probe). The keys match the ACL patterns the
/// crate needs anyway, and the script touches none of them.
async fn rejects_cross_slot_scripts(redis: &Client, timeout: Duration) -> Result<bool> {
    let probe = CustomCommand::new_static("EVAL", ClusterHash::Random, false);
    let keys = naming::CROSS_SLOT_PROBE;
    let args: Vec<Value> = vec!["return 0".into(), 2.into(), keys[0].into(), keys[1].into()];
    match redis
        .custom::<Value, Value>(probe, args)
        .await
        .map_err(|e| Error::from_redis(&e, timeout))
    {
        Ok(_) => Ok(false),
        Err(Error::Redis(msg)) if msg.starts_with("CROSSSLOT") => {
            tracing::info!("the server refuses cross-slot scripts (a cluster behind a proxy?); grouping multi-key commands by slot");
            Ok(true)
        }
        // Any other refusal (an ACL, say) tells nothing: assume a plain server.
        Err(Error::Redis(msg)) => {
            tracing::debug!(reply = %msg, "cross-slot probe refused");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}
