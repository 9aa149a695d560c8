//! Scripts that many tasks send at once go out in batches (one EVALSHA per
//! script and shape), and each caller still gets exactly its own outcome.

use redisson_lock_testkit as common;

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

/// With every reply held back: lets every task run until it blocks, then
/// sends a marker on the client's own connection (on a single server, the
/// one its lock scripts take) and returns once Redis ran it. Everything the
/// client had handed to that connection by then ran before it.
async fn after_all_sent(client: &RedissonClient, raw: &Client, marker: &str) {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let (client, key) = (client.clone(), marker.to_string());
    tokio::spawn(async move {
        let _ = client.command(Some(&key), "SET", [&key, "1"]).await;
    });
    within("the marker ran", async {
        while raw.exists::<i64, _>(marker).await.unwrap() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// Scripts whose work grows with data already on Redis do not batch, and
/// few of them are in flight per connection: Redis runs everything it reads
/// from one connection before it turns to other clients, so a pipelined run
/// of them would hold everyone else up (Java included) for their sum. Shown
/// with every reply held back, on one single-threaded runtime (so that every
/// task gets as far as it can before the marker): RLock acquires (cheap) all
/// reach Redis, batched; 200 fair-lock tries on 200 locks nobody waits for
/// (nothing to walk) too; of 200 tries on fair locks with an ended waiter
/// each (a try walks it) at most 16 ran; of 200 fair waiters of one lock
/// giving up at once (each walks the queue) and of 200 read unlocks of one
/// lock (each walks every reader), one. Once replies flow, each goes out on
/// its own.
#[tokio::test]
async fn scripts_that_walk_data_go_out_few_at_a_time_unless_it_is_absent() {
    let (server, proxy, client) = proxied(|_| {}).await;
    let raw = server.raw().await;
    let other = common::client(&server, Duration::from_secs(30)).await;
    let lease = Duration::from_secs(60); // no renewal runs during a count
    let evalshas = || command_calls(&raw, "evalsha");
    let names = names();

    // Cheap: RLock acquires batch. A first round caches the batch script.
    for guard in try_all(&client, &names).await {
        guard.unwrap().unwrap().unlock().await.unwrap();
    }
    let before = evalshas().await;
    proxy.stall_replies();
    let round = {
        let (client, names) = (client.clone(), names.clone());
        tokio::spawn(async move { try_all(&client, &names).await })
    };
    after_all_sent(&client, &raw, "marker:rlock").await;
    assert_eq!(existing(&raw, &names).await, TASKS, "every acquire ran");
    let sent = evalshas().await - before;
    assert!(sent < TASKS as u64, "{sent} EVALSHAs for {TASKS} acquires");
    proxy.resume_replies();
    for guard in within("the RLock round", round).await.unwrap() {
        guard.unwrap().unwrap().unlock().await.unwrap();
    }

    // Fair tries, on as many fair locks. A first round, unhindered, caches
    // the script and its batch form (a NOSCRIPT reply, held back, would
    // stall its call).
    let fair_names: Vec<String> = (0..TASKS).map(|i| format!("walking:{i}")).collect();
    let try_fair = |names: &[String]| -> Vec<_> {
        names
            .iter()
            .map(|name| {
                let lock = client.fair_lock(name).unwrap();
                tokio::spawn(async move { lock.acquire().no_wait().lease(lease).await })
            })
            .collect()
    };
    for task in try_fair(&fair_names) {
        let guard = within("a fair try", task).await.unwrap().unwrap().unwrap();
        guard.unlock().await.unwrap();
    }

    // Nobody waits for any of them: each call costs what it sends (the
    // queue and the deadlines it would walk are absent), so they batch.
    let before = evalshas().await;
    proxy.stall_replies();
    let tries = try_fair(&fair_names);
    after_all_sent(&client, &raw, "marker:fair").await;
    assert_eq!(
        existing(&raw, &fair_names).await,
        TASKS,
        "every fair try ran"
    );
    let sent = evalshas().await - before;
    assert!(
        sent < TASKS as u64,
        "{sent} EVALSHAs for {TASKS} fair tries"
    );
    proxy.resume_replies();
    for task in tries {
        let guard = within("a fair try", task).await.unwrap().unwrap().unwrap();
        guard.unlock().await.unwrap();
    }

    // An ended waiter (a JVM thread that was interrupted) at the head of
    // each queue: a try walks it. Only those that found a free place ran
    // (at most 16 per connection, `WALKING_AT_ONCE`, one per stripe of
    // slots); a batch ran none of the others, whose ended waiter is still
    // there until each goes out on its own.
    let queue_of = |name: &str| redisson_lock::naming::fair_queue_name(name);
    for name in &fair_names {
        let _: () = raw.rpush(queue_of(name), "ended:1").await.unwrap();
        let deadlines = redisson_lock::naming::fair_timeout_name(name);
        let _: () = raw
            .zadd(deadlines, None, None, false, false, (1.0, "ended:1"))
            .await
            .unwrap();
    }
    proxy.stall_replies();
    let tries = try_fair(&fair_names);
    after_all_sent(&client, &raw, "marker:fair-ended").await;
    let ran = existing(&raw, &fair_names).await;
    assert!((1..=16).contains(&ran), "{ran} fair tries ran");
    let mut queued = 0;
    for name in &fair_names {
        queued += raw.llen::<usize, _>(queue_of(name)).await.unwrap();
    }
    assert_eq!(
        queued,
        TASKS - ran,
        "ended waiters left by the tries that ran"
    );
    proxy.resume_replies();
    let mut guards = vec![];
    for task in tries {
        guards.push(within("a fair try", task).await.unwrap().unwrap().unwrap());
    }
    for name in &fair_names {
        assert_eq!(raw.exists::<i64, _>(queue_of(name)).await.unwrap(), 0);
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }

    // Fair waiters giving up at once, all in one queue.
    let queue = "walking:queue";
    let queue_len = || raw.llen::<usize, _>(redisson_lock::naming::fair_queue_name(queue));
    let held = other
        .fair_lock(queue)
        .unwrap()
        .acquire()
        .lease(lease)
        .await
        .unwrap();
    let waiting = client.fair_lock(queue).unwrap();
    let gave_up = waiting
        .try_lock_for(Duration::from_millis(1))
        .await
        .unwrap();
    assert!(gave_up.is_none(), "the give-up script is cached now");
    // A JVM waiter first in line, for good: every try walks it, so each
    // goes out on its own as the script itself (once, if the try found a
    // free place; otherwise after its batch did not run it).
    let jvm = "jvm-waiter:1";
    let _: () = raw
        .rpush(redisson_lock::naming::fair_queue_name(queue), jvm)
        .await
        .unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let deadline = (now.unwrap().as_millis() + 600_000) as f64;
    let _: () = raw
        .zadd(
            redisson_lock::naming::fair_timeout_name(queue),
            None,
            None,
            false,
            false,
            (deadline, jvm),
        )
        .await
        .unwrap();
    let acquire = fred::util::sha1_hash(concat!(
        include_str!("../lua/fair/prelude.lua"),
        include_str!("../lua/fair/acquire.lua")
    ));
    let tries = proxy.requests(&acquire);
    let sent_before = evalshas().await;
    let waiters: Vec<_> = (0..TASKS)
        .map(|_| {
            let lock = waiting.clone();
            tokio::spawn(async move { lock.lock().await })
        })
        .collect();
    // Each waiter tries once, subscribes, tries again, then sleeps for the
    // holder's TTL: once all of that ran, nothing of theirs is in flight.
    within("every waiter queued and asleep", async {
        while proxy.requests(&acquire) < tries + 2 * TASKS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(queue_len().await.unwrap(), TASKS + 1);
    // Nothing but those tries: while one of its lock's scripts is in
    // flight, a try waits for its place rather than go out checked in a
    // batch only to be answered "not run" (a round trip for nothing).
    assert_eq!(
        evalshas().await - sent_before,
        2 * TASKS as u64,
        "EVALSHAs of {TASKS} waiters trying twice"
    );
    let before = evalshas().await;
    proxy.stall_replies();
    for waiter in &waiters {
        waiter.abort();
    }
    after_all_sent(&client, &raw, "marker:give-up").await;
    assert_eq!(evalshas().await - before, 1, "give-ups in flight at once");
    assert_eq!(queue_len().await.unwrap(), TASKS);
    proxy.resume_replies();
    within("every waiter left the queue", async {
        while queue_len().await.unwrap() > 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(evalshas().await - before, TASKS as u64, "give-ups batched");
    for waiter in waiters {
        let outcome = within("an aborted waiter", waiter).await;
        assert!(outcome.unwrap_err().is_cancelled());
    }
    held.unlock().await.unwrap();

    // Read unlocks, all on one read-write lock.
    let rw = client.read_write_lock("walking:rw").unwrap();
    rw.read().lock().await.unwrap().unlock().await.unwrap();
    let mut readers = vec![];
    for _ in 0..TASKS {
        readers.push(rw.read().acquire().lease(lease).await.unwrap());
    }
    let before = evalshas().await;
    proxy.stall_replies();
    let unlocks: Vec<_> = readers
        .into_iter()
        .map(|guard| tokio::spawn(async move { guard.unlock().await }))
        .collect();
    after_all_sent(&client, &raw, "marker:read").await;
    assert_eq!(
        evalshas().await - before,
        1,
        "read unlocks in flight at once"
    );
    proxy.resume_replies();
    for unlock in unlocks {
        within("a read unlock", unlock).await.unwrap().unwrap();
    }
    assert_eq!(
        evalshas().await - before,
        TASKS as u64,
        "read unlocks batched"
    );
    let left: i64 = raw.exists("walking:rw").await.unwrap();
    assert_eq!(left, 0);
}

/// On a cluster, writes that must be followed by a `WAIT` go through the
/// same lane: concurrent acquires on one slot leave in batches, the batches
/// share `WAIT`s, and each caller still gets its own outcome. A frozen
/// replica keeps the first `WAIT` in flight for its whole timeout, so every
/// other acquire is made while it is, and waits for the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_acquires_that_wait_for_replicas_share_batches_and_waits() {
    use common::topology::{node_client, Cluster};
    let cluster = Cluster::start().await;
    let mut names: Vec<String> = (0..TASKS).map(|i| format!("{{batched}}:{i}")).collect();
    let slot = redisson_lock::naming::slot(&names[0]);
    let primary = cluster.owner_of(slot).await;
    let replica = cluster.replica_of(primary).await;
    // No renewal while the replica is frozen; acquires the replica did not
    // confirm are kept (one attempt each, so each sends one script).
    let mut lax = config(&cluster.url(), Duration::from_secs(30));
    lax.slaves_sync_timeout = Duration::from_millis(1500);
    lax.check_lock_synced_slaves = false;
    let client = RedissonClient::connect(lax).await.unwrap();
    let other = RedissonClient::connect(config(&cluster.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    let raw = node_client(primary).await;
    // A key of the wrong type, and a lock someone else holds, among them.
    raw.set::<(), _, _>("{batched}:wrong", "text", None, None, false)
        .await
        .unwrap();
    let _held = other.lock("{batched}:taken").unwrap().lock().await.unwrap();
    // The script and its batch form cached, the slot's owner known.
    let warm = client.lock("{batched}:warm").unwrap();
    warm.lock().await.unwrap().unlock().await.unwrap();
    names.push("{batched}:wrong".into());
    names.push("{batched}:taken".into());
    let (evalshas, waits) = (
        command_calls(&raw, "evalsha").await,
        command_calls(&raw, "wait").await,
    );

    cluster.node(replica).freeze();
    let replies = try_all(&client, &names).await;
    cluster.node(replica).thaw();
    let sent = command_calls(&raw, "evalsha").await - evalshas;
    let waited = command_calls(&raw, "wait").await - waits;
    eprintln!(
        "{sent} EVALSHAs and {waited} WAITs for {} acquires",
        names.len()
    );
    assert!(
        sent < names.len() as u64,
        "{sent} EVALSHAs for {} acquires: nothing was batched",
        names.len()
    );
    // One `WAIT` for the first acquire, which went alone; one shared by
    // every acquire made while it was in flight (their batch goes out at
    // the next turn); a third only for one made after that batch left.
    assert!(
        (2..=3).contains(&waited),
        "{waited} WAITs for {} acquires",
        names.len()
    );
    check(&raw, &names, replies).await;
    client.shutdown().await;
    other.shutdown().await;
}

/// On a cluster, a `WAIT` holds the connection to the node it went to, so
/// the writes of every slot a primary serves share one `WAIT` turn: with
/// the primary's replica frozen, acquires on 16 slots of it go out with 2
/// or 3 `WAIT`s, not one each. Keyed by slot, the turns let each slot's
/// first acquire send its own `WAIT`, and those queued on the connection
/// one after another: the sixteenth waited sixteen `WAIT` timeouts, and on
/// a lagging shard other calls on that connection ran out of time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_slots_of_one_primary_share_its_wait() {
    use common::topology::{node_client, Cluster};
    let cluster = Cluster::start().await;
    let first = "spread:0".to_string();
    let primary = cluster.owner_of(redisson_lock::naming::slot(&first)).await;
    let replica = cluster.replica_of(primary).await;
    // 16 names, each on a slot of its own, all served by that primary.
    let mut names = vec![];
    let mut slots = std::collections::HashSet::new();
    let mut i = 0;
    while names.len() < 16 {
        let name = format!("spread:{i}");
        let slot = redisson_lock::naming::slot(&name);
        if cluster.owner_of(slot).await == primary && slots.insert(slot) {
            names.push(name);
        }
        i += 1;
    }
    // Kept without a replica's confirmation (one script each); a short
    // `WAIT` timeout, so that a turn per slot costs seconds, not minutes.
    let mut lax = config(&cluster.url(), Duration::from_secs(30));
    lax.slaves_sync_timeout = Duration::from_millis(500);
    lax.check_lock_synced_slaves = false;
    // One write connection, which every slot's writes share.
    lax.master_connection_pool_size = 1;
    let client = RedissonClient::connect(lax).await.unwrap();
    let raw = node_client(primary).await;
    // The script cached, the slots' owner known.
    let warm = client.lock(&first).unwrap();
    warm.lock().await.unwrap().unlock().await.unwrap();
    let waits = command_calls(&raw, "wait").await;

    cluster.node(replica).freeze();
    let replies = try_all(&client, &names).await;
    cluster.node(replica).thaw();
    let waited = command_calls(&raw, "wait").await - waits;
    // One for the first acquire, which went alone; one shared by every
    // acquire made while it was in flight; a third only for one made after
    // that batch left.
    assert!(
        (1..=3).contains(&waited),
        "{waited} WAITs for {} acquires on {} slots of one primary",
        names.len(),
        slots.len()
    );
    for (name, reply) in names.iter().zip(replies) {
        let guard = reply
            .unwrap()
            .unwrap_or_else(|| panic!("{name} not acquired"));
        guard.unlock().await.unwrap();
    }
    client.shutdown().await;
}
