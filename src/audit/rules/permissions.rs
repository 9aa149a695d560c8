//! `permissions`: every command the crate sends to a data node, checked
//! with `ACL DRYRUN` where the user may run it (Redis 7+, Valkey), and by
//! the command's own answer where not (each probe is harmless: an unknown
//! script's sha, `return 0`, a publish on a channel named for the audit, a
//! subscription on a connection of its own that is then closed).

use std::collections::HashMap;

use fred::types::config::Config as FredConfig;
use fred::types::Value;
use futures::future::join_all;

use super::Ctx;
use crate::audit::gather::NodeSeen;
use crate::audit::link::{Limits, Link, Trouble};
use crate::audit::report::{DeploymentKind, Finding, Severity};
use crate::config::ShardedSubscriptionMode;

/// The channel probes publish on and subscribe to: a lock channel's name,
/// so the documented ACL patterns allow it, of a lock nobody uses.
pub(crate) const PROBE_CHANNEL: &str = "redisson_lock__channel:{redisson-lock-audit}";
const NO_SUCH_SHA: &str = "0000000000000000000000000000000000000000";

/// One command to check, and what goes wrong without it.
struct Need {
    name: &'static str,
    args: Vec<&'static str>,
    /// Sent on a connection of its own (it changes the connection's mode).
    subscribes: bool,
    without: &'static str,
    /// How bad its refusal is: most break lock operations; a few only slow them.
    refused: Severity,
}

fn needs(kind: DeploymentKind, sharded: bool) -> Vec<Need> {
    let need = |name, args: &[&'static str], subscribes, without| Need {
        name,
        args: args.to_vec(),
        subscribes,
        without,
        refused: Severity::Fail,
    };
    let mut out = vec![
        need(
            "EVALSHA",
            &["EVALSHA", NO_SUCH_SHA, "0"],
            false,
            "every lock script",
        ),
        need(
            "EVAL",
            &["EVAL", "return 0", "0"],
            false,
            "scripts the server has not cached yet",
        ),
        need(
            "PING",
            &["PING"],
            false,
            "confirming a waiter's subscription",
        ),
        Need {
            refused: Severity::Warn,
            ..need(
                "SCRIPT LOAD",
                &["SCRIPT", "LOAD", "return 0"],
                false,
                "batching scripts under load (they go one by one: slower, never wrong)",
            )
        },
    ];
    if sharded {
        out.push(need(
            "SPUBLISH",
            &["SPUBLISH", PROBE_CHANNEL, "0"],
            false,
            "unlocks: the script fails, nobody is woken",
        ));
        out.push(need(
            "SSUBSCRIBE",
            &["SSUBSCRIBE", PROBE_CHANNEL],
            true,
            "waiting: lock() fails",
        ));
        out.push(need(
            "SUNSUBSCRIBE",
            &["SUNSUBSCRIBE", PROBE_CHANNEL],
            true,
            "a waiter leaving",
        ));
    } else {
        out.push(need(
            "PUBLISH",
            &["PUBLISH", PROBE_CHANNEL, "0"],
            false,
            "unlocks: the script fails, nobody is woken",
        ));
        out.push(need(
            "SUBSCRIBE",
            &["SUBSCRIBE", PROBE_CHANNEL],
            true,
            "waiting: lock() fails",
        ));
        out.push(need(
            "UNSUBSCRIBE",
            &["UNSUBSCRIBE", PROBE_CHANNEL],
            true,
            "a waiter leaving",
        ));
    }
    if kind != DeploymentKind::Single {
        out.push(need(
            "INFO",
            &["INFO", "replication"],
            false,
            "counting the replicas a lock write waits for",
        ));
        out.push(need(
            "WAIT",
            &["WAIT", "0", "0"],
            false,
            "confirming lock writes on replicas",
        ));
    }
    if kind == DeploymentKind::Cluster {
        out.push(need(
            "CLUSTER SLOTS",
            &["CLUSTER", "SLOTS"],
            false,
            "the slot map: connect fails",
        ));
        out.push(need(
            "CLUSTER INFO",
            &["CLUSTER", "INFO"],
            false,
            "the cluster's state: connect fails",
        ));
        out.push(need(
            "CLUSTER NODES",
            &["CLUSTER", "NODES"],
            false,
            "each primary's replicas: every lock write fails",
        ));
        out.push(need(
            "PUBSUB SHARDNUMSUB",
            &["PUBSUB", "SHARDNUMSUB", PROBE_CHANNEL],
            false,
            "choosing sharded pub/sub as Redisson does",
        ));
    }
    if kind == DeploymentKind::Sentinel {
        out.push(need(
            "ROLE",
            &["ROLE"],
            false,
            "checking the node is the primary: connect fails",
        ));
    }
    out
}

