//! Live interop with the real JVM Redisson jar on a Redis Cluster (3 primaries,
//! 3 replicas): wake-ups both ways through sharded pub/sub (Redisson 4.7's
//! AUTO mode on Redis 7), and classic pub/sub with Redisson 3.16, which has no
//! sharded mode (the Rust side is set to OFF to match it).

use redisson_lock_testkit as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::java::{java_listening, newest_versions, versions, JavaPeer, VERSIONS};
use common::topology::{node_client, until, Cluster};
use common::{command_calls, config, within};
use fred::prelude::*;
use redisson_lock::{naming, RedissonClient, ShardedSubscriptionMode};

const LONG_LEASE_MS: u64 = 120_000;

use common::topology::subscribers_on as subscribers;

/// Subscribers of a classic channel anywhere in the cluster (a JVM client
/// subscribes on the node it picks; PUBLISH reaches every node).
async fn classic_subscribers(cluster: &Cluster, channel: &str) -> i64 {
    let mut n = 0;
    for node in &cluster.nodes {
        n += subscribers(node.port, channel, false).await;
    }
    n
}

async fn scripts_run(port: u16) -> u64 {
    let c = node_client(port).await;
    let n = command_calls(&c, "evalsha").await + command_calls(&c, "eval").await;
    let _ = c.quit().await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_wake_each_other_on_a_cluster() {
    let cluster = Cluster::start().await;
    for (profile, version) in versions() {
        // Redisson 4's AUTO mode picks sharded pub/sub where the nodes have it.
        let sharded = version.starts_with("4.") && cluster.sharded_pubsub().await;
        let name = format!("cluster-shared-{version}");
        let channel = naming::channel_name(&name);
        let owner = cluster.owner_of(naming::slot(&name)).await;
        let java = JavaPeer::start_cluster(profile, version, &cluster.addresses(), 30_000).await;
        let mut c = config(&cluster.url(), Duration::from_secs(30));
        if !sharded {
            c.sharded_subscription_mode = ShardedSubscriptionMode::Off;
        }
        let rust = RedissonClient::connect(c).await.unwrap();
        assert_eq!(rust.sharded_pubsub(), sharded, "{version}");
        let lock = rust.lock(&name).unwrap();

        // Java holds with a long lease: only its unlock message wakes Rust in time.
        java.ok(&format!("lock {name} 1 {LONG_LEASE_MS}")).await;
        let l = lock.clone();
        let waiter = tokio::spawn(async move { l.lock().await });
        until("Rust waiter subscribed", || async {
            if sharded {
                subscribers(owner, &channel, true).await == 1
            } else {
                classic_subscribers(&cluster, &channel).await == 1
            }
        })
        .await;
        java.ok(&format!("unlock {name} 1")).await;
        let guard = within("Rust woken by Java's unlock", waiter)
            .await
            .unwrap()
            .unwrap();
        guard.unlock().await.unwrap();

        // Rust holds with a long lease; Java waits and is woken by Rust's unlock.
        let held = lock
            .acquire()
            .lease(Duration::from_millis(LONG_LEASE_MS))
            .await
            .unwrap();
        until("Rust left the channel", || async {
            cluster.subscribers(&channel).await == 0
        })
        .await;
        let before = scripts_run(owner).await;
        let java_waits = java.send(&format!("lock {name} 2 -1")).await;
        until("Java waiter subscribed", || async {
            if sharded {
                subscribers(owner, &channel, true).await == 1
            } else {
                classic_subscribers(&cluster, &channel).await == 1
            }
        })
        .await;
        // Its retry after subscribing has run (see docs/interop.md for 3.16).
        until("Java's retry after subscribing", || async {
            scripts_run(owner).await >= before + 2
        })
        .await;
        java_listening(&java).await;
        held.unlock().await.unwrap();
        within(
            &format!("Redisson {version} woken by Rust's unlock"),
            java_waits,
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(java.ok(&format!("isHeldByThread {name} 2")).await, "true");
        java.ok(&format!("unlock {name} 2")).await;
        java.quit().await;
        rust.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_share_a_counter_on_a_cluster() {
    let cluster = Cluster::start().await;
    let (profile, version) = VERSIONS[0];
    let java = JavaPeer::start_cluster(profile, version, &cluster.addresses(), 5_000).await;
    let rust = RedissonClient::connect(config(&cluster.url(), Duration::from_secs(5)))
        .await
        .unwrap();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let rust_run = {
        let (rust, overlaps) = (rust.clone(), overlaps.clone());
        tokio::spawn(async move { common::contend(&rust, 150, &overlaps).await })
    };
    let java_overlaps = java.call("contend counted 1 150 inside counter").await;
    within("Rust contender", rust_run).await.unwrap();
    assert_eq!(java_overlaps.unwrap(), "0", "Java saw overlaps");
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "Rust saw overlaps");
    let counter: String = common::fred_of(&rust).await.get("counter").await.unwrap();
    assert_eq!(counter, "300");
    java.quit().await;
    rust.shutdown().await;
}

/// Waits until `channel` has one subscriber: on its slot's owner in sharded
/// mode, anywhere in the cluster otherwise.
async fn one_subscriber(cluster: &Cluster, owner: u16, channel: &str, sharded: bool) {
    until("a waiter subscribed", || async {
        if sharded {
            subscribers(owner, channel, true).await == 1
        } else {
            classic_subscribers(cluster, channel).await == 1
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_and_fair_locks_wake_across_sides_on_a_cluster() {
    let cluster = Cluster::start().await;
    for (profile, version) in versions() {
        let sharded = version.starts_with("4.") && cluster.sharded_pubsub().await;
        let java = JavaPeer::start_cluster(profile, version, &cluster.addresses(), 30_000).await;
        let mut c = config(&cluster.url(), Duration::from_secs(30));
        if !sharded {
            c.sharded_subscription_mode = ShardedSubscriptionMode::Off;
        }
        let rust = RedissonClient::connect(c).await.unwrap();

        // Read-write lock: Java's write unlock wakes a Rust reader; Rust's
        // write unlock wakes a Java reader.
        let name = format!("cluster-rw-{version}");
        let rw = rust.read_write_lock(&name).unwrap();
        let owner = cluster.owner_of(naming::slot(&name)).await;
        java.ok(&format!("wlock {name} 1 {LONG_LEASE_MS}")).await;
        let reader = tokio::spawn({
            let read = rw.read();
            async move { read.lock().await }
        });
        one_subscriber(&cluster, owner, &rw.channel(), sharded).await;
        java.ok(&format!("wunlock {name} 1")).await;
        let reading = within("Rust reader woken by Java", reader)
            .await
            .unwrap()
            .unwrap();
        reading.unlock().await.unwrap();
        let writing = rw
            .write()
            .acquire()
            .lease(Duration::from_millis(LONG_LEASE_MS))
            .await
            .unwrap();
        let before = scripts_run(owner).await;
        let java_reads = java.send(&format!("rlock {name} 2 -1")).await;
        one_subscriber(&cluster, owner, &rw.channel(), sharded).await;
        until("Java's retry after subscribing", || async {
            scripts_run(owner).await >= before + 2
        })
        .await;
        java_listening(&java).await;
        writing.unlock().await.unwrap();
        within("Java reader woken by Rust", java_reads)
            .await
            .unwrap()
            .unwrap();
        java.ok(&format!("runlock {name} 2")).await;

        // Fair lock: Rust's release tells the Java waiter on its own channel,
        // and Java's tells the Rust waiter.
        let name = format!("cluster-fair-{version}");
        let fair = rust.fair_lock(&name).unwrap();
        let owner = cluster.owner_of(naming::slot(&name)).await;
        let held = fair.lock().await.unwrap();
        let java_field = format!("{}:1", java.client_id);
        let java_channel = naming::fair_waiter_channel(&name, &java_field);
        let before = scripts_run(owner).await;
        let java_waits = java.send(&format!("flock {name} 1 -1")).await;
        one_subscriber(&cluster, owner, &java_channel, sharded).await;
        until("Java's retry after subscribing", || async {
            scripts_run(owner).await >= before + 2
        })
        .await;
        java_listening(&java).await;
        held.unlock().await.unwrap();
        within("Java waiter told by Rust", java_waits)
            .await
            .unwrap()
            .unwrap();
        let rust_owner = fair.with_owner(redisson_lock::OwnerId::new(7).unwrap());
        let rust_channel = naming::fair_waiter_channel(
            &name,
            &fair.field_of(redisson_lock::OwnerId::new(7).unwrap()),
        );
        let rust_waits = tokio::spawn(async move { rust_owner.lock().await });
        one_subscriber(&cluster, owner, &rust_channel, sharded).await;
        java.ok(&format!("funlock {name} 1")).await;
        let guard = within("Rust waiter told by Java", rust_waits)
            .await
            .unwrap()
            .unwrap();
        guard.unlock().await.unwrap();
        java.quit().await;
        rust.shutdown().await;
    }
}

/// Waits until `channel` has `n` sharded subscribers on `owner`.
async fn shard_subscribers(owner: u16, channel: &str, n: i64) {
    until("sharded subscribers", || async {
        subscribers(owner, channel, true).await == n
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_latches_wake_across_sides_on_a_cluster() {
    let cluster = Cluster::start().await;
    for (profile, version) in newest_versions() {
        let java = JavaPeer::start_cluster(profile, version, &cluster.addresses(), 30_000).await;
        let mut c = config(&cluster.url(), Duration::from_secs(30));
        c.recheck_interval = Duration::from_secs(600);
        let rust = RedissonClient::connect(c).await.unwrap();
        assert!(rust.sharded_pubsub(), "{version}");

        // Semaphore: a release on either side wakes the other's waiter.
        let name = format!("cluster-sem-{version}");
        let semaphore = rust.semaphore(&name).unwrap();
        let channel = semaphore.channel();
        let owner = cluster.owner_of(naming::slot(&name)).await;
        let s = semaphore.clone();
        let waiter = tokio::spawn(async move { s.acquire(1).await });
        shard_subscribers(owner, &channel, 1).await;
        java.ok(&format!("semRelease {name} 1")).await;
        let permit = within(&format!("{version}: Rust woken by Java's release"), waiter)
            .await
            .unwrap()
            .unwrap();
        permit.forget();
        shard_subscribers(owner, &channel, 0).await;
        let java_waits = java.send(&format!("semAcquire {name} 1")).await;
        shard_subscribers(owner, &channel, 1).await;
        semaphore.release(1).await.unwrap();
        within(
            &format!("{version}: Java woken by Rust's release"),
            java_waits,
        )
        .await
        .unwrap()
        .unwrap();

        // Java and Rust contend for 2 permits: never more than 2 inside.
        let name = format!("cluster-pool-{version}");
        let pool = rust.semaphore(&name).unwrap();
        pool.try_set_permits(2).await.unwrap();
        let (inside, max) = (format!("inside-{version}"), format!("max-{version}"));
        let java_run = java
            .send(&format!("semContend {name} 30 {inside} {max}"))
            .await;
        let redis = common::fred_of(&rust).await;
        let rust_runs: Vec<_> = (0..2)
            .map(|_| {
                let (pool, redis) = (pool.clone(), redis.clone());
                let (inside, max) = (inside.clone(), max.clone());
                tokio::spawn(async move {
                    for _ in 0..20 {
                        let permit = pool.acquire(1).await.unwrap();
                        let now: i64 = redis.incr(&inside).await.unwrap();
                        let _: Value = redis
                            .eval(
                                "if tonumber(redis.call('get', KEYS[1]) or '0') < tonumber(ARGV[1]) \
                                 then redis.call('set', KEYS[1], ARGV[1]) end",
                                vec![max.clone()],
                                vec![now],
                            )
                            .await
                            .unwrap();
                        tokio::task::yield_now().await;
                        let _: i64 = redis.decr(&inside).await.unwrap();
                        permit.release().await.unwrap();
                    }
                })
            })
            .collect();
        within("Rust contenders", futures::future::try_join_all(rust_runs))
            .await
            .unwrap();
        within("Java contender", java_run).await.unwrap().unwrap();
        let seen: i64 = common::fred_of(&rust).await.get(&max).await.unwrap();
        assert!(
            (1..=2).contains(&seen),
            "{version}: {seen} holders of 2 permits"
        );
        assert_eq!(pool.available_permits().await.unwrap(), 2, "{version}");

        // Expirable permits: Java's lease ends, Rust gets the permit.
        let name = format!("cluster-pes-{version}");
        let expirable = rust.permit_expirable_semaphore(&name).unwrap();
        expirable.try_set_permits(1).await.unwrap();
        java.ok(&format!("pesAcquire {name} 300")).await;
        within(
            &format!("{version}: Java's lease ends"),
            expirable.acquire(1),
        )
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

        // Latch: a count-down on either side opens the other's wait.
        let name = format!("cluster-latch-{version}");
        let latch = rust.count_down_latch(&name).unwrap();
        let channel = latch.channel();
        let owner = cluster.owner_of(naming::slot(&channel)).await;
        latch.try_set_count(1).await.unwrap();
        let java_waits = java.send(&format!("latchAwait {name} -1")).await;
        shard_subscribers(owner, &channel, 1).await;
        latch.count_down().await.unwrap();
        assert_eq!(
            within(&format!("{version}: Java's await"), java_waits)
                .await
                .unwrap()
                .unwrap(),
            "true"
        );
        shard_subscribers(owner, &channel, 0).await;
        assert_eq!(java.ok(&format!("latchTrySetCount {name} 1")).await, "true");
        let l = latch.clone();
        let waiter = tokio::spawn(async move { l.wait().await });
        shard_subscribers(owner, &channel, 1).await;
        java.ok(&format!("latchCountDown {name}")).await;
        within(&format!("{version}: Rust's wait"), waiter)
            .await
            .unwrap()
            .unwrap();
        rust.shutdown().await;
        java.quit().await;
    }
}
