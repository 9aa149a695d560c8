//! The blocking API (`redisson_lock::blocking`, feature `blocking`) from
//! plain std threads, against a real redis-server and a JVM Redisson peer:
//! the same exclusion, re-entry by scope, release on drop, lost signal
//! (callback and channel), and a clear refusal inside an async runtime.
//!
//! The servers and the JVM are driven from a harness runtime; every blocking
//! call is made from a thread outside it, as a synchronous program makes it.

use redisson_lock_testkit as common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::java::{newest_versions, JavaPeer};
use common::{config, within, Observer, Proxy, RedisServer};
use fred::prelude::*;
use redisson_lock::blocking::{PermitHold, RLock, RedissonClient};
use redisson_lock::{Error, GroupValue, Unlocked};

/// A server and the runtime that drives it (and the test's own reads).
struct Harness {
    server: RedisServer,
    raw: Client,
    rt: tokio::runtime::Runtime,
}

impl Harness {
    fn start() -> Harness {
        Harness::start_with(&[])
    }

    fn start_with(flags: &[&str]) -> Harness {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let server = rt.block_on(RedisServer::start_with(flags));
        let raw = rt.block_on(server.raw());
        Harness { server, raw, rt }
    }

    fn client(&self, watchdog: Duration) -> RedissonClient {
        RedissonClient::connect(config(&self.server.url(), watchdog)).unwrap()
    }

    fn fields(&self, key: &str) -> std::collections::HashMap<String, String> {
        self.rt.block_on(self.raw.hgetall(key)).unwrap()
    }
}

#[test]
fn threads_exclude_each_other_and_every_waiter_is_woken() {
    let h = Harness::start();
    let client = h.client(Duration::from_secs(30));
    let inside = Arc::new(AtomicBool::new(false));
    let entries = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = client.lock("blocking:ledger").unwrap();
            let (inside, entries) = (inside.clone(), entries.clone());
            std::thread::spawn(move || {
                for _ in 0..25 {
                    let guard = lock.lock().unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    entries.fetch_add(1, Ordering::SeqCst);
                    std::thread::yield_now();
                    inside.store(false, Ordering::SeqCst);
                    assert_eq!(guard.unlock().unwrap(), Unlocked::Released);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), 100);
    assert!(h.fields("blocking:ledger").is_empty());
    assert_eq!(client.held_locks(), 0);
}

#[test]
fn the_thread_reenters_a_scope_follows_its_guard_and_drop_releases() {
    let h = Harness::start();
    let client = h.client(Duration::from_secs(30));
    let lock = client.lock("blocking:nested").unwrap();
    let outer = lock.lock().unwrap();
    let field = outer.field();
    outer.scope(|| {
        let inner = lock.lock().unwrap();
        assert_eq!(inner.owner(), outer.owner());
        assert_eq!(inner.hold_count().unwrap(), 2);
        assert_eq!(h.fields("blocking:nested")[&field], "2");
        // Another thread is outside the scope: it does not re-enter.
        let other = lock.clone();
        let from_elsewhere = std::thread::spawn(move || other.try_lock().unwrap().is_some());
        assert!(!from_elsewhere.join().unwrap());
        drop(inner); // waits for the release's reply
        assert_eq!(h.fields("blocking:nested")[&field], "1");
    });
    // Outside the scope too: this thread is the owner, as in Java.
    let again = lock
        .try_lock()
        .unwrap()
        .expect("the thread re-enters its hold");
    assert_eq!(again.owner(), outer.owner());
    assert_eq!(h.fields("blocking:nested")[&field], "2");
    drop(again);
    // A guard moved to another thread: its scope re-enters it there, where
    // the thread alone would wait.
    let elsewhere = std::thread::spawn({
        let lock = lock.clone();
        move || {
            assert!(lock.try_lock().unwrap().is_none(), "another thread's hold");
            let count = outer.scope(|| lock.try_lock().unwrap().map(|g| g.hold_count().unwrap()));
            drop(outer);
            count
        }
    });
    assert_eq!(elsewhere.join().unwrap(), Some(2));
    assert!(h.fields("blocking:nested").is_empty());

    // The write half's scope may take the read half (Redisson's downgrade).
    let rw = client.read_write_lock("blocking:prices").unwrap();
    let writing = rw.write().lock().unwrap();
    let reading = writing.scope(|| rw.read().try_lock().unwrap()).unwrap();
    assert_eq!(reading.owner(), writing.owner());
    drop(writing);
    assert_eq!(rw.mode().unwrap(), Some(redisson_lock::RwMode::Read));
    reading.unlock().unwrap();
    assert_eq!(rw.mode().unwrap(), None);
}

#[test]
fn a_lost_lock_is_told_through_the_callback_and_the_channel() {
    let h = Harness::start();
    let client = h.client(Duration::from_secs(1));
    let lock = client.lock("blocking:export").unwrap();
    let guard = lock.lock().unwrap();
    let (called, callback) = std::sync::mpsc::channel();
    guard.on_lost(move || called.send("callback ran").unwrap());
    let lost = guard.lost_channel();
    // Deleted behind the holder's back: the next renewal finds it gone.
    let _: i64 = h.rt.block_on(h.raw.del("blocking:export")).unwrap();
    lost.recv_timeout(Duration::from_secs(10))
        .expect("the lost signal within a renewal period");
    assert!(guard.is_lost());
    assert_eq!(
        callback.recv_timeout(Duration::from_secs(10)),
        Ok("callback ran")
    );
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));

    // A hold released normally never fires: its channel just disconnects.
    let guard = lock.lock().unwrap();
    let lost = guard.lost_channel();
    guard.unlock().unwrap();
    assert_eq!(
        lost.recv_timeout(Duration::from_secs(10)),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
    );
}

