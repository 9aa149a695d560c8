//! Item 4: the watchdog with many held locks.

use std::fmt;
use std::time::Duration;

use futures::StreamExt;
use redisson_lock::{Config, RedissonClient};
use tokio::time::Instant;

use crate::server::Server;

#[derive(serde::Serialize)]
pub struct Row {
    pub locks: usize,
    pub scripts_per_cycle: u64,
    pub renewed_per_cycle: u64,
    pub cycle_ms: f64,
    pub redis_cpu_ms_per_cycle: f64,
    pub client_bytes_per_lock: f64,
    pub acquire_secs: f64,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} locks: {} scripts/cycle ({} renewed), cycle {:.1} ms, Redis CPU {:.1} ms/cycle, {:.0} B/lock",
            self.locks,
            self.scripts_per_cycle,
            self.renewed_per_cycle,
            self.cycle_ms,
            self.redis_cpu_ms_per_cycle,
            self.client_bytes_per_lock
        )
    }
}

pub async fn run(server: &Server, locks: usize) -> Row {
    // Earlier runs leave unlock latches expiring in the background; their
    // expiry would be counted as renewal CPU.
    server.flush().await;
    let mut config = Config::from_url(&server.url);
    // A cycle every 2 s keeps the run short; the work per cycle does not depend on it.
    config.lock_watchdog_timeout = Duration::from_secs(6);
    config.timeout = Duration::from_secs(10);
    let client = RedissonClient::connect(config).await.unwrap();
    let mut guards = Vec::with_capacity(locks);
    let names: Vec<String> = (0..locks).map(|i| format!("held:{locks}:{i}")).collect();
    let before = crate::alloc::live();
    let started = Instant::now();
    let mut acquired = futures::stream::iter(names.iter())
        .map(|name| {
            let lock = client.lock(name).unwrap();
            async move { lock.lock().await.unwrap() }
        })
        .buffer_unordered(256);
    while let Some(guard) = acquired.next().await {
        guards.push(guard);
    }
    drop(acquired);
    let acquire_secs = started.elapsed().as_secs_f64();
    let bytes = (crate::alloc::live() - before) as f64 / locks as f64;

    let mut updates = client.watchdog_updates();
    updates.borrow_and_update();
    updates.changed().await.unwrap();
    let cpu0 = server.cpu_seconds().await;
    updates.changed().await.unwrap();
    let cpu1 = server.cpu_seconds().await;
    let stats = *updates.borrow();
    let row = Row {
        locks,
        scripts_per_cycle: stats.last_cycle_scripts,
        renewed_per_cycle: stats.last_cycle_locks,
        cycle_ms: stats.last_cycle_micros as f64 / 1000.0,
        redis_cpu_ms_per_cycle: (cpu1 - cpu0) * 1000.0,
        client_bytes_per_lock: bytes,
        acquire_secs,
    };
    futures::stream::iter(guards)
        .for_each_concurrent(256, |g| async move {
            g.unlock().await.unwrap();
        })
        .await;
    client.shutdown().await;
    row
}

pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| held locks | scripts / cycle | renewed / cycle | cycle ms | Redis CPU ms / cycle | client bytes / lock |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out += &format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.0} |\n",
            r.locks,
            r.scripts_per_cycle,
            r.renewed_per_cycle,
            r.cycle_ms,
            r.redis_cpu_ms_per_cycle,
            r.client_bytes_per_lock
        );
    }
    out
}
