//! Leader election (`client.election(name)`) on real servers: the holder of
//! the RLock leads (a JVM Redisson holder too), `observe()` follows the
//! leader woken by the lock's own messages, and a failover under the default
//! quorum never leaves a leadership believed that Redis no longer holds.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::java::{newest_versions, JavaPeer};
use common::topology::{until, Sentinel};
use common::*;
use fred::prelude::*;
use futures::StreamExt;
use redisson_lock::{Config, Leader, RedissonClient};

/// A client whose observers are woken by messages only: the recheck period
/// (what catches acquisitions and expiries, which send nothing) is far
/// longer than any wait here.
async fn quiet_client(server: &RedisServer) -> RedissonClient {
    let mut c = config(&server.url(), Duration::from_secs(30));
    c.recheck_interval = Duration::from_secs(600);
    RedissonClient::connect(c).await.unwrap()
}

/// The next leader the stream reports that is not "nobody".
async fn next_leader(
    changes: &mut (impl futures::Stream<Item = redisson_lock::Result<Option<Leader>>> + Unpin),
) -> Leader {
    within("the next leader", async {
        loop {
            if let Some(leader) = changes.next().await.unwrap().unwrap() {
                return leader;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_leads_and_resigning_hands_over_to_the_next_candidate() {
    let server = RedisServer::start().await;
    let a = quiet_client(&server).await;
    let b = quiet_client(&server).await;
    let election = a.election("scheduler").unwrap();
    assert_eq!(election.leader().await.unwrap(), None);

    let leading = election.campaign().await.unwrap();
    let watching = b.election("scheduler").unwrap();
    let mut changes = Box::pin(watching.observe());
    let first = next_leader(&mut changes).await;
    assert_eq!(first.client_id, a.id());
    assert!(!first.this_client);
    let who = first.identity.expect("a registered leader");
    assert_eq!(who.pid, Some(std::process::id()));
    assert_eq!(who.runtime, "rust");
    // Re-entry raises the hold count: not a change of leader.
    let nested = leading.guard().scope(election.lock().lock()).await.unwrap();
    nested.unlock().await.unwrap();

    // B's campaign shares its client's one subscription with the observer.
    let candidate = tokio::spawn(async move { watching.campaign().await.map(|l| (l, watching)) });
    leading.resign().await.unwrap();
    let (leadership, _watching) = within("B elected", candidate).await.unwrap().unwrap();
    // Woken by the unlock message, then B's silent acquisition found by the
    // reads that follow it (the recheck period is 10 minutes).
    let second = next_leader(&mut changes).await;
    assert_eq!(
        (second.client_id.as_str(), second.this_client),
        (b.id(), true)
    );
    assert_eq!(election.leader().await.unwrap().unwrap().client_id, b.id());
    leadership.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
    drop(changes);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jvm_holder_of_the_rlock_is_the_leader() {
    let (profile, version) = newest_versions()[0];
    let server = RedisServer::start().await;
    let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
    let rust = quiet_client(&server).await;
    let election = rust.election("scheduler").unwrap();
    java.ok("lock scheduler 3 -1").await;
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.client_id.as_str(), leader.owner.as_str()),
        (java.client_id.as_str(), "3")
    );
    assert_eq!(leader.identity, None, "the JVM did not register");

    let mut changes = Box::pin(election.observe());
    assert_eq!(next_leader(&mut changes).await.client_id, java.client_id);
    let campaign = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign().await })
    };
    await_subscribers(&server, &election.lock().channel(), 1).await;
    java.ok("unlock scheduler 3").await;
    let leadership = within("elected after the JVM resigns", campaign)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next_leader(&mut changes).await.client_id, rust.id());
    // The JVM now campaigns in vain.
    assert_eq!(java.ok("tryLock scheduler 4 0 -1").await, "false");
    leadership.resign().await.unwrap();
    assert_eq!(java.ok("tryLock scheduler 4 0 -1").await, "true");
    java.kill().await;
    rust.shutdown().await;
}

/// A failover under the default quorum (one replica of two confirms each
/// write): afterwards the leader either still holds the lock on the new
/// primary, or has been told its leadership is lost. Sentinel may promote
/// the replica that missed the acquisition (no client can prevent that);
/// the leadership is then lost, never believed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_a_leadership_is_held_or_known_lost() {
    let mut sentinel = Sentinel::start().await;
    let connect = || async {
        let mut c: Config = config(&sentinel.url(), Duration::from_secs(3));
        c.recheck_interval = Duration::from_millis(500);
        RedissonClient::connect(c).await.unwrap()
    };
    let a = connect().await;
    let b = connect().await;
    let leadership = a.election("scheduler").unwrap().campaign().await.unwrap();
    let field = leadership.guard().field();
    let old = sentinel.primary_port().await;
    sentinel.primary.kill().await;
    let new = sentinel.await_new_primary(old).await;
    let primary = common::topology::node_client(new).await;
    until(
        "the leadership renewed on the new primary, or known lost",
        || async {
            if leadership.is_lost() {
                return true;
            }
            let held: bool = primary.hexists("scheduler", &field).await.unwrap_or(false);
            let stats = a.watchdog_stats();
            held && stats.renewed > 0 && !leadership.is_at_risk()
        },
    )
    .await;
    let mut changes = Box::pin(b.election("scheduler").unwrap().observe());
    let observed = within("B observes the leader", changes.next())
        .await
        .unwrap()
        .unwrap();
    if leadership.is_lost() {
        // Told lost before its lease could run out (a renewal found the field
        // gone, or none was confirmed in time). Redis may still have A's
        // field: the watchdog keeps renewing a lost hold, as Redisson does,
        // until its holder lets go, which is what a told leader does.
        eprintln!("the failover lost the leadership; A was told");
        // (Right after a failover the release may not be confirmed by a
        // replica yet: it ran on the primary, and says so.)
        match leadership.resign().await {
            Err(redisson_lock::Error::LockLost { .. })
            | Err(redisson_lock::Error::ReplicasNotSynced { .. }) => {}
            other => panic!("resigning a lost leadership: {other:?}"),
        }
        let mut now = observed;
        within("A's field gone from the new primary", async {
            while now.as_ref().is_some_and(|l| l.client_id == a.id()) {
                now = changes.next().await.unwrap().unwrap();
            }
        })
        .await;
    } else {
        assert_eq!(observed.map(|l| l.client_id), Some(a.id().to_string()));
        leadership.resign().await.unwrap();
    }
    let elected = within("B elected", b.election("scheduler").unwrap().campaign())
        .await
        .unwrap();
    elected.resign().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}