/// A lost callback may block: it runs on a thread of its own, and the
/// client's other holds are renewed meanwhile. It ran on the client's only
/// runtime thread, so a callback that waited stopped every renewal of that
/// client (each lost in turn).
#[test]
fn a_lost_callback_that_blocks_holds_up_no_renewal() {
    let h = Harness::start_with(&["--notify-keyspace-events", "Kg"]);
    let client = h.client(Duration::from_secs(1));
    let gone = client.lock("blocking:gone").unwrap().lock().unwrap();
    let kept = client.lock("blocking:kept").unwrap().lock().unwrap();
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (go_on, blocked) = std::sync::mpsc::channel::<()>();
    gone.on_lost(move || {
        entered_tx.send(()).unwrap();
        let _ = blocked.recv();
    });
    let mut renewals = h.rt.block_on(Observer::new(
        &h.server,
        &["__keyspace@0__:blocking:kept"],
        &[],
    ));
    let _: i64 = h.rt.block_on(h.raw.del("blocking:gone")).unwrap();
    entered
        .recv_timeout(common::HANG)
        .expect("the callback runs once the loss is found");
    // While it blocks, the other hold is renewed (each renewal a PEXPIRE).
    for _ in 0..3 {
        let (event, key) = h.rt.block_on(renewals.next());
        assert_eq!(
            (event.as_str(), key.as_str()),
            ("__keyevent@0__:expire", "blocking:kept")
        );
    }
    assert!(!kept.is_lost());
    go_on.send(()).unwrap();
    assert_eq!(kept.unlock().unwrap(), Unlocked::Released);
}

/// Dropping a guard waits for the release's reply at most one command
/// timeout, then lets it finish in the background: the whole retry policy
/// (about 20 s at the defaults) used to hold the dropping thread, even
/// while a panic unwound.
#[test]
fn a_dropped_guard_waits_one_command_timeout_then_releases_in_the_background() {
    let h = Harness::start();
    let proxy = h.rt.block_on(Proxy::start(h.server.port));
    // A command timeout of 1 s; the retry policy waits several of them.
    let client = RedissonClient::connect(config(&proxy.url(), Duration::from_secs(30))).unwrap();
    let guard = client.lock("blocking:dropped").unwrap().lock().unwrap();
    proxy.stall_replies();
    drop(guard);
    // Back with the reply still held back: the outcome is not known yet, and
    // the hold is still tracked while the release goes on.
    assert_eq!(client.held_locks(), 1);
    proxy.resume_replies();
    h.rt.block_on(common::topology::until(
        "released in the background",
        || async { client.held_locks() == 0 },
    ));
    assert!(h.fields("blocking:dropped").is_empty());
}

