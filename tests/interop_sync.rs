//! RSemaphore, RPermitExpirableSemaphore and RCountDownLatch shared live with
//! JVM Redisson (the real jar), on one redis-server.
//!
//! Run against 4.7.0 and the last 3.x (3.52.0): Redisson 3.16 can miss a
//! wake-up while it registers its listener and then never re-checks a
//! semaphore (docs/interop.md), which would stall these runs whoever
//! released.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::java::{newest_versions, JavaPeer};
use common::{client, within, RedisServer};
use fred::prelude::*;
use redisson_lock::PermitId;

/// Waits until a Java request sent after `before` is waiting on `channel`:
/// subscribed, and its attempt after subscribing has run.
async fn java_waits(
    server: &RedisServer,
    raw: &Client,
    channel: &str,
    before: u64,
    subscribers: i64,
) {
    common::await_subscribers(server, channel, subscribers).await;
    within("Java's attempt after subscribing", async {
        while common::java::scripts_run(raw).await < before + 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_share_a_semaphore_without_exceeding_it() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let semaphore = rust.semaphore("pool").unwrap();
        assert!(semaphore.try_set_permits(2).await.unwrap(), "{version}");
        assert_eq!(java.ok("semAvailable pool").await, "2", "{version}");

        let java_run = java.send("semContend pool 60 inside max").await;
        let rust_runs: Vec<_> = (0..3)
            .map(|_| {
                let rust = rust.clone();
                tokio::spawn(async move {
                    let semaphore = rust.semaphore("pool").unwrap();
                    let redis = &common::fred_of(&rust).await;
                    for _ in 0..40 {
                        let permit = semaphore.acquire(1).await.unwrap();
                        let now: i64 = redis.incr("inside").await.unwrap();
                        let _: Value = redis
                            .eval(
                                "if tonumber(redis.call('get', KEYS[1]) or '0') < tonumber(ARGV[1]) \
                                 then redis.call('set', KEYS[1], ARGV[1]) end",
                                vec!["max"],
                                vec![now],
                            )
                            .await
                            .unwrap();
                        tokio::task::yield_now().await;
                        let _: i64 = redis.decr("inside").await.unwrap();
                        permit.release().await.unwrap();
                    }
                })
            })
            .collect();
        within("Rust contenders", futures::future::try_join_all(rust_runs))
            .await
            .unwrap();
        within("Java contender", java_run).await.unwrap().unwrap();
        let max: i64 = common::fred_of(&rust).await.get("max").await.unwrap();
        assert!(
            (1..=2).contains(&max),
            "{version}: {max} holders of 2 permits"
        );
        assert_eq!(semaphore.available_permits().await.unwrap(), 2, "{version}");
        assert_eq!(java.ok("semAvailable pool").await, "2", "{version}");
        rust.shutdown().await;
        java.quit().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_n_on_one_side_wakes_n_waiters_on_the_other() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let mut config = common::config(&server.url(), Duration::from_secs(30));
        // Only messages wake anyone within the test.
        config.recheck_interval = Duration::from_secs(600);
        let rust = redisson_lock::RedissonClient::connect(config)
            .await
            .unwrap();
        let semaphore = rust.semaphore("gate").unwrap();

        // Three Rust waiters; Java releases 2: two get through.
        let before = common::java::scripts_run(&raw).await;
        let mut waiters: Vec<_> = (0..3)
            .map(|_| {
                let s = semaphore.clone();
                tokio::spawn(async move { s.acquire(1).await })
            })
            .collect();
        common::await_subscribers(&server, "redisson_sc:{gate}", 1).await;
        within("the Rust waiters' attempts", async {
            while common::java::scripts_run(&raw).await < before + 6 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        java.ok("semRelease gate 2").await;
        let mut got = Vec::new();
        within("two Rust waiters woken by Java's release of 2", async {
            while got.len() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if let Some(i) = waiters.iter().position(|w| w.is_finished()) {
                    got.push(waiters.remove(i).await.unwrap().unwrap());
                }
            }
        })
        .await;
        assert_eq!(waiters.len(), 1, "{version}");
        assert_eq!(semaphore.available_permits().await.unwrap(), 0, "{version}");
        waiters.pop().unwrap().abort();
        let permits: Vec<u32> = got.into_iter().map(|p| p.forget()).collect();
        assert_eq!(permits, [1, 1], "{version}");
        common::await_subscribers(&server, "redisson_sc:{gate}", 0).await;

        // Two Java threads wait; Rust releases 2: both get through.
        let before = common::java::scripts_run(&raw).await;
        let first = java.send("semAcquire gate 1").await;
        let second = java.send("semAcquire gate 1").await;
        java_waits(&server, &raw, "redisson_sc:{gate}", before + 2, 1).await;
        semaphore.release(2).await.unwrap();
        within(&format!("{version}: Java woken by Rust's release"), async {
            first.await.unwrap().unwrap();
            second.await.unwrap().unwrap();
        })
        .await;
        assert_eq!(java.ok("semAvailable gate").await, "0", "{version}");
        rust.shutdown().await;
        java.quit().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirable_permits_expire_and_release_across_sides() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let semaphore = rust.permit_expirable_semaphore("slots").unwrap();
        assert!(semaphore.try_set_permits(1).await.unwrap());

        // Java leases the only permit (for a minute, so that Rust reads it
        // while it lasts); Rust shortens it to 300 ms and waits for its end.
        let java_id = java.ok("pesAcquire slots 60000").await;
        assert_eq!(java_id.len(), 32, "{version}: {java_id}");
        let id: PermitId = java_id.parse().unwrap();
        let leases = semaphore.leases().await.unwrap();
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].id, id, "{version}: Rust reads Java's permit id");
        assert!(semaphore.try_acquire(1).await.unwrap().is_none());
        assert!(semaphore
            .update_lease(id, Some(Duration::from_millis(300)))
            .await
            .unwrap());
        let rust_permit = within(
            &format!("{version}: Java's lease ends"),
            semaphore.acquire(1).lease(Duration::from_millis(300)),
        )
        .await
        .unwrap();
        // And Java waits for the end of Rust's lease.
        let java_next = java.ok("pesTryAcquire slots 20000 60000").await;
        assert_eq!(java_next.len(), 32, "{version}: Java got {java_next}");
        assert_eq!(
            rust_permit.release().await.unwrap(),
            0,
            "its lease had ended"
        );

        // Each side releases the other's permit by id.
        semaphore
            .release(&[java_next.parse().unwrap()])
            .await
            .unwrap();
        let ours = semaphore.acquire(1).forever().await.unwrap().forget();
        java.ok(&format!("pesRelease slots {}", ours[0])).await;
        assert_eq!(java.ok("pesAvailable slots").await, "1", "{version}");
        assert_eq!(semaphore.available_permits().await.unwrap(), 1);
        assert_eq!(
            java.ok(&format!("pesTryRelease slots {}", ours[0])).await,
            "false",
            "{version}: released once"
        );
        rust.shutdown().await;
        java.quit().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_downs_open_awaits_on_the_other_side_and_a_new_count_rearms_java() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let latch = rust.count_down_latch("shards").unwrap();
        let channel = "redisson_countdownlatch__channel__{shards}";

        // Rust counts down, a Java await opens.
        assert!(latch.try_set_count(2).await.unwrap());
        assert_eq!(java.ok("latchCount shards").await, "2", "{version}");
        let java_await = java.send("latchAwait shards -1").await;
        common::await_subscribers(&server, channel, 1).await;
        assert_eq!(latch.count_down().await.unwrap(), 1);
        assert_eq!(latch.count_down().await.unwrap(), 0);
        assert_eq!(
            within(&format!("{version}: Java's await"), java_await)
                .await
                .unwrap()
                .unwrap(),
            "true"
        );

        // A new round from Rust: Java's next await waits for it.
        assert!(latch.try_set_count(1).await.unwrap());
        assert_eq!(java.ok("latchAwait shards 200").await, "false", "{version}");
        let java_await = java.send("latchAwait shards -1").await;
        common::await_subscribers(&server, channel, 1).await;
        latch.count_down().await.unwrap();
        assert_eq!(
            within(&format!("{version}: Java's await, round 2"), java_await)
                .await
                .unwrap()
                .unwrap(),
            "true"
        );
        common::await_subscribers(&server, channel, 0).await;

        // Java counts down, a Rust wait opens.
        assert_eq!(
            java.ok("latchTrySetCount shards 1").await,
            "true",
            "{version}"
        );
        assert_eq!(latch.count().await.unwrap(), 1);
        let l = latch.clone();
        let rust_wait = tokio::spawn(async move { l.wait().await });
        common::await_subscribers(&server, channel, 1).await;
        java.ok("latchCountDown shards").await;
        within(&format!("{version}: Rust's wait"), rust_wait)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(java.ok("latchDelete shards").await, "false", "{version}");
        rust.shutdown().await;
        java.quit().await;
    }
}
