//! The group multi lock (Redisson's `getMultiLock(group, values)`): its
//! hash, field by field; all-or-nothing acquisition; re-entry per value
//! set; wake-ups of waiters of other values; renewal; a lost reply; and JVM
//! Redisson 4.7.0 and 3.52.0 holding and waiting for the same values.

use redisson_lock_testkit as common;

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::java::{newest_versions, JavaPeer, NEWEST_VERSIONS};
use common::*;
use fred::prelude::*;
use redisson_lock::naming::{kryo5_string, value_field};
use redisson_lock::{Error, GroupValue, OwnerId, RedissonClient, Unlocked};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The group hash, with each `expire_time` checked to lie within `lease` of
/// now and then replaced by `T`.
async fn hash(raw: &Client, group: &str, lease: Duration) -> HashMap<String, String> {
    let mut fields: HashMap<String, String> = raw.hgetall(group).await.unwrap();
    let now = now_ms();
    for (field, value) in fields.iter_mut() {
        if field.ends_with(":expire_time") {
            let ends: i64 = value.parse().unwrap();
            assert!(
                ends > now && ends <= now + lease.as_millis() as i64,
                "{field} = {ends}, now {now}"
            );
            *value = "T".into();
        }
    }
    fields
}

/// The fields a hold of `values` by `owner` (a field) makes.
fn holds(values: &[&str], owner: &str, count: u32) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    for value in values {
        let h = value_field(value.as_bytes());
        fields.insert(h.clone(), owner.to_string());
        fields.insert(format!("{h}:{owner}:expire_time"), "T".into());
        fields.insert(format!("{h}:{owner}:lock_count"), count.to_string());
    }
    fields
}

#[tokio::test]
async fn values_are_held_all_or_nothing_in_one_hash() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lease = Duration::from_secs(30);

    let ab = client
        .group_lock("g", ["a", "b", "a"].map(GroupValue::string))
        .unwrap();
    assert_eq!(ab.group(), "g");
    assert_eq!(
        ab.value_fields(),
        ["Q5CdP+xmkHdTGWYr64Lw6A", "qwvAS12pR0CgRitaypEjUw"]
    );
    let guard = ab.lock().await.unwrap();
    let me = guard.field();
    assert_eq!(hash(&raw, "g", lease).await, holds(&["a", "b"], &me, 1));
    let pttl: i64 = raw.pttl("g").await.unwrap();
    assert!(pttl > 0 && pttl <= 30_000, "{pttl}");
    assert!(ab.is_locked().await.unwrap());
    assert!(ab.is_held_by(guard.owner()).await.unwrap());
    assert!(!ab.is_held().await.unwrap(), "no current owner out here");

    // Re-entry inside the scope: every value's count goes up.
    let inner = guard.scope(ab.lock()).await.unwrap();
    assert!(guard.scope(ab.is_held()).await.unwrap());
    assert_eq!(hash(&raw, "g", lease).await, holds(&["a", "b"], &me, 2));
    assert_eq!(guard.hold_count().await.unwrap(), 2);

    // A value set sharing "b" is refused whole; a disjoint one is free.
    let bc = client
        .group_lock("g", ["b", "c"].map(GroupValue::string))
        .unwrap();
    assert!(bc.try_lock().await.unwrap().is_none());
    assert!(!bc.is_held_by(guard.owner()).await.unwrap());
    let c = client
        .group_lock("g", ["c"].map(GroupValue::string))
        .unwrap();
    let c_guard = c.try_lock().await.unwrap().expect("c is free");
    assert!(bc.is_locked().await.unwrap());
    let mut expected = holds(&["a", "b"], &me, 2);
    expected.extend(holds(&["c"], &c_guard.field(), 1));
    assert_eq!(hash(&raw, "g", lease).await, expected);
    c_guard.unlock().await.unwrap();

    assert_eq!(inner.unlock().await.unwrap(), Unlocked::StillHeld);
    assert_eq!(hash(&raw, "g", lease).await, holds(&["a", "b"], &me, 1));
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    let left: i64 = raw.exists("g").await.unwrap();
    assert_eq!(left, 0, "the last release empties the hash");
    assert!(!ab.is_locked().await.unwrap());

    // An explicit owner re-enters the same values, but not overlapping ones.
    let clerk = OwnerId::new(4).unwrap();
    let held = ab.with_owner(clerk).lock().await.unwrap();
    let again = ab.with_owner(clerk).lock().await.unwrap();
    let refused = bc.with_owner(clerk).try_lock().await;
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    assert_eq!(again.unlock().await.unwrap(), Unlocked::StillHeld);
    assert_eq!(held.unlock().await.unwrap(), Unlocked::Released);
    // No values, no lock.
    let none: [GroupValue; 0] = [];
    assert!(matches!(
        client.group_lock("g", none),
        Err(Error::InvalidArgument(_))
    ));
    client.shutdown().await;
}

