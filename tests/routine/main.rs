//! Routine operations, measured: what a lock holder and a client trying to
//! lock see while an operator restarts replicas or sentinels, a sentinel
//! hangs or loses the primary, a replica dies, sleeps or copies a large
//! data set, a managed service pauses writes, or a cluster replica loses
//! the bus. Nothing here should fail over, so nothing should be lost.
//!
//! Each operation runs under the same load (`load`): holders that keep
//! their locks for the whole operation, contenders whose critical sections
//! go through the resource server of tests/failover (which finds every
//! overlap), a challenger of the held locks, and a no-wait probe per client
//! every 250 ms: the crate (`try_lock`), on Sentinel also with
//! `ReplicaQuorum::All`, and a JVM running Redisson 4.7.0 (`tryLock(0)`),
//! in the same run. Per operation and client (`judge`): refused
//! acquisitions and the longest refusal, no-wait try latency, at-risk and
//! lost signals (each lost one true or false), silent overlaps.
//!
//! `cargo test --test routine` runs the bounded form CI runs: every
//! operation once at short timings on small data. It fails on a silent
//! overlap after a Rust holder, on a false lost signal of the crate's
//! default quorum, and on any refused Rust acquisition while only a
//! sentinel minority is touched. The full run (`bash scripts/safety.sh
//! --routine`) does the same at full durations and data, then again at
//! production defaults, and writes `target/safety/routine.json`, from which
//! docs/safety.md's routine-operations table is made.

use redisson_lock_testkit as common;
mod deployment;
mod judge;
mod load;
mod observe;
mod operations;
#[path = "../failover/resource.rs"]
mod resource;
/// The failover suite's section record, which `resource` reads the JVM
/// contenders' sections into.
#[allow(dead_code)]
#[path = "../failover/workload.rs"]
mod workload;

use std::sync::Arc;
use std::time::Duration;

use deployment::{Deployment, Kind, Timings};
use judge::{Row, Run};
use load::{Load, CRATE, CRATE_ALL};
use operations::Operation;
use resource::{now_us, Resource};

/// Every lock of the suite shares one hash tag: on a cluster they all live
/// on the shard whose replica the operations touch.
pub const TAG: &str = "{routine}";

/// Runs every operation of `kind` at `timings`, one after the other, under
/// one load; one row per operation.
async fn run(kind: Kind, timings: &Timings) -> Vec<Row> {
    let mut deployment = Deployment::start(kind, timings).await;
    let resource = Arc::new(Resource::start().await);
    let load = Load::start(&deployment, timings.watchdog, resource).await;
    load.recovered(Duration::from_secs(60)).await;
    let (operations, shapes): (&[Operation], &[Operation]) = match kind {
        Kind::Sentinel => (&Operation::SENTINEL, &Operation::SENTINEL_SHAPES),
        Kind::Cluster => (&Operation::CLUSTER, &Operation::CLUSTER_SHAPES),
    };
    let shapes = if timings.shapes { shapes } else { &[] };
    let mut runs: Vec<Run> = vec![];
    for (index, &operation) in operations.iter().chain(shapes).enumerate() {
        let from_us = now_us();
        if let Some(previous) = runs.last_mut() {
            previous.to_us = from_us;
        }
        let before = deployment.marker().await;
        Box::pin(operation.prepare(&deployment, timings)).await;
        let held = load.hold(index).await;
        let started_us = now_us();
        // Boxed: each operation's future is large, and a debug build's
        // would overflow the test thread's stack inline.
        let events = Box::pin(operation.run(&mut deployment, timings)).await;
        let healed_us = now_us();
        load.recovered(Duration::from_secs(60)).await;
        let ended_us = now_us();
        let holders = load.release(held, deployment.primary().await).await;
        let failed_over = deployment.marker().await != before;
        operation.clean_up(&deployment).await;
        runs.push(Run {
            operation,
            label: operation.label(timings),
            from_us,
            to_us: i64::MAX,
            started_us,
            healed_us,
            ended_us,
            events,
            failed_over,
            holders,
        });
    }
    if let Some(last) = runs.last_mut() {
        last.to_us = now_us();
    }
    let clients = load.clients.clone();
    let log = load.stop().await;
    for (what, n) in log.errors.lock().iter() {
        println!("errors: {what}: {n}");
    }
    let secs = |d: Duration| format!("{} s", d.as_secs_f64());
    let detection = match kind {
        Kind::Sentinel => format!("down-after {}", secs(timings.down_after)),
        Kind::Cluster => format!("cluster-node-timeout {}", secs(timings.node_timeout)),
    };
    let context = judge::Context {
        deployment: deployment.name(),
        timings: timings.name,
        settings: format!("{detection}, watchdog {}", secs(timings.watchdog)),
        clients: &clients,
    };
    judge::rows(&context, &runs, &log)
}

