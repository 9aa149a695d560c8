//! `latency`: the round trip to each primary and, where lock writes wait
//! for replicas, the round trip of a `WAIT` after a write, and the stalls
//! Redis already recorded (the longest `SLOWLOG` entry, the latency
//! monitor's worst spike, the last fork), against the watchdog's renewal
//! interval: while Redis runs one command or forks, it answers no renewal.
//! And how long a runaway script runs before it can be killed
//! (`busy-reply-threshold`, `lua-time-limit` before Redis 7).

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
        for _ in 0..PINGS {
            let started = Instant::now();
            if let Err(t) = link.ask("PING", &[]).await {
                return Finding::unknown("latency", target, format!("PING {t}"));
            }
            rtts.push(started.elapsed());
        }
        rtts.sort();
        let ping = rtts[PINGS / 2];
        let slowest = rtts[PINGS - 1];
        let mut evidence = format!("PING {} (median of {PINGS}, slowest {})", ms(ping), ms(slowest));
        let mut worst = slowest;
        let mut short = None;
        let mut base = Finding::new("latency", Severity::Ok, target)
            .fact("ping_us", ping.as_micros() as u64)
            .fact("ping_max_us", slowest.as_micros() as u64);
        // Stalls already recorded: the longest command in the slow log
        // (`+slowlog` may be refused: then not read) and the last fork.
        match link.ask("SLOWLOG", &["GET", "128"]).await {
            Ok(entries) => {
                let longest = slowlog_longest(&entries);
                if let Some((us, command)) = longest {
                    let took = Duration::from_micros(us);
                    worst = worst.max(took);
                    evidence.push_str(&format!(", longest in SLOWLOG {} ({command})", ms(took)));
                    base = base.fact("slowlog_max_us", us);
                }
            }
            Err(t) => evidence.push_str(&format!(", SLOWLOG not read ({t})")),
        }
        // The latency monitor's spikes, where it is on (a threshold set).
        match link.ask("LATENCY", &["LATEST"]).await {
            Ok(events) => {
                if let Some((worst_ms, event)) = latency_worst(&events) {
                    let took = Duration::from_millis(worst_ms);
                    worst = worst.max(took);
                    evidence.push_str(&format!(", worst spike in LATENCY LATEST {} ({event})", ms(took)));
                    base = base.fact("latency_max_ms", worst_ms);
                }
            }
            Err(t) => evidence.push_str(&format!(", LATENCY LATEST not read ({t})")),
        }
        if let Some(fork) = crate::audit::gather::info_number(node, "latest_fork_usec").filter(|us| *us > 0) {
            let took = Duration::from_micros(fork);
            worst = worst.max(took);
            evidence.push_str(&format!(", last fork {}", ms(took)));
            base = base.fact("latest_fork_us", fork);
        }
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
        // A runaway script is killable (SCRIPT KILL) only after this; until
        // then, and until it is killed, no renewal is answered.
        let busy = node
            .setting("lua-time-limit")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
        if let Some(busy) = busy {
            evidence.push_str(&format!(", busy-reply-threshold {}", secs(busy)));
            base = base.fact("busy_reply_threshold_ms", busy.as_millis() as u64);
        }
        // Killed no sooner, a runaway script outlasts the shortest TTL.
        let late_kill = busy.is_some_and(|busy| busy >= ctx.lease() * 2 / 3);
        let base = base.evidence(format!("{evidence}; renewal every {}", secs(renewal)));
        if worst * 2 > renewal {
            Finding {
                severity: Severity::Fail,
                ..base
            }
            .why("a round trip or a recorded stall (a slow command, a fork) takes more than half the renewal interval: renewals can land after the lease ran out, and holds are lost")
            .fix("find the slow commands (SLOWLOG GET) or the slow link; raise lockWatchdogTimeout, or bring the client closer to Redis")
        } else if worst * 10 > renewal || short.is_some() {
            Finding {
                severity: Severity::Warn,
                ..base
            }
            .why(if short.is_some() {
                "not every replica acknowledged within slavesSyncTimeout: lock writes are confirmed by fewer, or refused"
            } else {
                "a round trip or a recorded stall takes a tenth of the renewal interval or more: little margin before a renewal is late"
            })
            .fix("find the slow commands (SLOWLOG GET), forks, link or replica; raise lockWatchdogTimeout if it is the network")
        } else if late_kill {
            Finding {
                severity: Severity::Warn,
                ..base
            }
            .why("a runaway script can be killed only after busy-reply-threshold, which is past the shortest watchdog TTL (2/3 of the lease): until it is killed Redis answers no renewal, and holds are lost")
            .fix("CONFIG SET busy-reply-threshold (lua-time-limit before Redis 7) well below 2/3 of the lease, or raise lockWatchdogTimeout")
        } else {
            base.why("round trips are a small fraction of the renewal interval")
        }
    }))
    .await
}

/// PINGs sent one after the other: their median and the slowest.
const PINGS: usize = 20;

/// The longest entry of a `SLOWLOG GET` reply: its duration (µs) and the
/// command's name.
fn slowlog_longest(entries: &fred::types::Value) -> Option<(u64, String)> {
    let fred::types::Value::Array(entries) = entries else {
        return None;
    };
    entries
        .iter()
        .filter_map(|entry| {
            let fred::types::Value::Array(parts) = entry else {
                return None;
            };
            let us = parts.get(2).and_then(int)?;
            let command = match parts.get(3) {
                Some(fred::types::Value::Array(args)) => args
                    .first()
                    .and_then(crate::audit::link::text)
                    .unwrap_or_default(),
                _ => String::new(),
            };
            Some((us.max(0) as u64, command))
        })
        .max_by_key(|(us, _)| *us)
}

/// The worst spike of a `LATENCY LATEST` reply (`[event, time, latest ms,
/// max ms]` per event): its max (ms) and the event's name.
fn latency_worst(events: &fred::types::Value) -> Option<(u64, String)> {
    let fred::types::Value::Array(events) = events else {
        return None;
    };
    events
        .iter()
        .filter_map(|event| {
            let fred::types::Value::Array(parts) = event else {
                return None;
            };
            let name = parts.first().and_then(crate::audit::link::text)?;
            let max = parts.get(3).and_then(int)?;
            Some((max.max(0) as u64, name))
        })
        .max_by_key(|(max, _)| *max)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
