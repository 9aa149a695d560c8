//! Replication: `replicas`, `replicas-down`, `replica-quorum`,
//! `min-replicas`, `wait-command`, `replica-priority`, `replication-lag`.

use futures::future::join_all;

use super::{secs, Ctx};
use crate::audit::gather::attached_replicas;
use crate::audit::report::{DeploymentKind, Finding, Severity};
use crate::config::ReplicaQuorum;

fn replicated(ctx: &Ctx<'_>) -> bool {
    ctx.seen.kind != DeploymentKind::Single
}

/// `replicas`, `replica-quorum`, `min-replicas`, `replica-priority`,
/// `replication-lag`.
pub(crate) fn check(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    if !replicated(ctx) {
        return;
    }
    for shard in &ctx.seen.shards {
        let known = shard.healthy_replicas() as u64;
        let node = ctx.seen.node(&shard.primary);
        let connected = node.and_then(|n| crate::audit::gather::info_number(n, "connected_slaves"));
        let base = Finding::new("replicas", Severity::Ok, &shard.primary)
            .fact("known", known)
            .fact("down", (shard.replicas.len() as u64).saturating_sub(known));
        let evidence = format!(
            "{known} replica(s) known{}{}",
            match shard.replicas.len() as u64 - known {
                0 => String::new(),
                down => format!(", {down} marked down"),
            },
            connected
                .map(|c| format!(", {c} connected"))
                .unwrap_or_default()
        );
        let finding = if known == 0 {
            Finding {
                severity: Severity::Fail,
                ..base
            }
            .evidence(evidence)
            .why("no replica can confirm a lock write: when this primary fails, its locks are gone (or, promoted from nothing, held twice)")
            .fix("give every primary at least one replica (cluster: redis-cli --cluster add-node --cluster-slave)")
        } else if connected.is_some_and(|c| c < known) {
            Finding {
                severity: Severity::Warn,
                ..base
            }
            .evidence(evidence)
            .why("a known replica is not attached: lock writes wait for it (or confirm with fewer) until it is back")
            .fix("bring the replica back, or let the deployment forget it")
        } else {
            base.evidence(evidence)
                .why("a replica holds each lock write before it counts, so a failover keeps it")
        };
        out.push(finding);
    }
    down(ctx, out);
    quorum(ctx, out);
    for shard in &ctx.seen.shards {
        let Some(node) = ctx.seen.node(&shard.primary) else {
            continue;
        };
        let known = shard.healthy_replicas() as u64;
        out.push(min_replicas(node, known));
        // A replica runs on its own settings once promoted, with the
        // other replicas as its own.
        for replica in shard.replicas.iter().filter(|r| !r.down) {
            if let Some(node) = ctx.seen.node(&replica.addr) {
                let finding = min_replicas(node, known.saturating_sub(1));
                out.push(if finding.severity == Severity::Fail {
                    let why = format!(
                        "once promoted, with {} replica(s) left: {}",
                        known.saturating_sub(1),
                        finding.why
                    );
                    finding.why(why)
                } else {
                    finding
                });
            }
        }
    }
    match ctx.seen.kind {
        DeploymentKind::Sentinel => priorities(ctx, out),
        DeploymentKind::Cluster => no_failover(ctx, out),
        _ => {}
    }
    for node in ctx.seen.primaries() {
        out.push(lag(ctx, node));
    }
}

