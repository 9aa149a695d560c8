//! `clock`: each replica's clock against its primary's. A TTL reaches a
//! replica as an absolute time (every expiring write since Redis 7, every
//! full sync on any version), so a replica whose clock runs ahead expires
//! each lock that much sooner once it is promoted. Behind is harmless to
//! exclusion (a dead holder's lock lasts longer).

use std::time::Duration;

use super::{secs, Ctx};
use crate::audit::report::{DeploymentKind, Finding, Severity};

/// Below this a skew is noise beside a failover's own seconds.
const NOTABLE: Duration = Duration::from_secs(1);

pub(crate) fn check(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    if ctx.seen.kind == DeploymentKind::Single {
        return;
    }
    for shard in &ctx.seen.shards {
        let Some(primary) = ctx.seen.node(&shard.primary) else {
            continue;
        };
        for replica in &shard.replicas {
            let Some(node) = ctx.seen.node(&replica.addr) else {
                continue;
            };
            out.push(one(
                ctx,
                &primary.clock,
                &node.clock,
                &replica.addr,
                &shard.primary,
            ));
        }
    }
}

fn one(
    ctx: &Ctx<'_>,
    primary: &Result<crate::audit::gather::Clock, crate::audit::link::Trouble>,
    replica: &Result<crate::audit::gather::Clock, crate::audit::link::Trouble>,
    target: &str,
    primary_addr: &str,
) -> Finding {
    let (p, r) = match (primary, replica) {
        (Ok(p), Ok(r)) => (p, r),
        (Err(t), _) => {
            return Finding::unknown("clock", target, format!("TIME on its primary {t}"))
        }
        (_, Err(t)) => return Finding::unknown("clock", target, format!("TIME {t}")),
    };
    let skew_us = r.offset_us - p.offset_us;
    let slack_us = r.uncertainty_us + p.uncertainty_us;
    // Only what the round trips cannot explain.
    let surely_ahead = Duration::from_micros((skew_us - slack_us).max(0) as u64);
    let lease = ctx.lease();
    let (words, fact) = if skew_us >= 0 {
        ("ahead of", "ahead_ms")
    } else {
        ("behind", "behind_ms")
    };
    let base = Finding::new("clock", Severity::Ok, target)
        .fact(fact, skew_us.unsigned_abs() / 1000)
        .fact("uncertainty_ms", (slack_us as u64).div_ceil(1000))
        .evidence(format!(
            "TIME {} {words} its primary {primary_addr}'s (± {}), against {}",
            secs(Duration::from_micros(skew_us.unsigned_abs())),
            secs(Duration::from_micros(slack_us as u64)),
            ctx.lease_words()
        ));
    if surely_ahead >= lease * 2 / 3 {
        Finding {
            severity: Severity::Fail,
            ..base
        }
        .why("TTLs reach replicas as absolute times: promoted, this replica expires every lock that much sooner, more than the shortest watchdog TTL (2/3 of the lease): locks are lost at every promotion, however quick")
        .fix("synchronize the clocks (NTP, chrony) on every Redis host")
    } else if surely_ahead >= NOTABLE {
        Finding {
            severity: Severity::Warn,
            ..base
        }
        .why(format!(
            "TTLs reach replicas as absolute times: promoted, this replica expires every lock {} sooner, so a failover loses locks that much earlier",
            secs(surely_ahead)
        ))
        .fix("synchronize the clocks (NTP, chrony) on every Redis host")
    } else {
        base.why("a replica's clock ahead of its primary's would expire locks early once promoted: this one is not, beyond the round trip")
    }
}
