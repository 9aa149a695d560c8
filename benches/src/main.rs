//! Benchmarks, side by side on one redis-server in one run (issue 6):
//!
//! 1. uncontended lock + unlock throughput and p50/p99 at concurrency 1, 16, 256
//!    for the floor (the same scripts as raw back-to-back EVALSHAs through
//!    fred), redisson-lock, JVM Redisson 4.7.0 and rslock;
//! 4. the watchdog at 10k and 100k held locks: scripts per cycle, cycle time,
//!    Redis CPU per cycle, client memory per held lock.
//!
//! `cargo run --release -p redisson-lock-bench -- [--quick] [--out results.json]`
//! starts its own redis-server on a free port; `REDIS_URL` uses another.
//! `... -- watchdog 10000 100000` runs item 4 alone, `... -- throughput-only`
//! item 1 alone, and `... -- profile <lock|fair|wire|floor|rslock|crate> <concurrency> <seconds>`
//! Rust implementations alone (a comma-separated list: one after the other),
//! for `perf record` or heaptrack;
//! `... -- handoff <kind> <waiters> <processes> [--monitor]` one hand-off run,
//! under `MONITOR` each hand-off split where its time went (`monitor.rs`;
//! `benches/handoff-sched.sh` lines them up with `perf sched` instead);
//! `... -- ls [N] [--out FILE]` times `scan_objects` (the CLI's `ls`) over N
//! locks and N/10 other keys (default 100 000), per SCAN COUNT;
//! `... -- giveups [QUEUED] [WAITERS]` has WAITERS fair-lock waiters (256)
//! behind QUEUED others (5000) give up at once while one connection PINGs:
//! how long Redis left the PINGs unanswered (`giveups.rs`);
//! `... -- discovery [--quick] [--clients N] [--tasks N] [--seconds S] [--lagging-seconds S] [--idle-seconds S] [--out FILE]`
//! counts the commands clients send to learn their deployment, per client per
//! second, on a 3+3 cluster and on Sentinel, redisson-lock and Redisson side
//! by side (`discovery.rs`; issue 29, item 5);
//! `... -- soak [single|cluster|both] [--minutes M] [--pairs P] [--most-minutes X] [--alone N] [--groups N] [--cancellers N] [--out FILE]`
//! runs millions of distinct lock names for M minutes (10), and on until P
//! lock + unlock pairs (none) but no longer than X minutes (60), and samples
//! every minute what could grow (`soak.rs`; issue 38).

mod alloc;
mod cluster;
mod commandstats;
mod counting_proxy;
mod discovery;
mod giveups;
mod handoff;
mod ls;
mod monitor;
mod replicated;
mod server;
mod soak;
mod throughput;
mod watchdog;

use std::time::Duration;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

#[derive(serde::Serialize, Default)]
pub struct Results {
    pub redis_version: String,
    pub duration_ms: u64,
    /// Runs per cell; the table keeps each cell's median run.
    pub repetitions: usize,
    pub throughput: Vec<throughput::Row>,
    pub handoff: Vec<handoff::Row>,
    pub watchdog: Vec<watchdog::Row>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if args.get(1).map(String::as_str) == Some("handoff-worker") {
        // `HANDOFF_RUNTIME=current`: waiters on a one-thread runtime.
        if std::env::var("HANDOFF_RUNTIME").as_deref() == Ok("current") {
            runtime = tokio::runtime::Builder::new_current_thread();
        }
        let runtime = runtime.enable_all().build().unwrap();
        runtime.block_on(handoff::worker(&args[2..]));
        return;
    }
    runtime
        .enable_all()
        .build()
        .unwrap()
        .block_on(harness(args));
}

/// The value after `flag`, parsed.
fn flag<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{flag}: cannot read {v:?}"))
        })
}

