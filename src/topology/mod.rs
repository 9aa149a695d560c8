//! What the client knows of the deployment: one view per client, below the
//! engine, as fred keeps its router below its commands.
//!
//! The engine asks one question of it before a lock write: *what must
//! confirm this write* ([`Topology::requirement`]). The answer is read from
//! the view, never from Redis: the view is kept by events (the sentinels'
//! announcements, a connection lost or re-made, the cluster's slot map
//! changing) and by a periodic scan (a sentinel a second, a cluster node
//! every five seconds, as Redisson scans), and a write that falls short of
//! its replicas asks for a refresh of that primary (rate-limited per node).
//!
//! | module | job |
//! |---|---|
//! | `promotion` | which replicas a failover could promote: Sentinel's and the cluster's own rules |
//! | `sentinel` | the sentinels: polled in turn with a timeout each, a majority decides, their failover announcements followed |
//! | `cluster` | `CLUSTER NODES` scans: each primary's promotable replicas |
//! | `resolver` | on Sentinel, every connection resolves to the primary of the view |
//!
//! The engine imports this module; this module imports nothing of the
//! engine's.

pub(crate) mod cluster;
pub(crate) mod node;
pub(crate) mod promotion;
pub(crate) mod replica_age;
pub(crate) mod resolver;
pub(crate) mod sentinel;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface};
use fred::types::config::{Config as FredConfig, Server, ServerConfig};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::Result;
use cluster::ClusterWatch;
use resolver::FollowPrimary;
use sentinel::Sentinels;

/// What must confirm a lock write on the primary it goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Requirement {
    /// A single server: nothing to wait for (Redisson never waits there).
    Nothing,
    /// The primary's replicas: `promotable` a failover could promote (they
    /// must have the write), `others` that may acknowledge a `WAIT`
    /// without counting, `left_out` that a failover could promote again
    /// once they are back (a write confirmed without them is confirmed for
    /// now only).
    Replicas {
        promotable: u32,
        others: u32,
        left_out: u32,
        /// The promotable replicas' addresses (`ip:port`, as the primary's
        /// `ROLE` names them), to tell their acknowledgements apart.
        promotable_at: Arc<[String]>,
        /// A replica is listed that cannot be promoted now, for any reason
        /// (priority 0, `nofailover`, down, too old): whatever the view
        /// says of it, it may still be replicating (the sentinels may be
        /// the ones cut off from it), so a `WAIT`'s count may include its
        /// acknowledgement, and only a replica-by-replica read tells.
        mixed: bool,
    },
    /// No write counts as confirmed now: a failover is under way, or the
    /// primary is not known yet. Why, for logs.
    Unsettled(String),
    /// The connection still reaches a node that is no longer the primary,
    /// and is being moved: nothing may be sent on it.
    Moving(String),
}

enum Deployment {
    Single,
    Sentinel(Arc<Sentinels>),
    /// Set once the command connection exists (it carries the scans).
    Cluster {
        watch: parking_lot::RwLock<Option<Arc<ClusterWatch>>>,
        /// The client's settings and id, for the connections to replicas.
        base: Box<FredConfig>,
        client_id: String,
    },
}

/// A connection that follows the sentinels' primary.
struct Follower {
    resolver: Arc<FollowPrimary>,
    client: Reconnect,
}

/// How a connection is moved: fred's clients and subscriber clients.
#[derive(Clone)]
enum Reconnect {
    Client(Client),
    Subscriber(fred::clients::SubscriberClient),
}

impl Reconnect {
    async fn force(&self) {
        let _ = match self {
            Reconnect::Client(c) => c.force_reconnection().await,
            Reconnect::Subscriber(c) => c.force_reconnection().await,
        };
    }
}

