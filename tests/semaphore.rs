//! RSemaphore and RPermitExpirableSemaphore against a real redis-server:
//! never more holders than permits, wake-ups, lost messages, cancellation,
//! guards, shutdown and bad input.

use redisson_lock_testkit as common;

use std::time::{Duration, Instant};

use common::{command_calls, config, within, Proxy, RedisServer};
use fred::prelude::*;
use redisson_lock::{Error, PermitId, RedissonClient};

/// A client whose waiters re-check every `recheck` without a message.
async fn connect(url: &str, recheck: Duration) -> RedissonClient {
    common::init_tracing();
    let mut c = config(url, Duration::from_secs(2));
    c.recheck_interval = recheck;
    RedissonClient::connect(c).await.expect("connect")
}

/// Long enough that only a message can wake a waiter within the test.
const NO_RECHECK: Duration = Duration::from_secs(600);

async fn scripts_run(raw: &Client) -> u64 {
    command_calls(raw, "evalsha").await + command_calls(raw, "eval").await
}

/// Waits until `n` waiters of one client on `channel` made their attempt
/// after subscribing: `scripts` more scripts than `before` have run.
async fn waiting(server: &RedisServer, channel: &str, before: u64, scripts: u64) {
    common::await_subscribers(server, channel, 1).await;
    let raw = server.raw().await;
    common::topology::until("the waiters' attempts after subscribing", || async {
        scripts_run(&raw).await >= before + scripts
    })
    .await;
}

/// INCR `inside`, raise `max` to it, yield, DECR: the section's occupancy.
async fn occupied_section(redis: &Client) {
    let now: i64 = redis.incr("inside").await.unwrap();
    let _: Value = redis
        .eval(
            "if tonumber(redis.call('get', KEYS[1]) or '0') < tonumber(ARGV[1]) then \
             redis.call('set', KEYS[1], ARGV[1]) end",
            vec!["max"],
            vec![now],
        )
        .await
        .unwrap();
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    let _: i64 = redis.decr("inside").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_permits() {
    let server = RedisServer::start().await;
    let clients = [
        connect(&server.url(), NO_RECHECK).await,
        connect(&server.url(), NO_RECHECK).await,
    ];
    let plain = clients[0].semaphore("workers").unwrap();
    assert!(plain.try_set_permits(3).await.unwrap());
    assert!(!plain.try_set_permits(5).await.unwrap(), "set once");
    let expirable = clients[0].permit_expirable_semaphore("leased").unwrap();
    assert!(expirable.try_set_permits(2).await.unwrap());

    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let client = clients[t % 2].clone();
            tokio::spawn(async move {
                let redis = &common::fred_of(&client).await;
                let plain = client.semaphore("workers").unwrap();
                let expirable = client.permit_expirable_semaphore("leased").unwrap();
                for _ in 0..15 {
                    let permit = plain.acquire(1).await.unwrap();
                    occupied_section(redis).await;
                    assert_eq!(permit.release().await.unwrap(), 1);
                }
                for _ in 0..15 {
                    let permit = expirable
                        .acquire(1)
                        .lease(Duration::from_secs(60))
                        .await
                        .unwrap();
                    let now: i64 = redis.incr("leased-inside").await.unwrap();
                    assert!(now <= 2, "{now} holders of 2 expirable permits");
                    tokio::task::yield_now().await;
                    let _: i64 = redis.decr("leased-inside").await.unwrap();
                    assert_eq!(permit.release().await.unwrap(), 1);
                }
            })
        })
        .collect();
    within("contenders", futures::future::try_join_all(tasks))
        .await
        .unwrap();
    let raw = server.raw().await;
    let max: i64 = raw.get("max").await.unwrap();
    assert!(
        (1..=3).contains(&max),
        "at most 3 holders of 3 permits: {max}"
    );
    assert_eq!(plain.available_permits().await.unwrap(), 3);
    assert_eq!(expirable.available_permits().await.unwrap(), 2);
    assert_eq!(expirable.acquired_permits().await.unwrap(), 0);
}

