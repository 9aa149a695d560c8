//! The watchdog: one timer per client that renews, every third of the
//! watchdog timeout, every lock held without an explicit lease, whatever its
//! kind: up to `lockWatchdogBatchSize` holds per script, one renewal per
//! script (each kind names its own: Redisson's LockTask for hash fields, its
//! ReadLockTask for read holds), and on a cluster one hash slot per script.
//! Permits taken to be kept alive are renewed on the same timer
//! (`engine::loan`).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use fred::types::Value;
use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::engine::hold::Hold;
use crate::engine::safety::Synced;
use crate::engine::script;
use crate::engine::telemetry;
use crate::engine::Engine;

/// Counters of a client's watchdog, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchdogStats {
    /// Renewal cycles completed.
    pub cycles: u64,
    /// Renewal scripts sent.
    pub scripts: u64,
    /// Lock renewals confirmed by Redis.
    pub renewed: u64,
    /// Holds found lost (field gone, or deadline passed) by the watchdog.
    pub lost: u64,
    /// Renewal scripts that failed (the locks stay due for the next cycle).
    pub failures: u64,
    /// Locks renewed in the last cycle.
    pub last_cycle_locks: u64,
    /// Scripts sent in the last cycle.
    pub last_cycle_scripts: u64,
    /// How long the last cycle took, in microseconds.
    pub last_cycle_micros: u64,
}

