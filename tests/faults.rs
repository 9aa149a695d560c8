//! Faults: a Redis crash while locks are held and awaited, a lost reply, an
//! unreachable server.

mod common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use redisson_lock::{Error, OwnerId, RedissonClient, Unlocked};

#[tokio::test]
async fn after_a_redis_restart_the_holder_is_told_and_a_waiter_acquires() {
    let mut server = RedisServer::start().await;
    let watchdog = Duration::from_secs(2);
    let holder = client(&server, watchdog).await;
    let waiter_a = client(&server, watchdog).await;
    let waiter_b = client(&server, watchdog).await;
    let guard = holder.lock("crash").unwrap().lock().await.unwrap();
    let waits: Vec<_> = [&waiter_a, &waiter_b]
        .into_iter()
        .map(|c| {
            let lock = c.lock("crash").unwrap();
            tokio::spawn(async move { lock.lock().await })
        })
        .collect();
    await_subscribers(&server, "redisson_lock__channel:{crash}", 2).await;

    // Crash: every key is gone, the holder's lock with them.
    server.restart().await;
    within("holder's lost signal", guard.lost()).await;
    // The waiters resubscribe, re-check and one of them takes the lock.
    let (first, _, rest) = within("a waiter acquires", futures::future::select_all(waits)).await;
    let first = first.unwrap().unwrap();
    let raw = server.raw().await;
    let holders: Vec<String> = raw.hkeys("crash").await.unwrap();
    assert_eq!(holders, vec![first.field().to_string()]);
    first.unlock().await.unwrap();
    let second = within(
        "the other waiter acquires",
        rest.into_iter().next().unwrap(),
    )
    .await;
    second.unwrap().unwrap().unlock().await.unwrap();
    assert!(matches!(guard.unlock().await, Err(Error::LockLost { .. })));
}

#[tokio::test]
async fn a_dropped_reply_changes_the_hold_count_exactly_once() {
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Eg"]).await;
    let proxy = Proxy::start(server.port).await;
    let raw = server.raw().await;
    let client = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    // Warm Redis's script cache so that the replies dropped below are the
    // scripts' own (a NOSCRIPT reply would be dropped instead).
    let mut deletions = Observer::new(&server, &["__keyevent@0__:del"], &[]).await;
    let warm = client.lock("warm-up").unwrap();
    warm.lock().await.unwrap().unlock().await.unwrap();
    // Its latch is deleted fire-and-forget; let that reply pass first.
    deletions
        .until(|(_, key)| key.starts_with("redisson_unlock_latch:{warm-up}:"))
        .await;
    // One owner for the acquire and the re-entry below.
    let owner = OwnerId::unique();
    let lock = client.lock("flaky").unwrap().with_owner(owner);
    let field = lock.field_of(owner);

    // First acquire: its reply (nil = acquired) never arrives; the state is read instead.
    proxy.drop_next_reply();
    let first = lock.lock().await.unwrap();
    let count: String = raw.hget("flaky", &field).await.unwrap();
    assert_eq!(count, "1");
    assert!(
        proxy.dropped()[0].ends_with("$-1\r\n"),
        "{:?}",
        proxy.dropped()
    );

    // Re-entry with a lost reply: 2, not 3.
    proxy.drop_next_reply();
    let second = lock.lock().await.unwrap();
    let count: String = raw.hget("flaky", &field).await.unwrap();
    assert_eq!(count, "2");
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert!(
        proxy.dropped()[1].ends_with("$-1\r\n"),
        "{:?}",
        proxy.dropped()
    );

    // Partial unlock with a lost reply (0 = still held): replayed through
    // the latch, so the count is 1, not 0.
    proxy.drop_next_reply();
    assert_eq!(second.unlock().await.unwrap(), Unlocked::StillHeld);
    let count: String = raw.hget("flaky", &field).await.unwrap();
    assert_eq!(count, "1");
    assert!(
        proxy.dropped()[2].ends_with(":0\r\n"),
        "{:?}",
        proxy.dropped()
    );
    assert_eq!(first.unlock().await.unwrap(), Unlocked::Released);
    assert_eq!(raw.exists::<i64, _>("flaky").await.unwrap(), 0);
}

#[tokio::test]
async fn an_unreachable_redis_is_an_error_not_a_hang() {
    // Nothing listens on this port.
    let port = free_port();
    let err = within(
        "connect to nothing",
        RedissonClient::connect(config(
            &format!("redis://127.0.0.1:{port}"),
            Duration::from_secs(1),
        )),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::Connection(_) | Error::Timeout(_)),
        "{err:?}"
    );

    // Connected, then the server dies for good.
    let mut server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(1)).await;
    let lock = client.lock("gone").unwrap();
    server.kill().await;
    let err = within("try_lock against a dead server", lock.try_lock())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Connection(_) | Error::Timeout(_) | Error::OutcomeUnknown { .. }
        ),
        "{err:?}"
    );
    let err = within("is_locked against a dead server", lock.is_locked())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Connection(_) | Error::Timeout(_)),
        "{err:?}"
    );
}
