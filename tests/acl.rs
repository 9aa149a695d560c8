//! The crate works under the minimal ACL documented in docs/acl.md.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::*;
use redisson_lock::RedissonClient;

/// The ACL rule of docs/acl.md, for locks named `app:*`.
const RULE: &[&str] = common::LOCK_ACL_RULE;

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
    let inner = outer.scope(lock.lock()).await.unwrap();
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

/// The read-only operator rule of docs/acl.md (`ls`, `inspect`, `status`,
/// `top`, `watch`), keys read-only everywhere (`%R~*`, Redis 7 on).
const OPERATOR_RULE: &str = common::OPERATOR_ACL_RULE;

/// An operator under the documented read-only rule sees who holds what and
/// who they are; the same user with the registry's keys taken out still
/// sees the holders, their clients unknown. The registry read's NOPERM
/// failed `inspect`, an election's leader (and `status`, `ls`, `top`) as
/// soon as a lock was held.
#[tokio::test]
async fn operators_read_who_holds_what_and_a_registry_they_cannot_read_is_unknown() {
    let documented =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/acl.md")).unwrap();
    assert!(
        documented.contains(&format!(
            "ACL SETUSER operator {}",
            OPERATOR_RULE.replace("operator-pw", "your-password")
        )),
        "docs/acl.md shows the operator rule tested here"
    );
    let service =
        format!("ACL SETUSER locker {}", RULE.join(" ")).replace("locker-pw", "your-password");
    assert!(
        documented.contains(&service),
        "docs/acl.md shows the service rule tested here"
    );
    // The operator, and a narrower one without the registry's keys.
    // Every key but `redisson_lock__*` (the registry's).
    let narrow = OPERATOR_RULE.replace(
        "%R~*",
        "%R~[^r]* %R~r[^e]* %R~redisson_[^l]* %R~redisson_lock_[^_]*",
    );
    let narrow = narrow.replace("operator-pw", "narrow-pw");
    let mut flags = vec!["--user", "operator"];
    flags.extend(OPERATOR_RULE.split(' '));
    flags.extend(["--user", "narrow"]);
    flags.extend(narrow.split(' '));
    let server = RedisServer::start_with(&flags).await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let guard = holder.lock("app:led").unwrap().lock().await.unwrap();
    let as_user = |user: &str, password: &str| {
        let mut config = common::config(&server.url(), Duration::from_secs(30));
        config.username = Some(user.into());
        config.password = Some(password.into());
        config.check_lock_synced_slaves = false;
        RedissonClient::connect(config)
    };
    for (user, password, registry_readable) in [
        ("operator", "operator-pw", true),
        ("narrow", "narrow-pw", false),
    ] {
        let operator = as_user(user, password).await.unwrap();
        let found = operator.client_identity(holder.id()).await;
        assert_eq!(found.is_ok(), registry_readable, "{user}: {found:?}");
        let info = operator.inspect("app:led").await.unwrap();
        let redisson_lock::inspect::ObjectState::Lock(state) = &info.state else {
            panic!("{info:?}");
        };
        assert_eq!(state.holders[0].owner, guard.owner().to_string());
        // Known, or left out (unknown): never "unregistered".
        match registry_readable {
            true => assert!(info.clients[holder.id()].is_some(), "{user}: {info:?}"),
            false => assert!(info.clients.is_empty(), "{user}: {info:?}"),
        }
        let listed = operator.scan_objects("app:*", 100).await.unwrap();
        assert_eq!(listed.len(), 1, "{user}: {listed:?}");
        assert_eq!(
            listed[0].clients.len(),
            usize::from(registry_readable),
            "{user}"
        );
        let leader = operator
            .election("app:led")
            .unwrap()
            .leader()
            .await
            .unwrap();
        let leader = leader.expect("the holder leads");
        assert_eq!(leader.owner, guard.owner().to_string());
        assert_eq!(leader.identity.is_some(), registry_readable, "{user}");
        operator.shutdown().await;
    }
    guard.unlock().await.unwrap();
}

