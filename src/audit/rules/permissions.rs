//! `permissions`: every command the crate sends to a data node, checked
//! with `ACL DRYRUN` where the user may run it (Redis 7+, Valkey), and by
//! the command's own answer where not. Each probe is harmless when it runs:
//! an unknown script's sha, `return 0`, reads, writes whose last argument is
//! not a number (so they fail after the ACL let them through), a `DEL` of a
//! latch key no request ever used, a publish on a lock's channel, a
//! subscription on a connection of its own that is then closed.
//!
//! What is checked is what the crate sends: the lock scripts (and, with a
//! lock name, the commands they run and the keys they touch), pub/sub, and
//! per deployment `WAIT`, the cluster's views and `ROLE` where a replica can
//! never be promoted. The sentinels' own rule is `sentinel`'s.

use std::collections::HashMap;

use fred::types::config::Config as FredConfig;
use fred::types::Value;
use futures::future::join_all;

use super::Ctx;
use crate::audit::gather::NodeSeen;
use crate::audit::link::{Limits, Link, Trouble};
use crate::audit::report::{DeploymentKind, Finding, Severity};
use crate::config::ShardedSubscriptionMode;
use crate::naming;

/// The lock the probes name when the audit is given none: its channel
/// matches the documented ACL pattern, its key patterns are the user's.
pub(crate) const PROBE_LOCK: &str = "redisson-lock-audit";
/// The channel probes publish on and subscribe to without a lock name: a
/// lock channel's name, so the documented ACL patterns allow it, of a lock
/// nobody uses.
pub(crate) const PROBE_CHANNEL: &str = "redisson_lock__channel:{redisson-lock-audit}";
const NO_SUCH_SHA: &str = "0000000000000000000000000000000000000000";
/// The request id of the latch key the probes name: no request uses it
/// (nor client: the registry probe names it too).
const PROBE_REQUEST: &str = "redisson-lock-audit-probe";
/// The client registry's keys.
const REGISTRY_PREFIX: &str = "redisson_lock__client:";

/// One command to check, and what goes wrong without it.
struct Need {
    name: &'static str,
    args: Vec<String>,
    /// Sent on a connection of its own (it changes the connection's mode).
    subscribes: bool,
    /// It names the lock's keys: a key refusal is only the user's when the
    /// audit was given one of its lock names.
    keyed: bool,
    without: &'static str,
    /// How bad its refusal is: most break lock operations; a few only slow them.
    refused: Severity,
    /// It names the client registry's keys: a key refusal asks for their
    /// pattern.
    registry: bool,
}

/// The lock the probes name, and whether it is one of the service's.
pub(crate) struct Sample {
    pub(crate) lock: String,
    pub(crate) given: bool,
}

/// What this deployment's client sends, beyond the scripts.
pub(crate) struct Shape {
    pub(crate) kind: DeploymentKind,
    pub(crate) sharded: bool,
    /// `AUTO` sharded pub/sub: probed with `PUBSUB SHARDNUMSUB`.
    pub(crate) probes_sharded: bool,
    /// Some replica can never be promoted: `WAIT` goes between two `ROLE`s.
    pub(crate) unpromotable: bool,
}