/// `replicas-down`: replicas the deployment as a whole marks down. Each
/// puts every lock of its shard at risk: a failover could promote it once
/// it is back, without the writes made while it was away, so no write is
/// confirmed for good without it. A replica decommissioned without telling
/// the deployment stays listed down for good (until `SENTINEL RESET` or
/// `CLUSTER FORGET`), and every hold of its shard with it.
fn down(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    for shard in &ctx.seen.shards {
        let gone: Vec<_> = shard.replicas.iter().filter(|r| r.gone).collect();
        let base = Finding::new("replicas-down", Severity::Ok, &shard.primary)
            .fact("down", gone.len() as u64);
        if gone.is_empty() {
            out.push(base.evidence("no replica marked down").why(
                "every replica listed can take part: holds are at risk only while one is away",
            ));
            continue;
        }
        let names: Vec<&str> = gone.iter().map(|r| r.addr.as_str()).collect();
        let fix = match ctx.seen.kind {
            DeploymentKind::Cluster => format!(
                "if it is gone for good, forget it on every node within 60 s: {}",
                gone.iter()
                    .map(|r| format!("CLUSTER FORGET {}", r.id.as_deref().unwrap_or("<node id>")))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => format!(
                "if it is gone for good: SENTINEL RESET {} on every sentinel, one at a time (they find the live replicas again within 10 s)",
                ctx.seen.service
            ),
        };
        out.push(
            Finding {
                severity: Severity::Warn,
                ..base
            }
            .evidence(format!("marked down by the deployment: {}", names.join(", ")))
            .why("every lock of this primary is told at risk while a replica is marked down: a failover could promote it once back, without the writes made meanwhile")
            .fix(fix),
        );
    }
}

fn quorum(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    let fewest = ctx
        .seen
        .shards
        .iter()
        .map(|s| s.healthy_replicas() as u64)
        .min()
        .unwrap_or(0);
    let configured = match ctx.config.replica_quorum {
        ReplicaQuorum::Any => "any (one replica)".to_string(),
        ReplicaQuorum::All => "all".to_string(),
        ReplicaQuorum::AtLeast(n) => format!("at least {n}"),
        #[allow(unreachable_patterns)]
        _ => "other".to_string(),
    };
    let base = Finding::new("replica-quorum", Severity::Ok, "deployment")
        .fact("fewest_replicas", fewest)
        .fact(
            "check_lock_synced_slaves",
            ctx.config.check_lock_synced_slaves,
        )
        .fact("quorum", configured.as_str());
    let evidence = format!(
        "checkLockSyncedSlaves {}, replicaQuorum {configured}, fewest replicas of a primary {fewest}",
        ctx.config.check_lock_synced_slaves
    );
    let finding = if !ctx.config.check_lock_synced_slaves {
        Finding {
            severity: Severity::Warn,
            ..base
        }
        .evidence(evidence)
        .why("lock writes are not refused when no replica confirmed them: a failover right after can lose a held lock")
        .fix("set checkLockSyncedSlaves: true (Config::check_lock_synced_slaves)")
    } else if let ReplicaQuorum::AtLeast(n) = ctx.config.replica_quorum {
        if u64::from(n) > fewest {
            Finding {
                severity: Severity::Fail,
                ..base
            }
            .evidence(evidence)
            .why("the quorum asks for more replicas than a primary has: every lock write there is refused")
            .fix(format!("lower replicaQuorum to at most {fewest}, or add replicas"))
        } else {
            base.evidence(evidence)
                .why("every primary has the replicas the quorum asks for")
        }
    } else {
        base.evidence(evidence)
            .why("the quorum can be met where the primary has replicas")
    };
    out.push(finding);
}

/// Whether the node runs a Redis before 7, whose scripts are not held to
/// `min-replicas-to-write` (the check moved to the script's start in 7.0;
/// Valkey, forked from 7.2, applies it).
fn scripts_skip_min_replicas(node: &crate::audit::gather::NodeSeen) -> bool {
    let major = |v: &str| v.split('.').next().and_then(|m| m.parse::<u32>().ok());
    matches!(node.info("valkey_version"), Ok(None))
        && node
            .info("redis_version")
            .ok()
            .flatten()
            .and_then(major)
            .is_some_and(|m| m < 7)
}

fn min_replicas(node: &crate::audit::gather::NodeSeen, known: u64) -> Finding {
    let target = node.addr.as_str();
    let (to_write, max_lag) = match (
        node.setting("min-replicas-to-write"),
        node.setting("min-replicas-max-lag"),
    ) {
        (Ok(w), Ok(l)) => (w.parse::<u64>().unwrap_or(0), l.parse::<u64>().unwrap_or(0)),
        (Err(t), _) | (_, Err(t)) => {
            return Finding::unknown("min-replicas", target, format!("CONFIG GET {t}"))
        }
    };
    let base = Finding::new("min-replicas", Severity::Ok, target)
        .fact("min_replicas_to_write", to_write)
        .fact("min_replicas_max_lag_s", max_lag)
        .evidence(format!(
            "min-replicas-to-write {to_write}, min-replicas-max-lag {max_lag} s, {known} replica(s) known"
        ));
    // Redis checks the replicas only when both are set: a max lag of 0
    // turns the limit off (`processCommand`, `refreshGoodSlavesCount`).
    if max_lag == 0 && to_write > 0 {
        base.why("off: min-replicas-max-lag 0 turns min-replicas-to-write off, so an isolated primary keeps accepting writes, and only the lock's WAIT tells it was not replicated")
    } else if to_write > known && scripts_skip_min_replicas(node) {
        Finding {
            severity: Severity::Warn,
            ..base
        }
        .why("Redis before 7 does not apply min-replicas to scripts: lock writes go through, but every other write is refused (NOREPLICAS), and it stays so after an upgrade")
        .fix(format!("CONFIG SET min-replicas-to-write {known} (or add replicas)"))
    } else if to_write > known {
        Finding {
            severity: Severity::Fail,
            ..base
        }
        .why("the primary refuses every write (NOREPLICAS) while fewer replicas are attached: no lock can be taken or renewed")
        .fix(format!("CONFIG SET min-replicas-to-write {known} (or add replicas)"))
    } else if to_write == 0 {
        base.why("off: an isolated primary keeps accepting writes, and only the lock's WAIT tells it was not replicated")
    } else {
        base.why("an isolated primary stops accepting writes, so it cannot hand out locks a failover loses")
    }
}

fn priorities(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    for shard in &ctx.seen.shards {
        let healthy: Vec<_> = shard.replicas.iter().filter(|r| !r.down).collect();
        let zero: Vec<&str> = healthy
            .iter()
            .filter(|r| r.priority == Some(0))
            .map(|r| r.addr.as_str())
            .collect();
        let listed: Vec<String> = healthy
            .iter()
            .map(|r| {
                format!(
                    "{} {}",
                    r.addr,
                    r.priority.map_or("?".to_string(), |p| p.to_string())
                )
            })
            .collect();
        let base = Finding::new("replica-priority", Severity::Ok, &shard.primary)
            .fact("never_promoted", zero.len() as u64)
            .evidence(format!("replica-priority: {}", listed.join(", ")));
        let finding = if !healthy.is_empty() && zero.len() == healthy.len() {
            Finding {
                severity: Severity::Fail,
                ..base
            }
            .why("no replica can ever be promoted: when the primary fails, nothing takes over and every lock is unavailable")
            .fix("CONFIG SET replica-priority 100 on at least one replica")
        } else if !zero.is_empty() {
            Finding {
                severity: Severity::Warn,
                ..base
            }
            .why(format!(
                "{} is never promoted, yet its acknowledgement confirms a lock write: the replica promoted instead may lack the lock",
                zero.join(", ")
            ))
            .fix("use replicaQuorum all, or give every replica a non-zero replica-priority")
        } else {
            base.why("every replica can be promoted")
        };
        out.push(finding);
    }
}

/// A cluster replica with `cluster-replica-no-failover yes` is never
/// promoted, as a Sentinel replica of priority 0.
fn no_failover(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    for shard in &ctx.seen.shards {
        let mut never = vec![];
        let mut listed = vec![];
        let mut unknown = None;
        for r in shard.replicas.iter().filter(|r| !r.down) {
            match ctx
                .seen
                .node(&r.addr)
                .map(|n| n.setting("cluster-replica-no-failover"))
            {
                Some(Ok(v)) => {
                    listed.push(format!("{} {v}", r.addr));
                    if v == "yes" {
                        never.push(r.addr.as_str());
                    }
                }
                Some(Err(t)) => unknown = Some(format!("{}: CONFIG GET {t}", r.addr)),
                None => unknown = Some(format!("{}: not read", r.addr)),
            }
        }
        if listed.is_empty() && unknown.is_none() {
            // No replica: `replicas` says so.
            continue;
        }
        if let Some(why) = unknown {
            out.push(Finding::unknown("replica-priority", &shard.primary, why));
            continue;
        }
        let base = Finding::new("replica-priority", Severity::Ok, &shard.primary)
            .fact("never_promoted", never.len() as u64)
            .evidence(format!(
                "cluster-replica-no-failover: {}",
                listed.join(", ")
            ));
        out.push(if never.len() == listed.len() {
            Finding {
                severity: Severity::Fail,
                ..base
            }
            .why("no replica of this primary fails over: when it dies its slots stay down, and every lock in them is unavailable")
            .fix("CONFIG SET cluster-replica-no-failover no on at least one replica")
        } else if !never.is_empty() {
            Finding {
                severity: Severity::Warn,
                ..base
            }
            .why(format!(
                "{} never fails over, yet its acknowledgement confirms a lock write: the replica promoted instead may lack the lock",
                never.join(", ")
            ))
            .fix("use replicaQuorum all, or cluster-replica-no-failover no on every replica")
        } else {
            base.why("every replica can take over its primary")
        });
    }
}

fn lag(ctx: &Ctx<'_>, node: &crate::audit::gather::NodeSeen) -> Finding {
    let target = node.addr.as_str();
    if let Err(t) = &node.info {
        return Finding::unknown("replication-lag", target, t);
    }
    let attached = attached_replicas(node);
    let offset = crate::audit::gather::info_number(node, "master_repl_offset").unwrap_or(0);
    let mut worst_lag = 0u64;
    let mut behind = 0u64;
    let mut offline = vec![];
    for r in &attached {
        let lag: u64 = r.get("lag").and_then(|l| l.parse().ok()).unwrap_or(0);
        let at: u64 = r.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
        worst_lag = worst_lag.max(lag);
        behind = behind.max(offset.saturating_sub(at));
        if r.get("state").map(String::as_str) != Some("online") {
            offline.push(format!(
                "{}:{} {}",
                r.get("ip").map(String::as_str).unwrap_or("?"),
                r.get("port").map(String::as_str).unwrap_or("?"),
                r.get("state").map(String::as_str).unwrap_or("?")
            ));
        }
    }
    let sync = ctx.config.slaves_sync_timeout;
    let base = Finding::new("replication-lag", Severity::Ok, target)
        .fact("attached", attached.len() as u64)
        .fact("lag_s", worst_lag)
        .fact("bytes_behind", behind)
        .evidence(format!(
            "{} attached, last ack up to {worst_lag} s ago, up to {behind} bytes behind{}",
            attached.len(),
            if offline.is_empty() {
                String::new()
            } else {
                format!(", not online: {}", offline.join(", "))
            }
        ));
    // A replica acknowledges every second: `lag` 0 or 1 is normal, more
    // means acknowledgements stopped (or come later than a WAIT waits).
    let stalled = Duration::from_secs(worst_lag) > sync.max(Duration::from_secs(2));
    if !offline.is_empty() || stalled {
        Finding {
            severity: Severity::Warn,
            ..base
        }
        .why(format!(
            "a replica that lags past slavesSyncTimeout ({}) fails lock confirmations: acquires are undone and retried, renewals put holds at risk",
            secs(sync)
        ))
        .fix("find why the replica lags (network, a full sync, a slow disk)")
    } else {
        base.why("replicas acknowledge promptly: a lock write's WAIT is answered well within slavesSyncTimeout")
    }
}

use std::time::Duration;

/// `wait-command`: `WAIT 0 0` on every primary.
pub(crate) async fn wait_command(ctx: &Ctx<'_>) -> Vec<Finding> {
    let replicated = replicated(ctx);
    let primaries: Vec<_> = ctx.seen.primaries().collect();
    join_all(primaries.into_iter().map(|node| async move {
        let target = node.addr.as_str();
        let link = match &node.link {
            Ok(link) => link,
            Err(t) => return Finding::unknown("wait-command", target, t),
        };
        let reply = link.ask("WAIT", &["0", "0"]).await;
        let base = Finding::new("wait-command", Severity::Ok, target);
        match reply {
            Ok(_) => base
                .fact("available", true)
                .evidence("WAIT 0 0 answered")
                .why(if replicated {
                    "each lock write is followed by WAIT: replicas confirm it before it counts"
                } else {
                    "a single-server address never waits for replicas; WAIT is there if the server gets some"
                }),
            Err(t) if t.is_no_permission() && !replicated => base
                .fact("available", true)
                .evidence(format!("WAIT 0 0 {t}"))
                .why("a single-server address never waits for replicas: the user needs no WAIT here"),
            Err(t) if t.is_unknown_command() || t.is_no_permission() => {
                let severity = if replicated { Severity::Fail } else { Severity::Warn };
                let renamed = t.is_unknown_command();
                Finding {
                    severity,
                    ..base
                }
                .fact("available", false)
                .evidence(format!("WAIT 0 0 {t}"))
                .why(match (replicated, renamed) {
                    (true, _) => "no lock write can be confirmed by a replica: with checkLockSyncedSlaves the client refuses to connect, without it a failover can lose any lock",
                    (false, _) => "unused on a single server, but behind Sentinel or a cluster this server could confirm no lock write (clients refuse to connect)",
                })
                .fix(if renamed {
                    "remove rename-command WAIT from the server's config (managed services: ask for WAIT)"
                } else {
                    "ACL SETUSER <user> +wait"
                })
            }
            Err(t) => Finding::unknown("wait-command", target, t),
        }
    }))
    .await
}
