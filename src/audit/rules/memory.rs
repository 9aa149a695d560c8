//! `eviction-policy` and `memory-usage`: whether Redis may drop a lock key
//! to make room. Read from `INFO memory`, so a renamed `CONFIG` hides nothing.

use std::collections::HashMap;

use super::{bytes, Ctx};
use crate::audit::gather::Role;
use crate::audit::report::{Finding, Severity};

/// Whether `policy` may evict a key that has a TTL: every lock key has one.
fn evicts_locks(policy: &str) -> bool {
    policy != "noeviction"
}

/// The `eviction-policy` finding of one primary, from its `INFO` fields
/// (also what the client checks at connect).
pub(crate) fn eviction(target: &str, info: &HashMap<String, String>) -> Finding {
    let policy = info.get("maxmemory_policy").map(String::as_str);
    let maxmemory = info.get("maxmemory").and_then(|m| m.parse::<u64>().ok());
    let (Some(policy), Some(maxmemory)) = (policy, maxmemory) else {
        return Finding::unknown(
            "eviction-policy",
            target,
            "INFO has no maxmemory / maxmemory_policy",
        );
    };
    let evicted = info
        .get("evicted_keys")
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let limit = if maxmemory == 0 {
        "maxmemory 0 (no limit)".to_string()
    } else {
        format!("maxmemory {}", bytes(maxmemory))
    };
    let mut evidence = format!("maxmemory-policy {policy}, {limit}");
    if evicted > 0 {
        evidence.push_str(&format!(", {evicted} key(s) evicted since start"));
    }
    let finding = Finding::new("eviction-policy", Severity::Ok, target)
        .fact("maxmemory_policy", policy)
        .fact("maxmemory_bytes", maxmemory)
        .fact("evicted_keys", evicted);
    if !evicts_locks(policy) {
        return finding
            .evidence(evidence)
            .why("noeviction never drops a key: under memory pressure writes are refused (OOM), locks are never lost");
    }
    let severity = if maxmemory > 0 {
        Severity::Fail
    } else {
        Severity::Warn
    };
    let why = if maxmemory > 0 {
        "under memory pressure Redis deletes keys with a TTL, and every lock key has one: a held lock vanishes and another client takes it"
    } else {
        "inert while maxmemory is 0, but the day a limit is set Redis starts deleting keys with a TTL, lock keys included"
    };
    Finding {
        severity,
        ..finding
    }
    .evidence(evidence)
    .why(why)
    .fix("CONFIG SET maxmemory-policy noeviction (and in redis.conf), or keep locks on a server of their own")
}

/// `eviction-policy` of every primary and replica (a replica ignores
/// `maxmemory` while it replicates, and runs on its own policy once
/// promoted), `memory-usage` of every primary.
pub(crate) fn check(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    for node in &ctx.seen.nodes {
        let replica = node.role == Role::Replica;
        match &node.info {
            Ok(info) if replica => {
                let f = eviction(&node.addr, info);
                let why = if f.severity == Severity::Ok {
                    "once promoted it never drops a key: under memory pressure writes are refused (OOM), locks are never lost".to_string()
                } else {
                    format!("a replica runs on its own policy once promoted: {}", f.why)
                };
                out.push(f.why(why));
            }
            Ok(info) => out.push(eviction(&node.addr, info)),
            Err(t) => out.push(Finding::unknown("eviction-policy", &node.addr, t)),
        }
    }
    for node in ctx.seen.primaries() {
        out.push(usage(node.info.as_ref(), &node.addr));
    }
}

fn usage(
    info: Result<&HashMap<String, String>, &crate::audit::link::Trouble>,
    target: &str,
) -> Finding {
    let info = match info {
        Ok(info) => info,
        Err(t) => return Finding::unknown("memory-usage", target, t),
    };
    let number = |k: &str| info.get(k).and_then(|v| v.parse::<u64>().ok());
    let (Some(used), Some(max)) = (number("used_memory"), number("maxmemory")) else {
        return Finding::unknown(
            "memory-usage",
            target,
            "INFO has no used_memory / maxmemory",
        );
    };
    let finding = Finding::new("memory-usage", Severity::Ok, target)
        .fact("used_memory_bytes", used)
        .fact("maxmemory_bytes", max);
    if max == 0 {
        return finding
            .evidence(format!("used_memory {}, no maxmemory", bytes(used)))
            .why("no limit: Redis never evicts or refuses writes for memory (the host's memory is the limit)");
    }
    let percent = used.saturating_mul(100) / max;
    let finding = finding.fact("used_percent", percent).evidence(format!(
        "used_memory {} of maxmemory {} ({percent}%)",
        bytes(used),
        bytes(max)
    ));
    if percent >= 90 {
        Finding {
            severity: Severity::Warn,
            ..finding
        }
        .why("at the limit Redis evicts keys (or, with noeviction, refuses every lock write with OOM)")
        .fix("raise maxmemory or free memory; keep locks away from a cache that fills up")
    } else {
        finding.why("well under the limit: no eviction or OOM refusal now")
    }
}
