//! RCountDownLatch against a real redis-server: opening, re-arming, its
//! messages, lost wake-ups and bad input.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::{config, within, Observer, RedisServer};
use fred::prelude::*;
use redisson_lock::{Error, RedissonClient};

async fn connect(url: &str, recheck: Duration) -> RedissonClient {
    common::init_tracing();
    let mut c = config(url, Duration::from_secs(2));
    c.recheck_interval = recheck;
    RedissonClient::connect(c).await.expect("connect")
}

const NO_RECHECK: Duration = Duration::from_secs(600);
const CHANNEL: &str = "redisson_countdownlatch__channel__{loaded}";

#[tokio::test]
async fn counting_down_to_zero_opens_every_waiter_and_a_new_count_rearms() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), NO_RECHECK).await;
    let counter = connect(&server.url(), NO_RECHECK).await;
    let latch = client.count_down_latch("loaded").unwrap();
    let mut messages = Observer::new(&server, &[CHANNEL], &[]).await;

    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(messages.next().await.1, "1", "a new count closes the latch");
    assert!(!latch.try_set_count(5).await.unwrap(), "set once per round");
    assert_eq!(latch.count().await.unwrap(), 2);

    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let l = latch.clone();
            tokio::spawn(async move { l.wait().await })
        })
        .collect();
    // The observer is the other subscriber.
    common::await_subscribers(&server, CHANNEL, 2).await;
    let theirs = counter.count_down_latch("loaded").unwrap();
    assert_eq!(theirs.count_down().await.unwrap(), 1);
    assert!(!latch.wait_for(Duration::from_millis(50)).await.unwrap());
    assert_eq!(theirs.count_down().await.unwrap(), 0);
    assert_eq!(messages.next().await.1, "0", "zero opens it");
    within(
        "every waiter let through",
        futures::future::try_join_all(waiters),
    )
    .await
    .unwrap()
    .into_iter()
    .collect::<Result<Vec<()>, _>>()
    .unwrap();
    assert_eq!(latch.count().await.unwrap(), 0);
    // An open latch lets a waiter through at once; counting down further
    // does nothing.
    assert!(latch.wait_for(Duration::ZERO).await.unwrap());
    assert_eq!(theirs.count_down().await.unwrap(), 0);

    // Next round: the latch closes again.
    assert!(theirs.try_set_count(1).await.unwrap());
    assert_eq!(messages.next().await.1, "1");
    let l = latch.clone();
    let waiter = tokio::spawn(async move { l.wait_for(Duration::from_secs(60)).await });
    // The observer is the other subscriber.
    common::await_subscribers(&server, CHANNEL, 2).await;
    assert!(!waiter.is_finished());
    assert_eq!(theirs.count_down().await.unwrap(), 0);
    assert!(within("the second round", waiter).await.unwrap().unwrap());

    // delete: true once, and it closes the latch for JVM listeners.
    latch.try_set_count(3).await.unwrap();
    messages.drain();
    assert!(latch.delete().await.unwrap());
    assert_eq!(messages.next().await.1, "1");
    assert!(!latch.delete().await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 0);
}

#[tokio::test]
async fn a_lost_wake_up_costs_at_most_the_recheck_interval() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), Duration::from_secs(1)).await;
    let raw = server.raw().await;
    let latch = client.count_down_latch("loaded").unwrap();
    latch.try_set_count(1).await.unwrap();

    let l = latch.clone();
    let waiter = tokio::spawn(async move { l.wait().await });
    common::await_subscribers(&server, CHANNEL, 1).await;
    // Opened without a message: only the re-check can see it.
    let _: i64 = raw.del("loaded").await.unwrap();
    within("the waiter's re-check", waiter)
        .await
        .unwrap()
        .unwrap();

    // The subscriber's connection is killed while the latch opens.
    latch.try_set_count(1).await.unwrap();
    let l = latch.clone();
    let waiter = tokio::spawn(async move { l.wait().await });
    common::await_subscribers(&server, CHANNEL, 1).await;
    let _: Value = raw
        .custom(
            fred::types::CustomCommand::new_static(
                "CLIENT",
                fred::types::ClusterHash::Random,
                false,
            ),
            vec!["KILL", "TYPE", "pubsub"],
        )
        .await
        .unwrap();
    let other = connect(&server.url(), NO_RECHECK).await;
    other
        .count_down_latch("loaded")
        .unwrap()
        .count_down()
        .await
        .unwrap();
    within("the waiter after its subscriber was killed", waiter)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn shutdown_wakes_latch_waiters() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), NO_RECHECK).await;
    let latch = client.count_down_latch("loaded").unwrap();
    latch.try_set_count(1).await.unwrap();
    let l = latch.clone();
    let waiter = tokio::spawn(async move { l.wait().await });
    common::await_subscribers(&server, CHANNEL, 1).await;
    client.shutdown().await;
    assert!(matches!(
        within("the waiter told", waiter).await.unwrap(),
        Err(Error::Shutdown)
    ));
}

#[tokio::test]
async fn bad_input_is_refused_and_touches_nothing() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), NO_RECHECK).await;
    let raw = server.raw().await;
    let latch = client.count_down_latch("bad").unwrap();
    for count in [0, i64::MAX as u64 + 1, u64::MAX] {
        assert!(
            matches!(
                latch.try_set_count(count).await,
                Err(Error::InvalidArgument(_))
            ),
            "{count}"
        );
    }
    assert_eq!(raw.exists::<i64, _>("bad").await.unwrap(), 0);
    assert!(latch.try_set_count(i64::MAX as u64).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), i64::MAX as u64);

    let _: () = raw.hset("config", ("a", "1")).await.unwrap();
    let wrong = client.count_down_latch("config").unwrap();
    for result in [
        wrong.count_down().await.map(|_| ()),
        wrong.count().await.map(|_| ()),
        wrong.wait_for(Duration::from_millis(10)).await.map(|_| ()),
    ] {
        assert!(
            matches!(&result, Err(Error::WrongType { name, expected, .. }) if name == "config" && *expected == "count-down latch"),
            "{result:?}"
        );
    }
    // As Redisson: a key of any type is a latch that exists.
    assert!(!wrong.try_set_count(1).await.unwrap());
    let value: Option<String> = raw.hget("config", "a").await.unwrap();
    assert_eq!(value.as_deref(), Some("1"));
    assert!(matches!(
        client.count_down_latch(""),
        Err(Error::InvalidArgument(_))
    ));
}