#[tokio::test]
async fn one_release_of_n_wakes_n_waiters() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), NO_RECHECK).await;
    let releaser = connect(&server.url(), NO_RECHECK).await;
    let raw = server.raw().await;
    let semaphore = client.semaphore("slots").unwrap();
    semaphore.try_set_permits(1).await.unwrap();
    let first = semaphore.acquire(1).await.unwrap().forget();
    assert_eq!(first, 1);

    let before = scripts_run(&raw).await;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let s = semaphore.clone();
            tokio::spawn(async move { s.acquire(1).await })
        })
        .collect();
    // Each waiter tries once, subscribes, and tries again.
    waiting(&server, "redisson_sc:{slots}", before, 6).await;
    let mut observer = common::Observer::new(&server, &["redisson_sc:{slots}"], &[]).await;

    releaser
        .semaphore("slots")
        .unwrap()
        .release(2)
        .await
        .unwrap();
    assert_eq!(
        observer.next().await.1,
        "2",
        "release publishes the new total"
    );
    let mut waiters = waiters.into_iter();
    let mut done = Vec::new();
    let mut pending = Vec::new();
    // Two of the three get a permit; which two is up to the scheduler.
    within("two waiters woken by one release of 2", async {
        let mut all: Vec<_> = waiters.by_ref().collect();
        while done.len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let (finished, rest): (Vec<_>, Vec<_>) = all
                .into_iter()
                .partition(|w: &tokio::task::JoinHandle<_>| w.is_finished());
            for w in finished {
                done.push(w.await.unwrap().unwrap());
            }
            all = rest;
        }
        pending = all;
    })
    .await;
    assert_eq!(done.len(), 2);
    assert_eq!(pending.len(), 1);
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);

    // The third is served by the next release: a guard's.
    drop(done.pop());
    let third = within("the third waiter", pending.pop().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.count(), 1);
    drop((third, done));
    common::topology::until("permits given back", || async {
        semaphore.available_permits().await.unwrap() == 2
    })
    .await;
}

#[tokio::test]
async fn a_lost_wake_up_costs_at_most_the_recheck_interval() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), Duration::from_secs(1)).await;
    let raw = server.raw().await;
    let semaphore = client.semaphore("lost").unwrap();
    let expirable = client.permit_expirable_semaphore("lost-leased").unwrap();
    expirable.try_set_permits(1).await.unwrap();
    let held = expirable.acquire(1).forever().await.unwrap().forget();

    let before = scripts_run(&raw).await;
    let s = semaphore.clone();
    let plain_waiter = tokio::spawn(async move { s.acquire(2).await });
    waiting(&server, "redisson_sc:{lost}", before, 2).await;
    // Permits appear without a message: only the re-check can see them.
    let _: i64 = raw.incr_by("lost", 2).await.unwrap();
    let permits = within("the waiter's re-check", plain_waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(permits.count(), 2);
    permits.forget();

    // The subscriber's connection is killed while a permit is released: the
    // message goes nowhere, and the waiter still gets the permit.
    let e = expirable.clone();
    let expirable_waiter = tokio::spawn(async move { e.acquire(1).await });
    common::await_subscribers(&server, "redisson_sc:{lost-leased}", 1).await;
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
        .permit_expirable_semaphore("lost-leased")
        .unwrap()
        .release(&held)
        .await
        .unwrap();
    let permit = within(
        "the waiter after its subscriber was killed",
        expirable_waiter,
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(permit.ids().len(), 1);
}

#[tokio::test]
async fn a_cancelled_acquire_never_keeps_a_permit() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let client = connect(&proxy.url(), NO_RECHECK).await;
    let raw = server.raw().await;
    let semaphore = client.semaphore("cancel").unwrap();
    semaphore.try_set_permits(2).await.unwrap();
    let expirable = client.permit_expirable_semaphore("cancel-leased").unwrap();
    expirable.try_set_permits(1).await.unwrap();

    // Scripts loaded (a NOSCRIPT reply held back would stop the acquire).
    semaphore.acquire(1).await.unwrap().release().await.unwrap();
    expirable.acquire(1).await.unwrap().release().await.unwrap();

    // The acquire runs on Redis, its reply is held back, and the caller
    // leaves: the permits it took come back.
    proxy.stall_replies();
    let s = semaphore.clone();
    let acquire = tokio::spawn(async move { s.acquire(2).await });
    common::topology::until("the acquire ran on Redis", || async {
        raw.get::<i64, _>("cancel").await.unwrap() == 0
    })
    .await;
    acquire.abort();
    assert!(acquire.await.unwrap_err().is_cancelled());
    proxy.resume_replies();
    common::topology::until("the permits given back", || async {
        raw.get::<i64, _>("cancel").await.unwrap() == 2
    })
    .await;

    proxy.stall_replies();
    let e = expirable.clone();
    let acquire = tokio::spawn(async move { e.acquire(1).await });
    common::topology::until("the expirable acquire ran on Redis", || async {
        raw.zcard::<i64, _>("{cancel-leased}:timeout")
            .await
            .unwrap()
            == 1
    })
    .await;
    acquire.abort();
    proxy.resume_replies();
    common::topology::until("the leased permit given back", || async {
        raw.zcard::<i64, _>("{cancel-leased}:timeout")
            .await
            .unwrap()
            == 0
    })
    .await;
    assert_eq!(expirable.available_permits().await.unwrap(), 1);
    assert_eq!(client.permits_out(), 0);
}

