//! Real local topologies started by the tests: a Redis Cluster of 3 primaries
//! with 3 replicas (joined by `redis-cli --cluster create`) and a Sentinel
//! deployment of 1 primary, 2 replicas and 3 sentinels.

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};

use super::firewall::{self, Addresses};
use super::{within, RedisServer};

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "redisson-lock-{what}-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free port whose cluster bus port (+10000) is free too.
fn free_cluster_port() -> u16 {
    loop {
        let l = StdListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if port < 55_000 && StdListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Polls `check` until it holds. Redis has no event for topology changes
/// (cluster state, replication links), so this re-reads them.
pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    within(what, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// A plain client for one node (no cluster routing). A node loading its
/// data set (a replica right after a full sync) refuses fred's connect
/// `PING` with `LOADING`: that is waited out, within `HANG`.
pub async fn node_client(port: u16) -> Client {
    within(&format!("node {port} still loading its data set"), async {
        loop {
            let config =
                fred::types::config::Config::from_url(&format!("redis://127.0.0.1:{port}"))
                    .unwrap();
            // Sentinel ends every reconfiguration with `CLIENT KILL TYPE
            // normal`: without a policy, fred keeps the commands sent after
            // that queued forever. Reconnect, and bound every command.
            let client = Builder::from_config(config)
                .set_policy(fred::types::config::ReconnectPolicy::new_constant(0, 50))
                .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
                .build()
                .unwrap();
            match client.init().await {
                Ok(_) => return client,
                // Still loading, or the connection cut while it was made
                // (Sentinel's `CLIENT KILL` at a reconfiguration resets it:
                // seen once in CI): asked again, within the bound above.
                Err(e)
                    if e.to_string().contains("LOADING")
                        || e.to_string().contains("Connection reset") =>
                {
                    let _ = client.quit().await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("cannot connect to node {port}: {e}"),
            }
        }
    })
    .await
}

async fn info_field(client: &Client, section: &str, field: &str) -> Option<String> {
    let info: String = client
        .custom(
            CustomCommand::new_static("INFO", ClusterHash::Random, false),
            vec![section],
        )
        .await
        .ok()?;
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().to_string())
}

/// A Redis Cluster of 3 primaries, each with 1 replica.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
    /// With `start_bus_proxied`: a proxy in front of each node's bus port
    /// (in the order of `nodes`), which it announces as its bus port.
    pub bus: Vec<super::bus::BusProxy>,
    replicas: usize,
    _dir: Scratch,
}

impl Cluster {
    pub async fn start() -> Self {
        Self::start_with_replicas(1).await
    }

    /// 3 primaries with `replicas` replicas each.
    pub async fn start_with_replicas(replicas: usize) -> Self {
        Self::start_with(replicas, &[]).await
    }

    /// 3 primaries with `replicas` replicas each, every node started with
    /// `extra` flags as well.
    pub async fn start_with(replicas: usize, extra: &[&str]) -> Self {
        let dir = Scratch::new("cluster");
        let mut nodes = Vec::new();
        for _ in 0..3 * (1 + replicas) {
            let (node, _) = start_node(&dir, extra, false).await;
            nodes.push(node);
        }
        Self::join(nodes, vec![], replicas, dir).await
    }

    /// 3 primaries with 1 replica each, every node started with `extra`
    /// flags as well, and behind a `BusProxy` on its bus port (announced
    /// with `cluster-announce-bus-port`), so that a node can be cut off the
    /// bus (`isolate_bus`) while clients and its replication link reach it.
    pub async fn start_bus_proxied(extra: &[&str]) -> Self {
        let dir = Scratch::new("cluster");
        let (mut nodes, mut bus) = (vec![], vec![]);
        for _ in 0..6 {
            let (node, proxy) = start_node(&dir, extra, true).await;
            nodes.push(node);
            bus.extend(proxy);
        }
        Self::join(nodes, bus, 1, dir).await
    }

    /// Joins started nodes into a cluster with `replicas` per primary.
    async fn join(
        nodes: Vec<RedisServer>,
        bus: Vec<super::bus::BusProxy>,
        replicas: usize,
        dir: Scratch,
    ) -> Self {
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = tokio::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .await
            .expect("redis-cli (from the redis-tools package) is needed for cluster tests");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Cluster {
            nodes,
            bus,
            replicas,
            _dir: dir,
        };
        cluster.await_healthy().await;
        cluster
    }

    /// The node id of the node on `port` (`CLUSTER MYID`).
    pub async fn node_id(&self, port: u16) -> String {
        on_node(port, "CLUSTER", vec!["MYID"])
            .await
            .as_string()
            .unwrap_or_else(|| panic!("CLUSTER MYID on {port}"))
    }

    /// Cuts the node on `port` off the cluster bus, both ways
    /// (`start_bus_proxied` only): nothing reaches its bus port, and the
    /// links it opens to the others are cut at their proxies. Clients and
    /// its replication link still reach it.
    pub async fn isolate_bus(&self, port: u16) {
        let id = self.node_id(port).await;
        for (node, proxy) in self.nodes.iter().zip(&self.bus) {
            if node.port == port {
                proxy.isolate();
            } else {
                proxy.cut_sender(&id);
            }
        }
    }

    /// Cuts the bus link between the nodes on `a` and `b` only, both ways
    /// (`start_bus_proxied` only): each still reaches every other node, and
    /// clients and replication links are untouched.
    pub async fn cut_bus_link(&self, a: u16, b: u16) {
        let (id_a, id_b) = (self.node_id(a).await, self.node_id(b).await);
        for (node, proxy) in self.nodes.iter().zip(&self.bus) {
            if node.port == a {
                proxy.cut_sender(&id_b);
            } else if node.port == b {
                proxy.cut_sender(&id_a);
            }
        }
    }

    /// The flags the node on `on` gives the node on `of` (`CLUSTER NODES`:
    /// `slave`, `master`, `fail?`, ...); empty when it does not answer.
    pub async fn flags(&self, on: u16, of: u16) -> Vec<String> {
        let id = self.node_id(of).await;
        let nodes = on_node(on, "CLUSTER", vec!["NODES"])
            .await
            .as_string()
            .unwrap_or_default();
        nodes
            .lines()
            .find(|l| l.starts_with(&id))
            .and_then(|l| l.split_whitespace().nth(2))
            .map(|f| f.split(',').map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// Undoes `cut_bus_link`.
    pub async fn heal_bus_link(&self, a: u16, b: u16) {
        let (id_a, id_b) = (self.node_id(a).await, self.node_id(b).await);
        for (node, proxy) in self.nodes.iter().zip(&self.bus) {
            if node.port == a {
                proxy.heal_sender(&id_b);
            } else if node.port == b {
                proxy.heal_sender(&id_a);
            }
        }
    }

    /// Undoes `isolate_bus`.
    pub async fn rejoin_bus(&self, port: u16) {
        let id = self.node_id(port).await;
        for (node, proxy) in self.nodes.iter().zip(&self.bus) {
            if node.port == port {
                proxy.rejoin();
            } else {
                proxy.heal_sender(&id);
            }
        }
    }

    /// Whether no node flags another as failing (`fail`, `fail?`) or
    /// lacks a bus link to it: what `is_healthy` does not look at, since a
    /// replica cut off the bus keeps its replication link.
    pub async fn all_linked(&self) -> bool {
        for node in &self.nodes {
            let c = node_client(node.port).await;
            let text: Result<String, _> = c
                .custom(
                    CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
                    vec!["NODES"],
                )
                .await;
            let _ = c.quit().await;
            let Ok(text) = text else { return false };
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 8 {
                    continue;
                }
                let failing = f[2]
                    .split(',')
                    .any(|flag| flag == "fail" || flag == "fail?");
                if failing || f[7] != "connected" {
                    return false;
                }
            }
        }
        true
    }

    /// Waits until every node sees the cluster as ok, every primary has an
    /// online replica, and all nodes agree on who owns which slot.
    pub async fn await_healthy(&self) {
        until("cluster healthy", || self.is_healthy()).await;
    }

    /// Whether the cluster is healthy now (see `await_healthy`).
    pub async fn is_healthy(&self) -> bool {
        let ports: Vec<u16> = self.nodes.iter().map(|n| n.port).collect();
        let mut views = Vec::new();
        for port in &ports {
            let c = node_client(*port).await;
            let ok = info_field_cluster(&c).await;
            let view = slot_owners(&c).await;
            let _ = c.quit().await;
            if !ok {
                return false;
            }
            views.push(view);
        }
        if views.windows(2).any(|w| w[0] != w[1]) {
            return false;
        }
        for primary in self.primaries().await {
            let c = node_client(primary).await;
            let linked = info_field(&c, "replication", "connected_slaves").await;
            let _ = c.quit().await;
            if linked.as_deref() != Some(self.replicas.to_string().as_str()) {
                return false;
            }
        }
        for port in &ports {
            let c = node_client(*port).await;
            let role = info_field(&c, "replication", "role").await;
            let link = info_field(&c, "replication", "master_link_status").await;
            let _ = c.quit().await;
            if role.as_deref() == Some("slave") && link.as_deref() != Some("up") {
                return false;
            }
        }
        true
    }

    /// `redis-cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://127.0.0.1:{}", self.nodes[0].port);
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            url.push(if i == 1 { '?' } else { '&' });
            url.push_str(&format!("node=127.0.0.1:{}", n.port));
        }
        url
    }

    /// Redisson-style node addresses, for the JVM peer.
    pub fn addresses(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes.iter().find(|n| n.port == port).unwrap()
    }

    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap()
    }

    /// Whether the nodes have sharded pub/sub (Redis 7+, Valkey): what a
    /// client in AUTO mode picks.
    pub async fn sharded_pubsub(&self) -> bool {
        let c = node_client(self.nodes[0].port).await;
        let probe: Result<Value, _> = c
            .custom(
                CustomCommand::new_static("PUBSUB", ClusterHash::Random, false),
                vec!["SHARDNUMSUB", "probe"],
            )
            .await;
        let _ = c.quit().await;
        probe.is_ok()
    }

    /// Subscribers of `channel` anywhere in the cluster: classic ones on
    /// every node, sharded ones (where the nodes have them) on every node too.
    pub async fn subscribers(&self, channel: &str) -> i64 {
        let sharded = self.sharded_pubsub().await;
        let mut n = 0;
        for node in &self.nodes {
            n += subscribers_on(node.port, channel, false).await;
            if sharded {
                n += subscribers_on(node.port, channel, true).await;
            }
        }
        n
    }

    /// Ports of the current primaries, as node 0 sees them.
    pub async fn primaries(&self) -> Vec<u16> {
        let c = node_client(self.nodes[0].port).await;
        let mut owners: Vec<u16> = slot_owners(&c).await.into_iter().map(|(_, p)| p).collect();
        let _ = c.quit().await;
        owners.sort_unstable();
        owners.dedup();
        owners
    }

    /// The primary that owns `slot`.
    pub async fn owner_of(&self, slot: u16) -> u16 {
        let c = node_client(self.nodes[0].port).await;
        let owners = slot_owners(&c).await;
        let _ = c.quit().await;
        owners
            .iter()
            .find(|(range, _)| range.contains(&slot))
            .map(|(_, p)| *p)
            .expect("every slot is covered")
    }

    /// Every replica of primary `port` (its `INFO replication`).
    pub async fn replicas_of(&self, port: u16) -> Vec<u16> {
        let info = on_node(port, "INFO", vec!["replication"])
            .await
            .as_string()
            .unwrap_or_default();
        info.lines()
            .filter(|l| l.starts_with("slave") && l.contains(":ip="))
            .filter_map(|l| l.split(',').find_map(|kv| kv.strip_prefix("port=")))
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// The replica of primary `port`.
    pub async fn replica_of(&self, port: u16) -> u16 {
        let c = node_client(port).await;
        let info: String = c
            .custom(
                CustomCommand::new_static("INFO", ClusterHash::Random, false),
                vec!["replication"],
            )
            .await
            .unwrap();
        let _ = c.quit().await;
        info.lines()
            .find_map(|l| l.strip_prefix("slave0:"))
            .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("port=")))
            .and_then(|p| p.parse().ok())
            .expect("the primary has a replica")
    }

    /// A manual failover: the replica of `primary` takes over its slots
    /// (`CLUSTER FAILOVER`, which waits for the replica to catch up first).
    /// Returns the new primary's port.
    pub async fn failover(&self, primary: u16) -> u16 {
        let replica = self.replica_of(primary).await;
        let c = node_client(replica).await;
        let _: String = c
            .custom(
                CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
                vec!["FAILOVER"],
            )
            .await
            .unwrap();
        let _ = c.quit().await;
        until("replica promoted", || async {
            self.primaries().await.contains(&replica)
        })
        .await;
        self.await_healthy().await;
        replica
    }

    /// SIGKILLs primary `port` and waits until the surviving nodes agree that
    /// its replica took over its slots (automatic failover after
    /// `cluster-node-timeout`). Returns the new primary's port.
    pub async fn kill_primary(&mut self, port: u16) -> u16 {
        let replica = self.replica_of(port).await;
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap()
            .kill()
            .await;
        let alive: Vec<u16> = self
            .nodes
            .iter()
            .map(|n| n.port)
            .filter(|p| *p != port)
            .collect();
        until("automatic failover", || async {
            for p in &alive {
                let c = node_client(*p).await;
                let ok = info_field_cluster(&c).await;
                let owners = slot_owners(&c).await;
                let _ = c.quit().await;
                if !ok || owners.iter().any(|(_, owner)| *owner == port) {
                    return false;
                }
            }
            true
        })
        .await;
        replica
    }

    /// Moves `slot` from its owner to primary `to` (MIGRATE of every key, then
    /// CLUSTER SETSLOT NODE on all nodes), as `redis-cli --cluster reshard` does.
    pub async fn migrate_slot(&self, slot: u16, to: u16) {
        let from = self.owner_of(slot).await;
        assert_ne!(from, to);
        let (src, dst) = (node_client(from).await, node_client(to).await);
        let id = |c: Client| async move {
            let id: String = c
                .custom(
                    CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
                    vec!["MYID"],
                )
                .await
                .unwrap();
            id
        };
        let (src_id, dst_id) = (id(src.clone()).await, id(dst.clone()).await);
        let setslot = |c: &Client, args: Vec<String>| {
            let c = c.clone();
            async move {
                let _: String = c
                    .custom(
                        CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
                        args,
                    )
                    .await
                    .unwrap();
            }
        };
        setslot(
            &dst,
            vec![
                "SETSLOT".into(),
                slot.to_string(),
                "IMPORTING".into(),
                src_id.clone(),
            ],
        )
        .await;
        setslot(
            &src,
            vec![
                "SETSLOT".into(),
                slot.to_string(),
                "MIGRATING".into(),
                dst_id.clone(),
            ],
        )
        .await;
        loop {
            let keys: Vec<String> = src
                .custom(
                    CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
                    vec![
                        "GETKEYSINSLOT".to_string(),
                        slot.to_string(),
                        "100".to_string(),
                    ],
                )
                .await
                .unwrap();
            if keys.is_empty() {
                break;
            }
            let mut args: Vec<String> = vec![
                "127.0.0.1".into(),
                to.to_string(),
                "".into(),
                "0".into(),
                "5000".into(),
                "KEYS".into(),
            ];
            args.extend(keys);
            let _: Value = src
                .custom(
                    CustomCommand::new_static("MIGRATE", ClusterHash::Random, false),
                    args,
                )
                .await
                .unwrap();
        }
        for primary in self.primaries().await {
            let c = node_client(primary).await;
            setslot(
                &c,
                vec![
                    "SETSLOT".into(),
                    slot.to_string(),
                    "NODE".into(),
                    dst_id.clone(),
                ],
            )
            .await;
            let _ = c.quit().await;
        }
        let _ = src.quit().await;
        let _ = dst.quit().await;
        until("slot moved everywhere", || async {
            self.owner_of(slot).await == to
        })
        .await;
        self.await_healthy().await;
    }
}

