//! Finding the deployment's nodes and reading each: the sentinels (all at
//! once), the cluster's map, then every primary and replica in parallel.

use std::collections::HashMap;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, ServerConfig};
use fred::types::{ClusterHash, CustomCommand, Value};
use futures::future::join_all;

use super::link::{info_fields, pairs, text, Limits, Link, Trouble};
use super::report::DeploymentKind;

/// A data node's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Primary,
    Replica,
}

/// A replica as the deployment describes it.
#[derive(Debug, Clone)]
pub(crate) struct KnownReplica {
    pub(crate) addr: String,
    /// Marked failing or down by the deployment.
    pub(crate) down: bool,
    /// Marked down by the deployment as a whole, as a replica that is gone
    /// stays until it is forgotten: `s_down` on every sentinel that names
    /// the primary (Sentinel), `fail` (the cluster, a majority of its
    /// primaries; not one node's `fail?`).
    pub(crate) gone: bool,
    /// Its node id (cluster only), for `CLUSTER FORGET`.
    pub(crate) id: Option<String>,
    /// `slave-priority` as the sentinels report it (Sentinel only).
    pub(crate) priority: Option<i64>,
}

/// A primary and the replicas the deployment says it has.
#[derive(Debug, Clone)]
pub(crate) struct Shard {
    pub(crate) primary: String,
    pub(crate) replicas: Vec<KnownReplica>,
}

impl Shard {
    /// Replicas not marked down.
    pub(crate) fn healthy_replicas(&self) -> usize {
        self.replicas.iter().filter(|r| !r.down).count()
    }
}

/// What one sentinel answered.
#[derive(Debug, Clone)]
pub(crate) struct SentinelAnswer {
    pub(crate) master: HashMap<String, String>,
    pub(crate) replicas: Vec<HashMap<String, String>>,
    /// Commands the crate sends to sentinels that this one refused.
    pub(crate) refused: Vec<(&'static str, String)>,
    /// Its own id (`SENTINEL MYID`; none before Redis 6.2).
    pub(crate) myid: Option<String>,
    /// The other sentinels it names (`SENTINEL SENTINELS`): run id, address.
    pub(crate) others: Vec<(String, String)>,
}

impl SentinelAnswer {
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        self.master.get(name).map(String::as_str)
    }

    pub(crate) fn number(&self, name: &str) -> Option<u64> {
        self.field(name)?.parse().ok()
    }

    pub(crate) fn primary(&self) -> Option<String> {
        Some(format!("{}:{}", self.field("ip")?, self.field("port")?))
    }
}

/// One sentinel: its address and what it said, or why it said nothing.
pub(crate) struct SentinelSeen {
    pub(crate) addr: String,
    pub(crate) answer: Result<SentinelAnswer, Trouble>,
}

/// One data node: its connection and what it showed.
pub(crate) struct NodeSeen {
    pub(crate) addr: String,
    pub(crate) role: Role,
    pub(crate) link: Result<Link, Trouble>,
    /// `INFO` (the default sections).
    pub(crate) info: Result<HashMap<String, String>, Trouble>,
    /// `CONFIG GET <name>` per setting asked.
    pub(crate) config: HashMap<&'static str, Result<String, Trouble>>,
    /// Its clock against this host's, from `TIME`.
    pub(crate) clock: Result<Clock, Trouble>,
}

/// A node's clock, read by `TIME` between two readings of this host's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    /// The node's time minus this host's at the round trip's midpoint (µs).
    pub(crate) offset_us: i64,
    /// Half the round trip: the node answered within this of the midpoint.
    pub(crate) uncertainty_us: i64,
}

impl NodeSeen {
    pub(crate) fn info(&self, field: &str) -> Result<Option<&str>, &Trouble> {
        match &self.info {
            Ok(map) => Ok(map.get(field).map(String::as_str)),
            Err(t) => Err(t),
        }
    }

    pub(crate) fn setting(&self, name: &str) -> Result<&str, Trouble> {
        match self.config.get(name) {
            Some(Ok(v)) => Ok(v),
            Some(Err(t)) => Err(t.clone()),
            None => Err(Trouble::Refused(format!("{name} not read"))),
        }
    }
}

