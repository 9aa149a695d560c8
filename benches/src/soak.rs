//! `soak`: a long run on millions of distinct lock names, to show that
//! nothing grows (issue 38). A service that locks per order id creates a new
//! name for nearly every lock; what the client keeps per name (a channel
//! subscription, a hold table entry, a task, an unlock latch) must go when
//! the name is done with.
//!
//! Three kinds of work run at once on one client:
//! * uncontended: tasks that each lock and unlock a new name every time;
//! * contended: groups of 8 tasks on one name, which moves on to a new one
//!   every 1 000 pairs of the group (waiters woken by pub/sub);
//! * cancelled waiters: tasks that wait for a contended name for 1-20 ms and
//!   give up, the waiting future dropped.
//!
//! Every minute it samples the client's RSS and tokio tasks, and on the
//! servers the connections, the pub/sub channels and their subscribers, and
//! the keys. At the end, once the work has stopped and the client has shut
//! down, it waits (at most 30 s) for the keys and channels to go, and lists
//! what was left.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand, InfoKind};

use crate::replicated::Deployment;

#[derive(Clone, Copy)]
pub struct Shape {
    pub minutes: u64,
    /// Runs on past `minutes` until this many pairs (0: none)...
    pub pairs: u64,
    /// ...but no longer than this.
    pub most_minutes: u64,
    /// Tasks locking a new name each time.
    pub alone: usize,
    /// Groups of [`GROUP`] tasks sharing a name.
    pub groups: usize,
    /// Tasks that wait for a group's name and give up.
    pub cancellers: usize,
}

/// Tasks per contended name.
const GROUP: usize = 8;
/// Pairs of a group on one name before it moves to the next.
const PAIRS_PER_NAME: u64 = 1_000;

#[derive(serde::Serialize, Clone, Debug, Default)]
pub struct Sample {
    pub minute: u64,
    /// Lock + unlock pairs so far.
    pub pairs: u64,
    /// Distinct lock names so far.
    pub names: u64,
    /// Waits given up (their futures dropped) so far.
    pub cancelled: u64,
    pub errors: u64,
    pub rss_kb: u64,
    /// Tasks alive on the client's runtime (the bench's own included).
    pub tasks: usize,
    /// `connected_clients`, summed over every data node.
    pub connections: u64,
    /// `PUBSUB CHANNELS` (and `SHARDCHANNELS`), summed over every data node.
    pub channels: u64,
    /// Their subscribers (`PUBSUB NUMSUB` / `SHARDNUMSUB`), summed.
    pub subscribers: u64,
    /// `DBSIZE`, summed over the primaries.
    pub keys: u64,
}

#[derive(serde::Serialize, Clone, Debug)]
pub struct Run {
    pub deployment: String,
    pub version: String,
    /// Minutes the work ran (at least `Shape::minutes`).
    pub shape_minutes: u64,
    pub tasks: usize,
    pub samples: Vec<Sample>,
    /// After the work stopped and the client shut down: what was left once
    /// the keys and channels had gone, or after 30 s (`tasks`: the client's
    /// tasks once the work had stopped, before the shutdown).
    pub end: Sample,
    /// Seconds from the end of the work until no key and no channel was left.
    pub drained_s: Option<f64>,
    /// The keys left after 30 s (at most 20): name, type, PTTL and content.
    pub left: Vec<String>,
    /// For each sampled figure, its range after the first minute relative to
    /// the first minute's value.
    pub spread: Vec<(String, f64)>,
}

/// Where the soak runs: a single server, or every node of a deployment.
pub enum Target<'a> {
    Single(&'a str),
    Deployment(&'a Deployment),
}

impl Target<'_> {
    fn url(&self) -> String {
        match self {
            Target::Single(url) => url.to_string(),
            Target::Deployment(d) => d.url.clone(),
        }
    }

    /// The data nodes' URLs, and whether each is a primary.
    fn nodes(&self) -> Vec<(String, bool)> {
        match self {
            Target::Single(url) => vec![(url.to_string(), true)],
            Target::Deployment(d) => d
                .nodes
                .iter()
                .filter(|n| !matches!(n.role, crate::replicated::Role::Sentinel))
                .map(|n| {
                    (
                        format!("redis://127.0.0.1:{}", n.port),
                        matches!(n.role, crate::replicated::Role::Primary),
                    )
                })
                .collect(),
        }
    }
}

