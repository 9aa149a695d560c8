//! RReadWriteLock: Redisson's data model step by step (compared with what the
//! JVM writes), readers and writers across Java and Rust, wake-ups, renewal,
//! leases and faults.

use redisson_lock_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::java::{java_is_waiting, scripts_run, versions, JavaPeer, VERSIONS};
use common::*;
use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use redisson_lock::{Error, OwnerId, RedissonClient, RwMode, Unlocked};

/// The lock's hash, its readers' hold keys and its TTL (in 10 s steps), with
/// the client id and the lock name replaced, so that what two clients wrote
/// for the same steps can be compared.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    fields: BTreeMap<String, String>,
    hold_keys: BTreeSet<String>,
    ttl_steps: i64,
}

async fn snapshot(raw: &Client, name: &str, client_id: &str) -> Snapshot {
    let fields: std::collections::HashMap<String, String> = raw.hgetall(name).await.unwrap();
    let fields = fields
        .into_iter()
        .map(|(f, v)| (f.replace(client_id, "C"), v))
        .collect();
    let keys: Vec<String> = raw
        .custom(
            CustomCommand::new_static("KEYS", ClusterHash::Random, false),
            vec![format!("{{{name}}}:*")],
        )
        .await
        .unwrap();
    let hold_keys = keys
        .iter()
        .map(|k| k.replace(name, "N").replace(client_id, "C"))
        .collect();
    let pttl: i64 = raw.pttl(name).await.unwrap();
    Snapshot {
        fields,
        hold_keys,
        ttl_steps: if pttl < 0 {
            pttl
        } else {
            (pttl + 9_999) / 10_000
        },
    }
}

#[tokio::test]
async fn each_step_leaves_the_state_redisson_leaves() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let rw = rust.read_write_lock("rw-rust").unwrap();
        let one = rw.with_owner(OwnerId::new(1).unwrap());
        let two = rw.with_owner(OwnerId::new(2).unwrap());
        let three = rw.with_owner(OwnerId::new(3).unwrap());
        let same = |what: &'static str| {
            let (raw, java_id, rust_id) = (raw.clone(), java.client_id.clone(), rust.id());
            let rust_id = rust_id.to_string();
            async move {
                let java_state = snapshot(&raw, "rw-java", &java_id).await;
                let rust_state = snapshot(&raw, "rw-rust", &rust_id).await;
                assert_eq!(rust_state, java_state, "{version}: after {what}");
            }
        };

        // Two readers, one of them twice; a writer cannot get in.
        java.ok("rlock rw-java 1 -1").await;
        let r1 = one.read().lock().await.unwrap();
        same("a read lock").await;
        java.ok("rlock rw-java 1 -1").await;
        let r1b = one.read().lock().await.unwrap();
        same("a read re-entry").await;
        java.ok("rlock rw-java 2 -1").await;
        let r2 = two.read().lock().await.unwrap();
        same("a second reader").await;
        assert_eq!(java.ok("wtryLock rw-java 3 0 -1").await, "false");
        assert!(three.write().try_lock().await.unwrap().is_none());
        same("a refused writer").await;
        java.ok("runlock rw-java 1").await;
        assert_eq!(r1b.unlock().await.unwrap(), Unlocked::StillHeld);
        same("a partial read unlock").await;
        java.ok("runlock rw-java 1").await;
        assert_eq!(r1.unlock().await.unwrap(), Unlocked::StillHeld);
        same("one reader left").await;
        java.ok("runlock rw-java 2").await;
        assert_eq!(r2.unlock().await.unwrap(), Unlocked::Released);
        same("the last reader left").await;

        // A writer, re-entered, then downgraded.
        java.ok("wlock rw-java 1 -1").await;
        let w1 = one.write().lock().await.unwrap();
        same("a write lock").await;
        java.ok("wlock rw-java 1 -1").await;
        let w1b = one.write().lock().await.unwrap();
        same("a write re-entry (lease added to the TTL)").await;
        java.ok("rlock rw-java 1 -1").await;
        let r1 = one.read().lock().await.unwrap();
        same("the writer reads (downgrade)").await;
        assert_eq!(java.ok("rtryLock rw-java 2 0 -1").await, "false");
        assert!(two.read().try_lock().await.unwrap().is_none());
        java.ok("wunlock rw-java 1").await;
        assert_eq!(w1b.unlock().await.unwrap(), Unlocked::StillHeld);
        same("a partial write unlock").await;
        java.ok("wunlock rw-java 1").await;
        assert_eq!(w1.unlock().await.unwrap(), Unlocked::Released);
        same("the write lock released under a read hold").await;
        assert_eq!(rw.mode().await.unwrap(), Some(RwMode::Read));
        java.ok("runlock rw-java 1").await;
        assert_eq!(r1.unlock().await.unwrap(), Unlocked::Released);
        same("everything released").await;
        assert!(!rw.is_locked().await.unwrap());
        java.quit().await;
        rust.shutdown().await;
    }
}