/// Waiters of different values of one group share its channel: a release
/// wakes every one of them, so the waiter whose value it freed goes on at
/// once (a wake-up of one waiter could pick the other, which would then
/// sleep for the whole of the remaining lease: longer than this test waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiter_of_the_value_it_freed() {
    let server = RedisServer::start().await;
    let holders = client(&server, Duration::from_secs(30)).await;
    let waiters = client(&server, Duration::from_secs(30)).await;
    let lease = Duration::from_secs(120);
    let held_a = holders
        .group_lock("seats", ["a"].map(GroupValue::string))
        .unwrap()
        .acquire()
        .lease(lease)
        .await
        .unwrap();
    let held_b = holders
        .group_lock("seats", ["b"].map(GroupValue::string))
        .unwrap()
        .acquire()
        .lease(lease)
        .await
        .unwrap();
    let raw = server.raw().await;
    let scripts =
        || async { command_calls(&raw, "evalsha").await + command_calls(&raw, "eval").await };
    let before = scripts().await;
    let mut tasks = vec![];
    for value in ["a", "b"] {
        let lock = waiters
            .group_lock("seats", [GroupValue::string(value)])
            .unwrap();
        tasks.push(tokio::spawn(async move { lock.lock().await }));
    }
    await_subscribers(&server, "redisson_lock__channel:{seats}", 1).await;
    // Both waiters made their attempt after subscribing (and sleep until a
    // message or their 120 s): two scripts each ran.
    within("both waiters asleep", async {
        while scripts().await < before + 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    for (held, task) in [held_b, held_a].into_iter().zip(tasks.into_iter().rev()) {
        held.unlock().await.unwrap();
        let guard = within("the freed value's waiter", task)
            .await
            .unwrap()
            .unwrap();
        guard.unlock().await.unwrap();
    }
    holders.shutdown().await;
    waiters.shutdown().await;
}

/// The watchdog keeps every value's hold ahead of the clock, and a force
/// unlock frees them for everyone.
#[tokio::test]
async fn the_watchdog_renews_every_value_and_force_unlock_frees_them() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_millis(600)).await;
    let other = common::client(&server, Duration::from_secs(30)).await;
    let lock = client
        .group_lock("renewed", ["x", "y"].map(GroupValue::string))
        .unwrap();
    let guard = lock.lock().await.unwrap();
    let h = value_field(b"x");
    let field = format!("{h}:{}:expire_time", guard.field());
    let first: i64 = raw.hget("renewed", &field).await.unwrap();
    // Several renewal cycles: well past the first lease.
    let mut cycles = client.watchdog_updates();
    within("renewals", async {
        while cycles.borrow().renewed < 4 {
            cycles.changed().await.unwrap();
        }
    })
    .await;
    let renewed: i64 = raw.hget("renewed", &field).await.unwrap();
    assert!(renewed > first, "{renewed} <= {first}");
    assert!(!guard.is_lost());
    let rival = other
        .group_lock("renewed", ["y"].map(GroupValue::string))
        .unwrap();
    assert!(rival.try_lock().await.unwrap().is_none());

    assert!(rival.force_unlock().await.unwrap());
    let taken = rival.try_lock().await.unwrap().expect("y was freed");
    // The guard finds out at its next renewal: its hold on y is gone.
    within("the holder hears of it", guard.lost()).await;
    assert!(matches!(guard.unlock().await, Err(Error::LockLost { .. })));
    // Its unlock still released x, which is its own.
    assert!(other
        .group_lock("renewed", ["x"].map(GroupValue::string))
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_some());
    taken.unlock().await.unwrap();
    assert!(
        !rival.force_unlock().await.unwrap(),
        "nothing left to force"
    );
    client.shutdown().await;
    other.shutdown().await;
}

