//! Non-reentrant locks (Redisson 4.4's `getNonReentrantLock` and
//! `getNonReentrantFairLock`): a re-entry is refused at once and changes
//! nothing; everyone else is excluded as by an RLock or a fair lock; and
//! JVM Redisson 4.7.0 shares them.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::java::{newest_versions, JavaPeer, NEWEST_VERSIONS};
use common::*;
use fred::prelude::*;
use redisson_lock::kind::Kind;
use redisson_lock::{Error, Lock, LockGuard, OwnerId, Unlocked};

/// `result` is the refusal of a re-entry by `field` into `name`.
fn refused<T: std::fmt::Debug>(result: redisson_lock::Result<T>, name: &str, field: &str) {
    match result {
        Err(Error::AlreadyHeld {
            name: n, field: f, ..
        }) => {
            assert_eq!((n.as_str(), f.as_str()), (name, field));
        }
        other => panic!("expected AlreadyHeld for {field} on {name}, got {other:?}"),
    }
}

async fn count(raw: &Client, name: &str, field: &str) -> Option<String> {
    raw.hget(name, field).await.unwrap()
}

/// Locks of either non-reentrant kind.
trait NonReentrant: Kind<Guard = LockGuard> {}
impl NonReentrant for redisson_lock::kind::NonReentrant {}
impl NonReentrant for redisson_lock::kind::NonReentrantFair {}

/// Inside the guard's scope, `lock`, `try_lock` and `try_lock_for` are
/// refused before anything is sent (no script runs, so nothing waits) and
/// leave the hold count at 1; another owner is excluded.
async fn refuses_reentry<K: NonReentrant>(lock: &Lock<K>, raw: &Client, fair: bool) {
    let name = lock.name().to_string();
    let guard = lock.lock().await.unwrap();
    let field = guard.field();
    let scripts = command_calls(raw, "evalsha").await;
    refused(guard.scope(lock.lock()).await, &name, &field);
    refused(guard.scope(lock.try_lock()).await, &name, &field);
    let waited = guard
        .scope(lock.try_lock_for(Duration::from_secs(60)))
        .await;
    refused(waited, &name, &field);
    assert_eq!(command_calls(raw, "evalsha").await, scripts, "{name}");
    assert_eq!(count(raw, &name, &field).await.as_deref(), Some("1"));
    if fair {
        let queue: i64 = raw
            .exists(redisson_lock::naming::fair_queue_name(&name))
            .await
            .unwrap();
        assert_eq!(queue, 0, "a refused re-entry never queues");
    }
    assert!(lock.try_lock().await.unwrap().is_none(), "{name}");
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    let left: i64 = raw.exists(&name).await.unwrap();
    assert_eq!(left, 0, "{name}");
}

