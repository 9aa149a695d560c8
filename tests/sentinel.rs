//! Sentinel: 1 primary, 2 replicas and 3 sentinels, started by the test.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::topology::{node_client, Sentinel};
use common::{config, within};
use fred::prelude::*;
use redisson_lock::{RedissonClient, Unlocked};

/// `SENTINEL SET`: a primary or replica is judged down only after a minute,
/// so nothing a test does to one (a kill, a freeze) starts a failover or
/// drops it from the replicas a failover could promote.
const SLOW_DOWN_AFTER: [&str; 4] = [
    "SET",
    common::topology::SERVICE,
    "down-after-milliseconds",
    "60000",
];

async fn connect(sentinel: &Sentinel, check_synced: bool, watchdog: Duration) -> RedissonClient {
    let mut c = config(&sentinel.url(), watchdog);
    c.check_lock_synced_slaves = check_synced;
    RedissonClient::connect(c)
        .await
        .expect("connect through the sentinels")
}

/// Waits until `client`'s watchdog has completed `n` more cycles that renewed
/// at least `locks` locks.
async fn renewed_cycles(client: &RedissonClient, locks: u64, n: u64) {
    let mut updates = client.watchdog_updates();
    let mut seen = 0;
    within("watchdog cycles", async {
        while seen < n {
            updates.changed().await.unwrap();
            if updates.borrow_and_update().last_cycle_locks >= locks {
                seen += 1;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_keeps_synced_locks_and_their_waiters() {
    let mut sentinel = Sentinel::start().await;
    // The lease must outlast the failover: while no primary answers,
    // nothing can renew it. Usually 2-3 s here, but a split vote among the
    // sentinels retries only after twice the failover timeout (10 s), and
    // the lease runs from the last renewal (up to a third of it before the
    // kill): 24 s covers that, where 6 s left 1 run in 7 rightly lost.
    // Every replica confirms the holder's writes: with the default quorum
    // (one of the two) Sentinel may promote the other one, and whether it
    // had the write by then is replication timing, which no client decides.
    let holder = {
        let mut c = config(&sentinel.url(), Duration::from_secs(24));
        c.replica_quorum = redisson_lock::ReplicaQuorum::All;
        within("holder connect", RedissonClient::connect(c))
            .await
            .expect("connect through the sentinels")
    };
    let waiter = within(
        "waiter connect",
        connect(&sentinel, true, Duration::from_secs(2)),
    )
    .await;

    // A watchdog lock, and one with a long lease that only an unlock message
    // can hand over in time.
    let renewed = within("lock payroll", holder.lock("payroll").unwrap().lock())
        .await
        .unwrap();
    let leased = within(
        "lock invoices",
        holder
            .lock("invoices")
            .unwrap()
            .acquire()
            .lease(Duration::from_secs(120)),
    )
    .await
    .unwrap();
    let lock = waiter.lock("invoices").unwrap();
    // A waiter woken during the failover (its subscriber reconnected) tries
    // while no primary answers, and `lock()` fails as Redisson's does; a
    // caller then waits again. Only transient errors may happen.
    let waiting = tokio::spawn(async move {
        loop {
            match lock.lock().await {
                Ok(guard) => return Ok::<_, redisson_lock::Error>(guard),
                Err(
                    e @ (redisson_lock::Error::Connection { .. }
                    | redisson_lock::Error::Timeout(_)
                    | redisson_lock::Error::OutcomeUnknown { .. }
                    | redisson_lock::Error::ReplicasNotSynced { .. }),
                ) => {
                    tracing::info!(error = %e, "waiter: transient error during the failover; waiting again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    });
    let old = sentinel.primary_port().await;
    common::await_subscribers(sentinel.node(old), "redisson_lock__channel:{invoices}", 1).await;

    // Both acquisitions were confirmed by both replicas before returning, so
    // killing the primary now cannot lose them.
    within("kill the primary", sentinel.primary.kill()).await;
    let new = sentinel.await_new_primary(old).await;
    let raw = node_client(new).await;
    let field = renewed.field();
    assert!(
        within("HEXISTS", raw.hexists::<bool, _, _>("payroll", &field))
            .await
            .unwrap()
    );
    assert!(
        within("EXISTS", raw.exists::<i64, _>("invoices"))
            .await
            .unwrap()
            == 1
    );

    // The holder renews on the new primary and never hears of a loss, or
    // is told of one the new primary shows: a split vote whose second
    // failover wins promotes a replica whose copy of the lock carries the
    // TTL of the last renewal it replicated, and a second round of votes
    // can outlast that (seen once in CI: "a second failover replaced the
    // first primary agreed on"). That loss is real, and told.
    renewed_cycles(&holder, 1, 2).await;
    assert!(!leased.is_lost(), "a 120 s lease outlasts any failover");
    let rightly_lost = renewed.is_lost();
    if rightly_lost {
        let held: bool = within("HEXISTS", raw.hexists("payroll", &field))
            .await
            .unwrap();
        assert!(!held, "told lost, yet the new primary has the hold");
        eprintln!("payroll expired on the primary the sentinels settled on; the holder was told");
    } else {
        let ttl: i64 = within("PTTL", raw.pttl("payroll")).await.unwrap();
        assert!(
            ttl > 0 && ttl <= 24_000,
            "renewed to the watchdog lease: {ttl}"
        );
    }

    // The waiter re-subscribed on the new primary and is woken by the unlock.
    common::topology::until("waiter subscribed on the new primary", || async {
        common::numsub(&raw, "redisson_lock__channel:{invoices}").await == 1
    })
    .await;
    assert!(
        !waiting.is_finished(),
        "mutual exclusion across the failover"
    );
    assert_eq!(
        within("unlock invoices", leased.unlock()).await.unwrap(),
        Unlocked::Released
    );
    let got = within("waiter woken after the failover", waiting)
        .await
        .unwrap()
        .unwrap();
    within("the waiter's unlock", got.unlock()).await.unwrap();
    match within("unlock payroll", renewed.unlock()).await {
        Ok(unlocked) => assert!(!rightly_lost && unlocked == Unlocked::Released),
        Err(redisson_lock::Error::LockLost { .. }) => assert!(rightly_lost),
        Err(e) => panic!("unlock payroll: {e}"),
    }
    within("holder shutdown", holder.shutdown()).await;
    within("waiter shutdown", waiter.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_the_new_primary_never_got_is_reported_lost() {
    let mut sentinel = Sentinel::start().await;
    // checkLockSyncedSlaves off: a write no replica confirmed still counts.
    let holder = connect(&sentinel, false, Duration::from_secs(2)).await;
    let other = connect(&sentinel, true, Duration::from_secs(2)).await;

    for replica in &sentinel.replicas {
        replica.freeze();
    }
    let guard = holder.lock("reports").unwrap().lock().await;
    let old = sentinel.primary_port().await;
    sentinel.primary.kill().await;
    for replica in &sentinel.replicas {
        replica.thaw();
    }
    let guard = guard.expect("acquired on the primary alone");
    let new = sentinel.await_new_primary(old).await;
    assert_eq!(
        node_client(new)
            .await
            .exists::<i64, _>("reports")
            .await
            .unwrap(),
        0,
        "the promoted replica never received the lock"
    );

    // The next renewal on the new primary finds it gone: the holder is told.
    within("lost signal", guard.lost()).await;
    assert!(guard.is_lost());
    // Someone else can take it now (once the sentinels agree the failover is
    // over: until then no write is confirmed), and the old guard cannot
    // release theirs.
    let theirs = within("a confirmed acquire after the failover", async {
        loop {
            match other.lock("reports").unwrap().lock().await {
                Ok(guard) => return guard,
                Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert!(matches!(
        guard.unlock().await,
        Err(redisson_lock::Error::LockLost { .. })
    ));
    assert!(other.lock("reports").unwrap().is_locked().await.unwrap());
    theirs.unlock().await.unwrap();
    holder.shutdown().await;
    other.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_keep_mutual_exclusion_through_a_failover() {
    let mut sentinel = Sentinel::start().await;
    let clients = [
        connect(&sentinel, true, Duration::from_secs(2)).await,
        connect(&sentinel, true, Duration::from_secs(2)).await,
    ];
    const TASKS: usize = 6;
    const SECTIONS: u32 = 12;
    let (mut progress, tasks) = common::contenders(&clients, "inventory", TASKS, SECTIONS);
    within("first sections", progress.wait_for(|n| *n >= 20))
        .await
        .unwrap();
    let old = sentinel.primary_port().await;
    sentinel.primary.kill().await;
    sentinel.await_new_primary(old).await;
    let mut errors = 0;
    for task in tasks {
        errors += within("every contender finishes", task).await.unwrap();
    }
    assert_eq!(*progress.borrow(), TASKS as u32 * SECTIONS);
    eprintln!("contenders saw {errors} failed lock() calls during the failover");
    for client in clients {
        client.shutdown().await;
    }
}

/// The quorum is taken of the replicas a failover could promote. A replica
/// the sentinels still reach but the primary does not (its replication link
/// cut) can be promoted, and lacks every write: it counts, and writes are
/// refused as the quorum says. Once it stops answering the sentinels'
/// pings for five seconds, Sentinel would never promote it: it no longer
/// counts, without waiting for `down-after-milliseconds` (a minute here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quorum_counts_the_replicas_a_failover_could_promote() {
    use redisson_lock::{Error, ReplicaQuorum, SafetyLevel};

    let sentinel = Sentinel::start_proxied().await;
    sentinel.on_sentinels(&SLOW_DOWN_AFTER).await;
    let quorum_client = |quorum| {
        let mut c = config(&sentinel.url(), Duration::from_secs(2));
        c.replica_quorum = quorum;
        c.slaves_sync_timeout = Duration::from_millis(200);
        c.retry_attempts = 2;
        RedissonClient::connect(c)
    };
    let any = quorum_client(ReplicaQuorum::Any).await.unwrap();
    let all = quorum_client(ReplicaQuorum::All).await.unwrap();
    let two = quorum_client(ReplicaQuorum::AtLeast(2)).await.unwrap();

    // Both replicas up: every quorum is met, and the guard says by how many
    // (WAIT answers once the quorum is reached, counting every replica that
    // has the write by then: Redisson's rule may see 1 or 2).
    // A replica of a loaded machine may miss a 200 ms WAIT: that is a
    // refusal, and the next try is judged afresh.
    async fn until_confirmed(lock: redisson_lock::RLock) -> redisson_lock::LockGuard {
        within("an acquire the replicas confirm", async {
            loop {
                match lock.lock().await {
                    Ok(guard) => return guard,
                    Err(Error::ReplicasNotSynced { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .await
    }
    for (client, at_least) in [(&any, 1), (&all, 2), (&two, 2)] {
        let guard = until_confirmed(client.lock("quorum").unwrap()).await;
        assert!(
            matches!(guard.safety(), SafetyLevel::Replicas { acked, promotable: 2 } if acked >= at_least),
            "{:?}",
            guard.safety()
        );
        guard.unlock().await.unwrap();
    }

    // An all-replica holder, then one replica is cut off from the primary
    // (the sentinels still reach it: it stays promotable).
    let held = until_confirmed(all.lock("quorum").unwrap()).await;
    let cut = sentinel.replicas[0].port;
    let cut_announced = sentinel.proxy(cut).port;
    let primary_proxy = &sentinel.proxies[0];
    primary_proxy.cut_replica(cut_announced);

    // Its unlock reaches one replica at most: replayed through the latch,
    // then reported; the lock is released on the primary all the same.
    let err = held.unlock().await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::ReplicasNotSynced {
                operation: "unlock",
                acked: 0..=1,
                required: 2,
                promotable: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("of the 2 replicas a failover could promote; 2 required"),
        "{err}"
    );
    assert!(!any.lock("quorum").unwrap().is_locked().await.unwrap());

    // One confirmation is enough for Redisson's rule, not for the stricter ones.
    let taken = until_confirmed(any.lock("quorum").unwrap()).await;
    assert_eq!(
        taken.safety(),
        SafetyLevel::Replicas {
            acked: 1,
            promotable: 2
        }
    );
    taken.unlock().await.unwrap();
    for client in [&all, &two] {
        let lock = client.lock("quorum").unwrap();
        let err = lock.lock().await.unwrap_err();
        assert!(
            matches!(
                &err,
                Error::ReplicasNotSynced {
                    operation: "acquire",
                    acked: 1,
                    required: 2,
                    promotable: 2,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!lock.is_locked().await.unwrap(), "the acquire was undone");
        // A single try answers after one WAIT, and sends nothing while the
        // same primary has just fallen short.
        assert!(matches!(
            lock.try_lock().await,
            Err(Error::ReplicasNotSynced { .. })
        ));
    }

    // A strict holder whose renewals are never confirmed hears first that
    // its lock is at risk, then, its lease run out locally, that it is lost:
    // a failover could promote the replica that lacks the renewals.
    primary_proxy.heal_replica(cut_announced);
    let strict = within("the cut replica is back", async {
        loop {
            match all.lock("renewed").unwrap().lock().await {
                Ok(guard) => return guard,
                Err(Error::ReplicasNotSynced { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert!(!strict.is_at_risk());
    primary_proxy.cut_replica(cut_announced);
    within(
        "at-risk signal after an unconfirmed renewal",
        strict.at_risk(),
    )
    .await;
    assert!(!strict.is_lost(), "at risk comes before lost");
    within("lost signal after unconfirmed renewals", strict.lost()).await;
    assert!(all.watchdog_stats().failures > 0);

    // The cut replica stops answering the sentinels too (frozen): five
    // seconds later Sentinel would pass it over, and it no longer counts.
    // "all" is the one replica left; "at least 2" still cannot be met.
    sentinel.replicas[0].freeze();
    let lock = all.lock("quorum").unwrap();
    let guard = within("the quorum of the replicas left", async {
        loop {
            match lock.lock().await {
                Ok(guard) => return guard,
                Err(Error::ReplicasNotSynced { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert_eq!(
        guard.safety(),
        SafetyLevel::Replicas {
            acked: 1,
            promotable: 1
        }
    );
    guard.unlock().await.unwrap();
    // Each client has its own view of the sentinels: "at least 2" is
    // refused all along, first with the frozen replica counted, then, once
    // its view has caught up, for want of a second replica.
    let lock = two.lock("quorum").unwrap();
    within("at least 2 refused for want of a second replica", async {
        loop {
            match lock.lock().await {
                Err(Error::ReplicasNotSynced {
                    promotable: 1,
                    required: 2,
                    ..
                }) => return,
                Err(Error::ReplicasNotSynced {
                    promotable: 2,
                    required: 2,
                    ..
                }) => {}
                other => panic!("at least 2 of one replica: {other:?}"),
            }
        }
    })
    .await;
    sentinel.replicas[0].thaw();
    primary_proxy.heal_replica(cut_announced);
    drop(strict);
    for client in [any, all, two] {
        client.shutdown().await;
    }
}

/// Tokens and fences are confirmed by the replicas like the lock itself:
/// after a failover a stale holder's `set_if_newest` is still refused, and
/// the next token is above every token handed out before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_survives_a_failover() {
    let sentinel = Sentinel::start().await;
    let client = connect(&sentinel, true, Duration::from_secs(3)).await;
    let lock = client.fenced_lock("ledger").unwrap();

    // The first holder writes, then loses the lock while it still believes
    // it holds it (deleted under it, as an expiry after a pause would).
    let stale = lock.lock().await.unwrap();
    assert!(stale.set_if_newest("ledger:balance", "100").await.unwrap());
    assert!(lock.force_unlock().await.unwrap());
    let newer = lock.lock().await.unwrap();
    assert!(newer.token() > stale.token());
    // With no replica answering, the fence is written on the primary only:
    // that is reported, not claimed (a failover now would bring back the
    // old fence, and the stale holder could write).
    for replica in &sentinel.replicas {
        replica.freeze();
    }
    let unconfirmed = newer.set_if_newest("ledger:balance", "90").await;
    for replica in &sentinel.replicas {
        replica.thaw();
    }
    assert!(
        matches!(
            unconfirmed,
            Err(redisson_lock::Error::ReplicasNotSynced {
                operation: "set_if_newest",
                ..
            })
        ),
        "{unconfirmed:?}"
    );
    // Sent again once the replicas answer (the same token may write again).
    assert!(newer.set_if_newest("ledger:balance", "90").await.unwrap());
    let newer_token = newer.token();
    newer.unlock().await.unwrap();

    // The primary fails over, once the sentinels see the replicas answer
    // again (frozen for the 1 s WAIT, they may be flagged down).
    sentinel.await_healthy().await;
    let old = sentinel.primary_port().await;
    sentinel
        .on_sentinels_first(&["FAILOVER", common::topology::SERVICE])
        .await;
    sentinel.await_new_primary(old).await;
    sentinel.await_healthy().await;

    // The fence and the token counter came through: the stale holder is
    // refused, and the next holder's token is above every earlier one.
    let written = within("the stale write", async {
        loop {
            match stale.set_if_newest("ledger:balance", "110").await {
                Ok(written) => return written,
                // Until the client has moved to the new primary.
                Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    if written {
        let mut seen = vec![];
        for node in sentinel.data_nodes() {
            let c = node_client(node.port).await;
            let fence: Option<String> = c.get("redisson_fence:{ledger:balance}").await.unwrap();
            let value: Option<String> = c.get("ledger:balance").await.unwrap();
            let role: String = c
                .info(Some(fred::types::InfoKind::Replication))
                .await
                .unwrap();
            let role = role
                .lines()
                .find(|l| l.starts_with("role:"))
                .unwrap_or("")
                .to_string();
            seen.push(format!(
                "{}: {role} fence {fence:?} value {value:?}",
                node.port
            ));
        }
        panic!(
            "a stale holder (token {}) wrote after the failover (newer token {newer_token}): {seen:#?}",
            stale.token()
        );
    }
    let next = lock_once_confirmed(&lock).await;
    assert!(next.token() > newer_token);
    let raw = node_client(sentinel.primary_port().await).await;
    let balance: String = raw.get("ledger:balance").await.unwrap();
    assert_eq!(balance, "90");
    next.unlock().await.unwrap();
    drop(stale);
    client.shutdown().await;
}

/// A multi lock puts each member on the caller's lease once every member is
/// held; that lease is a write like a renewal: when the replicas do not
/// confirm it, the member is at risk (its deadline used to move as if they
/// had). One member behind Sentinel, one on a single server that the multi
/// lock waits for, so the replicas can be frozen between the first member's
/// confirmed acquisition and the leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_lease_the_replicas_did_not_confirm_is_at_risk() {
    let sentinel = Sentinel::start().await;
    // No replica is flagged down while frozen (the quorum would then drop it).
    sentinel.on_sentinels(&SLOW_DOWN_AFTER).await;
    let replicated = {
        let mut c = config(&sentinel.url(), Duration::from_secs(2));
        c.slaves_sync_timeout = Duration::from_millis(300);
        RedissonClient::connect(c).await.unwrap()
    };
    let single = common::RedisServer::start().await;
    let plain = common::client(&single, Duration::from_secs(2)).await;
    let other = common::client(&single, Duration::from_secs(2)).await;
    let blocker = other.lock("batch").unwrap().lock().await.unwrap();
    let multi = redisson_lock::RMultiLock::new(vec![
        replicated.lock("ledger").unwrap(),
        plain.lock("batch").unwrap(),
    ])
    .unwrap();
    let acquiring = tokio::spawn(async move {
        multi
            .acquire()
            .wait(Duration::from_secs(20))
            .lease(Duration::from_secs(10))
            .await
    });
    // The first member is held, confirmed; the second is waited for.
    common::await_subscribers(&single, "redisson_lock__channel:{batch}", 1).await;
    let primary = node_client(sentinel.primary_port().await).await;
    assert_eq!(primary.exists::<i64, _>("ledger").await.unwrap(), 1);
    for replica in &sentinel.replicas {
        replica.freeze();
    }
    blocker.unlock().await.unwrap();
    let acquired = within("the multi lock", acquiring).await.unwrap();
    for replica in &sentinel.replicas {
        replica.thaw();
    }
    let guard = acquired.unwrap().expect("every member held");
    let members = guard.guards();
    assert!(
        members[0].is_at_risk(),
        "the lease the replicas did not confirm"
    );
    assert!(!members[1].is_at_risk(), "no replica to wait for");
    // The lease was set on Redis all the same (shortened from the members'
    // acquisition lease of twice the wait).
    let ttl: i64 = primary.pttl("ledger").await.unwrap();
    assert!(ttl > 0 && ttl <= 10_000, "{ttl}");
    guard.unlock().await.unwrap();
    replicated.shutdown().await;
    plain.shutdown().await;
    other.shutdown().await;
}

/// The sentinels answer but the primary they name does not (an address this
/// host cannot reach: NAT, a TLS name, or a primary down before the sentinels
/// notice): the connect error says which address the sentinels gave, not only
/// the sentinels' own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connect_error_names_the_primary_the_sentinels_gave() {
    let mut sentinel = Sentinel::start().await;
    // Nobody fails it over while the client tries.
    sentinel.on_sentinels(&SLOW_DOWN_AFTER).await;
    let primary = sentinel.primary_port().await;
    sentinel.primary.kill().await;
    let err = within(
        "a connect to an unreachable primary",
        RedissonClient::connect(config(&sentinel.url(), Duration::from_secs(2))),
    )
    .await
    .expect_err("no primary to connect to");
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "the primary the sentinels name, 127.0.0.1:{primary}"
        )),
        "{text}"
    );
}

/// A client keeps a connection to every sentinel and a subscription to its
/// failover announcements; shutting it down, even at once, closes them all
/// (the CLI's short runs once hung here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_every_sentinel_connection() {
    let sentinel = Sentinel::start().await;
    let clients_on = client_connections_on;
    for wait_for_subscriptions in [false, true] {
        let client = connect(&sentinel, true, Duration::from_secs(2)).await;
        let id = client.id().to_string();
        if wait_for_subscriptions {
            let guard = client.lock("noop").unwrap().lock().await.unwrap();
            guard.unlock().await.unwrap();
            common::topology::until("subscribed on every sentinel", || async {
                let mut all = true;
                for s in &sentinel.sentinels {
                    all &= clients_on(s.port, id.clone()).await.1 == 1;
                }
                all
            })
            .await;
        } else {
            // The polls' connections are made at connect: it has some.
            let mut any = 0;
            for s in &sentinel.sentinels {
                any += clients_on(s.port, id.clone()).await.0;
            }
            assert!(any > 0, "the client's sentinel connections are named");
        }
        within("shutdown", client.shutdown()).await;
        common::topology::until("every sentinel connection closed", || async {
            let mut left = 0;
            for s in &sentinel.sentinels {
                left += clients_on(s.port, id.clone()).await.0;
            }
            left == 0
        })
        .await;
    }
}

/// (connections, subscribed connections) of the client `id` on the sentinel
/// on `port`: its connections name themselves, so the sentinels' own links
/// to each other (which come and go as they discover each other) do not
/// count.
async fn client_connections_on(port: u16, id: String) -> (usize, usize) {
    let list = client_list(port).await;
    let name = format!("name=redisson-lock:{id}:sentinel");
    let ours: Vec<&str> = list
        .lines()
        .filter(|l| l.split(' ').any(|f| f == name))
        .collect();
    let subscribed = ours
        .iter()
        .filter(|l| l.split(' ').any(|f| f.starts_with("sub=") && f != "sub=0"))
        .count();
    (ours.len(), subscribed)
}

/// `lock.lock()`, tried again while it fails for a passing reason (the
/// client still moving to a new primary, replicas not answering yet).
async fn lock_once_confirmed(lock: &redisson_lock::RFencedLock) -> redisson_lock::FencedGuard {
    within("a confirmed lock", async {
        loop {
            match lock.lock().await {
                Ok(guard) => return guard,
                Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
}

/// `CLIENT LIST` on the node or sentinel on `port`.
async fn client_list(port: u16) -> String {
    let c = node_client(port).await;
    let list: String = c
        .custom(
            fred::types::CustomCommand::new_static(
                "CLIENT",
                fred::types::ClusterHash::Random,
                false,
            ),
            vec!["LIST"],
        )
        .await
        .unwrap();
    let _ = c.quit().await;
    list
}

/// One address in front of three sentinels (a Kubernetes Service gives
/// one): the client finds the two it was not given (`SENTINEL SENTINELS`),
/// asks them and listens to their announcements, so a failover one of them
/// runs is heard. The failover suite's one-address row measures what that
/// keeps safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_finds_and_follows_every_sentinel() {
    let sentinel = Sentinel::start().await;
    let client = RedissonClient::connect(config(&sentinel.url_of_first(), Duration::from_secs(2)))
        .await
        .expect("connect through one sentinel address");
    let id = client.id().to_string();
    common::topology::until("subscribed on every sentinel, listed or not", || async {
        let mut all = true;
        for s in &sentinel.sentinels {
            all &= client_connections_on(s.port, id.clone()).await == (2, 1);
        }
        all
    })
    .await;
    let guard = client.lock("found").unwrap().lock().await.unwrap();
    assert!(guard.unlock().await.is_ok());
    within("shutdown", client.shutdown()).await;
}

/// Issue 49 item 7: sentinels addressed by pod IP leave their addresses
/// behind at every rollout, and the client finds each new one through the
/// one address it was given (here the first sentinel, which stays, as a
/// Service's address does). The sentinels the client asked only grew, up
/// to 16: after a few rollouts the new ones were skipped, and with only the
/// listed one answering every acquisition was refused on a healthy
/// deployment. A sentinel that has failed every poll for a while, and that
/// no answering sentinel names, is forgotten and its place reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_rollouts_leave_no_dead_member_behind() {
    let mut sentinel = Sentinel::start().await;
    let client = within(
        "connect through one sentinel",
        RedissonClient::connect(config(&sentinel.url_of_first(), Duration::from_secs(2))),
    )
    .await
    .expect("connect");
    let asked_by_the_client = |port: u16| async move {
        common::topology::on_node(port, "CLIENT", vec!["LIST"])
            .await
            .as_string()
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("name=redisson-lock:") && l.contains(":sentinel"))
    };
    let mut previous: Vec<u16> = sentinel.sentinels[1..].iter().map(|s| s.port).collect();
    // Seven rollouts of two sentinels: 17 addresses in all.
    for round in 0..7 {
        let fresh = vec![sentinel.add_sentinel().await, sentinel.add_sentinel().await];
        for &port in &fresh {
            common::topology::until(
                &format!("rollout {round}: the client asks the new sentinel on {port}"),
                || asked_by_the_client(port),
            )
            .await;
        }
        let gone = std::mem::replace(&mut previous, fresh);
        sentinel.remove_sentinels(&gone).await;
    }
    let guard = within(
        "a lock after the rollouts",
        client.lock("after-rollouts").unwrap().lock(),
    )
    .await
    .expect("the view settled on the live sentinels");
    guard.unlock().await.unwrap();
    within("shutdown", client.shutdown()).await;
}

/// A poll asks a sentinel only what moves (`MASTER`, `REPLICAS`): its id
/// and its peers are asked once per connection (again after a minute, or
/// when it counts another number of peers), so each poll costs a sentinel
/// two commands, where Redisson's scan sends three. Every poll used to ask
/// all four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_asks_a_sentinel_only_what_moves() {
    let sentinel = Sentinel::start().await;
    let proxy = common::Proxy::start(sentinel.sentinels[0].port).await;
    let url = format!(
        "redis-sentinel://127.0.0.1:{}?sentinelServiceName={}",
        proxy.port,
        common::topology::SERVICE
    );
    let client = RedissonClient::connect(config(&url, Duration::from_secs(2)))
        .await
        .expect("connect through a proxied sentinel");
    const MASTER: &str = "\r\nMASTER\r\n";
    common::topology::until("three polls through the proxy", || async {
        proxy.requests(MASTER) >= 3
    })
    .await;
    let polls = proxy.requests(MASTER);
    assert!(proxy.requests("\r\nREPLICAS\r\n") >= polls - 1);
    assert_eq!(
        proxy.requests("\r\nMYID\r\n"),
        1,
        "asked once, {polls} polls"
    );
    assert_eq!(
        proxy.requests("\r\nSENTINELS\r\n"),
        1,
        "asked once, {polls} polls"
    );
    within("shutdown", client.shutdown()).await;
}

/// A majority of the sentinels is enough to connect, and one that failed
/// at first is asked again: with one sentinel hung (it never answers, and
/// the command timeout is longer than the connect timeout) and another
/// restarting (its first answer a refused connection), the client connects
/// once the restarted one answers, within its connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_needs_a_majority_and_asks_again() {
    let mut sentinel = Sentinel::start().await;
    sentinel.sentinels[1].kill().await;
    sentinel.sentinels[0].freeze();
    let mut c = config(&sentinel.url(), Duration::from_secs(2));
    c.timeout = Duration::from_secs(6);
    c.connect_timeout = Duration::from_secs(5);
    let connecting = tokio::spawn(RedissonClient::connect(c));
    // The restarted sentinel answers after the client's first try: the
    // client has asked the third by then (its connection is named).
    let asked = sentinel.sentinels[2].port;
    common::topology::until("the client asked the sentinel that answers", || async {
        client_list(asked).await.contains("name=redisson-lock:")
    })
    .await;
    sentinel.sentinels[1].restart().await;
    let connected = within("connect", connecting).await.unwrap();
    sentinel.sentinels[0].thaw();
    let client = connected.expect("two of three sentinels agree");
    let guard = client.lock("majority").unwrap().lock().await.unwrap();
    assert!(guard.unlock().await.is_ok());
    within("shutdown", client.shutdown()).await;
}

/// An acquire whose reply was lost is resolved by reading the lock's state
/// in one script on its writer, followed by the `WAIT` the acquire would
/// have had: with the replicas frozen, the grant it finds is not confirmed,
/// so it is taken back and no fencing token is handed out (it used to be
/// handed out, merely at risk). Once the replicas answer, the next holder's
/// token is above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acquire_hands_out_no_token_the_replicas_did_not_confirm() {
    let primary_port = common::free_port();
    let proxy = common::Proxy::start(primary_port).await;
    let sentinel = Sentinel::start_fronted(primary_port, proxy.port).await;
    // No frozen replica is judged down (it would stop counting).
    sentinel.on_sentinels(&SLOW_DOWN_AFTER).await;
    let mut c = config(&sentinel.url(), Duration::from_secs(2));
    c.slaves_sync_timeout = Duration::from_millis(300);
    let client = RedissonClient::connect(c).await.unwrap();
    let raw = sentinel.primary.raw().await;
    let lock = client.fenced_lock("resolved").unwrap();
    // The scripts are cached first, so the acquire is one EVALSHA.
    let first = lock.lock().await.unwrap();
    let first_token = first.token();
    first.unlock().await.unwrap();

    for replica in &sentinel.replicas {
        replica.freeze();
    }
    // Sentinels and replicas pass the proxy too: the reply dropped is the
    // one to the acquire's script.
    proxy.drop_reply_to("EVALSHA");
    let outcome = lock.try_lock().await;
    for replica in &sentinel.replicas {
        replica.thaw();
    }
    assert_eq!(proxy.dropped().len(), 1, "the acquire's reply was dropped");
    match &outcome {
        Ok(Some(guard)) => panic!(
            "token {} handed out, unconfirmed (at risk: {})",
            guard.token(),
            guard.is_at_risk()
        ),
        Ok(None) => panic!("refused, though nobody holds it"),
        Err(redisson_lock::Error::ReplicasNotSynced { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    // The grant the acquire made was taken back.
    common::topology::until("the grant taken back", || async {
        raw.exists::<i64, _>("resolved").await.unwrap() == 0
    })
    .await;
    let spent: i64 = raw
        .get::<Option<i64>, _>(redisson_lock::naming::token_name("resolved"))
        .await
        .unwrap()
        .unwrap();
    assert!(spent > first_token, "the lost acquire ran ({spent})");
    let next = lock_once_confirmed(&lock).await;
    assert!(next.token() > spent && !next.is_at_risk());
    next.unlock().await.unwrap();
    client.shutdown().await;
}

/// A replica left out for a passing reason (frozen: silent, then down)
/// could be promoted again as soon as it answers, before it has the writes
/// made meanwhile. A lock taken without it is therefore at risk (a signal,
/// never a refusal) until the replicas are back and confirm a later write;
/// it used to be called confirmed by 0 of 0, with no signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_while_the_replicas_are_away_is_at_risk_until_they_confirm() {
    let sentinel = Sentinel::start().await;
    let client = connect(&sentinel, true, Duration::from_secs(2)).await;
    for replica in &sentinel.replicas {
        replica.freeze();
    }
    // Refused while the view still counts them, taken once they are down.
    let lock = client.lock("away").unwrap();
    let guard = within("a lock taken while the replicas are away", async {
        loop {
            match lock.lock().await {
                Ok(guard) => return guard,
                Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert_eq!(
        guard.safety(),
        redisson_lock::SafetyLevel::Replicas {
            acked: 0,
            promotable: 0
        }
    );
    assert!(guard.is_at_risk(), "replicas that could come back lack it");
    for replica in &sentinel.replicas {
        replica.thaw();
    }
    // Back, they confirm a renewal: the risk is over.
    let mut cycles = client.watchdog_updates();
    within("a renewal the replicas confirm", async {
        while guard.is_at_risk() {
            cycles.changed().await.unwrap();
        }
    })
    .await;
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    client.shutdown().await;
}

/// A replica that can never be promoted (`replica-priority 0`, a DR or
/// analytics copy) may acknowledge a `WAIT`, so its acknowledgement must
/// not stand in for the promotable replica's; but when it stops, a write
/// the promotable replica has must not be refused for want of its. Which
/// replicas acknowledged is read (`ROLE` around the `WAIT`), not guessed
/// from the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_that_cannot_be_promoted_refuses_no_write() {
    let sentinel = Sentinel::start_shaped(&[], [&[], &["--replica-priority", "0"]], "").await;
    let mut c = config(&sentinel.url(), Duration::from_secs(2));
    // One attempt: a refusal is not hidden by a later one made once the
    // stopped replica no longer counts.
    c.retry_attempts = 1;
    let client = RedissonClient::connect(c).await.unwrap();
    let lock = client.lock("dr-replica").unwrap();
    let promotable_one = redisson_lock::SafetyLevel::Replicas {
        acked: 1,
        promotable: 1,
    };
    // Until the sentinels have read its priority, it counts as promotable.
    common::topology::until("the priority-0 replica known as such", || async {
        let guard = lock.try_lock().await.unwrap().expect("free");
        let known = guard.safety() == promotable_one;
        guard.unlock().await.unwrap();
        known
    })
    .await;
    sentinel.replicas[1].freeze();
    let taken = lock.try_lock().await;
    sentinel.replicas[1].thaw();
    let guard = taken
        .expect("the promotable replica acknowledged")
        .expect("free");
    assert_eq!(guard.safety(), promotable_one);
    assert!(!guard.is_at_risk());
    guard.unlock().await.unwrap();
    client.shutdown().await;
}