/// An acquire whose reply is lost is resolved by reading the first value's
/// owner, end and count: the lock is ours, once.
#[tokio::test]
async fn a_lost_acquire_reply_is_resolved_by_reading_the_values() {
    let (server, proxy, client) = proxied(|_| {}).await;
    let raw = server.raw().await;
    warm_up(&server, &client).await;
    let lock = client
        .group_lock("lost", ["p", "q"].map(GroupValue::string))
        .unwrap();
    lock.try_lock()
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    latches_settled(&server, &client).await;
    let cycles = watchdog_cycles(&client);
    proxy.drop_next_reply();
    let guard = lock.lock().await.unwrap();
    assert!(
        proxy.dropped()[0].ends_with("$-1\r\n"),
        "{:?}",
        proxy.dropped()
    );
    assert_eq!(guard.hold_count().await.unwrap(), 1);
    let count_of = |value: &'static [u8]| {
        let field = format!("{}:{}:lock_count", value_field(value), guard.field());
        let raw = raw.clone();
        async move { raw.hget::<String, _, _>("lost", field).await.unwrap() }
    };
    assert_eq!(
        (count_of(b"p").await, count_of(b"q").await),
        ("1".into(), "1".into())
    );
    // A re-entry whose reply is lost: 2, not 3.
    renewal_after_reconnect(&client, cycles).await;
    proxy.drop_next_reply();
    let inner = guard.scope(lock.lock()).await.unwrap();
    assert!(
        proxy.dropped()[1].ends_with("$-1\r\n"),
        "{:?}",
        proxy.dropped()
    );
    assert_eq!(
        (count_of(b"p").await, count_of(b"q").await),
        ("2".into(), "2".into())
    );
    assert_eq!(inner.unlock().await.unwrap(), Unlocked::StillHeld);
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    let left: i64 = raw.exists("lost").await.unwrap();
    assert_eq!(left, 0);
}

/// Java's `getMultiLock(group, values)` with `StringCodec` and Rust's
/// `group_lock(group, values)` write the same fields, exclude each other on
/// shared values, and wake each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_group_locks_share_values() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java =
            JavaPeer::start_with_codec(profile, version, &server.url(), 30_000, "string").await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let java_field = |tid: u64| format!("{}:{tid}", java.client_id);

        // Java holds a and b: the hash is what Rust would write.
        java.ok("groupLock g/a,b 1 60000").await;
        assert_eq!(
            hash(&raw, "g", Duration::from_secs(60)).await,
            holds(&["a", "b"], &java_field(1), 1),
            "{version}"
        );
        let bc = rust
            .group_lock("g", ["b", "c"].map(GroupValue::string))
            .unwrap();
        assert!(bc.try_lock().await.unwrap().is_none(), "{version}");
        assert!(bc.is_locked().await.unwrap());
        let c = rust
            .group_lock("g", ["c"].map(GroupValue::string))
            .unwrap()
            .try_lock()
            .await
            .unwrap();
        c.expect("c is free").unlock().await.unwrap();
        // A Rust waiter for b and c, woken by Java's release.
        let waiter = {
            let bc = bc.clone();
            tokio::spawn(async move { bc.lock().await })
        };
        await_subscribers(&server, "redisson_lock__channel:{g}", 1).await;
        java.ok("groupUnlock g/a,b 1").await;
        let guard = within("Java's release wakes the Rust waiter", waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            hash(&raw, "g", Duration::from_secs(30)).await,
            holds(&["b", "c"], &guard.field(), 1)
        );

        // Rust holds b and c: Java reads it, fails to take b, and waits.
        assert_eq!(java.ok("groupIsLocked g/b").await, "true", "{version}");
        assert_eq!(java.ok("groupIsLocked g/a").await, "false");
        assert_eq!(java.ok("groupTryLock g/a,b 2 0 60000").await, "false");
        assert_eq!(java.ok("groupTryLock g/a 2 0 60000").await, "true");
        java.ok("groupUnlock g/a 2").await;
        let scripts = java::scripts_run(&raw).await;
        let java_waits = java.send("groupTryLock g/a,b 3 30000 60000").await;
        java::java_is_waiting(&java, &server, &raw, "redisson_lock__channel:{g}", scripts).await;
        assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
        let taken = within("Rust's release wakes the Java waiter", java_waits)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(taken, "true", "{version}");

        // Rust's force unlock frees Java's hold, and the reverse.
        assert!(bc.force_unlock().await.unwrap());
        assert_eq!(java.ok("groupIsLocked g/b").await, "false");
        assert_eq!(java.ok("groupIsLocked g/a").await, "true", "a is not bc's");
        java.ok("groupForceUnlock g/a").await;
        let ab = rust
            .group_lock("g", ["a", "b"].map(GroupValue::string))
            .unwrap();
        let guard = ab.try_lock().await.unwrap().expect("all free");
        assert_eq!(
            java.ok("groupForceUnlock g/a,b").await,
            "false",
            "two values"
        );
        assert!(!ab.is_locked().await.unwrap());
        drop(guard);
        java.quit().await;
        rust.shutdown().await;
    }
}

