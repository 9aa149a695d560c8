//! Scripts that many tasks send at once go out in batches (one EVALSHA per
//! script and shape), and each caller still gets exactly its own outcome.

mod common;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use redisson_lock::{Error, LockGuard, RedissonClient, Unlocked};

/// More than the number of calls a connection sends on their own before it
/// starts queueing (`ALONE_BELOW` in `engine::coalesce`).
const TASKS: usize = 200;

fn names() -> Vec<String> {
    (0..TASKS).map(|i| format!("batched:{i}")).collect()
}

/// `try_lock` on every name at once; the replies in name order.
async fn try_all(
    client: &RedissonClient,
    names: &[String],
) -> Vec<Result<Option<LockGuard>, Error>> {
    let tasks: Vec<_> = names
        .iter()
        .map(|name| {
            let lock = client.lock(name).unwrap();
            tokio::spawn(async move { lock.try_lock().await })
        })
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        out.push(within("a try_lock", task).await.unwrap());
    }
    out
}

async fn existing(raw: &Client, names: &[String]) -> usize {
    let mut n = 0;
    for name in names {
        n += raw.exists::<usize, _>(name.as_str()).await.unwrap();
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquires_go_out_in_batches_and_each_gets_its_own_outcome() {
    let (server, proxy, client) = proxied(|_| {}).await;
    let raw = server.raw().await;
    let other = common::client(&server, Duration::from_secs(30)).await;

    let mut names = names();
    // A key of the wrong type, and a lock someone else holds, among them.
    raw.set::<(), _, _>("batched:wrong", "text", None, None, false)
        .await
        .unwrap();
    let _held = other.lock("batched:taken").unwrap().lock().await.unwrap();
    names.push("batched:wrong".into());
    names.push("batched:taken".into());
    let free = TASKS;

    // First round: nothing cached yet (neither the scripts nor their batch
    // form), so batches come back NOSCRIPT and their calls go out again.
    let first = try_all(&client, &names).await;
    check(&raw, &names, first).await;

    // Second round, with every reply held back: once all the locks exist on
    // Redis, fewer EVALSHAs than acquires have run.
    let before = command_calls(&raw, "evalsha").await;
    let round = stalled_round(&proxy, &client, &raw, &names, free + 2).await;
    let sent = command_calls(&raw, "evalsha").await - before;
    assert!(
        sent < free as u64,
        "{sent} EVALSHAs for {free} acquires: nothing was batched"
    );
    proxy.resume_replies();
    let second = within("the second round", round).await.unwrap();
    check(&raw, &names, second).await;
}

/// A round of [`try_all`] with every reply held back, returned once `ran` of
/// the locks exist on Redis (its acquires ran); the proxy still holds the
/// replies.
async fn stalled_round(
    proxy: &Proxy,
    client: &RedissonClient,
    raw: &Client,
    names: &[String],
    ran: usize,
) -> tokio::task::JoinHandle<Vec<Result<Option<LockGuard>, Error>>> {
    proxy.stall_replies();
    let round = {
        let (client, names) = (client.clone(), names.to_vec());
        tokio::spawn(async move { try_all(&client, &names).await })
    };
    within("the acquires ran on Redis", async {
        while existing(raw, names).await < ran {
            tokio::task::yield_now().await;
        }
    })
    .await;
    round
}

/// The outcome of every `try_lock` of `names` (the last two: the wrong type,
/// the lock held elsewhere), the state on Redis, then an unlock of each.
async fn check(raw: &Client, names: &[String], mut replies: Vec<Result<Option<LockGuard>, Error>>) {
    let taken = replies.pop().unwrap();
    assert!(matches!(taken, Ok(None)), "{taken:?}");
    let wrong = replies.pop().unwrap();
    assert!(matches!(wrong, Err(Error::WrongType { .. })), "{wrong:?}");
    let guards: Vec<LockGuard> = replies.into_iter().map(|r| r.unwrap().unwrap()).collect();
    for guard in &guards {
        let count: Option<String> = raw.hget(guard.name(), guard.field()).await.unwrap();
        assert_eq!(count.as_deref(), Some("1"), "{}", guard.name());
    }
    let unlocks: Vec<_> = guards
        .into_iter()
        .map(|g| tokio::spawn(async move { g.unlock().await }))
        .collect();
    for unlock in unlocks {
        let unlocked = within("an unlock", unlock).await.unwrap();
        assert_eq!(unlocked.unwrap(), Unlocked::Released);
    }
    assert_eq!(existing(raw, &names[..TASKS]).await, 0);
}

#[tokio::test]
async fn an_acquire_abandoned_in_the_queue_is_given_back() {
    let (server, proxy, client) = proxied(|_| {}).await;
    let raw = server.raw().await;
    warm_up(&server, &client).await;
    let names = names();
    // A first round, unhindered, caches the batch script.
    for guard in try_all(&client, &names).await {
        guard.unwrap().unwrap().unlock().await.unwrap();
    }

    // Enough acquires in flight, their replies held back, that the next one
    // is queued for a batch.
    let round = stalled_round(&proxy, &client, &raw, &names, TASKS).await;
    // One more acquire, polled once (queued) and dropped.
    let lock = client.lock("batched:abandoned").unwrap();
    {
        let acquire = lock.lock();
        futures::pin_mut!(acquire);
        assert!(futures::poll!(acquire.as_mut()).is_pending());
    }
    proxy.resume_replies();
    for guard in within("the round", round).await.unwrap() {
        guard.unwrap().unwrap().unlock().await.unwrap();
    }
    // The call was sent all the same; its settlement read the hold after it
    // and gave it back, so another owner gets the lock.
    let other = common::client(&server, Duration::from_secs(30)).await;
    let guard = within(
        "the abandoned hold is given back",
        other.lock("batched:abandoned").unwrap().lock(),
    )
    .await
    .unwrap();
    guard.unlock().await.unwrap();
}
