//! Item 1: uncontended lock + unlock, each worker on its own lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use crate::server::Server;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Impl {
    Floor,
    WireFloor,
    Ceiling,
    RedissonLock,
    JvmRedisson,
    Rslock,
    RedissonCrate,
    /// redisson-lock's fair lock: `profile fair` only, not in full runs.
    RedissonFairLock,
}

impl Impl {
    pub const ALL: [Impl; 7] = [
        Impl::Floor,
        Impl::WireFloor,
        Impl::Ceiling,
        Impl::RedissonLock,
        Impl::JvmRedisson,
        Impl::Rslock,
        Impl::RedissonCrate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Impl::Floor => "floor (raw EVALSHA via fred)",
            Impl::WireFloor => "redis-rs wire floor (raw EVALSHA, 1 multiplexed conn)",
            Impl::Ceiling => "redis-benchmark ceiling (server, pipelined)",
            Impl::RedissonLock => "redisson-lock",
            Impl::JvmRedisson => "Redisson 4.7.0 (JVM)",
            Impl::Rslock => "rslock 0.10",
            Impl::RedissonCrate => "redisson crate 0.1",
            Impl::RedissonFairLock => "redisson-lock fair lock",
        }
    }
}

#[derive(serde::Serialize)]
pub struct Row {
    pub implementation: &'static str,
    pub concurrency: usize,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// CPU time (user + system) of the process that ran the client, per lock
    /// + unlock; 0 where not measured (the ceiling).
    pub cpu_us_per_op: f64,
    /// Heap allocations (alloc + realloc calls) per lock + unlock in the
    /// bench process; 0 where not measured (the ceiling, the JVM).
    pub allocs_per_op: f64,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "c={:<4} {:<30} {:>9.0} ops/s  p50 {:>7.0} us  p99 {:>7.0} us  cpu {:>5.1} us/op  {:>5.1} allocs/op",
            self.concurrency,
            self.implementation,
            self.ops_per_sec,
            self.p50_us,
            self.p99_us,
            self.cpu_us_per_op,
            self.allocs_per_op
        )
    }
}

/// User + system CPU time a process has used so far (`/proc/<pid>/stat`).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after `)`.
    let total = ticks(11) + ticks(12);
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(total * 1_000_000 / per_second)
}

/// Runs every implementation `reps` times at this concurrency, interleaved so
/// that drift on a shared machine spreads evenly, and keeps each one's median
/// run (by throughput).
pub async fn run_all(
    server: &Server,
    jvm: &mut Jvm,
    concurrency: usize,
    duration: Duration,
    reps: usize,
) -> Vec<Row> {
    let mut runs: Vec<Vec<Row>> = Impl::ALL.iter().map(|_| vec![]).collect();
    for rep in 0..reps {
        for (k, imp) in Impl::ALL.into_iter().enumerate() {
            server.flush().await;
            let row = run(imp, server, jvm, concurrency, duration, rep).await;
            eprintln!("{row}");
            runs[k].push(row);
        }
    }
    runs.into_iter()
        .map(|mut rows| {
            rows.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
            rows.swap_remove(rows.len() / 2)
        })
        .collect()
}

/// One run of one Rust implementation, without the JVM (for a profiler).
pub async fn run_one(imp: Impl, server: &Server, concurrency: usize, duration: Duration) -> Row {
    assert!(!matches!(imp, Impl::JvmRedisson | Impl::Ceiling));
    let mut jvm = None;
    run_inner(imp, server, &mut jvm, concurrency, duration, 0).await
}

async fn run(
    imp: Impl,
    server: &Server,
    jvm: &mut Jvm,
    concurrency: usize,
    duration: Duration,
    rep: usize,
) -> Row {
    let mut jvm = Some(jvm);
    run_inner(imp, server, &mut jvm, concurrency, duration, rep).await
}

