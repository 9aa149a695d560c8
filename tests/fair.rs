//! RFairLock: first come, first served across Java and Rust; waiters that give
//! up leave the queue; faults.

use redisson_lock_testkit as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::java::{newest_versions, versions, JavaPeer, VERSIONS};
use common::topology::until;
use common::*;
use fred::prelude::*;
use redisson_lock::{OwnerId, RFairLock, RedissonClient, Unlocked};

/// Waits until the lock's queue is exactly `expected` (fields, first first).
async fn queue_is(lock: &RFairLock, expected: &[String]) {
    until("the fair queue", || async {
        lock.queue().await.unwrap() == expected
    })
    .await;
}

/// What a fair lock looks like on Redis, for failure messages.
async fn state(server: &RedisServer, name: &str) -> String {
    let raw = server.raw().await;
    let holder: std::collections::HashMap<String, String> = raw.hgetall(name).await.unwrap();
    let list = |cmd: &'static str, args: Vec<String>| {
        let raw = raw.clone();
        async move {
            let command = fred::types::CustomCommand::new_static(
                cmd,
                fred::types::ClusterHash::FirstKey,
                false,
            );
            let reply: Vec<String> = raw.custom(command, args).await.unwrap();
            reply
        }
    };
    let queue = list(
        "LRANGE",
        vec![
            format!("redisson_lock_queue:{{{name}}}"),
            "0".into(),
            "-1".into(),
        ],
    )
    .await;
    let deadlines = list(
        "ZRANGE",
        vec![
            format!("redisson_lock_timeout:{{{name}}}"),
            "0".into(),
            "-1".into(),
            "WITHSCORES".into(),
        ],
    )
    .await;
    let pttl: i64 = raw.pttl(name).await.unwrap();
    // Who listens on each waiter's own channel: a waiter with no subscriber
    // cannot be woken by an unlock.
    let mut channels = vec![];
    for waiter in &queue {
        channels.push(format!("redisson_lock__channel:{{{name}}}:{waiter}"));
    }
    let listening = if channels.is_empty() {
        vec![]
    } else {
        let mut args = vec!["NUMSUB".to_string()];
        args.extend(channels);
        let command = fred::types::CustomCommand::new_static(
            "PUBSUB",
            fred::types::ClusterHash::Random,
            false,
        );
        let reply: Vec<fred::types::Value> = raw.custom(command, args).await.unwrap();
        reply
            .iter()
            .skip(1)
            .step_by(2)
            .map(|v| v.as_i64().unwrap_or(-1))
            .collect()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!("holder {holder:?} (pttl {pttl}), queue {queue:?} (subscribers {listening:?}), deadlines {deadlines:?}, now {now}")
}

