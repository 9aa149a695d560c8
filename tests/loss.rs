//! After the lost signal: the holder is told, but what is still its own on
//! Redis is kept renewed and released properly, so a dead key never blocks
//! everyone for a lease.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use redisson_lock::{Error, RedissonClient};

#[tokio::test]
async fn a_lost_hold_still_ours_is_renewed_and_its_unlock_releases_it() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let proxy = Proxy::start(server.port).await;
    let client = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(1)))
        .await
        .unwrap();
    let lock = client.lock("flaky-renewals").unwrap();
    let mut events = Observer::new(&server, &[&lock.channel()], &[]).await;
    let guard = lock.lock().await.unwrap();
    // One renewal first: the server then has the renewal script cached, so
    // the renewals sent while replies are stalled run there. A first
    // renewal would meet NOSCRIPT instead, and its `EVAL` would go out only
    // once replies resume, racing the key's expiry (and losing it when the
    // lease ran out first: the lock then is gone, and "lost" is the truth).
    let mut updates = client.watchdog_updates();
    within("a first renewal", async {
        while updates.borrow_and_update().renewed == 0 {
            updates.changed().await.unwrap();
        }
    })
    .await;

    // Renewals still reach Redis but their replies do not come back: the
    // lease deadline passes unconfirmed and the holder is told.
    proxy.stall_replies();
    within("the lost signal", guard.lost()).await;
    proxy.resume_replies();

    // The field is still ours on Redis, so the watchdog keeps renewing it
    // (as Redisson does) instead of letting it expire under a holder that
    // is winding down.
    let renewed = updates.borrow_and_update().renewed;
    within("three renewals after the loss", async {
        while updates.borrow_and_update().renewed < renewed + 3 {
            updates.changed().await.unwrap();
        }
    })
    .await;
    let count: Option<String> = raw.hget("flaky-renewals", guard.field()).await.unwrap();
    assert_eq!(count.as_deref(), Some("1"));
    assert!(guard.is_lost(), "the signal stays fired");

    // Re-entering a lost hold is refused: the flow was told to stop.
    let again = guard.scope(lock.lock()).await;
    assert!(matches!(again, Err(Error::LockLost { .. })), "{again:?}");

    // The unlock still runs the script: the key goes, waiters are told, and
    // the holder hears that it lost the lock.
    assert!(matches!(guard.unlock().await, Err(Error::LockLost { .. })));
    assert_eq!(raw.exists::<i64, _>("flaky-renewals").await.unwrap(), 0);
    assert_eq!(events.next().await, (lock.channel(), "0".to_string()));
    assert_eq!(client.held_locks(), 0);
}

#[tokio::test]
async fn a_hold_whose_field_is_gone_is_no_longer_renewed() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(1)).await;
    let lock = client.lock("taken-over").unwrap();
    let guard = lock.lock().await.unwrap();
    // Someone deletes it and takes it: the next renewal finds our field gone.
    let _: i64 = raw.del("taken-over").await.unwrap();
    let _: () = raw
        .hset("taken-over", ("other-client:1", "1"))
        .await
        .unwrap();
    within("the lost signal", guard.lost()).await;
    let mut updates = client.watchdog_updates();
    let (scripts, cycles) = {
        let now = updates.borrow_and_update();
        (now.scripts, now.cycles)
    };
    within("two more cycles", async {
        while updates.borrow_and_update().cycles < cycles + 2 {
            updates.changed().await.unwrap();
        }
    })
    .await;
    assert_eq!(client.watchdog_stats().scripts, scripts, "still renewing");
    // The unlock touches only our own field: the other holder keeps its lock.
    assert!(matches!(guard.unlock().await, Err(Error::LockLost { .. })));
    assert_eq!(raw.hlen::<i64, _>("taken-over").await.unwrap(), 1);
}
