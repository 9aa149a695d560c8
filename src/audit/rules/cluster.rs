//! Cluster: `cluster-replica-validity`, `cluster-node-timeout`,
//! `cluster-full-coverage`, `sharded-pubsub`. (`replicas` per primary is in
//! `replication`.)

use super::Ctx;
use crate::audit::gather::Role;
use crate::audit::report::{DeploymentKind, Finding, Severity};
use crate::config::ShardedSubscriptionMode;

pub(crate) async fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = vec![];
    if ctx.seen.kind != DeploymentKind::Cluster {
        return out;
    }
    for node in ctx.seen.nodes.iter().filter(|n| n.role == Role::Replica) {
        let target = node.addr.as_str();
        out.push(match node.setting("cluster-replica-validity-factor") {
            Err(t) => Finding::unknown("cluster-replica-validity", target, format!("CONFIG GET {t}")),
            Ok(v) => {
                let factor: u64 = v.parse().unwrap_or(10);
                let base = Finding::new("cluster-replica-validity", Severity::Ok, target)
                    .fact("factor", factor)
                    .evidence(format!("cluster-replica-validity-factor {factor}"));
                if factor == 0 {
                    Finding {
                        severity: Severity::Warn,
                        ..base
                    }
                    .why("a replica cut off for any length of time may still be promoted, without the locks written meanwhile")
                    .fix("CONFIG SET cluster-replica-validity-factor 10")
                } else {
                    base.why("a replica too long out of touch is not promoted, so a failover does not go back far in time")
                }
            }
        });
    }

    // cluster-node-timeout: a replica starts its election once its primary
    // is marked failed, which takes the node timeout, then waits at least
    // 500 ms more (clusterHandleSlaveFailover's fixed delay).
    for node in ctx.seen.primaries() {
        let target = node.addr.as_str();
        out.push(match node.setting("cluster-node-timeout") {
            Err(t) => Finding::unknown("cluster-node-timeout", target, format!("CONFIG GET {t}")),
            Ok(v) => {
                let timeout: u64 = v.parse().unwrap_or(15_000);
                let shortest = ctx.lease() * 2 / 3;
                super::failover_against_lease(
                    ctx,
                    "cluster-node-timeout",
                    target,
                    format!("cluster-node-timeout {timeout}, then an election delay of at least 500 ms"),
                    std::time::Duration::from_millis(timeout + 500),
                    format!(
                        "CONFIG SET cluster-node-timeout well below {} ms on every node, or raise lockWatchdogTimeout",
                        shortest.as_millis().saturating_sub(500)
                    ),
                )
                .fact("node_timeout_ms", timeout)
            }
        });
    }

    let mut values = vec![];
    let mut unknown = None;
    for node in ctx.seen.primaries() {
        match node.setting("cluster-require-full-coverage") {
            Ok(v) => values.push(format!("{} {v}", node.addr)),
            Err(t) => unknown = Some(format!("{}: CONFIG GET {t}", node.addr)),
        }
    }
    out.push(match unknown {
        Some(why) => Finding::unknown("cluster-full-coverage", "deployment", why),
        None => {
            let all_yes = values.iter().all(|v| v.ends_with(" yes"));
            Finding::new("cluster-full-coverage", Severity::Ok, "deployment")
                .fact("require_full_coverage", all_yes)
                .evidence(format!("cluster-require-full-coverage: {}", values.join(", ")))
                .why(if all_yes {
                    "a cluster missing a slot stops every write: renewals fail and holders are told, no lock is handed out twice"
                } else {
                    "the slots still covered keep serving locks while others are down; exclusion is not affected"
                })
        }
    });

    // sharded-pubsub: what a client in AUTO mode picks, against the setting.
    let Some(node) = ctx.seen.primaries().find(|n| n.link.is_ok()) else {
        out.push(Finding::unknown(
            "sharded-pubsub",
            "deployment",
            "no primary answered",
        ));
        return out;
    };
    let Ok(link) = &node.link else {
        return out;
    };
    let probe = link
        .ask("PUBSUB", &["SHARDNUMSUB", "redisson-lock-audit"])
        .await;
    let available = match &probe {
        Ok(_) => true,
        Err(t)
            if t.is_unknown_command()
                || matches!(t, crate::audit::link::Trouble::Refused(m) if m.contains("SHARDNUMSUB") || m.contains("subcommand")) =>
        {
            false
        }
        Err(t) => {
            out.push(Finding::unknown(
                "sharded-pubsub",
                "deployment",
                format!("PUBSUB SHARDNUMSUB {t}"),
            ));
            return out;
        }
    };
    let mode = ctx.config.sharded_subscription_mode;
    let base = Finding::new("sharded-pubsub", Severity::Ok, "deployment")
        .fact("available", available)
        .evidence(format!(
            "sharded pub/sub {}; shardedSubscriptionMode {mode:?}",
            if available {
                "available"
            } else {
                "not available (Redis < 7)"
            }
        ));
    out.push(match (available, mode) {
        (false, ShardedSubscriptionMode::On) => Finding {
            severity: Severity::Fail,
            ..base
        }
        .why("the client is set to SSUBSCRIBE / SPUBLISH, which this server does not have: unlock messages fail")
        .fix("set shardedSubscriptionMode AUTO (as Redisson's default)"),
        (true, ShardedSubscriptionMode::Off) => Finding {
            severity: Severity::Warn,
            ..base
        }
        .why("this client publishes unlocks with PUBLISH while a Redisson 4.7 fleet in AUTO listens with SSUBSCRIBE: Java waiters miss Rust unlocks until their TTL")
        .fix("set shardedSubscriptionMode AUTO on both sides, or OFF on both"),
        _ => base.why("unlock messages go where the Redisson fleet (AUTO) listens"),
    });
    out
}
