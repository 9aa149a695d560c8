//! RMultiLock and RedLock across separate servers; `run()` and the acquire
//! builder.

use redisson_lock_testkit as common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::java::{versions, JavaPeer, VERSIONS};
use common::topology::until;
use common::*;
use fred::prelude::*;
use redisson_lock::{Error, RMultiLock, RedissonClient};

/// Three independent redis-servers and a client for each.
async fn three_servers() -> (Vec<RedisServer>, Vec<RedissonClient>) {
    let mut servers = vec![];
    let mut clients = vec![];
    for _ in 0..3 {
        let server = RedisServer::start().await;
        clients.push(client(&server, Duration::from_secs(30)).await);
        servers.push(server);
    }
    (servers, clients)
}

async fn held_on(server: &RedisServer, name: &str) -> bool {
    server.raw().await.exists::<i64, _>(name).await.unwrap() == 1
}

#[tokio::test]
async fn a_multi_lock_is_all_or_nothing_across_servers() {
    let (servers, clients) = three_servers().await;
    let members = |clients: &[RedissonClient]| {
        clients
            .iter()
            .map(|c| c.lock("batch").unwrap())
            .collect::<Vec<_>>()
    };
    let multi = RMultiLock::new(members(&clients)).unwrap();
    let guard = multi.lock().await.unwrap();
    for server in &servers {
        assert!(held_on(server, "batch").await);
    }
    // Another multi lock over the same members waits for all of them.
    let other = RMultiLock::new(members(&clients)).unwrap();
    assert!(other
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();
    for server in &servers {
        assert!(!held_on(server, "batch").await);
    }

    // One member taken by someone else: nothing stays held by the attempt.
    let blocker = clients[2].lock("batch").unwrap().lock().await.unwrap();
    assert!(other
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    for server in &servers[..2] {
        assert!(
            !held_on(server, "batch").await,
            "a partial acquisition stayed"
        );
    }
    blocker.unlock().await.unwrap();
}

#[tokio::test]
async fn a_red_lock_holds_with_a_majority_and_one_server_down() {
    let (mut servers, clients) = three_servers().await;
    servers[1].kill().await;
    let red =
        RMultiLock::red_lock(clients.iter().map(|c| c.lock("red").unwrap()).collect()).unwrap();
    let guard = within("a majority", red.try_lock_for(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("two of three servers are enough");
    assert!(held_on(&servers[0], "red").await && held_on(&servers[2], "red").await);
    assert!(!guard.is_lost());
    // A second RedLock cannot get a majority meanwhile.
    let rival =
        RMultiLock::red_lock(clients.iter().map(|c| c.lock("red").unwrap()).collect()).unwrap();
    assert!(rival
        .try_lock_for(Duration::from_millis(500))
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();
    assert!(!held_on(&servers[0], "red").await && !held_on(&servers[2], "red").await);
}

#[tokio::test]
async fn a_dropped_multi_acquire_leaves_no_member_held() {
    let (servers, clients) = three_servers().await;
    // The last member is taken: the acquire holds the first two and waits.
    let blocker = clients[2].lock("dropped").unwrap().lock().await.unwrap();
    let multi =
        RMultiLock::new(clients.iter().map(|c| c.lock("dropped").unwrap()).collect()).unwrap();
    {
        let acquire = multi.lock();
        futures::pin_mut!(acquire);
        drive_until("the first two members held", &mut acquire, || async {
            held_on(&servers[0], "dropped").await && held_on(&servers[1], "dropped").await
        })
        .await;
    }
    until("every member released", || async {
        !held_on(&servers[0], "dropped").await && !held_on(&servers[1], "dropped").await
    })
    .await;
    blocker.unlock().await.unwrap();
    for server in &servers {
        assert!(!held_on(server, "dropped").await);
    }
}

#[tokio::test]
async fn a_lease_applies_to_every_member_once_all_are_held() {
    let (servers, clients) = three_servers().await;
    let multi =
        RMultiLock::new(clients.iter().map(|c| c.lock("leased").unwrap()).collect()).unwrap();
    let guard = multi
        .acquire()
        .wait(Duration::from_secs(10))
        .lease(Duration::from_secs(3))
        .await
        .unwrap()
        .unwrap();
    for server in &servers {
        let pttl: i64 = server.raw().await.pttl("leased").await.unwrap();
        assert!(pttl > 0 && pttl <= 3_000, "pttl {pttl}");
    }
    assert!(guard.guards().iter().all(|g| !g.is_renewed()));
    guard.unlock().await.unwrap();
    assert!(matches!(
        RMultiLock::new(vec![]),
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_multi_locks_over_the_same_members_exclude_each_other() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        // Java holds the pair: Rust's multi lock over it cannot get in.
        java.ok("multiLock m1,m2 1 -1").await;
        let multi = rust.multi_lock(&["m1", "m2"]).unwrap();
        assert!(multi
            .try_lock_for(Duration::from_millis(300))
            .await
            .unwrap()
            .is_none());
        java.ok("multiUnlock m1,m2 1").await;
        // Rust holds it: Java's cannot, nor can a plain lock of one member.
        let guard = multi.lock().await.unwrap();
        assert_eq!(java.ok("tryLock m2 3 0 -1").await, "false", "{version}");
        // Redisson 3.16's multi-lock tryLock answers false even on free locks
        // (a Redisson bug, #4033 / #4177): its blocking lock is used there.
        if version.starts_with("4.") {
            assert_eq!(java.ok("multiTryLock m1,m2 2 200 -1").await, "false");
        }
        let java_waits = java.send("multiLock m1,m2 2 -1").await;
        guard.unlock().await.unwrap();
        within("Java's multi lock after Rust's", java_waits)
            .await
            .unwrap()
            .unwrap();
        java.ok("multiUnlock m1,m2 2").await;

        // Both sides contend on the pair around one counter.
        let overlaps = Arc::new(AtomicUsize::new(0));
        let java_run = java.send("multiContend p1,p2 4 40 inside counter").await;
        let redis = fred_of(&rust).await;
        let pair = rust.multi_lock(&["p1", "p2"]).unwrap();
        for _ in 0..40 {
            let guard = pair.lock().await.unwrap();
            counted_section(&redis, &overlaps).await;
            guard.unlock().await.unwrap();
        }
        let java_overlaps = within("Java contender", java_run).await.unwrap().unwrap();
        assert_eq!(
            (java_overlaps.as_str(), overlaps.load(Ordering::SeqCst)),
            ("0", 0),
            "{version}"
        );
        let counter: String = redis.get("counter").await.unwrap();
        assert_eq!(counter, "80", "{version}");
        java.quit().await;
    }
}

#[tokio::test]
async fn run_stops_the_work_when_the_lock_is_lost_and_always_releases() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let (profile, version) = VERSIONS[0];
    let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
    let rust = client(&server, Duration::from_secs(1)).await;
    let lock = rust.lock("job").unwrap();

    // A lost lock (force-unlocked from Java) ends `run` with LockLost; the
    // work saw its signal before it would write.
    let wrote = Arc::new(AtomicBool::new(false));
    let outcome = lock
        .run(|lost| {
            let wrote = wrote.clone();
            let java = &java;
            async move {
                assert_eq!(java.ok("forceUnlock job").await, "true");
                lost.lost().await;
                // Never reached: run drops the work when the signal fires.
                wrote.store(true, Ordering::SeqCst);
            }
        })
        .await;
    assert!(
        matches!(outcome, Err(Error::LockLost { .. })),
        "{outcome:?}"
    );
    assert!(!wrote.load(Ordering::SeqCst));

    // An error inside the work is its value; the lock is released.
    let outcome: Result<u32, &str> = lock.run(|_| async { Err("failed") }).await.unwrap();
    assert_eq!(outcome, Err("failed"));
    assert_eq!(raw.exists::<i64, _>("job").await.unwrap(), 0);

    // A panic inside the work releases the lock too.
    let l = lock.clone();
    let panicked = tokio::spawn(async move {
        l.run(|_| async {
            panic!("the work panics");
        })
        .await
    })
    .await;
    assert!(panicked.is_err());
    until("released after the panic", || async {
        raw.exists::<i64, _>("job").await.unwrap() == 0
    })
    .await;

    // Nested re-entry works inside run; the builder's forms run too.
    let count = lock
        .run(|_| async { lock.lock().await.unwrap().hold_count().await.unwrap() })
        .await
        .unwrap();
    assert_eq!(count, 2);
    let value = lock
        .acquire()
        .wait(Duration::from_secs(1))
        .lease(Duration::from_secs(5))
        .run(|_| async { 7 })
        .await
        .unwrap();
    assert_eq!(value, Some(7));
    java.quit().await;
}

#[tokio::test]
async fn the_acquire_builder_covers_every_form() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("built").unwrap();
    let guard = lock.acquire().await.unwrap();
    assert!(guard.is_renewed());
    // Bounded waits give up while it is held.
    assert!(lock.acquire().no_wait().await.unwrap().is_none());
    assert!(lock
        .acquire()
        .wait(Duration::from_millis(100))
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();
    let leased = lock.acquire().lease(Duration::from_secs(5)).await.unwrap();
    assert!(!leased.is_renewed());
    let pttl: i64 = raw.pttl("built").await.unwrap();
    assert!(pttl > 0 && pttl <= 5_000);
    leased.unlock().await.unwrap();
    assert!(matches!(
        lock.acquire().lease(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    // The same builder for the other objects.
    let fair = client.fair_lock("built-fair").unwrap();
    fair.acquire()
        .no_wait()
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let fenced = client.fenced_lock("built-fenced").unwrap();
    let token = fenced.acquire().await.unwrap();
    assert_eq!(token.token(), 1);
    token.unlock().await.unwrap();
    let multi = client.multi_lock(&["b1", "b2"]).unwrap();
    multi
        .acquire()
        .wait(Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
}
