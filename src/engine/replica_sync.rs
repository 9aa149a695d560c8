//! Replica-synced lock writes, like Redisson's `syncedEval` with
//! `checkLockSyncedSlaves`.
//!
//! On a cluster or sentinel deployment every lock script is followed, in the
//! same pipeline and on the same connection, by `WAIT <n> <slavesSyncTimeout>`,
//! so the write is known to have reached the replicas a failover would
//! promote. The number of connected replicas comes from `INFO replication` on
//! the primary, cached per connection and node for a second (and dropped when
//! a WAIT falls short), so a replica that joins or leaves is noticed. A
//! single-server address never waits, as in Redisson.
//!
//! One deliberate difference: Redisson always waits for every connected
//! replica (`WAIT <connected> ...`) and then only checks that one
//! acknowledged. Here `n` is what the quorum needs (1 for Redisson's rule),
//! so one lagging replica does not hold every lock write (and every renewal
//! batch) for the whole `slavesSyncTimeout`. The decisions are the same.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::config::{Config, ReplicaQuorum};
use crate::engine::kind::ScriptCall;
use crate::engine::script::WaitFor;
use crate::error::{Error, Result};

/// How long a replica count read from INFO is trusted.
const REPLICA_COUNT_TTL: Duration = Duration::from_secs(1);

/// What the replicas confirmed for one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Synced {
    /// Nothing to wait for (single server, or WAIT refused by the server).
    NotWaited,
    /// The quorum confirmed (or the check is off).
    Confirmed,
    /// Too few replicas confirmed within `slavesSyncTimeout`.
    Short { acked: i64, connected: i64 },
}

/// The replica-sync policy of one client.
pub(crate) struct ReplicaSync {
    /// False on a single-server address, or once the server refused WAIT.
    enabled: AtomicBool,
    check: bool,
    quorum: ReplicaQuorum,
    wait: Duration,
    timeout: Duration,
    /// Connected replicas per primary (by slot owner), and when it was read.
    replicas: Mutex<HashMap<String, (i64, Instant)>>,
    /// One search for a new primary at a time: a reconnection started by one
    /// write must not cut the pipelines of others that found the same thing.
    refreshing: tokio::sync::Mutex<()>,
}