#[derive(Default)]
struct Counts {
    pairs: AtomicU64,
    names: AtomicU64,
    cancelled: AtomicU64,
    errors: AtomicU64,
}

pub async fn run(target: Target<'_>, name: &str, shape: Shape) -> Run {
    let nodes = observers(&target).await;
    let version = version(&nodes[0].0).await;
    let client = redisson_lock::RedissonClient::from_url(&target.url())
        .await
        .expect("connect");
    let work = Arc::new(Work {
        client: client.clone(),
        counts: Counts::default(),
        names: AtomicU64::new(0),
        epochs: (0..shape.groups).map(|_| AtomicU64::new(0)).collect(),
        stopped: std::sync::atomic::AtomicBool::new(false),
    });
    let mut workers = vec![];
    for _ in 0..shape.alone {
        let work = work.clone();
        workers.push(tokio::spawn(async move {
            while work.going() {
                let id = work.names.fetch_add(1, Ordering::Relaxed);
                work.counts.names.fetch_add(1, Ordering::Relaxed);
                let lock = work.client.lock(&format!("soak:order:{id}")).unwrap();
                work.counts.release(lock.lock().await).await;
            }
        }));
    }
    for group in 0..shape.groups {
        for _ in 0..GROUP {
            let work = work.clone();
            workers.push(tokio::spawn(async move {
                let mut done = 0u64;
                while work.going() {
                    let (epoch, lock) = work.shared(group);
                    work.counts.release(lock.lock().await).await;
                    done += 1;
                    // The group moves on after about PAIRS_PER_NAME pairs:
                    // each of its tasks moves it after its share.
                    if done.is_multiple_of(PAIRS_PER_NAME / GROUP as u64)
                        && work.epochs[group]
                            .compare_exchange(
                                epoch,
                                epoch + 1,
                                Ordering::Relaxed,
                                Ordering::Relaxed,
                            )
                            .is_ok()
                    {
                        work.counts.names.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in 0..shape.cancellers {
        let work = work.clone();
        workers.push(tokio::spawn(async move {
            let mut turn = task as u64;
            while work.going() && shape.groups > 0 {
                turn += 1;
                let (_, lock) = work.shared((turn as usize) % shape.groups);
                let patience = Duration::from_millis(1 + turn % 20);
                match tokio::time::timeout(patience, lock.lock()).await {
                    Ok(acquired) => work.counts.release(acquired).await,
                    Err(_) => {
                        work.counts.cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    let tasks = workers.len();
    let start = Instant::now();
    let mut samples = vec![];
    let mut minute = 0;
    while minute < shape.minutes
        || (samples
            .last()
            .is_some_and(|s: &Sample| s.pairs < shape.pairs)
            && minute < shape.most_minutes)
    {
        minute += 1;
        tokio::time::sleep_until((start + Duration::from_secs(60 * minute)).into()).await;
        let sample = sample(minute, &nodes, &work.counts).await;
        eprintln!("{name} {}", line(&sample));
        samples.push(sample);
    }
    work.stopped.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.await;
    }
    // The client's registry entry (`redisson_lock__client:<id>`) lives as
    // long as the client: what is left is read once it has shut down.
    let tasks_after_work = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    client.shutdown().await;
    let ended = Instant::now();
    let mut end = sample(minute, &nodes, &work.counts).await;
    let mut drained_s = None;
    while ended.elapsed() < Duration::from_secs(30) {
        if end.keys == 0 && end.channels == 0 {
            drained_s = Some(ended.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        end = sample(minute, &nodes, &work.counts).await;
    }
    end.tasks = tasks_after_work;
    let left = match end.keys {
        0 => vec![],
        _ => left_keys(&nodes).await,
    };
    for key in &left {
        eprintln!("{name} left: {key}");
    }
    eprintln!("{name} end {} (drained after {drained_s:?} s)", line(&end));
    let spread = spread(&samples);
    Run {
        deployment: name.to_string(),
        version,
        shape_minutes: minute,
        tasks,
        samples,
        end,
        drained_s,
        left,
        spread,
    }
}

/// What every task of the soak shares.
struct Work {
    client: redisson_lock::RedissonClient,
    counts: Counts,
    /// The next uncontended name, as a number.
    names: AtomicU64,
    /// Each group's current name, as a number.
    epochs: Vec<AtomicU64>,
    stopped: std::sync::atomic::AtomicBool,
}

impl Work {
    fn going(&self) -> bool {
        !self.stopped.load(Ordering::Relaxed)
    }

    /// The current name of `group`, as its epoch and a lock.
    fn shared(&self, group: usize) -> (u64, redisson_lock::RLock) {
        let epoch = self.epochs[group].load(Ordering::Relaxed);
        let lock = self
            .client
            .lock(&format!("soak:shared:{group}:{epoch}"))
            .unwrap();
        (epoch, lock)
    }
}

impl Counts {
    /// Unlocks what `acquired` holds; counts the pair, or the error.
    async fn release(&self, acquired: redisson_lock::Result<redisson_lock::LockGuard>) {
        match acquired {
            Ok(guard) => match guard.unlock().await {
                Ok(_) => {
                    self.pairs.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => self.error("unlock", &e),
            },
            Err(e) => self.error("lock", &e),
        }
    }

    fn error(&self, what: &str, e: &redisson_lock::Error) {
        // The first few are shown; all are counted.
        if self.errors.fetch_add(1, Ordering::Relaxed) < 5 {
            eprintln!("soak: {what} failed: {e}");
        }
    }
}

/// A plain connection to each data node, and whether it is a primary.
async fn observers(target: &Target<'_>) -> Vec<(String, bool, Client)> {
    let mut out = vec![];
    for (url, primary) in target.nodes() {
        let client = Builder::from_config(Config::from_url(&url).unwrap())
            .build()
            .unwrap();
        client.init().await.unwrap();
        out.push((url, primary, client));
    }
    out
}

async fn version(url: &str) -> String {
    let client = Builder::from_config(Config::from_url(url).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    let info: String = client.info(Some(InfoKind::Server)).await.unwrap();
    let _ = client.quit().await;
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

async fn command(node: &Client, name: &'static str, args: Vec<Value>) -> Value {
    node.custom(
        CustomCommand::new_static(name, ClusterHash::Random, false),
        args,
    )
    .await
    .unwrap_or(Value::Null)
}

async fn sample(minute: u64, nodes: &[(String, bool, Client)], counts: &Counts) -> Sample {
    let mut s = Sample {
        minute,
        pairs: counts.pairs.load(Ordering::Relaxed),
        names: counts.names.load(Ordering::Relaxed),
        cancelled: counts.cancelled.load(Ordering::Relaxed),
        errors: counts.errors.load(Ordering::Relaxed),
        rss_kb: rss_kb(),
        tasks: tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
        ..Sample::default()
    };
    for (_, primary, node) in nodes {
        let info: String = node.info(Some(InfoKind::Clients)).await.unwrap_or_default();
        s.connections += info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        for (list, count) in [("CHANNELS", "NUMSUB"), ("SHARDCHANNELS", "SHARDNUMSUB")] {
            let Value::Array(channels) = command(node, "PUBSUB", vec![list.into()]).await else {
                continue;
            };
            s.channels += channels.len() as u64;
            for chunk in channels.chunks(100) {
                let mut args: Vec<Value> = vec![count.into()];
                args.extend(chunk.iter().cloned());
                if let Value::Array(pairs) = command(node, "PUBSUB", args).await {
                    s.subscribers += pairs
                        .chunks(2)
                        .filter_map(|p| p.get(1).and_then(|v| v.as_u64()))
                        .sum::<u64>();
                }
            }
        }
        if *primary {
            s.keys += command(node, "DBSIZE", vec![]).await.as_u64().unwrap_or(0);
        }
    }
    s
}

/// What the keys left on the primaries are: name, type, PTTL, content.
async fn left_keys(nodes: &[(String, bool, Client)]) -> Vec<String> {
    let mut out = vec![];
    for (url, _, node) in nodes.iter().filter(|(_, primary, _)| *primary) {
        let scanned = command(
            node,
            "SCAN",
            vec!["0".into(), "COUNT".into(), "1000".into()],
        )
        .await;
        let Value::Array(reply) = scanned else {
            continue;
        };
        let Some(Value::Array(keys)) = reply.get(1) else {
            continue;
        };
        for key in keys.iter().take(20) {
            let kind = command(node, "TYPE", vec![key.clone()]).await;
            let pttl = command(node, "PTTL", vec![key.clone()]).await;
            let content = match kind.as_str().as_deref() {
                Some("hash") => command(node, "HGETALL", vec![key.clone()]).await,
                Some("string") => command(node, "GET", vec![key.clone()]).await,
                Some("zset") => {
                    command(
                        node,
                        "ZRANGE",
                        vec![key.clone(), 0.into(), (-1).into(), "WITHSCORES".into()],
                    )
                    .await
                }
                Some("list") => {
                    command(node, "LRANGE", vec![key.clone(), 0.into(), (-1).into()]).await
                }
                _ => Value::Null,
            };
            out.push(format!(
                "{url} {:?} {:?} pttl {:?} {:?}",
                key.as_str(),
                kind.as_str(),
                pttl.as_i64(),
                content
            ));
        }
    }
    out
}

/// The process's resident set, in KiB.
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

fn line(s: &Sample) -> String {
    format!(
        "minute {:>2}: {:>10} pairs, {:>9} names, {:>7} cancelled, {} errors; rss {} MiB, {} tasks; \
         servers: {} connections, {} channels ({} subscribers), {} keys",
        s.minute,
        s.pairs,
        s.names,
        s.cancelled,
        s.errors,
        s.rss_kb / 1024,
        s.tasks,
        s.connections,
        s.channels,
        s.subscribers,
        s.keys
    )
}

/// For RSS, tasks and connections: (max - min) after the first minute, over
/// the first minute's value. Channels and keys count work in flight at the
/// instant of the sample, so their maximum is reported instead (against the
/// number of tasks, which bounds what can be in flight).
fn spread(samples: &[Sample]) -> Vec<(String, f64)> {
    let Some(first) = samples.first() else {
        return vec![];
    };
    let rel = |get: fn(&Sample) -> f64| {
        let values: Vec<f64> = samples.iter().map(get).collect();
        let max = values.iter().cloned().fold(f64::MIN, f64::max);
        let min = values.iter().cloned().fold(f64::MAX, f64::min);
        (max - min) / get(first).max(1.0)
    };
    let max = |get: fn(&Sample) -> f64| samples.iter().map(get).fold(0.0, f64::max);
    vec![
        ("rss".into(), rel(|s| s.rss_kb as f64)),
        ("tasks".into(), rel(|s| s.tasks as f64)),
        ("connections".into(), rel(|s| s.connections as f64)),
        ("channels (max)".into(), max(|s| s.channels as f64)),
        ("subscribers (max)".into(), max(|s| s.subscribers as f64)),
        ("keys (max)".into(), max(|s| s.keys as f64)),
    ]
}

pub fn table(runs: &[Run]) -> String {
    let mut out = String::new();
    for run in runs {
        out.push_str(&format!(
            "\n{} (Redis {}), {} tasks, {} minutes\n",
            run.deployment, run.version, run.tasks, run.shape_minutes
        ));
        for s in &run.samples {
            out.push_str(&line(s));
            out.push('\n');
        }
        out.push_str(&format!(
            "end: {} keys, {} channels, {} errors; drained after {:?} s\n",
            run.end.keys, run.end.channels, run.end.errors, run.drained_s
        ));
        for (what, value) in &run.spread {
            out.push_str(&format!("  {what}: {value:.3}\n"));
        }
    }
    out
}