async fn run_inner(
    imp: Impl,
    server: &Server,
    jvm: &mut Option<&mut Jvm>,
    concurrency: usize,
    duration: Duration,
    rep: usize,
) -> Row {
    let prefix = format!("bench:{}:{concurrency}:{rep}", imp as u8);
    let before = Usage::now();
    let measured = match imp {
        Impl::Floor => {
            let floor = Arc::new(Floor::new(server).await);
            rust_loop(concurrency, duration, move |i| {
                let floor = floor.clone();
                let name = format!("{prefix}:{i}");
                let field = format!("floor-client:{i}");
                let mut n = 0u64;
                move || {
                    n += 1;
                    let (floor, name, field) = (floor.clone(), name.clone(), field.clone());
                    async move { floor.lock_unlock(&name, &field, n).await }
                }
            })
            .await
        }
        Impl::WireFloor => {
            let floor = Arc::new(WireFloor::new(server).await);
            rust_loop(concurrency, duration, move |i| {
                let floor = floor.clone();
                let name = format!("{prefix}:{i}");
                let field = format!("wire-client:{i}");
                let mut n = 0u64;
                move || {
                    n += 1;
                    let (floor, name, field) = (floor.clone(), name.clone(), field.clone());
                    async move { floor.lock_unlock(&name, &field, n).await }
                }
            })
            .await
        }
        Impl::Ceiling => return ceiling(server, concurrency, duration).await,
        Impl::RedissonLock => {
            let client = redisson_lock::RedissonClient::from_url(&server.url)
                .await
                .unwrap();
            let row = redisson_lock_row(&client, &prefix, concurrency, duration).await;
            client.shutdown().await;
            return row;
        }
        Impl::RedissonFairLock => {
            let client = redisson_lock::RedissonClient::from_url(&server.url)
                .await
                .unwrap();
            let measured = rust_loop(concurrency, duration, |i| {
                let lock = client.fair_lock(&format!("{prefix}:{i}")).unwrap();
                move || {
                    let lock = lock.clone();
                    async move {
                        lock.lock().await.unwrap().unlock().await.unwrap();
                    }
                }
            })
            .await;
            client.shutdown().await;
            measured
        }
        Impl::Rslock => {
            let manager = rslock::LockManager::new(vec![server.url.clone()]);
            rust_loop(concurrency, duration, |i| {
                let (manager, name) = (manager.clone(), format!("{prefix}:{i}"));
                move || {
                    let (manager, name) = (manager.clone(), name.clone());
                    async move {
                        let lock = manager
                            .lock(name.as_bytes(), Duration::from_secs(30))
                            .await
                            .unwrap();
                        manager.unlock(&lock).await;
                    }
                }
            })
            .await
        }
        Impl::RedissonCrate => {
            // Its pool (10 by default) times out instead of queueing: one connection per worker.
            let config = redisson::RedissonConfig::single_server(&server.url)
                .with_pool_size(concurrency.max(10) as u32);
            let client = redisson::AsyncRedissonClient::new(config).await.unwrap();
            rust_loop(concurrency, duration, |i| {
                // One lock object per worker: the crate keeps its hold state per object.
                let lock = Arc::new(client.get_lock(&format!("{prefix}:{i}")));
                move || {
                    let lock = lock.clone();
                    async move {
                        lock.lock().await.unwrap();
                        // Its unlock script returns 0 for "released" and the client
                        // reports that as `false`; the key is deleted all the same.
                        let _released_but_reported_false = lock.unlock().await.unwrap();
                    }
                }
            })
            .await
        }
        Impl::JvmRedisson => {
            let jvm = jvm.as_mut().expect("the JVM peer runs in full runs");
            return jvm.bench(&prefix, concurrency, duration).await;
        }
    };
    measured.row(imp, concurrency, before)
}

fn per_op(cpu: Duration, ops: u64) -> f64 {
    cpu.as_micros() as f64 / ops.max(1) as f64
}