/// What a cluster or sentinel deployment needs on top of `RULE`.
const REPLICATED_EXTRA: &[&str] = &[
    "+wait",
    "+cluster|slots",
    "+cluster|info",
    "+cluster|nodes",
    "+spublish",
    "+ssubscribe",
    "+sunsubscribe",
    "+pubsub|shardnumsub",
];

fn user_flags(extra: &[&str]) -> Vec<String> {
    let mut flags = vec!["--user".to_string(), "locker".into()];
    flags.extend(RULE.iter().chain(extra).map(|s| s.to_string()));
    flags
}

/// The audit, as `locker` and for its locks, finds the documented rule
/// enough: `permissions` ok everywhere (`expected` findings: each primary,
/// each sentinel), or a warning for the optional `SCRIPT LOAD` only.
async fn audit_passes(url: &str, expected: usize) {
    use redisson_lock::audit::{AuditOptions, Severity};

    let mut config = common::config(url, Duration::from_secs(1));
    config.username = Some("locker".into());
    config.password = Some("locker-pw".into());
    let options = AuditOptions::new().lock_name("app:job");
    let report = within("audit", redisson_lock::audit::audit_with(&config, &options))
        .await
        .unwrap();
    let found: Vec<_> = report.rule("permissions").collect();
    assert_eq!(found.len(), expected, "{found:#?}");
    for f in found {
        match f.severity {
            Severity::Ok => {}
            Severity::Warn => assert!(
                f.evidence.contains(": refused SCRIPT LOAD (") && !f.evidence.contains("), "),
                "{f:#?}"
            ),
            _ => panic!("{f:#?}"),
        }
    }
}

