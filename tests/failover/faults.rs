//! The deployments under test and the faults injected into them.

use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};

use crate::common::java::JavaPeer;
use crate::common::topology::{node_client, Cluster, Sentinel};
use crate::workload::TAG;

/// The faults, each injected into the primary that holds the workload's
/// locks (or one of its replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Fault {
    /// `SENTINEL FAILOVER` / `CLUSTER FAILOVER`.
    Graceful,
    /// SIGKILL of the primary; it comes back with the RDB file of its last
    /// full sync (if it had one), and the deployment makes it a replica.
    Kill,
    /// SIGSTOP of the primary past failure detection, then SIGCONT: the old
    /// primary comes back while another has taken over.
    Pause,
    /// SIGSTOP of one replica for 2.5 s (past failure detection): `WAIT`
    /// cannot be satisfied by it.
    ReplicaPause,
    /// The primary's replication links cut for 2.5 s (clients and
    /// sentinels still reach it), then the primary killed while cut: the
    /// replica promoted has nothing written during the partition (Sentinel
    /// only).
    Partition,
    /// Two faults: both replicas SIGSTOPped past failure detection (writes
    /// go on, at risk, with no replica to confirm them), then the primary's
    /// replication links cut, the replicas resumed, and once every sentinel
    /// counts them again the primary killed while still cut: the replica
    /// promoted lacks every write made since the first fault (Sentinel
    /// only; issue 37 item 2).
    ReplicasAwayThenKill,
    /// The bus link between the primary and its replica cut (each still
    /// reaches every other node, so only the primary flags the replica
    /// `fail?`), then the primary killed while it is cut (Cluster only).
    BusLinkCutThenKill,
}

impl Fault {
    /// Every fault of a Sentinel deployment whose clients list every
    /// sentinel.
    const SENTINEL: [Fault; 6] = [
        Fault::Graceful,
        Fault::Kill,
        Fault::Pause,
        Fault::ReplicaPause,
        Fault::Partition,
        Fault::ReplicasAwayThenKill,
    ];
    /// The cluster's: its nodes' buses are behind proxies, their
    /// replication links are not.
    const CLUSTER: [Fault; 5] = [
        Fault::Graceful,
        Fault::Kill,
        Fault::Pause,
        Fault::ReplicaPause,
        Fault::BusLinkCutThenKill,
    ];

    /// Whether the fault moves the primary.
    pub fn fails_over(self) -> bool {
        self != Fault::ReplicaPause
    }
}

/// How long a failover may take before the episode counts as failed.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);
/// How long the deployment may take to heal after it.
const HEAL_LIMIT: Duration = Duration::from_secs(60);

/// What injecting one fault came to.
pub enum Injected {
    /// Done, healed; whether the primary changed.
    Done { failed_over: bool },
    /// The failover did not complete, or the deployment did not heal: what
    /// happened.
    Failed(String),
}

pub enum Deployment {
    Sentinel(Box<Sentinel>, Listing),
    Cluster(Cluster),
}

/// Which sentinels the clients' address lists.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// All three.
    Every,
    /// The first one only, as one address in front of the sentinels (a
    /// Kubernetes Service) gives them; every failover is run by one the
    /// address does not list.
    One,
}

impl Deployment {
    /// Sentinel, every data node behind a proxy that can cut its
    /// replication links.
    pub async fn sentinel() -> Self {
        Deployment::Sentinel(Box::new(Sentinel::start_proxied().await), Listing::Every)
    }

    /// Sentinel, the clients' address listing one sentinel of three.
    pub async fn sentinel_one_address() -> Self {
        Deployment::Sentinel(Box::new(Sentinel::start_proxied().await), Listing::One)
    }

    /// Cluster, every node's bus behind a proxy that can cut one link.
    pub async fn cluster() -> Self {
        Deployment::Cluster(Cluster::start_bus_proxied(&[]).await)
    }

