//! Live interop with the real JVM Redisson jar, at each pinned version: the
//! same lock, held and released from both sides.

use redisson_lock_testkit as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::java::{java_is_waiting, scripts_run, versions, JavaPeer};
use common::*;
use fred::prelude::*;
use redisson_lock::{Holder, Ttl};

const LONG_LEASE_MS: u64 = 120_000;

#[tokio::test]
async fn java_unlock_wakes_a_rust_waiter_and_rust_unlock_wakes_a_java_waiter() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let lock = rust.lock("shared").unwrap();

        // Java holds with a long lease: only its unlock message can wake Rust in time.
        java.ok(&format!("lock shared 1 {LONG_LEASE_MS}")).await;
        assert!(lock.try_lock().await.unwrap().is_none(), "{version}");
        let l = lock.clone();
        let waiter = tokio::spawn(async move { l.lock().await });
        await_subscribers(&server, "redisson_lock__channel:{shared}", 1).await;
        java.ok("unlock shared 1").await;
        let guard = within("Rust woken by Java's unlock", waiter)
            .await
            .unwrap()
            .unwrap();

        // Rust holds with a long lease; Java waits and is woken by Rust's unlock.
        guard.unlock().await.unwrap();
        let held = lock
            .acquire()
            .lease(Duration::from_millis(LONG_LEASE_MS))
            .await
            .unwrap();
        // Wait until the Rust waiter's subscription is gone, so the count
        // below is Java's.
        await_subscribers(&server, "redisson_lock__channel:{shared}", 0).await;
        let raw = server.raw().await;
        let before = scripts_run(&raw).await;
        let java_waits = java.send("lock shared 2 -1").await;
        java_is_waiting(
            &java,
            &server,
            &raw,
            "redisson_lock__channel:{shared}",
            before,
        )
        .await;
        held.unlock().await.unwrap();
        within(
            &format!("Redisson {version} woken by Rust's unlock"),
            java_waits,
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(
            java.ok("isHeldByThread shared 2").await,
            "true",
            "{version}"
        );
        java.ok("unlock shared 2").await;
        java.quit().await;
    }
}

#[tokio::test]
async fn each_side_reads_the_others_holds() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let lock = rust.lock("seen").unwrap();

        let outer = lock.lock().await.unwrap();
        let inner = outer.scope(lock.lock()).await.unwrap();
        assert_eq!(java.ok("isLocked seen").await, "true");
        assert_eq!(java.ok("isHeldByThread seen 1").await, "false");
        assert_eq!(java.ok("holdCount seen 1").await, "0");
        let ttl: i64 = java.ok("remainTimeToLive seen").await.parse().unwrap();
        assert!((25_000..=30_000).contains(&ttl), "{version}: {ttl}");
        inner.unlock().await.unwrap();
        outer.unlock().await.unwrap();
        assert_eq!(java.ok("isLocked seen").await, "false");
        assert_eq!(java.ok("remainTimeToLive seen").await, "-2");

        java.ok("lock seen 5 -1").await;
        java.ok("lock seen 5 -1").await;
        assert!(lock.is_locked().await.unwrap());
        assert!(!lock.is_held().await.unwrap());
        let holders: Vec<(String, String, u32)> = lock
            .holders()
            .await
            .unwrap()
            .into_iter()
            .map(|h: Holder| (h.client_id, h.owner, h.hold_count))
            .collect();
        assert_eq!(
            holders,
            vec![(java.client_id.clone(), "5".to_string(), 2)],
            "{version}"
        );
        assert!(
            matches!(lock.remaining_ttl().await.unwrap(), Ttl::Expires(t) if t > Duration::from_secs(25))
        );
        assert_eq!(java.ok("holdCount seen 5").await, "2");
        java.ok("unlock seen 5").await;
        java.ok("unlock seen 5").await;
        assert!(!lock.is_locked().await.unwrap());
        java.quit().await;
    }
}

#[tokio::test]
async fn java_acquires_only_after_rusts_third_unlock() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let lock = rust.lock("reentrant").unwrap();
        let first = lock.lock().await.unwrap();
        let (second, third) = first
            .scope(async { (lock.lock().await.unwrap(), lock.lock().await.unwrap()) })
            .await;
        assert_eq!(first.hold_count().await.unwrap(), 3);
        let guards = vec![third, second, first];
        assert_eq!(java.ok("tryLock reentrant 1 0 -1").await, "false");
        let raw = server.raw().await;
        let before = scripts_run(&raw).await;
        let mut java_lock = java.send("lock reentrant 1 -1").await;
        java_is_waiting(
            &java,
            &server,
            &raw,
            "redisson_lock__channel:{reentrant}",
            before,
        )
        .await;
        for (i, guard) in guards.into_iter().enumerate() {
            if i < 2 {
                guard.unlock().await.unwrap();
                // Still held: Java neither got it nor can take it.
                assert_eq!(
                    java.ok("tryLock reentrant 9 0 -1").await,
                    "false",
                    "{version}"
                );
                assert!(
                    java_lock.try_recv().is_err(),
                    "{version}: Java acquired early"
                );
            } else {
                guard.unlock().await.unwrap();
            }
        }
        within("Java acquires after the third unlock", &mut java_lock)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(java.ok("holdCount reentrant 1").await, "1");
        java.ok("unlock reentrant 1").await;
        java.quit().await;
    }
}

