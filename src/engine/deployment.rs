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
//!
//! A Sentinel failover has a second window. Between the promotion of one
//! replica and the reconfiguration of the others (about a second), the old
//! primary still takes writes and its remaining replica still confirms
//! them; the replica then resyncs from the new primary and the writes are
//! gone (measured: fencing tokens handed out again 87 times in one
//! `SENTINEL FAILOVER`). The sentinels announce a failover on their pub/sub
//! (`+try-failover`, a timer tick or more before the promotion) and its end
//! (`+switch-master`, `+failover-end`); the client listens on every
//! sentinel and confirms no write in between. The sentinel it queries also
//! flags the primary `failover_in_progress` for that time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::config::{Config as FredConfig, ReconnectPolicy, ServerConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// How long the sentinels' answer is trusted.
const SENTINEL_VIEW_TTL: Duration = Duration::from_secs(1);

/// How long a failover announced by a sentinel counts as in progress when
/// no sentinel announces its end (a missed message).
const FAILOVER_MAX: Duration = Duration::from_secs(60);

/// What the deployment says about one primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrimaryView {
    /// The node is the primary the deployment names (false: a demoted or
    /// deposed primary that has not noticed yet).
    pub(crate) is_primary: bool,
    /// No failover is under way: a write confirmed now stays confirmed.
    pub(crate) settled: bool,
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
    /// The deployment `fred` addresses. On Sentinel, starts listening to
    /// every sentinel's failover announcements; `topology_changed` is woken
    /// when a failover ends.
    pub(crate) fn of(
        fred: &FredConfig,
        timeout: Duration,
        topology_changed: Arc<tokio::sync::Notify>,
    ) -> Self {
        match &fred.server {
            ServerConfig::Clustered { .. } => Deployment::Cluster,
            ServerConfig::Sentinel {
                hosts,
                service_name,
                ..
            } => {
                let sentinels = Sentinels {
                    base: fred.clone(),
                    hosts: hosts.iter().map(|h| (h.host.to_string(), h.port)).collect(),
                    service: service_name.clone(),
                    timeout,
                    clients: tokio::sync::Mutex::new(vec![None; hosts.len()]),
                    view: Mutex::new(None),
                    failover: Arc::new(Mutex::new(None)),
                    listeners: Mutex::new(vec![]),
                };
                sentinels.listen(topology_changed);
                Deployment::Sentinel(Box::new(sentinels))
            }
            _ => Deployment::Plain,
        }
    }

    /// What the deployment says of the node `redis` reaches for `slot`.
    pub(crate) async fn view(&self, redis: &Client, slot: u16) -> Result<PrimaryView> {
        match self {
            Deployment::Cluster => cluster_view(redis, slot).await,
            Deployment::Sentinel(sentinels) => {
                let view = sentinels.view().await?;
                // The node is known by its run id (`INFO server`): its
                // address as this client reaches it may be a proxy's, or
                // unknown to fred without `CLIENT ID`.
                let run_id = node_run_id(redis, slot).await?;
                let is_primary = view.master_run_id.is_empty() || run_id == view.master_run_id;
                if !is_primary {
                    tracing::debug!(%run_id, master = ?view.master, master_run_id = %view.master_run_id, "the sentinels name another node the primary");
                }
                Ok(PrimaryView {
                    is_primary,
                    settled: view.settled && !sentinels.failover_announced(),
                    known_replicas: Some(view.replicas),
                })
            }
            Deployment::Plain => Ok(PrimaryView {
                is_primary: true,
                settled: true,
                known_replicas: None,
            }),
        }
    }

    /// Whether a sentinel has announced a failover that has not ended:
    /// read at every write, not cached.
    pub(crate) fn failover_announced(&self) -> bool {
        match self {
            Deployment::Sentinel(s) => s.failover_announced(),
            _ => false,
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
            for client in s.clients.lock().await.iter_mut() {
                if let Some(client) = client.take() {
                    let _ = client.quit().await;
                }
            }
            for listener in s.listeners.lock().drain(..) {
                listener.abort();
            }
        }
    }
}

/// The run id of the node `redis` reaches for `slot` (`INFO server`).
async fn node_run_id(redis: &Client, slot: u16) -> Result<String> {
    let info: String = redis
        .custom(
            CustomCommand::new_static("INFO", ClusterHash::Custom(slot), false),
            vec!["server"],
        )
        .await
        .map_err(|e| Error::from_redis(&e, Duration::ZERO))?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .unwrap_or_default()
        .trim()
        .to_string())
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
            settled: true,
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
    // A cluster's manual failover pauses the old primary until its replica
    // has caught up, so no confirmed write is lost in between.
    PrimaryView {
        is_primary,
        settled: true,
        known_replicas: Some(replicas),
    }
}

