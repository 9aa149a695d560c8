//! What the `metrics` feature reports, printed after a little contention:
//! 4 flows take one lock 25 times each, so most of them wait and are woken
//! by unlock messages.
//!
//! `cargo run --example metrics --features metrics` with `REDIS_URL` set
//! (default `redis://127.0.0.1:6379`). A service would install its exporter
//! (Prometheus, StatsD, ...) where this installs a recorder that keeps
//! everything in memory.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redisson_lock::{Config, RedissonClient};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install()?;

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = RedissonClient::connect(Config::from_url(url)).await?;
    let lock = client.lock("example:metrics")?;
    let flows = (0..4).map(|_| {
        let lock = lock.clone();
        tokio::spawn(async move {
            for _ in 0..25 {
                let guard = lock.lock().await?;
                tokio::time::sleep(Duration::from_millis(1)).await; // the work
                guard.unlock().await?;
            }
            Ok::<_, redisson_lock::Error>(())
        })
    });
    for flow in futures::future::join_all(flows).await {
        flow??;
    }
    client.shutdown().await;

    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let value = match value {
            DebugValue::Counter(n) => format!("{n}"),
            DebugValue::Gauge(g) => format!("{}", g.into_inner()),
            DebugValue::Histogram(samples) => {
                let mut ms: Vec<f64> = samples.iter().map(|s| s.into_inner() * 1e3).collect();
                ms.sort_by(f64::total_cmp);
                let at = |q: f64| ms[((ms.len() - 1) as f64 * q) as usize];
                format!(
                    "{} samples, p50 {:.2} ms, p99 {:.2} ms",
                    ms.len(),
                    at(0.5),
                    at(0.99)
                )
            }
        };
        println!("{:<40} {:<32} {value}", key.key().name(), labels.join(","));
    }
    Ok(())
}