/// Everything read.
pub(crate) struct Seen {
    pub(crate) kind: DeploymentKind,
    /// Sentinel addresses in the client's settings.
    pub(crate) sentinels_configured: usize,
    /// Sentinels found through those (`SENTINEL SENTINELS`), as the client
    /// finds them: one address behind a Kubernetes Service names the rest.
    pub(crate) sentinels_discovered: usize,
    pub(crate) sentinels: Vec<SentinelSeen>,
    pub(crate) service: String,
    pub(crate) shards: Vec<Shard>,
    /// Why the shards could not be found (a cluster map or no sentinel answered).
    pub(crate) discovery: Option<Trouble>,
    pub(crate) nodes: Vec<NodeSeen>,
}

impl Seen {
    pub(crate) fn node(&self, addr: &str) -> Option<&NodeSeen> {
        self.nodes.iter().find(|n| n.addr == addr)
    }

    pub(crate) fn primaries(&self) -> impl Iterator<Item = &NodeSeen> {
        self.nodes.iter().filter(|n| n.role == Role::Primary)
    }

    pub(crate) async fn close(&self) {
        let links = self.nodes.iter().filter_map(|n| n.link.as_ref().ok());
        join_all(links.map(Link::close)).await;
    }
}

/// The settings each data node is asked for. Persistence on every node: a
/// replica runs on its own settings once promoted.
fn settings_for(kind: DeploymentKind, role: Role) -> &'static [&'static str] {
    match (kind, role) {
        (DeploymentKind::Single, _) => &["save", "appendfsync", "lua-time-limit"],
        (DeploymentKind::Sentinel, Role::Primary) => &[
            "save",
            "appendfsync",
            "min-replicas-to-write",
            "min-replicas-max-lag",
            "lua-time-limit",
        ],
        (DeploymentKind::Cluster, Role::Primary) => &[
            "save",
            "appendfsync",
            "min-replicas-to-write",
            "min-replicas-max-lag",
            "cluster-require-full-coverage",
            "cluster-node-timeout",
            "lua-time-limit",
        ],
        (DeploymentKind::Cluster, Role::Replica) => &[
            "save",
            "appendfsync",
            "cluster-replica-validity-factor",
            "cluster-replica-no-failover",
            "min-replicas-to-write",
            "min-replicas-max-lag",
        ],
        (DeploymentKind::Sentinel, Role::Replica) => &[
            "save",
            "appendfsync",
            "min-replicas-to-write",
            "min-replicas-max-lag",
        ],
    }
}

fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    Some((
        host.trim_matches(['[', ']']).to_string(),
        port.parse().ok()?,
    ))
}

/// Reads the deployment `base` describes. `discovery`: a client already
/// connected to it (the cluster map is asked there first).
pub(crate) async fn gather(base: &FredConfig, limits: Limits, discovery: Option<&Client>) -> Seen {
    let mut seen = Seen {
        kind: DeploymentKind::Single,
        sentinels_configured: 0,
        sentinels_discovered: 0,
        sentinels: vec![],
        service: String::new(),
        shards: vec![],
        discovery: None,
        nodes: vec![],
    };
    match &base.server {
        ServerConfig::Centralized { server } => {
            seen.shards.push(Shard {
                primary: format!("{}:{}", server.host, server.port),
                replicas: vec![],
            });
        }
        ServerConfig::Clustered { hosts, .. } => {
            seen.kind = DeploymentKind::Cluster;
            let seeds: Vec<String> = hosts
                .iter()
                .map(|s| format!("{}:{}", s.host, s.port))
                .collect();
            match cluster_map(base, limits, discovery, &seeds).await {
                Ok(shards) => seen.shards = shards,
                Err(t) => seen.discovery = Some(t),
            }
        }
        ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } => {
            seen.kind = DeploymentKind::Sentinel;
            seen.service = service_name.clone();
            seen.sentinels_configured = hosts.len();
            seen.sentinels = join_all(hosts.iter().map(|s| {
                let addr = format!("{}:{}", s.host, s.port);
                ask_sentinel(base, limits, addr, service_name)
            }))
            .await;
            // The sentinels those name and were not asked, once, as the
            // client asks them too (topology/sentinel.rs).
            let more = unasked(&seen.sentinels);
            seen.sentinels_discovered = more.len();
            let found = join_all(
                more.into_iter()
                    .map(|addr| ask_sentinel(base, limits, addr, service_name)),
            )
            .await;
            seen.sentinels.extend(found);
            match sentinel_shard(&seen.sentinels) {
                Some(shard) => seen.shards.push(shard),
                None => {
                    seen.discovery =
                        Some(Trouble::Unreachable("no sentinel named the primary".into()))
                }
            }
        }
        #[allow(unreachable_patterns)]
        _ => {
            seen.discovery = Some(Trouble::Refused(
                "this kind of address is not audited".into(),
            ))
        }
    }
    let kind = seen.kind;
    let mut wanted: Vec<(String, Role)> = vec![];
    for shard in &seen.shards {
        wanted.push((shard.primary.clone(), Role::Primary));
        for r in shard.replicas.iter().filter(|r| !r.down) {
            wanted.push((r.addr.clone(), Role::Replica));
        }
    }
    seen.nodes = join_all(
        wanted
            .into_iter()
            .map(|(addr, role)| read_node(base, limits, addr, role, kind)),
    )
    .await;
    seen
}