/// What the sentinel asked last said.
#[derive(Debug, Clone)]
struct SentinelView {
    /// The primary's (host, port), as the sentinels reach it.
    master: (String, u16),
    /// The primary's run id (empty if the sentinel does not know it yet).
    master_run_id: String,
    /// Its replicas not flagged down.
    replicas: i64,
    /// The primary is not flagged down or in a failover.
    settled: bool,
    /// The configuration epoch of the answer: sentinels that disagree (one
    /// has not heard of a failover yet) are settled by the newest.
    epoch: u64,
    read_at: Instant,
}

/// A connection to the sentinels, made on first use, and their last answer;
/// a subscription on each to their failover announcements.
pub(crate) struct Sentinels {
    /// The client's fred settings (credentials, TLS), pointed at one sentinel at a time.
    base: FredConfig,
    hosts: Vec<(String, u16)>,
    service: String,
    timeout: Duration,
    /// A command connection to each sentinel, made on first use.
    clients: tokio::sync::Mutex<Vec<Option<Client>>>,
    view: Mutex<Option<SentinelView>>,
    /// Since when a sentinel has announced a failover of the service that
    /// no sentinel has announced the end of.
    failover: Arc<Mutex<Option<Instant>>>,
    listeners: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Sentinels {
    /// Whether a failover announced by a sentinel may still be under way.
    fn failover_announced(&self) -> bool {
        self.failover
            .lock()
            .is_some_and(|since| since.elapsed() < FAILOVER_MAX)
    }

    /// The settings of a connection to one sentinel.
    fn config_for(&self, host: &str, port: u16) -> FredConfig {
        let mut config = self.base.clone();
        config.server = ServerConfig::new_centralized(host, port);
        config.database = None;
        config.fail_fast = true;
        config
    }

    /// Subscribes to every sentinel's failover announcements, for the life
    /// of the client. A sentinel that cannot be reached is tried again by
    /// fred's reconnection, and subscribed to once it answers.
    fn listen(&self, topology_changed: Arc<tokio::sync::Notify>) {
        let mut listeners = self.listeners.lock();
        for (host, port) in &self.hosts {
            let Ok(subscriber) = Builder::from_config(self.config_for(host, *port))
                .with_connection_config(|c| {
                    c.connection_timeout = self.timeout;
                    c.internal_command_timeout = self.timeout;
                })
                .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
                .build_subscriber_client()
            else {
                continue;
            };
            let (failover, service, nudge) = (
                self.failover.clone(),
                self.service.clone(),
                topology_changed.clone(),
            );
            listeners.push(tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                let mut messages = subscriber.message_rx();
                let _resubscribe = subscriber.manage_subscriptions();
                // Unreachable now: fred keeps trying, and the managed
                // subscriptions follow once it connects.
                let _ = subscriber.init().await;
                if let Err(e) = subscriber.subscribe(FAILOVER_EVENTS.to_vec()).await {
                    tracing::warn!(error = %e, "cannot follow a sentinel's failover announcements; during a failover lock writes are judged by the polled view only");
                }
                loop {
                    match messages.recv().await {
                        Ok(message) => {
                            let text = message.value.as_string().unwrap_or_default();
                            if !text.split_whitespace().any(|w| w == service) {
                                continue;
                            }
                            let event = message.channel.to_string();
                            let ended = ENDS.contains(&event.as_str());
                            *failover.lock() = (!ended).then(Instant::now);
                            if ended {
                                tracing::info!(%event, "sentinel: failover over");
                                nudge.notify_one();
                            } else {
                                tracing::info!(%event, "sentinel: failover under way; lock writes are not confirmed until it ends");
                            }
                        }
                        Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return,
                    }
                }
            }));
        }
    }

    /// What the sentinels say, from every one that answers: the answer
    /// with the newest configuration epoch wins, since a sentinel that has
    /// not yet heard of a failover still names the old primary.
    async fn view(&self) -> Result<SentinelView> {
        if let Some(view) = self.view.lock().clone() {
            if view.read_at.elapsed() < SENTINEL_VIEW_TTL {
                return Ok(view);
            }
        }
        let mut clients = self.clients.lock().await;
        let asked = futures::future::join_all(
            clients
                .iter_mut()
                .zip(&self.hosts)
                .map(|(client, (host, port))| self.ask_one(client, host, *port)),
        )
        .await;
        let mut newest: Option<SentinelView> = None;
        let mut last_error = None;
        for answer in asked {
            match answer {
                Ok(view) if newest.as_ref().is_none_or(|n| view.epoch > n.epoch) => {
                    newest = Some(view)
                }
                Ok(_) => {}
                Err(e) => last_error = Some(e),
            }
        }
        match newest {
            Some(view) => {
                *self.view.lock() = Some(view.clone());
                Ok(view)
            }
            None => Err(last_error.unwrap_or_else(|| Error::redis("no sentinel configured"))),
        }
    }

    /// Asks one sentinel, connecting first if needed; a failed connection
    /// is dropped, to be made again next time.
    async fn ask_one(
        &self,
        client: &mut Option<Client>,
        host: &str,
        port: u16,
    ) -> Result<SentinelView> {
        if client.is_none() {
            *client = Some(self.connect(host, port).await?);
        }
        let asked = self.ask(client.as_ref().expect("connected")).await;
        if asked.is_err() {
            if let Some(c) = client.take() {
                let _ = c.quit().await;
            }
        }
        asked
    }

    /// Connects to one sentinel.
    async fn connect(&self, host: &str, port: u16) -> Result<Client> {
        let client = Builder::from_config(self.config_for(host, port))
            .with_connection_config(|c| {
                c.connection_timeout = self.timeout;
                c.internal_command_timeout = self.timeout;
            })
            .with_performance_config(|p| p.default_command_timeout = self.timeout)
            .build()
            .map_err(|e| Error::Config(e.details().to_string()))?;
        let connected = match tokio::time::timeout(self.timeout, client.init()).await {
            Ok(Ok(_)) => return Ok(client),
            Ok(Err(e)) => Error::from_redis(&e, self.timeout),
            Err(_) => Error::Timeout(self.timeout),
        };
        let _ = client.quit().await;
        Err(connected)
    }

    async fn ask(&self, client: &Client) -> Result<SentinelView> {
        let sentinel = |args: Vec<&str>| {
            let args: Vec<Value> = args.into_iter().map(Value::from).collect();
            client.custom::<Value, Value>(
                CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
                args,
            )
        };
        let map_err = |e: fred::error::Error| Error::from_redis(&e, self.timeout);
        let master = sentinel(vec!["MASTER", &self.service])
            .await
            .map_err(map_err)?;
        let replicas = sentinel(vec!["REPLICAS", &self.service])
            .await
            .map_err(map_err)?;
        let fields = field_map(&master);
        let host = fields.get("ip").cloned();
        let port = fields.get("port").and_then(|p| p.parse().ok());
        let (Some(host), Some(port)) = (host, port) else {
            return Err(Error::redis(format!(
                "the sentinels know no primary for service `{}`",
                self.service
            )));
        };
        let flags = fields.get("flags").cloned().unwrap_or_default();
        let settled = !flags
            .split(',')
            .any(|f| matches!(f, "failover_in_progress" | "s_down" | "o_down"));
        Ok(SentinelView {
            master: (host, port),
            master_run_id: fields.get("runid").cloned().unwrap_or_default(),
            replicas: healthy_replicas(&replicas),
            settled,
            epoch: fields
                .get("config-epoch")
                .and_then(|e| e.parse().ok())
                .unwrap_or(0),
            read_at: Instant::now(),
        })
    }
}

