//! No panic may be reachable from anything Redis answers (issue 30, item 2).
//!
//! Every reply path of the crate is fed replies no sane server sends, by a
//! proxy that rewrites them (`common::garbage::Rewriter`): nil, nil arrays,
//! integers at the ends of their range, statuses, numbers that are not,
//! errors, empty, short and mixed arrays, a reply cut off mid-way and a lost
//! one. Each call runs as a task of its own and must come back with a typed
//! error or a safe outcome, never a panic; every panic in any task of the
//! test (the crate's background tasks included) fails it too
//! (`common::garbage::PanicWatch`).

use redisson_lock_testkit as common;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use common::garbage::{
    self, command, command_on, script_on, watch_panics, Garbage, PanicWatch, Rewriter,
};
use common::{config, within, RedisServer};
use fred::prelude::*;
use redisson_lock::{Error, GroupValue, OwnerId, RedissonClient};

/// A server, a rewriting proxy in front of it, a client through the proxy
/// and a plain client straight to the server.
struct Rig {
    server: RedisServer,
    proxy: Rewriter,
    client: RedissonClient,
    raw: Client,
    panics: PanicWatch,
}

async fn rig(tweak: impl FnOnce(&mut redisson_lock::Config)) -> Rig {
    let panics = watch_panics();
    let server = RedisServer::start().await;
    let proxy = Rewriter::start(server.port).await;
    let mut settings = config(&proxy.url(), Duration::from_secs(30));
    tweak(&mut settings);
    let client = RedissonClient::connect(settings).await.unwrap();
    let raw = server.raw().await;
    Rig {
        server,
        proxy,
        client,
        raw,
        panics,
    }
}

impl Rig {
    /// Fails the test if a rule was never used (the path under test did
    /// not send what it was expected to) or anything panicked.
    fn check(&self, what: &str) {
        assert_eq!(
            self.proxy.pending(),
            0,
            "{what}: the garbage was never sent (no such request)"
        );
        self.panics.assert_none();
    }

    async fn set(&self, key: &str, value: &str) {
        let _: () = self.raw.set(key, value, None, None, false).await.unwrap();
    }
}

