//! `address`, on a single-server address: what is really behind it. A
//! managed HA endpoint is a replicated primary behind one address (its
//! writes are never followed by `WAIT`); a replica answers every write
//! with `READONLY`; a cluster node answers keys of other slots with `MOVED`.

use super::Ctx;
use crate::audit::gather::NodeSeen;
use crate::audit::report::{DeploymentKind, Finding, Severity};

pub(crate) fn check(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    if ctx.seen.kind != DeploymentKind::Single {
        return;
    }
    for node in ctx.seen.primaries() {
        out.push(one(node));
    }
}

fn one(node: &NodeSeen) -> Finding {
    let target = node.addr.as_str();
    let field = |name: &str| {
        node.info(name)
            .ok()
            .flatten()
            .unwrap_or_default()
            .to_string()
    };
    if let Err(t) = node.info("role") {
        return Finding::unknown("address", target, format!("INFO {t}"));
    }
    let role = field("role");
    let cluster = field("cluster_enabled") == "1";
    let replicas: u64 = field("connected_slaves").parse().unwrap_or(0);
    let base = Finding::new("address", Severity::Ok, target)
        .fact("role", role.as_str())
        .fact("cluster_enabled", cluster)
        .fact("connected_replicas", replicas)
        .evidence(format!(
            "a single-server address (redis://); INFO: role:{role}, cluster_enabled:{}, connected_slaves:{replicas}",
            u8::from(cluster)
        ));
    if role == "slave" {
        Finding {
            severity: Severity::Fail,
            ..base
        }
        .why("the address is a replica: every lock write is refused (READONLY)")
        .fix("point the address at the primary, or at the endpoint that follows it")
    } else if cluster {
        Finding {
            severity: Severity::Fail,
            ..base
        }
        .why("the address is a cluster node: locks in slots it does not serve are refused (MOVED), and no write is confirmed by a replica")
        .fix("use a redis-cluster:// address listing the nodes")
    } else if replicas > 0 {
        Finding {
            severity: Severity::Warn,
            ..base
        }
        .why("a replicated primary behind a single-server address (a managed HA endpoint): lock writes are never confirmed by a replica, so a failover of the endpoint can lose a lock (silently) that was handed out")
        .fix("use a redis-sentinel:// or redis-cluster:// address so writes wait for replicas, or accept the risk (docs/safety.md)")
    } else {
        base.why("a primary without replicas: what a restart keeps is `persistence`'s finding")
    }
}
