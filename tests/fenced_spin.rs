//! RFencedLock (tokens) and RSpinLock (no pub/sub): on their own, under
//! faults, and against the JVM.

use redisson_lock_testkit as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::java::{newest_versions, versions, JavaPeer};
use common::*;
use fred::prelude::*;
use redisson_lock::{BackOff, Error, OwnerId, RedissonClient, Unlocked};

#[tokio::test]
async fn fenced_tokens_grow_with_every_acquisition_and_guard_writes() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.fenced_lock("ledger").unwrap();
    assert_eq!(lock.token().await.unwrap(), None);

    let first = lock.lock().await.unwrap();
    let again = first.scope(lock.lock()).await.unwrap();
    assert!(
        again.token() > first.token(),
        "a re-entry gets a newer token"
    );
    assert_eq!(lock.token().await.unwrap(), Some(again.token()));
    let stored: String = raw.get("redisson_lock_token:{ledger}").await.unwrap();
    assert_eq!(stored, again.token().to_string());
    // Unlock, renewal and channel are RLock's: the hash looks like one.
    assert_eq!(first.hold_count().await.unwrap(), 2);
    again.unlock().await.unwrap();
    assert!(first.set_if_newest("ledger:balance", "10").await.unwrap());
    first.unlock().await.unwrap();

    // A newer holder writes; the older token is then refused.
    let newer = lock.lock().await.unwrap();
    assert!(newer.set_if_newest("ledger:balance", "20").await.unwrap());
    let stale = newer.token() - 1;
    assert!(stale >= 1);
    let fence: String = raw.get("redisson_fence:{ledger:balance}").await.unwrap();
    assert_eq!(fence, newer.token().to_string());
    newer.unlock().await.unwrap();
    let value: String = raw.get("ledger:balance").await.unwrap();
    assert_eq!(value, "20");
}

#[tokio::test]
async fn a_stale_holder_cannot_write_after_a_newer_one() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.fenced_lock("stale").unwrap();
    // An old holder whose lease ran out while it was paused...
    let old = lock
        .acquire()
        .lease(Duration::from_millis(200))
        .await
        .unwrap();
    within("the old lease runs out", old.lost()).await;
    // ... and a new holder that already wrote.
    let new = lock.lock().await.unwrap();
    assert!(new.token() > old.token());
    assert!(new.set_if_newest("stale:data", "new").await.unwrap());
    assert!(!old.set_if_newest("stale:data", "old").await.unwrap());
    let value: String = raw.get("stale:data").await.unwrap();
    assert_eq!(value, "new");
    new.unlock().await.unwrap();
}

#[tokio::test]
async fn a_key_without_ttl_is_not_a_grant_and_a_lost_reply_keeps_its_token() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let proxy = Proxy::start(server.port).await;
    let client = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    warm_up(&server, &client).await;
    // Redisson reads the reply {-1, -1} (PTTL -1: no TTL) as acquired.
    let _: () = raw.hset("forever", ("someone:1", "1")).await.unwrap();
    let lock = client.fenced_lock("forever").unwrap();
    assert!(lock.try_lock().await.unwrap().is_none());

    // The grant's reply is lost: the hold and its token are read back.
    let lock = client.fenced_lock("lost-reply").unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();
    latches_settled(&server, &client).await;
    proxy.drop_next_reply();
    let guard = lock.lock().await.unwrap();
    assert_eq!(proxy.dropped().len(), 1);
    let stored: String = raw.get("redisson_lock_token:{lost-reply}").await.unwrap();
    assert_eq!(guard.token().to_string(), stored);
    assert_eq!(guard.token(), 2);
    assert_eq!(guard.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn java_and_rust_fenced_tokens_interleave_strictly() {
    // Redisson 3.16 has no fenced lock (3.19+): 4.7.0 and the last 3.x.
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let java_run = java.send("fencedContend fenced 1 60 tokens").await;
        let lock = rust.fenced_lock("fenced").unwrap();
        for _ in 0..60 {
            let guard = lock.lock().await.unwrap();
            let _: i64 = raw.rpush("tokens", guard.token()).await.unwrap();
            guard.unlock().await.unwrap();
        }
        within("Java contender", java_run).await.unwrap().unwrap();
        // Appended inside the lock, in acquisition order: strictly increasing.
        let tokens: Vec<i64> = raw.lrange("tokens", 0, -1).await.unwrap();
        assert_eq!(tokens.len(), 120, "{version}");
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{version}: {tokens:?}"
        );
        assert_eq!(java.ok("fencedToken fenced").await, tokens[119].to_string());
        java.quit().await;
    }
}