/// Runs `op` as a task of its own and returns what it returned; the test
/// fails, naming the panic, if the task panicked (or hangs).
async fn survive<T: Send + 'static>(what: &str, op: impl Future<Output = T> + Send + 'static) -> T {
    match within(what, tokio::spawn(op)).await {
        Ok(output) => output,
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            panic!("{what}: the caller's task panicked: {message}")
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

/// The garbage `what` got, and what came of it, for the test's log.
fn seen<T: std::fmt::Debug>(what: &str, garbage: &Garbage, outcome: &redisson_lock::Result<T>) {
    eprintln!("{what} <- {garbage:?}: {outcome:?}");
}

/// Whether `garbage` reads as a nil reply, or hides the real one (a lost
/// or cut-off reply is resolved by reading the state).
fn nil_or_hidden(garbage: &Garbage) -> bool {
    matches!(
        garbage,
        Garbage::Nil | Garbage::NilArray | Garbage::Lost | Garbage::Truncated
    )
}

#[tokio::test]
async fn lock_acquire_replies() {
    let rig = rig(|_| {}).await;
    for (i, g) in garbage::every().into_iter().enumerate() {
        let name = format!("g-acquire-{i}");
        rig.proxy.rewrite(script_on(&name), g.clone());
        let lock = rig.client.lock(&name).unwrap();
        let outcome = survive("try_lock", async move {
            let guard = lock.try_lock().await?;
            let taken = guard.is_some();
            if let Some(guard) = guard {
                guard.unlock().await?;
            }
            Ok(taken)
        })
        .await;
        seen("RLock acquire", &g, &outcome);
        // Garbage is never taken for a grant: only a nil (the grant's own
        // reply) or a reply hidden from the client, resolved by reading
        // the hold count, is.
        if let Ok(true) = outcome {
            assert!(nil_or_hidden(&g), "{g:?} read as a grant");
        }
        rig.check("acquire");
    }
}

#[tokio::test]
async fn acquire_replies_of_every_kind() {
    let rig = rig(|_| {}).await;
    let client = &rig.client;
    for (i, g) in garbage::every().into_iter().enumerate() {
        let names: Vec<String> = ["fair", "fenced", "spin", "read", "write", "nonre", "group"]
            .iter()
            .map(|kind| format!("g-{kind}-{i}"))
            .collect();
        for name in &names {
            // The group lock lives in the hash named before its values.
            rig.proxy.rewrite(script_on(name.as_str()), g.clone());
        }
        let fair = client.fair_lock(&names[0]).unwrap();
        let fenced = client.fenced_lock(&names[1]).unwrap();
        let spin = client.spin_lock(&names[2]).unwrap();
        let read = client.read_write_lock(&names[3]).unwrap().read();
        let write = client.read_write_lock(&names[4]).unwrap().write();
        let nonre = client.non_reentrant_lock(&names[5]).unwrap();
        let group = client
            .group_lock(&names[6], ["a", "b"].map(GroupValue::string))
            .unwrap();
        let outcomes = survive("try_lock of every kind", async move {
            vec![
                format!("{:?}", fair.try_lock().await.map(|g| g.is_some())),
                format!(
                    "{:?}",
                    fenced.try_lock().await.map(|g| g.map(|g| g.token()))
                ),
                format!("{:?}", spin.try_lock().await.map(|g| g.is_some())),
                format!("{:?}", read.try_lock().await.map(|g| g.is_some())),
                format!("{:?}", write.try_lock().await.map(|g| g.is_some())),
                format!("{:?}", nonre.try_lock().await.map(|g| g.is_some())),
                format!("{:?}", group.try_lock().await.map(|g| g.is_some())),
            ]
        })
        .await;
        eprintln!("acquire of every kind <- {g:?}: {outcomes:?}");
        rig.check("acquire of every kind");
    }
}

#[tokio::test]
async fn lock_release_replies() {
    let rig = rig(|_| {}).await;
    for (i, g) in garbage::every().into_iter().enumerate() {
        let name = format!("g-unlock-{i}");
        let lock = rig.client.lock(&name).unwrap();
        let guard = lock.lock().await.unwrap();
        rig.proxy.rewrite(script_on(&name), g.clone());
        let outcome = survive("unlock", async move { guard.unlock().await }).await;
        seen("unlock", &g, &outcome);
        rig.check("unlock");

        // Force unlock, of a lock someone holds.
        let _held = lock.lock().await.unwrap();
        rig.proxy.rewrite(script_on(&name), g.clone());
        let forced = lock.clone();
        let outcome = survive("force_unlock", async move { forced.force_unlock().await }).await;
        seen("force_unlock", &g, &outcome);
        rig.check("force_unlock");
    }
}

#[tokio::test]
async fn lock_query_replies() {
    let rig = rig(|_| {}).await;
    let owner = OwnerId::unique();
    let lock = rig.client.lock("g-query").unwrap().with_owner(owner);
    let guard = lock.lock().await.unwrap();
    let group = rig
        .client
        .group_lock("g-group-query", ["a", "b"].map(GroupValue::string))
        .unwrap();
    let group_guard = group.with_owner(owner).lock().await.unwrap();
    let rw = rig.client.read_write_lock("g-rw-query").unwrap();
    let _read = rw.read().lock().await.unwrap();
    for g in garbage::every() {
        // Each read, and the command it sends.
        let reads: [(&str, common::garbage::Matcher); 8] = [
            ("is_locked", command_on("EXISTS", "g-query")),
            ("is_held_by", command_on("HEXISTS", "g-query")),
            ("hold_count", command_on("HGET", "g-query")),
            ("holders", command_on("HGETALL", "g-query")),
            ("remaining_ttl", command_on("PTTL", "g-query")),
            ("guard hold_count", command_on("HGET", "g-query")),
            ("read lock is_locked", script_on("g-rw-query")),
            ("write lock is_locked", command_on("HGET", "g-rw-query")),
        ];
        for (what, matcher) in reads {
            rig.proxy.rewrite(matcher, g.clone());
            let (lock, rw) = (lock.clone(), rw.clone());
            let outcome = match what {
                "is_locked" => {
                    survive(
                        what,
                        async move { lock.is_locked().await.map(|b| b as i64) },
                    )
                    .await
                }
                "is_held_by" => {
                    survive(what, async move {
                        lock.is_held_by(owner).await.map(|b| b as i64)
                    })
                    .await
                }
                "hold_count" => {
                    survive(what, async move { lock.hold_count().await.map(i64::from) }).await
                }
                "holders" => {
                    survive(
                        what,
                        async move { lock.holders().await.map(|h| h.len() as i64) },
                    )
                    .await
                }
                "remaining_ttl" => {
                    survive(what, async move { lock.remaining_ttl().await.map(|_| 0) }).await
                }
                "guard hold_count" => guard.hold_count().await.map(i64::from),
                "read lock is_locked" => {
                    survive(what, async move {
                        rw.read().is_locked().await.map(|b| b as i64)
                    })
                    .await
                }
                _ => {
                    survive(what, async move {
                        rw.write().is_locked().await.map(|b| b as i64)
                    })
                    .await
                }
            };
            seen(what, &g, &outcome);
            rig.check(what);
        }
        // The group lock asks a script whether its values are held.
        rig.proxy.rewrite(script_on("g-group-query"), g.clone());
        let held = group.clone();
        let outcome = survive("group is_locked", async move { held.is_locked().await }).await;
        seen("group is_locked", &g, &outcome);
        rig.check("group is_locked");
        // A guard of it reads its hold count from its values' fields.
        rig.proxy
            .rewrite(command_on("HMGET", "g-group-query"), g.clone());
        let outcome = group_guard.hold_count().await;
        seen("group guard hold_count", &g, &outcome);
        rig.check("group guard hold_count");
    }
    drop(group_guard);
    guard.unlock().await.unwrap();
}

/// `RGroupLock::is_held_by` splits its `HMGET` reply at the number of
/// values asked for: a shorter reply panicked there (src/lock/group.rs).
#[tokio::test]
async fn group_is_held_by_replies() {
    let rig = rig(|_| {}).await;
    let owner = OwnerId::unique();
    let group = rig
        .client
        .group_lock("g-group-held", ["a", "b"].map(GroupValue::string))
        .unwrap();
    for g in garbage::every() {
        rig.proxy.rewrite(command("HMGET"), g.clone());
        let held = group.clone();
        let outcome = survive(
            "group is_held_by",
            async move { held.is_held_by(owner).await },
        )
        .await;
        seen("group is_held_by", &g, &outcome);
        rig.check("group is_held_by");
    }
}

#[tokio::test]
async fn fenced_token_missing_after_a_lost_reply_is_an_error() {
    let rig = rig(|_| {}).await;
    let name = "g-fenced-token";
    let lock = rig.client.fenced_lock(name).unwrap();
    // The acquire runs, its reply is lost, and the token key is gone when
    // the client reads it back (evicted, or deleted by hand): the read-back
    // script finds the owner's count but no token.
    rig.proxy.rewrite(script_on(name), Garbage::Lost);
    rig.proxy.rewrite(
        script_on(name),
        Garbage::Array(vec![
            Garbage::Integer(30_000),
            Garbage::Nil,
            Garbage::Bulk("1"),
        ]),
    );
    let taken = lock.clone();
    let outcome = survive("fenced try_lock", async move {
        taken.try_lock().await.map(|g| g.map(|g| g.token()))
    })
    .await;
    seen("fenced try_lock", &Garbage::Lost, &outcome);
    assert!(
        matches!(outcome, Err(Error::OutcomeUnknown { .. })),
        "{outcome:?}"
    );
    rig.check("fenced token read-back");
    // What the lost acquire took was given back.
    let raw = rig.server.raw().await;
    let exists: i64 = raw.exists(name).await.unwrap();
    assert_eq!(exists, 0, "the acquisition was not given back");
    assert_eq!(rig.client.held_locks(), 0);
    // And the lock works on.
    let guard = lock.try_lock().await.unwrap().expect("free");
    assert!(guard.token() > 0);
    guard.unlock().await.unwrap();
}

/// As above, with the token key really deleted while the acquire's reply
/// is on its way (and then lost).
#[tokio::test]
async fn fenced_token_deleted_after_a_lost_reply_is_an_error() {
    let rig = rig(|_| {}).await;
    let name = "g-fenced-token-del";
    let token = redisson_lock::naming::token_name(name);
    let lock = rig.client.fenced_lock(name).unwrap();
    // An earlier acquisition, so the token key exists.
    lock.try_lock()
        .await
        .unwrap()
        .expect("free")
        .unlock()
        .await
        .unwrap();
    let sent = rig.proxy.seen(&script_on(name));
    rig.proxy.stall_replies();
    rig.proxy.rewrite(script_on(name), Garbage::Lost);
    let taken = lock.clone();
    let attempt = tokio::spawn(async move { taken.try_lock().await.map(|g| g.map(|g| g.token())) });
    common::topology::until("the acquire sent", || async {
        rig.proxy.seen(&script_on(name)) > sent
    })
    .await;
    // It ran: the token moved on. Then the token key goes.
    common::topology::until("the acquire ran", || async {
        let exists: i64 = rig.raw.exists(name).await.unwrap();
        exists == 1
    })
    .await;
    let _: i64 = rig.raw.del(token.as_str()).await.unwrap();
    rig.proxy.resume_replies();
    let outcome = within("fenced try_lock", attempt).await.unwrap();
    seen("fenced try_lock, token deleted", &Garbage::Lost, &outcome);
    assert!(
        matches!(outcome, Err(Error::OutcomeUnknown { .. })),
        "{outcome:?}"
    );
    rig.check("fenced token deleted");
    let exists: i64 = rig.raw.exists(name).await.unwrap();
    assert_eq!(exists, 0, "the acquisition was not given back");
    assert_eq!(rig.client.held_locks(), 0);
    let guard = lock.try_lock().await.unwrap().expect("free");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn renewal_replies() {
    // Renewals every 100 ms.
    let rig = rig(|c| c.lock_watchdog_timeout = Duration::from_millis(300)).await;
    for (i, g) in garbage::every().into_iter().enumerate() {
        let name = format!("g-renew-{i}");
        let guard = rig.client.lock(&name).unwrap().lock().await.unwrap();
        let before = rig.proxy.replaced().len();
        rig.proxy.rewrite_every(script_on(&name), g.clone());
        common::topology::until("renewals answered with garbage", || async {
            rig.proxy.replaced().len() >= before + 2
        })
        .await;
        rig.proxy.clear();
        eprintln!(
            "renewal <- {g:?}: at risk {}, lost {}",
            guard.is_at_risk(),
            guard.is_lost()
        );
        let outcome = guard.unlock().await;
        seen("unlock after garbled renewals", &g, &outcome);
        rig.panics.assert_none();
    }
}

/// A hold of lock kind `kind` on `name`, as a plain guard.
async fn hold_of(client: &RedissonClient, kind: &str, name: &str) -> redisson_lock::LockGuard {
    match kind {
        "fair" => client.fair_lock(name).unwrap().lock().await.unwrap(),
        "fenced" => client
            .fenced_lock(name)
            .unwrap()
            .lock()
            .await
            .unwrap()
            .into_guard(),
        "spin" => client.spin_lock(name).unwrap().lock().await.unwrap(),
        "read" => client
            .read_write_lock(name)
            .unwrap()
            .read()
            .lock()
            .await
            .unwrap(),
        "write" => client
            .read_write_lock(name)
            .unwrap()
            .write()
            .lock()
            .await
            .unwrap(),
        "nonre" => client
            .non_reentrant_lock(name)
            .unwrap()
            .lock()
            .await
            .unwrap(),
        _ => client
            .group_lock(name, ["a", "b"].map(GroupValue::string))
            .unwrap()
            .lock()
            .await
            .unwrap(),
    }
}

const KINDS: [&str; 7] = ["fair", "fenced", "spin", "read", "write", "nonre", "group"];

#[tokio::test]
async fn release_replies_of_every_kind() {
    let rig = rig(|_| {}).await;
    for (i, g) in garbage::every().into_iter().enumerate() {
        for kind in KINDS {
            let name = format!("g-release-{kind}-{i}");
            let guard = hold_of(&rig.client, kind, &name).await;
            rig.proxy.rewrite(script_on(&name), g.clone());
            let outcome = survive("unlock", async move { guard.unlock().await }).await;
            seen(&format!("{kind} unlock"), &g, &outcome);
            rig.check(&format!("{kind} unlock"));
        }
    }
}

#[tokio::test]
async fn renewal_replies_of_every_kind() {
    // Renewals every 100 ms.
    let rig = rig(|c| c.lock_watchdog_timeout = Duration::from_millis(300)).await;
    for (i, g) in garbage::every().into_iter().enumerate() {
        for kind in KINDS {
            let name = format!("g-renew-{kind}-{i}");
            let guard = hold_of(&rig.client, kind, &name).await;
            let before = rig.proxy.replaced().len();
            rig.proxy.rewrite_every(script_on(&name), g.clone());
            common::topology::until("renewals answered with garbage", || async {
                rig.proxy.replaced().len() >= before + 2
            })
            .await;
            rig.proxy.clear();
            eprintln!(
                "{kind} renewal <- {g:?}: at risk {}, lost {}",
                guard.is_at_risk(),
                guard.is_lost()
            );
            let outcome = guard.unlock().await;
            seen(
                &format!("{kind} unlock after garbled renewals"),
                &g,
                &outcome,
            );
            rig.panics.assert_none();
        }
    }
}

#[tokio::test]
async fn semaphore_replies() {
    let rig = rig(|_| {}).await;
    for (i, g) in garbage::every().into_iter().enumerate() {
        let name = format!("g-sem-{i}");
        let sem = rig.client.semaphore(&name).unwrap();
        rig.set(&name, "5").await;
        let calls: Vec<(&str, common::garbage::Matcher)> = vec![
            ("try_set_permits", script_on(&name)),
            ("add_permits", script_on(&name)),
            ("available_permits", command_on("GET", &name)),
            ("drain_permits", script_on(&name)),
            ("try_acquire", script_on(&name)),
            ("try_acquire_for", script_on(&name)),
            ("release", script_on(&name)),
            ("release_if_exists", script_on(&name)),
            ("guard release", script_on(&name)),
            ("delete", command_on("DEL", &name)),
        ];
        for (what, matcher) in calls {
            rig.set(&name, "5").await;
            // The guard is taken before its release is garbled.
            let guard = match what {
                "guard release" => Some(sem.acquire(1).await.unwrap()),
                _ => None,
            };
            rig.proxy.rewrite(matcher, g.clone());
            let sem = sem.clone();
            let outcome = survive(what, async move {
                match what {
                    "try_set_permits" => sem.try_set_permits(3).await.map(|b| b as i64),
                    "add_permits" => sem.add_permits(2).await,
                    "available_permits" => sem.available_permits().await,
                    "drain_permits" => sem.drain_permits().await,
                    "try_acquire" => sem
                        .try_acquire(1)
                        .await
                        .map(|p| p.map_or(0, |p| p.forget() as i64)),
                    "try_acquire_for" => sem
                        .try_acquire_for(1, Duration::from_millis(200))
                        .await
                        .map(|p| p.map_or(0, |p| p.forget() as i64)),
                    "release" => sem.release(1).await.map(|()| 1),
                    "release_if_exists" => sem.release_if_exists(1).await.map(|b| b as i64),
                    "guard release" => guard.unwrap().release().await.map(i64::from),
                    _ => sem.delete().await.map(|b| b as i64),
                }
            })
            .await;
            seen(what, &g, &outcome);
            rig.check(what);
        }
    }
}

#[tokio::test]
async fn permit_expirable_replies() {
    let rig = rig(|_| {}).await;
    let lease = Duration::from_secs(60);
    for (i, g) in garbage::every().into_iter().enumerate() {
        let name = format!("g-pex-{i}");
        let sem = rig.client.permit_expirable_semaphore(&name).unwrap();
        let leases = sem.leases_key();
        let calls: Vec<(&str, common::garbage::Matcher)> = vec![
            ("try_set_permits", script_on(&name)),
            ("set_permits", script_on(&name)),
            ("add_permits", script_on(&name)),
            ("available_permits", script_on(&name)),
            ("acquired_permits", script_on(&name)),
            ("permits", script_on(&name)),
            ("leases", command_on("ZRANGE", &leases)),
            ("try_acquire", script_on(&name)),
            ("try_acquire_for", script_on(&name)),
            ("try_release", script_on(&name)),
            ("update_lease", script_on(&name)),
            ("lease_time", script_on(&name)),
            ("guard release", script_on(&name)),
            ("delete", command_on("DEL", &name)),
        ];
        for (what, matcher) in calls {
            let _: i64 = rig
                .raw
                .del(vec![name.clone(), leases.clone()])
                .await
                .unwrap();
            rig.set(&name, "2").await;
            // A permit of its own to work on, taken before the garbage.
            let permit = sem.acquire(1).lease(lease).await.unwrap();
            let id = permit.ids()[0];
            rig.proxy.rewrite(matcher, g.clone());
            let sem = sem.clone();
            let outcome = survive(what, async move {
                match what {
                    "try_set_permits" => sem.try_set_permits(3).await.map(|b| b as i64),
                    "set_permits" => sem.set_permits(3).await.map(|()| 1),
                    "add_permits" => sem.add_permits(2).await,
                    "available_permits" => sem.available_permits().await,
                    "acquired_permits" => sem.acquired_permits().await,
                    "permits" => sem.permits().await,
                    "leases" => sem.leases().await.map(|l| l.len() as i64),
                    "try_acquire" => sem
                        .acquire(1)
                        .no_wait()
                        .lease(lease)
                        .await
                        .map(|p| p.map_or(0, |p| p.forget().len() as i64)),
                    "try_acquire_for" => sem
                        .acquire(5)
                        .wait(Duration::from_millis(200))
                        .lease(lease)
                        .await
                        .map(|p| p.map_or(0, |p| p.forget().len() as i64)),
                    "try_release" => sem.try_release(&[id]).await.map(|n| n as i64),
                    "update_lease" => sem.update_lease(id, Some(lease)).await.map(|b| b as i64),
                    "lease_time" => sem
                        .lease_time(id)
                        .await
                        .map(|t| t.map_or(-1, |t| t.as_millis() as i64)),
                    "guard release" => permit.release().await.map(|n| n as i64),
                    _ => sem.delete().await.map(|b| b as i64),
                }
            })
            .await;
            seen(what, &g, &outcome);
            rig.check(what);
        }
    }
}

#[tokio::test]
async fn count_down_latch_replies() {
    let rig = rig(|_| {}).await;
    for (i, g) in garbage::every().into_iter().enumerate() {
        let name = format!("g-latch-{i}");
        let latch = rig.client.count_down_latch(&name).unwrap();
        let calls: Vec<(&str, common::garbage::Matcher)> = vec![
            ("try_set_count", script_on(&name)),
            ("count_down", script_on(&name)),
            ("count", command_on("GET", &name)),
            ("wait_for", command_on("GET", &name)),
            ("delete", script_on(&name)),
        ];
        for (what, matcher) in calls {
            rig.set(&name, "2").await;
            rig.proxy.rewrite(matcher, g.clone());
            let latch = latch.clone();
            let outcome = survive(what, async move {
                match what {
                    "try_set_count" => latch.try_set_count(3).await.map(|b| b as u64),
                    "count_down" => latch.count_down().await,
                    "count" => latch.count().await,
                    "wait_for" => latch
                        .wait_for(Duration::from_millis(200))
                        .await
                        .map(|b| b as u64),
                    _ => latch.delete().await.map(|b| b as u64),
                }
            })
            .await;
            seen(what, &g, &outcome);
            rig.check(what);
        }
    }
}

#[tokio::test]
async fn batch_replies() {
    // Replies may be held back for a while without timing out.
    let rig = rig(|c| c.timeout = Duration::from_secs(10)).await;
    // The batch runner around RLock's acquire, cached up front: a batch is
    // sent as EVALSHA only, and a NOSCRIPT would send its calls alone.
    let each = include_str!("../lua/engine/each.lua").replacen(
        "--BODY--",
        include_str!("../lua/lock/acquire.lua"),
        1,
    );
    let _: String = rig.raw.script_load(each).await.unwrap();
    let batch = |names: [String; 2]| -> common::garbage::Matcher {
        Arc::new(move |r: &common::garbage::Request| {
            r.command() == "EVALSHA" && names.iter().all(|n| r.has_arg(n))
        })
    };
    let scripts = common::garbage::command("EVALSHA");
    for (round, g) in garbage::every().into_iter().enumerate() {
        let sent = rig.proxy.seen(&scripts);
        // 32 acquires await their replies: the next ones are batched.
        rig.proxy.stall_replies();
        let fillers: Vec<_> = (0..32)
            .map(|i| {
                let lock = rig.client.lock(&format!("g-fill-{round}-{i}")).unwrap();
                tokio::spawn(async move {
                    if let Ok(Some(guard)) = lock.try_lock().await {
                        let _ = guard.unlock().await;
                    }
                })
            })
            .collect();
        common::topology::until("32 acquires in flight", || async {
            rig.proxy.seen(&scripts) >= sent + 32
        })
        .await;
        let names = [format!("g-batch-{round}-a"), format!("g-batch-{round}-b")];
        rig.proxy.rewrite(batch(names.clone()), g.clone());
        let locks: Vec<_> = names.iter().map(|n| rig.client.lock(n).unwrap()).collect();
        let batched = tokio::spawn(async move {
            // Polled together: both queue in the same scheduler tick.
            let outcomes = futures::future::join_all(locks.iter().map(|l| l.try_lock())).await;
            let mut seen = vec![];
            for outcome in outcomes {
                seen.push(format!("{:?}", outcome.as_ref().map(|g| g.is_some())));
                if let Ok(Some(guard)) = outcome {
                    let _ = guard.unlock().await;
                }
            }
            seen
        });
        common::topology::until("the batch sent", || async {
            rig.proxy.seen(&batch(names.clone())) >= 1
        })
        .await;
        rig.proxy.resume_replies();
        let outcomes = within("the batched acquires", batched)
            .await
            .unwrap_or_else(|e| panic!("the batched acquires panicked: {e}"));
        eprintln!("batch <- {g:?}: {outcomes:?}");
        for filler in fillers {
            within("a filler", filler).await.unwrap();
        }
        rig.check("batch");
    }
}

#[tokio::test]
async fn inspect_replies() {
    let rig = rig(|_| {}).await;
    let _guard = rig.client.lock("g-inspect").unwrap().lock().await.unwrap();
    let sem = rig.client.semaphore("g-inspect-sem").unwrap();
    sem.try_set_permits(2).await.unwrap();
    let pex = rig
        .client
        .permit_expirable_semaphore("g-inspect-pex")
        .unwrap();
    pex.try_set_permits(2).await.unwrap();
    let _permit = pex.acquire(1).await.unwrap();
    for g in garbage::shapes() {
        for (what, command) in [
            ("TYPE", "TYPE"),
            ("PTTL", "PTTL"),
            ("HSCAN", "HSCAN"),
            ("GETRANGE", "GETRANGE"),
            ("PUBSUB", "PUBSUB"),
            ("ZCARD", "ZCARD"),
            ("ZCOUNT", "ZCOUNT"),
            ("ZRANGE", "ZRANGE"),
            ("SCAN", "SCAN"),
        ] {
            for object in ["g-inspect", "g-inspect-sem", "g-inspect-pex"] {
                rig.proxy
                    .rewrite_every(common::garbage::command(command), g.clone());
                let client = rig.client.clone();
                let outcome = survive(what, async move {
                    let one = client
                        .inspect(object)
                        .await
                        .map(|i| format!("{:?}", i.kind()));
                    let all = client.scan_objects("g-inspect*", 10).await.map(|s| s.len());
                    (one, all)
                })
                .await;
                rig.proxy.clear();
                eprintln!("inspect {object} with {what} <- {g:?}: {outcome:?}");
                rig.panics.assert_none();
            }
        }
    }
    // A reply cut off, and one lost, on the pipeline of a scan.
    for g in [Garbage::Truncated, Garbage::Lost] {
        rig.proxy
            .rewrite(common::garbage::command("GETRANGE"), g.clone());
        let client = rig.client.clone();
        let outcome = survive("scan", async move {
            client.scan_objects("g-inspect*", 10).await.map(|s| s.len())
        })
        .await;
        eprintln!("scan with GETRANGE <- {g:?}: {outcome:?}");
        rig.check("scan");
    }
    // Extra subscriber counts, for channels never asked about.
    let pairs = Garbage::Array(
        (0..8)
            .flat_map(|i| {
                [
                    Garbage::Bulk(["a", "b", "c", "d", "e", "f", "g", "h"][i]),
                    Garbage::Integer(1),
                ]
            })
            .collect(),
    );
    rig.proxy
        .rewrite_every(common::garbage::command("PUBSUB"), pairs);
    let client = rig.client.clone();
    let outcome = survive("inspect with extra subscriber counts", async move {
        client
            .inspect("g-inspect-sem")
            .await
            .map(|i| format!("{:?}", i.kind()))
    })
    .await;
    rig.proxy.clear();
    eprintln!("inspect with extra PUBSUB pairs: {outcome:?}");
    rig.panics.assert_none();
}

#[tokio::test]
async fn wait_replies() {
    let panics = watch_panics();
    // A Sentinel deployment whose primary everyone reaches through the
    // rewriter: every lock write is followed by a WAIT on its connection.
    let primary_port = common::free_port();
    let proxy = Rewriter::start(primary_port).await;
    let deployment = common::topology::Sentinel::start_fronted(primary_port, proxy.port).await;
    let mut settings = config(&deployment.url(), Duration::from_secs(30));
    // A write that fell short holds the next acquisitions back for a pause
    // that starts here (and grows with each short one).
    settings.retry_delay = Duration::from_millis(50);
    let client = RedissonClient::connect(settings).await.unwrap();
    let raw = deployment.primary.raw().await;
    let sem = client.semaphore("g-wait-sem").unwrap();
    sem.try_set_permits(100).await.unwrap();
    let mut round = 0;
    for g in garbage::every() {
        // An acquisition held back after a short write sends nothing, so
        // WAIT's turn may take more than one: each waits out the hold-back
        // (inside the crate) and sends again.
        proxy.rewrite(command("WAIT"), g.clone());
        while proxy.pending() > 0 {
            round += 1;
            assert!(round < 100, "no WAIT was answered with {g:?}");
            let name = format!("g-wait-{round}");
            let lock = client.lock(&name).unwrap();
            let outcome = survive("try_lock_for followed by WAIT", async move {
                let guard = lock.try_lock_for(Duration::from_secs(10)).await?;
                let taken = guard.is_some();
                if let Some(guard) = guard {
                    guard.unlock().await?;
                }
                Ok(taken)
            })
            .await;
            seen("acquire's WAIT", &g, &outcome);
            // Whatever came of it, nothing is left held: a grant the
            // replicas did not confirm, or one never handed out, was given
            // back (maybe in the background).
            common::topology::until("the lock free again", || async {
                let exists: i64 = raw.exists(name.as_str()).await.unwrap();
                exists == 0
            })
            .await;
        }
        proxy.rewrite(command("WAIT"), g.clone());
        while proxy.pending() > 0 {
            round += 1;
            assert!(round < 100, "no WAIT was answered with {g:?}");
            let before: i64 = raw.get("g-wait-sem").await.unwrap();
            let added = sem.clone();
            let outcome = survive("semaphore write followed by WAIT", async move {
                added.add_permits(1).await
            })
            .await;
            seen("add_permits' WAIT", &g, &outcome);
            // A write sent again after a short or lost reply is applied
            // once: it goes through its latch.
            let after: i64 = raw.get("g-wait-sem").await.unwrap();
            assert!(
                after == before || after == before + 1,
                "{before} -> {after}"
            );
            if let Ok(count) = outcome {
                assert_eq!(count, after, "add_permits' answer against the count");
            }
        }
        panics.assert_none();
    }
    eprintln!("{:#?}", proxy.replaced());
}

#[tokio::test]
async fn sentinel_replies() {
    let panics = watch_panics();
    // Every sentinel behind a rewriter, through which the client asks it.
    let deployment = common::topology::Sentinel::start().await;
    let mut proxies = vec![];
    for sentinel in &deployment.sentinels {
        proxies.push(Rewriter::start(sentinel.port).await);
    }
    let mut url = format!(
        "redis-sentinel://127.0.0.1:{}?sentinelServiceName={}",
        proxies[0].port,
        common::topology::SERVICE
    );
    for proxy in &proxies[1..] {
        url.push_str(&format!("&node=127.0.0.1:{}", proxy.port));
    }
    let settings = config(&url, Duration::from_secs(30));
    let client = RedissonClient::connect(settings.clone()).await.unwrap();
    let replaced =
        |proxies: &[Rewriter]| -> usize { proxies.iter().map(|p| p.replaced().len()).sum() };
    for (i, g) in garbage::every().into_iter().enumerate() {
        // The view's questions (MASTER, REPLICAS) and the audit's.
        for sub in ["MASTER", "REPLICAS", "SENTINELS", "MYID"] {
            let before = replaced(&proxies);
            for proxy in &proxies {
                proxy.rewrite_every(command_on("SENTINEL", sub), g.clone());
            }
            // A client connecting now hears only garbage from them.
            let fresh = settings.clone();
            let connected = survive("connect", async move {
                match RedissonClient::connect(fresh).await {
                    Ok(client) => {
                        client.shutdown().await;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            })
            .await;
            seen(&format!("connect, SENTINEL {sub}"), &g, &connected);
            let lock = client.lock(&format!("g-sentinel-{i}-{sub}")).unwrap();
            let outcome = survive("try_lock", async move {
                let guard = lock.try_lock().await?;
                let taken = guard.is_some();
                if let Some(guard) = guard {
                    guard.unlock().await?;
                }
                Ok(taken)
            })
            .await;
            seen(&format!("try_lock, SENTINEL {sub}"), &g, &outcome);
            // The audit asks the sentinels on connections of its own.
            let audited = client.clone();
            let outcome = survive("audit", async move {
                audited.audit().await.map(|r| r.findings.len())
            })
            .await;
            seen(&format!("audit, SENTINEL {sub}"), &g, &outcome);
            assert!(replaced(&proxies) > before, "no SENTINEL {sub} was asked");
            for proxy in &proxies {
                proxy.clear();
            }
            panics.assert_none();
        }
    }
    // Sane answers again: the lock works on.
    let lock = client.lock("g-sentinel-after").unwrap();
    let guard = lock
        .try_lock_for(Duration::from_secs(20))
        .await
        .unwrap()
        .expect("the lock is free");
    guard.unlock().await.unwrap();
    panics.assert_none();
}

#[tokio::test]
async fn audit_replies() {
    let rig = rig(|_| {}).await;
    // Something for the audit to sample: a lock held, and a semaphore.
    let _guard = rig.client.lock("g-audit").unwrap().lock().await.unwrap();
    rig.client
        .semaphore("g-audit-sem")
        .unwrap()
        .try_set_permits(2)
        .await
        .unwrap();
    // What the audit asks a single server (each one checked to be sent).
    let commands = [
        "INFO", "CONFIG", "ACL", "CLIENT", "PING", "WAIT", "SCAN", "HSCAN", "PTTL",
    ];
    for g in garbage::every() {
        for what in commands {
            let before = rig.proxy.replaced().len();
            rig.proxy.rewrite_every(command(what), g.clone());
            let client = rig.client.clone();
            let outcome = survive("audit", async move {
                client.audit().await.map(|r| r.findings.len())
            })
            .await;
            let hit = rig.proxy.replaced().len() - before;
            rig.proxy.clear();
            eprintln!("audit with {what} <- {g:?} ({hit} replaced): {outcome:?}");
            assert!(hit > 0, "the audit sent no {what}");
            rig.panics.assert_none();
        }
    }
}