impl ReplicaSync {
    pub(crate) fn new(config: &Config, replicated: bool) -> Self {
        ReplicaSync {
            enabled: AtomicBool::new(replicated),
            check: config.check_lock_synced_slaves,
            quorum: config.replica_quorum,
            wait: config.slaves_sync_timeout,
            timeout: config.timeout,
            replicas: Mutex::new(HashMap::new()),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether lock writes wait for replicas.
    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Runs `call` once on `redis` (the node owning its first key, in
    /// `slot`), then waits for that node's replicas. `rebuild` makes the call
    /// again for a `NOSCRIPT` fallback.
    pub(crate) async fn run(
        &self,
        redis: &Client,
        slot: u16,
        call: ScriptCall,
        rebuild: &(dyn Fn() -> ScriptCall + Sync),
    ) -> Result<(Value, Synced)> {
        if !self.enabled.load(Ordering::Relaxed) {
            let reply = call
                .script
                .run(redis, self.timeout, slot, call, rebuild)
                .await?;
            return Ok((reply, Synced::NotWaited));
        }
        // Boxed, so that a deployment without replicas does not carry the
        // larger replica path inside every write's future, and behind `dyn`
        // for the reason of `engine::boxed_reply`.
        let synced: BoxFuture<'_, _> = Box::pin(self.run_synced(redis, slot, call, rebuild));
        synced.await
    }

    async fn run_synced(
        &self,
        redis: &Client,
        slot: u16,
        call: ScriptCall,
        rebuild: &(dyn Fn() -> ScriptCall + Sync),
    ) -> Result<(Value, Synced)> {
        let script = call.script;
        let node = node_key(redis, slot);
        let connected = self.connected_replicas(redis, &node, slot).await?;
        if connected == 0 {
            // As Redisson: no WAIT when the primary has no replica.
            let reply = script.run(redis, self.timeout, slot, call, rebuild).await?;
            return Ok((reply, self.judge(0, 0)));
        }
        let target = self.target(connected);
        let (reply, acked) = script
            .run_then_wait(
                redis,
                self.timeout,
                slot,
                call,
                rebuild,
                WaitFor {
                    replicas: target,
                    timeout: self.wait,
                },
            )
            .await?;
        let Some(acked) = acked else {
            tracing::warn!("the server refuses WAIT; lock writes are no longer replica-synced");
            self.enabled.store(false, Ordering::Relaxed);
            return Ok((reply, Synced::NotWaited));
        };
        if acked < target {
            // The replica set changed, or lags: read it again next time.
            self.replicas.lock().remove(&node);
        }
        Ok((reply, self.judge(acked, connected)))
    }

    /// How many acknowledgements to WAIT for.
    fn target(&self, connected: i64) -> i64 {
        let wanted = match self.quorum {
            _ if !self.check => 1,
            ReplicaQuorum::Any => 1,
            ReplicaQuorum::All => connected,
            ReplicaQuorum::AtLeast(n) => i64::from(n),
        };
        wanted.min(connected)
    }

    /// Extra time a synced write may take beyond the command timeout.
    pub(crate) fn extra_time(&self) -> std::time::Duration {
        if self.enabled.load(Ordering::Relaxed) {
            self.wait + Duration::from_secs(1)
        } else {
            Duration::ZERO
        }
    }

    fn judge(&self, acked: i64, connected: i64) -> Synced {
        if self.quorum.is_met(acked, connected) {
            Synced::Confirmed
        } else if !self.check {
            tracing::warn!(
                acked,
                connected,
                "lock write not confirmed by replicas (checkLockSyncedSlaves is off)"
            );
            Synced::Confirmed
        } else {
            Synced::Short { acked, connected }
        }
    }

    /// The error for a write that stayed short on every attempt.
    pub(crate) fn not_synced(&self, operation: &'static str, name: &str, synced: Synced) -> Error {
        let (acked, connected) = match synced {
            Synced::Short { acked, connected } => (acked, connected),
            _ => (0, 0),
        };
        Error::ReplicasNotSynced {
            operation,
            name: name.to_string(),
            acked,
            connected,
            required: match self.quorum {
                ReplicaQuorum::Any => "at least 1".into(),
                ReplicaQuorum::All => "all".into(),
                ReplicaQuorum::AtLeast(n) => format!("at least {n}"),
            },
        }
    }

    async fn connected_replicas(&self, redis: &Client, node: &str, slot: u16) -> Result<i64> {
        if let Some((count, read_at)) = self.replicas.lock().get(node) {
            if read_at.elapsed() < REPLICA_COUNT_TTL {
                return Ok(*count);
            }
        }
        let mut refreshed = false;
        loop {
            let info: String = redis
                .custom(
                    CustomCommand::new_static("INFO", ClusterHash::Custom(slot), false),
                    vec!["replication"],
                )
                .await
                .map_err(|e| Error::from_redis(&e, self.timeout))?;
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_string())
            };
            if field("role:").as_deref() == Some("slave") {
                // This connection still points at a demoted primary: a
                // failover that fred has not noticed (no command was
                // redirected or refused yet). Find the new primary; nothing
                // was sent so far.
                if refreshed {
                    // Nothing was sent: a definite failure, not an unknown one.
                    return Err(Error::redis(
                        "still connected to a replica after a failover; retry later",
                    ));
                }
                refreshed = true;
                let _one_at_a_time = self.refreshing.lock().await;
                let role: std::result::Result<String, _> = redis
                    .custom(
                        CustomCommand::new_static("ROLE", ClusterHash::Custom(slot), false),
                        Vec::<Value>::new(),
                    )
                    .await
                    .map(|reply: Vec<Value>| {
                        reply
                            .first()
                            .and_then(|r| r.as_string())
                            .unwrap_or_default()
                    });
                if role.as_deref().unwrap_or("slave") != "master" {
                    // Nobody else fixed it meanwhile.
                    let found = if redis.cached_cluster_state().is_some() {
                        redis.sync_cluster().await
                    } else {
                        redis.force_reconnection().await
                    };
                    found.map_err(|e| Error::from_redis(&e, self.timeout))?;
                }
                continue;
            }
            let count = field("connected_slaves:")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            self.replicas
                .lock()
                .insert(node.to_string(), (count, Instant::now()));
            return Ok(count);
        }
    }
}

/// The cache key of a replica count: this connection (each writer follows
/// a sentinel failover on its own) and, on a cluster, the primary that owns
/// `slot` as fred last saw it.
fn node_key(redis: &Client, slot: u16) -> String {
    let primary = redis
        .cached_cluster_state()
        .and_then(|state| state.get_server(slot).map(|s| s.to_string()))
        .unwrap_or_default();
    format!("{}/{primary}", redis.id())
}
