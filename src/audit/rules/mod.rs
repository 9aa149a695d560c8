//! The rules: each reads what `gather` saw and returns its findings.

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
}

impl Ctx<'_> {
    /// The watchdog lease.
    pub(crate) fn lease(&self) -> Duration {
        self.config.lock_watchdog_timeout
    }

    /// How often the watchdog renews: how long a holder may not know its lock is gone.
    pub(crate) fn renewal(&self) -> Duration {
        self.config.lock_watchdog_timeout / 3
    }

    /// `lockWatchdogTimeout 30 s / 3`: where the renewal interval comes from.
    pub(crate) fn watchdog_words(&self) -> String {
        format!("lockWatchdogTimeout {} / 3", secs(self.lease()))
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
