//! Replica-synced lock writes, like Redisson's `syncedEval` with
//! `checkLockSyncedSlaves`.
//!
//! On a cluster or Sentinel deployment every lock script is followed, in the
//! same pipeline and on the same connection, by `WAIT <n> <slavesSyncTimeout>`,
//! so the write is known to have reached the replicas a failover could
//! promote. What must confirm it comes from the deployment's view
//! (`topology`), read without a command of its own:
//!
//! * the quorum is taken of the replicas a failover **could promote**
//!   (`topology::promotion`): a dead or priority-0 replica does not hold
//!   every write up, and a replica the deployment would promote is never
//!   left out, even one that is re-attaching after a failover;
//! * `n` is what the quorum needs plus the replicas that cannot be promoted
//!   but may acknowledge (their acknowledgement must not stand in for a
//!   promotable one's), so one lagging replica does not hold every write
//!   for the whole `slavesSyncTimeout` (Redisson waits for every connected
//!   replica, then checks that one acknowledged);
//! * where any replica that cannot be promoted is listed (whatever the
//!   reason, and whatever the view says of its link: a priority-0 replica
//!   the sentinels cannot reach still replicates), the `WAIT` goes between
//!   two `ROLE`s and only the promotable replicas' own acknowledgements
//!   count: the first gives the primary's offset just past the write, the
//!   second each replica's acknowledged offset, so a write every promotable
//!   replica has is confirmed though a stopped priority-0 replica never
//!   acknowledged, and one only a replica that cannot be promoted has is
//!   not (the count alone cannot tell whose acknowledgements came). The
//!   count alone is read only where every replica listed is promotable;
//! * while a failover is under way nothing is confirmed: judged when the
//!   `WAIT` answers, not only when the write was planned (a write may wait
//!   for its turn, or for a primary stalled past `down-after`, while the
//!   sentinels fail it over).
//!
//! A write that falls short asks the view to read that primary again. A
//! single-server address never waits, as in Redisson.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::config::{Config, ReplicaQuorum};
use crate::engine::safety::Synced;
use crate::engine::script::{Acks, WaitFor};
use crate::error::{Error, Result};
use crate::topology::{Requirement, Topology};

/// How a write is followed and judged (see [`ReplicaSync::plan`]).
#[derive(Debug)]
pub(crate) enum Plan {
    /// A single server, or no `WAIT`: nothing to wait for.
    NotWaited,
    /// No write counts as confirmed now; why.
    Unsettled(String),
    /// `wait` for `required` of the `promotable` replicas (the `WAIT`
    /// counting the others too, which cannot be promoted but may
    /// acknowledge).
    Wait {
        required: u32,
        promotable: u32,
        left_out: u32,
        promotable_at: Arc<[String]>,
        wait: Option<WaitFor>,
        /// The view's generation when planned: a write whose reply comes
        /// after the view changed is judged by the view of then.
        generation: u64,
    },
}

