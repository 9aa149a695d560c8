//! The state on Redis after each lock operation is exactly Redisson's.

use redisson_lock_testkit as common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use fred::prelude::*;
use redisson_lock::{Error, OwnerId, Ttl, Unlocked};

#[tokio::test]
async fn acquire_reenter_partial_and_full_unlock_leave_redissons_state() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "EA"]).await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    assert!(uuid::Uuid::parse_str(client.id()).is_ok_and(|u| u.get_version_num() == 4));
    let lock = client.lock("orders:42").unwrap();
    assert_eq!(lock.channel(), "redisson_lock__channel:{orders:42}");
    let mut events = Observer::new(
        &server,
        &[
            "redisson_lock__channel:{orders:42}",
            "__keyevent@0__:set",
            "__keyevent@0__:del",
        ],
        &[],
    )
    .await;

    let outer = lock.lock().await.unwrap();
    let field = format!("{}:{}", client.id(), outer.owner());
    assert_eq!(outer.field(), field);
    let hash: HashMap<String, String> = raw.hgetall("orders:42").await.unwrap();
    assert_eq!(hash, HashMap::from([(field.clone(), "1".to_string())]));
    let pttl: i64 = raw.pttl("orders:42").await.unwrap();
    assert!((25_000..=30_000).contains(&pttl), "pttl {pttl}");

    // Re-entry by the same owner (inside the holder's scope): count 2, TTL
    // reset to the lease.
    raw.pexpire::<(), _>("orders:42", 5_000, None)
        .await
        .unwrap();
    let inner = outer.scope(lock.lock()).await.unwrap();
    assert_eq!(inner.owner(), outer.owner());
    let count: String = raw.hget("orders:42", &field).await.unwrap();
    assert_eq!(count, "2");
    assert!(raw.pttl::<i64, _>("orders:42").await.unwrap() > 25_000);
    assert_eq!(inner.hold_count().await.unwrap(), 2);
    assert_eq!(outer.scope(lock.hold_count()).await.unwrap(), 2);

    // Partial unlock: count 1, the latch is written then deleted, no message.
    assert_eq!(inner.unlock().await.unwrap(), Unlocked::StillHeld);
    let count: String = raw.hget("orders:42", &field).await.unwrap();
    assert_eq!(count, "1");
    let latch_set = |(c, k): &(String, String)| {
        c == "__keyevent@0__:set" && k.starts_with("redisson_unlock_latch:{orders:42}:")
    };
    let seen = events.until(latch_set).await;
    let latch = seen.last().unwrap().1.clone();
    let request_id = latch.rsplit(':').next().unwrap();
    assert_eq!(request_id.len(), 32);
    assert!(request_id
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    let seen = events
        .until(|(c, k)| c == "__keyevent@0__:del" && *k == latch)
        .await;
    assert!(
        seen.iter().all(|(c, _)| c.starts_with("__keyevent")),
        "no unlock message at a partial unlock: {seen:?}"
    );

    // Full unlock: key gone, `0` published, latch written then deleted.
    assert_eq!(outer.unlock().await.unwrap(), Unlocked::Released);
    assert_eq!(raw.exists::<i64, _>("orders:42").await.unwrap(), 0);
    // Expect, in any order across fred's two streams: the lock key deleted,
    // one `0` on the channel, the latch set and then deleted.
    let mut seen: Vec<(String, String)> = vec![];
    let done = |seen: &[(String, String)]| {
        let latch = seen.iter().find(|e| latch_set(e)).map(|e| e.1.clone());
        seen.iter()
            .any(|(c, _)| c == "redisson_lock__channel:{orders:42}")
            && seen.contains(&("__keyevent@0__:del".into(), "orders:42".into()))
            && latch.is_some_and(|l| seen.contains(&("__keyevent@0__:del".into(), l)))
    };
    while !done(&seen) {
        seen.push(events.next().await);
    }
    let messages: Vec<_> = seen
        .iter()
        .filter(|(c, _)| c == "redisson_lock__channel:{orders:42}")
        .collect();
    assert_eq!(
        messages,
        vec![&(
            "redisson_lock__channel:{orders:42}".to_string(),
            "0".to_string()
        )]
    );
    let rest = events.drain();
    assert!(rest.is_empty(), "nothing else happened: {rest:?}");
    assert_eq!(client.held_locks(), 0);
}