/// Locks, a renewal, a waiter woken by the unlock and a clean unsubscribe,
/// as the `locker` user. Any refusal or unmet state is an `Err`.
async fn scenario(
    url: &str,
    sharded: bool,
    channel_subscribers: impl Fn() -> common::BoxFuture<i64>,
) -> Result<(), String> {
    let mut config = common::config(url, Duration::from_secs(1));
    config.username = Some("locker".into());
    config.password = Some("locker-pw".into());
    config.retry_attempts = 2;
    let step = |what: &'static str| move |e: redisson_lock::Error| format!("{what}: {e}");
    let limit = |what: &'static str| move |_| format!("{what}: timed out");
    let a = RedissonClient::connect(config.clone())
        .await
        .map_err(step("connect"))?;
    let b = RedissonClient::connect(config)
        .await
        .map_err(step("connect"))?;
    if a.sharded_pubsub() != sharded {
        return Err(format!(
            "sharded pub/sub is {}, expected {sharded}",
            a.sharded_pubsub()
        ));
    }
    let guard = a
        .lock("app:job")
        .unwrap()
        .lock()
        .await
        .map_err(step("lock"))?;
    let mut updates = a.watchdog_updates();
    tokio::time::timeout(Duration::from_secs(5), updates.wait_for(|s| s.renewed >= 1))
        .await
        .map_err(limit("renewal"))?
        .unwrap();
    let other = b.lock("app:job").unwrap();
    let waiter = tokio::spawn(async move { other.lock().await });
    tokio::time::timeout(Duration::from_secs(5), async {
        while channel_subscribers().await != 1 {
            if waiter.is_finished() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .map_err(limit("waiter subscribed"))?;
    guard.unlock().await.map_err(step("unlock"))?;
    let taken = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .map_err(limit("waiter woken"))?
        .unwrap()
        .map_err(step("waiter"))?;
    taken.unlock().await.map_err(step("waiter's unlock"))?;
    tokio::time::timeout(Duration::from_secs(5), async {
        while channel_subscribers().await != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .map_err(limit("unsubscribed"))?;
    a.lock("app:job")
        .unwrap()
        .force_unlock()
        .await
        .map_err(step("force unlock"))?;
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_acl_is_enough_and_each_addition_is_needed() {
    use common::topology::{on_node, Cluster};

    let flags = user_flags(REPLICATED_EXTRA);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let cluster = std::sync::Arc::new(Cluster::start_with(1, &flags).await);
    let channel = redisson_lock::naming::channel_name("app:job");
    let owner = cluster
        .owner_of(redisson_lock::naming::slot("app:job"))
        .await;
    let subscribers = || -> common::BoxFuture<i64> {
        let channel = channel.clone();
        Box::pin(async move { common::topology::subscribers_on(owner, &channel, true).await })
    };
    scenario(&cluster.url(), true, subscribers).await.unwrap();
    audit_passes(&cluster.url(), 3).await;

    // Take each addition away on every node: the same scenario must fail.
    for permission in REPLICATED_EXTRA {
        let revoke = permission.replacen('+', "-", 1);
        for node in &cluster.nodes {
            on_node(node.port, "ACL", vec!["SETUSER", "locker", &revoke]).await;
        }
        let outcome = scenario(&cluster.url(), true, subscribers).await;
        assert!(
            outcome.is_err(),
            "the cluster scenario passed without {permission}"
        );
        eprintln!("without {permission}: {}", outcome.unwrap_err());
        for node in &cluster.nodes {
            on_node(node.port, "ACL", vec!["SETUSER", "locker", permission]).await;
        }
        // Clean up whatever the failed run left behind.
        on_node(owner, "FLUSHALL", vec![]).await;
    }
}

/// The same user on the sentinels: the primary and its replicas as each
/// sentinel sees them, and their announcements (channels `+...` and `-...`).
const SENTINEL_USER: &str =
    "user locker on >locker-pw -@all +auth +hello +ping +sentinel|master +sentinel|replicas +sentinel|sentinels +sentinel|myid +subscribe &+* &-*";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinel_acl_is_enough_and_each_addition_is_needed() {
    use common::topology::Sentinel;

    // What the data nodes need of the cluster's additions: `+wait` (the
    // `+cluster|...` and sharded ones do no harm); without it, nothing.
    let without_wait: Vec<&str> = REPLICATED_EXTRA
        .iter()
        .copied()
        .filter(|p| *p != "+wait")
        .collect();
    for (extra, works) in [(REPLICATED_EXTRA.to_vec(), true), (without_wait, false)] {
        let flags = user_flags(&extra);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let sentinel = Sentinel::start_with(&flags, SENTINEL_USER).await;
        let primary = sentinel.primary.port;
        let subscribers = || -> common::BoxFuture<i64> {
            Box::pin(async move {
                common::topology::subscribers_on(primary, "redisson_lock__channel:{app:job}", false)
                    .await
            })
        };
        let outcome = scenario(&sentinel.url(), false, subscribers).await;
        assert_eq!(outcome.is_ok(), works, "{extra:?}: {outcome:?}");
        if works {
            // One finding for the primary, one per sentinel.
            audit_passes(&sentinel.url(), 4).await;
        }
    }
    // The sentinels' view of the primary and its replicas is needed too.
    let flags = user_flags(REPLICATED_EXTRA);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    for permission in [" +sentinel|master", " +sentinel|replicas"] {
        let sentinel =
            Sentinel::start_with(&flags, &SENTINEL_USER.replacen(permission, "", 1)).await;
        let primary = sentinel.primary.port;
        let subscribers = || -> common::BoxFuture<i64> {
            Box::pin(async move {
                common::topology::subscribers_on(primary, "redisson_lock__channel:{app:job}", false)
                    .await
            })
        };
        let outcome = scenario(&sentinel.url(), false, subscribers).await;
        assert!(outcome.is_err(), "the scenario passed without{permission}");
        eprintln!("without{permission}: {}", outcome.unwrap_err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscription_is_an_error_not_a_silent_wait() {
    use common::topology::Cluster;
    use redisson_lock::{Error, ShardedSubscriptionMode};

    // Two users: one may not SUBSCRIBE, the other may not SSUBSCRIBE.
    let mut flags: Vec<String> = vec![];
    for (user, refused) in [("nosub", "+subscribe"), ("noshard", "+ssubscribe")] {
        flags.extend(["--user".to_string(), user.to_string()]);
        flags.extend(
            RULE.iter()
                .chain(REPLICATED_EXTRA)
                .filter(|p| **p != refused)
                .map(|p| p.to_string()),
        );
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let cluster = Cluster::start_with(0, &flags).await;
    let holder = RedissonClient::connect(common::config(&cluster.url(), Duration::from_secs(30)))
        .await
        .unwrap();
    let _held = holder.lock("app:job").unwrap().lock().await.unwrap();
    for (user, mode) in [
        ("nosub", ShardedSubscriptionMode::Off),
        ("noshard", ShardedSubscriptionMode::On),
    ] {
        let mut config = common::config(&cluster.url(), Duration::from_secs(30));
        config.username = Some(user.into());
        config.password = Some("locker-pw".into());
        config.sharded_subscription_mode = mode;
        let waiter = RedissonClient::connect(config).await.unwrap();
        // The refusal comes back to the waiter, instead of a subscription
        // that "succeeded" and a wait on a lock nobody will announce.
        let outcome = within(
            "a refused subscription",
            waiter.lock("app:job").unwrap().lock(),
        )
        .await;
        // Either the refusal itself, or (when fred dropped the error reply)
        // the PING that finds the connection unsubscribed.
        match outcome {
            Err(Error::Redis { message: msg, .. }) => assert!(
                msg.contains("NOPERM") || msg.contains("did not take effect"),
                "{user}: {msg}"
            ),
            other => panic!("{user}: expected a refusal, got {other:?}"),
        }
        waiter.shutdown().await;
    }
    holder.shutdown().await;
}

/// The spin lock's rule: the base rule without any pub/sub (no channel
/// patterns, no PUBLISH / SUBSCRIBE), nor the channel key pattern.
const SPIN_RULE: &[&str] = &[
    "on",
    ">locker-pw",
    "resetkeys",
    "~app:*",
    "~redisson_unlock_latch:*",
    "resetchannels",
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
    "+ping",
];

#[tokio::test]
async fn a_spin_lock_works_without_any_pub_sub_permission() {
    let mut args = vec!["--user", "spinner"];
    args.extend_from_slice(SPIN_RULE);
    let server = RedisServer::start_with(&args).await;
    let mut config = common::config(&server.url(), Duration::from_secs(1));
    config.username = Some("spinner".into());
    config.password = Some("locker-pw".into());
    let a = RedissonClient::connect(config.clone()).await.unwrap();
    let b = RedissonClient::connect(config).await.unwrap();
    let lock = a.spin_lock("app:spin").unwrap();
    let held = lock.lock().await.unwrap();
    let inner = held.scope(lock.lock()).await.unwrap();
    let mut updates = a.watchdog_updates();
    within("a renewal", updates.wait_for(|s| s.renewed >= 1))
        .await
        .unwrap();
    // A waiter in another client polls, and gets it once released.
    let other = b.spin_lock("app:spin").unwrap();
    let waiter = tokio::spawn(async move { other.lock().await });
    inner.unlock().await.unwrap();
    held.unlock().await.unwrap();
    let taken = within("the spin waiter", waiter).await.unwrap().unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.force_unlock().await.unwrap());
    drop(taken);
    // An RLock needs pub/sub: refused by this user, with a clear error.
    let guard = a.lock("app:plain").unwrap().lock().await.unwrap();
    let err = guard.unlock().await.unwrap_err();
    assert!(err.to_string().contains("NOPERM"), "{err}");
}

/// The rule of docs/acl.md for semaphores and count-down latches named
/// `app:*`.
const SYNC_RULE: &[&str] = &[
    "on",
    ">locker-pw",
    "resetkeys",
    "~app:*",
    "~{app:*}:timeout",
    "~redisson_request_latch:*",
    "~redisson_sc:*",
    "~redisson_countdownlatch__channel__*",
    "resetchannels",
    "&redisson_sc:*",
    "&redisson_countdownlatch__channel__*",
    "-@all",
    "+evalsha",
    "+eval",
    "+get",
    "+set",
    "+del",
    "+exists",
    "+decr",
    "+decrby",
    "+incrby",
    "+pexpire",
    "+pttl",
    "+zadd",
    "+zcard",
    "+zrange",
    "+zrangebyscore",
    "+zrem",
    "+zscore",
    "+publish",
    "+subscribe",
    "+unsubscribe",
    "+ping",
];

#[tokio::test]
async fn semaphores_and_latches_run_under_their_acl() {
    let mut args = vec!["--user", "syncer"];
    args.extend_from_slice(SYNC_RULE);
    let server = RedisServer::start_with(&args).await;
    let mut config = common::config(&server.url(), Duration::from_secs(1));
    config.username = Some("syncer".into());
    config.password = Some("locker-pw".into());
    let a = RedissonClient::connect(config.clone()).await.unwrap();
    let b = RedissonClient::connect(config).await.unwrap();

    // Semaphore: every operation, and a waiter woken by another client's release.
    let semaphore = a.semaphore("app:pool").unwrap();
    assert!(semaphore.try_set_permits(1).await.unwrap());
    assert!(semaphore
        .try_set_permits_with_ttl(1, Duration::from_secs(60))
        .await
        .is_ok());
    let held = semaphore.acquire(1).await.unwrap();
    let s = b.semaphore("app:pool").unwrap();
    let waiter = tokio::spawn(async move { s.acquire(1).await });
    await_subscribers(&server, "redisson_sc:{app:pool}", 1).await;
    held.release().await.unwrap();
    within("the semaphore waiter", waiter)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(semaphore.add_permits(2).await.unwrap(), 3);
    assert_eq!(semaphore.drain_permits().await.unwrap(), 3);
    assert!(semaphore.release_if_exists(1).await.unwrap());
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
    assert!(semaphore.delete().await.unwrap());

    // Expirable semaphore.
    let slots = a.permit_expirable_semaphore("app:slots").unwrap();
    assert!(slots.try_set_permits(1).await.unwrap());
    let leased = slots
        .acquire(1)
        .lease(Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(slots.leases().await.unwrap().len(), 1);
    assert!(slots.update_lease(leased.ids()[0], None).await.unwrap());
    let other = b.permit_expirable_semaphore("app:slots").unwrap();
    let waiter = tokio::spawn(async move { other.acquire(1).await });
    await_subscribers(&server, "redisson_sc:{app:slots}", 1).await;
    assert_eq!(leased.release().await.unwrap(), 1);
    let next = within("the expirable waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(slots.acquired_permits().await.unwrap(), 1);
    assert_eq!(next.release().await.unwrap(), 1);
    assert_eq!(slots.add_permits(1).await.unwrap(), 2);
    slots.set_permits(3).await.unwrap();
    assert_eq!(slots.available_permits().await.unwrap(), 3);
    assert!(slots.delete().await.unwrap());

    // Count-down latch.
    let latch = a.count_down_latch("app:loaded").unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let l = b.count_down_latch("app:loaded").unwrap();
    let waiter = tokio::spawn(async move { l.wait().await });
    await_subscribers(&server, "redisson_countdownlatch__channel__{app:loaded}", 1).await;
    assert_eq!(latch.count_down().await.unwrap(), 0);
    within("the latch waiter", waiter).await.unwrap().unwrap();
    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 2);
    assert!(latch.delete().await.unwrap());
}