async fn read_node(
    base: &FredConfig,
    limits: Limits,
    addr: String,
    role: Role,
    kind: DeploymentKind,
) -> NodeSeen {
    let mut node = NodeSeen {
        addr: addr.clone(),
        role,
        link: Err(Trouble::Unreachable(format!("bad address {addr}"))),
        info: Err(Trouble::Unreachable("not connected".into())),
        config: HashMap::new(),
        clock: Err(Trouble::Unreachable("not connected".into())),
    };
    let Some((host, port)) = split_addr(&addr) else {
        return node;
    };
    let link = match Link::open(base, &host, port, false, limits).await {
        Ok(link) => link,
        Err(t) => {
            node.info = Err(t.clone());
            node.link = Err(t);
            return node;
        }
    };
    let settings = settings_for(kind, role);
    let info = link.ask("INFO", &[]);
    let configs = join_all(
        settings
            .iter()
            .map(|name| link.ask("CONFIG", &["GET", name])),
    );
    let (info, configs) = futures::join!(info, configs);
    node.info = info.map(|v| info_fields(&text(&v).unwrap_or_default()));
    for (name, reply) in settings.iter().zip(configs) {
        let value = reply.and_then(|v| {
            pairs(&v)
                .into_iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v)
                .ok_or_else(|| Trouble::Refused(format!("the server has no setting {name}")))
        });
        node.config.insert(name, value);
    }
    // Alone on the link, so that the round trip bounding it is short.
    node.clock = read_clock(&link).await;
    node.link = Ok(link);
    node
}

/// `TIME` against this host's clock read just before and just after.
async fn read_clock(link: &Link) -> Result<Clock, Trouble> {
    let micros = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64)
    };
    let before = micros();
    let reply = link.ask("TIME", &[]).await?;
    let after = micros();
    let parts = match &reply {
        Value::Array(parts) => parts
            .iter()
            .filter_map(super::link::int)
            .collect::<Vec<_>>(),
        _ => vec![],
    };
    let [secs, us] = parts[..] else {
        return Err(Trouble::Refused(format!("TIME answered {reply:?}")));
    };
    let midpoint = before + (after - before) / 2;
    Ok(Clock {
        offset_us: secs * 1_000_000 + us - midpoint,
        uncertainty_us: (after - before + 1) / 2,
    })
}

/// The primaries and their replicas from `CLUSTER NODES`.
async fn cluster_map(
    base: &FredConfig,
    limits: Limits,
    discovery: Option<&Client>,
    seeds: &[String],
) -> Result<Vec<Shard>, Trouble> {
    let mut last = Trouble::Unreachable("no seed node".into());
    if let Some(client) = discovery {
        let cmd = CustomCommand::new_static("CLUSTER", ClusterHash::Random, false);
        let call =
            crate::engine::boxed_reply(|| client.custom::<Value, Value>(cmd, vec!["NODES".into()]));
        match tokio::time::timeout(limits.call, call).await {
            Ok(Ok(v)) => return Ok(parse_cluster_nodes(&text(&v).unwrap_or_default(), None)),
            Ok(Err(e)) => last = Trouble::Refused(e.details().to_string()),
            Err(_) => last = Trouble::Unreachable("CLUSTER NODES: no reply".into()),
        }
    }
    for seed in seeds {
        let Some((host, port)) = split_addr(seed) else {
            continue;
        };
        let link = match Link::open(base, &host, port, false, limits).await {
            Ok(link) => link,
            Err(t) => {
                last = t;
                continue;
            }
        };
        let reply = link.ask("CLUSTER", &["NODES"]).await;
        link.close().await;
        match reply {
            Ok(v) => {
                return Ok(parse_cluster_nodes(
                    &text(&v).unwrap_or_default(),
                    Some(&host),
                ))
            }
            Err(t) => last = t,
        }
    }
    Err(last)
}

