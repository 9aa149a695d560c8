//! Replica-synced lock writes, like Redisson's `syncedEval` with
//! `checkLockSyncedSlaves`.
//!
//! On a cluster or sentinel deployment every lock script is followed, in the
//! same pipeline and on the same connection, by `WAIT <n> <slavesSyncTimeout>`,
//! so the write is known to have reached the replicas a failover would
//! promote.
//!
//! Two deliberate differences from Redisson, both about what is counted:
//!
//! * Redisson counts the replicas *connected* to the primary at that instant
//!   (`INFO`), and sends no `WAIT` when there are none. Here the quorum is
//!   taken of the replicas the *deployment* knows the primary has and does
//!   not consider down (`engine::deployment`): a primary promoted a moment
//!   ago, whose replicas are still re-attaching, or an old primary that
//!   resumed after its replicas moved away, has none connected, and a lock
//!   written there unconfirmed is lost at the next failover. Such a write is
//!   judged short instead. A connection that reaches a node the deployment
//!   no longer calls the primary is moved first.
//! * Redisson always waits for every connected replica (`WAIT <connected>
//!   ...`) and then only checks that one acknowledged. Here `n` is what the
//!   quorum needs (1 for Redisson's rule), so one lagging replica does not
//!   hold every lock write (and every renewal batch) for the whole
//!   `slavesSyncTimeout`.
//!
//! Both counts are cached per connection and node for a second, and dropped
//! when a write falls short. A single-server address never waits, as in
//! Redisson.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::config::{Config, ReplicaQuorum};
use crate::engine::deployment::Deployment;
use crate::engine::kind::ScriptCall;
use crate::engine::script::WaitFor;
use crate::error::{Error, Result};

/// How long a replica count read from INFO is trusted.
const REPLICA_COUNT_TTL: Duration = Duration::from_secs(1);

/// What stands behind a hold against a failover: how many replicas had
/// confirmed the write that took it (see [`crate::LockGuard::safety`]).
///
/// Replication in Redis is asynchronous; a `WAIT` only tells how many
/// replicas had the write when it answered. A failover that promotes a
/// replica without the write loses the lock, whatever any client does: the
/// more replicas confirmed, the fewer failovers can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum SafetyLevel {
    /// Nothing was checked: a single-server address (Redisson never waits
    /// for replicas there), a server without `WAIT` with
    /// `checkLockSyncedSlaves` off, or an acquire whose reply was lost and
    /// was resolved by reading the hold count (the watchdog's next
    /// confirmed renewal covers it).
    NotChecked,
    /// `acked` of the `known` replicas the deployment knows the primary has
    /// (and does not consider down) confirmed the write. `known == 0`: the
    /// primary had no replica, so a failover loses the lock.
    Replicas {
        /// Replicas that confirmed.
        acked: u32,
        /// Replicas the deployment knows the primary has.
        known: u32,
    },
}

/// What the replicas confirmed for one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Synced {
    /// Nothing to wait for: a single-server address, or a server without
    /// `WAIT` with `checkLockSyncedSlaves` off.
    NotWaited,
    /// The quorum confirmed (or the check is off): `acked` of the `known`
    /// replicas the deployment has for the primary.
    Confirmed { acked: i64, known: i64 },
    /// Too few replicas confirmed within `slavesSyncTimeout`.
    Short {
        acked: i64,
        connected: i64,
        known: i64,
    },
}

impl Synced {
    /// The safety level a hold confirmed this way reached.
    pub(crate) fn level(self) -> SafetyLevel {
        match self {
            Synced::NotWaited => SafetyLevel::NotChecked,
            Synced::Confirmed { acked, known } | Synced::Short { acked, known, .. } => {
                SafetyLevel::Replicas {
                    acked: acked.clamp(0, u32::MAX as i64) as u32,
                    known: known.clamp(0, u32::MAX as i64) as u32,
                }
            }
        }
    }
}

/// The replica-sync policy of one client.
pub(crate) struct ReplicaSync {
    /// False on a single-server address, or when the server has no `WAIT`
    /// and the check is off.
    enabled: AtomicBool,
    check: bool,
    quorum: ReplicaQuorum,
    wait: Duration,
    timeout: Duration,
    /// What each primary reached through a connection looks like, and when
    /// it was read.
    nodes: Mutex<HashMap<String, (NodeState, Instant, u64)>>,
    /// Bumped at every sign of a topology change; a cached state read
    /// before is read again.
    generation: Arc<AtomicU64>,
    deployment: Deployment,
    /// One search for a new primary at a time: a reconnection started by one
    /// write must not cut the pipelines of others that found the same thing.
    refreshing: tokio::sync::Mutex<()>,
}

