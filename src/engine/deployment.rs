//! What the deployment says about the primary a lock write goes to: how many
//! replicas it is known to have, and whether it still is the primary.
//!
//! Counting the replicas *connected* at the instant of a write is how
//! Redisson decides whether to wait for them, and it is where replicated
//! locks leak: a replica promoted a moment ago has no replica attached yet,
//! and an old primary that resumes after a pause has lost its replicas to
//! the new one; both count 0 connected replicas, so neither waits, and a
//! lock written there is gone after the next failover. The deployment
//! knows better:
//!
//! * a cluster node lists its replicas in `CLUSTER NODES`, with the ones the
//!   cluster has marked failing;
//! * the sentinels list the replicas of the service (`SENTINEL REPLICAS`),
//!   with the ones they see down, and name the primary
//!   (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
//!
//! A replica counts while the deployment does not consider it down: one that
//! is re-attaching after a failover counts (a write waits for it), one that
//! is dead and flagged does not (writes go on without it, as they must for
//! the deployment to stay available).

use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, ServerConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// How long the sentinels' answer is trusted.
const SENTINEL_VIEW_TTL: Duration = Duration::from_secs(1);

/// What the deployment says about one primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrimaryView {
    /// The node is the primary the deployment names (false: a demoted or
    /// deposed primary that has not noticed yet).
    pub(crate) is_primary: bool,
    /// Replicas the deployment knows this primary has and does not consider
    /// down; `None` when the deployment says nothing (then the connected
    /// replicas are all there is to count).
    pub(crate) known_replicas: Option<i64>,
}

/// Where the known replicas come from.
pub(crate) enum Deployment {
    /// The nodes' own `CLUSTER NODES`.
    Cluster,
    /// The sentinels.
    Sentinel(Box<Sentinels>),
    /// Nothing beyond the primary's own `INFO`.
    Plain,
}

impl Deployment {
    pub(crate) fn of(fred: &FredConfig, timeout: Duration) -> Self {
        match &fred.server {
            ServerConfig::Clustered { .. } => Deployment::Cluster,
            ServerConfig::Sentinel {
                hosts,
                service_name,
                ..
            } => Deployment::Sentinel(Box::new(Sentinels {
                base: fred.clone(),
                hosts: hosts.iter().map(|h| (h.host.to_string(), h.port)).collect(),
                service: service_name.clone(),
                timeout,
                client: tokio::sync::Mutex::new(None),
                view: Mutex::new(None),
            })),
            _ => Deployment::Plain,
        }
    }

    /// What the deployment says of the node `redis` reaches for `slot`.
    pub(crate) async fn view(&self, redis: &Client, slot: u16) -> Result<PrimaryView> {
        match self {
            Deployment::Cluster => cluster_view(redis, slot).await,
            Deployment::Sentinel(sentinels) => {
                let (master, replicas) = sentinels.view().await?;
                // The node this connection reaches (a sentinel deployment
                // has one primary, so one connection per client).
                let node = redis.active_connections().into_iter().next();
                let is_primary =
                    node.is_some_and(|n| n.port == master.1 && same_host(&n.host, &master.0));
                Ok(PrimaryView {
                    is_primary,
                    known_replicas: Some(replicas),
                })
            }
            Deployment::Plain => Ok(PrimaryView {
                is_primary: true,
                known_replicas: None,
            }),
        }
    }

    /// Forgets what the sentinels said, after a write found the deployment
    /// changed.
    pub(crate) fn forget(&self) {
        if let Deployment::Sentinel(s) = self {
            *s.view.lock() = None;
        }
    }

    pub(crate) async fn quit(&self) {
        if let Deployment::Sentinel(s) = self {
            if let Some(client) = s.client.lock().await.take() {
                let _ = client.quit().await;
            }
        }
    }
}

fn same_host(a: &str, b: &str) -> bool {
    a == b || (is_loopback(a) && is_loopback(b))
}

fn is_loopback(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// `CLUSTER NODES` on the slot's owner: the line flagged `myself` says
/// whether it is a primary, and the replicas are the lines whose primary id
/// is its id.
async fn cluster_view(redis: &Client, slot: u16) -> Result<PrimaryView> {
    let nodes: String = redis
        .custom(
            CustomCommand::new_static("CLUSTER", ClusterHash::Custom(slot), false),
            vec!["NODES"],
        )
        .await
        .map_err(|e| Error::from_redis(&e, Duration::ZERO))?;
    Ok(parse_cluster_nodes(&nodes))
}

/// Reads `CLUSTER NODES`: `<id> <addr> <flags> <primary-id> ...` per line.
fn parse_cluster_nodes(nodes: &str) -> PrimaryView {
    let lines: Vec<Vec<&str>> = nodes
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 4)
        .collect();
    let flags = |f: &Vec<&str>| f[2].split(',').map(str::to_string).collect::<Vec<_>>();
    let Some(me) = lines
        .iter()
        .find(|f| flags(f).iter().any(|x| x == "myself"))
    else {
        return PrimaryView {
            is_primary: true,
            known_replicas: None,
        };
    };
    let my_flags = flags(me);
    let is_primary = my_flags.iter().any(|x| x == "master");
    let down = ["fail", "fail?", "handshake", "noaddr"];
    let replicas = lines
        .iter()
        .filter(|f| f[3] == me[0])
        .filter(|f| !flags(f).iter().any(|x| down.contains(&x.as_str())))
        .count() as i64;
    PrimaryView {
        is_primary,
        known_replicas: Some(replicas),
    }
}

/// The sentinels' last answer: the primary's (host, port), its replicas not
/// down, and when it was read.
type SentinelView = ((String, u16), i64, Instant);