/// The lock's sole holder, as a field.
async fn holder(raw: &Client, name: &str) -> Option<String> {
    let fields: std::collections::HashMap<String, String> = raw.hgetall(name).await.unwrap();
    assert!(fields.len() <= 1, "{fields:?}");
    fields.into_keys().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_waiters_are_served_in_arrival_order() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let lock = rust.fair_lock("line").unwrap();
        let owner = |n| lock.with_owner(OwnerId::new(n).unwrap());
        let java_field = |tid| format!("{}:{tid}", java.client_id);

        let held = owner(100).lock().await.unwrap();
        // J1, R1, J2, R2 join the queue, each after the previous one is in.
        let mut line: Vec<String> = vec![];
        let j1 = java.send("flock line 1 -1").await;
        line.push(java_field(1));
        queue_is(&lock, &line).await;
        let r1 = tokio::spawn({
            let l = owner(101);
            async move { l.lock().await }
        });
        line.push(lock.field_of(OwnerId::new(101).unwrap()));
        queue_is(&lock, &line).await;
        let j2 = java.send("flock line 2 -1").await;
        line.push(java_field(2));
        queue_is(&lock, &line).await;
        let r2 = tokio::spawn({
            let l = owner(102);
            async move { l.lock().await }
        });
        line.push(lock.field_of(OwnerId::new(102).unwrap()));
        queue_is(&lock, &line).await;

        // Each release goes to the next in line, whichever side it is on.
        held.unlock().await.unwrap();
        within("J1's turn", j1).await.unwrap().unwrap();
        assert_eq!(holder(&raw, "line").await, Some(java_field(1)), "{version}");
        queue_is(&lock, &line[1..]).await;
        java.ok("funlock line 1").await;
        let g1 = within("R1's turn", r1).await.unwrap().unwrap();
        assert_eq!(g1.field(), lock.field_of(OwnerId::new(101).unwrap()));
        queue_is(&lock, &line[2..]).await;
        g1.unlock().await.unwrap();
        within("J2's turn", j2).await.unwrap().unwrap();
        assert_eq!(holder(&raw, "line").await, Some(java_field(2)), "{version}");
        java.ok("funlock line 2").await;
        let g2 = within("R2's turn", r2).await.unwrap().unwrap();
        queue_is(&lock, &[]).await;
        assert_eq!(g2.unlock().await.unwrap(), Unlocked::Released);
        let deadlines: i64 = raw.exists("redisson_lock_timeout:{line}").await.unwrap();
        assert_eq!(deadlines, 0);
        java.quit().await;
        rust.shutdown().await;
    }
}

/// `try_lock_for(d)` answers at its deadline: leaving the queue (the
/// give-up's script, and its `WAIT` on a replicated deployment) is not the
/// caller's to wait for, and finishes in the background, as when the caller
/// drops the wait. Before, the caller waited for the give-up's reply: with
/// every reply held back, until the command timeout (here longer than the
/// test's hang guard).
#[tokio::test]
async fn try_lock_for_answers_at_its_deadline_and_leaves_the_queue_after() {
    let (server, proxy, client) = proxied(|c| c.timeout = Duration::from_secs(120)).await;
    let holder = common::client(&server, Duration::from_secs(30)).await;
    let holder_lock = holder.fair_lock("deadline").unwrap();
    let held = holder_lock.lock().await.unwrap();
    let lock = client.fair_lock("deadline").unwrap();
    let waiting = tokio::spawn(async move { lock.try_lock_for(Duration::from_millis(300)).await });
    until("the waiter queued", || async {
        holder_lock.queue().await.unwrap().len() == 1
    })
    .await;
    proxy.stall_replies();
    // Answered while every reply is still held back.
    let answer = within("try_lock_for's answer", waiting).await.unwrap();
    assert!(matches!(answer, Ok(None)), "{answer:?}");
    proxy.resume_replies();
    queue_is(&holder_lock, &[]).await;
    held.unlock().await.unwrap();
    within("shutdown", client.shutdown()).await;
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let (profile, version) = VERSIONS[0];
    let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
    let rust = client(&server, Duration::from_secs(30)).await;
    let lock = rust.fair_lock("patience").unwrap();
    let held = lock.lock().await.unwrap();

    // A try that times out leaves no trace.
    assert!(lock
        .try_lock_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    queue_is(&lock, &[]).await;
    let deadlines: i64 = raw
        .exists("redisson_lock_timeout:{patience}")
        .await
        .unwrap();
    assert_eq!(deadlines, 0);

    // A dropped waiter (its task cancelled) leaves no trace either, and the
    // Java waiter behind it is served next.
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    until("the Rust waiter queued", || async {
        lock.queue().await.unwrap().len() == 1
    })
    .await;
    let java_waits = java.send("flock patience 1 -1").await;
    until("the Java waiter queued", || async {
        lock.queue().await.unwrap().len() == 2
    })
    .await;
    waiting.abort();
    let java_field = format!("{}:1", java.client_id);
    queue_is(&lock, std::slice::from_ref(&java_field)).await;
    held.unlock().await.unwrap();
    within("the Java waiter, next in line", java_waits)
        .await
        .unwrap()
        .unwrap();
    java.ok("funlock patience 1").await;
    queue_is(&lock, &[]).await;
    java.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_share_a_counter_through_a_fair_lock() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let overlaps = Arc::new(AtomicUsize::new(0));
        let mut java_run = java
            .send("fcontend fair-counted 1 100 inside counter")
            .await;
        let rust_runs: Vec<_> = (0..2)
            .map(|_| {
                let (rust, overlaps) = (rust.clone(), overlaps.clone());
                tokio::spawn(async move {
                    let lock = rust.fair_lock("fair-counted").unwrap();
                    let redis = &fred_of(&rust).await;
                    for _ in 0..50 {
                        let guard = lock.lock().await.unwrap();
                        counted_section(redis, &overlaps).await;
                        guard.unlock().await.unwrap();
                    }
                })
            })
            .collect();
        let all = futures::future::join_all(rust_runs);
        if tokio::time::timeout(HANG, all).await.is_err() {
            // Whether the JVM contender is still waiting, or gave up (an
            // error leaves its place in line until its deadline).
            let jvm = match java_run.try_recv() {
                Ok(reply) => format!("the JVM contender ended: {reply:?}"),
                Err(_) => "the JVM contender is still running".to_string(),
            };
            panic!(
                "{version}: Rust contenders stuck; {}; {jvm}",
                state(&server, "fair-counted").await
            );
        }
        let java_overlaps = within("Java contender", java_run).await.unwrap().unwrap();
        assert_eq!(java_overlaps, "0", "{version}");
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "{version}");
        let counter: String = fred_of(&rust).await.get("counter").await.unwrap();
        assert_eq!(counter, "200", "{version}");
        java.quit().await;
    }
}

