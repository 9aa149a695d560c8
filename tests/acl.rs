//! The crate works under the minimal ACL documented in docs/acl.md.

mod common;

use std::time::Duration;

use common::*;
use redisson_lock::RedissonClient;

/// The ACL rule of docs/acl.md, for locks named `app:*`.
const RULE: &[&str] = &[
    "on",
    ">locker-pw",
    "resetkeys",
    "~app:*",
    "~redisson_unlock_latch:*",
    "~redisson_lock__channel:*",
    "resetchannels",
    "&redisson_lock__channel:*",
    "-@all",
    "+evalsha",
    "+eval",
    "+exists",
    "+hexists",
    "+hget",
    "+hgetall",
    "+hincrby",
    "+pexpire",
    "+pttl",
    "+get",
    "+set",
    "+del",
    "+type",
    "+publish",
    "+subscribe",
    "+unsubscribe",
    "+ping",
];

#[tokio::test]
async fn every_lock_operation_runs_under_the_minimal_acl() {
    let mut args = vec!["--user", "locker"];
    args.extend_from_slice(RULE);
    let server = RedisServer::start_with(&args).await;
    let mut config = common::config(&server.url(), Duration::from_secs(1));
    config.username = Some("locker".into());
    config.password = Some("locker-pw".into());
    let a = RedissonClient::connect(config.clone()).await.unwrap();
    let b = RedissonClient::connect(config).await.unwrap();
    let lock = a.lock("app:job").unwrap();

    // acquire, re-enter, renew (watchdog cycles), partial and full unlock
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    let mut updates = a.watchdog_updates();
    within("two renewals", updates.wait_for(|s| s.renewed >= 2))
        .await
        .unwrap();
    assert_eq!(a.watchdog_stats().failures, 0);
    inner.unlock().await.unwrap();
    // a waiter in another client, woken by the unlock message
    let other = b.lock("app:job").unwrap();
    let waiter = tokio::spawn(async move { other.lock().await });
    await_subscribers(&server, "redisson_lock__channel:{app:job}", 1).await;
    outer.unlock().await.unwrap();
    let guard = within("waiter", waiter).await.unwrap().unwrap();
    // the last waiter left: its client unsubscribed
    await_subscribers(&server, "redisson_lock__channel:{app:job}", 0).await;
    assert_eq!(
        b.lock("app:job")
            .unwrap()
            .with_owner(guard.owner())
            .hold_count()
            .await
            .unwrap(),
        1
    );
    // queries and force unlock
    assert!(lock.is_locked().await.unwrap());
    assert_eq!(lock.holders().await.unwrap().len(), 1);
    assert!(lock.remaining_ttl().await.is_ok());
    assert!(lock.force_unlock().await.unwrap());
    drop(guard);
    // A lock outside the user's key patterns is refused by Redis, not mangled.
    let err = a.lock("other:x").unwrap().try_lock().await.unwrap_err();
    assert!(
        err.to_string().contains("NOPERM") || err.to_string().contains("permission"),
        "{err}"
    );
}
