//! `persistence`: what a restart loses, and how long holders keep working
//! on locks that are gone. On a single server every node restart; where
//! replicas take over a dead primary, a restart faster than the deployment
//! finds it down (a supervisor's automatic restart): the node comes back
//! with what it saved and its replicas copy that. Judged on every node, as
//! a replica runs on its own settings once promoted.

use super::{secs, Ctx};
use crate::audit::report::{DeploymentKind, Finding, Severity};

pub(crate) fn check(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    if ctx.seen.kind == DeploymentKind::Single {
        out.extend(ctx.seen.primaries().map(|node| one(ctx, node)));
    } else {
        out.extend(ctx.seen.nodes.iter().map(|node| one(ctx, node)));
    }
}

fn one(ctx: &Ctx<'_>, node: &crate::audit::gather::NodeSeen) -> Finding {
    let replicated = ctx.seen.kind != DeploymentKind::Single;
    let target = node.addr.as_str();
    let aof = match node.info("aof_enabled") {
        Ok(Some(v)) => v == "1",
        Ok(None) => return Finding::unknown("persistence", target, "INFO has no aof_enabled"),
        Err(t) => return Finding::unknown("persistence", target, t),
    };
    let window = format!(
        "holders hear of it at their next renewal, up to {} later ({}), and meanwhile others can take the same locks",
        secs(ctx.renewal()),
        ctx.watchdog_words()
    );
    let base = Finding::new("persistence", Severity::Ok, target)
        .fact("aof", aof)
        .fact("renewal_ms", ctx.renewal().as_millis() as u64);
    if aof {
        let fsync = match node.setting("appendfsync") {
            Ok(f) => f.to_string(),
            Err(t) => {
                return Finding::unknown(
                    "persistence",
                    target,
                    format!("AOF is on (INFO), but CONFIG GET appendfsync {t}"),
                )
                .fact("aof", true)
            }
        };
        let base = base.fact("appendfsync", fsync.as_str());
        return match fsync.as_str() {
            "always" => base
                .evidence("appendonly yes, appendfsync always")
                .why("every write is on disk before it is answered: a restart keeps every lock"),
            "everysec" => base
                .evidence("appendonly yes, appendfsync everysec")
                .why("a crash loses at most the last second of writes; a restart keeps the locks older than that"),
            _ => Finding {
                severity: Severity::Warn,
                ..base
            }
            .evidence(format!("appendonly yes, appendfsync {fsync}"))
            .why(format!(
                "the OS flushes when it likes (about every 30 s): a crash loses the locks written since; {window}"
            ))
            .fix("CONFIG SET appendfsync everysec"),
        };
    }
    let save = match node.setting("save") {
        Ok(s) => s.trim().to_string(),
        Err(t) => {
            return Finding::unknown(
                "persistence",
                target,
                format!("AOF is off (INFO), and CONFIG GET save {t}"),
            )
            .fact("aof", false)
        }
    };
    // Replicated, a dead node is replaced; only a quick restart loses data.
    let restart = if replicated {
        "restarted before the deployment finds it down (a supervisor's automatic restart), this node (a primary, or this replica once promoted)"
    } else {
        "a restart"
    };
    let fix = if replicated {
        "CONFIG SET appendonly yes (appendfsync everysec), and in redis.conf; or restart no node automatically"
    } else {
        "CONFIG SET appendonly yes (appendfsync everysec), and in redis.conf"
    };
    let copied = if replicated {
        ", and its replicas copy that"
    } else {
        ""
    };
    if save.is_empty() {
        return Finding {
            severity: if replicated {
                Severity::Warn
            } else {
                Severity::Fail
            },
            ..base
        }
        .fact("rdb", false)
        .evidence("appendonly no, no RDB save points")
        .why(format!(
            "{restart} comes back empty{copied}: every lock is gone; {window}"
        ))
        .fix(fix);
    }
    let since = crate::audit::gather::info_number(node, "rdb_last_save_time")
        .and_then(|t| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_secs();
            now.checked_sub(t)
        })
        .map(|s| format!(", last snapshot {s} s ago"))
        .unwrap_or_default();
    Finding {
        severity: Severity::Warn,
        ..base
    }
    .fact("rdb", true)
    .fact("save", save.as_str())
    .evidence(format!("appendonly no, RDB save \"{save}\"{since}"))
    .why(format!(
        "{restart} loads the last snapshot{copied}: locks taken since are gone, released ones come back until their TTL; {window}"
    ))
    .fix(fix)
}
