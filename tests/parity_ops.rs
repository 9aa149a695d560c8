//! Operations Redisson 4.7.0 has that the crate gained for parity, each
//! checked against the JVM (4.7.0 and 3.52.0): a fair lock's `delete`, a
//! fenced lock's `token` and `delete`, and an expirable permit's
//! `lease_time` (Redisson's `getLeaseTime`).

use redisson_lock_testkit as common;

use std::time::Duration;

use common::java::{newest_versions, JavaPeer};
use common::*;
use fred::prelude::*;
use redisson_lock::naming::{fair_queue_name, fair_timeout_name, token_name};
use redisson_lock::{Error, PermitId};

async fn existing(raw: &Client, keys: &[String]) -> i64 {
    raw.exists(keys.to_vec()).await.unwrap()
}

/// A fair lock's delete removes the lock, its queue and its deadlines, as
/// Java's does; a waiter of either side then goes on by itself, and a
/// holder of the other side finds its lock gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_delete_removes_its_three_keys_as_javas_does() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_millis(900)).await;
        let name = "fair:del";
        let keys = [
            name.to_string(),
            fair_queue_name(name),
            fair_timeout_name(name),
        ];
        let lock = rust.fair_lock(name).unwrap();

        // Rust holds (for a second: Java's wait is paused by that TTL), Java
        // waits in line; Rust deletes all three keys.
        let guard = lock.acquire().lease(Duration::from_secs(1)).await.unwrap();
        let java_waits = java.send(&format!("flock {name} 1 1000")).await;
        within("Java queued", async {
            while lock.queue().await.unwrap().len() != 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert_eq!(existing(&raw, &keys).await, 3, "{version}");
        assert!(lock.delete().await.unwrap());
        assert_eq!(existing(&raw, &keys).await, 0, "{version}");
        assert!(guard.is_lost(), "the client's own holder is told at once");
        assert!(matches!(guard.unlock().await, Err(Error::LockLost { .. })));
        // No message: Java's waiter retries when its pause ends, and takes it.
        within("Java takes the deleted lock", java_waits)
            .await
            .unwrap()
            .unwrap();
        assert!(lock.try_lock().await.unwrap().is_none());

        // Java deletes its own hold (leased for a second: the Rust waiter's
        // pause) and the Rust waiter's place.
        let rust_waits = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.lock().await })
        };
        within("Rust queued", async {
            while lock.queue().await.unwrap().len() != 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert_eq!(java.ok(&format!("fdelete {name}")).await, "true");
        // The queue and the deadlines are gone. The lock key may already be
        // back: the waiter's pause is what is left of Java's lease, which a
        // loaded machine can have spent by now (CI saw it), and the waiter
        // then takes the free lock at once.
        assert_eq!(existing(&raw, &keys[1..]).await, 0);
        let taken = within("the Rust waiter goes on", rust_waits)
            .await
            .unwrap()
            .unwrap();
        // Java's delete of a Rust hold: the holder hears of it at its next
        // renewal.
        assert_eq!(java.ok(&format!("fdelete {name}")).await, "true");
        within("the Rust holder hears of it", taken.lost()).await;
        assert!(!lock.delete().await.unwrap(), "nothing left");
        assert_eq!(java.ok(&format!("fdelete {name}")).await, "false");
        java.quit().await;
        rust.shutdown().await;
    }
}

/// `token()` reads what Java's `getToken` reads (`None` where Java says 0),
/// and `delete` removes the lock and its counter, as Java's does: the
/// sequence then starts again at 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_lock_token_and_delete_match_javas() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let raw = server.raw().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let name = "fenced:del";
        let keys = [name.to_string(), token_name(name)];
        let lock = rust.fenced_lock(name).unwrap();

        assert_eq!(java.ok(&format!("fencedToken {name}")).await, "0");
        assert_eq!(lock.token().await.unwrap(), None);
        assert_eq!(java.ok(&format!("fencedLock {name} 1 -1")).await, "1");
        assert_eq!(lock.token().await.unwrap(), Some(1), "{version}");
        java.ok(&format!("fencedUnlock {name} 1")).await;
        let guard = lock.lock().await.unwrap();
        assert_eq!(guard.token(), 2);
        assert_eq!(java.ok(&format!("fencedToken {name}")).await, "2");

        // Rust deletes both keys: its holder is told, the count restarts.
        assert!(lock.delete().await.unwrap());
        assert_eq!(existing(&raw, &keys).await, 0, "{version}");
        assert!(guard.is_lost());
        drop(guard);
        assert_eq!(lock.token().await.unwrap(), None);
        assert_eq!(java.ok(&format!("fencedToken {name}")).await, "0");
        assert!(!lock.delete().await.unwrap());
        assert_eq!(java.ok(&format!("fencedLock {name} 1 -1")).await, "1");
        java.ok(&format!("fencedUnlock {name} 1")).await;

        // Java deletes a token left after a release.
        assert_eq!(existing(&raw, &keys).await, 1);
        assert_eq!(java.ok(&format!("fencedDelete {name}")).await, "true");
        assert_eq!(lock.token().await.unwrap(), None);
        assert_eq!(java.ok(&format!("fencedDelete {name}")).await, "false");
        java.quit().await;
        rust.shutdown().await;
    }
}

/// `lease_time` reads a lease as Java's `getLeaseTime` does, for permits
/// leased by either side: the time left, none for a permit that never
/// ends, and a refusal for an id that is not leased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_time_reads_leases_as_javas_get_lease_time() {
    for (profile, version) in newest_versions() {
        let server = RedisServer::start().await;
        let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
        let rust = client(&server, Duration::from_secs(30)).await;
        let slots = rust.permit_expirable_semaphore("pes:lease").unwrap();
        assert!(slots.try_set_permits(3).await.unwrap());

        // Java's 60 s lease, read by Rust.
        let java_id = java.ok("pesAcquire pes:lease 60000").await;
        let id: PermitId = java_id.parse().unwrap();
        let left = slots
            .lease_time(id)
            .await
            .unwrap()
            .expect("an ending lease");
        assert!(
            left > Duration::ZERO && left <= Duration::from_secs(60),
            "{left:?}"
        );
        // Rust's leases, read by Java: one without an end, one of 90 s.
        let forever = slots.acquire(1).forever().await.unwrap();
        let forever_id = forever.ids()[0];
        assert_eq!(slots.lease_time(forever_id).await.unwrap(), None);
        assert_eq!(
            java.ok(&format!("pesLeaseTime pes:lease {forever_id}"))
                .await,
            "-1",
            "{version}"
        );
        let timed = slots
            .acquire(1)
            .lease(Duration::from_secs(90))
            .await
            .unwrap();
        let java_left: i64 = java
            .ok(&format!("pesLeaseTime pes:lease {}", timed.ids()[0]))
            .await
            .parse()
            .unwrap();
        assert!(java_left > 60_000 && java_left <= 90_000, "{java_left}");

        // Released ids are refused on both sides.
        java.ok(&format!("pesRelease pes:lease {java_id}")).await;
        assert!(matches!(
            slots.lease_time(id).await,
            Err(Error::InvalidArgument(_))
        ));
        let refused = java
            .call(&format!("pesLeaseTime pes:lease {java_id}"))
            .await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.starts_with("IllegalArgumentException")),
            "{refused:?}"
        );
        forever.release().await.unwrap();
        timed.release().await.unwrap();
        java.quit().await;
        rust.shutdown().await;
    }
}