    /// The faults this deployment is put through.
    pub fn faults(&self) -> &'static [Fault] {
        match self {
            Deployment::Sentinel(_, Listing::Every) => &Fault::SENTINEL,
            // What the address changes: whose failover the clients hear of.
            Deployment::Sentinel(_, Listing::One) => &Fault::SENTINEL[..1],
            Deployment::Cluster(_) => &Fault::CLUSTER,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Deployment::Sentinel(_, Listing::Every) => "sentinel",
            Deployment::Sentinel(_, Listing::One) => "sentinel-1-address",
            Deployment::Cluster(_) => "cluster",
        }
    }

    pub fn url(&self) -> String {
        match self {
            Deployment::Sentinel(s, Listing::Every) => s.url(),
            Deployment::Sentinel(s, Listing::One) => s.url_of_first(),
            Deployment::Cluster(c) => c.url(),
        }
    }

    /// A JVM Redisson 4.7.0 client of this deployment (its default
    /// `checkLockSyncedSlaves`).
    pub async fn jvm_peer(&self, watchdog: Duration) -> JavaPeer {
        let (profile, version) = crate::common::java::NEWEST_VERSIONS[0];
        let ms = watchdog.as_millis() as u64;
        match self {
            Deployment::Sentinel(s, _) => {
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

    /// The primary the workload's locks live on.
    async fn primary(&self) -> u16 {
        match self {
            Deployment::Sentinel(s, _) => s.primary_port().await,
            Deployment::Cluster(c) => c.owner_of(redisson_lock::naming::slot(TAG)).await,
        }
    }

    async fn replica_of(&self, primary: u16) -> u16 {
        match self {
            Deployment::Sentinel(s, _) => s
                .data_nodes()
                .map(|n| n.port)
                .find(|p| *p != primary)
                .unwrap(),
            Deployment::Cluster(c) => c.replica_of(primary).await,
        }
    }

    async fn is_healthy(&self) -> bool {
        match self {
            Deployment::Sentinel(s, _) => s.is_healthy().await,
            Deployment::Cluster(c) => c.is_healthy().await,
        }
    }

    fn node(&self, port: u16) -> &crate::common::RedisServer {
        match self {
            Deployment::Sentinel(s, _) => s.node(port),
            Deployment::Cluster(c) => c.node(port),
        }
    }

    fn node_mut(&mut self, port: u16) -> &mut crate::common::RedisServer {
        match self {
            Deployment::Sentinel(s, _) => s.node_mut(port),
            Deployment::Cluster(c) => c.node_mut(port),
        }
    }

    /// Waits until a node other than `old` is the primary of the
    /// workload's locks, as seen from nodes that answer.
    /// The new primary, once the deployment agrees on one; `None` when no
    /// failover completed within [`FAILOVER_LIMIT`].
    async fn await_new_primary(&self, old: u16) -> Option<u16> {
        match self {
            Deployment::Sentinel(s, _) => s.new_primary_within(old, FAILOVER_LIMIT).await,
            Deployment::Cluster(c) => {
                let slot = redisson_lock::naming::slot(TAG);
                let alive: Vec<u16> = c
                    .nodes
                    .iter()
                    .map(|n| n.port)
                    .filter(|p| *p != old)
                    .collect();
                let found = async {
                    loop {
                        let mut owners = vec![];
                        for p in &alive {
                            owners.push(slot_owner(*p, slot).await);
                        }
                        let agreed = owners.windows(2).all(|w| w[0] == w[1]);
                        match owners.first() {
                            Some(Some(owner)) if agreed && *owner != old => return *owner,
                            _ => tokio::time::sleep(Duration::from_millis(20)).await,
                        }
                    }
                };
                tokio::time::timeout(FAILOVER_LIMIT, found).await.ok()
            }
        }
    }

    /// SIGKILLs `primary`, waits for another to take over, and restarts it
    /// on its port, with the RDB of its last full sync, as a supervisor
    /// would (see docs/interop.md): the deployment demotes it. False when
    /// no failover completed within [`FAILOVER_LIMIT`].
    async fn kill_and_fail_over(&mut self, primary: u16) -> bool {
        self.node_mut(primary).kill().await;
        let failed_over = self.await_new_primary(primary).await.is_some();
        self.node_mut(primary).restart().await;
        failed_over
    }

    /// Injects `fault`, waits until the deployment has recovered and is
    /// healthy again. A failover that does not complete, or a deployment
    /// that does not heal, is an outcome of the episode (with what every node
    /// and sentinel says), not a panic: the run goes on.
    pub async fn inject(&mut self, fault: Fault) -> Injected {
        let primary = self.primary().await;
        let mut failed = None;
        let mut no_failover = |what: &str| failed = Some(format!("{fault:?}: {what}"));
        match fault {
            Fault::Graceful => {
                match self {
                    Deployment::Sentinel(s, Listing::Every) => {
                        s.on_sentinels_first(&["FAILOVER", "mymaster"]).await
                    }
                    // The last sentinel, which the address does not list.
                    Deployment::Sentinel(s, Listing::One) => {
                        s.on_sentinel(2, &["FAILOVER", "mymaster"]).await
                    }
                    Deployment::Cluster(c) => {
                        let replica = c.replica_of(primary).await;
                        let node = node_client(replica).await;
                        let _: String = node
                            .custom(
                                CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
                                vec!["FAILOVER"],
                            )
                            .await
                            .unwrap();
                        let _ = node.quit().await;
                    }
                }
                if self.await_new_primary(primary).await.is_none() {
                    no_failover("no new primary");
                }
            }
            Fault::Kill => {
                if !self.kill_and_fail_over(primary).await {
                    no_failover("no new primary after the kill");
                }
            }
            Fault::Pause => {
                self.node(primary).freeze();
                if self.await_new_primary(primary).await.is_none() {
                    no_failover("no new primary while the old one was paused");
                }
                self.node(primary).thaw();
            }
            Fault::Partition => {
                let Deployment::Sentinel(s, _) = &*self else {
                    unreachable!("partitions are injected on Sentinel only")
                };
                s.proxy(primary).partition();
                // How long the partition lasts before the primary dies.
                tokio::time::sleep(Duration::from_millis(2500)).await;
                if !self.kill_and_fail_over(primary).await {
                    no_failover("no new primary after the partitioned primary died");
                }
                let Deployment::Sentinel(s, _) = &*self else {
                    unreachable!()
                };
                s.proxy(primary).heal();
            }
            Fault::ReplicasAwayThenKill => {
                let Deployment::Sentinel(s, _) = &*self else {
                    unreachable!("the double fault is injected on Sentinel only")
                };
                // As the sentinels know them: by their proxies' ports.
                let replicas: Vec<u16> = s
                    .proxies
                    .iter()
                    .map(|p| p.port)
                    .filter(|p| *p != primary)
                    .collect();
                for r in &replicas {
                    s.node(*r).freeze();
                }
                // Past failure detection (1 s): every sentinel flags them down.
                for r in &replicas {
                    s.await_replica_down(*r, true).await;
                }
                s.proxy(primary).partition();
                for r in &replicas {
                    s.node(*r).thaw();
                }
                // Promotable again (no longer down), lacking what was
                // written since they stopped.
                for r in &replicas {
                    s.await_replica_down(*r, false).await;
                }
                if !self.kill_and_fail_over(primary).await {
                    no_failover("no new primary after the primary died with its replicas behind");
                }
                let Deployment::Sentinel(s, _) = &*self else {
                    unreachable!()
                };
                s.proxy(primary).heal();
            }
            Fault::BusLinkCutThenKill => {
                let Deployment::Cluster(c) = &*self else {
                    unreachable!("bus links are cut on the cluster only")
                };
                let replica = c.replica_of(primary).await;
                c.cut_bus_link(primary, replica).await;
                // The primary alone flags its replica `fail?` (past the
                // node timeout, 1 s); the others still reach it.
                crate::common::topology::until("the primary flags its replica fail?", || async {
                    c.flags(primary, replica).await.iter().any(|f| f == "fail?")
                })
                .await;
                if !self.kill_and_fail_over(primary).await {
                    no_failover("no new primary after the primary with one bad link died");
                }
                let Deployment::Cluster(c) = &*self else {
                    unreachable!()
                };
                c.heal_bus_link(primary, replica).await;
            }
            Fault::ReplicaPause => {
                let replica = self.replica_of(primary).await;
                self.node(replica).freeze();
                // How long the fault lasts: past failure detection (1 s).
                tokio::time::sleep(Duration::from_millis(2500)).await;
                self.node(replica).thaw();
            }
        }
        // Polled here rather than with `await_healthy`, whose own hang guard
        // would panic before the deployment could be described.
        let healed = async {
            while !self.is_healthy().await {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let healed = tokio::time::timeout(HEAL_LIMIT, healed).await.is_ok();
        if failed.is_some() || !healed {
            let what = failed.unwrap_or_else(|| format!("{fault:?}: did not heal"));
            let described = self.describe().await;
            eprintln!("FAILED FAULT {what}\n{described}");
            return Injected::Failed(what);
        }
        Injected::Done {
            failed_over: fault.fails_over(),
        }
    }

    /// What every node and sentinel says, for a failure message.
    async fn describe(&self) -> String {
        let mut out = String::new();
        let nodes: Vec<u16> = match self {
            Deployment::Sentinel(s, _) => {
                for sentinel in &s.sentinels {
                    let c = node_client(sentinel.port).await;
                    let ask = |args: Vec<&'static str>| {
                        c.custom::<Value, _>(
                            CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
                            args,
                        )
                    };
                    let master = ask(vec!["GET-MASTER-ADDR-BY-NAME", "mymaster"]).await;
                    let replicas = ask(vec!["REPLICAS", "mymaster"]).await;
                    out += &format!(
                        "sentinel {}: master {master:?}\n  replicas {replicas:?}\n",
                        sentinel.port
                    );
                    let _ = c.quit().await;
                }
                for proxy in &s.proxies {
                    out += &format!("proxy {}\n", proxy.port);
                }
                s.data_nodes().map(|n| n.port).collect()
            }
            Deployment::Cluster(c) => c.nodes.iter().map(|n| n.port).collect(),
        };
        for port in nodes {
            let c = node_client(port).await;
            let info: Result<String, _> = c.info(Some(fred::types::InfoKind::Replication)).await;
            let info = info.map(|i| i.replace("\r\n", " | "));
            out += &format!("node {port}: {info:?}\n");
            let _ = c.quit().await;
        }
        out
    }
}

async fn slot_owner(port: u16, slot: u16) -> Option<u16> {
    let c = node_client(port).await;
    let slots: Result<Value, _> = c
        .custom(
            CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
            vec!["SLOTS"],
        )
        .await;
    let _ = c.quit().await;
    let Ok(Value::Array(ranges)) = slots else {
        return None;
    };
    ranges.iter().find_map(|r| {
        let Value::Array(r) = r else { return None };
        let start = r.first()?.as_i64()?;
        let end = r.get(1)?.as_i64()?;
        if !(start..=end).contains(&i64::from(slot)) {
            return None;
        }
        let Value::Array(primary) = r.get(2)? else {
            return None;
        };
        primary.get(1)?.as_i64().map(|p| p as u16)
    })
}
