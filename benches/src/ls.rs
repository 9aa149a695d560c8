//! `ls` on a big keyspace: `scan_objects("*")` over N held locks and N/10
//! other keys, per SCAN COUNT: wall time, the commands Redis received
//! (`INFO commandstats`), the slowest command kind per call, Redis CPU.

use std::fmt;
use std::time::Duration;

use fred::prelude::*;
use redisson_lock::{Config, RedissonClient};
use tokio::time::Instant;

use crate::server::Server;

#[derive(serde::Serialize)]
pub struct Row {
    pub keys: usize,
    pub objects: usize,
    pub count: u32,
    /// Median of the runs.
    pub millis: f64,
    pub runs: Vec<f64>,
    /// Commands Redis received during one run, by name.
    pub commands: Vec<(String, u64)>,
    pub total_commands: u64,
    /// The highest mean time per call of any command kind, in µs.
    pub max_usec_per_call: f64,
    pub redis_cpu_ms: f64,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let commands: Vec<String> = self
            .commands
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        write!(
            f,
            "{} keys ({} objects), COUNT {}: {:.0} ms (median of {}), {} commands ({}), slowest kind {:.1} us/call, Redis CPU {:.0} ms",
            self.keys,
            self.objects,
            self.count,
            self.millis,
            self.runs.len(),
            self.total_commands,
            commands.join(", "),
            self.max_usec_per_call,
            self.redis_cpu_ms
        )
    }
}

/// Fills the server with `objects` locks (Redisson's hash layout, a JVM
/// client's field, a 10-minute TTL) and `objects / 10` plain strings.
pub async fn fill(server: &Server, objects: usize) -> usize {
    server.flush().await;
    let raw = server.raw().await;
    let field = "8743c9c0-0795-4907-87fd-6c719a6b4586:1";
    for chunk in (0..objects).collect::<Vec<_>>().chunks(1000) {
        let pipeline = raw.pipeline();
        for i in chunk {
            let key = format!("lock:{i}");
            let _: () = pipeline.hset(&key, (field, "1")).await.unwrap();
            let _: () = pipeline.pexpire(&key, 600_000, None).await.unwrap();
            if i % 10 == 0 {
                let _: () = pipeline
                    .set(format!("cache:{i}"), "v", None, None, false)
                    .await
                    .unwrap();
            }
        }
        let _: Vec<Value> = pipeline.all().await.unwrap();
    }
    let keys: i64 = raw.dbsize().await.unwrap();
    keys as usize
}

/// `(command, calls, usec_per_call)` from `INFO commandstats`.
async fn command_stats(raw: &Client) -> Vec<(String, u64, f64)> {
    let info: String = raw
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            Some((
                name.to_string(),
                field("calls")? as u64,
                field("usec_per_call")?,
            ))
        })
        .collect()
}

async fn reset_stats(raw: &Client) {
    let _: Value = raw
        .custom(
            fred::types::CustomCommand::new_static(
                "CONFIG",
                fred::types::ClusterHash::Random,
                false,
            ),
            vec!["RESETSTAT"],
        )
        .await
        .unwrap();
}

pub async fn run(server: &Server, objects: usize, keys: usize, count: u32, reps: usize) -> Row {
    let raw = server.raw().await;
    let mut config = Config::from_url(&server.url);
    config.timeout = Duration::from_secs(10);
    let client = RedissonClient::connect(config).await.unwrap();
    let mut runs = vec![];
    let mut last = (vec![], 0.0);
    for _ in 0..reps {
        reset_stats(&raw).await;
        let cpu = server.cpu_seconds().await;
        let started = Instant::now();
        let found = client.scan_objects("*", count).await.unwrap();
        runs.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(found.len(), objects, "every lock listed");
        let cpu = server.cpu_seconds().await - cpu;
        // The harness's own INFO and CONFIG calls are not the scan's.
        let stats: Vec<(String, u64, f64)> = command_stats(&raw)
            .await
            .into_iter()
            .filter(|(name, _, _)| name != "info" && name != "config")
            .collect();
        last = (stats, cpu);
    }
    client.shutdown().await;
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    let (stats, cpu) = last;
    let mut commands: Vec<(String, u64)> = stats.iter().map(|(n, c, _)| (n.clone(), *c)).collect();
    commands.sort_by_key(|c| std::cmp::Reverse(c.1));
    Row {
        keys,
        objects,
        count,
        millis: sorted[sorted.len() / 2],
        runs,
        total_commands: commands.iter().map(|(_, n)| n).sum(),
        commands,
        max_usec_per_call: stats.iter().map(|(_, _, us)| *us).fold(0.0, f64::max),
        redis_cpu_ms: cpu * 1000.0,
    }
}

pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| keys (objects) | SCAN COUNT | time (median) | commands | slowest kind, µs/call | Redis CPU |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} ({}) | {} | {:.0} ms | {} | {:.1} | {:.0} ms |\n",
            r.keys,
            r.objects,
            r.count,
            r.millis,
            r.total_commands,
            r.max_usec_per_call,
            r.redis_cpu_ms
        ));
    }
    out
}
