//! A build-time check: every public future can be handed to `tokio::spawn`
//! by a crate that keeps half of rustc's default recursion limit.
//!
//! rustc proves a spawned future `Send` and lays it out in the crate that
//! spawns it, walking every future nested inside. While fred's command
//! futures sat inline at the bottom of ours, that walk went deeper than the
//! default limit of 128, and `tokio::spawn(async move { lock.lock().await })`
//! failed to build from scratch with "queries overflow the depth limit".
//! This file builds only while the walk fits in 64; every public `async fn`
//! and `IntoFuture` is spawned in [`spawn_each`]. It does not use
//! `tests/common`: that module's own fred calls need more than 64.
//! Behaviour is tested elsewhere; this test binary only has to build.
#![recursion_limit = "64"]

use std::time::Duration;

use redisson_lock::{
    Config, ExpirablePermits, FencedGuard, GroupValue, LockGuard, MultiGuard, OwnerId, PermitId,
    RedissonClient, SemaphorePermits,
};

const D: Duration = Duration::from_millis(10);

fn spawn<F>(future: F)
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    drop(tokio::spawn(future));
}

/// Spawns `$body` with `$var` cloned into it.
macro_rules! each {
    ($var:ident => $($body:expr;)+) => {
        $({
            let $var = $var.clone();
            spawn(async move { $body });
        })+
    };
}

/// Spawns every public future once; never awaited.
async fn spawn_each(
    client: RedissonClient,
    guard: LockGuard,
    fenced_guard: FencedGuard,
    multi_guard: MultiGuard,
    permits: SemaphorePermits,
    expirable: ExpirablePermits,
    id: PermitId,
) {
    spawn(RedissonClient::connect(Config::from_url(
        "redis://127.0.0.1:1",
    )));
    spawn(async { RedissonClient::from_url("redis://127.0.0.1:1").await });
    let lock = client.lock("a").unwrap();
    each!(lock =>
        lock.lock().await;
        lock.acquire().lease(D).await;
        lock.try_lock().await;
        lock.try_lock_for(D).await;
        lock.acquire().wait(D).lease(D).await;
        lock.acquire().lease(D).await;
        lock.acquire().wait(D).await;
        lock.acquire().run(|_lost| async { 1 }).await;
        lock.acquire().no_wait().run(|_lost| async { 1 }).await;
        lock.run(|_lost| async { 1 }).await;
        lock.unlock().await;
        lock.force_unlock().await;
        lock.is_locked().await;
        lock.is_held().await;
        lock.is_held_by(OwnerId::unique()).await;
        lock.hold_count().await;
        lock.hold_count_of(OwnerId::unique()).await;
        lock.holders().await;
        lock.remaining_ttl().await;
    );
    spawn(async move {
        guard.hold_count().await.ok();
        guard.lost_signal().lost().await;
        guard.lost().await;
        guard.unlock().await
    });
    let fair = client.fair_lock("a").unwrap();
    each!(fair => fair.lock().await; fair.queue().await; fair.delete().await;);
    let fenced = client.fenced_lock("a").unwrap();
    each!(fenced => fenced.lock().await; fenced.token().await; fenced.delete().await;);
    let nr = client.non_reentrant_lock("a").unwrap();
    each!(nr =>
        nr.lock().await;
        nr.try_lock().await;
        nr.try_lock_for(D).await;
        nr.acquire().lease(D).await;
        nr.run(|_lost| async { 1 }).await;
        nr.unlock().await;
    );
    let nr_fair = client.non_reentrant_fair_lock("a").unwrap();
    each!(nr_fair =>
        nr_fair.lock().await;
        nr_fair.try_lock_for(D).await;
        nr_fair.queue().await;
        nr_fair.delete().await;
    );
    let group = client
        .group_lock("g", ["a", "b"].map(GroupValue::string))
        .unwrap();
    each!(group =>
        group.lock().await;
        group.acquire().lease(D).await;
        group.try_lock().await;
        group.try_lock_for(D).await;
        group.acquire().wait(D).lease(D).await;
        group.acquire().wait(D).await;
        group.acquire().lease(D).await;
        group.run(|_lost| async { 1 }).await;
        group.unlock().await;
        group.force_unlock().await;
        group.is_locked().await;
        group.is_held().await;
        group.is_held_by(OwnerId::unique()).await;
    );
    spawn(async move {
        fenced_guard.set_if_newest("k", "v").await.ok();
        fenced_guard.unlock().await
    });
    let spin = client.spin_lock("a").unwrap();
    each!(spin => spin.lock().await;);
    let rw = client.read_write_lock("a").unwrap();
    each!(rw =>
        rw.read().lock().await;
        rw.write().lock().await;
        rw.is_locked().await;
        rw.mode().await;
        rw.remaining_ttl().await;
    );
    let multi = client.multi_lock(&["a", "b"]).unwrap();
    each!(multi =>
        multi.lock().await;
        multi.acquire().lease(D).await;
        multi.try_lock().await;
        multi.try_lock_for(D).await;
        multi.acquire().wait(D).lease(D).await;
        multi.acquire().wait(D).await;
    );
    spawn(async move {
        multi_guard.lost().await;
        multi_guard.unlock().await
    });
    let sem = client.semaphore("a").unwrap();
    each!(sem =>
        sem.try_set_permits(1).await;
        sem.try_set_permits_with_ttl(1, D).await;
        sem.add_permits(1).await;
        sem.available_permits().await;
        sem.drain_permits().await;
        sem.acquire(1).await;
        sem.try_acquire(1).await;
        sem.try_acquire_for(1, D).await;
        sem.release(1).await;
        sem.release_if_exists(1).await;
        sem.delete().await;
    );
    spawn(permits.release());
    let pes = client.permit_expirable_semaphore("a").unwrap();
    each!(pes =>
        pes.try_set_permits(1).await;
        pes.set_permits(1).await;
        pes.add_permits(1).await;
        pes.available_permits().await;
        pes.acquired_permits().await;
        pes.permits().await;
        pes.leases().await;
        pes.acquire(1).lease(D).await;
        pes.try_acquire(1).await;
        pes.try_acquire_for(1, D).await;
        pes.release(&[id]).await;
        pes.try_release(&[id]).await;
        pes.update_lease(id, None).await;
        pes.lease_time(id).await;
        pes.delete().await;
    );
    spawn(expirable.release());
    let latch = client.count_down_latch("a").unwrap();
    each!(latch =>
        latch.try_set_count(1).await;
        latch.count_down().await;
        latch.count().await;
        latch.wait().await;
        latch.wait_for(D).await;
        latch.delete().await;
    );
    each!(client =>
        client.inspect("a").await;
        client.scan_objects("*", 1000).await;
    );
    spawn(async move { client.shutdown().await });
}

#[test]
fn every_public_future_is_spawnable_under_a_low_recursion_limit() {
    // A function pointer makes the probe part of the build, not dead code.
    let probe: fn(_, _, _, _, _, _, _) -> _ = spawn_each;
    std::hint::black_box(probe);
}
