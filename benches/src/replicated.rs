//! The replicated deployments of the discovery benchmark, on free ports: a
//! Redis Cluster of 3 primaries with a replica each (`redis-cli --cluster
//! create`), and Sentinel (1 primary, 2 replicas, 3 sentinels watching it as
//! `mymaster`).
//!
//! The timeouts are the servers' defaults or longer (cluster-node-timeout
//! 15 s, down-after-milliseconds 10 s): on 2 cores under load a shorter one
//! could fail a node over mid-run, and a failover is not what is measured.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};

use crate::counting_proxy::CountingProxy;
use crate::server::spawn_node;

/// What a node is, for the per-node counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Primary,
    Replica,
    Sentinel,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Node {
    pub port: u16,
    pub role: Role,
    /// The counting proxy's port, which a sentinel announces and clients use.
    pub proxy: Option<u16>,
}

pub const SERVICE: &str = "mymaster";

/// A running deployment; its processes are killed and its files removed on drop.
pub struct Deployment {
    pub name: &'static str,
    /// Data nodes and sentinels, as they were at start.
    pub nodes: Vec<Node>,
    /// redisson-lock's URL.
    pub url: String,
    /// The JVM load's arguments (`--cluster ADDRS` or `--sentinel MASTER ADDRS`).
    pub jvm_args: Vec<String>,
    /// The counting proxy in front of each sentinel.
    pub proxies: Vec<Arc<CountingProxy>>,
    _children: Vec<tokio::process::Child>,
    dir: PathBuf,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A free port whose cluster bus port (+10000) is free too.
fn free_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

fn scratch(what: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("redisson-lock-bench-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A plain client for one node (set-up and checks only, never inside a
/// measured window).
async fn node(port: u16) -> Client {
    let c = Builder::from_config(Config::from_url(&format!("redis://127.0.0.1:{port}")).unwrap())
        .build()
        .unwrap();
    c.init().await.unwrap();
    c
}

async fn on_node(port: u16, command: &'static str, args: Vec<&str>) -> Value {
    let c = node(port).await;
    let reply = c
        .custom(
            CustomCommand::new_static(command, ClusterHash::Random, false),
            args,
        )
        .await;
    let _ = c.quit().await;
    reply.unwrap_or(Value::Null)
}

async fn info(port: u16, section: &str) -> String {
    on_node(port, "INFO", vec![section])
        .await
        .as_string()
        .unwrap_or_default()
}

fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Polls `check` every 100 ms until it holds, at most `limit`.
async fn until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let found = tokio::time::timeout(limit, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(found.is_ok(), "{what}: not within {limit:?}");
}

/// The user a replica broken by [`Deployment::break_a_replica`] replicates
/// as.
const REPLICATION_USER: &str = "bench-replication";

/// A replica whose replication [`Deployment::break_a_replica`] refused.
pub struct Broken {
    pub primary: u16,
    pub replica: u16,
}

impl Deployment {
    /// One replica of the first primary stops replicating: the user it
    /// replicates as is switched off on its primary and its link cut, its
    /// bus, pings and clients untouched (a wrong `masterauth`, a firewalled
    /// data port). Writes to that primary fall short of it: on the cluster
    /// it is the shard's only replica; on Sentinel the other still answers.
    pub async fn break_a_replica(&self) -> Broken {
        let primary = self
            .nodes
            .iter()
            .find(|n| n.role == Role::Primary)
            .expect("a primary")
            .port;
        let replication = info(primary, "replication").await;
        let replica: u16 = field(&replication, "slave0")
            .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("port=")))
            .and_then(|p| p.parse().ok())
            .expect("the primary has a replica");
        let user = REPLICATION_USER;
        on_node(
            primary,
            "ACL",
            vec!["SETUSER", user, "on", ">bench", "~*", "+@all"],
        )
        .await;
        on_node(replica, "CONFIG", vec!["SET", "masteruser", user]).await;
        on_node(replica, "CONFIG", vec!["SET", "masterauth", "bench"]).await;
        on_node(primary, "ACL", vec!["SETUSER", user, "off"]).await;
        on_node(replica, "CLIENT", vec!["KILL", "TYPE", "master"]).await;
        until(
            "the replica's link down",
            Duration::from_secs(30),
            || async {
                let replication = info(replica, "replication").await;
                field(&replication, "master_link_status") == Some("down")
            },
        )
        .await;
        Broken { primary, replica }
    }

    /// Lets the replica [`Deployment::break_a_replica`] broke replicate
    /// again, and waits until its link is up.
    pub async fn mend(&self, broken: Broken) {
        on_node(
            broken.primary,
            "ACL",
            vec!["SETUSER", REPLICATION_USER, "on"],
        )
        .await;
        until(
            "the replica's link up",
            Duration::from_secs(120),
            || async {
                let replication = info(broken.replica, "replication").await;
                field(&replication, "master_link_status") == Some("up")
            },
        )
        .await;
    }

    /// 3 primaries with one replica each.
    pub async fn cluster() -> Deployment {
        let dir = scratch("discovery-cluster");
        let mut ports = vec![];
        let mut children = vec![];
        for _ in 0..6 {
            let port = free_port();
            let conf = dir.join(format!("nodes-{port}.conf"));
            let flags: [&std::ffi::OsStr; 6] = [
                "--cluster-enabled".as_ref(),
                "yes".as_ref(),
                "--cluster-config-file".as_ref(),
                conf.as_os_str(),
                "--dir".as_ref(),
                dir.as_os_str(),
            ];
            children.push(spawn_node(port, None, &flags).await);
            ports.push(port);
        }
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = tokio::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .await
            .expect("redis-cli (Debian's redis-tools) creates the cluster");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        until("cluster healthy", Duration::from_secs(60), || {
            cluster_healthy(&ports)
        })
        .await;
        let mut nodes = vec![];
        for port in &ports {
            let role = match field(&info(*port, "replication").await, "role") {
                Some("master") => Role::Primary,
                _ => Role::Replica,
            };
            nodes.push(Node {
                port: *port,
                role,
                proxy: None,
            });
        }
        let mut url = format!("redis-cluster://127.0.0.1:{}", ports[0]);
        for (i, p) in ports.iter().enumerate().skip(1) {
            url.push(if i == 1 { '?' } else { '&' });
            url.push_str(&format!("node=127.0.0.1:{p}"));
        }
        let jvm = ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        Deployment {
            name: "Cluster, 3 primaries + 3 replicas",
            nodes,
            url,
            jvm_args: vec!["--cluster".into(), jvm],
            proxies: vec![],
            _children: children,
            dir,
        }
    }

    /// 1 primary, 2 replicas, 3 sentinels.
    pub async fn sentinel() -> Deployment {
        let dir = scratch("discovery-sentinel");
        let mut children = vec![];
        let primary = free_port();
        children.push(spawn_node(primary, None, &[]).await);
        let mut replicas = vec![];
        for _ in 0..2 {
            let port = free_port();
            let of = primary.to_string();
            let flags: [&std::ffi::OsStr; 3] =
                ["--replicaof".as_ref(), "127.0.0.1".as_ref(), of.as_ref()];
            children.push(spawn_node(port, None, &flags).await);
            replicas.push(port);
        }
        let mut sentinels = vec![];
        let mut proxies = vec![];
        for i in 0..3 {
            let port = free_port();
            let proxy = Arc::new(CountingProxy::start(free_port(), port).await);
            let file = dir.join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &file,
                format!(
                    "sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {SERVICE} 10000\n\
                     sentinel failover-timeout {SERVICE} 60000\n\
                     sentinel announce-ip 127.0.0.1\n\
                     sentinel announce-port {}\n",
                    proxy.port
                ),
            )
            .unwrap();
            let flags: [&std::ffi::OsStr; 3] =
                ["--sentinel".as_ref(), "--dir".as_ref(), dir.as_os_str()];
            children.push(spawn_node(port, Some(&file), &flags).await);
            sentinels.push((port, proxy.port));
            proxies.push(proxy);
        }
        let real: Vec<u16> = sentinels.iter().map(|s| s.0).collect();
        until(
            "sentinel deployment healthy",
            Duration::from_secs(60),
            || sentinel_healthy(primary, &real),
        )
        .await;
        let mut nodes = vec![Node {
            port: primary,
            role: Role::Primary,
            proxy: None,
        }];
        nodes.extend(replicas.iter().map(|&port| Node {
            port,
            role: Role::Replica,
            proxy: None,
        }));
        nodes.extend(sentinels.iter().map(|&(port, proxy)| Node {
            port,
            role: Role::Sentinel,
            proxy: Some(proxy),
        }));
        // Clients know the sentinels by their proxies.
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName={SERVICE}",
            sentinels[0].1
        );
        for s in &sentinels[1..] {
            url.push_str(&format!("&node=127.0.0.1:{}", s.1));
        }
        let jvm = sentinels
            .iter()
            .map(|(_, p)| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        Deployment {
            name: "Sentinel, 1 primary + 2 replicas + 3 sentinels",
            nodes,
            url,
            jvm_args: vec!["--sentinel".into(), SERVICE.into(), jvm],
            proxies,
            _children: children,
            dir,
        }
    }

