//! The deployments the operations run on, at the timings of a run, and
//! what the suite reads of them: the primary the locks live on, and
//! whether it changed.

use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};

use crate::common::java::JavaPeer;
use crate::common::topology::{node_client, on_node, Cluster, Sentinel};
use crate::TAG;

/// The timings and sizes of one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Timings {
    /// `short` or `production`.
    pub name: &'static str,
    /// Sentinel's `down-after-milliseconds`.
    pub down_after: Duration,
    /// `cluster-node-timeout`.
    pub node_timeout: Duration,
    /// `lockWatchdogTimeout`, for the crate and Redisson alike.
    pub watchdog: Duration,
    /// How long a sentinel stays frozen, or cut off the primary.
    pub sentinel_fault: Duration,
    /// Keys in the data set a restarted replica copies in full.
    pub populate: u64,
    /// `repl-diskless-sync-delay 0` (a restarted replica syncs at once)
    /// instead of the server's default 5 s: the bounded run's speed.
    pub sync_at_once: bool,
    /// The operations on shapes beyond the suite's own (a priority-0
    /// replica, a replica whose replication is refused): the full run only,
    /// as `tests/sentinel.rs` and `tests/cluster.rs` test them in CI.
    pub shapes: bool,
}

impl Timings {
    /// The bounded run (CI): short timings, small data.
    pub fn bounded() -> Self {
        Timings {
            name: "short",
            down_after: Duration::from_secs(1),
            node_timeout: Duration::from_secs(1),
            watchdog: Duration::from_secs(3),
            sentinel_fault: Duration::from_secs(10),
            populate: 200_000,
            sync_at_once: true,
            shapes: false,
        }
    }

    /// The full run at short timings: full durations and data.
    pub fn short() -> Self {
        Timings {
            sentinel_fault: Duration::from_secs(60),
            populate: 3_000_000,
            sync_at_once: false,
            shapes: true,
            ..Self::bounded()
        }
    }

    /// The full run at production defaults: Sentinel's and the cluster's,
    /// Redisson's watchdog.
    pub fn production() -> Self {
        Timings {
            name: "production",
            down_after: Duration::from_secs(30),
            node_timeout: Duration::from_secs(15),
            watchdog: Duration::from_secs(30),
            ..Self::short()
        }
    }

    /// Flags of every data node.
    fn server_flags(&self) -> Vec<String> {
        let mut flags: Vec<String> = crate::common::debug_command_flags()
            .into_iter()
            .map(str::to_string)
            .collect();
        if self.sync_at_once {
            flags.extend(["--repl-diskless-sync-delay".into(), "0".into()]);
        }
        flags
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sentinel,
    Cluster,
}

pub enum Deployment {
    /// 1 primary, 2 replicas (each behind a proxy), 3 sentinels.
    Sentinel(Box<Sentinel>),
    /// 3 primaries with 1 replica each, every bus port behind a proxy.
    Cluster(Cluster),
}

/// What says whether a failover happened: the primary of the locks and
/// the configuration epoch (Sentinel's, or the cluster's current epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    primary: u16,
    epoch: u64,
}

impl Deployment {
    pub async fn start(kind: Kind, timings: &Timings) -> Self {
        let flags = timings.server_flags();
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        match kind {
            Kind::Sentinel => {
                let s = Sentinel::start_proxied_with(&flags).await;
                let down_after = timings.down_after.as_millis().to_string();
                s.on_sentinels(&["SET", "mymaster", "down-after-milliseconds", &down_after])
                    .await;
                if timings.name == "production" {
                    // Sentinel's default; the test deployments use 5 s.
                    s.on_sentinels(&["SET", "mymaster", "failover-timeout", "180000"])
                        .await;
                }
                Deployment::Sentinel(Box::new(s))
            }
            Kind::Cluster => {
                let timeout = timings.node_timeout.as_millis().to_string();
                let mut all = flags.clone();
                all.extend(["--cluster-node-timeout", timeout.as_str()]);
                if timings.shapes {
                    // A replica whose replication is refused is past its
                    // data-age limit within seconds (`ReplicationBroken`):
                    // the node timeout twice and 1 s, not the 175 s of the
                    // defaults. Set from the start, as an operator would.
                    all.extend([
                        "--cluster-replica-validity-factor",
                        "1",
                        "--repl-ping-replica-period",
                        "1",
                    ]);
                }
                Deployment::Cluster(Cluster::start_bus_proxied(&all).await)
            }
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Deployment::Sentinel(_) => "sentinel",
            Deployment::Cluster(_) => "cluster",
        }
    }

