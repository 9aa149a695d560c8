//! Items 2 and 3: hand-off latency (one holder's unlock until the next waiter
//! holds the lock) with N waiters spread over 1 or 4 processes, and the Redis
//! commands each hand-off costs.
//!
//! Each waiter acquires once and releases at once; every acquisition and
//! release is stamped with the wall clock (shared by all processes on the
//! machine). Hand-off k = acquisition k − release k−1, in acquisition order.

use std::collections::HashMap;
use std::fmt;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::prelude::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::monitor::Monitor;
use crate::server::Server;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    RedissonLock,
    JvmRedisson,
    Rslock,
    /// The fair lock: each hand-off goes to the first in line.
    RedissonLockFair,
    JvmRedissonFair,
}

impl Kind {
    /// The kind named by `arg` on the command line.
    pub fn from_arg(arg: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .chain(Kind::FAIR)
            .find(|k| k.arg() == arg)
    }

    pub const ALL: [Kind; 3] = [Kind::RedissonLock, Kind::JvmRedisson, Kind::Rslock];
    pub const FAIR: [Kind; 2] = [Kind::RedissonLockFair, Kind::JvmRedissonFair];

    fn name(self) -> &'static str {
        match self {
            Kind::RedissonLock => "redisson-lock",
            Kind::JvmRedisson => "Redisson 4.7.0 (JVM)",
            Kind::Rslock => "rslock 0.10 (polling)",
            Kind::RedissonLockFair => "redisson-lock fair",
            Kind::JvmRedissonFair => "Redisson 4.7.0 fair (JVM)",
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Kind::RedissonLock => "redisson-lock",
            Kind::JvmRedisson => "jvm",
            Kind::Rslock => "rslock",
            Kind::RedissonLockFair => "redisson-lock-fair",
            Kind::JvmRedissonFair => "jvm-fair",
        }
    }

    fn jvm(self) -> bool {
        matches!(self, Kind::JvmRedisson | Kind::JvmRedissonFair)
    }

    fn fair(self) -> bool {
        matches!(self, Kind::RedissonLockFair | Kind::JvmRedissonFair)
    }
}

#[derive(serde::Serialize)]
pub struct Row {
    pub implementation: &'static str,
    pub waiters: usize,
    pub processes: usize,
    pub handoffs: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub acquire_attempts_per_handoff: f64,
    pub commands_per_handoff: f64,
    /// Time the waiter processes' threads spent runnable but not running
    /// (`/proc/<pid>/task/*/schedstat`), per hand-off, in µs: the share of a
    /// hand-off spent waiting for a core.
    pub worker_runqueue_us_per_handoff: f64,
    /// The same for redis-server, which must run to publish each release.
    pub redis_runqueue_us_per_handoff: f64,
}

/// Run-queue wait (ns) of every thread of process `pid` so far.
pub fn runqueue_wait_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<24} {:>4} waiters / {} proc: {:>4} hand-offs, p50 {:>8.0} us, p99 {:>8.0} us, {:.1} attempts and {:.1} commands per hand-off, run-queue wait {:.0} us (waiters) {:.0} us (redis) per hand-off",
            self.implementation,
            self.waiters,
            self.processes,
            self.handoffs,
            self.p50_us,
            self.p99_us,
            self.acquire_attempts_per_handoff,
            self.commands_per_handoff,
            self.worker_runqueue_us_per_handoff,
            self.redis_runqueue_us_per_handoff
        )
    }
}

pub fn micros_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

pub async fn run(
    server: &Server,
    kind: Kind,
    waiters: usize,
    processes: usize,
    budget: Duration,
) -> Row {
    run_watched(server, kind, waiters, processes, budget, None).await
}