#[tokio::test]
async fn a_spin_waiter_polls_and_never_subscribes() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.spin_lock("spinning").unwrap();
    let held = lock.lock().await.unwrap();
    let mut events = Observer::new(&server, &["redisson_lock__channel:{spinning}"], &[]).await;
    let subscribes = command_calls(&raw, "subscribe").await;
    let waiter = tokio::spawn({
        let lock = lock
            .clone()
            .with_backoff(BackOff::Constant(Duration::from_millis(20)));
        async move { lock.lock().await }
    });
    // The waiter polls: several acquire attempts, no subscription.
    let scripts = command_calls(&raw, "evalsha").await;
    common::topology::until("the waiter polls", || async {
        command_calls(&raw, "evalsha").await >= scripts + 3
    })
    .await;
    // Only the observer listens on the lock's channel.
    assert_eq!(numsub(&raw, "redisson_lock__channel:{spinning}").await, 1);
    // The release publishes nothing; the next poll takes it.
    assert_eq!(held.unlock().await.unwrap(), Unlocked::Released);
    let taken = within("the spin waiter", waiter).await.unwrap().unwrap();
    assert_eq!(events.drain(), vec![]);
    assert_eq!(command_calls(&raw, "subscribe").await, subscribes);
    assert!(lock.force_unlock().await.unwrap());
    assert!(matches!(
        taken.unlock().await,
        Err(Error::LockLost { .. } | Error::NotHeld { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_spin_locks_never_overlap() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let overlaps = Arc::new(AtomicUsize::new(0));
        let java_run = java.send("scontend spun 1 60 inside counter").await;
        let rust_run = {
            let (rust, overlaps) = (rust.clone(), overlaps.clone());
            tokio::spawn(async move {
                let lock = rust.spin_lock("spun").unwrap();
                let redis = &fred_of(&rust).await;
                for _ in 0..60 {
                    let guard = lock.lock().await.unwrap();
                    counted_section(redis, &overlaps).await;
                    guard.unlock().await.unwrap();
                }
            })
        };
        within("Rust contender", rust_run).await.unwrap();
        let java_overlaps = within("Java contender", java_run).await.unwrap().unwrap();
        assert_eq!(java_overlaps, "0", "{version}");
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "{version}");
        let counter: String = fred_of(&rust).await.get("counter").await.unwrap();
        assert_eq!(counter, "120", "{version}");
        java.quit().await;
    }
}

#[tokio::test]
async fn bad_inputs_are_typed_errors_and_touch_nothing() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let _: () = raw.set("plain", "value", None, None, false).await.unwrap();
    for err in [
        client
            .fenced_lock("plain")
            .unwrap()
            .try_lock()
            .await
            .unwrap_err(),
        client
            .spin_lock("plain")
            .unwrap()
            .try_lock()
            .await
            .unwrap_err(),
        client
            .spin_lock("plain")
            .unwrap()
            .force_unlock()
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    }
    let value: String = raw.get("plain").await.unwrap();
    assert_eq!(value, "value");
    assert!(matches!(
        client.fenced_lock(""),
        Err(Error::InvalidArgument(_))
    ));
    let spin = client.spin_lock("spin").unwrap();
    assert!(matches!(
        spin.acquire().lease(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        spin.with_owner(OwnerId::new(1).unwrap()).unlock().await,
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(raw.exists::<i64, _>("spin").await.unwrap(), 0);
}