#[tokio::test]
async fn a_dropped_fair_acquire_is_given_back_to_the_next_in_line() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let raw = server.raw().await;
    let client = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    let other = common::client(&server, Duration::from_secs(30)).await;
    warm_up(&server, &client).await;
    let lock = client.fair_lock("handover").unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();

    // The acquire runs on Redis (it takes the free lock), its reply is held
    // back and its caller leaves; meanwhile another client queues.
    proxy.stall_replies();
    {
        let acquire = lock.lock();
        futures::pin_mut!(acquire);
        drive_until("the fair acquire runs", &mut acquire, || async {
            raw.exists::<i64, _>("handover").await.unwrap() == 1
        })
        .await;
    }
    let next = tokio::spawn({
        let lock = other.fair_lock("handover").unwrap();
        async move { lock.lock().await }
    });
    // (Asked through the other client: this one's replies are held back.)
    let watching = other.fair_lock("handover").unwrap();
    until("the other waiter queued", || async {
        watching.queue().await.unwrap().len() == 1
    })
    .await;
    proxy.resume_replies();
    // The abandoned hold is given back and the next in line told.
    let guard = within("the next in line", next).await.unwrap().unwrap();
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    assert_eq!(lock.queue().await.unwrap(), Vec::<String>::new());

    // A lost reply: the hold counts once. First let the give-back's latch
    // deletion (fire and forget) and its reply pass, so the next reply is
    // the acquire's.
    latches_settled(&server, &client).await;
    let owner = lock.with_owner(OwnerId::unique());
    proxy.drop_next_reply();
    let held = owner.lock().await.unwrap();
    assert_eq!(held.hold_count().await.unwrap(), 1);
    assert_eq!(proxy.dropped().len(), 1);
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn after_a_restart_a_fair_holder_is_told() {
    let mut server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(1)).await;
    let held = client.fair_lock("restart").unwrap().lock().await.unwrap();
    server.restart().await;
    within("the holder told", held.lost()).await;
    let again = client.fair_lock("restart").unwrap().lock().await.unwrap();
    again.unlock().await.unwrap();
}