/// [`run`], with the server's `MONITOR` stream recorded over the measured
/// window into `monitor` when given, which then splits each hand-off.
pub async fn run_watched(
    server: &Server,
    kind: Kind,
    waiters: usize,
    processes: usize,
    budget: Duration,
    monitor: Option<&mut Monitor>,
) -> Row {
    server.flush().await;
    let processes = processes.min(waiters);
    let name = format!("handoff:{}:{waiters}:{processes}", kind.arg());
    let raw = server.raw().await;

    // The first holder, of the same kind as the waiters (rslock keeps a string key).
    let ours = redisson_lock::RedissonClient::from_url(&server.url)
        .await
        .unwrap();
    let rslock = rslock::LockManager::new(vec![server.url.clone()]);
    let (guard, rs_lock) = match kind {
        Kind::Rslock => (
            None,
            Some(
                rslock
                    .lock(name.as_bytes(), Duration::from_secs(60))
                    .await
                    .unwrap(),
            ),
        ),
        kind if kind.fair() => (
            Some(ours.fair_lock(&name).unwrap().lock().await.unwrap()),
            None,
        ),
        _ => (Some(ours.lock(&name).unwrap().lock().await.unwrap()), None),
    };

    let mut workers = vec![];
    for _ in 0..processes {
        workers.push(Worker::start(kind, server).await);
    }
    // Every process is up (JVMs started and warmed up); now the clock starts.
    let settle = Duration::from_millis(500);
    let deadline_ms = micros_now() / 1000 + (settle + budget).as_millis() as u64;
    for (p, worker) in workers.iter_mut().enumerate() {
        let count = waiters / processes + usize::from(p < waiters % processes);
        worker.begin(&name, count, deadline_ms).await;
    }
    // Let every waiter make its first attempt and start waiting.
    tokio::time::sleep(settle).await;

    let before = command_stats(&raw).await;
    let processed_before = processed(&raw).await;
    let redis_pid = server.pid().unwrap_or(0);
    let redis_wait_before = runqueue_wait_ns(redis_pid);
    let workers_wait_before: u64 = workers.iter().map(Worker::runqueue_wait_ns).sum();
    let mut monitor = monitor;
    if let Some(monitor) = monitor.as_deref_mut() {
        monitor.attach(server).await;
    }
    let released_at = micros_now();
    match (guard, rs_lock) {
        (Some(guard), _) => {
            guard.unlock().await.unwrap();
        }
        (_, Some(lock)) => rslock.unlock(&lock).await,
        _ => unreachable!(),
    }
    let worker_pids: Vec<u32> = workers.iter().filter_map(|w| w.child.id()).collect();
    let mut stamps: Vec<(u64, u64)> = vec![];
    let mut workers_wait = 0;
    for worker in workers {
        let (worker_stamps, wait) = worker.finish().await;
        stamps.extend(worker_stamps);
        workers_wait += wait;
    }
    if let Some(monitor) = monitor {
        monitor.detach(server, released_at, &stamps).await;
    }
    let redis_wait = runqueue_wait_ns(redis_pid) - redis_wait_before;
    let workers_wait = workers_wait.saturating_sub(workers_wait_before);
    let after = command_stats(&raw).await;
    // Minus the one INFO that reads it. Includes the calls inside scripts, so
    // it compares fairly only between clients running the same scripts.
    let commands = (processed(&raw).await - processed_before).saturating_sub(1);
    ours.shutdown().await;

    stamps.sort_unstable();
    let mut previous = released_at;
    let mut latencies: Vec<u64> = stamps
        .iter()
        .map(|&(acq, rel)| {
            let handoff = acq.saturating_sub(previous);
            previous = rel;
            handoff
        })
        .collect();
    if let Some(path) = std::env::var_os("HANDOFF_DUMP") {
        dump(path.as_ref(), released_at, &stamps, &worker_pids, redis_pid);
    }
    latencies.sort_unstable();
    let handoffs = stamps.len().max(1) as f64;
    let delta =
        |cmd: &str| after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0);
    let scripts = delta("evalsha") + delta("eval");

    if std::env::var_os("BENCH_DEBUG").is_some() {
        let mut d: Vec<_> = after
            .keys()
            .map(|k| (k.clone(), delta(k)))
            .filter(|(_, n)| *n > 0)
            .collect();
        d.sort();
        eprintln!("{} {waiters}/{processes}: {d:?}", kind.name());
    }
    let attempts = match kind {
        // Every release is one script: the first holder's and each waiter's.
        Kind::Rslock => delta("set"),
        _ => scripts.saturating_sub(stamps.len() as u64 + 1),
    };
    Row {
        implementation: kind.name(),
        waiters,
        processes,
        handoffs: stamps.len(),
        p50_us: pick(&latencies, 0.50),
        p99_us: pick(&latencies, 0.99),
        acquire_attempts_per_handoff: attempts as f64 / handoffs,
        commands_per_handoff: commands as f64 / handoffs,
        worker_runqueue_us_per_handoff: workers_wait as f64 / 1000.0 / handoffs,
        redis_runqueue_us_per_handoff: redis_wait as f64 / 1000.0 / handoffs,
    }
}