/// redisson-lock's uncontended lock + unlock, worker `i` on lock `prefix:i`.
pub async fn redisson_lock_row(
    client: &redisson_lock::RedissonClient,
    prefix: &str,
    concurrency: usize,
    duration: Duration,
) -> Row {
    let before = Usage::now();
    let measured = rust_loop(concurrency, duration, |i| {
        let lock = client.lock(&format!("{prefix}:{i}")).unwrap();
        move || {
            let lock = lock.clone();
            async move {
                lock.lock().await.unwrap().unlock().await.unwrap();
            }
        }
    })
    .await;
    measured.row(Impl::RedissonLock, concurrency, before)
}

/// This process's CPU time and allocation count at one moment.
struct Usage {
    cpu: Duration,
    allocs: u64,
}

impl Usage {
    fn now() -> Usage {
        Usage {
            cpu: cpu_time(std::process::id()),
            allocs: crate::alloc::allocations(),
        }
    }
}

/// What [`rust_loop`] measured.
struct Measured {
    /// Operations timed after the warm-up.
    ops: u64,
    /// All operations, warm-up included: CPU and allocations cover them all.
    total: u64,
    elapsed: Duration,
    samples: Vec<u32>,
}

impl Measured {
    fn row(mut self, imp: Impl, concurrency: usize, before: Usage) -> Row {
        let after = Usage::now();
        self.samples.sort_unstable();
        Row {
            implementation: imp.name(),
            concurrency,
            ops: self.ops,
            ops_per_sec: self.ops as f64 / self.elapsed.as_secs_f64(),
            p50_us: percentile(&self.samples, 0.50),
            p99_us: percentile(&self.samples, 0.99),
            cpu_us_per_op: per_op(after.cpu - before.cpu, self.total),
            allocs_per_op: (after.allocs - before.allocs) as f64 / self.total.max(1) as f64,
        }
    }
}

fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)] as f64
}

/// `concurrency` tasks, each running its own operation in a loop until the
/// deadline, timed after a warm-up.
async fn rust_loop<W, O, F>(concurrency: usize, duration: Duration, mut worker: W) -> Measured
where
    W: FnMut(usize) -> O,
    O: FnMut() -> F + Send + 'static,
    F: Future<Output = ()> + Send,
{
    // Warm-up: connections, script cache, allocator.
    let warm = Instant::now() + Duration::from_millis(200);
    let deadline = warm + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|i| {
            let mut op = worker(i);
            tokio::spawn(async move {
                let mut samples = Vec::with_capacity(1 << 16);
                let mut total = 0u64;
                loop {
                    let t0 = Instant::now();
                    if t0 >= deadline {
                        return (total, samples);
                    }
                    op().await;
                    total += 1;
                    if t0 >= warm {
                        samples.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    }
                }
            })
        })
        .collect();
    let (mut samples, mut total) = (vec![], 0);
    for t in tasks {
        let (n, s) = t.await.unwrap();
        total += n;
        samples.extend(s);
    }
    Measured {
        ops: samples.len() as u64,
        total,
        elapsed: duration,
        samples,
    }
}

/// The floor: the crate's own acquire and unlock scripts, sent back to back
/// as EVALSHA through one fred client, with nothing else around them.
struct Floor {
    /// `FLOOR_POOL=n` (default 1): the tasks spread over n connections, by
    /// lock name (an experiment of issue 15; docs/benchmarks.md).
    pool: Vec<Client>,
    acquire: String,
    unlock: String,
}

impl Floor {
    async fn new(server: &Server) -> Floor {
        let client = server.raw().await;
        let acquire: String = client
            .script_load(include_str!("../../lua/lock/acquire.lua"))
            .await
            .unwrap();
        let unlock: String = client
            .script_load(include_str!("../../lua/lock/unlock.lua"))
            .await
            .unwrap();
        let n: usize = std::env::var("FLOOR_POOL")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let mut pool = vec![client];
        for _ in 1..n {
            pool.push(server.raw().await);
        }
        Floor {
            pool,
            acquire,
            unlock,
        }
    }