/// A JVM client on Redisson's default codec, Kryo5Codec, hashes a String's
/// Kryo framing: Rust shares its values through `naming::kryo5_string`, and
/// the plain bytes are another value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jvm_on_the_default_codec_shares_kryo_framed_values() {
    let (profile, version) = NEWEST_VERSIONS[0];
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let java = JavaPeer::start_with_codec(profile, version, &server.url(), 30_000, "default").await;
    let rust: RedissonClient = client(&server, Duration::from_secs(30)).await;
    java.ok("groupLock k/student:001,é 1 60000").await;
    let fields: HashMap<String, String> = raw.hgetall("k").await.unwrap();
    for value in ["student:001", "é"] {
        assert!(
            fields.contains_key(&value_field(&kryo5_string(value))),
            "{value}: {fields:?}"
        );
    }
    let framed = rust.group_lock("k", [GroupValue::kryo5("é")]).unwrap();
    assert!(framed.try_lock().await.unwrap().is_none(), "{version}");
    let plain = rust.group_lock("k", ["é"].map(GroupValue::string)).unwrap();
    plain
        .try_lock()
        .await
        .unwrap()
        .expect("another value")
        .unlock()
        .await
        .unwrap();
    java.ok("groupUnlock k/student:001,é 1").await;
    framed
        .try_lock()
        .await
        .unwrap()
        .expect("released")
        .unlock()
        .await
        .unwrap();
    java.quit().await;
    rust.shutdown().await;
}

/// Values the JVM-computed fixtures did not cover: 32 bytes and more (the
/// HighwayHash of a full 32-byte packet and a remainder), a String longer
/// than Kryo's short form, and non-ASCII text (Kryo's UTF-16 framing,
/// surrogate pairs included), under both codecs. The Rust side names each
/// value with its codec and lands on the fields Redisson 4.7.0 writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_and_non_ascii_values_match_the_jvm_under_both_codecs() {
    let (profile, version) = NEWEST_VERSIONS[0];
    let values = [
        "student-0123456789-0123456789-0123456789-end",
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ",
        "Grüße-世界-😀",
    ];
    for codec in ["string", "default"] {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start_with_codec(profile, version, &server.url(), 30_000, codec).await;
        let rust: RedissonClient = client(&server, Duration::from_secs(30)).await;
        let named = |v: &str| match codec {
            "string" => GroupValue::string(v),
            _ => GroupValue::kryo5(v),
        };
        java.ok(&format!("groupLock long/{} 1 60000", values.join(",")))
            .await;
        let fields: HashMap<String, String> = raw.hgetall("long").await.unwrap();
        for value in values {
            let value = named(value);
            assert!(value.encoded().len() >= 16, "{codec}");
            assert!(
                fields.contains_key(&value.field()),
                "{codec} {value:?}: {fields:?}"
            );
        }
        let same = rust.group_lock("long", values.map(named)).unwrap();
        assert!(same.try_lock().await.unwrap().is_none(), "{codec}");
        java.ok(&format!("groupUnlock long/{} 1", values.join(",")))
            .await;
        same.try_lock()
            .await
            .unwrap()
            .expect("released by Java")
            .unlock()
            .await
            .unwrap();
        java.quit().await;
        rust.shutdown().await;
    }
}
