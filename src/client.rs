//! [`RedissonClient`]: connections, client id, watchdog and subscriptions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, ReconnectPolicy, ServerConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use tokio::sync::watch;

use crate::config::{Config, ShardedSubscriptionMode};
use crate::error::{Error, Result};
use crate::hold::Holds;
use crate::latch::LatchSweeper;
use crate::naming;
use crate::pubsub::Subscriptions;
use crate::replica_sync::{ReplicaSync, Synced};
use crate::script::Script;
use crate::watchdog::{self, WatchdogStats};
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
    pub(crate) cluster: bool,
    /// `PUBLISH` or `SPUBLISH`, passed to the scripts.
    pub(crate) publish_command: &'static str,
    pub(crate) stats: watch::Sender<WatchdogStats>,
    shutdown: watch::Sender<bool>,
    closed: AtomicBool,
}

impl ClientInner {
    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
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
        self.shutdown.send_replace(true);
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
        // Redisson waits for replicas on every deployment but a single server.
        let replicated = !matches!(fred_config.server, ServerConfig::Centralized { .. });

        // Single server: this connection carries the lock scripts too, so it
        // never re-sends. Replicated: scripts have their own connections and
        // this one only reads and deletes latches, which may follow a MOVED.
        let redis = builder(&config, fred_config.clone(), if replicated { 3 } else { 1 })
            .build()
            .map_err(|e| Error::Config(e.details().to_string()))?;
        let writers = if replicated {
            (0..config.master_connection_pool_size)
                .map(|_| builder(&config, fred_config.clone(), 1).build())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::Config(e.details().to_string()))?
        } else {
            vec![redis.clone()]
        };
        let subscriber = builder(&config, fred_config, 3)
            .build_subscriber_client()
            .map_err(|e| Error::Config(e.details().to_string()))?;
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
            let _ = redis.quit().await;
            for writer in &writers {
                let _ = writer.quit().await;
            }
            let _ = subscriber.quit().await;
            return Err(e.connecting_to(&config.address));
        }

        let sharded = match config.sharded_subscription_mode {
            ShardedSubscriptionMode::On => true,
            ShardedSubscriptionMode::Off => false,
            ShardedSubscriptionMode::Auto if cluster => {
                match supports_sharded_pubsub(&redis, config.timeout).await {
                    Ok(sharded) => sharded,
                    Err(e) => {
                        let _ = redis.quit().await;
                        for writer in &writers {
                            let _ = writer.quit().await;
                        }
                        let _ = subscriber.quit().await;
                        return Err(e);
                    }
                }
            }
            ShardedSubscriptionMode::Auto => false,
        };
        let (shutdown, shutdown_rx) = watch::channel(false);
        let subscriptions =
            Subscriptions::start(subscriber, sharded, config.timeout, shutdown_rx.clone());
        let latches = LatchSweeper::start(redis.clone(), cluster);
        let inner = Arc::new(ClientInner {
            id: uuid::Uuid::new_v4().to_string().into(),
            replica_sync: ReplicaSync::new(&config, replicated),
            config,
            redis,
            writers,
            subscriptions,
            holds: Holds::default(),
            latches,
            cluster,
            publish_command: if sharded { "SPUBLISH" } else { "PUBLISH" },
            stats: watch::Sender::new(WatchdogStats::default()),
            shutdown,
            closed: AtomicBool::new(false),
        });
        tokio::spawn(watchdog::run(Arc::downgrade(&inner), shutdown_rx));
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
    pub fn lock(&self, name: &str) -> Result<RLock> {
        self.inner.ensure_open()?;
        naming::validate_lock_name(name)?;
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

    /// Stops the watchdog, releases every lock this client still holds
    /// (waking their waiters) and closes the connections. Later calls on any
    /// clone fail with [`Error::Shutdown`]. Calling it twice is harmless.
    pub async fn shutdown(&self) {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.inner.shutdown.send_replace(true);
        for hold in self.inner.holds.all() {
            let lock = RLock::new(self.inner.clone(), &hold.name);
            while hold.count() > 0 && !hold.is_retired() {
                let watchdog = hold.next_release_is_watchdog();
                if lock.release(&hold, watchdog).await.is_err() {
                    break;
                }
            }
        }
        self.inner.subscriptions.quit().await;
        let _ = self.inner.redis.quit().await;
        for writer in &self.inner.writers {
            let _ = writer.quit().await;
        }
    }
}

impl std::fmt::Debug for RedissonClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedissonClient")
            .field("id", &self.inner.id)
            .field("address", &self.inner.config.address)
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
