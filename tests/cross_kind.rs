//! One owner holding a lock name through several kinds at once: an RLock, a
//! fair lock, a fenced lock and the non-reentrant locks of one name all write
//! the owner's field of the same hash, and Redis counts their holds together.
//! Releasing one of them must leave the others held, as Redisson does in one
//! thread (`{T: 2}` -> `{T: 1}`); the read lock, which writes the same field
//! with another protocol, is refused instead of corrupting the count.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::java::{JavaPeer, NEWEST_VERSIONS};
use common::*;
use fred::prelude::*;
use redisson_lock::{Error, LockGuard, OwnerId, RedissonClient, Unlocked};

async fn count(raw: &Client, name: &str, field: &str) -> Option<String> {
    raw.hget(name, field).await.unwrap()
}

/// After the inner hold of another kind is released: the outer one is still
/// held on Redis (count 1, another owner excluded), renewed by the watchdog,
/// not lost, and its own unlock releases the lock.
async fn outer_survives(
    client: &RedissonClient,
    raw: &Client,
    name: &str,
    outer: LockGuard,
    field: &str,
) {
    assert_eq!(
        count(raw, name, field).await.as_deref(),
        Some("1"),
        "{name}"
    );
    let other = client.lock(name).unwrap();
    assert!(
        other.try_lock().await.unwrap().is_none(),
        "{name}: excluded"
    );
    // A whole watchdog cycle later it is still held and renewed.
    let mut updates = client.watchdog_updates();
    let cycles = updates.borrow().cycles;
    within(
        "a watchdog cycle",
        updates.wait_for(|s| s.cycles > cycles + 1),
    )
    .await
    .unwrap();
    assert!(!outer.is_lost(), "{name}: the outer hold is not lost");
    assert_eq!(
        count(raw, name, field).await.as_deref(),
        Some("1"),
        "{name}"
    );
    assert_eq!(outer.unlock().await.unwrap(), Unlocked::Released, "{name}");
    let left: i64 = raw.exists(name).await.unwrap();
    assert_eq!(left, 0, "{name}: released by the outer unlock");
}

#[tokio::test]
async fn releasing_one_kinds_hold_keeps_the_same_owners_other_hold() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(3)).await;
    let owner = OwnerId::new(7).unwrap();

    // A non-reentrant lock, then an RLock of the same name and owner.
    let name = "xk:nr-then-rlock";
    let outer = client
        .non_reentrant_lock(name)
        .unwrap()
        .with_owner(owner)
        .lock()
        .await
        .unwrap();
    let field = outer.field();
    let inner = client.lock(name).unwrap().with_owner(owner).lock().await;
    let inner = inner.unwrap();
    assert_eq!(count(&raw, name, &field).await.as_deref(), Some("2"));
    assert_eq!(inner.unlock().await.unwrap(), Unlocked::StillHeld);
    outer_survives(&client, &raw, name, outer, &field).await;

    // An RLock, then a fair lock of the same name and owner.
    let name = "xk:rlock-then-fair";
    let outer = client
        .lock(name)
        .unwrap()
        .with_owner(owner)
        .lock()
        .await
        .unwrap();
    let field = outer.field();
    let fair = client.fair_lock(name).unwrap().with_owner(owner);
    let inner = fair.try_lock().await.unwrap().expect("re-entered");
    assert_eq!(count(&raw, name, &field).await.as_deref(), Some("2"));
    assert_eq!(inner.unlock().await.unwrap(), Unlocked::StillHeld);
    outer_survives(&client, &raw, name, outer, &field).await;

    // A fair lock taken inside an RLock guard's scope re-enters its owner.
    let name = "xk:fair-in-scope";
    let rlock = client.lock(name).unwrap();
    let outer = rlock.lock().await.unwrap();
    let field = outer.field();
    let inner = outer
        .scope(client.fair_lock(name).unwrap().lock())
        .await
        .unwrap();
    assert_eq!(inner.owner(), outer.owner());
    assert_eq!(count(&raw, name, &field).await.as_deref(), Some("2"));
    assert_eq!(inner.unlock().await.unwrap(), Unlocked::StillHeld);
    outer_survives(&client, &raw, name, outer, &field).await;

    // A fenced lock over a non-reentrant fair lock: the same.
    let name = "xk:nrf-then-fenced";
    let outer = client
        .non_reentrant_fair_lock(name)
        .unwrap()
        .with_owner(owner)
        .lock()
        .await
        .unwrap();
    let field = outer.field();
    let fenced = client.fenced_lock(name).unwrap().with_owner(owner);
    let inner = fenced.lock().await.unwrap();
    assert_eq!(count(&raw, name, &field).await.as_deref(), Some("2"));
    assert_eq!(inner.unlock().await.unwrap(), Unlocked::StillHeld);
    outer_survives(&client, &raw, name, outer, &field).await;
    client.shutdown().await;
}

#[tokio::test]
async fn dropping_one_kinds_guard_keeps_the_other_hold() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(3)).await;
    let name = "xk:dropped";
    let owner = OwnerId::new(11).unwrap();
    let outer = client
        .lock(name)
        .unwrap()
        .with_owner(owner)
        .lock()
        .await
        .unwrap();
    let field = outer.field();
    let nr = client.non_reentrant_lock(name).unwrap().with_owner(owner);
    // The non-reentrant lock refuses this owner: it already holds the field.
    assert!(matches!(
        nr.try_lock().await,
        Err(Error::AlreadyHeld { .. })
    ));
    let fair = client.fair_lock(name).unwrap().with_owner(owner);
    drop(fair.lock().await.unwrap());
    // The dropped guard's release runs in the background: its one hold
    // goes, the RLock's stays.
    common::topology::until("the dropped guard released its hold", || async {
        count(&raw, name, &field).await.as_deref() == Some("1")
    })
    .await;
    outer_survives(&client, &raw, name, outer, &field).await;
    client.shutdown().await;
}