    /// Each data node's role now (after the run: a failover would show).
    pub async fn roles_now(&self) -> Vec<Node> {
        let mut out = vec![];
        for n in &self.nodes {
            let role = match n.role {
                Role::Sentinel => Role::Sentinel,
                _ => match field(&info(n.port, "replication").await, "role") {
                    Some("master") => Role::Primary,
                    _ => Role::Replica,
                },
            };
            out.push(Node {
                port: n.port,
                role,
                proxy: n.proxy,
            });
        }
        out
    }

    pub async fn version(&self) -> String {
        field(&info(self.nodes[0].port, "server").await, "redis_version")
            .unwrap_or_default()
            .to_string()
    }
}

/// Every node sees the cluster ok and the same slot map, every primary has
/// its replica online.
async fn cluster_healthy(ports: &[u16]) -> bool {
    let mut maps = vec![];
    for port in ports {
        let state = on_node(*port, "CLUSTER", vec!["INFO"])
            .await
            .as_string()
            .unwrap_or_default();
        if field(&state, "cluster_state") != Some("ok") {
            return false;
        }
        let nodes = on_node(*port, "CLUSTER", vec!["NODES"])
            .await
            .as_string()
            .unwrap_or_default();
        // id, address, role and slots of every node, without this node's `myself`.
        let mut map: Vec<String> = nodes
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let role = if l.contains("master") { "m" } else { "r" };
                format!("{} {} {role} {}", f[0], f[1], f[8..].join(" "))
            })
            .collect();
        map.sort();
        maps.push(map);
        let replication = info(*port, "replication").await;
        match field(&replication, "role") {
            Some("master") if field(&replication, "connected_slaves") != Some("1") => return false,
            Some("slave") if field(&replication, "master_link_status") != Some("up") => {
                return false
            }
            _ => {}
        }
    }
    maps.windows(2).all(|w| w[0] == w[1])
}

/// The primary has both replicas online; every sentinel knows both replicas
/// and the two other sentinels.
async fn sentinel_healthy(primary: u16, sentinels: &[u16]) -> bool {
    let replication = info(primary, "replication").await;
    let online = ["slave0", "slave1"]
        .iter()
        .all(|s| field(&replication, s).is_some_and(|v| v.contains("state=online")));
    if !online {
        return false;
    }
    for s in sentinels {
        let Value::Array(fields) = on_node(*s, "SENTINEL", vec!["MASTER", SERVICE]).await else {
            return false;
        };
        let get = |name: &str| {
            fields
                .chunks(2)
                .find(|kv| kv[0].as_string().as_deref() == Some(name))
                .and_then(|kv| kv[1].as_string())
        };
        if get("num-slaves").as_deref() != Some("2")
            || get("num-other-sentinels").as_deref() != Some("2")
        {
            return false;
        }
    }
    true
}
