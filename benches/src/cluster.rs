//! Item 5 (issue 5): uncontended lock + unlock on a Redis Cluster of 1, 2 and
//! 3 primaries (no replicas, so no WAIT), each worker on its own lock, the
//! locks spread over every slot. redisson-lock and JVM Redisson 4.7.0 run side
//! by side on the same cluster, interleaved, median of 3.

use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};

use crate::throughput::{self, Jvm};

#[derive(serde::Serialize)]
pub struct Row {
    pub primaries: usize,
    pub implementation: &'static str,
    pub concurrency: usize,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// CPU time of the busiest primary over the run, as a share of one core.
    pub busiest_primary_cpu: f64,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "primaries={} c={:<4} {:<24} {:>9.0} ops/s  p50 {:>6.0} us  p99 {:>7.0} us",
            self.primaries,
            self.concurrency,
            self.implementation,
            self.ops_per_sec,
            self.p50_us,
            self.p99_us
        )
    }
}

/// A cluster of `n` primaries on free ports, slots split evenly, joined with
/// CLUSTER MEET (redis-cli --cluster create needs at least 3).
pub struct BenchCluster {
    ports: Vec<u16>,
    _children: Vec<tokio::process::Child>,
    dir: std::path::PathBuf,
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

async fn node(port: u16) -> Client {
    let c = Builder::from_config(Config::from_url(&format!("redis://127.0.0.1:{port}")).unwrap())
        .build()
        .unwrap();
    c.init().await.unwrap();
    c
}

async fn cluster_cmd(c: &Client, args: Vec<String>) -> Value {
    c.custom(
        CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
        args,
    )
    .await
    .unwrap()
}

impl BenchCluster {
    pub async fn start(n: usize) -> BenchCluster {
        let dir = std::env::temp_dir().join(format!(
            "redisson-lock-bench-cluster-{}-{n}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ports = vec![];
        let mut children = vec![];
        for _ in 0..n {
            let port = free_port();
            let conf = dir.join(format!("nodes-{port}.conf"));
            let child = crate::server::spawn_redis(
                port,
                &[
                    "--cluster-enabled".as_ref(),
                    "yes".as_ref(),
                    "--cluster-announce-ip".as_ref(),
                    "127.0.0.1".as_ref(),
                    "--cluster-config-file".as_ref(),
                    conf.as_os_str(),
                    "--dir".as_ref(),
                    dir.as_os_str(),
                ],
            )
            .await;
            ports.push(port);
            children.push(child);
        }
        let per = 16_384 / n;
        for (i, port) in ports.iter().enumerate() {
            let c = node(*port).await;
            let start = i * per;
            let end = if i + 1 == n { 16_383 } else { start + per - 1 };
            cluster_cmd(
                &c,
                vec!["ADDSLOTSRANGE".into(), start.to_string(), end.to_string()],
            )
            .await;
            if i > 0 {
                cluster_cmd(
                    &c,
                    vec!["MEET".into(), "127.0.0.1".into(), ports[0].to_string()],
                )
                .await;
            }
            let _ = c.quit().await;
        }
        // Every node sees the cluster ok and all n primaries.
        loop {
            let mut ok = true;
            for port in &ports {
                let c = node(*port).await;
                let info: String = cluster_cmd(&c, vec!["INFO".into()])
                    .await
                    .convert()
                    .unwrap();
                let _ = c.quit().await;
                let known = format!("cluster_known_nodes:{n}");
                ok &= info.contains("cluster_state:ok") && info.lines().any(|l| l.trim() == known);
            }
            if ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        BenchCluster {
            ports,
            _children: children,
            dir,
        }
    }

    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://127.0.0.1:{}", self.ports[0]);
        for (i, p) in self.ports.iter().enumerate().skip(1) {
            url.push(if i == 1 { '?' } else { '&' });
            url.push_str(&format!("node=127.0.0.1:{p}"));
        }
        url
    }

    pub fn addresses(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// used_cpu_user + used_cpu_sys of each node, in seconds.
    async fn cpu(&self) -> Vec<f64> {
        let mut out = vec![];
        for port in &self.ports {
            let c = node(*port).await;
            let info: String = c
                .custom(
                    CustomCommand::new_static("INFO", ClusterHash::Random, false),
                    vec!["cpu"],
                )
                .await
                .unwrap();
            let _ = c.quit().await;
            let field = |name: &str| -> f64 {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0.0)
            };
            out.push(field("used_cpu_user:") + field("used_cpu_sys:"));
        }
        out
    }

    async fn flush(&self) {
        for port in &self.ports {
            let c = node(*port).await;
            let _: Value = c
                .custom(
                    CustomCommand::new_static("FLUSHALL", ClusterHash::Random, false),
                    Vec::<Value>::new(),
                )
                .await
                .unwrap();
            let _ = c.quit().await;
        }
    }
}

pub async fn run(
    primaries: &[usize],
    concurrency: usize,
    duration: Duration,
    reps: usize,
) -> Vec<Row> {
    let mut rows = vec![];
    for &n in primaries {
        let cluster = BenchCluster::start(n).await;
        eprintln!("cluster of {n} primaries at {}", cluster.url());
        let mut jvm = Jvm::start_cluster(&cluster.addresses()).await;
        let mut ours = vec![];
        let mut theirs = vec![];
        for rep in 0..reps {
            cluster.flush().await;
            let prefix = format!("cbench:{n}:{rep}");
            let client = redisson_lock::RedissonClient::from_url(&cluster.url())
                .await
                .unwrap();
            let before = (cluster.cpu().await, std::time::Instant::now());
            let row = throughput::redisson_lock_row(&client, &prefix, concurrency, duration).await;
            let cpu = busiest(&cluster, before).await;
            client.shutdown().await;
            eprintln!(
                "primaries={n} {row} busiest primary {:.0}% CPU",
                cpu * 100.0
            );
            ours.push((row, cpu));
            cluster.flush().await;
            let before = (cluster.cpu().await, std::time::Instant::now());
            let row = jvm
                .bench(&format!("j{prefix}"), concurrency, duration)
                .await;
            let cpu = busiest(&cluster, before).await;
            eprintln!(
                "primaries={n} {row} busiest primary {:.0}% CPU",
                cpu * 100.0
            );
            theirs.push((row, cpu));
        }
        for mut runs in [ours, theirs] {
            runs.sort_by(|a, b| a.0.ops_per_sec.total_cmp(&b.0.ops_per_sec));
            let (median, busiest_primary_cpu) = runs.swap_remove(runs.len() / 2);
            rows.push(Row {
                busiest_primary_cpu,
                primaries: n,
                implementation: median.implementation,
                concurrency,
                ops_per_sec: median.ops_per_sec,
                p50_us: median.p50_us,
                p99_us: median.p99_us,
            });
        }
    }
    rows
}

/// The busiest node's CPU share of one core since `before`.
async fn busiest(cluster: &BenchCluster, before: (Vec<f64>, std::time::Instant)) -> f64 {
    let after = cluster.cpu().await;
    let wall = before.1.elapsed().as_secs_f64();
    after
        .iter()
        .zip(&before.0)
        .map(|(a, b)| (a - b) / wall)
        .fold(0.0, f64::max)
}

pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| primaries | implementation | ops/s | vs 1 primary | vs Redisson | p50 µs | p99 µs | busiest primary CPU |\n|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let base = rows
            .iter()
            .find(|r| r.primaries == 1 && r.implementation == row.implementation)
            .map_or(f64::NAN, |r| r.ops_per_sec);
        let jvm = rows
            .iter()
            .find(|r| r.primaries == row.primaries && r.implementation != row.implementation)
            .map_or(f64::NAN, |r| r.ops_per_sec);
        out += &format!(
            "| {} | {} | {:.0} | {:.2}x | {:.2}x | {:.0} | {:.0} | {:.0}% |\n",
            row.primaries,
            row.implementation,
            row.ops_per_sec,
            row.ops_per_sec / base,
            row.ops_per_sec / jvm,
            row.p50_us,
            row.p99_us,
            row.busiest_primary_cpu * 100.0
        );
    }
    out
}
