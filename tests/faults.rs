//! Faults: a Redis crash while locks are held and awaited, a lost reply, an
//! unreachable server.

use redisson_lock_testkit as common;

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
    let cycles = watchdog_cycles(&client);
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
    renewal_after_reconnect(&client, cycles).await;
    let cycles = watchdog_cycles(&client);
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
    renewal_after_reconnect(&client, cycles).await;
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
        matches!(err, Error::Connection { .. } | Error::Timeout(_)),
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
            Error::Connection { .. } | Error::Timeout(_) | Error::OutcomeUnknown { .. }
        ),
        "{err:?}"
    );
    let err = within("is_locked against a dead server", lock.is_locked())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Connection { .. } | Error::Timeout(_)),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_settling_operation_of_the_same_owner_does_not_stretch_try_lock_for() {
    // A long command timeout: the settlement below waits as long as the
    // replies are held back.
    let (server, proxy, client) = proxied(|_| {}).await;
    let raw = server.raw().await;
    warm_up(&server, &client).await;
    let lock = client
        .lock("settling")
        .unwrap()
        .with_owner(OwnerId::unique());
    let mut events = Observer::new(&server, &[&lock.channel()], &[]).await;

    // An acquire of this owner runs on Redis, its reply is held back and its
    // caller leaves: the settlement holds the owner's slot until the reply.
    proxy.stall_replies();
    {
        let acquire = lock.lock();
        futures::pin_mut!(acquire);
        drive_until("the acquire runs on Redis", &mut acquire, || async {
            raw.exists::<i64, _>("settling").await.unwrap() == 1
        })
        .await;
    }
    // Another try of the same owner keeps to its own wait.
    let tried = within(
        "try_lock_for keeps to its wait",
        lock.try_lock_for(Duration::from_millis(200)),
    )
    .await;
    assert!(matches!(tried, Ok(None)), "{tried:?}");
    proxy.resume_replies();
    // The settlement gives the abandoned hold back.
    assert_eq!(events.next().await, (lock.channel(), "0".to_string()));
    assert_eq!(raw.exists::<i64, _>("settling").await.unwrap(), 0);
}

#[tokio::test]
async fn an_unlock_that_waited_for_its_slot_is_still_sent() {
    // One attempt and a 1 ms retry delay: the unlock latch outlives a
    // command by 1 ms, so an unlock whose clock started while it waited for
    // the owner's slot would give up unsent.
    let (server, proxy, client) = proxied(|settings| {
        settings.retry_attempts = 1;
        settings.retry_delay = Duration::from_millis(1);
    })
    .await;
    let raw = server.raw().await;
    warm_up(&server, &client).await;
    let owner = OwnerId::unique();
    let lock = client.lock("queued-unlock").unwrap().with_owner(owner);
    let guard = lock.lock().await.unwrap();

    // A re-entry of the same owner runs (2 on Redis), its caller leaves, and
    // its settlement holds the slot while replies are held back.
    proxy.stall_replies();
    {
        let again = lock.lock();
        futures::pin_mut!(again);
        drive_until("the re-entry runs on Redis", &mut again, || async {
            let count: Option<String> = raw
                .hget("queued-unlock", lock.field_of(owner))
                .await
                .unwrap();
            count.as_deref() == Some("2")
        })
        .await;
    }
    let unlock = tokio::spawn(guard.unlock());
    // The unlock now waits for the slot; let that wait outlast the latch's
    // 1 ms margin before the settlement can finish.
    tokio::time::sleep(Duration::from_millis(50)).await;
    proxy.resume_replies();
    let outcome = within("the unlock", unlock).await.unwrap();
    assert_eq!(outcome.unwrap(), Unlocked::Released);
    assert_eq!(raw.exists::<i64, _>("queued-unlock").await.unwrap(), 0);
    assert_eq!(client.held_locks(), 0);
}

