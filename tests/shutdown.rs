//! `shutdown()`: waiters are told at once, and nothing a cancelled operation
//! took outlives the client.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use redisson_lock::{Error, RedissonClient};

#[tokio::test]
async fn shutdown_wakes_every_waiter_at_once_even_on_a_lock_without_ttl() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    // A lock hash without a TTL: a waiter has no TTL to wake it, only the
    // shutdown (or a message that never comes).
    let _: () = raw.hset("forever", ("someone-else:1", "1")).await.unwrap();
    let client = client(&server, Duration::from_secs(30)).await;
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let lock = client.lock("forever").unwrap();
            tokio::spawn(async move {
                if i == 0 {
                    lock.lock().await.map(drop)
                } else {
                    lock.try_lock_for(Duration::from_secs(3600)).await.map(drop)
                }
            })
        })
        .collect();
    await_subscribers(&server, "redisson_lock__channel:{forever}", 1).await;
    client.shutdown().await;
    for waiter in waiters {
        let outcome = within("a waiter told of the shutdown", waiter)
            .await
            .unwrap();
        assert!(matches!(outcome, Err(Error::Shutdown)), "{outcome:?}");
    }
    // The lock of the other owner is untouched.
    assert_eq!(raw.hlen::<i64, _>("forever").await.unwrap(), 1);
}

#[tokio::test]
async fn shutdown_gives_back_a_lock_taken_by_an_acquire_whose_caller_left() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let proxy = Proxy::start(server.port).await;
    let client = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    let lock = client.lock("interrupted").unwrap();
    // Warm the script cache so the acquire runs on its first send.
    lock.lock().await.unwrap().unlock().await.unwrap();

    // The acquire runs on Redis, its reply is held back, and the caller
    // leaves (a SIGINT during `redisson-lock run`, say).
    proxy.stall_replies();
    {
        let acquire = lock.lock();
        futures::pin_mut!(acquire);
        drive_until("the acquire runs on Redis", &mut acquire, || async {
            raw.exists::<i64, _>("interrupted").await.unwrap() == 1
        })
        .await;
    }
    // Its settlement now waits for the held-back reply. Shut down meanwhile:
    // it must wait for the settlement, which gives the lock back.
    let closing = {
        let client = client.clone();
        tokio::spawn(async move { client.shutdown().await })
    };
    within("shutdown has begun", async {
        while client.lock("x").is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    proxy.resume_replies();
    within("shutdown", closing).await.unwrap();
    assert_eq!(
        raw.exists::<i64, _>("interrupted").await.unwrap(),
        0,
        "the lock outlived the client"
    );
}

#[tokio::test]
async fn guards_after_shutdown_report_it_and_send_nothing() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("closed").unwrap();
    let guard = lock.lock().await.unwrap();
    client.shutdown().await;
    assert_eq!(raw.exists::<i64, _>("closed").await.unwrap(), 0);
    assert!(guard.is_lost(), "its hold was released by the shutdown");
    assert!(matches!(guard.unlock().await, Err(Error::Shutdown)));
}
