//! Bad input gets a typed error and touches nothing on Redis.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use redisson_lock::{Config, Error, OwnerId, RedissonClient, Unlocked};

#[tokio::test]
async fn an_empty_name_is_refused_and_names_redisson_accepts_work() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let err = client.lock("").unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // Redisson takes these (a `{` without a usable hash tag) and they work on
    // a single server: the keys are Redisson's, braces not added again.
    for name in ["a{", "a{}b", "job{}", "{}", "a{tag}b"] {
        let lock = client.lock(name).unwrap();
        assert_eq!(lock.channel(), format!("redisson_lock__channel:{name}"));
        let mut events = Observer::new(&server, &[&lock.channel()], &[]).await;
        let guard = lock.lock().await.unwrap();
        let count: String = raw.hget(name, guard.field()).await.unwrap();
        assert_eq!(count, "1", "{name}");
        guard.unlock().await.unwrap();
        assert_eq!(events.next().await, (lock.channel(), "0".to_string()));
        assert_eq!(raw.exists::<i64, _>(name).await.unwrap(), 0, "{name}");
    }
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
    let refused = lock.lock().await.unwrap_err();
    assert!(
        refused.to_string().contains("is not a lock (WRONGTYPE)"),
        "{refused}"
    );
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
                lock.acquire().lease(lease).await,
                Err(Error::InvalidArgument(_))
            ),
            "{lease:?}"
        );
        assert!(
            matches!(
                lock.acquire().wait(Duration::ZERO).lease(lease).await,
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
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
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

#[tokio::test]
async fn passwords_never_appear_in_errors_or_debug_output() {
    const SECRET: &str = "s3cret-pw";
    let server = RedisServer::start_with(&["--requirepass", SECRET]).await;
    let good = format!("redis://default:{SECRET}@127.0.0.1:{}", server.port);
    let mut seen: Vec<String> = vec![];

    let settings = config(&good, Duration::from_secs(30));
    seen.push(format!("{settings:?}"));
    let client = RedissonClient::connect(settings).await.unwrap();
    seen.push(format!("{client:?}"));
    seen.push(format!("{:?}", client.config()));
    client.shutdown().await;

    // A wrong password, an unreachable server, a malformed URL, a TLS file
    // for a plain address, a password given apart from the URL.
    let wrong = format!("redis://default:{SECRET}-wrong@127.0.0.1:{}", server.port);
    let closed = format!("redis://default:{SECRET}@127.0.0.1:{}", free_port());
    let malformed = format!("redis://default:{SECRET}@127.0.0.1:notaport");
    let sentinel = format!(
        "redis-sentinel://127.0.0.1:{}?sentinelServiceName=m&sentinelPassword={SECRET}",
        free_port()
    );
    for url in [&wrong, &closed, &malformed, &sentinel] {
        let err = RedissonClient::connect(config(url, Duration::from_secs(30)))
            .await
            .unwrap_err();
        seen.push(err.to_string());
        seen.push(format!("{err:?}"));
    }
    let mut tls = config(&good, Duration::from_secs(30));
    tls.tls_ca_file = Some("/nonexistent/ca.pem".into());
    let err = RedissonClient::connect(tls).await.unwrap_err();
    seen.push(format!("{err} {err:?}"));
    let mut apart = config(&server.url(), Duration::from_secs(30));
    apart.password = Some(SECRET.into());
    seen.push(format!("{apart:?}"));
    #[cfg(feature = "redisson-config")]
    {
        let err = Config::from_redisson_yaml(&format!(
            "singleServerConfig: {{address: 'redis://u:{SECRET}@h:1', password: 7}}"
        ))
        .unwrap_err();
        seen.push(format!("{err} {err:?}"));
    }

    for text in &seen {
        assert!(!text.contains(SECRET), "password printed: {text}");
    }
    // What is printed still says where it went.
    assert!(
        seen[0].contains("redis://default:***@127.0.0.1"),
        "{}",
        seen[0]
    );
}

/// A server that accepts connections and never answers: connecting fails
/// with a timeout that states the time really waited (fred's handshake
/// timeout ends it long before the connect timeout plus the command
/// timeout, which the message used to claim).
#[tokio::test]
async fn a_server_that_never_answers_is_reported_with_the_time_waited() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = vec![];
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let mut config = redisson_lock::Config::from_url(format!("redis://127.0.0.1:{port}"));
    config.timeout = Duration::from_secs(1);
    config.connect_timeout = Duration::from_secs(5);
    let started = std::time::Instant::now();
    let err = redisson_lock::RedissonClient::connect(config)
        .await
        .unwrap_err();
    let waited = started.elapsed();
    let text = err.to_string();
    let stated = text
        .rsplit("within ")
        .next()
        .and_then(|d| {
            d.strip_suffix("ms")
                .or(d.strip_suffix('s'))
                .map(|n| (n, d.ends_with("ms")))
        })
        .and_then(|(n, ms)| {
            n.trim()
                .parse::<f64>()
                .ok()
                .map(|n| if ms { n / 1000.0 } else { n })
        })
        .unwrap_or_else(|| panic!("no duration in {text:?}"));
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(
        stated <= waited.as_secs_f64(),
        "the error claims {stated} s, the client waited {waited:?}: {text}"
    );
    held.abort();
}

/// The server's refusals during a failover or under a limit did not run the
/// command and pass: `is_transient`, with the reply's code readable.
#[tokio::test]
async fn the_servers_passing_refusals_are_transient_and_coded() {
    // A replica (a demoted primary, to a client that has not moved yet).
    let primary = RedisServer::start().await;
    let port = primary.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]).await;
    let on_replica = client(&replica, Duration::from_secs(30)).await;
    let err = on_replica
        .lock("refused")
        .unwrap()
        .lock()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("READONLY"), "{err:?}");
    assert!(err.is_transient(), "{err:?}");
    on_replica.shutdown().await;

    // Memory full.
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let _: () = common::topology::on_node(server.port, "CONFIG", vec!["SET", "maxmemory", "1"])
        .await
        .convert()
        .unwrap();
    let err = client.lock("refused").unwrap().lock().await.unwrap_err();
    assert_eq!(err.code(), Some("OOM"), "{err:?}");
    assert!(err.is_transient(), "{err:?}");
    let _: () = common::topology::on_node(server.port, "CONFIG", vec!["SET", "maxmemory", "0"])
        .await
        .convert()
        .unwrap();
    assert_eq!(raw.exists::<i64, _>("refused").await.unwrap(), 0);
    // What is not a passing refusal keeps its code and stays permanent.
    let _: () = raw
        .set("refused", "a string", None, None, false)
        .await
        .unwrap();
    let err = client.lock("refused").unwrap().lock().await.unwrap_err();
    assert!(!err.is_transient(), "{err:?}");
    client.shutdown().await;
}