/// One primary as a write finds it.
#[derive(Debug, Clone, Copy)]
struct NodeState {
    /// Replicas attached right now (`INFO replication`).
    connected: i64,
    /// Replicas the deployment knows it has and does not consider down.
    known: i64,
    /// The deployment is not failing over (see `deployment`).
    settled: bool,
}

impl ReplicaSync {
    pub(crate) fn new(
        config: &Config,
        deployment: Deployment,
        replicated: bool,
        generation: Arc<AtomicU64>,
    ) -> Self {
        ReplicaSync {
            enabled: AtomicBool::new(replicated),
            check: config.check_lock_synced_slaves,
            quorum: config.replica_quorum,
            wait: config.slaves_sync_timeout,
            timeout: config.timeout,
            nodes: Mutex::new(HashMap::new()),
            generation,
            deployment,
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether lock writes wait for replicas.
    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// At connect, on a replicated deployment: `WAIT 0 0` tells whether the
    /// server has `WAIT` (some proxies and managed services refuse it).
    /// Without it, writes cannot be confirmed; that is refused unless the
    /// check is off, and never downgraded silently.
    pub(crate) async fn probe(&self, redis: &Client) -> Result<()> {
        if !self.is_enabled() {
            return Ok(());
        }
        let probe = CustomCommand::new_static("WAIT", ClusterHash::Random, true);
        match redis
            .custom::<Value, Value>(probe, vec![Value::from(0), Value::from(0)])
            .await
            .map_err(|e| Error::from_redis(&e, self.timeout))
        {
            Ok(_) => Ok(()),
            Err(Error::Redis { message, .. }) => {
                if self.check {
                    return Err(Error::Config(format!(
                        "the server refuses WAIT ({message}), so lock writes cannot be confirmed \
                         by replicas; set checkLockSyncedSlaves: false \
                         (Config::check_lock_synced_slaves) to run without replica \
                         confirmation (guards then report SafetyLevel::NotChecked)"
                    )));
                }
                tracing::info!(reply = %message, "the server refuses WAIT; checkLockSyncedSlaves is off, so lock writes are not confirmed by replicas");
                self.enabled.store(false, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(e),
        }
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
        let NodeState {
            connected,
            known,
            settled,
        } = self.node_state(redis, &node, slot).await?;
        let required = self.required(known);
        let failing_over = !settled || self.deployment.failover_announced();
        if required == 0 || connected < required || failing_over {
            // Nothing to wait for, or no chance the quorum is met: no WAIT
            // (none at all on a primary without replicas, as Redisson), and
            // the write is judged on what is attached. During a failover
            // nothing is confirmed: the replica that confirms may be about to
            // resync from a new primary without the write.
            let reply = script.run(redis, self.timeout, slot, call, rebuild).await?;
            if connected < required || failing_over {
                // Replicas are re-attaching (a fresh primary), gone, or the
                // primary is changing: read the state again next time.
                self.forget(&node);
            }
            let synced = if failing_over && required > 0 && self.check {
                Synced::Short {
                    acked: 0,
                    connected,
                    known,
                }
            } else {
                self.judge(0, connected, known)
            };
            return Ok((reply, synced));
        }
        let (reply, acked) = script
            .run_then_wait(
                redis,
                self.timeout,
                slot,
                call,
                rebuild,
                WaitFor {
                    replicas: required,
                    timeout: self.wait,
                },
            )
            .await?;
        // A server that lost WAIT after the probe (a failover to another
        // kind of node): nothing was confirmed.
        let acked = acked.unwrap_or(0);
        if acked < required {
            // The replica set changed, or lags: read it again next time.
            self.forget(&node);
        }
        Ok((reply, self.judge(acked, connected, known)))
    }

    /// How many acknowledgements the quorum needs from a primary the
    /// deployment knows `known` replicas of.
    fn required(&self, known: i64) -> i64 {
        if !self.check {
            // Redisson still waits for one when the check is off, and logs.
            return known.min(1);
        }
        match self.quorum {
            ReplicaQuorum::Any => known.min(1),
            ReplicaQuorum::All => known,
            ReplicaQuorum::AtLeast(n) => i64::from(n),
        }
    }

    /// Extra time a synced write may take beyond the command timeout.
    pub(crate) fn extra_time(&self) -> std::time::Duration {
        if self.enabled.load(Ordering::Relaxed) {
            self.wait + Duration::from_secs(1)
        } else {
            Duration::ZERO
        }
    }

    fn judge(&self, acked: i64, connected: i64, known: i64) -> Synced {
        if self.quorum.is_met(acked, known) {
            Synced::Confirmed { acked, known }
        } else if !self.check {
            tracing::warn!(
                acked,
                known,
                connected,
                "lock write not confirmed by replicas (checkLockSyncedSlaves is off)"
            );
            Synced::Confirmed { acked, known }
        } else {
            Synced::Short {
                acked,
                connected,
                known,
            }
        }
    }

    /// The error for a write that stayed short on every attempt.
    pub(crate) fn not_synced(&self, operation: &'static str, name: &str, synced: Synced) -> Error {
        let (acked, connected, known) = match synced {
            Synced::Short {
                acked,
                connected,
                known,
            } => (acked, connected, known),
            _ => (0, 0, 0),
        };
        Error::ReplicasNotSynced {
            operation,
            name: name.to_string(),
            acked,
            known,
            connected,
            required: match self.quorum {
                ReplicaQuorum::Any => "at least 1".into(),
                ReplicaQuorum::All => "all".into(),
                ReplicaQuorum::AtLeast(n) => format!("at least {n}"),
            },
        }
    }

    fn forget(&self, node: &str) {
        self.nodes.lock().remove(node);
        self.deployment.forget();
    }

    /// The primary `redis` reaches for `slot`: its attached replicas and the
    /// ones the deployment knows. A connection that still reaches a demoted
    /// or deposed primary is moved to the current one first.
    async fn node_state(&self, redis: &Client, node: &str, slot: u16) -> Result<NodeState> {
        let generation = self.generation.load(Ordering::Relaxed);
        if let Some((state, read_at, seen)) = self.nodes.lock().get(node) {
            if read_at.elapsed() < REPLICA_COUNT_TTL && *seen == generation {
                return Ok(*state);
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
            let replica = field("role:").as_deref() == Some("slave");
            let view = if replica {
                None
            } else {
                Some(self.deployment.view(redis, slot).await?)
            };
            if replica || view.is_some_and(|v| !v.is_primary) {
                // This connection reaches a node that is no longer the
                // primary: a failover fred has not noticed (nothing was
                // redirected or refused yet), or an old primary that resumed
                // after the others moved on. Find the current one; nothing
                // was sent so far.
                if refreshed {
                    // Nothing was sent: a definite failure, not an unknown one.
                    return Err(Error::NoPrimary(
                        "the node reached after reconnecting is not the primary".into(),
                    ));
                }
                refreshed = true;
                tracing::info!(
                    replica,
                    "a lock write found a node that is no longer the primary; reconnecting"
                );
                self.reconnect(redis, slot).await?;
                continue;
            }
            let connected = field("connected_slaves:")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let known = view.and_then(|v| v.known_replicas).unwrap_or(connected);
            let settled = view.is_none_or(|v| v.settled);
            let state = NodeState {
                connected,
                known,
                settled,
            };
            self.nodes
                .lock()
                .insert(node.to_string(), (state, Instant::now(), generation));
            return Ok(state);
        }
    }

    /// Points `redis` at the current primary, unless another write did so meanwhile.
    async fn reconnect(&self, redis: &Client, slot: u16) -> Result<()> {
        let _one_at_a_time = self.refreshing.lock().await;
        self.deployment.forget();
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
        let still_primary = role.as_deref().unwrap_or("slave") == "master"
            && self.deployment.view(redis, slot).await?.is_primary;
        if !still_primary {
            let found = if redis.cached_cluster_state().is_some() {
                redis.sync_cluster().await
            } else {
                redis.force_reconnection().await
            };
            found.map_err(|e| Error::from_redis(&e, self.timeout))?;
        }
        Ok(())
    }

    /// Once connected: follows the sentinels' failover announcements (on
    /// Sentinel).
    pub(crate) fn listen(&self, topology_changed: Arc<tokio::sync::Notify>) {
        self.deployment.listen(topology_changed);
    }

    pub(crate) async fn quit(&self) {
        self.deployment.quit().await;
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