/// The client's view of its deployment.
pub(crate) struct Topology {
    deployment: Deployment,
    timeout: Duration,
    /// Bumped at every change of the view or of a connection: cached
    /// judgements (a write that fell short) are made again.
    changes: watch::Sender<u64>,
    /// On Sentinel: every connection of the client, by fred client id.
    followers: Mutex<HashMap<String, Follower>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Topology {
    /// Learns the deployment `fred` addresses. On Sentinel this waits (at
    /// most `connect_timeout`) until a majority of the sentinels names the
    /// primary. Returns the view and the settings the client's data
    /// connections are built from.
    /// The connections it makes to sentinels name themselves
    /// `redisson-lock:<client_id>:sentinel`.
    pub(crate) async fn start(
        fred: &FredConfig,
        timeout: Duration,
        connect_timeout: Duration,
        client_id: &str,
    ) -> Result<(Arc<Topology>, FredConfig)> {
        let (deployment, data) = match &fred.server {
            ServerConfig::Clustered { .. } => (
                Deployment::Cluster {
                    watch: parking_lot::RwLock::new(None),
                    base: Box::new(fred.clone()),
                    client_id: client_id.to_string(),
                },
                fred.clone(),
            ),
            ServerConfig::Sentinel {
                hosts,
                service_name,
                ..
            } => {
                let sentinels = Sentinels::start(
                    fred,
                    hosts.iter().map(|h| (h.host.to_string(), h.port)).collect(),
                    service_name.clone(),
                    timeout,
                    connect_timeout,
                    format!("redisson-lock:{client_id}:sentinel"),
                )
                .await?;
                let primary = sentinels.view().borrow().primary.clone();
                let mut data = fred.clone();
                // Resolved through `FollowPrimary` at every (re)connection;
                // the name is only what fred checks a TLS certificate with.
                let (host, port) = primary.map_or((String::new(), 0), |p| (p.host, p.port));
                data.server = ServerConfig::Centralized {
                    server: Server::new(host, port),
                };
                (Deployment::Sentinel(sentinels), data)
            }
            _ => (Deployment::Single, fred.clone()),
        };
        let topology = Arc::new(Topology {
            deployment,
            timeout,
            changes: watch::Sender::new(0),
            followers: Mutex::new(HashMap::new()),
            tasks: Mutex::new(vec![]),
        });
        Ok((topology, data))
    }

    /// Whether lock writes wait for replicas here (every deployment but a
    /// single server, as in Redisson).
    pub(crate) fn is_replicated(&self) -> bool {
        !matches!(self.deployment, Deployment::Single)
    }

    /// On Sentinel, the primary the sentinels name (for error messages:
    /// the address the client must be able to reach).
    pub(crate) fn primary_address(&self) -> Option<String> {
        match &self.deployment {
            Deployment::Sentinel(sentinels) => sentinels
                .view()
                .borrow()
                .primary
                .as_ref()
                .map(ToString::to_string),
            _ => None,
        }
    }

    /// Whether this is a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.deployment, Deployment::Cluster { .. })
    }

    /// Before `client` connects: on Sentinel, it resolves its address to the
    /// primary of the view from now on, and is moved when that changes.
    pub(crate) async fn follow(&self, client: &Client) {
        self.follow_as(client, Reconnect::Client(client.clone()))
            .await
    }

    /// As [`Topology::follow`], for a subscriber connection.
    pub(crate) async fn follow_subscriber(&self, client: &fred::clients::SubscriberClient) {
        self.follow_as(client, Reconnect::Subscriber(client.clone()))
            .await
    }

    /// Stops moving the client of id `id` (it is closing).
    pub(crate) fn unfollow(&self, id: &str) {
        self.followers.lock().remove(id);
    }

    async fn follow_as(&self, client: &impl ClientLike, reconnect: Reconnect) {
        let Deployment::Sentinel(sentinels) = &self.deployment else {
            return;
        };
        let resolver = Arc::new(FollowPrimary::new(sentinels.view()));
        client.set_resolver(resolver.clone()).await;
        self.followers.lock().insert(
            client.id().to_string(),
            Follower {
                resolver,
                client: reconnect,
            },
        );
    }

