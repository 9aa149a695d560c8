//! The rules: each reads what `gather` saw and returns its findings.

pub(crate) mod address;
pub(crate) mod clock;
pub(crate) mod cluster;
pub(crate) mod fleet;
pub(crate) mod latency;
pub(crate) mod memory;
pub(crate) mod permissions;
pub(crate) mod persistence;
pub(crate) mod replication;
pub(crate) mod sentinel;

use std::time::Duration;

use super::gather::Seen;
use crate::config::Config;

/// What every rule reads.
pub(crate) struct Ctx<'a> {
    pub(crate) config: &'a Config,
    pub(crate) seen: &'a Seen,
    /// The auditing client's id: its own holds are not the fleet's.
    pub(crate) own_id: Option<&'a str>,
    /// The shortest lease other clients' holds show (`java-watchdog`),
    /// when it is shorter than this client's: their locks expire first.
    pub(crate) fleet_lease: Option<Duration>,
}

impl Ctx<'_> {
    /// This client's watchdog lease.
    pub(crate) fn own_lease(&self) -> Duration {
        self.config.lock_watchdog_timeout
    }

    /// The watchdog lease lease-based rules judge by: this client's, or the
    /// fleet's where its holders show a shorter one.
    pub(crate) fn lease(&self) -> Duration {
        match self.fleet_lease {
            Some(fleet) => fleet.min(self.own_lease()),
            None => self.own_lease(),
        }
    }

    /// Where [`Ctx::lease`] comes from, for evidence lines.
    pub(crate) fn lease_words(&self) -> String {
        match self.fleet_lease {
            Some(fleet) if fleet < self.own_lease() => format!(
                "the fleet's shortest lease, {} (java-watchdog; this client's is {})",
                secs(fleet),
                secs(self.own_lease())
            ),
            _ => format!("a watchdog lease of {}", secs(self.own_lease())),
        }
    }

    /// How often the watchdog renews: how long a holder may not know its lock is gone.
    pub(crate) fn renewal(&self) -> Duration {
        self.lease() / 3
    }

    /// `lockWatchdogTimeout 30 s / 3`: where the renewal interval comes from.
    pub(crate) fn watchdog_words(&self) -> String {
        match self.fleet_lease {
            Some(fleet) if fleet < self.own_lease() => {
                format!(
                    "the fleet's shortest lease {} / 3 (java-watchdog)",
                    secs(fleet)
                )
            }
            _ => format!("lockWatchdogTimeout {} / 3", secs(self.own_lease())),
        }
    }
}

/// A failover that starts `detect` after the primary dies, against the
/// watchdog locks it must not outlast: renewed every third of the lease back
/// to the whole lease, their TTLs lie in (2/3, 1] of it when it dies. The
/// finding of `rule` on `target`; `evidence` names the setting read.
pub(crate) fn failover_against_lease(
    ctx: &Ctx<'_>,
    rule: &'static str,
    target: &str,
    evidence: String,
    detect: Duration,
    fix: String,
) -> crate::audit::report::Finding {
    use crate::audit::report::{Finding, Severity};
    let lease = ctx.lease();
    let shortest = lease * 2 / 3;
    let base = Finding::new(rule, Severity::Ok, target)
        .fact("failover_starts_after_ms", detect.as_millis() as u64)
        .fact("lease_ms", lease.as_millis() as u64)
        .fact("shortest_ttl_ms", shortest.as_millis() as u64)
        .evidence(format!(
            "{evidence}: a failover starts {} after the primary dies, against {} (a watchdog lock's TTL is down to {} just before a renewal)",
            secs(detect),
            ctx.lease_words(),
            secs(shortest)
        ));
    if detect >= lease {
        Finding {
            severity: Severity::Warn,
            ..base
        }
        .why("the new primary comes after every watchdog lock's lease has run out: all are lost (holders told) before it takes writes")
        .fix(fix)
    } else if detect >= shortest {
        Finding {
            severity: Severity::Warn,
            ..base
        }
        .why("the new primary comes after the TTL of locks renewed longest ago (down to 2/3 of the lease): some are lost (holders told) in every failover")
        .fix(fix)
    } else {
        base.why("a dead primary is replaced before even the shortest watchdog TTL runs out")
    }
}

/// `10 s`, `1.5 s`, `250 ms`.
pub(crate) fn secs(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// `50.0 MiB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