fn needs(shape: &Shape, sample: &Sample) -> Vec<Need> {
    let need = |name, args: &[&str], without| Need {
        name,
        args: args.iter().map(|a| a.to_string()).collect(),
        subscribes: false,
        keyed: false,
        without,
        refused: Severity::Fail,
        registry: false,
    };
    let keyed = |name, args: &[&str], without| Need {
        keyed: true,
        ..need(name, args, without)
    };
    let lock = sample.lock.as_str();
    let channel = if sample.given {
        naming::channel_name(lock)
    } else {
        PROBE_CHANNEL.to_string()
    };
    let latch = naming::latch_name(lock, PROBE_REQUEST);
    let registry = format!("{REGISTRY_PREFIX}{PROBE_REQUEST}");
    let scripts_keys = [lock, channel.as_str(), latch.as_str()];
    let with_keys = |head: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = head.iter().map(|a| a.to_string()).collect();
        args.push(scripts_keys.len().to_string());
        args.extend(scripts_keys.iter().map(|k| k.to_string()));
        args
    };
    let mut out = vec![
        Need {
            args: with_keys(&["EVALSHA", NO_SUCH_SHA]),
            ..keyed("EVALSHA", &[], "every lock script")
        },
        Need {
            args: with_keys(&["EVAL", "return 0"]),
            ..keyed("EVAL", &[], "scripts the server has not cached yet")
        },
        // What the scripts run (scripts run with the caller's permissions).
        keyed(
            "HINCRBY",
            &["HINCRBY", lock, "probe", "not-a-number"],
            "acquiring and re-entering",
        ),
        keyed(
            "PEXPIRE",
            &["PEXPIRE", lock, "not-a-number"],
            "the lease: acquire, renewal, partial unlock",
        ),
        keyed("HEXISTS", &["HEXISTS", lock, "probe"], "every lock script"),
        keyed("EXISTS", &["EXISTS", lock], "acquiring; is_locked"),
        keyed("PTTL", &["PTTL", lock], "a waiter's wait; remaining_ttl"),
        keyed(
            "HGET",
            &["HGET", lock, "probe"],
            "hold_count; settling an acquire whose reply was lost",
        ),
        keyed("HGETALL", &["HGETALL", lock], "holders()"),
        keyed("TYPE", &["TYPE", lock], "force unlock"),
        keyed(
            "SET",
            &["SET", &latch, "1", "PX", "not-a-number"],
            "unlocks: the unlock latch that makes a retried unlock safe",
        ),
        keyed("GET", &["GET", &latch], "unlocks: reading the unlock latch"),
        keyed("DEL", &["DEL", &latch], "full unlocks and the unlock latch"),
        need("PING", &["PING"], "confirming a waiter's subscription"),
        // The client registry (who holds a lock): optional, so a warning.
        // HSET with an odd field count passes the ACL, then fails.
        Need {
            refused: Severity::Warn,
            registry: true,
            ..need(
                "HSET",
                &["HSET", &registry, "probe", "1", "odd"],
                "this client's registry entry (its holds show as unregistered in ls, status, inspect)",
            )
        },
        Need {
            refused: Severity::Warn,
            registry: true,
            ..need(
                "HGETALL",
                &["HGETALL", &registry],
                "reading who other holders are (ls, status, inspect show them as unknown)",
            )
        },
        Need {
            refused: Severity::Warn,
            ..need(
                "SCRIPT LOAD",
                &["SCRIPT", "LOAD", "return 0"],
                "batching scripts under load (they go one by one: slower, never wrong)",
            )
        },
    ];
    let subscription = |name, args: &[&str], without| Need {
        subscribes: true,
        ..need(name, args, without)
    };
    let (publish, subscribe, unsubscribe) = if shape.sharded {
        ("SPUBLISH", "SSUBSCRIBE", "SUNSUBSCRIBE")
    } else {
        ("PUBLISH", "SUBSCRIBE", "UNSUBSCRIBE")
    };
    out.push(need(
        publish,
        &[publish, &channel, "0"],
        "unlocks: the script fails, nobody is woken",
    ));
    out.push(subscription(
        subscribe,
        &[subscribe, &channel],
        "waiting: lock() fails",
    ));
    out.push(subscription(
        unsubscribe,
        &[unsubscribe, &channel],
        "a waiter leaving",
    ));
    if shape.kind != DeploymentKind::Single {
        out.push(need(
            "WAIT",
            &["WAIT", "0", "0"],
            "confirming lock writes on replicas",
        ));
        if shape.unpromotable {
            out.push(Need {
                refused: Severity::Warn,
                ..need(
                    "ROLE",
                    &["ROLE"],
                    "reading which replicas acknowledged a write (where a replica can never be promoted, its acknowledgement may stand in for one that can: writes fall short until the view leaves it out)",
                )
            });
        }
    }
    if shape.kind == DeploymentKind::Cluster {
        out.push(need(
            "CLUSTER SLOTS",
            &["CLUSTER", "SLOTS"],
            "the slot map: connect fails",
        ));
        out.push(need(
            "CLUSTER INFO",
            &["CLUSTER", "INFO"],
            "the cluster's state: connect fails",
        ));
        out.push(need(
            "CLUSTER NODES",
            &["CLUSTER", "NODES"],
            "each primary's replicas: every lock write fails",
        ));
        if shape.probes_sharded {
            out.push(need(
                "PUBSUB SHARDNUMSUB",
                &["PUBSUB", "SHARDNUMSUB", &channel],
                "choosing sharded pub/sub as Redisson does",
            ));
        }
    }
    out
}