    /// Once the connections are up: starts keeping the view (scans,
    /// announcements) and following `writers`' connection events.
    /// `redis` is the command connection, which carries a cluster's scans.
    pub(crate) async fn attach(self: &Arc<Self>, redis: &Client, writers: &[Client]) -> Result<()> {
        let mut tasks = vec![];
        match &self.deployment {
            Deployment::Single => {}
            Deployment::Cluster {
                watch: slot,
                base,
                client_id,
            } => {
                let watch =
                    ClusterWatch::new(redis.clone(), (**base).clone(), self.timeout, client_id);
                watch.scan_once().await?;
                *slot.write() = Some(watch.clone());
                let me = Arc::downgrade(self);
                tasks.push(tokio::spawn(watch.run(move || {
                    if let Some(me) = me.upgrade() {
                        me.changed();
                    }
                })));
            }
            Deployment::Sentinel(sentinels) => {
                sentinels.listen();
                tasks.push(tokio::spawn(follow_primary(
                    Arc::downgrade(self),
                    sentinels.view(),
                )));
            }
        }
        for writer in writers {
            tasks.push(tokio::spawn(watch_connection(
                Arc::downgrade(self),
                writer.reconnect_rx(),
                writer.cluster_change_rx(),
            )));
        }
        self.tasks.lock().extend(tasks);
        Ok(())
    }

    /// What must confirm a write of `slot` sent through `writer`.
    pub(crate) fn requirement(&self, writer: &Client, slot: u16) -> Requirement {
        match &self.deployment {
            Deployment::Single => Requirement::Nothing,
            Deployment::Sentinel(sentinels) => {
                let view = sentinels.view().borrow().clone();
                let reached = self
                    .followers
                    .lock()
                    .get(&writer.id().to_string())
                    .and_then(|f| f.resolver.reached());
                if view.primary.is_some() && reached.is_some() && reached != view.primary {
                    let why = format!(
                        "the connection reaches {}, the sentinels name {}",
                        reached.map(|a| a.to_string()).unwrap_or_default(),
                        view.primary.map(|a| a.to_string()).unwrap_or_default()
                    );
                    return Requirement::Moving(why);
                }
                match view.unsettled {
                    Some(why) => Requirement::Unsettled(why),
                    None => Requirement::Replicas {
                        promotable: view.promotable,
                        others: view.others,
                        left_out: view.left_out,
                        promotable_at: view.promotable_at,
                        mixed: view.mixed,
                    },
                }
            }
            Deployment::Cluster {
                watch: slot_watch, ..
            } => {
                let Some(watch) = slot_watch.read().clone() else {
                    return Requirement::Unsettled("the cluster has not been scanned yet".into());
                };
                let Some(node) = primary_of(writer, slot) else {
                    return Requirement::Unsettled(format!("no node is known for slot {slot}"));
                };
                let address = format!("{}:{}", node.host, node.port);
                match watch.replicas_of(&address) {
                    Some(r) => Requirement::Replicas {
                        promotable: r.promotable,
                        others: r.others,
                        left_out: r.left_out,
                        promotable_at: r.promotable_at,
                        mixed: r.mixed,
                    },
                    // The view has another owner for the slot: the
                    // connection's map is behind.
                    None if watch.serves(slot, &address) == Some(false) => {
                        watch.map_behind(writer);
                        Requirement::Moving(format!(
                            "the connection's slot map sends slot {slot} to {address}, \
                             which the cluster's view says no longer serves it"
                        ))
                    }
                    None => {
                        watch.refresh(node);
                        Requirement::Unsettled(format!(
                            "{address} is not a primary in the cluster's last view"
                        ))
                    }
                }
            }
        }
    }

    /// On a cluster: whether the node at `address` (`host:port`) serves
    /// `slot` in the view; `None` off a cluster or when the view does not
    /// know the slot's owner.
    pub(crate) fn serves(&self, slot: u16, address: &str) -> Option<bool> {
        match &self.deployment {
            Deployment::Cluster { watch, .. } => watch.read().as_ref()?.serves(slot, address),
            _ => None,
        }
    }