/// `<id> <ip:port@cport[,hostname]> <flags> <primary-id> ... <slots>` per line.
pub(crate) fn parse_cluster_nodes(nodes: &str, seed_host: Option<&str>) -> Vec<Shard> {
    struct Line {
        id: String,
        addr: String,
        flags: Vec<String>,
        primary: String,
        slots: bool,
    }
    let lines: Vec<Line> = nodes
        .lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            if parts.len() < 8 {
                return None;
            }
            let mut addr = parts[1].split(['@', ',']).next()?.to_string();
            if addr.starts_with(':') {
                // A node that never met another does not know its own address.
                addr = format!("{}{addr}", seed_host.unwrap_or("127.0.0.1"));
            }
            Some(Line {
                id: parts[0].to_string(),
                addr,
                flags: parts[2].split(',').map(str::to_string).collect(),
                primary: parts[3].to_string(),
                slots: parts.len() > 8,
            })
        })
        .collect();
    let failing = |l: &Line| {
        l.flags
            .iter()
            .any(|f| matches!(f.as_str(), "fail" | "fail?" | "noaddr" | "handshake"))
    };
    let mut shards: Vec<Shard> = lines
        .iter()
        .filter(|l| l.flags.iter().any(|f| f == "master") && l.slots && !failing(l))
        .map(|p| Shard {
            primary: p.addr.clone(),
            replicas: lines
                .iter()
                .filter(|r| r.primary == p.id && r.flags.iter().any(|f| f == "slave"))
                .map(|r| KnownReplica {
                    addr: r.addr.clone(),
                    down: failing(r),
                    gone: r.flags.iter().any(|f| f == "fail"),
                    id: Some(r.id.clone()),
                    priority: None,
                })
                .collect(),
        })
        .collect();
    shards.sort_by(|a, b| a.primary.cmp(&b.primary));
    shards
}

async fn ask_sentinel(
    base: &FredConfig,
    limits: Limits,
    addr: String,
    service: &str,
) -> SentinelSeen {
    let answer = async {
        let (host, port) =
            split_addr(&addr).ok_or_else(|| Trouble::Unreachable(format!("bad address {addr}")))?;
        let link = Link::open(base, &host, port, true, limits).await?;
        // What the client asks each sentinel (topology/sentinel.rs).
        let (master, replicas, sentinels, myid) = futures::join!(
            link.ask("SENTINEL", &["MASTER", service]),
            link.ask("SENTINEL", &["REPLICAS", service]),
            link.ask("SENTINEL", &["SENTINELS", service]),
            link.ask("SENTINEL", &["MYID"]),
        );
        link.close().await;
        let mut refused = vec![];
        for (what, reply) in [
            ("SENTINEL REPLICAS", &replicas),
            ("SENTINEL SENTINELS", &sentinels),
            ("SENTINEL MYID", &myid),
        ] {
            match reply {
                // (A sentinel older than 6.2 has no MYID: the client does without.)
                Err(t) if what == "SENTINEL MYID" && !t.is_no_permission() => {}
                Err(t @ Trouble::Refused(_)) => refused.push((what, t.to_string())),
                _ => {}
            }
        }
        let master = match master {
            Ok(v) => pairs(&v).into_iter().collect(),
            Err(t) if t.is_no_permission() => {
                refused.push(("SENTINEL MASTER", t.to_string()));
                HashMap::new()
            }
            Err(t) => return Err(t),
        };
        let listed = |reply: Result<Value, Trouble>| -> Vec<HashMap<String, String>> {
            match reply {
                Ok(Value::Array(items)) => items
                    .iter()
                    .map(|r| pairs(r).into_iter().collect())
                    .collect(),
                _ => vec![],
            }
        };
        let replicas = listed(replicas);
        let others = listed(sentinels)
            .into_iter()
            .filter_map(|s| {
                let addr = format!("{}:{}", s.get("ip")?, s.get("port")?);
                Some((s.get("runid").cloned().unwrap_or_default(), addr))
            })
            .collect();
        Ok(SentinelAnswer {
            master,
            replicas,
            refused,
            myid: myid.ok().as_ref().and_then(text),
            others,
        })
    }
    .await;
    SentinelSeen { addr, answer }
}