/// A connection to the sentinels, made on first use, and their last answer.
pub(crate) struct Sentinels {
    /// The client's fred settings (credentials, TLS), pointed at one sentinel at a time.
    base: FredConfig,
    hosts: Vec<(String, u16)>,
    service: String,
    timeout: Duration,
    client: tokio::sync::Mutex<Option<Client>>,
    view: Mutex<Option<SentinelView>>,
}

impl Sentinels {
    async fn view(&self) -> Result<((String, u16), i64)> {
        if let Some((master, replicas, read_at)) = self.view.lock().clone() {
            if read_at.elapsed() < SENTINEL_VIEW_TTL {
                return Ok((master, replicas));
            }
        }
        let mut client = self.client.lock().await;
        let mut last_error = None;
        // The sentinel used last, then the others.
        for _ in 0..self.hosts.len().max(1) {
            if client.is_none() {
                match self.connect().await {
                    Ok(c) => *client = Some(c),
                    Err(e) => {
                        last_error = Some(e);
                        continue;
                    }
                }
            }
            let asked = self.ask(client.as_ref().expect("connected")).await;
            match asked {
                Ok((master, replicas)) => {
                    *self.view.lock() = Some((master.clone(), replicas, Instant::now()));
                    return Ok((master, replicas));
                }
                Err(e) => {
                    if let Some(c) = client.take() {
                        let _ = c.quit().await;
                    }
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| Error::redis("no sentinel configured")))
    }

    /// Connects to the first sentinel that answers, starting after the one
    /// used last.
    async fn connect(&self) -> Result<Client> {
        let mut last = None;
        for (host, port) in &self.hosts {
            let mut config = self.base.clone();
            config.server = ServerConfig::new_centralized(host.as_str(), *port);
            config.database = None;
            config.fail_fast = true;
            let client = Builder::from_config(config)
                .with_connection_config(|c| {
                    c.connection_timeout = self.timeout;
                    c.internal_command_timeout = self.timeout;
                })
                .with_performance_config(|p| p.default_command_timeout = self.timeout)
                .build()
                .map_err(|e| Error::Config(e.details().to_string()))?;
            match tokio::time::timeout(self.timeout, client.init()).await {
                Ok(Ok(_)) => return Ok(client),
                Ok(Err(e)) => last = Some(Error::from_redis(&e, self.timeout)),
                Err(_) => last = Some(Error::Timeout(self.timeout)),
            }
            let _ = client.quit().await;
        }
        Err(last.unwrap_or_else(|| Error::redis("no sentinel configured")))
    }

    async fn ask(&self, client: &Client) -> Result<((String, u16), i64)> {
        let sentinel = |args: Vec<&str>| {
            let args: Vec<Value> = args.into_iter().map(Value::from).collect();
            client.custom::<Value, Value>(
                CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
                args,
            )
        };
        let map_err = |e: fred::error::Error| Error::from_redis(&e, self.timeout);
        let master = sentinel(vec!["GET-MASTER-ADDR-BY-NAME", &self.service])
            .await
            .map_err(map_err)?;
        let replicas = sentinel(vec!["REPLICAS", &self.service])
            .await
            .map_err(map_err)?;
        let master = match master {
            Value::Array(parts) if parts.len() == 2 => {
                let host = parts[0].as_string().unwrap_or_default();
                let port = parts[1].as_string().and_then(|p| p.parse().ok());
                port.map(|port| (host, port))
            }
            _ => None,
        }
        .ok_or_else(|| {
            Error::redis(format!(
                "the sentinels know no primary for service `{}`",
                self.service
            ))
        })?;
        Ok((master, healthy_replicas(&replicas)))
    }
}

/// Counts the entries of `SENTINEL REPLICAS` whose flags say nothing of
/// being down or unreachable.
fn healthy_replicas(reply: &Value) -> i64 {
    let Value::Array(replicas) = reply else {
        return 0;
    };
    replicas
        .iter()
        .filter(|r| {
            let fields = match r {
                Value::Array(f) => f.as_slice(),
                _ => return false,
            };
            let flags = fields
                .chunks(2)
                .find(|kv| kv[0].as_string().as_deref() == Some("flags"))
                .and_then(|kv| kv.get(1))
                .and_then(|v| v.as_string())
                .unwrap_or_default();
            !flags
                .split(',')
                .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
        })
        .count() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_count_the_replicas_not_failing() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922
r1 127.0.0.1:7003@17003 slave a1 0 0 1 connected
r2 127.0.0.1:7004@17004 slave,fail a1 0 0 1 disconnected
r3 127.0.0.1:7005@17005 slave b2 0 0 2 connected
r4 127.0.0.1:7006@17006 slave,fail? a1 0 0 1 connected
r5 127.0.0.1:7007@17007 slave a1 0 0 1 disconnected
";
        assert_eq!(
            parse_cluster_nodes(nodes),
            PrimaryView {
                is_primary: true,
                known_replicas: Some(2)
            }
        );
        let demoted = "a1 127.0.0.1:7000@17000 myself,slave r1 0 0 3 connected\n\
                       r1 127.0.0.1:7003@17003 master - 0 0 3 connected 0-5460\n";
        assert_eq!(
            parse_cluster_nodes(demoted),
            PrimaryView {
                is_primary: false,
                known_replicas: Some(0)
            }
        );
    }

    #[test]
    fn sentinel_replicas_down_or_unreachable_do_not_count() {
        let replica = |flags: &str| {
            Value::Array(vec![
                "name".into(),
                "127.0.0.1:1".into(),
                "flags".into(),
                flags.into(),
            ])
        };
        let reply = Value::Array(vec![
            replica("slave"),
            replica("slave,s_down,disconnected"),
            replica("slave,disconnected"),
            replica("slave"),
        ]);
        assert_eq!(healthy_replicas(&reply), 2);
    }
}