    /// The primary a write of `slot` through `writer` goes to, as a key
    /// for remembering what happened there.
    pub(crate) fn node_of(&self, writer: &Client, slot: u16) -> String {
        match primary_of(writer, slot) {
            Some(node) if self.is_cluster() => format!("{}:{}", node.host, node.port),
            _ => "primary".to_string(),
        }
    }

    /// A write of `slot` through `writer` fell short of its replicas: the
    /// view of that primary is read again soon.
    pub(crate) fn fell_short(&self, writer: &Client, slot: u16) {
        match &self.deployment {
            Deployment::Single => {}
            Deployment::Sentinel(sentinels) => sentinels.refresh(),
            Deployment::Cluster { watch, .. } => {
                if let (Some(watch), Some(node)) = (watch.read().clone(), primary_of(writer, slot))
                {
                    watch.refresh(node);
                }
            }
        }
    }

    /// The view's generation, as it changes.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The view's generation now.
    pub(crate) fn generation(&self) -> u64 {
        *self.changes.borrow()
    }

    fn changed(&self) {
        self.changes.send_modify(|g| *g += 1);
    }

    /// A connection was re-made or the cluster's slot map changed: the
    /// view is read again, and everyone who waits for a change is told.
    fn connection_event(&self) {
        match &self.deployment {
            Deployment::Single => {}
            Deployment::Sentinel(sentinels) => sentinels.refresh(),
            Deployment::Cluster { watch, .. } => {
                if let Some(watch) = watch.read().clone() {
                    watch.refresh_all();
                }
            }
        }
        self.changed();
    }

    /// Stops keeping the view and closes the sentinels' connections.
    pub(crate) async fn quit(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
        match &self.deployment {
            Deployment::Sentinel(sentinels) => sentinels.quit().await,
            Deployment::Cluster { watch, .. } => {
                let watch = watch.read().clone();
                if let Some(watch) = watch {
                    watch.close().await;
                }
            }
            Deployment::Single => {}
        }
        self.followers.lock().clear();
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for task in self.tasks.get_mut().drain(..) {
            task.abort();
        }
    }
}

/// The primary that serves `slot`, as `writer` last saw the slot map
/// (`None` off a cluster).
fn primary_of(writer: &Client, slot: u16) -> Option<Server> {
    writer
        .cached_cluster_state()
        .and_then(|state| state.get_server(slot).cloned())
}

/// On Sentinel: when the sentinels name another primary, every connection
/// is moved to it; every change of the view is a change.
async fn follow_primary(
    topology: std::sync::Weak<Topology>,
    mut view: watch::Receiver<sentinel::SentinelView>,
) {
    let mut primary = view.borrow_and_update().primary.clone();
    while view.changed().await.is_ok() {
        let now = view.borrow_and_update().primary.clone();
        let Some(topology) = topology.upgrade() else {
            return;
        };
        if now != primary {
            primary = now;
            let followers: Vec<Reconnect> = topology
                .followers
                .lock()
                .values()
                .map(|f| f.client.clone())
                .collect();
            let limit = topology.timeout;
            tokio::spawn(async move {
                for follower in followers {
                    let _ = tokio::time::timeout(limit, follower.force()).await;
                }
            });
        }
        topology.changed();
    }
}

/// Follows one write connection's events until the client stops.
async fn watch_connection(
    topology: std::sync::Weak<Topology>,
    mut reconnects: tokio::sync::broadcast::Receiver<Server>,
    mut cluster_changes: tokio::sync::broadcast::Receiver<Vec<fred::types::ClusterStateChange>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let event = tokio::select! {
            e = reconnects.recv() => e.map(drop),
            e = cluster_changes.recv() => e.map(drop),
        };
        match event {
            Ok(()) | Err(RecvError::Lagged(_)) => match topology.upgrade() {
                Some(topology) => topology.connection_event(),
                None => return,
            },
            Err(RecvError::Closed) => return,
        }
    }
}
