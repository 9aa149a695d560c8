//! Building a client's engine: the deployment's view (`topology`), the fred
//! connections (reconnect policy on, scripts sent at most once, on Sentinel
//! pointed at the primary the view names), the probes Redisson makes at
//! connect (sharded pub/sub, a cluster behind a proxy), and the background
//! tasks.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, ReconnectPolicy};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use tokio::sync::watch;

use crate::config::{Config, ShardedSubscriptionMode};
use crate::engine::coalesce::Lane;
use crate::engine::hold::Holds;
use crate::engine::hub::Hub;
use crate::engine::lifecycle::Lifecycle;
use crate::engine::registry;
use crate::engine::replica_sync::ReplicaSync;
use crate::engine::unlock_latch::LatchSweeper;
use crate::engine::watchdog::{self, WatchdogStats};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::naming;
use crate::topology::Topology;

impl Engine {
    /// Connects with the given settings and starts the background tasks.
    pub(crate) async fn start(config: Config) -> Result<Arc<Engine>> {
        config.validate()?;
        let fred_config = config.to_fred_config()?;
        let address = naming::redact_url(&config.address);
        let id: Arc<str> = uuid::Uuid::new_v4().to_string().into();
        // On Sentinel this asks the sentinels who the primary is; the data
        // connections below are pointed at it.
        let (topology, data) =
            Topology::start(&fred_config, config.timeout, config.connect_timeout, &id)
                .await
                .map_err(|e| e.connecting_to(&address))?;
        let cluster = topology.is_cluster();
        let replicated = topology.is_replicated();

        // Single server: this connection carries the lock scripts too, so it
        // never re-sends. Replicated: scripts have their own connections and
        // this one only reads and deletes latches, which may follow a MOVED.
        let redis = builder(&config, data.clone(), if replicated { 3 } else { 1 })
            .build()
            .map_err(|e| config_error(&config, &e))?;
        // Replicated: the pool, then the watchdog's renewal connection.
        let writers = if replicated {
            (0..=config.master_connection_pool_size)
                .map(|_| builder(&config, data.clone(), 1).build())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| config_error(&config, &e))?
        } else {
            vec![redis.clone()]
        };
        let subscriber = builder(&config, data.clone(), 3)
            .build_subscriber_client()
            .map_err(|e| config_error(&config, &e))?;
        topology.follow(&redis).await;
        if replicated {
            for writer in &writers {
                topology.follow(writer).await;
            }
        }
        topology.follow_subscriber(&subscriber).await;
        let quit_all = || async {
            let _ = redis.quit().await;
            for writer in &writers {
                let _ = writer.quit().await;
            }
            let _ = subscriber.quit().await;
            topology.quit().await;
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
        if outcome.is_ok() {
            outcome = topology.attach(&redis, &writers).await;
        }
        if let Err(e) = outcome {
            quit_all().await;
            // On Sentinel the node that did not answer is the primary the
            // sentinels name: an address that must be reachable from here
            // (NAT, a TLS name), so the error says which.
            let target = match topology.primary_address() {
                Some(primary) => format!("{address} (the primary the sentinels name, {primary})"),
                None => address,
            };
            return Err(e.connecting_to(&target));
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
            || (!replicated
                && match rejects_cross_slot_scripts(&redis, config.timeout).await {
                    Ok(proxied) => proxied,
                    Err(e) => {
                        quit_all().await;
                        return Err(e);
                    }
                });
        let replica_sync = ReplicaSync::new(&config, topology.clone());
        if let Err(e) = replica_sync.probe(&redis).await {
            quit_all().await;
            return Err(e);
        }
        let lifecycle = Lifecycle::new();
        let hub = Hub::start(subscriber, sharded, &topology, &config, &lifecycle);
        let latches = LatchSweeper::start(redis.clone(), slot_grouped);
        let mut writers: Vec<Arc<Lane>> = writers
            .into_iter()
            .map(|w| Lane::new(w, config.timeout, slot_grouped))
            .collect();
        let renewer = match replicated {
            true => writers.pop(),
            false => writers.first().cloned(),
        }
        .ok_or_else(|| Error::Config("no write connection".into()))?;
        let registry = registry::Entry::new(&config, &id);
        let engine = Arc::new(Engine {
            id,
            replica_sync,
            config,
            writers,
            renewer,
            redis,
            hub,
            holds: Holds::default(),
            loans: Default::default(),
            latches,
            slot_grouped,
            publish_command: if sharded { "SPUBLISH" } else { "PUBLISH" },
            stats: watch::Sender::new(WatchdogStats::default()),
            lifecycle: lifecycle.clone(),
            registry,
            data,
        });
        tokio::spawn(watchdog::run(
            Arc::downgrade(&engine),
            lifecycle.stopped(),
            topology.changes(),
        ));
        Ok(engine)
    }
}

impl Engine {
    /// A subscriber connection of its own, built as the waiters' is
    /// (credentials, TLS, reconnects) and on Sentinel following the primary
    /// the view names; its subscriptions come back after a reconnection.
    /// Give it back with [`Engine::drop_subscriber`].
    pub(crate) async fn extra_subscriber(&self) -> Result<fred::clients::SubscriberClient> {
        self.ensure_open()?;
        let subscriber = builder(&self.config, self.data.clone(), 3)
            .build_subscriber_client()
            .map_err(|e| config_error(&self.config, &e))?;
        let topology = self.replica_sync.topology();
        topology.follow_subscriber(&subscriber).await;
        let limit = self.config.connect_timeout + self.config.timeout;
        match tokio::time::timeout(limit, subscriber.init()).await {
            Ok(Ok(_)) => Ok(subscriber),
            outcome => {
                self.drop_subscriber(&subscriber).await;
                Err(match outcome {
                    Ok(Err(e)) => Error::from_redis(&e, limit),
                    _ => Error::Timeout(limit),
                })
            }
        }
    }

    /// Closes a connection [`Engine::extra_subscriber`] opened.
    pub(crate) async fn drop_subscriber(&self, subscriber: &fred::clients::SubscriberClient) {
        self.replica_sync.topology().unfollow(subscriber.id());
        let _ = tokio::time::timeout(self.config.timeout, subscriber.quit()).await;
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
            if attempts == 1 {
                // fred replaces a command's `max_redirections: Some(0)` with
                // the connection's, so a script may follow no redirect only
                // if its connection allows none (`script::once`). Reads on
                // these connections allow some again (`Engine::reader`).
                c.max_redirections = 0;
            }
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

/// Connects `client`, within `limit` in all. A timeout says how long was
/// really waited: fred's own timeouts (the TCP connect's, the handshake's)
/// may end it well before `limit`.
async fn init<C: ClientLike>(client: &C, limit: Duration) -> Result<()> {
    let started = tokio::time::Instant::now();
    let waited = || Duration::from_millis(started.elapsed().as_millis() as u64);
    match tokio::time::timeout(limit, client.init()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::from_redis(&e, waited())),
        Err(_) => Err(Error::Timeout(waited())),
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
        Err(Error::Redis { .. }) => Ok(false),
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
        Err(Error::Redis { message: msg, .. }) if msg.starts_with("CROSSSLOT") => {
            tracing::info!("the server refuses cross-slot scripts (a cluster behind a proxy?); grouping multi-key commands by slot");
            Ok(true)
        }
        // Any other refusal (an ACL, say) tells nothing: assume a plain server.
        Err(Error::Redis { message: msg, .. }) => {
            tracing::debug!(reply = %msg, "cross-slot probe refused");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}