fn pick(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)] as f64
}

/// Commands Redis executed (`total_commands_processed`: client commands and
/// the calls scripts make).
async fn processed(raw: &Client) -> u64 {
    let info: String = raw.info(Some(fred::types::InfoKind::Stats)).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Calls per command since the server started (INFO commandstats; this
/// includes the calls scripts make), without the INFO calls themselves.
async fn command_stats(raw: &Client) -> HashMap<String, u64> {
    let info: String = raw
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cmdstat_")?;
            let (cmd, stats) = rest.split_once(':')?;
            let calls = stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (cmd != "info").then(|| (cmd.to_string(), calls))
        })
        .collect()
}

/// One process of waiters: this binary in `handoff-worker` mode, or a JVM peer.
struct Worker {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<Box<dyn tokio::io::AsyncRead + Unpin + Send>>>,
    kind: Kind,
}

impl Worker {
    async fn start(kind: Kind, server: &Server) -> Worker {
        let mut child = if kind.jvm() {
            server.jvm_peer()
        } else {
            tokio::process::Command::new(std::env::current_exe().unwrap())
                .args(["handoff-worker", kind.arg(), &server.url])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        };
        let stdin = child.stdin.take().unwrap();
        let stdout: Box<dyn tokio::io::AsyncRead + Unpin + Send> =
            Box::new(child.stdout.take().unwrap());
        let mut lines = BufReader::new(stdout).lines();
        let empty: Box<dyn tokio::io::AsyncRead + Unpin + Send> = Box::new(tokio::io::empty());
        let mut worker = Worker {
            child,
            stdin,
            lines: BufReader::new(empty).lines(),
            kind,
        };
        if kind.jvm() {
            lines.next_line().await.unwrap().expect("READY");
            // Warm the JIT on Redisson's lock paths before measuring.
            worker
                .stdin
                .write_all(b"w bench handoff-warm 8 1500\n")
                .await
                .unwrap();
            let warm = lines.next_line().await.unwrap().unwrap_or_default();
            assert!(warm.starts_with("w OK"), "{warm}");
        }
        worker.lines = lines;
        worker
    }

