//! The watchdog: keeps watchdog locks alive, never renews explicit leases,
//! renews in batches.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use redisson_lock::Error;
use tokio::time::Instant;

#[tokio::test]
async fn a_watchdog_lock_outlives_five_watchdog_timeouts() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let watchdog = Duration::from_secs(1);
    let client = client(&server, watchdog).await;
    let lock = client.lock("long-job").unwrap();
    let guard = lock.lock().await.unwrap();
    let started = Instant::now();
    let mut updates = client.watchdog_updates();
    // One renewal every third of the timeout: 16 cycles span more than 5 timeouts.
    within("16 watchdog cycles", updates.wait_for(|s| s.cycles >= 16))
        .await
        .unwrap();
    assert!(started.elapsed() > watchdog * 5);
    assert!(lock.is_held_by(guard.owner()).await.unwrap());
    let pttl: i64 = raw.pttl("long-job").await.unwrap();
    assert!(pttl > 0 && pttl <= 1_000, "pttl {pttl}");
    assert!(!guard.is_lost());
    assert!(client.watchdog_stats().renewed >= 15);
    guard.unlock().await.unwrap();
    // Renewal stops with the last local hold.
    assert_eq!(client.held_locks(), 0);
}

#[tokio::test]
async fn an_explicit_lease_expires_on_time_and_is_never_renewed() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Ex"]).await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(1)).await;
    let mut expired = Observer::new(&server, &["__keyevent@0__:expired"], &[]).await;
    let lock = client.lock("leased").unwrap();
    let lease = Duration::from_millis(1500);
    let acquired_at = Instant::now();
    let guard = lock.acquire().lease(lease).await.unwrap();
    let scripts_after_acquire =
        command_calls(&raw, "evalsha").await + command_calls(&raw, "eval").await;
    let lost = guard.lost_signal();
    // The holder is told no later than the key can expire...
    within("lost signal", lost.lost()).await;
    // (Not earlier than the lease less its 1% + 2 ms drift margin.)
    assert!(acquired_at.elapsed() >= lease * 98 / 100 - Duration::from_millis(5));
    // ... and Redis expires it (expiry is checked lazily: touch the key).
    let _: i64 = raw.exists("leased").await.unwrap();
    assert_eq!(
        expired.next().await,
        ("__keyevent@0__:expired".into(), "leased".into())
    );
    // Several watchdog cycles ran meanwhile and sent no script for it.
    let stats = client.watchdog_stats();
    assert!(stats.cycles >= 3, "{stats:?}");
    assert_eq!(stats.scripts, 0);
    let scripts_now = command_calls(&raw, "evalsha").await + command_calls(&raw, "eval").await;
    assert_eq!(scripts_now, scripts_after_acquire);
    assert!(matches!(guard.unlock().await, Err(Error::LockLost { .. })));
}

#[tokio::test]
async fn two_hundred_fifty_locks_are_renewed_by_three_scripts_per_cycle() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(1)).await;
    let mut guards = vec![];
    for i in 0..250 {
        guards.push(
            client
                .lock(&format!("batch:{i}"))
                .unwrap()
                .lock()
                .await
                .unwrap(),
        );
    }
    let mut updates = client.watchdog_updates();
    // Read the counters right after a cycle ends; the next starts a third of a second later.
    within("a cycle", updates.changed()).await.unwrap();
    let before = command_calls(&raw, "evalsha").await + command_calls(&raw, "eval").await;
    let cycles = updates.borrow_and_update().cycles;
    within(
        "two more cycles",
        updates.wait_for(|s| s.cycles >= cycles + 2),
    )
    .await
    .unwrap();
    let after = command_calls(&raw, "evalsha").await + command_calls(&raw, "eval").await;
    let stats = client.watchdog_stats();
    assert_eq!(stats.last_cycle_scripts, 3);
    assert_eq!(stats.last_cycle_locks, 250);
    assert_eq!(
        after - before,
        6,
        "two cycles of 3 scripts each (batch size 100)"
    );
    for guard in guards {
        assert!(!guard.is_lost());
        guard.unlock().await.unwrap();
    }
}

/// Redisson can renew a lock after its unlock returned (redisson#7272). Here
/// a renewal and a release of the same hold never overlap, so on the server
/// (MONITOR's order) no command of a released hold follows its unlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_renewal_of_a_hold_follows_its_release() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let server = RedisServer::start().await;
    let mut monitor = tokio::process::Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "monitor"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-cli (redis-tools) for MONITOR");
    let mut lines = BufReader::new(monitor.stdout.take().unwrap()).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("OK"));
    // A renewal every 30 ms, so releases keep landing on renewal cycles.
    let client = client(&server, Duration::from_millis(90)).await;
    let tasks: Vec<_> = (0..24)
        .map(|task| {
            let lock = client.lock(&format!("churn-{task}")).unwrap();
            tokio::spawn(async move {
                let mut fields = vec![];
                for round in 0..40u64 {
                    let guard = lock.lock().await.unwrap();
                    fields.push(guard.field());
                    tokio::time::sleep(Duration::from_millis((round * 7 + task) % 45)).await;
                    // A lease lost on a busy machine is still released.
                    let _ = guard.unlock().await;
                }
                fields
            })
        })
        .collect();
    let mut fields = vec![];
    for task in tasks {
        fields.extend(task.await.unwrap());
    }
    let renewals = client.watchdog_stats().renewed;
    let raw = server.raw().await;
    let _: String = raw.echo("monitor-end").await.unwrap();
    let mut seen = vec![];
    within("MONITOR up to the end marker", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("monitor-end") {
                break;
            }
            // What clients sent, not what their scripts ran.
            if !line.contains(" lua] ") {
                seen.push(line);
            }
        }
    })
    .await;
    assert!(renewals > 100, "only {renewals} renewals: nothing raced");
    let mut late = vec![];
    for field in &fields {
        let quoted = format!("\"{field}\"");
        let unlocked = seen
            .iter()
            .rposition(|l| l.contains(&quoted) && l.contains("redisson_unlock_latch"))
            .unwrap_or_else(|| panic!("no unlock of {field}"));
        late.extend(seen[unlocked + 1..].iter().filter(|l| l.contains(&quoted)));
    }
    assert!(late.is_empty(), "commands after the unlock: {late:#?}");
    client.shutdown().await;
}