/// The bounded form: every operation once at short timings on small data,
/// on Sentinel and on a cluster. Its rows are written to
/// `target/safety/routine-bounded.json` (`scripts/routine_report.py` makes
/// a table of them); every row is checked, and the test fails with every
/// violation found, not only the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routine_operations_lose_nothing_and_refuse_little() {
    let timings = Timings::bounded();
    let mut rows = run(Kind::Sentinel, &timings).await;
    rows.extend(run(Kind::Cluster, &timings).await);
    let violations: Vec<String> = rows.iter().flat_map(violations).collect();
    // First, so that a log cut to its head and tail still shows them.
    for v in &violations {
        println!("violation: {v}");
    }
    judge::print(&rows);
    write_rows("routine-bounded.json", &rows);
    assert!(
        violations.is_empty(),
        "{} violation(s):\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// What the bounded form does not allow in `row`. A failover (none is
/// expected, but a loaded machine may take a 1 s down-after for a dead
/// primary) makes every lost signal true; it is reported, and an overlap
/// is still an overlap.
fn violations(row: &Row) -> Vec<String> {
    let mut found = vec![];
    let at = format!("{} {}", row.deployment, row.label);
    if row.sections == 0 {
        found.push(format!("{at}: no critical section ran"));
    }
    for c in &row.clients {
        if c.tries == 0 {
            found.push(format!("{at}: {} never probed", c.client));
        }
        if (c.client == CRATE || c.client == CRATE_ALL) && c.silent_overlaps > 0 {
            found.push(format!(
                "{at}: {} silent overlaps: {:#?}",
                c.client, c.silent
            ));
        }
        if c.client == CRATE && c.lost_false != Some(0) {
            found.push(format!(
                "{at}: {} false lost signals: {:#?}",
                c.client, c.false_lost
            ));
        }
        if row.operation.sentinel_minority() && c.client != load::REDISSON && c.refused > 0 {
            found.push(format!(
                "{at}: {} refused {} while only a sentinel minority was touched: {:?}",
                c.client, c.refused, c.refusals
            ));
        }
    }
    found
}

/// Writes `rows` to `target/safety/<file>`.
fn write_rows(file: &str, rows: &[Row]) {
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/safety");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join(file), serde_json::to_string_pretty(rows).unwrap()).unwrap();
}

/// The full run (`bash scripts/safety.sh --routine`): every operation at
/// full durations and data, at short timings and at production defaults;
/// results in `target/safety/routine.json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the full routine-operations run: bash scripts/safety.sh --routine"]
async fn full_routine_run() {
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/safety");
    std::fs::create_dir_all(&out).unwrap();
    let mut rows = vec![];
    for timings in [Timings::short(), Timings::production()] {
        for kind in [Kind::Sentinel, Kind::Cluster] {
            rows.extend(run(kind, &timings).await);
            judge::print(&rows);
            // Written as it goes: a run stopped later keeps what it measured.
            std::fs::write(
                out.join("routine.partial.json"),
                serde_json::to_string_pretty(&rows).unwrap(),
            )
            .unwrap();
        }
    }
    std::fs::rename(out.join("routine.partial.json"), out.join("routine.json")).unwrap();
}
