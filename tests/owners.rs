//! Owners: mutual exclusion holds between futures polled by one task, and
//! re-entry is scoped to the flow that holds the lock.

use redisson_lock_testkit as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use futures::stream::{FuturesUnordered, StreamExt};
use redisson_lock::RLock;

/// Counts who is inside a critical section, and the most ever seen at once.
#[derive(Default)]
struct Overlap {
    inside: AtomicUsize,
    most: AtomicUsize,
}

impl Overlap {
    /// Runs a critical section that yields a few times, so that another
    /// future polled by the same task gets its chance to run meanwhile.
    async fn section(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

async fn with_lock(lock: &RLock, overlap: &Overlap) {
    let guard = lock.lock().await.unwrap();
    overlap.section().await;
    guard.unlock().await.unwrap();
}

async fn with_try_lock_for(lock: &RLock, overlap: &Overlap) {
    let guard = lock
        .try_lock_for(Duration::from_secs(20))
        .await
        .unwrap()
        .expect("acquired within the wait");
    overlap.section().await;
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn two_lock_futures_joined_in_one_task_never_hold_at_once() {
    let server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("joined").unwrap();
    let overlap = Overlap::default();
    within("both joined futures finish", async {
        tokio::join!(with_lock(&lock, &overlap), with_lock(&lock, &overlap))
    })
    .await;
    assert_eq!(overlap.most(), 1, "two holders inside one task");
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn two_try_lock_for_futures_joined_in_one_task_never_hold_at_once() {
    let server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("joined-try").unwrap();
    let overlap = Overlap::default();
    within("both joined futures finish", async {
        tokio::join!(
            with_try_lock_for(&lock, &overlap),
            with_try_lock_for(&lock, &overlap)
        )
    })
    .await;
    assert_eq!(overlap.most(), 1, "two holders inside one task");
}

#[tokio::test]
async fn futures_unordered_in_one_task_take_turns() {
    let server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("unordered").unwrap();
    let overlap = Overlap::default();
    let mut all: FuturesUnordered<_> = (0..5).map(|_| with_lock(&lock, &overlap)).collect();
    within("every future finishes", async {
        while all.next().await.is_some() {}
    })
    .await;
    assert_eq!(overlap.most(), 1, "two holders inside one task");
}