/// Blocking calls work where tokio puts sync code, `spawn_blocking`, and
/// even in an async task (blocking its worker, as a `std` mutex would):
/// tokio runs no runtime inside another's context, so the call runs on a
/// thread of the client's. Both were refused.
#[test]
fn a_blocking_call_works_from_spawn_blocking_and_from_a_task() {
    let h = Harness::start();
    let url = h.server.url();
    // Connected, used and dropped inside a runtime's task.
    let in_task = h.rt.block_on(async {
        let client = RedissonClient::connect(config(&url, Duration::from_secs(30)))?;
        let guard = client.lock("blocking:from-task")?.lock()?;
        let count = guard.hold_count()?;
        guard.unlock()?;
        drop(client);
        Ok::<_, Error>(count)
    });
    assert_eq!(in_task.unwrap(), 1);
    assert!(h.fields("blocking:from-task").is_empty());

    let client = h.client(Duration::from_secs(30));
    let lock = client.lock("blocking:misuse").unwrap();
    let in_spawn_blocking = h.rt.block_on(async {
        let lock = lock.clone();
        tokio::task::spawn_blocking(move || {
            let outer = lock.lock()?;
            // A scope is the calling thread's, wherever the call runs.
            let inner = outer.scope(|| lock.lock())?;
            let count = inner.hold_count()?;
            inner.unlock()?;
            outer.unlock()?;
            Ok::<_, Error>(count)
        })
        .await
        .unwrap()
    });
    assert_eq!(in_spawn_blocking.unwrap(), 2);
    assert!(h.fields("blocking:misuse").is_empty());

    // A guard dropped inside a runtime is released in the background, on the
    // client's own runtime; its waiters are told.
    let guard = lock.lock().unwrap();
    let mut unlocks = h.rt.block_on(Observer::new(
        &h.server,
        &["redisson_lock__channel:{blocking:misuse}"],
        &[],
    ));
    h.rt.block_on(async move { drop(guard) });
    let (_, message) = h.rt.block_on(within("the unlock message", unlocks.next()));
    assert_eq!(message, "0");
    assert!(h.fields("blocking:misuse").is_empty());
}