/// Some replica of some shard can never be promoted (`replica-priority 0`
/// on Sentinel, `cluster-replica-no-failover yes` on a cluster).
fn unpromotable(ctx: &Ctx<'_>) -> bool {
    ctx.seen.shards.iter().any(|shard| {
        shard.replicas.iter().any(|r| {
            r.priority == Some(0)
                || ctx
                    .seen
                    .node(&r.addr)
                    .and_then(|n| n.setting("cluster-replica-no-failover").ok())
                    == Some("yes")
        })
    })
}

/// The `permissions` finding of every primary.
pub(crate) async fn check(
    ctx: &Ctx<'_>,
    base: &FredConfig,
    limits: Limits,
    options: &crate::audit::AuditOptions,
) -> Vec<Finding> {
    let mode = ctx.config.sharded_subscription_mode;
    let cluster = ctx.seen.kind == DeploymentKind::Cluster;
    let sharded = cluster
        && match mode {
            ShardedSubscriptionMode::On => true,
            ShardedSubscriptionMode::Off => false,
            _ => sharded_available(ctx).await,
        };
    let shape = Shape {
        kind: ctx.seen.kind,
        sharded,
        probes_sharded: cluster
            && !matches!(
                mode,
                ShardedSubscriptionMode::On | ShardedSubscriptionMode::Off
            ),
        unpromotable: unpromotable(ctx),
    };
    let sample = match &options.lock_name {
        Some(name) => Sample {
            lock: name.clone(),
            given: true,
        },
        None => Sample {
            lock: PROBE_LOCK.to_string(),
            given: false,
        },
    };
    let connecting = base.username.clone().unwrap_or_else(|| "default".into());
    let who = match &options.acl_user {
        Some(user) if *user != connecting => Who::Other(user.clone()),
        _ => Who::Connecting(connecting),
    };
    let primaries: Vec<_> = ctx.seen.primaries().collect();
    join_all(
        primaries
            .into_iter()
            .map(|node| one(node, needs(&shape, &sample), &sample, &who, base, limits)),
    )
    .await
}

/// Whose permissions are checked: the connecting user's (by `ACL DRYRUN`
/// or each command's answer), or another user's (by `ACL DRYRUN` only).
enum Who {
    Connecting(String),
    Other(String),
}