    /// Tells the worker to start waiting: `count` waiters on `name` until the deadline.
    async fn begin(&mut self, name: &str, count: usize, deadline_ms: u64) {
        let line = match self.kind {
            Kind::JvmRedisson => format!("h handoff {name} {count} {deadline_ms}\n"),
            Kind::JvmRedissonFair => format!("h handoff {name} {count} {deadline_ms} f\n"),
            _ => format!("{name} {count} {deadline_ms}\n"),
        };
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    fn runqueue_wait_ns(&self) -> u64 {
        self.child.id().map_or(0, runqueue_wait_ns)
    }

    /// The worker's (acquired, released) stamps in µs since the epoch, and
    /// its threads' run-queue wait (ns) so far.
    async fn finish(mut self) -> (Vec<(u64, u64)>, u64) {
        let line = self.lines.next_line().await.unwrap().unwrap_or_default();
        let wait = self.runqueue_wait_ns();
        if let Some(rest) = line.strip_prefix("h ERR") {
            eprintln!("JVM hand-off worker failed:{rest}");
        }
        let _ = self.child.kill().await;
        let payload = line.trim_start_matches("h OK").trim();
        let stamps = payload
            .split_whitespace()
            .filter_map(|pair| {
                let (a, r) = pair.split_once(':')?;
                Some((a.parse().ok()?, r.parse().ok()?))
            })
            .collect();
        (stamps, wait)
    }
}

/// `handoff-worker <kind> <url>`, then `<name> <count> <deadline_unix_ms>` on
/// stdin: waits for the lock `count` times concurrently, once each, and prints
/// the stamps on one line.
pub async fn worker(args: &[String]) {
    let (kind, url) = (args[0].as_str(), args[1].clone());
    // Connect first: the start line comes once every process is up.
    let ours = match kind {
        "redisson-lock" | "redisson-lock-fair" => {
            Some(redisson_lock::RedissonClient::from_url(&url).await.unwrap())
        }
        _ => None,
    };
    let manager = rslock::LockManager::new(vec![url]);
    let mut line = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut line)
        .await
        .unwrap();
    let mut words = line.split_whitespace();
    let name = words.next().unwrap().to_string();
    let count: usize = words.next().unwrap().parse().unwrap();
    let deadline_ms: u64 = words.next().unwrap().parse().unwrap();
    let left = move || Duration::from_millis(deadline_ms.saturating_sub(micros_now() / 1000));
    let mut tasks = vec![];
    match kind {
        "redisson-lock" => {
            let client = ours.expect("connected above");
            for _ in 0..count {
                let lock = client.lock(&name).unwrap();
                tasks.push(tokio::spawn(async move {
                    let guard = lock.try_lock_for(left()).await.ok()??;
                    let acq = micros_now();
                    let rel = micros_now();
                    guard.unlock().await.ok()?;
                    Some((acq, rel))
                }));
            }
        }
        "redisson-lock-fair" => {
            let client = ours.expect("connected above");
            for _ in 0..count {
                let lock = client.fair_lock(&name).unwrap();
                tasks.push(tokio::spawn(async move {
                    let guard = lock.try_lock_for(left()).await.ok()??;
                    let acq = micros_now();
                    let rel = micros_now();
                    guard.unlock().await.ok()?;
                    Some((acq, rel))
                }));
            }
        }
        "rslock" => {
            for _ in 0..count {
                let (manager, name) = (manager.clone(), name.clone());
                tasks.push(tokio::spawn(async move {
                    // rslock has no waiting: retry (its default: 3 tries, up to 200 ms apart) until the deadline.
                    while !left().is_zero() {
                        if let Ok(lock) =
                            manager.lock(name.as_bytes(), Duration::from_secs(60)).await
                        {
                            let acq = micros_now();
                            let rel = micros_now();
                            manager.unlock(&lock).await;
                            return Some((acq, rel));
                        }
                    }
                    None
                }));
            }
        }
        other => panic!("unknown worker kind {other}"),
    }
    // Collected on the runtime: awaiting each task from the main thread
    // (`block_on`) would wake a third thread at every hand-off, on the
    // hand-off's path.
    let collected = tokio::spawn(futures::future::join_all(tasks))
        .await
        .unwrap();
    let mut out = String::new();
    for (a, r) in collected.into_iter().flatten().flatten() {
        out += &format!("{a}:{r} ");
    }
    println!("{}", out.trim());
    // Stay until the harness has read this process's scheduler counters
    // (it closes stdin or kills it).
    let _ = BufReader::new(tokio::io::stdin())
        .read_line(&mut String::new())
        .await;
}

pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| implementation | waiters | processes | hand-offs | p50 µs | p99 µs | acquire attempts / hand-off | commands executed / hand-off | run-queue wait µs / hand-off (waiters, redis) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out += &format!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0}, {:.0} |\n",
            r.implementation,
            r.waiters,
            r.processes,
            r.handoffs,
            r.p50_us,
            r.p99_us,
            r.acquire_attempts_per_handoff,
            r.commands_per_handoff,
            r.worker_runqueue_us_per_handoff,
            r.redis_runqueue_us_per_handoff
        );
    }
    out
}

/// Writes one run's stamps for `benches/handoff-sched.py`, which lines them up
/// with `perf sched` (whose clock is `CLOCK_MONOTONIC` under `-k monotonic`).
fn dump(
    path: &std::path::Path,
    released_at: u64,
    stamps: &[(u64, u64)],
    workers: &[u32],
    redis: u32,
) {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let monotonic = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
    let json = serde_json::json!({
        "realtime_minus_monotonic_us": micros_now() - monotonic,
        "released_at": released_at,
        "stamps": stamps,
        "worker_pids": workers,
        "redis_pid": redis,
    });
    std::fs::write(path, json.to_string()).unwrap();
}