/// What the async API has, the blocking one has: `run`, the fenced lock's
/// `set_if_newest`, elections (fenced ones with their terms) and the
/// expirable semaphore, each on a plain thread.
#[test]
fn run_fencing_elections_and_expirable_permits_have_a_blocking_form() {
    let h = Harness::start();
    let client = h.client(Duration::from_secs(30));

    // run: the closure holds the lock, on this thread (so it re-enters).
    let lock = client.lock("blocking:run").unwrap();
    let inside = lock
        .run(|lost| {
            assert!(!lost.is_lost());
            lock.hold_count().unwrap()
        })
        .unwrap();
    assert_eq!(inside, 1);
    assert!(h.fields("blocking:run").is_empty());

    // The fenced lock's token writes.
    let fenced = client.fenced_lock("blocking:fenced").unwrap();
    let first = fenced.lock().unwrap();
    assert!(first.set_if_newest("blocking:head", "first").unwrap());
    drop(first);
    let second = fenced.lock().unwrap();
    assert!(second.set_if_newest("blocking:head", "second").unwrap());
    second.unlock().unwrap();

    // Elections, plain and fenced.
    let election = client.fenced_election("blocking:leader").unwrap();
    let leading = election.campaign().unwrap();
    let term = leading.term().expect("a fenced election's term");
    let leader = election.leader().unwrap().unwrap();
    assert_eq!(
        (leader.client_id.as_str(), leader.term),
        (client.id(), Some(term))
    );
    assert!(leading
        .set_if_newest("blocking:leader:head", "led")
        .unwrap());
    // Another thread is another candidate (this one would re-enter).
    let other = client.election("blocking:leader").unwrap();
    let elsewhere =
        std::thread::spawn(move || other.try_campaign_for(Duration::ZERO).map(|l| l.is_none()));
    assert!(elsewhere.join().unwrap().unwrap(), "another thread elected");
    leading.resign().unwrap();
    assert_eq!(election.leader().unwrap(), None);

    // The expirable semaphore: kept alive by default, never expiring on
    // request.
    let slots = client.permit_expirable_semaphore("blocking:slots").unwrap();
    assert!(slots.try_set_permits(2).unwrap());
    let kept = slots.acquire(1).unwrap();
    let lease =
        h.rt.block_on(slots.as_async().lease_time(kept.ids()[0]))
            .unwrap();
    assert!(
        lease.is_some_and(|l| l <= Duration::from_secs(30)),
        "{lease:?}"
    );
    let forever = slots
        .acquire_with(1, PermitHold::Forever, Some(Duration::ZERO))
        .unwrap()
        .expect("the second permit");
    let left =
        h.rt.block_on(slots.as_async().lease_time(forever.ids()[0]))
            .unwrap();
    assert_eq!(left, None);
    assert!(slots
        .acquire_with(1, PermitHold::KeptAlive, Some(Duration::ZERO))
        .unwrap()
        .is_none());
    assert_eq!(kept.release().unwrap(), 1);
    drop(forever);
    assert_eq!(slots.available_permits().unwrap(), 2);

    // A multi lock: every member, and no other thread gets one of them.
    let transfer = client.multi_lock(&["blocking:a", "blocking:b"]).unwrap();
    let both = transfer.lock().unwrap();
    assert_eq!(both.guards().len(), 2);
    let member = client.lock("blocking:b").unwrap();
    let elsewhere = std::thread::spawn(move || member.try_lock().map(|g| g.is_none()));
    assert!(
        elsewhere.join().unwrap().unwrap(),
        "a member taken by another thread"
    );
    assert_eq!(both.unlock().unwrap(), Unlocked::Released);
    assert!(h.fields("blocking:a").is_empty() && h.fields("blocking:b").is_empty());
    // The group multi lock, held by this thread.
    let seats = client
        .group_lock("blocking:seats", ["1A", "1B"].map(GroupValue::string))
        .unwrap();
    let held = seats.lock().unwrap();
    assert!(seats.is_held().unwrap() && seats.is_locked().unwrap());
    let other = seats.clone();
    let elsewhere = std::thread::spawn(move || other.is_held());
    assert!(
        !elsewhere.join().unwrap().unwrap(),
        "held by this thread only"
    );
    held.unlock().unwrap();
    assert!(!seats.is_locked().unwrap());
}

#[test]
fn semaphores_and_latches_block_until_released() {
    let h = Harness::start();
    let client = h.client(Duration::from_secs(30));
    let slots = client.semaphore("blocking:slots").unwrap();
    assert!(slots.try_set_permits(2).unwrap());
    let both = slots.acquire(2).unwrap();
    assert_eq!(both.count(), 2);
    assert!(slots.try_acquire(1).unwrap().is_none());
    let waiter = {
        let slots = slots.clone();
        std::thread::spawn(move || slots.acquire(1).map(|p| p.forget()))
    };
    h.rt.block_on(common::await_subscribers(
        &h.server,
        &slots.as_async().channel(),
        1,
    ));
    drop(both); // gives both back, waking the waiter
    assert_eq!(waiter.join().unwrap().unwrap(), 1);
    assert_eq!(slots.available_permits().unwrap(), 1);

    let ready = client.count_down_latch("blocking:ready").unwrap();
    assert!(ready.try_set_count(2).unwrap());
    assert!(!ready.wait_for(Duration::from_millis(1)).unwrap());
    let waiting = {
        let ready = ready.clone();
        std::thread::spawn(move || ready.wait())
    };
    h.rt.block_on(common::await_subscribers(
        &h.server,
        &ready.as_async().channel(),
        1,
    ));
    assert_eq!(ready.count_down().unwrap(), 1);
    assert_eq!(ready.count_down().unwrap(), 0);
    waiting.join().unwrap().unwrap();
}