impl Plan {
    /// The `WAIT` that follows the write, if any.
    pub(crate) fn wait(&self) -> Option<WaitFor> {
        match self {
            Plan::Wait { wait, .. } => *wait,
            _ => None,
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
    topology: Arc<Topology>,
    /// The first pause after an acquisition fell short (`retryDelay`).
    pause: Duration,
    /// Per primary: acquisitions held back after one fell short there.
    gates: Mutex<HashMap<String, Gate>>,
}

/// Acquisitions held back on one primary after one fell short there.
struct Gate {
    /// The view's generation then: any change of the view lets them through.
    generation: u64,
    /// Shorts in a row, for the back-off.
    shorts: u32,
    until: Instant,
    last: Synced,
}

impl ReplicaSync {
    pub(crate) fn new(config: &Config, topology: Arc<Topology>) -> Self {
        ReplicaSync {
            enabled: AtomicBool::new(topology.is_replicated()),
            check: config.check_lock_synced_slaves,
            quorum: config.replica_quorum,
            wait: config.slaves_sync_timeout,
            timeout: config.timeout,
            topology,
            pause: config.retry_delay,
            gates: Mutex::new(HashMap::new()),
        }
    }

    /// Whether lock writes wait for replicas.
    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The deployment's view.
    pub(crate) fn topology(&self) -> &Arc<Topology> {
        &self.topology
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

    /// Before an acquisition of `slot` through `redis`, judged from the view
    /// alone (nothing is sent): [`Error::NoPrimary`] when no write could be
    /// confirmed now (a failover under way, a connection still moving), and
    /// the last short write and when to try again when an acquisition on
    /// the same primary fell short a moment ago and nothing changed since.
    /// So waiters woken by an undone grant do not run into the same refusal.
    pub(crate) fn admit(&self, redis: &Client, slot: u16) -> Result<Option<(Synced, Instant)>> {
        if !self.is_enabled() || !self.check {
            return Ok(None);
        }
        match self.topology.requirement(redis, slot) {
            Requirement::Moving(why) | Requirement::Unsettled(why) => Err(Error::NoPrimary(why)),
            Requirement::Nothing => Ok(None),
            Requirement::Replicas { .. } => {
                let node = self.topology.node_of(redis, slot);
                let generation = self.topology.generation();
                let gates = self.gates.lock();
                Ok(gates
                    .get(&node)
                    .filter(|g| g.generation == generation && Instant::now() < g.until)
                    .map(|g| (g.last.clone(), g.until)))
            }
        }
    }

    /// After an acquisition's write to `slot` through `redis`: one that fell
    /// short holds the next ones on that primary back for a pause
    /// (exponential, full jitter) that any change of the view ends; one that
    /// was confirmed lets them through. Returns when to try again.
    pub(crate) fn note_acquire(&self, redis: &Client, slot: u16, synced: &Synced) -> Instant {
        let node = self.topology.node_of(redis, slot);
        let mut gates = self.gates.lock();
        if !synced.is_short() {
            gates.remove(&node);
            return Instant::now();
        }
        let generation = self.topology.generation();
        let shorts = match gates.get(&node) {
            Some(g) if g.generation == generation => g.shorts + 1,
            _ => 1,
        };
        let until = Instant::now() + crate::config::retry_pause(self.pause, shorts - 1);
        gates.insert(
            node,
            Gate {
                generation,
                shorts,
                until,
                last: synced.clone(),
            },
        );
        until
    }

    /// What a write of `slot` through `redis` is followed by, and how its
    /// acknowledgements will be judged, from the deployment's view (nothing
    /// is sent). [`Error::NoPrimary`] when the connection still reaches a
    /// node that is no longer the primary: nothing may be sent on it.
    pub(crate) fn plan(&self, redis: &Client, slot: u16) -> Result<Plan> {
        if !self.is_enabled() {
            return Ok(Plan::NotWaited);
        }
        // Read before the requirement: a change between the two is seen as
        // a change when the reply is judged.
        let generation = self.topology.generation();
        Ok(match self.topology.requirement(redis, slot) {
            Requirement::Nothing => Plan::NotWaited,
            Requirement::Moving(why) => return Err(Error::NoPrimary(why)),
            // Sent all the same (a renewal must still reach the primary, an
            // unlock must still happen), but nothing is confirmed: the
            // replica that confirms may be about to resync from a new
            // primary without the write.
            Requirement::Unsettled(why) => Plan::Unsettled(why),
            Requirement::Replicas {
                promotable,
                others,
                left_out,
                promotable_at,
                mixed,
            } => {
                let required = self.required(promotable);
                // Where a replica that cannot be promoted is listed, which
                // replicas acknowledged is read (`ROLE`): its acknowledgement
                // must not stand in for a promotable one's (a priority-0
                // replica the sentinels cannot reach still replicates), and
                // a stopped or lagging one holds up no write every
                // promotable one has.
                let by_replica = mixed && !promotable_at.is_empty();
                Plan::Wait {
                    required,
                    promotable,
                    left_out,
                    promotable_at,
                    // No replica could take over: nothing a failover could
                    // lose, nothing to wait for.
                    wait: (required > 0).then_some(WaitFor {
                        replicas: i64::from(required + others),
                        timeout: self.wait,
                        by: None,
                        by_replica,
                    }),
                    generation,
                }
            }
        })
    }

    /// What the replicas confirmed of a write sent as `plan` says, `acks`
    /// answering its `WAIT`. A write that fell short asks the view to read
    /// that primary again.
    pub(crate) fn judge(
        &self,
        plan: Plan,
        acks: Option<Acks>,
        redis: &Client,
        slot: u16,
    ) -> Synced {
        let synced = match plan {
            Plan::NotWaited => Synced::NotWaited,
            Plan::Unsettled(why) if self.check => Synced::Short {
                acked: 0,
                required: 0,
                promotable: 0,
                unsettled: Some(why),
            },
            Plan::Unsettled(_) => Synced::Confirmed {
                acked: 0,
                promotable: 0,
                left_out: 0,
            },
            Plan::Wait {
                required,
                promotable,
                left_out,
                promotable_at,
                generation,
                wait,
                ..
            } => {
                let acks = acks.unwrap_or_default();
                // Read replica by replica where any other may have
                // acknowledged; the count alone only where every replica
                // listed is promotable.
                let acked = match wait.is_some_and(|w| w.by_replica) {
                    true => among(&acks, &promotable_at),
                    false => acks.count.clamp(0, i64::from(promotable)) as u32,
                };
                match self.judged(acked, required, promotable, left_out) {
                    // The rule holds when the reply is read, not when the
                    // write was planned: a replica the view has since found
                    // a failover could not promote (dead for seconds, `fail?`)
                    // no longer stands between the write and its
                    // confirmation. Without this, a renewal planned a moment
                    // before the view changed left its hold at risk, and a
                    // late reply let its deadline pass: a false lost signal.
                    short @ Synced::Short { .. } => {
                        self.judged_now(acked, &acks, redis, slot).unwrap_or(short)
                    }
                    // Nor is a write confirmed by a view that has moved on
                    // while it waited (for its WAIT turn, the queue, a
                    // primary that stalled past `down-after`): a failover
                    // announced meanwhile, or the sentinels out of reach,
                    // and the replica that acknowledged may be about to
                    // resync from a new primary without it.
                    // (Short so, the replicas did not fall short: the view
                    // is not asked to read them again.)
                    confirmed if self.topology.generation() != generation => {
                        match self.judged_now(acked, &acks, redis, slot) {
                            Some(judged) => judged,
                            None => {
                                return Synced::Short {
                                    acked,
                                    required,
                                    promotable,
                                    unsettled: Some(self.unsettled_now(redis, slot).unwrap_or_else(
                                        || format!("the deployment's view changed while the write waited ({confirmed:?})"),
                                    )),
                                }
                            }
                        }
                    }
                    judged => judged,
                }
            }
        };
        if synced.is_short() {
            self.topology.fell_short(redis, slot);
        }
        synced
    }

    /// Why no write is confirmed now, if none is.
    fn unsettled_now(&self, redis: &Client, slot: u16) -> Option<String> {
        match self.topology.requirement(redis, slot) {
            Requirement::Unsettled(why) | Requirement::Moving(why) => Some(why),
            _ => None,
        }
    }

    /// How many acknowledgements of promotable replicas the quorum needs.
    fn required(&self, promotable: u32) -> u32 {
        if !self.check {
            // Redisson still waits for one when the check is off, and logs.
            return promotable.min(1);
        }
        self.quorum.required(promotable)
    }

    /// Extra time a synced write may take beyond the command timeout.
    pub(crate) fn extra_time(&self) -> Duration {
        if self.is_enabled() {
            self.wait + Duration::from_secs(1)
        } else {
            Duration::ZERO
        }
    }

    /// A short write judged again by the view as it is now: confirmed if
    /// the promotable replicas the view now knows need no more than
    /// `acked` (or than those of them `acks` names).
    fn judged_now(&self, acked: u32, acks: &Acks, redis: &Client, slot: u16) -> Option<Synced> {
        match self.topology.requirement(redis, slot) {
            Requirement::Replicas {
                promotable,
                left_out,
                promotable_at,
                ..
            } => {
                let acked = acked.max(among(acks, &promotable_at));
                (acked >= self.required(promotable)).then_some(Synced::Confirmed {
                    acked: acked.min(promotable),
                    promotable,
                    left_out,
                })
            }
            Requirement::Nothing => Some(Synced::NotWaited),
            _ => None,
        }
    }

    fn judged(&self, acked: u32, required: u32, promotable: u32, left_out: u32) -> Synced {
        if acked >= required {
            Synced::Confirmed {
                acked,
                promotable,
                // With the check off, nothing is ever at risk for want of
                // replicas.
                left_out: if self.check { left_out } else { 0 },
            }
        } else if !self.check {
            tracing::warn!(
                acked,
                promotable,
                "lock write not confirmed by replicas (checkLockSyncedSlaves is off)"
            );
            Synced::Confirmed {
                acked,
                promotable,
                left_out: 0,
            }
        } else {
            Synced::Short {
                acked,
                required,
                promotable,
                unsettled: None,
            }
        }
    }

    /// The error for a write that stayed short on every attempt.
    pub(crate) fn not_synced(&self, operation: &'static str, name: &str, synced: Synced) -> Error {
        let (acked, required, promotable, unsettled) = match synced {
            Synced::Short {
                acked,
                required,
                promotable,
                unsettled,
            } => (acked, required, promotable, unsettled),
            _ => (0, 0, 0, None),
        };
        Error::ReplicasNotSynced {
            operation,
            name: name.to_string(),
            acked,
            required,
            promotable,
            unsettled,
        }
    }

    pub(crate) async fn quit(&self) {
        self.topology.quit().await;
    }
}

/// How many of `promotable_at` the replicas that acknowledged (as read by
/// `ROLE`) name.
fn among(acks: &Acks, promotable_at: &[String]) -> u32 {
    acks.caught_up.as_ref().map_or(0, |caught_up| {
        caught_up
            .iter()
            .filter(|a| promotable_at.contains(a))
            .count() as u32
    })
}