/// The sentinels the answers name that were not asked: told apart by run id
/// (an address in the settings may be a name the sentinels do not use),
/// else by address.
fn unasked(asked: &[SentinelSeen]) -> Vec<String> {
    let ids: Vec<&str> = asked
        .iter()
        .filter_map(|s| s.answer.as_ref().ok()?.myid.as_deref())
        .collect();
    let mut more: Vec<String> = vec![];
    for answer in asked.iter().filter_map(|s| s.answer.as_ref().ok()) {
        for (id, addr) in &answer.others {
            let known = ids.contains(&id.as_str())
                || asked.iter().any(|s| &s.addr == addr)
                || more.contains(addr);
            if !known {
                more.push(addr.clone());
            }
        }
    }
    more
}

/// The primary most sentinels name, with the replicas they list for it.
fn sentinel_shard(sentinels: &[SentinelSeen]) -> Option<Shard> {
    let mut votes: HashMap<String, usize> = HashMap::new();
    for answer in sentinels.iter().filter_map(|s| s.answer.as_ref().ok()) {
        if let Some(primary) = answer.primary() {
            *votes.entry(primary).or_default() += 1;
        }
    }
    let primary = votes
        .into_iter()
        .max_by_key(|(addr, n)| (*n, std::cmp::Reverse(addr.clone())))?
        .0;
    let naming: Vec<&SentinelAnswer> = sentinels
        .iter()
        .filter_map(|s| s.answer.as_ref().ok())
        .filter(|a| a.primary().as_deref() == Some(primary.as_str()))
        .collect();
    let answer = *naming.first()?;
    // `s_down` is each sentinel's own opinion (a replica is never
    // `o_down`): gone only when every sentinel naming the primary says so,
    // as the client takes a replica at the best any of them says.
    let down_everywhere = |addr: &str| {
        naming.iter().all(|a| {
            a.replicas.iter().any(|r| {
                r.get("ip")
                    .zip(r.get("port"))
                    .map(|(ip, port)| format!("{ip}:{port}"))
                    .as_deref()
                    == Some(addr)
                    && r.get("flags")
                        .is_some_and(|f| f.split(',').any(|f| f == "s_down"))
            })
        })
    };
    let replicas = answer
        .replicas
        .iter()
        .filter_map(|r| {
            let addr = format!("{}:{}", r.get("ip")?, r.get("port")?);
            let flags = r.get("flags").map(String::as_str).unwrap_or("");
            let down = flags
                .split(',')
                .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"));
            let priority = r
                .get("slave-priority")
                .or_else(|| r.get("replica-priority"))
                .and_then(|p| p.parse().ok());
            Some(KnownReplica {
                gone: down_everywhere(&addr),
                addr,
                down,
                id: None,
                priority,
            })
        })
        .collect();
    Some(Shard { primary, replicas })
}

/// An integer `INFO` field.
pub(crate) fn info_number(node: &NodeSeen, field: &str) -> Option<u64> {
    node.info(field).ok().flatten().and_then(|v| v.parse().ok())
}

/// `INFO replication`'s `slaveN:ip=..,port=..,state=..,offset=..,lag=..` lines.
pub(crate) fn attached_replicas(node: &NodeSeen) -> Vec<HashMap<String, String>> {
    let Ok(info) = &node.info else {
        return vec![];
    };
    let mut out: Vec<(usize, HashMap<String, String>)> = info
        .iter()
        .filter_map(|(k, v)| {
            let n: usize = k.strip_prefix("slave")?.parse().ok()?;
            let fields = v
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Some((n, fields))
        })
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out.into_iter().map(|(_, f)| f).collect()
}