/// Java's reentrant lock, ported line by line (`lock.lock()?.keep()` for
/// `lock.lock()`), beside a JVM peer doing the same on the same lock: the
/// thread is the owner, it re-enters, `is_held` is `isHeldByCurrentThread`,
/// and `unlock` releases one hold; the JVM waits for the last one, and
/// while the JVM holds it every Rust thread waits.
#[test]
fn a_java_method_ported_line_by_line_runs_beside_the_jvm() {
    let (profile, version) = newest_versions()[0];
    let h = Harness::start();
    let java =
        h.rt.block_on(JavaPeer::start(profile, version, &h.server.url(), 30_000));
    let client = h.client(Duration::from_secs(30));
    let lock = client.lock("blocking:java").unwrap();
    let jvm = |command: &str| h.rt.block_on(java.ok(command));
    let other_thread = |lock: &RLock| {
        let lock = lock.clone();
        std::thread::spawn(move || (lock.is_held().unwrap(), lock.try_lock().unwrap().is_some()))
            .join()
            .unwrap()
    };

    lock.lock().unwrap().keep(); //                  lock.lock();
    lock.lock().unwrap().keep(); //                  lock.lock();
    assert!(lock.is_held().unwrap()); //             lock.isHeldByCurrentThread()
    assert_eq!(lock.hold_count().unwrap(), 2); //    lock.getHoldCount()
    assert_eq!(other_thread(&lock), (false, false));
    assert_eq!(jvm("tryLock blocking:java 1 0 -1"), "false");
    assert_eq!(lock.unlock().unwrap(), Unlocked::StillHeld); // lock.unlock();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert_eq!(jvm("tryLock blocking:java 1 0 -1"), "false");
    assert_eq!(lock.unlock().unwrap(), Unlocked::Released); //  lock.unlock();
    assert!(!lock.is_held().unwrap());
    assert!(matches!(lock.unlock(), Err(Error::NotHeld { .. })));

    // The same method on the JVM's thread 1: Rust threads, this one
    // included, wait for it.
    jvm("lock blocking:java 1 -1");
    jvm("lock blocking:java 1 -1");
    assert_eq!(jvm("holdCount blocking:java 1"), "2");
    assert_eq!(jvm("isHeldByThread blocking:java 1"), "true");
    assert!(lock.try_lock().unwrap().is_none());
    assert!(!lock.is_held().unwrap());
    jvm("unlock blocking:java 1");
    assert!(lock.try_lock().unwrap().is_none());
    jvm("unlock blocking:java 1");
    let guard = lock
        .try_lock()
        .unwrap()
        .expect("free after the JVM's last unlock");
    assert_eq!(guard.unlock().unwrap(), Unlocked::Released);
    h.rt.block_on(java.quit());
}

#[test]
fn a_jvm_holder_and_a_blocking_thread_exclude_each_other() {
    let (profile, version) = newest_versions()[0];
    let h = Harness::start();
    let java =
        h.rt.block_on(JavaPeer::start(profile, version, &h.server.url(), 30_000));
    let client = h.client(Duration::from_secs(30));
    let lock = client.lock("blocking:shared").unwrap();

    h.rt.block_on(java.ok("lock blocking:shared 1 -1"));
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.lock().map(|g| (g.field(), g)))
    };
    h.rt.block_on(common::await_subscribers(
        &h.server,
        &lock.as_async().channel(),
        1,
    ));
    assert!(!waiter.is_finished(), "acquired while the JVM holds it");
    // Java's unlock message wakes the blocked thread.
    h.rt.block_on(java.ok("unlock blocking:shared 1"));
    let (field, guard) = waiter.join().unwrap().unwrap();
    assert_eq!(
        h.fields("blocking:shared").keys().collect::<Vec<_>>(),
        [&field]
    );
    assert_eq!(
        h.rt.block_on(java.ok("tryLock blocking:shared 2 0 -1")),
        "false"
    );
    drop(guard);
    assert_eq!(
        h.rt.block_on(java.ok("tryLock blocking:shared 2 0 -1")),
        "true"
    );
    h.rt.block_on(java.quit());
}