pub(crate) async fn run(
    engine: Weak<Engine>,
    mut shutdown: watch::Receiver<bool>,
    mut topology_changes: watch::Receiver<u64>,
) {
    let Some(period) = engine.upgrade().map(|e| e.config.lock_watchdog_timeout / 3) else {
        return;
    };
    // Renewals a change brings forward are at least this far apart: a
    // renewal that falls short asks for the view again, which changes it.
    let gap = (period / 4).min(Duration::from_millis(500));
    let mut last = Instant::now();
    loop {
        let brought_forward = tokio::select! {
            _ = tokio::time::sleep_until(last + period) => false,
            // A connection was re-made, the cluster map or the sentinels'
            // view changed: a failover may have lost locks, and their holders
            // learn it from a renewal; a renewal held back by a replica that
            // no longer counts goes through. Renew now rather than up to a
            // period later.
            changed = topology_changes.changed() => {
                if changed.is_err() {
                    return;
                }
                true
            }
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        if brought_forward {
            tokio::select! {
                _ = tokio::time::sleep_until(last + gap) => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
            topology_changes.borrow_and_update();
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        last = Instant::now();
        // The client's registry entry lives as long as a lock it holds
        // would: refreshed on the cycle's timer, in a task of its own, so a
        // slow or failing refresh never delays a renewal.
        if !brought_forward {
            crate::engine::registry::refresh_in_background(&engine);
        }
        // Kept-alive permits on the same timer, beside the locks.
        futures::join!(
            renew_all(&engine),
            crate::engine::loan::renew_kept_alive(&engine)
        );
    }
}

/// One renewal cycle. Holds are grouped by their kind's renewal and, where
/// multi-key scripts must stay in one slot, by slot; each group goes out in
/// batches of at most `lockWatchdogBatchSize`. Batches go out concurrently,
/// at most one per write connection, so one slow shard (a replica lagging
/// behind a WAIT) does not delay the renewals of the others.
async fn renew_all(engine: &Engine) {
    let span = telemetry::renewal_span();
    renew_all_traced(engine, &span)
        .instrument(span.clone())
        .await;
}

async fn renew_all_traced(engine: &Engine, span: &tracing::Span) {
    let started = Instant::now();
    let mut groups: BTreeMap<(&'static str, u16), Vec<Arc<Hold>>> = BTreeMap::new();
    for hold in engine.holds.renewable() {
        let slot = if engine.slot_grouped {
            crate::naming::slot(hold.kind().key(&hold.name))
        } else {
            0
        };
        groups
            .entry((hold.kind().renewal().name, slot))
            .or_default()
            .push(hold);
    }
    let locks = groups.values().map(|holds| holds.len() as u64).sum();
    let batch = engine.config.lock_watchdog_batch_size;
    let mut renewals = vec![];
    for holds in groups.values_mut() {
        // Holds of one lock side by side: some renewals cover a lock per entry.
        holds.sort_by(|a, b| a.name.cmp(&b.name));
        for chunk in holds.chunks(batch) {
            renewals.push(renew_batch(engine, chunk));
        }
    }
    let mut renewals = futures::stream::iter(renewals).buffer_unordered(engine.writer_count());
    let mut cycle = CycleStats::default();
    while let Some(one) = renewals.next().await {
        cycle.scripts += one.scripts;
        cycle.renewed += one.renewed;
        cycle.lost += one.lost;
        cycle.failures += one.failures;
    }
    telemetry::renewed(
        span,
        locks,
        cycle.scripts,
        cycle.renewed,
        cycle.lost,
        cycle.failures,
    );
    engine.stats.send_modify(|s| {
        s.cycles += 1;
        s.scripts += cycle.scripts;
        s.renewed += cycle.renewed;
        s.lost += cycle.lost;
        s.failures += cycle.failures;
        s.last_cycle_locks = cycle.renewed;
        s.last_cycle_scripts = cycle.scripts;
        s.last_cycle_micros = started.elapsed().as_micros() as u64;
    });
}

#[derive(Default)]
struct CycleStats {
    scripts: u64,
    renewed: u64,
    lost: u64,
    failures: u64,
}

/// Renews `holds` (one renewal, one slot) with one script.
///
/// Each hold's `ops` slot is held from before the script is built until its
/// reply is read, so a renewal and a release of the same hold never
/// overlap: once a release has returned, no renewal of that hold is sent
/// (Redisson can renew a lock after its unlock returned, redisson#7272). A
/// hold whose slot is taken (an acquire or release of it in flight, which
/// sets its TTL anyway) waits for the next cycle.
async fn renew_batch(engine: &Engine, holds: &[Arc<Hold>]) -> CycleStats {
    let mut cycle = CycleStats::default();
    let mut slots = Vec::with_capacity(holds.len());
    let period = engine.config.lock_watchdog_timeout / 3;
    let holds: Vec<Arc<Hold>> = holds
        .iter()
        .filter(|hold| match hold.ops.try_acquire() {
            // Released between the cycle's snapshot and now: not renewed.
            Ok(slot) if hold.count() > 0 && !hold.is_retired() => {
                slots.push(slot);
                true
            }
            Ok(_) => false,
            Err(_) => {
                // Busy with an operation that may itself be retrying (a
                // re-entry or partial unlock short of replicas): if the
                // deadline comes before the next cycle, say so now.
                if hold.lease.deadline() <= Instant::now() + period {
                    hold.put_at_risk("renewal_delayed");
                }
                false
            }
        })
        .cloned()
        .collect();
    if holds.is_empty() {
        return cycle;
    }
    let holds = &holds[..];
    let lease = engine.config.lock_watchdog_timeout;
    let lease_ms = lease.as_millis() as i64;
    let named: Vec<(&str, String)> = holds
        .iter()
        .map(|h| (&*h.name, h.field(&engine.id)))
        .collect();
    let (call, entries) = holds[0].kind().renewal().batch(&named, lease_ms);
    let sent_at = Instant::now();
    cycle.scripts += 1;
    let at_risk = |reason| {
        for hold in holds {
            hold.put_at_risk(reason);
        }
    };
    // The reply must come while the earliest deadline can still move: a
    // `WAIT` that outlasts it leaves the holder told lost by a renewal that
    // would have been confirmed.
    let by = holds.iter().map(|h| h.lease.deadline()).min().map(|d| {
        d.checked_sub(engine.config.timeout.min(period) / 10)
            .unwrap_or(d)
    });
    let (flags, synced) = match engine.renew(|| call.clone(), by).await {
        Ok((Value::Array(flags), synced)) if flags.len() == entries.len() => (flags, synced),
        Ok((other, _)) => {
            tracing::warn!(reply = ?other, "unexpected renewal reply");
            at_risk("renewal_failed");
            cycle.failures += 1;
            return cycle;
        }
        Err(e) => {
            // The deadline keeps running: if no later cycle succeeds in time,
            // the holders are told their locks are lost.
            tracing::warn!(error = %e, locks = holds.len(), "lock renewal failed");
            at_risk("renewal_failed");
            cycle.failures += 1;
            return cycle;
        }
    };
    let confirmed = !matches!(synced, Synced::Short { .. });
    if let Synced::Short {
        acked,
        promotable,
        unsettled,
        ..
    } = &synced
    {
        // Renewed on the primary only: a failover now would bring back the
        // old expiry, so the deadlines are not moved.
        tracing::warn!(
            acked,
            promotable,
            unsettled,
            locks = holds.len(),
            "lock renewal not confirmed by replicas"
        );
        cycle.failures += 1;
    }
    for (covered, flag) in entries.iter().zip(flags) {
        let alive = script::as_i64(&flag) == Some(1);
        for hold in covered.iter().map(|&i| &holds[i]) {
            if alive {
                if confirmed && synced.is_for_now() {
                    // Renewed, but a replica that could be promoted again
                    // once back lacks it: at risk until one it confirms.
                    hold.lease.extend(sent_at, lease);
                    hold.put_at_risk("replica_left_out");
                    cycle.renewed += 1;
                } else if confirmed {
                    hold.lease.confirm(sent_at, lease);
                    cycle.renewed += 1;
                } else {
                    hold.put_at_risk("renewal_unconfirmed");
                }
            } else if hold.found_gone() {
                cycle.lost += 1;
            }
        }
    }
    drop(slots);
    cycle
}