#[tokio::test]
async fn a_re_entry_is_refused_at_once_and_changes_nothing() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    refuses_reentry(&client.non_reentrant_lock("nr:plain").unwrap(), &raw, false).await;
    refuses_reentry(
        &client.non_reentrant_fair_lock("nr:fair").unwrap(),
        &raw,
        true,
    )
    .await;
    // An RLock of another owner is excluded as well.
    let nr = client.non_reentrant_lock("nr:rlock").unwrap();
    let guard = nr.lock().await.unwrap();
    assert!(client
        .lock("nr:rlock")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();

    // The same explicit owner: refused too, by the client's own record.
    let lock = client.non_reentrant_lock("nr:owner").unwrap();
    let clerk = lock.with_owner(OwnerId::new(5).unwrap());
    let held = clerk.lock().await.unwrap();
    refused(clerk.try_lock().await, "nr:owner", &held.field());
    assert_eq!(clerk.hold_count().await.unwrap(), 1);
    held.unlock().await.unwrap();

    // An RLock (or fair lock) of the same name and owner holds the field:
    // refused by the client's own record (holds are counted per field,
    // whatever the kind), so nothing is sent.
    for fair in [false, true] {
        let name = if fair { "nr:shared-fair" } else { "nr:shared" };
        let owner = OwnerId::new(9).unwrap();
        let reentrant = if fair {
            client
                .fair_lock(name)
                .unwrap()
                .with_owner(owner)
                .lock()
                .await
        } else {
            client.lock(name).unwrap().with_owner(owner).lock().await
        }
        .unwrap();
        let field = reentrant.field();
        let scripts = command_calls(&raw, "evalsha").await + command_calls(&raw, "eval").await;
        let refusal = if fair {
            let nr = client.non_reentrant_fair_lock(name).unwrap();
            nr.with_owner(owner)
                .try_lock_for(Duration::from_secs(60))
                .await
                .map(drop)
        } else {
            let nr = client.non_reentrant_lock(name).unwrap();
            nr.with_owner(owner).lock().await.map(drop)
        };
        refused(refusal, name, &field);
        let sent = command_calls(&raw, "evalsha").await + command_calls(&raw, "eval").await;
        assert_eq!(sent, scripts, "{name}: refused before sending");
        assert_eq!(count(&raw, name, &field).await.as_deref(), Some("1"));
        assert_eq!(reentrant.unlock().await.unwrap(), Unlocked::Released);
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_rust_non_reentrant_locks_exclude_each_other() {
    // Non-reentrant locks exist from Redisson 4.4 on.
    let (profile, version) = NEWEST_VERSIONS[0];
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
    let rust = client(&server, Duration::from_secs(30)).await;
    java_excludes(
        &java,
        &server,
        &raw,
        &rust.non_reentrant_lock("shared:nr").unwrap(),
        "nr",
    )
    .await;
    java_excludes(
        &java,
        &server,
        &raw,
        &rust.non_reentrant_fair_lock("shared:nrf").unwrap(),
        "nrf",
    )
    .await;
    java.quit().await;
    rust.shutdown().await;
}

/// Waits until a fair lock's queue is `fields`.
async fn queue_is(raw: &Client, name: &str, fields: &[String]) {
    within("the queue", async {
        loop {
            let queued: Vec<String> = raw
                .lrange(redisson_lock::naming::fair_queue_name(name), 0, -1)
                .await
                .unwrap();
            if queued == fields {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// Java (commands `<prefix>Lock` ...) and Rust's `lock` exclude each other
/// both ways, wake each other, and each side's re-entry is refused.
async fn java_excludes<K: NonReentrant>(
    java: &JavaPeer,
    server: &RedisServer,
    raw: &Client,
    lock: &Lock<K>,
    prefix: &str,
) {
    let name = lock.name().to_string();
    let fair = prefix == "nrf";
    let java_field = |tid: u64| format!("{}:{tid}", java.client_id);
    let cmd = |op: &str, args: &str| format!("{prefix}{op} {name} {args}");

    // Java holds; a Rust try fails, a Rust lock waits for Java's unlock.
    java.ok(&cmd("Lock", "1 -1")).await;
    assert!(lock.try_lock().await.unwrap().is_none(), "{name}");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await })
    };
    if fair {
        within("the Rust waiter queued", async {
            while raw
                .llen::<usize, _>(redisson_lock::naming::fair_queue_name(&name))
                .await
                .unwrap()
                == 0
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    } else {
        await_subscribers(server, &redisson_lock::naming::channel_name(&name), 1).await;
    }
    // Java's re-entry is refused, as Redisson does, and changes nothing.
    let again = java.call(&cmd("Lock", "1 -1")).await;
    assert!(
        again
            .as_ref()
            .is_err_and(|e| e.starts_with("IllegalMonitorStateException")),
        "{name}: {again:?}"
    );
    let again = java.call(&cmd("TryLock", "1 0 -1")).await;
    assert!(
        again
            .as_ref()
            .is_err_and(|e| e.starts_with("IllegalMonitorStateException")),
        "{name}: {again:?}"
    );
    assert_eq!(java.ok(&format!("holdCount {name} 1")).await, "1");
    java.ok(&cmd("Unlock", "1")).await;
    let guard = within("Java's unlock wakes the Rust waiter", waiter)
        .await
        .unwrap()
        .unwrap();

    // Rust holds; Java's try fails and its lock waits for Rust's unlock.
    assert_eq!(java.ok(&cmd("TryLock", "2 0 -1")).await, "false");
    let scripts = java::scripts_run(raw).await;
    let java_waits = java.send(&cmd("Lock", "2 -1")).await;
    if fair {
        queue_is(raw, &name, &[java_field(2)]).await;
    } else {
        let channel = redisson_lock::naming::channel_name(&name);
        java::java_is_waiting(java, server, raw, &channel, scripts).await;
    }
    // Rust's re-entry is refused while Java waits.
    refused(guard.scope(lock.lock()).await, &name, &guard.field());
    guard.unlock().await.unwrap();
    within("Rust's unlock wakes the Java waiter", java_waits)
        .await
        .unwrap()
        .unwrap();
    let held: Vec<String> = raw.hkeys(&name).await.unwrap();
    assert_eq!(held, [java_field(2)], "{name}");
    java.ok(&cmd("Unlock", "2")).await;
}

/// A Java `getLock` and a Rust non-reentrant lock of the same name are one
/// lock (the non-reentrant lock writes RLock's data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_rlock_and_a_rust_non_reentrant_lock_exclude_each_other() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let nr = rust.non_reentrant_lock("mixed").unwrap();

        java.ok("lock mixed 1 -1").await;
        assert!(nr.try_lock().await.unwrap().is_none(), "{version}");
        let waiter = {
            let nr = nr.clone();
            tokio::spawn(async move { nr.lock().await })
        };
        await_subscribers(&server, "redisson_lock__channel:{mixed}", 1).await;
        java.ok("unlock mixed 1").await;
        let guard = within("Java's unlock wakes the Rust waiter", waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(java.ok("tryLock mixed 2 0 -1").await, "false", "{version}");
        assert_eq!(java.ok("isLocked mixed").await, "true");
        let scripts = java::scripts_run(&raw).await;
        let java_waits = java.send("lock mixed 2 -1").await;
        java::java_is_waiting(
            &java,
            &server,
            &raw,
            "redisson_lock__channel:{mixed}",
            scripts,
        )
        .await;
        guard.unlock().await.unwrap();
        within("Rust's unlock wakes the Java waiter", java_waits)
            .await
            .unwrap()
            .unwrap();
        java.ok("unlock mixed 2").await;
        java.quit().await;
        rust.shutdown().await;
    }
}