#[tokio::test]
async fn guards_give_back_on_drop_and_forget_keeps() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), NO_RECHECK).await;
    let semaphore = client.semaphore("guards").unwrap();
    semaphore.try_set_permits(3).await.unwrap();

    let two = semaphore.acquire(2).await.unwrap();
    assert_eq!(client.permits_out(), 1);
    drop(two);
    common::topology::until("a dropped guard's permits back", || async {
        semaphore.available_permits().await.unwrap() == 3
    })
    .await;
    assert_eq!(client.permits_out(), 0);

    let kept = semaphore.try_acquire(3).await.unwrap().unwrap().forget();
    assert_eq!(kept, 3);
    assert!(semaphore.try_acquire(1).await.unwrap().is_none());
    semaphore.release(1).await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
    assert_eq!(semaphore.drain_permits().await.unwrap(), 1);
    assert!(semaphore
        .try_acquire_for(1, Duration::from_millis(50))
        .await
        .unwrap()
        .is_none());
    assert_eq!(semaphore.add_permits(-2).await.unwrap(), -2);
    assert_eq!(semaphore.add_permits(4).await.unwrap(), 2);
    assert!(semaphore.release_if_exists(1).await.unwrap());
    assert!(semaphore.delete().await.unwrap());
    assert!(!semaphore.release_if_exists(1).await.unwrap());
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
}

#[tokio::test]
async fn shutdown_gives_back_every_guard() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), NO_RECHECK).await;
    let raw = server.raw().await;
    let semaphore = client.semaphore("down").unwrap();
    semaphore.try_set_permits(3).await.unwrap();
    let expirable = client.permit_expirable_semaphore("down-leased").unwrap();
    expirable.try_set_permits(1).await.unwrap();
    let plain = semaphore.acquire(2).await.unwrap();
    let leased = expirable.acquire(1).await.unwrap();
    let s = semaphore.clone();
    let waiter = tokio::spawn(async move { s.acquire(3).await });
    common::await_subscribers(&server, "redisson_sc:{down}", 1).await;

    client.shutdown().await;
    assert!(matches!(
        within("the waiter told", waiter).await.unwrap(),
        Err(Error::Shutdown)
    ));
    assert_eq!(raw.get::<i64, _>("down").await.unwrap(), 3);
    assert_eq!(
        raw.zcard::<i64, _>("{down-leased}:timeout").await.unwrap(),
        0
    );
    assert!(matches!(plain.release().await, Err(Error::Shutdown)));
    assert!(matches!(leased.release().await, Err(Error::Shutdown)));
    assert!(matches!(semaphore.acquire(1).await, Err(Error::Shutdown)));
}

