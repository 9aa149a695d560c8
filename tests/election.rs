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
        // field for a moment: a lost leadership lets go of it by itself.
        eprintln!("the failover lost the leadership; A was told");
        // (Right after a failover the release may not be confirmed by a
        // replica yet: it ran on the primary, and says so; or the
        // leadership had let go already.)
        match leadership.resign().await {
            Err(redisson_lock::Error::LockLost { .. })
            | Err(redisson_lock::Error::NotHeld { .. })
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
    // Right after a failover the only promotable replica may still be
    // resyncing: a campaign is then refused as not confirmed (the safety
    // rule at work, seen once in CI), and a candidate campaigns again, as
    // any caller of `lock()` does after a transient error.
    let election = b.election("scheduler").unwrap();
    let elected = within("B elected", async {
        loop {
            match election.campaign().await {
                Ok(leadership) => return leadership,
                Err(
                    e @ (redisson_lock::Error::ReplicasNotSynced { .. }
                    | redisson_lock::Error::NoPrimary(_)
                    | redisson_lock::Error::Connection { .. }
                    | redisson_lock::Error::Timeout(_)),
                ) => eprintln!("B campaigns again after: {e}"),
                Err(e) => panic!("B's campaign: {e}"),
            }
        }
    })
    .await;
    elected.resign().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

/// A lost leadership lets go by itself: A's renewals ran on Redis but their
/// replies were held back past its lease, so A is told it lost, while its
/// lock is still on Redis and, once the replies flow again, renewable. A
/// keeps its handle (as a leader that only logs the loss does). Before, the
/// watchdog went on renewing the lost hold and B was never elected; now the
/// lock is released once A is told, and B leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_leadership_is_let_go_while_its_handle_is_kept() {
    let (server, proxy, a) = proxied(|c| c.lock_watchdog_timeout = Duration::from_secs(1)).await;
    let b = quiet_client(&server).await;
    let leadership = a.election("rotation").unwrap().campaign().await.unwrap();
    proxy.stall_replies();
    within("A told it lost", leadership.lost()).await;
    // (Its renewals ran on Redis, only their replies are late: kept
    // renewing, the lock would stay A's.)
    let b_election = b.election("rotation").unwrap();
    let candidate = tokio::spawn(async move { b_election.campaign().await });
    proxy.resume_replies();
    let elected = within("B elected while A keeps its handle", candidate)
        .await
        .unwrap()
        .unwrap();
    assert!(leadership.is_lost());
    let leader = b.election("rotation").unwrap().leader().await.unwrap();
    assert_eq!(leader.map(|l| l.client_id), Some(b.id().to_string()));
    drop(leadership);
    elected.resign().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

/// `lead` campaigns again after each term: a term that returns `Ok(true)`
/// resigns and campaigns again, one that is lost is dropped and campaigns
/// again, `Ok(false)` ends (Curator's `autoRequeue`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_campaigns_again_after_each_term() {
    let server = RedisServer::start().await;
    // A renewal every third of a second finds the deleted lock gone.
    let a = RedissonClient::connect(config(&server.url(), Duration::from_secs(1)))
        .await
        .unwrap();
    let raw = server.raw().await;
    let election = a.election("requeue").unwrap();
    let terms = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = terms.clone();
    let (lost_tx, mut lost_rx) = tokio::sync::mpsc::unbounded_channel();
    within(
        "three terms",
        election.lead(|lost| {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let (raw, lost_tx) = (raw.clone(), lost_tx.clone());
            async move {
                match n {
                    // The first term ends by itself: campaign again.
                    1 => Ok(true),
                    // The second is lost (its lock deleted behind its back):
                    // dropped while it waits, then a third campaign.
                    2 => {
                        let _: i64 = raw.del("requeue").await.unwrap();
                        lost_tx.send(()).unwrap();
                        std::future::pending().await
                    }
                    _ => {
                        assert!(!lost.is_lost());
                        Ok(false)
                    }
                }
            }
        }),
    )
    .await
    .unwrap();
    assert_eq!(terms.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert!(lost_rx.try_recv().is_ok());
    assert_eq!(
        election.leader().await.unwrap(),
        None,
        "resigned at the end"
    );
    a.shutdown().await;
}

/// A fenced election (`fenced_election`, on Redisson's fenced lock) has
/// terms: each leadership's fencing token, above every earlier one. A
/// former leader that has not seen its loss (paused, here its lock forced
/// open behind its back) is refused by what the new leader wrote; a JVM
/// holder of `getFencedLock` leads with its token as the term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_election_has_terms_and_a_former_leader_is_refused() {
    let (profile, version) = newest_versions()[0];
    let server = RedisServer::start().await;
    let java = JavaPeer::start(profile, version, &server.url(), 30_000).await;
    let a = quiet_client(&server).await;
    let b = quiet_client(&server).await;
    let first = a
        .fenced_election("ledger")
        .unwrap()
        .campaign()
        .await
        .unwrap();
    let t1 = first.term().expect("a fenced election has terms");
    assert!(first.set_if_newest("ledger:head", "a").await.unwrap());
    // A pauses past its lease (its lock taken away meanwhile): B leads.
    assert!(b
        .fenced_lock("ledger")
        .unwrap()
        .force_unlock()
        .await
        .unwrap());
    let election = b.fenced_election("ledger").unwrap();
    let second = election.campaign().await.unwrap();
    let t2 = second.term().unwrap();
    assert!(t2 > t1, "{t2} after {t1}");
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!((leader.client_id.as_str(), leader.term), (b.id(), Some(t2)));
    assert!(second.set_if_newest("ledger:head", "b").await.unwrap());
    // A resumes, still believing it leads: its term is refused.
    assert!(!first.is_lost(), "not told yet (a renewal every 10 s)");
    assert!(!first.set_if_newest("ledger:head", "a, late").await.unwrap());
    let raw = server.raw().await;
    let head: String = raw.get("ledger:head").await.unwrap();
    assert_eq!(head, "b");
    second.resign().await.unwrap();
    drop(first);

    // A JVM holder of the fenced lock leads, its token the term.
    let token: i64 = java.ok("fencedLock ledger 7 -1").await.parse().unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (
            leader.client_id.as_str(),
            leader.owner.as_str(),
            leader.term
        ),
        (java.client_id.as_str(), "7", Some(token))
    );
    assert!(token > t2);
    java.ok("fencedUnlock ledger 7").await;
    // A plain election has no terms to write with.
    let plain = a.election("plain").unwrap().campaign().await.unwrap();
    assert_eq!(plain.term(), None);
    assert!(matches!(
        plain.set_if_newest("plain:head", "x").await,
        Err(redisson_lock::Error::InvalidArgument(_))
    ));
    plain.resign().await.unwrap();
    java.kill().await;
    a.shutdown().await;
    b.shutdown().await;
}
