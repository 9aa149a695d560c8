//! Sentinel: `sentinels-answering`, `sentinel-quorum`,
//! `sentinel-down-after`, `sentinel-agreement`, and the sentinels' share of
//! `permissions`.

use std::time::Duration;

use super::Ctx;
use crate::audit::report::{DeploymentKind, Finding, Severity};

fn target(addr: &str) -> String {
    format!("sentinel {addr}")
}

pub(crate) fn check(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    if ctx.seen.kind != DeploymentKind::Sentinel {
        return;
    }
    let answering: Vec<_> = ctx
        .seen
        .sentinels
        .iter()
        .filter_map(|s| s.answer.as_ref().ok().map(|a| (s.addr.as_str(), a)))
        .filter(|(_, a)| !a.master.is_empty())
        .collect();
    // The sentinels each one knows, itself included.
    let known = answering
        .iter()
        .filter_map(|(_, a)| a.number("num-other-sentinels"))
        .max()
        .map(|n| n + 1)
        .unwrap_or(0)
        .max(ctx.seen.sentinels.len() as u64);
    let majority = known / 2 + 1;

    // sentinels-answering: those in the address and those they name, as
    // the client asks both.
    let configured = ctx.seen.sentinels_configured as u64;
    let discovered = ctx.seen.sentinels_discovered as u64;
    let n = answering.len() as u64;
    let silent: Vec<String> = ctx
        .seen
        .sentinels
        .iter()
        .filter_map(|s| match &s.answer {
            Err(t) => Some(format!("{} ({t})", s.addr)),
            Ok(_) => None,
        })
        .collect();
    let base = Finding::new("sentinels-answering", Severity::Ok, "deployment")
        .fact("configured", configured)
        .fact("discovered", discovered)
        .fact("answering", n)
        .fact("known", known)
        .evidence(format!(
            "{n} of {} sentinel(s) answered ({configured} in the address, {discovered} named by them); they know {known}{}",
            configured + discovered,
            if silent.is_empty() {
                String::new()
            } else {
                format!("; silent: {}", silent.join(", "))
            }
        ));
    out.push(if n < majority {
        Finding {
            severity: Severity::Fail,
            ..base
        }
        .why("fewer than a majority answer: no failover can be authorized, and the client cannot settle who the primary is")
        .fix("bring the sentinels back; where the address names one (a Kubernetes Service), make sure it reaches one that answers")
    } else if !silent.is_empty() {
        Finding {
            severity: Severity::Warn,
            ..base
        }
        .why("a silent sentinel leaves less margin: one more loss and no failover can be authorized")
        .fix("bring the silent sentinel back, or remove it from the client's address")
    } else {
        base.why("every sentinel answers: failovers are authorized by a majority the client can ask")
    });

    for (addr, answer) in &answering {
        // sentinel-quorum
        let quorum = answer.number("quorum").unwrap_or(0);
        let base = Finding::new("sentinel-quorum", Severity::Ok, target(addr))
            .fact("quorum", quorum)
            .fact("sentinels", known)
            .evidence(format!(
                "quorum {quorum} of {known} sentinel(s), majority {majority}"
            ));
        out.push(if quorum < majority {
            Finding {
                severity: Severity::Fail,
                ..base
            }
            .why("a minority of sentinels can declare the primary down and start a failover: a primary that only they cannot see is deposed, and its locks with it")
            .fix(format!("SENTINEL SET {} quorum {majority} on every sentinel", ctx.seen.service))
        } else {
            base.why("only a majority of sentinels can declare the primary down")
        });

        // sentinel-down-after
        let down_after = answer.number("down-after-milliseconds").unwrap_or(0);
        let shortest = ctx.lease() * 2 / 3;
        out.push(
            super::failover_against_lease(
                ctx,
                "sentinel-down-after",
                &target(addr),
                format!("down-after-milliseconds {down_after}"),
                Duration::from_millis(down_after),
                format!(
                    "SENTINEL SET {} down-after-milliseconds well below {} ms, or raise lockWatchdogTimeout",
                    ctx.seen.service,
                    shortest.as_millis()
                ),
            )
            .fact("down_after_ms", down_after),
        );

        // the sentinels' permissions: what the client asks each sentinel
        let refused: Vec<String> = answer
            .refused
            .iter()
            .map(|(what, why)| format!("{what} ({why})"))
            .collect();
        let vital = answer
            .refused
            .iter()
            .any(|(what, _)| matches!(*what, "SENTINEL MASTER" | "SENTINEL REPLICAS"));
        let grant: Vec<String> = answer
            .refused
            .iter()
            .map(|(what, _)| format!("+{}", what.to_lowercase().replace(' ', "|")))
            .collect();
        let base = Finding::new("permissions", Severity::Ok, target(addr))
            .fact("refused", refused.len() as u64);
        out.push(if refused.is_empty() {
            base.evidence("SENTINEL MASTER, REPLICAS, SENTINELS, MYID answered")
                .why("the client can ask each sentinel for the primary, its replicas and the other sentinels")
        } else if vital {
            Finding {
                severity: Severity::Fail,
                ..base
            }
            .evidence(format!("refused: {}", refused.join(", ")))
            .why("the client reads the primary and its replicas from every sentinel: refused, every lock write fails")
            .fix(format!("give the user {} on the sentinels (docs/acl.md)", grant.join(" ")))
        } else {
            Finding {
                severity: Severity::Warn,
                ..base
            }
            .evidence(format!("refused: {}", refused.join(", ")))
            .why("without SENTINELS only the sentinels in the address are asked; without MYID two addresses of one sentinel vote twice")
            .fix(format!("give the user {} on the sentinels (docs/acl.md)", grant.join(" ")))
        });
    }

    // sentinel-agreement
    let mut views: Vec<(String, String, u64)> = answering
        .iter()
        .map(|(addr, a)| {
            (
                addr.to_string(),
                a.primary().unwrap_or_else(|| "?".into()),
                a.number("config-epoch").unwrap_or(0),
            )
        })
        .collect();
    views.sort();
    let agree = views
        .windows(2)
        .all(|w| w[0].1 == w[1].1 && w[0].2 == w[1].2);
    let listed: Vec<String> = views
        .iter()
        .map(|(s, p, e)| format!("{s}: {p} epoch {e}"))
        .collect();
    let base = Finding::new("sentinel-agreement", Severity::Ok, "deployment")
        .fact("agree", agree)
        .evidence(listed.join("; "));
    out.push(if agree {
        base.why("every sentinel names the same primary in the same epoch")
    } else {
        Finding {
            severity: Severity::Warn,
            ..base
        }
        .why("the sentinels disagree on the primary or its epoch (a failover under way, or a split): lock writes are not confirmed until they agree")
        .fix("if it lasts, check the sentinels' network and SENTINEL RESET the odd one out")
    });
}
