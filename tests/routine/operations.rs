//! The routine operations, each done to a running deployment the way an
//! operator (or a managed service) does it, and waited out until the
//! deployment is healthy again.

use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};

use crate::common::topology::{on_node, until};
use crate::deployment::{Deployment, Timings};
use crate::observe::Observer;
use crate::resource::now_us;

/// How long `CLIENT PAUSE ... WRITE` lasts: what managed services do around
/// a failover or a node replacement.
const PAUSE: Duration = Duration::from_secs(2);

/// How long `DEBUG SLEEP` stops a replica: past the bounded run's failure
/// detection (1 s), short of Sentinel's 5 s ping rule.
const SLEEP: Duration = Duration::from_secs(3);

/// The database the large data set is written to, apart from the locks'.
const POPULATE_DB: u8 = 9;

/// Keys per `DEBUG POPULATE`: each blocks the primary while it runs, so the
/// data set is written in steps that block it ~0.1 s each.
const POPULATE_STEP: u64 = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Operation {
    /// Each sentinel in turn: SIGTERM, started again, back in the quorum.
    SentinelRestarts,
    /// One sentinel SIGSTOPped, then SIGCONT.
    SentinelFrozen,
    /// One sentinel's links to the primary cut at the primary's proxy
    /// (it still reaches the replicas and the other sentinels).
    SentinelPartitioned,
    /// Each replica in turn: SIGTERM, started again (on the RDB file of
    /// its last full sync, as a node with persistence off still does),
    /// back in sync.
    ReplicaRestarts,
    /// A replica SIGKILLed and left dead past failure detection, then
    /// started again.
    ReplicaKilled,
    /// A replica stopped by `DEBUG SLEEP`: `WAIT` times out on it.
    ReplicaSlowed,
    /// The primary under `CLIENT PAUSE <2 s> WRITE`.
    PrimaryPaused,
    /// A replica restarted with an empty disk while the primary holds a
    /// large data set (`DEBUG POPULATE`): a full resync.
    ReplicaFullResync,
    /// A cluster replica cut off the cluster bus both ways (its replication
    /// link and clients still reach it), then let back.
    BusCut,
    /// A replica given `replica-priority 0` (a disaster-recovery copy
    /// Sentinel never promotes), stopped (SIGSTOP) as long as a sentinel
    /// fault lasts, then resumed.
    DrReplicaStopped,
    /// A cluster replica's replication refused (the user it replicates as
    /// switched off on its primary) for longer than the replica's own
    /// data-age limit, its bus untouched: the cluster never flags it, and
    /// would not promote it. Then allowed again.
    ReplicationBroken,
}

impl Operation {
    pub const SENTINEL: [Operation; 8] = [
        Operation::SentinelRestarts,
        Operation::SentinelFrozen,
        Operation::SentinelPartitioned,
        Operation::ReplicaRestarts,
        Operation::ReplicaKilled,
        Operation::ReplicaSlowed,
        Operation::PrimaryPaused,
        Operation::ReplicaFullResync,
    ];

    pub const CLUSTER: [Operation; 5] = [
        Operation::ReplicaRestarts,
        Operation::ReplicaKilled,
        Operation::ReplicaSlowed,
        Operation::PrimaryPaused,
        Operation::BusCut,
    ];

    /// The full run's operations on deployment shapes beyond the suite's.
    pub const SENTINEL_SHAPES: [Operation; 1] = [Operation::DrReplicaStopped];
    pub const CLUSTER_SHAPES: [Operation; 1] = [Operation::ReplicationBroken];