    pub fn url(&self) -> String {
        match self {
            Deployment::Sentinel(s) => s.url(),
            Deployment::Cluster(c) => c.url(),
        }
    }

    /// A JVM Redisson 4.7.0 client of this deployment, at Redisson's
    /// defaults but the watchdog.
    pub async fn jvm_peer(&self, watchdog: Duration) -> JavaPeer {
        let (profile, version) = crate::common::java::NEWEST_VERSIONS[0];
        let ms = watchdog.as_millis() as u64;
        match self {
            Deployment::Sentinel(s) => {
                let sentinels = s
                    .sentinels
                    .iter()
                    .map(|n| format!("redis://127.0.0.1:{}", n.port))
                    .collect::<Vec<_>>()
                    .join(",");
                JavaPeer::start_sentinel(profile, version, &sentinels, "mymaster", ms).await
            }
            Deployment::Cluster(c) => {
                JavaPeer::start_cluster(profile, version, &c.addresses(), ms).await
            }
        }
    }

    pub fn sentinel(&self) -> &Sentinel {
        match self {
            Deployment::Sentinel(s) => s,
            Deployment::Cluster(_) => panic!("not a Sentinel deployment"),
        }
    }

    pub fn sentinel_mut(&mut self) -> &mut Sentinel {
        match self {
            Deployment::Sentinel(s) => s,
            Deployment::Cluster(_) => panic!("not a Sentinel deployment"),
        }
    }

    pub fn cluster(&self) -> &Cluster {
        match self {
            Deployment::Cluster(c) => c,
            Deployment::Sentinel(_) => panic!("not a cluster"),
        }
    }

    /// The primary the locks live on, by the port clients reach it on (a
    /// Sentinel node's proxy). Asks the sentinels or the nodes: not while
    /// one of them is frozen.
    pub async fn primary(&self) -> u16 {
        match self {
            Deployment::Sentinel(s) => s.primary_port().await,
            Deployment::Cluster(c) => c.owner_of(redisson_lock::naming::slot(TAG)).await,
        }
    }

    /// The real ports of the replicas of the locks' primary.
    pub async fn replicas(&self) -> Vec<u16> {
        let primary = self.primary().await;
        match self {
            Deployment::Sentinel(s) => {
                let real = s.node(primary).port;
                s.data_nodes()
                    .map(|n| n.port)
                    .filter(|p| *p != real)
                    .collect()
            }
            Deployment::Cluster(c) => vec![c.replica_of(primary).await],
        }
    }

    /// Every replica of the deployment (real ports), each with its primary.
    pub async fn all_replicas(&self) -> Vec<(u16, u16)> {
        match self {
            Deployment::Sentinel(_) => {
                let primary = self.primary().await;
                let replicas = self.replicas().await;
                replicas.into_iter().map(|r| (primary, r)).collect()
            }
            Deployment::Cluster(c) => {
                let mut replicas = vec![];
                for primary in c.primaries().await {
                    replicas.push((primary, c.replica_of(primary).await));
                }
                replicas
            }
        }
    }

    /// Whether a sentinel is in TILT mode (after it was stopped, its timer
    /// jumped: for 30 s it acts on nothing, flags no replica down).
    pub async fn sentinel_tilted(&self) -> bool {
        for sentinel in &self.sentinel().sentinels {
            let info = on_node(sentinel.port, "INFO", vec!["sentinel"]).await;
            if info
                .as_string()
                .unwrap_or_default()
                .contains("sentinel_tilt:1")
            {
                return true;
            }
        }
        false
    }

    pub fn node_mut(&mut self, port: u16) -> &mut crate::common::RedisServer {
        match self {
            Deployment::Sentinel(s) => s.node_mut(port),
            Deployment::Cluster(c) => c.node_mut(port),
        }
    }