#[tokio::test]
async fn readers_share_and_writers_exclude_across_java_and_rust() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let rw = rust.read_write_lock("shared-doc").unwrap();
        let channel = rw.channel();

        // Java and Rust read at once; neither side can write.
        java.ok("rlock shared-doc 1 -1").await;
        let reading = rw.read().lock().await.unwrap();
        assert_eq!(java.ok("risLocked shared-doc").await, "true");
        assert_eq!(java.ok("wtryLock shared-doc 2 0 -1").await, "false");
        assert!(rw.write().try_lock().await.unwrap().is_none());
        assert_eq!(rw.read().holders().await.unwrap().len(), 2);

        // A Rust writer waits for both readers; the last release wakes it.
        let write = rw.write();
        let writer = tokio::spawn(async move { write.lock().await });
        await_subscribers(&server, &channel, 1).await;
        java.ok("runlock shared-doc 1").await;
        assert!(!writer.is_finished());
        reading.unlock().await.unwrap();
        let writing = within("the writer, woken", writer).await.unwrap().unwrap();
        assert_eq!(java.ok("wisLocked shared-doc").await, "true");
        assert_eq!(java.ok("rtryLock shared-doc 2 0 -1").await, "false");

        // A Java reader waits for the Rust writer; the write unlock wakes it.
        await_subscribers(&server, &channel, 0).await;
        let before = scripts_run(&raw).await;
        let java_reads = java.send("rlock shared-doc 2 -1").await;
        java_is_waiting(&java, &server, &raw, &channel, before).await;
        writing.unlock().await.unwrap();
        within("Java woken by the write unlock", java_reads)
            .await
            .unwrap()
            .unwrap();
        java.ok("runlock shared-doc 2").await;
        assert!(!rw.is_locked().await.unwrap());
        java.quit().await;
        rust.shutdown().await;
    }
}