#[tokio::test]
async fn queries_report_holder_count_and_ttl() {
    let server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("q").unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(lock.remaining_ttl().await.unwrap(), Ttl::Absent);
    assert_eq!(lock.hold_count().await.unwrap(), 0);

    let guard = lock.acquire().lease(Duration::from_secs(20)).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    // Held by the guard's owner, which is the current owner only in its scope.
    assert!(guard.scope(lock.is_held()).await.unwrap());
    assert!(lock.is_held_by(guard.owner()).await.unwrap());
    assert!(!lock.is_held().await.unwrap());
    assert!(!lock.is_held_by(OwnerId::unique()).await.unwrap());
    assert!(!guard.is_renewed());
    match lock.remaining_ttl().await.unwrap() {
        Ttl::Expires(ttl) => {
            assert!(ttl > Duration::from_secs(15) && ttl <= Duration::from_secs(20))
        }
        other => panic!("unexpected {other:?}"),
    }
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn a_nested_lock_in_the_holders_scope_reenters_and_everyone_else_is_excluded() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("nested").unwrap();

    /// A function that takes the lock itself, called by one that holds it.
    async fn audit(lock: &redisson_lock::RLock) -> (u32, bool) {
        let again = lock.lock().await.unwrap(); // re-enters in the caller's scope
        let count = again.hold_count().await.unwrap();
        // Another task, and a sibling future outside the scope, are other owners.
        let l = lock.clone();
        let other_task = tokio::spawn(async move { l.try_lock().await.unwrap().is_some() })
            .await
            .unwrap();
        again.unlock().await.unwrap();
        (count, other_task)
    }

    let outer = lock.lock().await.unwrap();
    let sibling = async { lock.try_lock().await.unwrap().is_some() };
    let ((count, other_task), sibling) = tokio::join!(outer.scope(audit(&lock)), sibling);
    assert_eq!((count, other_task, sibling), (2, false, false));
    let field = outer.field();
    let left: String = raw.hget("nested", &field).await.unwrap();
    assert_eq!(left, "1");
    outer.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn an_explicit_owner_can_lock_in_one_task_and_unlock_in_another() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client
        .lock("handover")
        .unwrap()
        .with_owner(OwnerId::new(7).unwrap());
    let l = lock.clone();
    let guard = tokio::spawn(async move { l.lock().await.unwrap() })
        .await
        .unwrap();
    let field: Option<String> = raw
        .hget("handover", format!("{}:7", client.id()))
        .await
        .unwrap();
    assert_eq!(field.as_deref(), Some("1"));
    let l = lock.clone();
    let outcome = tokio::spawn(async move { l.unlock().await })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome, Unlocked::Released);
    // The guard's hold is gone, so releasing it again is refused without touching Redis.
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn force_unlock_deletes_publishes_and_tells_local_holders() {
    let server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let other = common::client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("forced").unwrap();
    let mut events = Observer::new(&server, &["redisson_lock__channel:{forced}"], &[]).await;
    let guard = lock.lock().await.unwrap();
    assert!(other.lock("forced").unwrap().force_unlock().await.unwrap());
    assert_eq!(
        events.next().await,
        ("redisson_lock__channel:{forced}".into(), "0".into())
    );
    assert!(!lock.is_locked().await.unwrap());
    // The holder learns at its next renewal; force_unlock through its own client tells it at once.
    let guard2 = lock.lock().await.unwrap();
    assert!(lock.force_unlock().await.unwrap());
    assert!(guard2.is_lost());
    assert!(!lock.force_unlock().await.unwrap());
    drop(guard);
}