#[tokio::test]
async fn each_watchdog_keeps_its_lock_past_three_timeouts_while_the_other_waits() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 1_000).await;
        let rust = client(&server, Duration::from_secs(1)).await;
        let lock = rust.lock("dog").unwrap();

        // Java's watchdog.
        java.ok("lock dog 1 -1").await;
        let l = lock.clone();
        let waiter = tokio::spawn(async move { l.lock().await });
        // Time itself is what is tested here: 3.5 watchdog timeouts.
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        assert!(!waiter.is_finished(), "{version}: Java's lock lapsed");
        assert!(lock.is_locked().await.unwrap());
        java.ok("unlock dog 1").await;
        let guard = within("Rust acquires", waiter).await.unwrap().unwrap();

        // Rust's watchdog.
        let mut java_waits = java.send("lock dog 2 -1").await;
        let mut updates = rust.watchdog_updates();
        let start = updates.borrow_and_update().cycles;
        within("10 cycles", updates.wait_for(|s| s.cycles >= start + 10))
            .await
            .unwrap();
        assert!(
            java_waits.try_recv().is_err(),
            "{version}: Rust's lock lapsed"
        );
        assert!(!guard.is_lost());
        assert_eq!(java.ok("isLocked dog").await, "true");
        guard.unlock().await.unwrap();
        within("Java acquires", &mut java_waits)
            .await
            .unwrap()
            .unwrap();
        java.ok("unlock dog 2").await;
        java.quit().await;
    }
}

#[tokio::test]
async fn force_unlock_crosses_sides() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(1)).await;
        let lock = rust.lock("forced").unwrap();

        // Java forceUnlock: the Rust holder's lost signal fires (next renewal).
        let guard = lock.lock().await.unwrap();
        assert_eq!(java.ok("forceUnlock forced").await, "true");
        within("lost signal after Java forceUnlock", guard.lost()).await;
        drop(guard);

        // Rust force unlock wakes a Java waiter.
        java.ok("lock forced 1 120000").await;
        let raw = server.raw().await;
        let before = scripts_run(&raw).await;
        let java_waits = java.send("lock forced 2 -1").await;
        java_is_waiting(
            &java,
            &server,
            &raw,
            "redisson_lock__channel:{forced}",
            before,
        )
        .await;
        assert!(lock.force_unlock().await.unwrap());
        within("Java waiter woken by Rust force unlock", java_waits)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            java.ok("isHeldByThread forced 2").await,
            "true",
            "{version}"
        );
        java.ok("unlock forced 2").await;
        java.quit().await;
    }
}

#[tokio::test]
async fn two_java_and_two_rust_clients_share_a_counter_without_overlap() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let url = server.url();
        let (java_a, java_b) = tokio::join!(
            JavaPeer::start(profile, version, &url, 5_000),
            JavaPeer::start(profile, version, &url, 5_000)
        );
        let rust_clients = [
            client(&server, Duration::from_secs(5)).await,
            client(&server, Duration::from_secs(5)).await,
        ];
        let overlaps = Arc::new(AtomicUsize::new(0));
        let mut rust_runs = vec![];
        for c in &rust_clients {
            let (c, overlaps) = (c.clone(), overlaps.clone());
            rust_runs.push(tokio::spawn(async move {
                common::contend(&c, 200, &overlaps).await
            }));
        }
        let (a, b) = tokio::join!(
            java_a.call("contend counted 1 200 inside counter"),
            java_b.call("contend counted 1 200 inside counter")
        );
        for run in rust_runs {
            within("Rust contenders", run).await.unwrap();
        }
        let raw = server.raw().await;
        let counter: String = raw.get("counter").await.unwrap();
        assert_eq!(a.unwrap(), "0", "{version}: Java saw overlaps");
        assert_eq!(b.unwrap(), "0", "{version}: Java saw overlaps");
        assert_eq!(
            overlaps.load(Ordering::SeqCst),
            0,
            "{version}: Rust saw overlaps"
        );
        assert_eq!(counter, "800", "{version}");
        java_a.quit().await;
        java_b.quit().await;
    }
}

#[tokio::test]
async fn java_sees_one_field_per_owner_and_a_scoped_reentry_in_the_same_field() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let lock = rust.lock("owners").unwrap();

        // Two acquisitions joined in one task are two owners: the second
        // waits, and Java reads a different field once it holds.
        let (first_seen, second_seen) = tokio::join!(
            async {
                let guard = lock.lock().await.unwrap();
                // Re-entry in the holder's scope: the same field, count 2.
                let again = guard.scope(lock.lock()).await.unwrap();
                let seen = java.ok("fields owners").await;
                again.unlock().await.unwrap();
                guard.unlock().await.unwrap();
                (guard_field(&seen), seen)
            },
            async {
                let guard = lock.lock().await.unwrap();
                let seen = java.ok("fields owners").await;
                guard.unlock().await.unwrap();
                seen
            }
        );
        let (first_field, first_seen) = first_seen;
        assert_eq!(first_seen, format!("{first_field}=2"), "{version}");
        assert!(first_field.starts_with(rust.id()), "{version}");
        let second_field = guard_field(&second_seen);
        assert_eq!(second_seen, format!("{second_field}=1"), "{version}");
        assert_ne!(first_field, second_field, "{version}: one field per owner");
        assert_eq!(java.ok("fields owners").await, "", "{version}");
        java.quit().await;
    }
}

/// The field of a single-holder `fields` reply (`field=count`).
fn guard_field(seen: &str) -> String {
    seen.rsplit_once('=').expect("one holder").0.to_string()
}