#[tokio::test]
async fn one_write_unlock_wakes_every_waiting_reader() {
    let server = RedisServer::start().await;
    let (profile, version) = VERSIONS[0];
    let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
    let clients = [
        client(&server, Duration::from_secs(30)).await,
        client(&server, Duration::from_secs(30)).await,
    ];
    let rw = clients[0].read_write_lock("broadcast").unwrap();
    let channel = rw.channel();
    let mut events = Observer::new(&server, &[&channel], &[]).await;
    let writing = rw.write().lock().await.unwrap();
    let readers: Vec<_> = (0..6)
        .map(|i| {
            let read = clients[i % 2].read_write_lock("broadcast").unwrap().read();
            tokio::spawn(async move { read.lock().await })
        })
        .collect();
    // The observer, and one subscription per client.
    await_subscribers(&server, &channel, 3).await;
    let raw = server.raw().await;
    let before = scripts_run(&raw).await;
    let java_reads = java.send("rlock broadcast 1 -1").await;
    // Java subscribes too.
    await_subscribers(&server, &channel, 4).await;
    within("Java's retry", async {
        while scripts_run(&raw).await < before + 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    writing.unlock().await.unwrap();
    let mut guards = vec![];
    for reader in readers {
        guards.push(within("a reader", reader).await.unwrap().unwrap());
    }
    within("the Java reader", java_reads)
        .await
        .unwrap()
        .unwrap();
    // All of them were woken by that one message.
    assert_eq!(events.next().await, (channel.clone(), "1".to_string()));
    assert_eq!(events.drain(), vec![]);
    assert_eq!(rw.read().holders().await.unwrap().len(), 7);
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    java.ok("runlock broadcast 1").await;
    java.quit().await;
}

#[tokio::test]
async fn the_watchdog_keeps_both_modes_and_a_lease_is_never_renewed() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Ex"]).await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(1)).await;
    let reads = client.read_write_lock("renewed-read").unwrap();
    let writes = client.read_write_lock("renewed-write").unwrap();
    let r1 = reads.read().lock().await.unwrap();
    let r2 = r1.scope(reads.read().lock()).await.unwrap();
    let w = writes.write().lock().await.unwrap();
    let mut updates = client.watchdog_updates();
    // A third of a second per cycle: ten cycles span more than 3 timeouts.
    within("ten renewal cycles", updates.wait_for(|s| s.cycles >= 10))
        .await
        .unwrap();
    for key in [
        "renewed-read".to_string(),
        "renewed-write".to_string(),
        format!(
            "{}:1",
            redisson_lock::naming::read_timeout_prefix("renewed-read", &r1.field())
        ),
        format!(
            "{}:2",
            redisson_lock::naming::read_timeout_prefix("renewed-read", &r1.field())
        ),
    ] {
        let pttl: i64 = raw.pttl(&key).await.unwrap();
        assert!(pttl > 0 && pttl <= 1_000, "{key}: {pttl}");
    }
    assert!(!r1.is_lost() && !w.is_lost());
    let stats = client.watchdog_stats();
    assert_eq!(
        stats.last_cycle_scripts, 2,
        "one per renewal kind: {stats:?}"
    );
    r2.unlock().await.unwrap();
    r1.unlock().await.unwrap();
    w.unlock().await.unwrap();

    // Explicit leases: never renewed, they expire, the holders are told.
    let mut expired = Observer::new(&server, &["__keyevent@0__:expired"], &[]).await;
    let leased_read = reads
        .read()
        .acquire()
        .lease(Duration::from_millis(1_500))
        .await
        .unwrap();
    let leased_write = writes
        .write()
        .acquire()
        .lease(Duration::from_millis(1_500))
        .await
        .unwrap();
    assert!(!leased_read.is_renewed() && !leased_write.is_renewed());
    within("both lost signals", async {
        leased_read.lost().await;
        leased_write.lost().await;
    })
    .await;
    let mut gone = BTreeSet::new();
    while !(gone.contains("renewed-read") && gone.contains("renewed-write")) {
        gone.insert(expired.next().await.1);
    }
    assert!(matches!(
        leased_write.unlock().await,
        Err(Error::LockLost { .. })
    ));
}

#[tokio::test]
async fn reentry_downgrade_and_no_upgrade() {
    let server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let rw = client.read_write_lock("levels").unwrap();

    // A reader's scope re-enters reads; asking for the write lock there is refused.
    let reading = rw.read().lock().await.unwrap();
    let again = reading.scope(rw.read().lock()).await.unwrap();
    assert_eq!(again.hold_count().await.unwrap(), 2);
    let upgrade = reading.scope(rw.write().lock()).await;
    assert!(
        matches!(upgrade, Err(Error::InvalidArgument(ref m)) if m.contains("upgrade")),
        "{upgrade:?}"
    );
    // Outside the scope another owner's write simply waits.
    assert!(rw
        .write()
        .try_lock_for(Duration::from_millis(100))
        .await
        .unwrap()
        .is_none());
    again.unlock().await.unwrap();
    reading.unlock().await.unwrap();

    // A writer re-enters, reads in its scope, and keeps reading after the write.
    let writing = rw.write().lock().await.unwrap();
    let deeper = writing.scope(rw.write().lock()).await.unwrap();
    assert_eq!(deeper.hold_count().await.unwrap(), 2);
    let downgraded = writing.scope(rw.read().lock()).await.unwrap();
    assert_eq!(rw.read().holders().await.unwrap().len(), 1);
    assert_eq!(rw.write().holders().await.unwrap().len(), 1);
    assert!(rw.read().is_locked().await.unwrap());
    assert!(rw.write().is_locked().await.unwrap());
    deeper.unlock().await.unwrap();
    assert_eq!(writing.unlock().await.unwrap(), Unlocked::Released);
    assert_eq!(rw.mode().await.unwrap(), Some(RwMode::Read));
    // Other readers may join now; a writer may not.
    let other = rw.read().try_lock().await.unwrap().expect("a reader joins");
    assert!(rw.write().try_lock().await.unwrap().is_none());
    other.unlock().await.unwrap();
    assert_eq!(downgraded.unlock().await.unwrap(), Unlocked::Released);
    assert!(!rw.is_locked().await.unwrap());
}

/// The Rust side of `rwcontend`: the same sections, the same checks.
async fn contend(client: &RedissonClient, rounds: usize, violations: &AtomicUsize) {
    let rw = client.read_write_lock("contended").unwrap();
    let redis = &fred_of(client).await;
    for i in 0..rounds {
        if i % 4 == 0 {
            let guard = rw.write().lock().await.unwrap();
            let writers: i64 = redis.incr("writers").await.unwrap();
            let readers: Option<i64> = redis.get("readers").await.unwrap();
            if writers != 1 || readers.unwrap_or(0) != 0 {
                violations.fetch_add(1, Ordering::SeqCst);
            }
            let _: i64 = redis.decr("writers").await.unwrap();
            guard.unlock().await.unwrap();
        } else {
            let guard = rw.read().lock().await.unwrap();
            let _: i64 = redis.incr("readers").await.unwrap();
            let writers: Option<i64> = redis.get("writers").await.unwrap();
            if writers.unwrap_or(0) != 0 {
                violations.fetch_add(1, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _: i64 = redis.decr("readers").await.unwrap();
            guard.unlock().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_readers_and_writers_never_meet_a_writer() {
    for (profile, version) in versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = [
            client(&server, Duration::from_secs(30)).await,
            client(&server, Duration::from_secs(30)).await,
        ];
        let violations = Arc::new(AtomicUsize::new(0));
        let java_runs = [
            java.send("rwcontend contended 1 60 4 writers readers")
                .await,
            java.send("rwcontend contended 2 60 4 writers readers")
                .await,
        ];
        let rust_runs: Vec<_> = rust
            .iter()
            .map(|c| {
                let (c, v) = (c.clone(), violations.clone());
                tokio::spawn(async move { contend(&c, 60, &v).await })
            })
            .collect();
        for run in rust_runs {
            within("Rust contenders", run).await.unwrap();
        }
        for run in java_runs {
            let reply = within("Java contenders", run).await.unwrap().unwrap();
            assert_eq!(reply, "0", "{version}: Java saw a writer with company");
        }
        assert_eq!(violations.load(Ordering::SeqCst), 0, "{version}");
        let writers: Option<i64> = raw.get("writers").await.unwrap();
        assert_eq!(writers.unwrap_or(0), 0);
        java.quit().await;
    }
}

#[tokio::test]
async fn a_dropped_read_acquire_is_given_back_and_lost_replies_count_once() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let raw = server.raw().await;
    let client = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    warm_up(&server, &client).await;
    let rw = client.read_write_lock("faulty").unwrap();
    // Load the read-write scripts before replies start going missing.
    rw.read().lock().await.unwrap().unlock().await.unwrap();
    rw.write().lock().await.unwrap().unlock().await.unwrap();
    let mut events = Observer::new(&server, &[&rw.channel()], &[]).await;

    // A read acquire runs, its reply is held back, its caller leaves: the
    // read hold and its timeout key are given back.
    proxy.stall_replies();
    {
        let read = rw.read();
        let acquire = read.lock();
        futures::pin_mut!(acquire);
        drive_until("the read acquire runs", &mut acquire, || async {
            raw.exists::<i64, _>("faulty").await.unwrap() == 1
        })
        .await;
    }
    proxy.resume_replies();
    assert_eq!(events.next().await, (rw.channel(), "0".to_string()));
    assert_eq!(raw.exists::<i64, _>("faulty").await.unwrap(), 0);
    let hold_keys: Vec<String> = raw
        .custom(
            CustomCommand::new_static("KEYS", ClusterHash::Random, false),
            vec!["{faulty}:*"],
        )
        .await
        .unwrap();
    assert_eq!(hold_keys, Vec::<String>::new());

    // Lost replies: the read and the write acquire each count exactly once.
    latches_settled(&server, &client).await;
    let owner = rw.with_owner(OwnerId::unique());
    let cycles = watchdog_cycles(&client);
    proxy.drop_next_reply();
    let writing = owner.write().lock().await.unwrap();
    renewal_after_reconnect(&client, cycles).await;
    proxy.drop_next_reply();
    let reading = writing.scope(owner.read().lock()).await.unwrap();
    let fields: std::collections::HashMap<String, String> = raw.hgetall("faulty").await.unwrap();
    assert_eq!(fields.get(&writing.field()).map(String::as_str), Some("1"));
    assert_eq!(fields.get(&reading.field()).map(String::as_str), Some("1"));
    assert_eq!(proxy.dropped().len(), 2);
    writing.unlock().await.unwrap();
    assert_eq!(reading.unlock().await.unwrap(), Unlocked::Released);
    assert_eq!(client.held_locks(), 0);
}

#[tokio::test]
async fn after_a_restart_readers_and_writers_are_told() {
    let mut server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(1)).await;
    let reading = client
        .read_write_lock("restart-read")
        .unwrap()
        .read()
        .lock()
        .await
        .unwrap();
    let writing = client
        .read_write_lock("restart-write")
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();
    server.restart().await;
    within("both holders told", async {
        reading.lost().await;
        writing.lost().await;
    })
    .await;
    // The client recovers: the same locks can be taken again.
    let again = client
        .read_write_lock("restart-write")
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();
    again.unlock().await.unwrap();
}