    /// What is done, in words, at `timings`.
    pub fn label(self, timings: &Timings) -> String {
        let secs = |d: Duration| format!("{} s", d.as_secs_f64());
        match self {
            Operation::SentinelRestarts => "rolling restart of each sentinel".into(),
            Operation::SentinelFrozen => {
                format!("one sentinel frozen {}", secs(timings.sentinel_fault))
            }
            Operation::SentinelPartitioned => format!(
                "one sentinel cut off the primary {}",
                secs(timings.sentinel_fault)
            ),
            Operation::ReplicaRestarts => "rolling restart of each replica".into(),
            Operation::ReplicaKilled => {
                "a replica killed, restarted 6 s after failure detection".into()
            }
            Operation::ReplicaSlowed => format!("a replica in DEBUG SLEEP {}", secs(SLEEP)),
            Operation::PrimaryPaused => {
                format!("the primary under CLIENT PAUSE WRITE {}", secs(PAUSE))
            }
            Operation::ReplicaFullResync => {
                format!("a replica in full resync of {} keys", timings.populate)
            }
            Operation::BusCut => "a replica cut off the cluster bus".into(),
            Operation::DrReplicaStopped => format!(
                "a priority-0 replica stopped {}",
                secs(timings.sentinel_fault)
            ),
            Operation::ReplicationBroken => format!(
                "a replica's replication refused {} (its limit: {})",
                secs(broken_for(timings)),
                secs(timings.node_timeout * 2 + Duration::from_secs(1))
            ),
        }
    }

    /// A sentinel minority is touched, nothing else: the view of a
    /// majority holds, so no acquisition may be refused.
    pub fn sentinel_minority(self) -> bool {
        matches!(
            self,
            Operation::SentinelRestarts
                | Operation::SentinelFrozen
                | Operation::SentinelPartitioned
        )
    }

    /// Before the operation, outside what is measured.
    pub async fn prepare(self, deployment: &Deployment, timings: &Timings) {
        if self == Operation::DrReplicaStopped {
            let dr = *deployment.replicas().await.last().unwrap();
            on_node(dr, "CONFIG", vec!["SET", "replica-priority", "0"]).await;
            let sentinels: Vec<u16> = deployment
                .sentinel()
                .sentinels
                .iter()
                .map(|s| s.port)
                .collect();
            // Sentinels read a replica's priority from its INFO, every 10 s.
            until("every sentinel sees the priority-0 replica", || async {
                for &sentinel in &sentinels {
                    if !lists_priority_zero(sentinel).await {
                        return false;
                    }
                }
                true
            })
            .await;
        }
        if self == Operation::ReplicaFullResync {
            let primary = populate_client(deployment.primary().await).await;
            for step in 0..timings.populate.div_ceil(POPULATE_STEP) {
                let count = POPULATE_STEP.min(timings.populate - step * POPULATE_STEP);
                let _: Value = primary
                    .custom(
                        CustomCommand::new_static("DEBUG", ClusterHash::Random, false),
                        vec![
                            "POPULATE".to_string(),
                            count.to_string(),
                            format!("bulk{step}"),
                            "32".to_string(),
                        ],
                    )
                    .await
                    .unwrap();
            }
            let _ = primary.quit().await;
        }
    }

    /// After the operation, outside what is measured.
    pub async fn clean_up(self, deployment: &Deployment) {
        if self == Operation::DrReplicaStopped {
            let dr = *deployment.replicas().await.last().unwrap();
            on_node(dr, "CONFIG", vec!["SET", "replica-priority", "100"]).await;
        }
        if self == Operation::ReplicaFullResync {
            let primary = populate_client(deployment.primary().await).await;
            let _: Value = primary
                .custom(
                    CustomCommand::new_static("FLUSHDB", ClusterHash::Random, false),
                    vec!["ASYNC"],
                )
                .await
                .unwrap();
            let _ = primary.quit().await;
        }
    }

