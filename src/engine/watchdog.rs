//! The watchdog: one timer per client that renews, every third of the
//! watchdog timeout, every lock held without an explicit lease, up to
//! `lockWatchdogBatchSize` locks per script and, on a cluster, one hash slot
//! per script (Redisson's LockTask).

use fred::types::Value;
use futures::StreamExt;
use std::sync::{Arc, Weak};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::engine::hold::Hold;
use crate::engine::replica_sync::Synced;
use crate::engine::script::{self, RENEW};

/// Counters of a client's watchdog, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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

pub(crate) async fn run(client: Weak<ClientInner>, mut shutdown: watch::Receiver<bool>) {
    let Some(period) = client.upgrade().map(|c| c.config.lock_watchdog_timeout / 3) else {
        return;
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let Some(client) = client.upgrade() else {
            return;
        };
        renew_all(&client).await;
    }
}

/// One renewal cycle. Batches go out concurrently, at most one per write
/// connection, so one slow shard (a replica lagging behind a WAIT) does not
/// delay the renewals of the others.
async fn renew_all(client: &ClientInner) {
    let started = Instant::now();
    let mut holds = client.holds.renewable();
    if client.slot_grouped {
        holds.sort_by_key(|h| crate::naming::slot(&h.name));
    }
    let batch = client.config.lock_watchdog_batch_size;
    let mut batches = vec![];
    let mut start = 0;
    while start < holds.len() {
        let mut end = (start + batch).min(holds.len());
        if client.slot_grouped {
            let slot = crate::naming::slot(&holds[start].name);
            end = start
                + holds[start..end]
                    .iter()
                    .take_while(|h| crate::naming::slot(&h.name) == slot)
                    .count();
        }
        batches.push(&holds[start..end]);
        start = end;
    }
    let renewals: Vec<_> = batches
        .into_iter()
        .map(|holds| renew_batch(client, holds))
        .collect();
    let mut renewals = futures::stream::iter(renewals).buffer_unordered(client.writer_count());
    let mut cycle = CycleStats::default();
    while let Some(one) = renewals.next().await {
        cycle.scripts += one.scripts;
        cycle.renewed += one.renewed;
        cycle.lost += one.lost;
        cycle.failures += one.failures;
    }
    client.stats.send_modify(|s| {
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

async fn renew_batch(client: &ClientInner, holds: &[Arc<Hold>]) -> CycleStats {
    let mut cycle = CycleStats::default();
    let lease = client.config.lock_watchdog_timeout;
    let keys: Vec<&str> = holds.iter().map(|h| &*h.name).collect();
    let mut args: Vec<Value> = Vec::with_capacity(holds.len() + 1);
    args.push((lease.as_millis() as i64).into());
    args.extend(holds.iter().map(|h| Value::from(h.field(&client.id))));
    let sent_at = Instant::now();
    cycle.scripts += 1;
    let (flags, synced) = match client.write(&RENEW, &keys, args).await {
        Ok((Value::Array(flags), synced)) if flags.len() == holds.len() => (flags, synced),
        Ok((other, _)) => {
            tracing::warn!(reply = ?other, "unexpected renewal reply");
            cycle.failures += 1;
            return cycle;
        }
        Err(e) => {
            // The deadline keeps running: if no later cycle succeeds in time,
            // the holders are told their locks are lost.
            tracing::warn!(error = %e, locks = holds.len(), "lock renewal failed");
            cycle.failures += 1;
            return cycle;
        }
    };
    let confirmed = !matches!(synced, Synced::Short { .. });
    if let Synced::Short { acked, connected } = synced {
        // Renewed on the primary only: a failover now would bring back the
        // old expiry, so the deadlines are not moved.
        tracing::warn!(
            acked,
            connected,
            locks = holds.len(),
            "lock renewal not confirmed by replicas"
        );
        cycle.failures += 1;
    }
    for (hold, flag) in holds.iter().zip(flags) {
        if script::as_i64(&flag) == Some(1) {
            if confirmed {
                hold.lease.confirm(sent_at, lease);
                cycle.renewed += 1;
            }
        } else if hold.lease.mark_gone() {
            tracing::warn!(lock = %hold.name, owner = %hold.owner, "lock lost: renewal found it gone");
            cycle.lost += 1;
        }
    }
    cycle
}