async fn harness(args: Vec<String>) {
    let quick = args.iter().any(|a| a == "--quick");
    if args.get(1).map(String::as_str) == Some("discovery") {
        let shape = discovery::Shape {
            clients: flag(&args, "--clients").unwrap_or(if quick { 10 } else { 100 }),
            tasks: flag(&args, "--tasks").unwrap_or(16),
            locks: 64,
            hold_ms: 1,
            warmup_s: if quick { 2 } else { 5 },
            contended_s: flag(&args, "--seconds").unwrap_or(if quick { 5 } else { 40 }),
            lagging_s: flag(&args, "--lagging-seconds").unwrap_or(if quick { 5 } else { 40 }),
            idle_s: flag(&args, "--idle-seconds").unwrap_or(if quick { 5 } else { 30 }),
            quiet_s: if quick { 3 } else { 20 },
        };
        let out: String =
            flag(&args, "--out").unwrap_or_else(|| "target/bench-discovery.json".into());
        let results = discovery::run(shape).await;
        std::fs::write(&out, serde_json::to_string_pretty(&results).unwrap()).unwrap();
        eprintln!("wrote {out}");
        println!("{}", discovery::table(&results));
        return;
    }
    if args.get(1).map(String::as_str) == Some("soak") {
        let shape = soak::Shape {
            minutes: flag(&args, "--minutes").unwrap_or(if quick { 1 } else { 10 }),
            pairs: flag(&args, "--pairs").unwrap_or(0),
            most_minutes: flag(&args, "--most-minutes").unwrap_or(60),
            alone: flag(&args, "--alone").unwrap_or(16),
            groups: flag(&args, "--groups").unwrap_or(4),
            cancellers: flag(&args, "--cancellers").unwrap_or(8),
        };
        let which = args
            .get(2)
            .filter(|a| !a.starts_with("--"))
            .map(String::as_str)
            .unwrap_or("both");
        let mut runs = vec![];
        if which == "single" || which == "both" {
            let server = server::Server::start().await;
            runs.push(soak::run(soak::Target::Single(&server.url), "single server", shape).await);
        }
        if which == "cluster" || which == "both" {
            let cluster = replicated::Deployment::cluster().await;
            let target = soak::Target::Deployment(&cluster);
            runs.push(soak::run(target, "cluster, 3 primaries + 3 replicas", shape).await);
        }
        let out: String = flag(&args, "--out").unwrap_or_else(|| "target/bench-soak.json".into());
        std::fs::write(&out, serde_json::to_string_pretty(&runs).unwrap()).unwrap();
        eprintln!("wrote {out}");
        println!("{}", soak::table(&runs));
        return;
    }
    if args.get(1).map(String::as_str) == Some("cluster") {
        // Item 5: `cluster [--quick] [--out FILE]`.
        let out = args
            .iter()
            .position(|a| a == "--out")
            .and_then(|i| args.get(i + 1).cloned())
            .unwrap_or_else(|| "target/bench-cluster.json".into());
        let (duration, reps) = if quick {
            (Duration::from_millis(500), 1)
        } else {
            (Duration::from_secs(3), 3)
        };
        let primaries: Vec<usize> = std::env::var("BENCH_PRIMARIES")
            .ok()
            .map(|v| v.split(',').map(|n| n.parse().unwrap()).collect())
            .unwrap_or_else(|| vec![1, 2, 3]);
        let rows = cluster::run(&primaries, 64, duration, reps).await;
        std::fs::write(&out, serde_json::to_string_pretty(&rows).unwrap()).unwrap();
        eprintln!("wrote {out}");
        println!("{}", cluster::table(&rows));
        return;
    }
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "target/bench-results.json".into());
    let duration = if quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(3)
    };
    let concurrency: &[usize] = if quick { &[1, 16] } else { &[1, 16, 256] };
    let scales: &[usize] = if quick { &[1_000] } else { &[10_000, 100_000] };

    let server = server::Server::start().await;
    if args.get(1).map(String::as_str) == Some("profile") {
        // One implementation alone, for a profiler:
        // `profile <lock|fair|wire|floor|rslock|crate> <concurrency> <seconds>`;
        // a comma-separated list runs one after the other in this process.
        let c = args.get(3).and_then(|c| c.parse().ok()).unwrap_or(256);
        let secs = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(5);
        let list = args.get(2).map_or("lock", String::as_str);
        for name in list.split(',') {
            let imp = match name {
                "floor" => throughput::Impl::Floor,
                "wire" => throughput::Impl::WireFloor,
                "rslock" => throughput::Impl::Rslock,
                "crate" => throughput::Impl::RedissonCrate,
                "lock" => throughput::Impl::RedissonLock,
                "fair" => throughput::Impl::RedissonFairLock,
                other => panic!(
                    "unknown implementation {other:?}: lock, fair, wire, floor, rslock or crate"
                ),
            };
            server.flush().await;
            let row = throughput::run_one(imp, &server, c, Duration::from_secs(secs)).await;
            println!("{row}");
        }
        return;
    }
    if args.get(1).map(String::as_str) == Some("handoff") {
        // One hand-off run, under MONITOR with `--monitor` (each hand-off
        // split in three): `handoff <redisson-lock|jvm|...> <waiters> <processes>`.
        let kind = handoff::Kind::from_arg(args.get(2).map_or("redisson-lock", String::as_str))
            .expect("a hand-off kind");
        let waiters = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(100);
        let processes = args.get(4).and_then(|n| n.parse().ok()).unwrap_or(1);
        let mut monitor = monitor::Monitor::default();
        let watch = args.iter().any(|a| a == "--monitor");
        let row = handoff::run_watched(
            &server,
            kind,
            waiters,
            processes,
            Duration::from_secs(4),
            watch.then_some(&mut monitor),
        )
        .await;
        println!("{row}");
        if watch {
            println!("{}", monitor.report());
        }
        return;
    }
    if args.get(1).map(String::as_str) == Some("ls") {
        // `ls [N] [--out FILE]`: scan_objects over N locks and N/10 other keys.
        let objects: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(100_000);
        let keys = ls::fill(&server, objects).await;
        let mut rows = vec![];
        for count in [100, 1000, 10_000] {
            let row = ls::run(&server, objects, keys, count, if quick { 1 } else { 3 }).await;
            eprintln!("{row}");
            rows.push(row);
        }
        let out = args
            .iter()
            .position(|a| a == "--out")
            .and_then(|i| args.get(i + 1).cloned())
            .unwrap_or_else(|| "target/bench-ls.json".into());
        std::fs::write(&out, serde_json::to_string_pretty(&rows).unwrap()).unwrap();
        eprintln!("wrote {out}");
        println!("{}", ls::table(&rows));
        return;
    }
    if args.get(1).map(String::as_str) == Some("giveups") {
        // `giveups [QUEUED] [WAITERS]`: fair-lock give-ups at once, and a PING.
        let queued = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(5000);
        let waiters = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(256);
        println!("{}", giveups::run(&server, queued, waiters).await);
        return;
    }
    if args.get(1).map(String::as_str) == Some("watchdog") {
        // Item 4 alone: `watchdog N...` held locks.
        for n in args[2..].iter().filter_map(|n| n.parse().ok()) {
            println!("{}", watchdog::run(&server, n).await);
        }
        return;
    }
    let mut results = Results {
        redis_version: server.version().await,
        duration_ms: duration.as_millis() as u64,
        ..Results::default()
    };
    eprintln!("redis {} at {}", results.redis_version, server.url);

    let reps = if quick { 1 } else { 3 };
    results.repetitions = reps;
    let mut jvm = throughput::Jvm::start(&server).await;
    for &c in concurrency {
        results
            .throughput
            .extend(throughput::run_all(&server, &mut jvm, c, duration, reps).await);
    }
    drop(jvm);
    if args.get(1).map(String::as_str) == Some("throughput-only") {
        // Item 1 alone (benches/fred-flush-experiment.sh).
        std::fs::write(&out, serde_json::to_string_pretty(&results).unwrap()).unwrap();
        println!("{}", throughput::table(&results.throughput));
        return;
    }
    let waiters: &[usize] = if quick {
        &[1, 100]
    } else {
        &[1, 10, 100, 1000]
    };
    let budget = if quick {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(4)
    };
    for kind in handoff::Kind::ALL {
        for &processes in &[1, 4] {
            for &n in waiters {
                if processes > n {
                    continue;
                }
                let row = handoff::run(&server, kind, n, processes, budget).await;
                eprintln!("{row}");
                results.handoff.push(row);
            }
        }
    }
    // The fair lock hands off to one waiter at a time, in line: up to 100
    // waiters in one process.
    for kind in handoff::Kind::FAIR {
        for &n in waiters.iter().filter(|&&n| n <= 100) {
            let row = handoff::run(&server, kind, n, 1, budget).await;
            eprintln!("{row}");
            results.handoff.push(row);
        }
    }
    for &n in scales {
        let row = watchdog::run(&server, n).await;
        eprintln!("{row}");
        results.watchdog.push(row);
    }
    std::fs::write(&out, serde_json::to_string_pretty(&results).unwrap()).unwrap();
    eprintln!("wrote {out}");
    println!("{}", throughput::table(&results.throughput));
    println!("{}", handoff::table(&results.handoff));
    println!("{}", watchdog::table(&results.watchdog));
}