/// The `permissions` finding of every primary.
pub(crate) async fn check(ctx: &Ctx<'_>, base: &FredConfig, limits: Limits) -> Vec<Finding> {
    let sharded = ctx.seen.kind == DeploymentKind::Cluster
        && match ctx.config.sharded_subscription_mode {
            ShardedSubscriptionMode::On => true,
            ShardedSubscriptionMode::Off => false,
            _ => sharded_available(ctx).await,
        };
    let user = base.username.clone().unwrap_or_else(|| "default".into());
    let primaries: Vec<_> = ctx.seen.primaries().collect();
    join_all(
        primaries
            .into_iter()
            .map(|node| one(node, needs(ctx.seen.kind, sharded), &user, base, limits)),
    )
    .await
}

async fn sharded_available(ctx: &Ctx<'_>) -> bool {
    for node in ctx.seen.primaries() {
        if let Ok(link) = &node.link {
            return link
                .ask("PUBSUB", &["SHARDNUMSUB", PROBE_CHANNEL])
                .await
                .is_ok();
        }
    }
    false
}

async fn one(
    node: &NodeSeen,
    needs: Vec<Need>,
    user: &str,
    base: &FredConfig,
    limits: Limits,
) -> Finding {
    let target = node.addr.as_str();
    let link = match &node.link {
        Ok(link) => link,
        Err(t) => return Finding::unknown("permissions", target, t),
    };
    let (verdicts, how) = match dry_run(link, user, &needs).await {
        Some(verdicts) => (verdicts, "ACL DRYRUN"),
        None => (
            by_error(link, &needs, node, base, limits).await,
            "each command's answer",
        ),
    };
    let mut refused = vec![];
    let mut unknown = vec![];
    for (need, verdict) in needs.iter().zip(&verdicts) {
        // A renamed WAIT is `wait-command`'s finding, not an ACL's.
        if need.name == "WAIT"
            && matches!(verdict, Verdict::Refused(why) if !why.contains("NOPERM") && !why.contains("permissions"))
        {
            continue;
        }
        match verdict {
            Verdict::Allowed => {}
            Verdict::Refused(why) => refused.push((need, why.clone())),
            Verdict::Unknown(why) => unknown.push(format!("{} ({why})", need.name)),
        }
    }
    let base = Finding::new("permissions", Severity::Ok, target)
        .fact("checked", needs.len() as u64)
        .fact("refused", refused.len() as u64)
        .fact("user", user);
    // The worst refusal first: its consequence is the finding's why.
    refused.sort_by_key(|(need, _)| std::cmp::Reverse(need.refused));
    if let Some((first, _)) = refused.first() {
        let names: Vec<&str> = refused.iter().map(|(n, _)| n.name).collect();
        let plus: Vec<String> = names
            .iter()
            .map(|n| format!("+{}", n.to_lowercase().replace(' ', "|")))
            .collect();
        let details: Vec<String> = refused
            .iter()
            .map(|(n, why)| format!("{} ({why})", n.name))
            .collect();
        return Finding {
            severity: first.refused,
            ..base
        }
        .evidence(format!(
            "user {user}, checked with {how}: refused {}",
            details.join(", ")
        ))
        .why(format!(
            "without {} the crate cannot do {}",
            first.name, first.without
        ))
        .fix(format!(
            "ACL SETUSER {user} {} (docs/acl.md has the whole rule)",
            plus.join(" ")
        ));
    }
    if !unknown.is_empty() {
        return Finding {
            severity: Severity::Unknown,
            ..base
        }
        .evidence(format!(
            "user {user}: could not check {}",
            unknown.join(", ")
        ))
        .why("a refused command makes lock operations fail with NOPERM");
    }
    let names: Vec<&str> = needs.iter().map(|n| n.name).collect();
    base.evidence(format!(
        "user {user}, checked with {how}: {} allowed",
        names.join(", ")
    ))
    .why("every command the crate sends here is allowed")
}