#[tokio::test]
async fn expired_leases_return_their_permits() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), NO_RECHECK).await;
    let semaphore = client.permit_expirable_semaphore("expiring").unwrap();
    semaphore.try_set_permits(2).await.unwrap();

    let unix_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let before = unix_ms();
    let short = semaphore
        .acquire(1)
        .lease(Duration::from_millis(300))
        .await
        .unwrap();
    let after = unix_ms();
    let long = semaphore.acquire(1).forever().await.unwrap();
    let leases = semaphore.leases().await.unwrap();
    assert_eq!(leases.len(), 2);
    let never = leases.iter().find(|l| l.id == long.ids()[0]).unwrap();
    assert_eq!(never.expires_at_ms, None);
    let ending = leases.iter().find(|l| l.id == short.ids()[0]).unwrap();
    // Unix ms, as every expiry the crate reports: 300 ms after the acquire.
    let at = ending.expires_at_ms.unwrap();
    assert!(
        (before + 300..=after + 300).contains(&at),
        "{at}: {before}..{after}"
    );
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    assert_eq!(semaphore.acquired_permits().await.unwrap(), 2);
    assert_eq!(semaphore.permits().await.unwrap(), 2);

    // No message announces an ending lease: the waiter wakes when it ends.
    let next = within(
        "a permit from an ended lease",
        semaphore.acquire(1).lease(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert!(!semaphore.update_lease(short.ids()[0], None).await.unwrap());
    assert_eq!(short.release().await.unwrap(), 0, "its lease had ended");

    // Release by id, once.
    let id: PermitId = long.ids()[0].to_string().parse().unwrap();
    let long_ids = long.forget();
    assert!(semaphore
        .update_lease(id, Some(Duration::from_secs(5)))
        .await
        .unwrap());
    semaphore.release(&long_ids).await.unwrap();
    assert!(matches!(
        semaphore.release(&long_ids).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(semaphore.try_release(&long_ids).await.unwrap(), 0);
    assert_eq!(next.release().await.unwrap(), 1);
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
    assert_eq!(semaphore.add_permits(-1).await.unwrap(), 1);
    semaphore.set_permits(5).await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 5);
    assert!(semaphore.delete().await.unwrap());
}

fn invalid<T>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

#[tokio::test]
async fn bad_input_is_refused_and_touches_nothing() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), NO_RECHECK).await;
    let raw = server.raw().await;
    let semaphore = client.semaphore("bad").unwrap();
    assert!(invalid(semaphore.try_set_permits(0).await));
    assert!(invalid(semaphore.acquire(0).await.map(|_| ())));
    assert!(invalid(semaphore.release(0).await));
    assert!(invalid(
        semaphore.try_acquire(i32::MAX as u32 + 1).await.map(|_| ())
    ));
    assert!(invalid(
        semaphore.try_set_permits_with_ttl(1, Duration::ZERO).await
    ));
    assert_eq!(raw.exists::<i64, _>("bad").await.unwrap(), 0);

    // A release past the Java int range changes nothing.
    semaphore.try_set_permits(5).await.unwrap();
    assert!(invalid(semaphore.release(i32::MAX as u32).await));
    assert!(invalid(semaphore.add_permits(i32::MAX).await.map(|_| ())));
    assert_eq!(raw.get::<i64, _>("bad").await.unwrap(), 5);

    let expirable = client.permit_expirable_semaphore("bad-leased").unwrap();
    assert!(invalid(
        expirable.acquire(1).lease(Duration::ZERO).await.map(|_| ())
    ));
    assert!(invalid(expirable.try_release(&[]).await));
    assert!(invalid(expirable.try_set_permits(0).await));
    assert!("not-hex".parse::<PermitId>().is_err());

    // Someone else's key of another type: a typed error, the key untouched.
    let _: i64 = raw.rpush("jobs", "a").await.unwrap();
    let jobs = client.semaphore("jobs").unwrap();
    for result in [
        jobs.try_acquire(1).await.map(|_| ()),
        jobs.release(1).await,
        jobs.available_permits().await.map(|_| ()),
    ] {
        assert!(
            matches!(&result, Err(Error::WrongType { name, expected, .. }) if name == "jobs" && *expected == "semaphore"),
            "{result:?}"
        );
    }
    let wrong = client.permit_expirable_semaphore("jobs").unwrap();
    assert!(matches!(
        wrong.try_acquire(1).await,
        Err(Error::WrongType { .. })
    ));
    assert_eq!(
        raw.lrange::<Vec<String>, _>("jobs", 0, -1).await.unwrap(),
        ["a"]
    );

    assert!(matches!(
        client.semaphore(""),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.permit_expirable_semaphore(""),
        Err(Error::InvalidArgument(_))
    ));
}