    /// Does the operation and waits until the deployment is healthy again;
    /// returns what was done when (wall-clock µs).
    pub async fn run(self, deployment: &mut Deployment, timings: &Timings) -> Vec<(i64, String)> {
        let mut events = Events::default();
        let heal = Duration::from_secs(60);
        match self {
            Operation::SentinelRestarts => {
                for i in 0..3 {
                    let sentinel = &mut deployment.sentinel_mut().sentinels[i];
                    let port = sentinel.port;
                    sentinel.terminate().await;
                    events.note(format!("sentinel {port} stopped (SIGTERM)"));
                    sentinel.start_again().await;
                    let started = tokio::time::Instant::now();
                    events.note(format!("sentinel {port} started"));
                    let others: Vec<u16> = deployment
                        .sentinel()
                        .sentinels
                        .iter()
                        .map(|n| n.port)
                        .filter(|p| *p != port)
                        .collect();
                    until("the other sentinels hear the restarted one", || {
                        heard_since(&others, port, started.elapsed())
                    })
                    .await;
                    deployment.await_healthy("sentinel restart", heal).await;
                    events.note(format!("sentinel {port} back in the quorum"));
                }
            }
            Operation::SentinelFrozen => {
                let sentinel = &deployment.sentinel().sentinels[0];
                sentinel.freeze();
                events.note(format!("sentinel {} frozen (SIGSTOP)", sentinel.port));
                tokio::time::sleep(timings.sentinel_fault).await;
                sentinel.thaw();
                events.note(format!("sentinel {} thawed (SIGCONT)", sentinel.port));
                deployment.await_healthy("sentinel thawed", heal).await;
                events.note("healthy".into());
                // Its timer jumped: TILT mode, 30 s in which it flags
                // nothing down. Part of the operation: the next one starts
                // with every sentinel acting again.
                let over = async {
                    while deployment.sentinel_tilted().await {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                };
                tokio::time::timeout(heal, over)
                    .await
                    .expect("TILT mode lasts 30 s");
                events.note("TILT mode over".into());
            }
            Operation::SentinelPartitioned => {
                let s = deployment.sentinel();
                let sentinel = s.sentinels[0].port;
                let id = on_node(sentinel, "SENTINEL", vec!["MYID"])
                    .await
                    .as_string()
                    .expect("SENTINEL MYID");
                // The name it gives each of its links (`sentinel-<id8>-cmd`).
                let name = format!("sentinel-{}", &id[..8]);
                let primary = s.primary_port().await;
                s.proxy(primary).cut_client(&name);
                events.note(format!("sentinel {sentinel} cut off the primary"));
                tokio::time::sleep(timings.sentinel_fault).await;
                s.proxy(primary).heal_client(&name);
                events.note(format!("sentinel {sentinel} reaches the primary again"));
                crate::common::topology::until("the sentinel sees the primary up", || async {
                    let master = on_node(sentinel, "SENTINEL", vec!["MASTER", "mymaster"]).await;
                    let Value::Array(fields) = master else {
                        return false;
                    };
                    fields.chunks(2).any(|kv| {
                        kv[0].as_string().as_deref() == Some("flags")
                            && kv[1].as_string().as_deref() == Some("master")
                    })
                })
                .await;
                deployment
                    .await_healthy("sentinel partition healed", heal)
                    .await;
                events.note("healthy".into());
            }
            Operation::ReplicaRestarts => {
                for (primary, replica) in deployment.all_replicas().await {
                    let observer = Observer::start(deployment, primary, replica).await;
                    let node = deployment.node_mut(replica);
                    node.terminate().await;
                    events.note(format!("replica {replica} stopped (SIGTERM)"));
                    node.start_again().await;
                    deployment.reattach(replica).await;
                    events.note(format!("replica {replica} started again"));
                    deployment.await_in_sync(replica, heal).await;
                    deployment.await_healthy("replica restart", heal).await;
                    events.note(format!("replica {replica} in sync"));
                    events.merge(observer.stop().await);
                }
            }
            Operation::ReplicaKilled => {
                let replica = deployment.replicas().await[0];
                let primary = deployment.primary().await;
                let observer = Observer::start(deployment, primary, replica).await;
                deployment.node_mut(replica).kill().await;
                events.note(format!("replica {replica} killed (SIGKILL)"));
                // Past failure detection, and past Sentinel's 5 s ping rule.
                let detection = match deployment {
                    Deployment::Sentinel(_) => timings.down_after,
                    Deployment::Cluster(_) => timings.node_timeout,
                };
                tokio::time::sleep(detection + Duration::from_secs(6)).await;
                let node = deployment.node_mut(replica);
                node.start_again().await;
                deployment.reattach(replica).await;
                events.note(format!("replica {replica} started again"));
                deployment.await_in_sync(replica, heal).await;
                deployment.await_healthy("killed replica back", heal).await;
                events.note(format!("replica {replica} in sync"));
                events.merge(observer.stop().await);
            }
            Operation::ReplicaSlowed => {
                let replica = deployment.replicas().await[0];
                let primary = deployment.primary().await;
                let observer = Observer::start(deployment, primary, replica).await;
                events.note(format!(
                    "replica {replica}: DEBUG SLEEP {}",
                    SLEEP.as_secs_f64()
                ));
                let seconds = SLEEP.as_secs_f64().to_string();
                on_node(replica, "DEBUG", vec!["SLEEP", &seconds]).await;
                events.note(format!("replica {replica} answers again"));
                deployment.await_healthy("slowed replica", heal).await;
                events.note("healthy".into());
                events.merge(observer.stop().await);
            }
            Operation::PrimaryPaused => {
                let primary = deployment.primary().await;
                let ms = PAUSE.as_millis().to_string();
                on_node(primary, "CLIENT", vec!["PAUSE", &ms, "WRITE"]).await;
                events.note(format!("primary {primary}: CLIENT PAUSE {ms} WRITE"));
                tokio::time::sleep(PAUSE).await;
                events.note("the pause is over".into());
                deployment.await_healthy("paused primary", heal).await;
                events.note("healthy".into());
            }
            Operation::ReplicaFullResync => {
                let replica = deployment.replicas().await[0];
                let primary = deployment.primary().await;
                let observer = Observer::start(deployment, primary, replica).await;
                let node = deployment.node_mut(replica);
                node.terminate().await;
                events.note(format!("replica {replica} stopped (SIGTERM)"));
                // Its RDB file would let it resync partially.
                node.wipe();
                node.start_again().await;
                deployment.reattach(replica).await;
                events.note(format!(
                    "replica {replica} started with an empty disk: full resync"
                ));
                let long = Duration::from_secs(300);
                deployment.await_in_sync(replica, long).await;
                deployment.await_healthy("full resync", long).await;
                events.note(format!("replica {replica} in sync"));
                events.merge(observer.stop().await);
            }
            Operation::BusCut => {
                let replica = deployment.replicas().await[0];
                let primary = deployment.primary().await;
                let observer = Observer::start(deployment, primary, replica).await;
                let cluster = deployment.cluster();
                cluster.isolate_bus(replica).await;
                events.note(format!("replica {replica} cut off the cluster bus"));
                tokio::time::sleep(timings.node_timeout * 2 + Duration::from_secs(2)).await;
                cluster.rejoin_bus(replica).await;
                events.note(format!("replica {replica} back on the bus"));
                deployment.await_healthy("bus healed", heal).await;
                events.note("healthy".into());
                events.merge(observer.stop().await);
            }
            Operation::DrReplicaStopped => {
                let dr = *deployment.replicas().await.last().unwrap();
                let primary = deployment.primary().await;
                let observer = Observer::start(deployment, primary, dr).await;
                deployment.node_mut(dr).freeze();
                events.note(format!("priority-0 replica {dr} frozen (SIGSTOP)"));
                tokio::time::sleep(timings.sentinel_fault).await;
                deployment.node_mut(dr).thaw();
                events.note(format!("priority-0 replica {dr} thawed (SIGCONT)"));
                deployment.await_in_sync(dr, heal).await;
                deployment
                    .await_healthy("priority-0 replica back", heal)
                    .await;
                events.note(format!("replica {dr} in sync"));
                events.merge(observer.stop().await);
            }
            Operation::ReplicationBroken => {
                let replica = deployment.replicas().await[0];
                let primary = deployment.primary().await;
                let observer = Observer::start(deployment, primary, replica).await;
                // Its own limit (the deployment's settings for this run):
                // past the node timeout, 1 s (ping period) + the node
                // timeout x 1.
                let user = "routine-replication";
                on_node(
                    primary,
                    "ACL",
                    vec!["SETUSER", user, "on", ">routine", "~*", "+@all"],
                )
                .await;
                on_node(replica, "CONFIG", vec!["SET", "masteruser", user]).await;
                on_node(replica, "CONFIG", vec!["SET", "masterauth", "routine"]).await;
                on_node(primary, "ACL", vec!["SETUSER", user, "off"]).await;
                on_node(replica, "CLIENT", vec!["KILL", "TYPE", "master"]).await;
                events.note(format!(
                    "replica {replica}: replication refused (its user switched off on the primary)"
                ));
                tokio::time::sleep(broken_for(timings)).await;
                on_node(primary, "ACL", vec!["SETUSER", user, "on"]).await;
                events.note(format!("replica {replica}: replication allowed again"));
                deployment.await_in_sync(replica, heal).await;
                deployment.await_healthy("replication back", heal).await;
                events.note(format!("replica {replica} in sync"));
                events.merge(observer.stop().await);
            }
        }
        events.0.sort_by_key(|(at, _)| *at);
        events.0
    }
}

/// How long a replica's replication stays refused: its limit (the node
/// timeout, 1 s, the node timeout again) and 5 s more.
fn broken_for(timings: &Timings) -> Duration {
    timings.node_timeout * 2 + Duration::from_secs(6)
}

/// Whether the sentinel on `port` lists a replica of priority 0.
async fn lists_priority_zero(port: u16) -> bool {
    let Value::Array(replicas) = on_node(port, "SENTINEL", vec!["REPLICAS", "mymaster"]).await
    else {
        return false;
    };
    replicas.iter().any(|fields| {
        let Value::Array(fields) = fields else {
            return false;
        };
        fields.chunks(2).any(|kv| {
            kv[0].as_string().as_deref() == Some("slave-priority")
                && kv[1].as_string().as_deref() == Some("0")
        })
    })
}

#[derive(Default)]
struct Events(Vec<(i64, String)>);

impl Events {
    fn note(&mut self, what: String) {
        self.0.push((now_us(), what));
    }