    async fn lock_unlock(&self, name: &str, field: &str, n: u64) {
        let client = &self.pool[redis_protocol_slot(name) % self.pool.len()];
        let acquired: Option<i64> = client
            .evalsha(
                &self.acquire,
                vec![name],
                vec![Value::from(30_000), field.into()],
            )
            .await
            .unwrap();
        assert!(acquired.is_none());
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let latch = format!("redisson_unlock_latch:{{{name}}}:{field}{n:016x}");
        let released: i64 = client
            .evalsha(
                &self.unlock,
                vec![name, channel.as_str(), latch.as_str()],
                vec![
                    Value::from(0),
                    30_000.into(),
                    field.into(),
                    "PUBLISH".into(),
                    16_000.into(),
                ],
            )
            .await
            .unwrap();
        assert_eq!(released, 1);
    }
}

/// The wire floor: the same two scripts sent by redis-rs over one
/// multiplexed connection, which writes the commands of concurrent tasks
/// together (it flushes when its queue is empty).
struct WireFloor {
    conn: redis::aio::MultiplexedConnection,
    acquire: String,
    unlock: String,
}

impl WireFloor {
    async fn new(server: &Server) -> WireFloor {
        let floor = Floor::new(server).await;
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_pipeline_buffer_size(4096);
        let conn = redis::Client::open(server.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        WireFloor {
            conn,
            acquire: floor.acquire,
            unlock: floor.unlock,
        }
    }

    async fn lock_unlock(&self, name: &str, field: &str, n: u64) {
        let mut conn = self.conn.clone();
        let acquired: Option<i64> = redis::cmd("EVALSHA")
            .arg(&self.acquire)
            .arg(1)
            .arg(name)
            .arg(30_000)
            .arg(field)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(acquired.is_none());
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let latch = format!("redisson_unlock_latch:{{{name}}}:{field}{n:016x}");
        let released: i64 = redis::cmd("EVALSHA")
            .arg(&self.unlock)
            .arg(3)
            .arg(name)
            .arg(&channel)
            .arg(&latch)
            .arg(0)
            .arg(30_000)
            .arg(field)
            .arg("PUBLISH")
            .arg(16_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(released, 1);
    }
}

/// The server ceiling: redis-benchmark sends the acquire script, then the
/// unlock script, pipelined (16 connections x 16 in flight), on a shared key
/// range, and the two rates combine into pairs per second. redis-benchmark
/// cannot chain two commands on one key, so the acquires first build up hold
/// counts that the unlocks then take down: both scripts do their real work.
async fn ceiling(server: &Server, concurrency: usize, duration: Duration) -> Row {
    let floor = Floor::new(server).await;
    // Roughly as many requests as a fast client sends in `duration`.
    let requests = (duration.as_secs_f64() * 150_000.0) as u64;
    let run = |args: Vec<String>| {
        let url = server.url.clone();
        async move {
            let out = tokio::process::Command::new("redis-benchmark")
                .args([
                    "-u", &url, "-c", "16", "-P", "16", "-r", "100000", "--csv", "-n",
                ])
                .arg(requests.to_string())
                .args(&args)
                .output()
                .await
                .expect("redis-benchmark (Debian's redis-tools)");
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let line = text.lines().nth(1).unwrap_or_default().to_string();
            let rps: f64 = line
                .split(',')
                .nth(1)
                .and_then(|f| f.trim_matches('"').parse().ok())
                .unwrap_or_else(|| panic!("redis-benchmark said: {text}"));
            rps
        }
    };
    let key = "bench:ceiling:__rand_int__".to_string();
    let acquire = run(vec![
        "EVALSHA".into(),
        floor.acquire.clone(),
        "1".into(),
        key.clone(),
        "30000".into(),
        "ceiling-client:1".into(),
    ])
    .await;
    let unlock = run(vec![
        "EVALSHA".into(),
        floor.unlock.clone(),
        "3".into(),
        key,
        "redisson_lock__channel:{bench:ceiling:__rand_int__}".into(),
        "redisson_unlock_latch:{bench:ceiling:__rand_int__}:__rand_int__".into(),
        "0".into(),
        "30000".into(),
        "ceiling-client:1".into(),
        "PUBLISH".into(),
        "16000".into(),
    ])
    .await;
    let pairs = 1.0 / (1.0 / acquire + 1.0 / unlock);
    Row {
        implementation: Impl::Ceiling.name(),
        concurrency,
        ops: requests,
        ops_per_sec: pairs,
        p50_us: 0.0,
        p99_us: 0.0,
        cpu_us_per_op: 0.0,
        allocs_per_op: 0.0,
    }
}

/// JVM Redisson through the interop peer's `bench` command: one JVM for the
/// whole run, warmed up (JIT) before each concurrency level's first run.
pub struct Jvm {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    warmed: Vec<usize>,
}

impl Jvm {
    pub async fn start(server: &Server) -> Jvm {
        Self::with(server.jvm_peer()).await
    }

    /// A JVM peer on a cluster (`nodes`: comma-separated `redis://` addresses).
    pub async fn start_cluster(nodes: &str) -> Jvm {
        Self::with(crate::server::jvm_peer(nodes, true)).await
    }

    async fn with(mut child: tokio::process::Child) -> Jvm {
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        lines.next_line().await.unwrap().expect("READY");
        Jvm {
            child,
            stdin,
            lines,
            warmed: vec![],
        }
    }

    async fn call(&mut self, line: String) -> String {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.lines.next_line().await.unwrap().unwrap()
    }

    pub async fn bench(&mut self, prefix: &str, concurrency: usize, duration: Duration) -> Row {
        if !self.warmed.contains(&concurrency) {
            self.call(format!("w bench {prefix}:warm {concurrency} 2000"))
                .await;
            self.warmed.push(concurrency);
        }
        let pid = self.child.id().unwrap_or(0);
        let cpu_before = cpu_time(pid);
        let reply = self
            .call(format!(
                "b bench {prefix} {concurrency} {}",
                duration.as_millis()
            ))
            .await;
        let cpu = cpu_time(pid) - cpu_before;
        let f: Vec<f64> = reply
            .split_whitespace()
            .skip(2)
            .map(|x| x.parse().unwrap())
            .collect();
        Row {
            implementation: Impl::JvmRedisson.name(),
            concurrency,
            ops: f[0] as u64,
            ops_per_sec: f[0] / (f[1] / 1000.0),
            p50_us: f[2],
            p99_us: f[3],
            cpu_us_per_op: per_op(cpu, f[0] as u64),
            allocs_per_op: 0.0,
        }
    }
}

/// Markdown table with ratios to the floor at the same concurrency.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| concurrency | implementation | ops/s | vs wire floor | p50 µs | p99 µs | CPU µs/op |\n|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let floor = rows
            .iter()
            .find(|r| {
                r.concurrency == row.concurrency && r.implementation == Impl::WireFloor.name()
            })
            .map_or(f64::NAN, |f| f.ops_per_sec);
        out += &format!(
            "| {} | {} | {:.0} | {:.2}x | {:.0} | {:.0} | {:.1} |\n",
            row.concurrency,
            row.implementation,
            row.ops_per_sec,
            row.ops_per_sec / floor,
            row.p50_us,
            row.p99_us,
            row.cpu_us_per_op
        );
    }
    out
}

/// Spreads the floor's locks over its connections the way redisson-lock
/// spreads its writers: by the name's hash slot.
fn redis_protocol_slot(name: &str) -> usize {
    usize::from(redisson_lock::naming::slot(name))
}