/// The sentinels' pub/sub channels that announce a failover's steps.
const FAILOVER_EVENTS: [&str; 9] = [
    "+try-failover",
    "+elected-leader",
    "+selected-slave",
    "+promoted-slave",
    "+switch-master",
    "+failover-end",
    "+failover-end-for-timeout",
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
];

/// Of those, the ones that end a failover.
const ENDS: [&str; 5] = [
    "+switch-master",
    "+failover-end",
    "+failover-end-for-timeout",
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
];

/// A flat `[name, value, ...]` reply as a map.
fn field_map(reply: &Value) -> std::collections::HashMap<String, String> {
    let Value::Array(fields) = reply else {
        return Default::default();
    };
    fields
        .chunks(2)
        .filter_map(|kv| Some((kv.first()?.as_string()?, kv.get(1)?.as_string()?)))
        .collect()
}

/// Counts the entries of `SENTINEL REPLICAS` the sentinels have not
/// concluded are down.
fn healthy_replicas(reply: &Value) -> i64 {
    let Value::Array(replicas) = reply else {
        return 0;
    };
    replicas
        .iter()
        .filter(|r| {
            let flags = field_map(r).remove("flags").unwrap_or_default();
            // Not `disconnected`: right after a failover the sentinels
            // make new entries for the new primary's replicas, which stay
            // disconnected until their links are up, and a primary whose
            // replicas all read so would confirm nothing (measured: writes
            // on a promoted replica counted 0 replicas and were not
            // waited for). Down is what the sentinels have concluded.
            !flags.split(',').any(|f| matches!(f, "s_down" | "o_down"))
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
                settled: true,
                known_replicas: Some(2)
            }
        );
        let demoted = "a1 127.0.0.1:7000@17000 myself,slave r1 0 0 3 connected\n\
                       r1 127.0.0.1:7003@17003 master - 0 0 3 connected 0-5460\n";
        assert_eq!(
            parse_cluster_nodes(demoted),
            PrimaryView {
                is_primary: false,
                settled: true,
                known_replicas: Some(0)
            }
        );
    }

    #[test]
    fn sentinel_replicas_down_do_not_count_and_disconnected_ones_do() {
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
            replica("slave,o_down"),
        ]);
        assert_eq!(healthy_replicas(&reply), 2);
    }
}