#[derive(Debug, Clone)]
enum Verdict {
    Allowed,
    Refused(String),
    Unknown(String),
}

/// `ACL DRYRUN` for each command; `None` when the user may not run it or
/// the server does not have it.
async fn dry_run(link: &Link, user: &str, needs: &[Need]) -> Option<Vec<Verdict>> {
    let calls = needs.iter().map(|need| {
        let mut args: Vec<Value> = vec!["DRYRUN".into(), user.into()];
        args.extend(need.args.iter().map(|a| Value::from(*a)));
        link.call("ACL", args)
    });
    let replies = join_all(calls).await;
    let mut out = vec![];
    for reply in replies {
        match reply {
            Ok(v) => match crate::audit::link::text(&v) {
                Some(t) if t == "OK" => out.push(Verdict::Allowed),
                Some(t) => out.push(Verdict::Refused(t)),
                None => out.push(Verdict::Allowed),
            },
            // The server has no such command: renamed or disabled.
            Err(Trouble::Refused(m)) if m.contains("not found") && m.contains("Command") => {
                out.push(Verdict::Refused(format!("{m} (renamed or disabled)")))
            }
            // DRYRUN itself unknown (Redis 6) or not allowed: by the answers.
            Err(_) => return None,
        }
    }
    Some(out)
}

/// Each command sent, its answer read: an ACL refusal is `NOPERM`.
async fn by_error(
    link: &Link,
    needs: &[Need],
    node: &NodeSeen,
    base: &FredConfig,
    limits: Limits,
) -> Vec<Verdict> {
    // Subscribing changes a connection's mode: those go on one of their own.
    let needs_subscriber = needs.iter().any(|n| n.subscribes);
    let subscriber = if needs_subscriber {
        match node
            .addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        {
            Some((host, port)) => Link::open(base, &host, port, false, limits).await.ok(),
            None => None,
        }
    } else {
        None
    };
    let mut verdicts: HashMap<usize, Verdict> = HashMap::new();
    let plain = needs
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.subscribes)
        .map(|(i, n)| async move {
            let args: Vec<Value> = n.args[1..].iter().map(|a| Value::from(*a)).collect();
            (i, verdict(link.call(n.args[0], args).await))
        });
    for (i, v) in join_all(plain).await {
        verdicts.insert(i, v);
    }
    for (i, n) in needs.iter().enumerate().filter(|(_, n)| n.subscribes) {
        let v = match &subscriber {
            Some(sub) => verdict(sub.subscription(n.args[0], n.args[1]).await),
            None => Verdict::Unknown("no connection of its own".into()),
        };
        verdicts.insert(i, v);
    }
    if let Some(sub) = subscriber {
        sub.close().await;
    }
    (0..needs.len())
        .map(|i| {
            verdicts
                .remove(&i)
                .unwrap_or(Verdict::Unknown("not sent".into()))
        })
        .collect()
}

fn verdict(reply: crate::audit::link::Reply) -> Verdict {
    match reply {
        Ok(_) => Verdict::Allowed,
        Err(t) if t.is_no_permission() || t.is_unknown_command() => Verdict::Refused(t.to_string()),
        // NOSCRIPT, MOVED, a wrong argument: the ACL let it through.
        Err(Trouble::Refused(_)) => Verdict::Allowed,
        Err(t) => Verdict::Unknown(t.to_string()),
    }
}