#[tokio::test]
async fn an_acquire_lost_with_its_connection_is_not_sent_again() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let raw = server.raw().await;
    let client = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    warm_up(&server, &client).await;
    let lock = client.lock("unsent").unwrap();
    // Counted inside scripts too: the acquire script's `HINCRBY` (and a
    // give-back's), not the resolution's reads.
    let scripts = command_calls(&raw, "hincrby").await;
    // The script never reaches Redis and the connection closes. Whether it
    // ran is read back (it did not), but an old copy could still arrive on
    // a real network, so it is not sent again: the caller gets the error.
    proxy.drop_next_request();
    let outcome = lock.try_lock().await;
    assert!(
        matches!(outcome, Err(Error::Connection { .. } | Error::Timeout(_))),
        "{outcome:?}"
    );
    assert_eq!(command_calls(&raw, "hincrby").await, scripts, "re-sent");
    assert_eq!(raw.exists::<i64, _>("unsent").await.unwrap(), 0);
    assert!(
        proxy.dropped()[0].contains("EVALSHA"),
        "{:?}",
        proxy.dropped()
    );
    // The client goes on after the reconnect.
    lock.try_lock()
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_subscription_slower_than_a_command_still_waits_its_time() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let holder = client(&server, Duration::from_secs(30)).await;
    // Commands time out after 1 s; subscribing may take Redisson's 7.5 s.
    let waiter = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    // Connection 0 carries the commands, 1 the subscriptions.
    assert_eq!(proxy.connections(), 2);
    let channel = "redisson_lock__channel:{slow-subscribe}";
    for patient in [true, false] {
        let guard = holder.lock("slow-subscribe").unwrap().lock().await.unwrap();
        proxy.delay_next_reply_on(1, Duration::from_millis(2_000));
        let lock = waiter.lock("slow-subscribe").unwrap();
        let waiting = tokio::spawn(async move {
            if patient {
                lock.try_lock_for(Duration::from_secs(60)).await
            } else {
                lock.lock().await.map(Some)
            }
        });
        await_subscribers(&server, channel, 1).await;
        guard.unlock().await.unwrap();
        let taken = within("the waiter", waiting).await.unwrap();
        let taken = taken.unwrap_or_else(|e| panic!("patient={patient}: {e}"));
        taken.expect("acquired").unlock().await.unwrap();
        await_subscribers(&server, channel, 0).await;
    }
}

#[tokio::test]
async fn waiters_survive_resets_of_the_subscriber_connection() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let _held = holder.lock("reset-me").unwrap().lock().await.unwrap();
    let waiter = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    let lock = waiter.lock("reset-me").unwrap();
    for round in 0..40 {
        // The subscriber's connection is the newest (the command connection,
        // the first, is never reset).
        proxy.reset(proxy.connections() - 1);
        let outcome = lock.try_lock_for(Duration::from_millis(150)).await;
        assert!(matches!(outcome, Ok(None)), "round {round}: {outcome:?}");
    }
}

#[tokio::test]
async fn a_grant_that_arrives_after_its_lease_is_not_an_acquisition() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let raw = server.raw().await;
    // A 1 s lease, and replies may take longer than that without timing out.
    let mut settings = config(&proxy.url(), Duration::from_secs(1));
    settings.timeout = Duration::from_secs(5);
    let client = RedissonClient::connect(settings).await.unwrap();
    warm_up(&server, &client).await;
    let lock = client.lock("late").unwrap();
    let scripts = command_calls(&raw, "evalsha").await;
    proxy.delay_next_reply(Duration::from_millis(1_500));
    let guard = lock.lock().await.unwrap();
    assert!(!guard.is_lost(), "a guard handed out already lost");
    let count: String = raw.hget("late", guard.field()).await.unwrap();
    assert_eq!(count, "1");
    // The late grant was given back and the lock taken again.
    assert!(command_calls(&raw, "evalsha").await >= scripts + 3);
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
}

/// A fault can make an attempt's aftermath long (a lost reply read back, a
/// grant undone, each tried again): `try_lock_for` keeps to its wait, or
/// one attempt's normal time, and what the attempt left is settled in the
/// background. Here every reply is held back once the acquire has gone out:
/// the read-back cannot finish, yet `try_lock_for` answers (not acquired)
/// while replies are still held back; it used to wait for the read-back to
/// fail and answer `OutcomeUnknown`. The grant is given back once they flow.
#[tokio::test]
async fn a_stalled_read_back_does_not_stretch_try_lock_for() {
    let (server, proxy, client) = proxied(|s| s.timeout = Duration::from_secs(1)).await;
    let raw = server.raw().await;
    warm_up(&server, &client).await;
    let lock = client.lock("stalled-read-back").unwrap();
    proxy.stall_replies();
    let tried = lock.try_lock_for(Duration::from_millis(100)).await;
    assert!(matches!(tried, Ok(None)), "{tried:?}");
    assert_eq!(
        raw.exists::<i64, _>("stalled-read-back").await.unwrap(),
        1,
        "the acquire ran"
    );
    proxy.resume_replies();
    // The key goes first; the client forgets the hold when the unlock's
    // reply comes back.
    common::topology::until("the grant given back and forgotten", || async {
        raw.exists::<i64, _>("stalled-read-back").await.unwrap() == 0 && client.held_locks() == 0
    })
    .await;
    let guard = lock.try_lock().await.unwrap().expect("free again");
    guard.unlock().await.unwrap();
}