/// An operator's precondition: a lock is forced open only while the holder
/// they inspected is still in it, checked inside the script, for every kind
/// whose waiters or holders differ (lock, fair, write, read, spin).
#[tokio::test]
async fn force_unlock_if_held_by_removes_only_that_holders_lock() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let operator = common::client(&server, Duration::from_secs(30)).await;
    let mut events = Observer::new(&server, &["redisson_lock__channel:{forced-if}"], &[]).await;
    let guard = holder.lock("forced-if").unwrap().lock().await.unwrap();
    let lock = operator.lock("forced-if").unwrap();
    let seen = lock.holders().await.unwrap();
    assert_eq!(seen.len(), 1);
    let (id, owner) = (seen[0].client_id.clone(), seen[0].owner.clone());

    // Bad input: refused before anything is sent.
    for (bad_id, bad_owner) in [("", owner.as_str()), (id.as_str(), "x"), ("a b", "1")] {
        let refused = lock.force_unlock_if_held_by(bad_id, bad_owner).await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
    }
    // Another holder (the one an operator saw before this one took it): kept.
    assert!(!lock.force_unlock_if_held_by(&id, "1").await.unwrap());
    assert!(!lock
        .force_unlock_if_held_by(operator.id(), &owner)
        .await
        .unwrap());
    assert_eq!(raw.exists::<i64, _>("forced-if").await.unwrap(), 1);
    assert!(!guard.is_lost());
    // The holder inspected: removed, and the waiters told.
    assert!(lock.force_unlock_if_held_by(&id, &owner).await.unwrap());
    assert_eq!(
        events.next().await,
        ("redisson_lock__channel:{forced-if}".into(), "0".into())
    );
    assert_eq!(raw.exists::<i64, _>("forced-if").await.unwrap(), 0);
    assert!(!lock.force_unlock_if_held_by(&id, &owner).await.unwrap());
    drop(guard);

    // The other kinds: each refuses another holder and removes its own.
    let fair = holder.fair_lock("fair-if").unwrap().lock().await.unwrap();
    let rw_write = holder.read_write_lock("write-if").unwrap();
    let write = rw_write.write().lock().await.unwrap();
    let rw_read = holder.read_write_lock("read-if").unwrap();
    let read = rw_read.read().lock().await.unwrap();
    let spin = holder.spin_lock("spin-if").unwrap().lock().await.unwrap();
    // One holder each: another owner of the same client is refused, the
    // holder read is removed.
    macro_rules! only_its_holder {
        ($lock:expr, $name:expr) => {{
            let lock = $lock;
            let seen = lock.holders().await.unwrap();
            assert_eq!(seen.len(), 1, $name);
            let (id, owner) = (&seen[0].client_id, &seen[0].owner);
            assert!(!lock.force_unlock_if_held_by(id, "1").await.unwrap(), $name);
            assert_eq!(raw.exists::<i64, _>($name).await.unwrap(), 1, $name);
            assert!(
                lock.force_unlock_if_held_by(id, owner).await.unwrap(),
                $name
            );
            assert_eq!(raw.exists::<i64, _>($name).await.unwrap(), 0, $name);
        }};
    }
    only_its_holder!(operator.fair_lock("fair-if").unwrap(), "fair-if");
    only_its_holder!(
        operator.read_write_lock("write-if").unwrap().write(),
        "write-if"
    );
    only_its_holder!(
        operator.read_write_lock("read-if").unwrap().read(),
        "read-if"
    );
    only_its_holder!(operator.spin_lock("spin-if").unwrap(), "spin-if");
    drop((fair, write, read, spin));
}

#[tokio::test]
async fn an_unlock_whose_caller_stops_waiting_is_finished_once() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let raw = server.raw().await;
    let client =
        redisson_lock::RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
            .await
            .unwrap();
    let lock = client.lock("abandoned").unwrap();
    // Warm the script cache so the unlock runs on its first send.
    lock.lock().await.unwrap().unlock().await.unwrap();
    let outer = lock.lock().await.unwrap();
    let inner = outer.scope(lock.lock()).await.unwrap();
    let field = inner.field();

    // The partial unlock runs on Redis (2 -> 1) but its reply is held back,
    // and the caller gives up on it (as a timeout around `unlock()` would).
    proxy.stall_replies();
    {
        let unlock = inner.unlock();
        futures::pin_mut!(unlock);
        drive_until(
            "the abandoned unlock runs on Redis",
            &mut unlock,
            || async {
                let count: Option<String> = raw.hget("abandoned", &field).await.unwrap();
                count.as_deref() == Some("1")
            },
        )
        .await;
    }
    proxy.resume_replies();
    // Finished in the background with the same request: replayed through the
    // latch, not applied twice. The outer hold still releases normally.
    assert_eq!(outer.unlock().await.unwrap(), Unlocked::Released);
    assert_eq!(raw.exists::<i64, _>("abandoned").await.unwrap(), 0);
    assert_eq!(client.held_locks(), 0);
}

#[tokio::test]
async fn holds_redis_counts_beyond_ours_are_drained_by_the_last_unlock() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("orphan").unwrap();
    let guard = lock.lock().await.unwrap();
    // Redis counts two more holds than this client tracks (e.g. re-acquired
    // after a local loss): the last local unlock must not leave them behind.
    let _: i64 = raw.hincrby("orphan", guard.field(), 2).await.unwrap();
    let mut events = Observer::new(&server, &["redisson_lock__channel:{orphan}"], &[]).await;
    // Redis still counts 2 after this release; they are given back in the background.
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::StillHeld);
    assert_eq!(events.next().await.1, "0");
    assert_eq!(raw.exists::<i64, _>("orphan").await.unwrap(), 0);
    assert_eq!(client.held_locks(), 0);
}