/// One cluster node on a free port (and, with `proxied`, behind a
/// `BusProxy` on its bus port). A port free when probed may be taken before
/// the node binds it (every connection a test opens takes an ephemeral
/// port from the same range), and the node then exits: another port is
/// tried, twice at most.
async fn start_node(
    dir: &Scratch,
    extra: &[&str],
    proxied: bool,
) -> (RedisServer, Option<super::bus::BusProxy>) {
    for _ in 0..3 {
        let port = free_cluster_port();
        let proxy = match proxied {
            true => Some(super::bus::BusProxy::start(port + 10_000).await),
            false => None,
        };
        let announced = proxy.as_ref().map(|p| p.port.to_string());
        let flags = cluster_flags(dir, port, extra);
        let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        if let Some(announced) = &announced {
            flags.extend(["--cluster-announce-bus-port", announced.as_str()]);
        }
        if let Some(node) = RedisServer::try_start_on(port, None, &flags).await {
            return (node, proxy);
        }
    }
    panic!("no cluster node started on any of 3 free ports");
}

/// A cluster node's flags: its config and data in `dir`, each node's files
/// its own (a replica writes every full sync it receives to its RDB file,
/// and loads it when it starts), a 1 s node timeout (later flags in `extra`
/// override it).
fn cluster_flags(dir: &Scratch, port: u16, extra: &[&str]) -> Vec<String> {
    let conf = dir.0.join(format!("nodes-{port}.conf"));
    let rdb = format!("dump-{port}.rdb");
    let mut flags: Vec<String> = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        conf.to_str().unwrap(),
        "--cluster-node-timeout",
        "1000",
        "--dir",
        dir.0.to_str().unwrap(),
        "--dbfilename",
        &rdb,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    flags.extend(extra.iter().map(|s| s.to_string()));
    flags
}

