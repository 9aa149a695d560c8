//! `latency`: the round trip to each primary and, where lock writes wait
//! for replicas, the round trip of a `WAIT` after a write, against the
//! watchdog's renewal interval.

use std::time::{Duration, Instant};

use futures::future::join_all;

use super::permissions::PROBE_CHANNEL;
use super::{secs, Ctx};
use crate::audit::link::int;
use crate::audit::report::{DeploymentKind, Finding, Severity};

pub(crate) async fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let replicated = ctx.seen.kind != DeploymentKind::Single;
    let primaries: Vec<_> = ctx.seen.primaries().collect();
    join_all(primaries.into_iter().map(|node| async move {
        let target = node.addr.as_str();
        let link = match &node.link {
            Ok(link) => link,
            Err(t) => return Finding::unknown("latency", target, t),
        };
        let mut rtts = vec![];
        for _ in 0..3 {
            let started = Instant::now();
            if let Err(t) = link.ask("PING", &[]).await {
                return Finding::unknown("latency", target, format!("PING {t}"));
            }
            rtts.push(started.elapsed());
        }
        rtts.sort();
        let ping = rtts[1];
        let mut evidence = format!("PING {} (median of 3)", ms(ping));
        let mut worst = ping;
        let mut short = None;
        let base = Finding::new("latency", Severity::Ok, target).fact("ping_us", ping.as_micros() as u64);
        let mut base = base;
        if replicated {
            let known = ctx
                .seen
                .shards
                .iter()
                .find(|s| s.primary == node.addr)
                .map_or(0, |s| s.healthy_replicas());
            let sync_ms = ctx.config.slaves_sync_timeout.as_millis().to_string();
            // A publish is replicated: the WAIT after it waits for real acknowledgements.
            match link.ask("PUBLISH", &[PROBE_CHANNEL, "0"]).await {
                Ok(_) if known > 0 => {
                    let started = Instant::now();
                    let want = known.to_string();
                    match link.ask("WAIT", &[&want, &sync_ms]).await {
                        Ok(acked) => {
                            let took = started.elapsed();
                            let acked = int(&acked).unwrap_or(0).max(0) as u64;
                            worst = worst.max(took);
                            evidence.push_str(&format!(", WAIT {known} after a write {} ({acked} of {known} acknowledged)", ms(took)));
                            base = base.fact("wait_us", took.as_micros() as u64).fact("acked", acked);
                            if acked < known as u64 {
                                short = Some(acked);
                            }
                        }
                        Err(t) => evidence.push_str(&format!(", WAIT {t}")),
                    }
                }
                Ok(_) => evidence.push_str(", no replica to wait for"),
                Err(t) => evidence.push_str(&format!(", WAIT not timed (PUBLISH {t})")),
            }
        }
        let renewal = ctx.renewal();
        let base = base.evidence(format!("{evidence}; renewal every {}", secs(renewal)));
        if worst * 2 > renewal {
            Finding {
                severity: Severity::Fail,
                ..base
            }
            .why("a round trip takes more than half the renewal interval: renewals can land after the lease ran out, and holds are lost")
            .fix("raise lockWatchdogTimeout, or bring the client closer to Redis")
        } else if worst * 10 > renewal || short.is_some() {
            Finding {
                severity: Severity::Warn,
                ..base
            }
            .why(if short.is_some() {
                "not every replica acknowledged within slavesSyncTimeout: lock writes are confirmed by fewer, or refused"
            } else {
                "round trips take a tenth of the renewal interval or more: little margin before a renewal is late"
            })
            .fix("find the slow link or replica; raise lockWatchdogTimeout if it is the network")
        } else {
            base.why("round trips are a small fraction of the renewal interval")
        }
    }))
    .await
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
