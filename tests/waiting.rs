//! Waiting: woken by unlock messages, one subscription per client, no overlap.

use redisson_lock_testkit as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fred::prelude::*;

#[tokio::test]
async fn a_waiter_in_another_client_is_woken_by_the_unlock_message() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let a = client(&server, Duration::from_secs(30)).await;
    let b = client(&server, Duration::from_secs(30)).await;
    // A long lease: only the unlock message can wake the waiter within HANG.
    let held = a
        .lock("w")
        .unwrap()
        .acquire()
        .lease(Duration::from_secs(120))
        .await
        .unwrap();
    let lock_b = b.lock("w").unwrap();
    let waiter = tokio::spawn(async move { lock_b.lock().await });
    await_subscribers(&server, "redisson_lock__channel:{w}", 1).await;
    held.unlock().await.unwrap();
    let guard = within("waiter woken by unlock", waiter)
        .await
        .unwrap()
        .unwrap();
    let holder: Vec<String> = raw.hkeys("w").await.unwrap();
    assert_eq!(holder, vec![guard.field().to_string()]);
    assert!(guard.field().starts_with(b.id()));
    guard.unlock().await.unwrap();
    // The last local waiter left: the channel is unsubscribed.
    await_subscribers(&server, "redisson_lock__channel:{w}", 0).await;
}

#[tokio::test]
async fn fifty_waiters_over_two_clients_each_acquire_once_without_overlap() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let clients = [
        client(&server, Duration::from_secs(5)).await,
        client(&server, Duration::from_secs(5)).await,
    ];
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let gate = clients[0].lock("herd").unwrap().lock().await.unwrap();
    let mut tasks = vec![];
    for i in 0..50 {
        let lock = clients[i % 2].lock("herd").unwrap();
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            tokio::task::yield_now().await;
            inside.fetch_sub(1, Ordering::SeqCst);
            let field = guard.field().to_string();
            guard.unlock().await.unwrap();
            field
        }));
    }
    // Each client subscribes the channel once, however many of its tasks wait.
    await_subscribers(&server, "redisson_lock__channel:{herd}", 2).await;
    gate.unlock().await.unwrap();
    let mut fields = vec![];
    for task in tasks {
        fields.push(within("all waiters acquire", task).await.unwrap());
    }
    fields.sort();
    fields.dedup();
    assert_eq!(
        fields.len(),
        50,
        "every waiter held the lock once, as its own owner"
    );
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(raw.exists::<i64, _>("herd").await.unwrap(), 0);
    await_subscribers(&server, "redisson_lock__channel:{herd}", 0).await;
}

#[tokio::test]
async fn a_dropped_waiter_leaves_no_subscription_behind() {
    let server = RedisServer::start().await;
    let a = client(&server, Duration::from_secs(30)).await;
    let held = a.lock("d").unwrap().lock().await.unwrap();
    let lock = a.lock("d").unwrap();
    let waiter = tokio::spawn(async move { lock.lock().await });
    await_subscribers(&server, "redisson_lock__channel:{d}", 1).await;
    waiter.abort();
    await_subscribers(&server, "redisson_lock__channel:{d}", 0).await;
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn a_waiter_dropped_while_its_attempt_succeeds_releases_the_lock() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let raw = server.raw().await;
    let a = redisson_lock::RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    let lock = a.lock("cancelled").unwrap();
    let mut events = Observer::new(&server, &["redisson_lock__channel:{cancelled}"], &[]).await;
    // Warm the script cache so the acquire runs on its first send.
    lock.lock().await.unwrap().unlock().await.unwrap();
    assert_eq!(events.next().await.1, "0");

    // The acquire reaches Redis and runs, but its reply is held back ...
    proxy.stall_replies();
    {
        let pending = lock.lock();
        futures::pin_mut!(pending);
        drive_until(
            "the abandoned acquire runs on Redis",
            &mut pending,
            || async { raw.exists::<i64, _>("cancelled").await.unwrap() == 1 },
        )
        .await;
        // ... and the caller gives up on it here.
    }
    proxy.resume_replies();
    // The lock it took is given back: deleted, and `0` published.
    assert_eq!(events.next().await.1, "0");
    assert_eq!(raw.exists::<i64, _>("cancelled").await.unwrap(), 0);
    assert_eq!(a.held_locks(), 0);
}

#[tokio::test]
async fn try_lock_for_gives_up_at_its_deadline() {
    let server = RedisServer::start().await;
    let a = client(&server, Duration::from_secs(30)).await;
    let b = client(&server, Duration::from_secs(30)).await;
    let held = a.lock("t").unwrap().lock().await.unwrap();
    let lock = b.lock("t").unwrap();
    let started = tokio::time::Instant::now();
    assert!(lock
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(lock.try_lock().await.unwrap().is_none());
    held.unlock().await.unwrap();
    let guard = lock
        .try_lock_for(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("free now");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn sharded_mode_on_a_single_server_stays_classic_as_in_redisson() {
    let server = RedisServer::start().await;
    let mut settings = config(&server.url(), Duration::from_secs(30));
    settings.sharded_subscription_mode = redisson_lock::ShardedSubscriptionMode::On;
    let client = redisson_lock::RedissonClient::connect(settings)
        .await
        .unwrap();
    // Redisson reads the setting only on a cluster: JVM waiters here listen
    // with SUBSCRIBE, so unlocks must PUBLISH.
    assert!(!client.sharded_pubsub());
    let lock = client.lock("classic").unwrap();
    let mut events = Observer::new(&server, &[&lock.channel()], &[]).await;
    lock.lock().await.unwrap().unlock().await.unwrap();
    assert_eq!(events.next().await, (lock.channel(), "0".to_string()));
}