/// Issue 37 item 5: a re-entry abandoned after Redis counted it is given
/// back in the background (read the owner's count, unlock what exceeds the
/// holds tracked). If one of those unlocks releases the lock (someone took
/// a hold away between the read and the unlock), the holds this client
/// tracks went with it: the guard left is told it is lost. Before, the
/// give-back stopped there and the guard went on believing it held the
/// lock, not even at risk.
#[tokio::test]
async fn a_give_back_that_frees_the_lock_tells_the_guard_left() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let raw = server.raw().await;
    // The next renewal, which would find the lock gone too, is 40 s away:
    // past `within`'s bound, so only the give-back can tell.
    let client =
        redisson_lock::RedissonClient::connect(config(&proxy.url(), Duration::from_secs(120)))
            .await
            .unwrap();
    let lock = client.lock("handed").unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();
    let outer = lock.lock().await.unwrap();
    let field = outer.field();
    let count = || async {
        raw.hget::<Option<i64>, _, _>("handed", &field)
            .await
            .unwrap()
    };

    // The re-entry runs on Redis (1 -> 2), its reply held back, and its
    // caller gives up on it.
    proxy.stall_replies();
    {
        let reentry = outer.scope(lock.lock());
        futures::pin_mut!(reentry);
        drive_until("the re-entry runs on Redis", &mut reentry, || async {
            count().await == Some(2)
        })
        .await;
    }
    // The give-back's read of the count (2) is answered while its reply is
    // held; meanwhile one hold is taken away (1 left); then the reply goes.
    let reads = command_calls(&raw, "hget").await;
    proxy.stall_replies_from("HGET");
    proxy.resume_replies();
    common::topology::until("the give-back read the count", || async {
        command_calls(&raw, "hget").await > reads
    })
    .await;
    let _: i64 = raw.hincrby("handed", &field, -1).await.unwrap();
    proxy.resume_replies();

    // It gives back the one hold it believes untracked: that frees the lock.
    within("the guard left told it is lost", outer.lost()).await;
    assert!(outer.is_lost());
    assert_eq!(raw.exists::<i64, _>("handed").await.unwrap(), 0);
    assert!(matches!(
        outer.unlock().await,
        Err(Error::LockLost { .. } | Error::NotHeld { .. })
    ));
    client.shutdown().await;
}

#[tokio::test]
async fn a_reacquire_right_after_a_draining_unlock_keeps_its_hold() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    // One owner for both acquisitions.
    let lock = client
        .lock("orphan2")
        .unwrap()
        .with_owner(OwnerId::unique());
    let guard = lock.lock().await.unwrap();
    let field = guard.field();
    let _: i64 = raw.hincrby("orphan2", &field, 2).await.unwrap();
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::StillHeld);
    // The same owner takes it again while the untracked holds are being given
    // back: it waits for the drain, and its own hold survives it.
    let again = lock.lock().await.unwrap();
    assert_eq!(
        raw.hget::<Option<i64>, _, _>("orphan2", &field)
            .await
            .unwrap(),
        Some(1)
    );
    assert!(again.is_renewed());
    assert_eq!(again.unlock().await.unwrap(), Unlocked::Released);
    assert_eq!(raw.exists::<i64, _>("orphan2").await.unwrap(), 0);
}

/// A server that lost its script cache (`SCRIPT FLUSH`, a restart, a failover
/// to a node that never ran them) answers `NOSCRIPT`: the script did not run,
/// so its text goes out once with `EVAL`, and every hold count moves by one.
#[tokio::test]
async fn scripts_missing_from_the_server_cache_run_once_through_eval() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("ledger:7").unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();
    let flush = || async {
        let _: Value = raw
            .custom(
                fred::types::CustomCommand::new_static(
                    "SCRIPT",
                    fred::types::ClusterHash::Random,
                    false,
                ),
                vec!["FLUSH"],
            )
            .await
            .unwrap();
    };
    let evals = command_calls(&raw, "eval").await;

    flush().await;
    let outer = lock.lock().await.unwrap();
    let count = || raw.hget::<Option<String>, _, _>("ledger:7", outer.field());
    assert_eq!(count().await.unwrap().as_deref(), Some("1"));
    flush().await;
    let inner = outer.scope(lock.lock()).await.unwrap();
    assert_eq!(count().await.unwrap().as_deref(), Some("2"));
    flush().await;
    assert_eq!(inner.unlock().await.unwrap(), Unlocked::StillHeld);
    assert_eq!(count().await.unwrap().as_deref(), Some("1"));
    assert_eq!(command_calls(&raw, "eval").await - evals, 3);

    // EVAL cached the unlock script again: the last unlock is an EVALSHA.
    assert_eq!(outer.unlock().await.unwrap(), Unlocked::Released);
    assert_eq!(raw.exists::<i64, _>("ledger:7").await.unwrap(), 0);
    assert_eq!(command_calls(&raw, "eval").await - evals, 3);
}
