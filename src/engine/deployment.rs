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
//! On Sentinel, `engine::sentinels` also says whether a failover is under
//! way (no write counts as confirmed then) and recognises the primary by its
//! run id.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, ServerConfig};
use fred::types::{ClusterHash, CustomCommand};

use crate::engine::sentinels::Sentinels;
use crate::error::{Error, Result};

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
    /// The deployment `fred` addresses. `generation` is bumped whenever a
    /// sentinel announces a failover step.
    pub(crate) fn of(fred: &FredConfig, timeout: Duration, generation: Arc<AtomicU64>) -> Self {
        match &fred.server {
            ServerConfig::Clustered { .. } => Deployment::Cluster,
            ServerConfig::Sentinel {
                hosts,
                service_name,
                ..
            } => Deployment::Sentinel(Box::new(Sentinels::new(
                fred,
                hosts.iter().map(|h| (h.host.to_string(), h.port)).collect(),
                service_name.clone(),
                timeout,
                generation,
            ))),
            _ => Deployment::Plain,
        }
    }

    /// Once connected: on Sentinel, starts following every sentinel's
    /// failover announcements; `topology_changed` is woken when one ends.
    pub(crate) fn listen(&self, topology_changed: Arc<tokio::sync::Notify>) {
        if let Deployment::Sentinel(s) = self {
            s.listen(topology_changed);
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
                let is_primary = run_id == view.master_run_id || !view.settled;
                if run_id != view.master_run_id {
                    tracing::debug!(%run_id, master_run_id = %view.master_run_id, settled = view.settled, "the sentinels name another node the primary");
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
            s.forget();
        }
    }

    pub(crate) async fn quit(&self) {
        if let Deployment::Sentinel(s) = self {
            s.quit().await;
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
}