#[tokio::test]
async fn a_read_lock_over_the_same_owners_rlock_is_refused_and_sends_nothing() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let name = "xk:read-over-rlock";
    let owner = OwnerId::new(3).unwrap();
    let held = client
        .lock(name)
        .unwrap()
        .with_owner(owner)
        .lock()
        .await
        .unwrap();
    let field = held.field();
    let scripts = command_calls(&raw, "evalsha").await + command_calls(&raw, "eval").await;
    let read = client
        .read_write_lock(name)
        .unwrap()
        .with_owner(owner)
        .read();
    match read.try_lock().await {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("same hash field"), "{why}"),
        other => panic!(
            "expected InvalidArgument, got {:?}",
            other.map(|g| g.is_some())
        ),
    }
    let sent = command_calls(&raw, "evalsha").await + command_calls(&raw, "eval").await;
    assert_eq!(sent, scripts, "nothing was sent");
    assert_eq!(count(&raw, name, &field).await.as_deref(), Some("1"));
    let mode: Option<String> = raw.hget(name, "mode").await.unwrap();
    assert_eq!(mode, None);
    assert_eq!(held.unlock().await.unwrap(), Unlocked::Released);
    client.shutdown().await;
}

/// A lock kind both sides take: the peer's command prefix, and the crate's.
#[derive(Clone, Copy, Debug)]
enum Taken {
    RLock,
    Fair,
    NonReentrant,
}

impl Taken {
    /// The peer's command for `op` ("lock", "unlock") on this kind: a
    /// one-letter prefix as is ("flock"), a longer one in camel case ("nrLock").
    fn java(self, op: &str) -> String {
        match self {
            Taken::RLock => op.to_string(),
            Taken::Fair => format!("f{op}"),
            Taken::NonReentrant => format!("nr{}{}", op[..1].to_uppercase(), &op[1..]),
        }
    }

    async fn lock(self, rust: &RedissonClient, name: &str, owner: OwnerId) -> LockGuard {
        match self {
            Taken::RLock => rust.lock(name).unwrap().with_owner(owner).lock().await,
            Taken::Fair => rust.fair_lock(name).unwrap().with_owner(owner).lock().await,
            Taken::NonReentrant => {
                rust.non_reentrant_lock(name)
                    .unwrap()
                    .with_owner(owner)
                    .lock()
                    .await
            }
        }
        .unwrap()
    }
}

/// The same sequences on both sides, one thread / one owner: a lock of one
/// kind, then one of another kind of the same name, the inner one's unlock,
/// the outer one's unlock (a non-reentrant lock then an RLock; an RLock then
/// a fair lock). Redisson 4.7.0 and the crate leave the same counts on Redis,
/// and Java sees the Rust lock held by its remaining hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jvm_counts_cross_kind_holds_as_the_crate_does() {
    let (profile, version) = NEWEST_VERSIONS[0];
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
    let rust = client(&server, Duration::from_secs(30)).await;

    for (outer_kind, inner_kind) in [
        (Taken::NonReentrant, Taken::RLock),
        (Taken::RLock, Taken::Fair),
    ] {
        let jname = format!("xk:jvm:{outer_kind:?}:{inner_kind:?}");
        let jfield = format!("{}:7", java.client_id);
        let mut java_counts = vec![];
        java.ok(&format!("{} {jname} 7 -1", outer_kind.java("lock")))
            .await;
        java.ok(&format!("{} {jname} 7 -1", inner_kind.java("lock")))
            .await;
        java_counts.push(count(&raw, &jname, &jfield).await);
        java.ok(&format!("{} {jname} 7", inner_kind.java("unlock")))
            .await;
        java_counts.push(count(&raw, &jname, &jfield).await);
        assert_eq!(java.ok(&format!("isLocked {jname}")).await, "true");
        java.ok(&format!("{} {jname} 7", outer_kind.java("unlock")))
            .await;
        java_counts.push(count(&raw, &jname, &jfield).await);

        let rname = format!("xk:rust:{outer_kind:?}:{inner_kind:?}");
        let owner = OwnerId::new(7).unwrap();
        let mut rust_counts = vec![];
        let outer = outer_kind.lock(&rust, &rname, owner).await;
        let rfield = outer.field();
        let inner = inner_kind.lock(&rust, &rname, owner).await;
        rust_counts.push(count(&raw, &rname, &rfield).await);
        assert_eq!(inner.unlock().await.unwrap(), Unlocked::StillHeld);
        rust_counts.push(count(&raw, &rname, &rfield).await);
        // Java sees the Rust lock held by its remaining hold.
        assert_eq!(java.ok(&format!("isLocked {rname}")).await, "true");
        assert_eq!(java.ok(&format!("tryLock {rname} 1 0 -1")).await, "false");
        assert_eq!(outer.unlock().await.unwrap(), Unlocked::Released);
        rust_counts.push(count(&raw, &rname, &rfield).await);

        let expected = vec![Some("2".to_string()), Some("1".to_string()), None];
        let sequence = format!("{outer_kind:?} then {inner_kind:?}");
        assert_eq!(java_counts, expected, "Redisson {version}, {sequence}");
        assert_eq!(rust_counts, expected, "{sequence}");
    }
    java.quit().await;
    rust.shutdown().await;
}