async fn info_field_cluster(c: &Client) -> bool {
    let info: Result<String, _> = c
        .custom(
            CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
            vec!["INFO"],
        )
        .await;
    info.map(|i| i.contains("cluster_state:ok"))
        .unwrap_or(false)
}

/// Runs one command on node `port` (no cluster routing) and returns its
/// reply; a `LOADING` reply (the node is loading its data set) is waited
/// out, within `HANG`.
pub async fn on_node(port: u16, command: &'static str, args: Vec<&str>) -> Value {
    let c = node_client(port).await;
    let reply = within(&format!("{command} on {port}: still loading"), async {
        loop {
            let reply: Result<Value, _> = c
                .custom(
                    CustomCommand::new_static(command, ClusterHash::Random, false),
                    args.clone(),
                )
                .await;
            match reply {
                // Still loading, or the connection cut while it was made
                // (Sentinel's `CLIENT KILL` at a reconfiguration resets it:
                // seen once in CI): asked again, within the bound above.
                Err(e)
                    if e.to_string().contains("LOADING")
                        || e.to_string().contains("Connection reset") =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                reply => return reply,
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{command} on {port}: {e}"));
    let _ = c.quit().await;
    reply
}

/// Subscribers of `channel` on node `port`: `PUBSUB SHARDNUMSUB` when
/// `sharded`, else `PUBSUB NUMSUB`.
pub async fn subscribers_on(port: u16, channel: &str, sharded: bool) -> i64 {
    let c = node_client(port).await;
    let sub = if sharded { "SHARDNUMSUB" } else { "NUMSUB" };
    let reply: Vec<Value> = c
        .custom(
            CustomCommand::new_static("PUBSUB", ClusterHash::Random, false),
            vec![sub, channel],
        )
        .await
        .unwrap();
    let _ = c.quit().await;
    reply[1].as_i64().unwrap()
}

/// Replies of one kind of error a node has sent (`INFO errorstats`), such
/// as `MOVED`.
pub async fn error_count(port: u16, error: &str) -> u64 {
    let c = node_client(port).await;
    let n = info_field(&c, "errorstats", &format!("errorstat_{error}"))
        .await
        .and_then(|v| v.strip_prefix("count=").and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    let _ = c.quit().await;
    n
}

/// (slot range, owner port) as one node sees them, sorted.
async fn slot_owners(c: &Client) -> Vec<(std::ops::RangeInclusive<u16>, u16)> {
    let slots: Result<Value, _> = c
        .custom(
            CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
            vec!["SLOTS"],
        )
        .await;
    let mut out = Vec::new();
    if let Ok(Value::Array(ranges)) = slots {
        for r in ranges {
            if let Value::Array(parts) = r {
                let start = parts[0].as_i64().unwrap() as u16;
                let end = parts[1].as_i64().unwrap() as u16;
                let port = match &parts[2] {
                    Value::Array(node) => node[1].as_i64().unwrap() as u16,
                    _ => continue,
                };
                out.push((start..=end, port));
            }
        }
    }
    out.sort_by_key(|(r, _)| *r.start());
    out
}

fn as_strs(flags: &[String]) -> Vec<&str> {
    flags.iter().map(String::as_str).collect()
}

/// Three sentinels watching the primary on `primary_port` as `mymaster`
/// (1 s to call a node down), with `extra` lines in their config files.
async fn start_sentinels(dir: &Scratch, primary_port: u16, extra: &str) -> Vec<RedisServer> {
    start_sentinels_at(dir, primary_port, extra, None).await
}

/// As `start_sentinels`; with `addresses`, the primary is on its address 2
/// and sentinel `i` on its address `5 + i` (see `firewall`).
async fn start_sentinels_at(
    dir: &Scratch,
    primary_port: u16,
    extra: &str,
    addresses: Option<&Addresses>,
) -> Vec<RedisServer> {
    let primary_host = addresses.map_or("127.0.0.1".to_string(), |a| a.host(2));
    let mut sentinels = Vec::new();
    for i in 0..3 {
        let file = dir.0.join(format!("sentinel-{i}.conf"));
        let (own_lines, own_flags) = match addresses {
            Some(a) => {
                let host = a.host(5 + i as u8);
                (
                    format!("sentinel announce-ip {host}\n"),
                    firewall::bind_flags(&host),
                )
            }
            None => (String::new(), vec![]),
        };
        std::fs::write(
            &file,
            format!(
                "sentinel monitor {SERVICE} {primary_host} {primary_port} 2\n\
                 sentinel down-after-milliseconds {SERVICE} 1000\n\
                 sentinel failover-timeout {SERVICE} 5000\n\
                 sentinel parallel-syncs {SERVICE} 2\n\
                 {own_lines}{extra}\n"
            ),
        )
        .unwrap();
        let flags: Vec<&str> = std::iter::once("--sentinel")
            .chain(own_flags.iter().map(String::as_str))
            .collect();
        sentinels.push(RedisServer::start_on_free_port(Some(file), &flags).await);
    }
    sentinels
}

/// One primary, two replicas and three sentinels watching them as `mymaster`.
pub struct Sentinel {
    pub primary: RedisServer,
    pub replicas: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
    /// With `start_proxied`: a proxy in front of each data node (primary
    /// first), through which everyone reaches it, that can cut its
    /// replication links.
    pub proxies: Vec<super::partition::ReplicationProxy>,
    /// With `start_on_own_addresses`: the block its servers are on.
    pub addresses: Option<Addresses>,
    _dir: Scratch,
}

pub const SERVICE: &str = "mymaster";

impl Sentinel {
    pub async fn start() -> Self {
        Self::start_with(&[], "").await
    }

    /// With `extra` flags on the primary and the replicas, and
    /// `sentinel_conf` lines added to each sentinel's config file.
    pub async fn start_with(extra: &[&str], sentinel_conf: &str) -> Self {
        Self::start_shaped(extra, [&[], &[]], sentinel_conf).await
    }

    /// As `start_with`, each replica with flags of its own too (a
    /// `replica-priority 0` one, say).
    pub async fn start_shaped(
        extra: &[&str],
        per_replica: [&[&str]; 2],
        sentinel_conf: &str,
    ) -> Self {
        let dir = Scratch::new("sentinel");
        let primary = RedisServer::start_with(extra).await;
        let mut replicas = Vec::new();
        for own in per_replica {
            let port = primary.port.to_string();
            let args = [&["--replicaof", "127.0.0.1", &port][..], extra, own].concat();
            replicas.push(RedisServer::start_with(&args).await);
        }
        let sentinels = start_sentinels(&dir, primary.port, sentinel_conf).await;
        let deployment = Sentinel {
            primary,
            replicas,
            sentinels,
            proxies: vec![],
            addresses: None,
            _dir: dir,
        };
        deployment.await_healthy().await;
        deployment
    }

    /// As `start`, each server on a loopback address of its own, so that a
    /// `firewall::Firewall` can cut any set of links: the primary on
    /// address 2, the replicas on 3 and 4, the sentinels on 5, 6 and 7. The
    /// client reaches them there (`url`); the test's own helpers still reach
    /// every server on 127.0.0.1, across any cut.
    pub async fn start_on_own_addresses() -> Self {
        Self::start_on_own_addresses_shaped([&[], &[]]).await
    }

    /// As `start_on_own_addresses`, each replica with flags of its own too
    /// (a `replica-priority 0` one, say).
    pub async fn start_on_own_addresses_shaped(per_replica: [&[&str]; 2]) -> Self {
        let addresses = Addresses::new();
        let dir = Scratch::new("sentinel");
        let primary =
            RedisServer::start_with(&as_strs(&firewall::data_node_flags(&addresses.host(2)))).await;
        let mut replicas = Vec::new();
        for (n, own) in [3, 4].into_iter().zip(per_replica) {
            let port = primary.port.to_string();
            let mut flags = vec!["--replicaof".to_string(), addresses.host(2), port];
            flags.extend(firewall::data_node_flags(&addresses.host(n)));
            flags.extend(own.iter().map(|f| f.to_string()));
            replicas.push(RedisServer::start_with(&as_strs(&flags)).await);
        }
        let sentinels = start_sentinels_at(&dir, primary.port, "", Some(&addresses)).await;
        let deployment = Sentinel {
            primary,
            replicas,
            sentinels,
            proxies: vec![],
            addresses: Some(addresses),
            _dir: dir,
        };
        deployment.await_healthy().await;
        deployment
    }

    /// The address the deployment knows the server on `port` by (its own
    /// with `start_on_own_addresses`, 127.0.0.1 otherwise).
    pub fn host_of(&self, port: u16) -> String {
        let Some(a) = &self.addresses else {
            return "127.0.0.1".to_string();
        };
        let data = self
            .data_nodes()
            .position(|n| n.port == port)
            .map(|i| 2 + i as u8);
        let sentinel = self
            .sentinels
            .iter()
            .position(|s| s.port == port)
            .map(|i| 5 + i as u8);
        a.host(
            data.or(sentinel)
                .unwrap_or_else(|| panic!("no server on port {port}")),
        )
    }

    /// As `start`, with every data node behind a `ReplicationProxy`: the
    /// sentinels, the replicas and the clients all know a node by its
    /// proxy's port (replicas announce theirs), so `partition` can cut a
    /// node's replication links while everything else still reaches it.
    pub async fn start_proxied() -> Self {
        Self::start_proxied_with(&[]).await
    }

    /// As `start_proxied`, with `extra` flags on the primary and the replicas.
    pub async fn start_proxied_with(extra: &[&str]) -> Self {
        use super::partition::ReplicationProxy;
        let dir = Scratch::new("sentinel");
        // Each node's port is chosen first, so that its proxy exists (and
        // its announced port is on its command line, which a restart keeps)
        // before it starts. A port taken before the node binds it (see
        // `start_node`) is given up for another, twice at most.
        let (mut nodes, mut proxies) = (vec![], vec![]);
        while nodes.len() < 3 {
            let mut started = None;
            for _ in 0..3 {
                let port = super::free_port();
                let proxy = ReplicationProxy::start(port).await;
                let announce = proxy.port.to_string();
                let primary_proxy = proxies
                    .first()
                    .map(|p: &ReplicationProxy| p.port.to_string());
                let mut flags = vec![
                    "--replica-announce-ip",
                    "127.0.0.1",
                    "--replica-announce-port",
                    announce.as_str(),
                ];
                if let Some(primary) = &primary_proxy {
                    flags.extend(["--replicaof", "127.0.0.1", primary.as_str()]);
                }
                flags.extend(extra);
                if let Some(node) = RedisServer::try_start_on(port, None, &flags).await {
                    started = Some((node, proxy));
                    break;
                }
            }
            let (node, proxy) = started.expect("a node started on one of 3 free ports");
            nodes.push(node);
            proxies.push(proxy);
        }
        let primary = nodes.remove(0);
        let replicas = nodes;
        let sentinels = start_sentinels(&dir, proxies[0].port, "").await;
        let deployment = Sentinel {
            primary,
            replicas,
            sentinels,
            proxies,
            addresses: None,
            _dir: dir,
        };
        deployment.await_healthy().await;
        deployment
    }

    /// As `start`, with the primary on `primary_port` known to everyone
    /// (sentinels, replicas, clients) by `front`: the port of a proxy the
    /// caller started in front of it, which every request to the primary
    /// then passes.
    pub async fn start_fronted(primary_port: u16, front: u16) -> Self {
        let dir = Scratch::new("sentinel");
        let primary = RedisServer::start_on(primary_port, None, &[]).await;
        let mut replicas = Vec::new();
        for _ in 0..2 {
            let port = front.to_string();
            replicas.push(RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]).await);
        }
        let sentinels = start_sentinels(&dir, front, "").await;
        let deployment = Sentinel {
            primary,
            replicas,
            sentinels,
            proxies: vec![],
            addresses: None,
            _dir: dir,
        };
        deployment.await_healthy().await;
        deployment
    }

    /// The proxy of the node known by `port` (`start_proxied` only).
    pub fn proxy(&self, port: u16) -> &super::partition::ReplicationProxy {
        let real = self.node(port).port;
        let index = self.data_nodes().position(|n| n.port == real).unwrap();
        &self.proxies[index]
    }

    /// The real port of the node known by `port` (its own, or its proxy's).
    fn real_port(&self, port: u16) -> u16 {
        match self.proxies.iter().position(|p| p.port == port) {
            Some(i) => self.data_nodes().nth(i).unwrap().port,
            None => port,
        }
    }

    /// Waits until the primary has both replicas online and every sentinel
    /// knows both replicas (neither flagged down) and the other two sentinels.
    pub async fn await_healthy(&self) {
        until("sentinel deployment healthy", || self.is_healthy()).await;
    }

    /// Whether the deployment is healthy now (see `await_healthy`). The
    /// primary is asked for each time: it may change while this is awaited.
    pub async fn is_healthy(&self) -> bool {
        let primary = self.primary_port().await;
        let c = node_client(primary).await;
        // Connected is not enough: a replica waiting for its first sync
        // counts as connected but acknowledges nothing.
        let linked = info_field(&c, "replication", "connected_slaves").await;
        let online = [
            info_field(&c, "replication", "slave0").await,
            info_field(&c, "replication", "slave1").await,
        ]
        .iter()
        .all(|s| s.as_deref().is_some_and(|s| s.contains("state=online")));
        let _ = c.quit().await;
        if linked.as_deref() != Some("2") || !online {
            return false;
        }
        for s in &self.sentinels {
            let Some(get) = master_fields(s.port).await else {
                return false;
            };
            if get("num-slaves").as_deref() != Some("2")
                || get("num-other-sentinels").as_deref() != Some("2")
                || get("port").map(|p| p.parse::<u16>().ok()) != Some(Some(primary))
            {
                return false;
            }
            // A sentinel promotes no replica it flags down or disconnected
            // (`SENTINEL FAILOVER` answers NOGOODSLAVE): a replica that was
            // frozen for longer than down-after stays flagged until its
            // next ping reply.
            if replica_flags(s.port)
                .await
                .iter()
                .any(|(_, f)| f != "slave")
            {
                return false;
            }
        }
        true
    }

    /// `redis-sentinel://` URL naming every sentinel.
    pub fn url(&self) -> String {
        let mut url = self.url_of_first();
        for s in &self.sentinels[1..] {
            url.push_str(&format!("&node={}:{}", self.host_of(s.port), s.port));
        }
        url
    }

    /// `redis-sentinel://` URL naming the first sentinel only, as one
    /// address in front of them all does.
    pub fn url_of_first(&self) -> String {
        let first = self.sentinels[0].port;
        format!(
            "redis-sentinel://{}:{first}?sentinelServiceName={SERVICE}",
            self.host_of(first)
        )
    }

    /// The primary's port as the first sentinel reports it.
    pub async fn primary_port(&self) -> u16 {
        let c = node_client(self.sentinels[0].port).await;
        let addr: Vec<String> = c
            .custom(
                CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
                vec!["GET-MASTER-ADDR-BY-NAME", SERVICE],
            )
            .await
            .unwrap();
        let _ = c.quit().await;
        addr[1].parse().unwrap()
    }

    /// All data nodes (primary first at start).
    pub fn data_nodes(&self) -> impl Iterator<Item = &RedisServer> {
        std::iter::once(&self.primary).chain(self.replicas.iter())
    }

    /// The node known by `port`: its own, or its proxy's.
    pub fn node(&self, port: u16) -> &RedisServer {
        let port = self.real_port(port);
        self.data_nodes().find(|n| n.port == port).unwrap()
    }

    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        let port = self.real_port(port);
        std::iter::once(&mut self.primary)
            .chain(self.replicas.iter_mut())
            .find(|n| n.port == port)
            .unwrap()
    }

    /// Starts one more sentinel (a pod of a rollout), watching the primary
    /// with the others' settings; returns its port. The others find it
    /// through their hellos.
    pub async fn add_sentinel(&mut self) -> u16 {
        let primary = self.primary_port().await;
        let file = self
            ._dir
            .0
            .join(format!("sentinel-added-{}.conf", self.sentinels.len()));
        std::fs::write(
            &file,
            format!(
                "sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {SERVICE} 1000\n\
                 sentinel failover-timeout {SERVICE} 5000\n\
                 sentinel parallel-syncs {SERVICE} 2\n"
            ),
        )
        .unwrap();
        let added = RedisServer::start_on_free_port(Some(file), &["--sentinel"]).await;
        let port = added.port;
        self.sentinels.push(added);
        port
    }

    /// Stops the sentinels on `ports` for good (pods of a rollout gone) and
    /// has every other one forget them (`SENTINEL RESET`, as an operator
    /// does after a rollout), until none counts them.
    pub async fn remove_sentinels(&mut self, ports: &[u16]) {
        for port in ports {
            let index = self.sentinels.iter().position(|s| s.port == *port).unwrap();
            let mut gone = self.sentinels.remove(index);
            gone.kill().await;
        }
        self.on_sentinels(&["RESET", SERVICE]).await;
        let others = (self.sentinels.len() - 1).to_string();
        until(
            "the sentinels count one another again, without the one gone",
            || async {
                for s in &self.sentinels {
                    let Some(get) = master_fields(s.port).await else {
                        return false;
                    };
                    if get("num-other-sentinels").as_deref() != Some(others.as_str()) {
                        return false;
                    }
                }
                true
            },
        )
        .await;
    }

    /// Runs `SENTINEL <args>` on the first sentinel.
    pub async fn on_sentinels_first(&self, args: &[&str]) {
        self.on_sentinel(0, args).await
    }

    /// Runs `SENTINEL <args>` on sentinel `index`.
    pub async fn on_sentinel(&self, index: usize, args: &[&str]) {
        let c = node_client(self.sentinels[index].port).await;
        let _: Value = c
            .custom(
                CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
                args.to_vec(),
            )
            .await
            .unwrap();
        let _ = c.quit().await;
    }

    /// Waits until every sentinel names a primary other than `old`, that
    /// node says it is a primary, and no sentinel is still failing over;
    /// returns its port.
    ///
    /// The last condition matters to a client that checks replicas: the
    /// sentinel leading the failover names the new primary (in its hellos,
    /// so the others switch first) while it still points the remaining
    /// replicas at it, for up to `failover-timeout`; a client that asks it
    /// then is told a failover is under way and confirms no write.
    pub async fn await_new_primary(&self, old: u16) -> u16 {
        let new = within(
            "sentinel failover",
            self.new_primary_within(old, Duration::MAX),
        )
        .await
        .unwrap();
        until("the sentinels end the failover", || async {
            for s in &self.sentinels {
                let Some(get) = master_fields(s.port).await else {
                    return false;
                };
                if get("flags").is_none_or(|f| f.contains("failover")) {
                    return false;
                }
            }
            true
        })
        .await;
        // Two sentinels may each have run a failover (a split vote); the one
        // of the newest epoch wins, and the first primary agreed on may have
        // been demoted since.
        let settled = within(
            "the sentinels agree on the primary after the failover",
            self.new_primary_within(old, Duration::MAX),
        )
        .await
        .unwrap();
        if settled != new {
            eprintln!(
                "a second failover replaced the first primary agreed on ({new}) by {settled}"
            );
        }
        settled
    }

    /// As `await_new_primary`, giving up after `limit` (`None`: no failover
    /// happened in time), without panicking.
    pub async fn new_primary_within(&self, old: u16, limit: Duration) -> Option<u16> {
        let found = async {
            loop {
                if let Some(new) = self.agreed_primary(old).await {
                    return new;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        match limit {
            Duration::MAX => Some(found.await),
            limit => tokio::time::timeout(limit, found).await.ok(),
        }
    }

    /// Runs `SENTINEL <args>` on every sentinel.
    pub async fn on_sentinels(&self, args: &[&str]) {
        for s in &self.sentinels {
            let c = node_client(s.port).await;
            let _: Value = c
                .custom(
                    CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
                    args.to_vec(),
                )
                .await
                .unwrap();
            let _ = c.quit().await;
        }
    }

    /// Waits until every sentinel lists the replica on `port` with
    /// (`down == true`) or without the `s_down` flag.
    pub async fn await_replica_down(&self, port: u16, down: bool) {
        until("sentinels agree on a replica's state", || async {
            for s in &self.sentinels {
                let flagged = replica_flags(s.port)
                    .await
                    .iter()
                    .any(|(p, flags)| *p == port && flags.split(',').any(|f| f == "s_down"));
                if flagged != down {
                    return false;
                }
            }
            true
        })
        .await
    }

    async fn agreed_primary(&self, old: u16) -> Option<u16> {
        let mut seen = Vec::new();
        for s in &self.sentinels {
            let c = node_client(s.port).await;
            let addr: Result<Vec<String>, _> = c
                .custom(
                    CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
                    vec!["GET-MASTER-ADDR-BY-NAME", SERVICE],
                )
                .await;
            let _ = c.quit().await;
            match addr
                .ok()
                .and_then(|a| a.get(1).and_then(|p| p.parse::<u16>().ok()))
            {
                Some(p) if p != old => seen.push(p),
                _ => return None,
            }
        }
        if !seen.windows(2).all(|w| w[0] == w[1]) {
            return None;
        }
        let c = node_client(seen[0]).await;
        let role = info_field(&c, "replication", "role").await;
        let _ = c.quit().await;
        (role.as_deref() == Some("master")).then_some(seen[0])
    }
}

/// Each replica a sentinel lists: its port and its flags (`slave`, or with
/// `s_down`, `disconnected`, ... added).
pub async fn replica_flags(sentinel: u16) -> Vec<(u16, String)> {
    let c = node_client(sentinel).await;
    let replicas: Vec<Vec<String>> = c
        .custom(
            CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
            vec!["REPLICAS", SERVICE],
        )
        .await
        .unwrap();
    let _ = c.quit().await;
    replicas
        .iter()
        .map(|fields| {
            let get = |name: &str| {
                fields
                    .chunks(2)
                    .find(|kv| kv[0] == name)
                    .map(|kv| kv[1].clone())
                    .unwrap_or_default()
            };
            (get("port").parse().unwrap_or(0), get("flags"))
        })
        .collect()
}

/// What a sentinel says of the primary (`SENTINEL MASTER`), as a lookup by
/// field name; `None` when it does not answer.
async fn master_fields(sentinel: u16) -> Option<impl Fn(&str) -> Option<String>> {
    let c = node_client(sentinel).await;
    let master: Result<Vec<String>, _> = c
        .custom(
            CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
            vec!["MASTER", SERVICE],
        )
        .await;
    let _ = c.quit().await;
    let fields = master.ok()?;
    Some(move |name: &str| {
        fields
            .chunks(2)
            .find(|kv| kv[0] == name)
            .map(|kv| kv[1].clone())
    })
}