    /// After a replica on `port` started again: on Sentinel it replicates
    /// from the primary of now (its command line names the first one).
    pub async fn reattach(&self, port: u16) {
        if let Deployment::Sentinel(s) = self {
            let primary = s.primary_port().await.to_string();
            on_node(port, "REPLICAOF", vec!["127.0.0.1", &primary]).await;
        }
    }

    /// Waits until the replica on `port` says it has synced with its
    /// primary (`master_link_status:up`, no sync in progress): the
    /// primary's own view of a replica that just went away can lag.
    pub async fn await_in_sync(&self, port: u16, bound: Duration) {
        let synced = async {
            loop {
                let info = on_node(port, "INFO", vec!["replication"]).await;
                let info = info.as_string().unwrap_or_default();
                if info.contains("master_link_status:up")
                    && info.contains("master_sync_in_progress:0")
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        if tokio::time::timeout(bound, synced).await.is_err() {
            panic!(
                "replica {port} not in sync after {bound:?}\n{}",
                self.describe().await
            );
        }
    }

    pub async fn marker(&self) -> Marker {
        let primary = self.primary().await;
        let epoch = match self {
            Deployment::Sentinel(s) => {
                let mut epoch = 0;
                for sentinel in &s.sentinels {
                    let reply =
                        on_node(sentinel.port, "SENTINEL", vec!["MASTER", "mymaster"]).await;
                    epoch = epoch.max(field(&reply, "config-epoch").unwrap_or(0));
                }
                epoch
            }
            Deployment::Cluster(c) => {
                let mut epoch = 0;
                for node in &c.nodes {
                    let client = node_client(node.port).await;
                    let info: String = client
                        .custom(
                            CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
                            vec!["INFO"],
                        )
                        .await
                        .unwrap();
                    let _ = client.quit().await;
                    let current = info
                        .lines()
                        .find_map(|l| l.strip_prefix("cluster_current_epoch:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    epoch = epoch.max(current);
                }
                epoch
            }
        };
        Marker { primary, epoch }
    }

    pub async fn is_healthy(&self) -> bool {
        match self {
            Deployment::Sentinel(s) => s.is_healthy().await,
            Deployment::Cluster(c) => c.is_healthy().await && c.all_linked().await,
        }
    }

    /// Waits until the deployment is healthy (every replica in sync, every
    /// sentinel or node seeing every other), within `bound`; describes it
    /// when it does not come.
    pub async fn await_healthy(&self, what: &str, bound: Duration) {
        let healed = async {
            while !self.is_healthy().await {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        if tokio::time::timeout(bound, healed).await.is_err() {
            panic!(
                "{what}: the deployment is not healthy after {bound:?}\n{}",
                self.describe().await
            );
        }
    }

    /// What every node (and sentinel) says, for a failure message.
    async fn describe(&self) -> String {
        let mut out = String::new();
        let nodes: Vec<u16> = match self {
            Deployment::Sentinel(s) => {
                for sentinel in &s.sentinels {
                    let master =
                        on_node(sentinel.port, "SENTINEL", vec!["MASTER", "mymaster"]).await;
                    let replicas =
                        on_node(sentinel.port, "SENTINEL", vec!["REPLICAS", "mymaster"]).await;
                    out += &format!(
                        "sentinel {}: {master:?}\n  replicas {replicas:?}\n",
                        sentinel.port
                    );
                }
                s.data_nodes().map(|n| n.port).collect()
            }
            Deployment::Cluster(c) => {
                let nodes = on_node(c.nodes[0].port, "CLUSTER", vec!["NODES"]).await;
                out += &format!("cluster nodes: {nodes:?}\n");
                c.nodes.iter().map(|n| n.port).collect()
            }
        };
        for port in nodes {
            let info = on_node(port, "INFO", vec!["replication"]).await;
            let info = info.as_string().unwrap_or_default().replace("\r\n", " | ");
            out += &format!("node {port}: {info}\n");
        }
        out
    }
}

/// A field of a flat `[name, value, ...]` reply, as a number.
pub fn field(reply: &Value, name: &str) -> Option<u64> {
    let Value::Array(fields) = reply else {
        return None;
    };
    fields
        .chunks(2)
        .find(|kv| kv[0].as_string().as_deref() == Some(name))
        .and_then(|kv| kv[1].as_string())
        .and_then(|v| v.parse().ok())
}