    fn merge(&mut self, observed: Vec<(i64, String)>) {
        self.0.extend(observed);
    }
}

/// Whether one of the sentinels on `others` has had a hello message from
/// the sentinel on `port` within `since`: it announces itself again.
async fn heard_since(others: &[u16], port: u16, since: Duration) -> bool {
    for other in others {
        let Value::Array(sentinels) =
            on_node(*other, "SENTINEL", vec!["SENTINELS", "mymaster"]).await
        else {
            continue;
        };
        for fields in &sentinels {
            let Value::Array(fields) = fields else {
                continue;
            };
            let get = |name: &str| {
                fields
                    .chunks(2)
                    .find(|kv| kv[0].as_string().as_deref() == Some(name))
                    .and_then(|kv| kv[1].as_string())
            };
            let hello = get("last-hello-message").and_then(|v| v.parse::<u128>().ok());
            if get("port").and_then(|p| p.parse::<u16>().ok()) == Some(port)
                && hello.is_some_and(|ms| ms < since.as_millis())
            {
                return true;
            }
        }
    }
    false
}

/// A client of the primary's database for the large data set.
async fn populate_client(primary: u16) -> Client {
    let url = format!("redis://127.0.0.1:{primary}/{POPULATE_DB}");
    let config = fred::types::config::Config::from_url(&url).unwrap();
    let client = Builder::from_config(config).build().unwrap();
    client.init().await.unwrap();
    client
}