/// Expirable permits from the builder are kept alive by default, as a
/// lock is: leased for the watchdog timeout, not forever (a crashed holder
/// kept them for good). `kept_alive_for(l)` leases them for `l` and renews
/// them every third of it on a timer of its own, whatever the client's
/// watchdog (here 30 s); forgotten, they come back within `l`.
/// `forever()` (and Redisson's `try_acquire`) never expire.
#[tokio::test]
async fn permits_are_kept_alive_by_default_and_on_a_lease_of_their_own() {
    let server = RedisServer::start().await;
    let client = common::client(&server, Duration::from_secs(30)).await;
    let slots = client.permit_expirable_semaphore("kept-own").unwrap();
    slots.try_set_permits(3).await.unwrap();

    let by_default = slots.acquire(1).await.unwrap();
    let left = slots.lease_time(by_default.ids()[0]).await.unwrap();
    assert!(
        left.is_some_and(|l| l <= Duration::from_secs(30)),
        "{left:?}"
    );
    let forever = slots.acquire(1).forever().await.unwrap();
    assert_eq!(slots.lease_time(forever.ids()[0]).await.unwrap(), None);

    let own = slots
        .acquire(1)
        .kept_alive_for(Duration::from_millis(600))
        .await
        .unwrap();
    let id = own.ids()[0];
    let first_end = Instant::now() + slots.lease_time(id).await.unwrap().unwrap();
    // Renewed (its end moves on) long before the watchdog's first cycle.
    common::topology::until("a renewal of its own", || async {
        let left = slots.lease_time(id).await.unwrap().unwrap();
        Instant::now() + left > first_end + Duration::from_millis(100)
    })
    .await;
    assert!(!own.is_lost() && !own.is_at_risk());
    assert_eq!(
        client.watchdog_stats().cycles,
        0,
        "the watchdog did not run"
    );
    // Forgotten, as a crash leaves them: back within their lease.
    own.forget();
    let back = within(
        "the forgotten permit's lease ends",
        slots.acquire(1).forever(),
    )
    .await
    .unwrap();
    assert_eq!(back.release().await.unwrap(), 1);
    assert!(matches!(
        slots
            .acquire(1)
            .kept_alive_for(Duration::from_millis(2))
            .await,
        Err(Error::InvalidArgument(_))
    ));
    drop((by_default, forever));
    client.shutdown().await;
}

/// `acquire(n).kept_alive()`: leased for the watchdog timeout (2 s here) and
/// renewed every third of it, so the permits outlive several leases while
/// held; a renewal that finds one gone makes the guard lost; forgotten (as
/// a crash leaves them), they come back within the lease. A fixed lease is
/// lost at its end; permits without one never are.
#[tokio::test]
async fn kept_alive_permits_are_renewed_and_tell_when_lost() {
    let server = RedisServer::start().await;
    let client = connect(&server.url(), Duration::from_millis(200)).await;
    let slots = client.permit_expirable_semaphore("kept").unwrap();
    slots.try_set_permits(2).await.unwrap();

    let kept = slots.acquire(1).kept_alive().await.unwrap();
    let id = kept.ids()[0];
    let first = slots.lease_time(id).await.unwrap().unwrap();
    assert!(first <= Duration::from_secs(2), "{first:?}");
    // Three watchdog cycles: 2 s in all, the whole first lease.
    let mut updates = client.watchdog_updates();
    let cycles = client.watchdog_stats().cycles;
    within(
        "three renewal cycles",
        updates.wait_for(|s| s.cycles >= cycles + 3),
    )
    .await
    .unwrap();
    assert!(
        slots.lease_time(id).await.unwrap().is_some(),
        "still leased"
    );
    assert!(!kept.is_lost() && !kept.is_at_risk());
    assert_eq!(slots.available_permits().await.unwrap(), 1);

    // Released by id behind its back (as another client may): the next
    // renewal says lost.
    slots.release(&[id]).await.unwrap();
    within("lost", kept.lost()).await;
    assert!(kept.is_lost());
    drop(kept);

    // Forgotten kept-alive permits are renewed no more: back within the
    // lease, with no release at all.
    let forgotten = within("two permits", slots.acquire(2).kept_alive())
        .await
        .unwrap()
        .forget();
    assert_eq!(forgotten.len(), 2);
    let back = within("the forgotten permits' lease ends", slots.acquire(2))
        .await
        .unwrap();
    assert_eq!(back.release().await.unwrap(), 2);

    // A fixed lease is lost at its end; permits that never expire never are.
    let fixed = within(
        "one permit",
        slots.acquire(1).lease(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let forever = within("another", slots.acquire(1).forever()).await.unwrap();
    within("the fixed lease's end", fixed.lost()).await;
    assert!(!forever.is_lost());
    assert_eq!(forever.release().await.unwrap(), 1);
    client.shutdown().await;
}
