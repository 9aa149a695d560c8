//! Bad input gets a typed error and touches nothing on Redis.

mod common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use redisson_lock::{Config, Error, OwnerId, RedissonClient, Unlocked};

#[tokio::test]
async fn empty_and_odd_names_are_refused() {
    let server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(30)).await;
    for name in ["", "a{", "a{}b"] {
        let err = client.lock(name).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument(_)),
            "{name:?}: {err:?}"
        );
    }
    assert!(client.lock("a{tag}b").is_ok());
}

#[tokio::test]
async fn a_key_of_another_type_is_wrongtype_and_left_intact() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let _: () = raw
        .set("config:blob", "precious", None, None, false)
        .await
        .unwrap();
    let lock = client.lock("config:blob").unwrap();
    assert!(matches!(
        lock.try_lock().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(lock.lock().await, Err(Error::WrongType { .. })));
    assert!(matches!(
        lock.force_unlock().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(lock.unlock().await, Err(Error::WrongType { .. })));
    let owner = OwnerId::unique();
    assert!(matches!(
        lock.is_held_by(owner).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        lock.with_owner(owner).hold_count().await,
        Err(Error::WrongType { .. })
    ));
    let value: String = raw.get("config:blob").await.unwrap();
    assert_eq!(value, "precious");
    assert_eq!(raw.ttl::<i64, _>("config:blob").await.unwrap(), -1);
    assert_eq!(client.held_locks(), 0);
    assert!(Error::WrongType {
        name: "config:blob".into()
    }
    .to_string()
    .contains("is not a lock (WRONGTYPE)"));
}

#[tokio::test]
async fn zero_tiny_and_huge_durations_are_refused() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("durations").unwrap();
    for lease in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::MAX,
        Duration::from_secs(u64::MAX / 2),
    ] {
        assert!(
            matches!(
                lock.lock_with_lease(lease).await,
                Err(Error::InvalidArgument(_))
            ),
            "{lease:?}"
        );
        assert!(
            matches!(
                lock.try_lock_for_with_lease(Duration::ZERO, lease).await,
                Err(Error::InvalidArgument(_))
            ),
            "{lease:?}"
        );
    }
    assert_eq!(raw.exists::<i64, _>("durations").await.unwrap(), 0);
    // A huge wait is simply "wait as long as it takes".
    let guard = lock.try_lock_for(Duration::MAX).await.unwrap().unwrap();
    guard.unlock().await.unwrap();

    let mut config = config(&server.url(), Duration::from_secs(1));
    config.lock_watchdog_timeout = Duration::ZERO;
    assert!(matches!(
        RedissonClient::connect(config).await,
        Err(Error::Config(_))
    ));
    let mut config = common::config(&server.url(), Duration::from_secs(1));
    config.timeout = Duration::MAX;
    assert!(matches!(
        RedissonClient::connect(config).await,
        Err(Error::Config(_))
    ));
}

#[tokio::test]
async fn unlock_by_a_non_owner_or_twice_is_not_held_and_changes_nothing() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let a = client(&server, Duration::from_secs(30)).await;
    let b = client(&server, Duration::from_secs(30)).await;
    let lock = a.lock("owned").unwrap();
    let guard = lock.lock().await.unwrap();
    let before: std::collections::HashMap<String, String> = raw.hgetall("owned").await.unwrap();

    // Another owner in the same client, and another client.
    let err = lock
        .with_owner(OwnerId::new(999_999).unwrap())
        .unlock()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
    assert!(err.to_string().contains("not locked by owner"));
    assert!(matches!(
        b.lock("owned").unwrap().unlock().await,
        Err(Error::NotHeld { .. })
    ));
    let after: std::collections::HashMap<String, String> = raw.hgetall("owned").await.unwrap();
    assert_eq!(before, after);
    assert!(!guard.is_lost());

    // Twice: the second unlock finds nothing to release.
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    assert!(matches!(lock.unlock().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn bad_credentials_and_bad_urls_are_typed_errors() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]).await;
    let wrong = format!("redis://:nope@127.0.0.1:{}", server.port);
    let err = RedissonClient::from_url(&wrong).await.unwrap_err();
    assert!(matches!(err, Error::Auth(_)), "{err:?}");
    let right = format!("redis://:s3cret@127.0.0.1:{}", server.port);
    let client = RedissonClient::connect(config(&right, Duration::from_secs(5)))
        .await
        .unwrap();
    client
        .lock("auth")
        .unwrap()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();

    let err = RedissonClient::connect(Config::from_url("not a url"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
}

#[tokio::test]
async fn a_shut_down_client_refuses_work_and_has_released_its_locks() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("closing").unwrap();
    let outer = lock.lock().await.unwrap();
    let inner = outer.scope(lock.lock()).await.unwrap();
    let mut events = Observer::new(&server, &["redisson_lock__channel:{closing}"], &[]).await;
    client.shutdown().await;
    assert_eq!(raw.exists::<i64, _>("closing").await.unwrap(), 0);
    assert_eq!(events.next().await.1, "0");
    assert!(matches!(lock.try_lock().await, Err(Error::Shutdown)));
    assert!(matches!(client.lock("x"), Err(Error::Shutdown)));
    drop((outer, inner));
}