impl Who {
    fn name(&self) -> &str {
        match self {
            Who::Connecting(u) | Who::Other(u) => u,
        }
    }
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
    sample: &Sample,
    who: &Who,
    base: &FredConfig,
    limits: Limits,
) -> Finding {
    let target = node.addr.as_str();
    let user = who.name();
    let link = match &node.link {
        Ok(link) => link,
        Err(t) => return Finding::unknown("permissions", target, t),
    };
    let (verdicts, how) = match (dry_run(link, user, &needs).await, who) {
        (Some(verdicts), _) => (verdicts, "ACL DRYRUN"),
        (None, Who::Connecting(_)) => (
            by_error(link, &needs, node, base, limits).await,
            "each command's answer",
        ),
        (None, Who::Other(_)) => {
            return Finding::unknown(
                "permissions",
                target,
                format!("user {user}: ACL DRYRUN refused or missing (it needs Redis 7 or Valkey, and +acl|dryrun for the connecting user); another user's rule cannot be checked otherwise"),
            )
            .fact("user", user)
        }
    };
    let mut refused = vec![];
    let mut unknown = vec![];
    // Refused for the sample lock's keys only: not the user's keys.
    let mut keys_unchecked = vec![];
    for (need, verdict) in needs.iter().zip(&verdicts) {
        // A renamed WAIT is `wait-command`'s finding, not an ACL's.
        if need.name == "WAIT"
            && matches!(verdict, Verdict::Refused(why) if !why.contains("NOPERM") && !why.contains("permissions"))
        {
            continue;
        }
        match verdict {
            Verdict::Allowed => {}
            Verdict::Refused(why) if need.keyed && !sample.given && is_key_refusal(why) => {
                keys_unchecked.push(need.name)
            }
            Verdict::Refused(why) => refused.push((need, why.clone())),
            Verdict::Unknown(why) => unknown.push(format!("{} ({why})", need.name)),
        }
    }
    let keys = if sample.given {
        format!("keys of lock {}", sample.lock)
    } else if keys_unchecked.is_empty() {
        format!(
            "keys of lock {} (the audit's own; pass a lock name to check yours)",
            sample.lock
        )
    } else {
        format!(
            "key patterns not checked: they refuse lock {} (the audit's own name; pass one of your lock names)",
            sample.lock
        )
    };
    let base = Finding::new("permissions", Severity::Ok, target)
        .fact("checked", needs.len() as u64)
        .fact("refused", refused.len() as u64)
        .fact("keys_checked", sample.given || keys_unchecked.is_empty())
        .fact("user", user);
    // The worst refusal first: its consequence is the finding's why.
    refused.sort_by_key(|(need, _)| std::cmp::Reverse(need.refused));
    if let Some((first, _)) = refused.first() {
        let mut grant: Vec<String> = vec![];
        for (need, why) in &refused {
            let part = if need.registry && is_key_refusal(why) {
                format!("~{REGISTRY_PREFIX}*")
            } else if need.keyed && is_key_refusal(why) {
                format!("~{}", sample.lock)
            } else {
                format!("+{}", need.name.to_lowercase().replace(' ', "|"))
            };
            if !grant.contains(&part) {
                grant.push(part);
            }
        }
        let details: Vec<String> = refused
            .iter()
            .map(|(n, why)| match n.registry {
                true => format!("{} on the client registry ({why})", n.name),
                false => format!("{} ({why})", n.name),
            })
            .collect();
        let keys_part = if grant.iter().any(|g| g.starts_with('~')) {
            "; or key patterns that match the lock, redisson_unlock_latch:{name}:* and redisson_lock__channel:{name}"
        } else {
            ""
        };
        return Finding {
            severity: first.refused,
            ..base
        }
        .evidence(format!(
            "user {user}, checked with {how} on {keys}: refused {}",
            details.join(", ")
        ))
        .why(format!(
            "without {} the crate cannot do {}",
            first.name, first.without
        ))
        .fix(format!(
            "ACL SETUSER {user} {} (docs/acl.md has the whole rule{keys_part})",
            grant.join(" ")
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
        "user {user}, checked with {how} on {keys}: {} allowed",
        names.join(", ")
    ))
    .why(if sample.given || keys_unchecked.is_empty() {
        "every command the crate sends here is allowed"
    } else {
        "every command the crate sends here is allowed; whether your locks' keys are, was not checked (give a lock name: --lock)"
    })
}

/// A refusal for a key the command names, not for the command: `ACL
/// DRYRUN`'s "no permissions to access the 'k' key", `NOPERM`'s "No
/// permissions to access a key" (Redis 7, Valkey) or "one of the keys used
/// as arguments" (Redis 6.0).
fn is_key_refusal(why: &str) -> bool {
    why.contains(" key")
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
        args.extend(need.args.iter().map(|a| Value::from(a.as_str())));
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
            let args: Vec<Value> = n.args[1..]
                .iter()
                .map(|a| Value::from(a.as_str()))
                .collect();
            (
                i,
                verdict(
                    link.call(n.name.split(' ').next().unwrap_or(n.name), args)
                        .await,
                ),
            )
        });
    for (i, v) in join_all(plain).await {
        verdicts.insert(i, v);
    }
    for (i, n) in needs.iter().enumerate().filter(|(_, n)| n.subscribes) {
        let v = match &subscriber {
            Some(sub) => verdict(sub.subscription(&n.args[0], &n.args[1]).await),
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
