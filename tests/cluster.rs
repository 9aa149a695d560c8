//! Redis Cluster: 3 primaries with 3 replicas, started by the test.

use redisson_lock_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::topology::{node_client, on_node, until, Cluster};
use common::{client, command_calls, config, within, RedisServer};
use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use redisson_lock::{naming, Error, RedissonClient};

async fn connect(cluster: &Cluster, watchdog: Duration) -> RedissonClient {
    RedissonClient::connect(config(&cluster.url(), watchdog))
        .await
        .expect("connect to the cluster")
}

async fn shardnumsub(port: u16, channel: &str) -> i64 {
    common::topology::subscribers_on(port, channel, true).await
}

/// Lock names until every primary owns at least two of them.
async fn names_on_every_primary(cluster: &Cluster) -> Vec<String> {
    let primaries = cluster.primaries().await;
    let mut per_primary: BTreeMap<u16, usize> = BTreeMap::new();
    let mut names = vec![];
    let mut k = 0;
    while primaries
        .iter()
        .any(|p| per_primary.get(p).copied().unwrap_or(0) < 2)
    {
        let name = format!("order:{k}");
        k += 1;
        let owner = cluster.owner_of(naming::slot(&name)).await;
        if per_primary.get(&owner).copied().unwrap_or(0) < 2 {
            *per_primary.entry(owner).or_default() += 1;
            names.push(name);
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_spread_over_every_primary_and_renew_with_one_script_per_slot() {
    let cluster = Cluster::start().await;
    let client = connect(&cluster, Duration::from_secs(1)).await;
    assert_eq!(
        client.sharded_pubsub(),
        cluster.sharded_pubsub().await,
        "AUTO picks SPUBLISH where the nodes have it (Redis 7+), PUBLISH on Redis 6"
    );

    // Two names share a hash tag, so they share a slot and a renewal script.
    let mut names = names_on_every_primary(&cluster).await;
    names.push("{batch}:a".into());
    names.push("{batch}:b".into());
    let mut guards = vec![];
    for name in &names {
        guards.push(client.lock(name).unwrap().lock().await.unwrap());
    }
    // Each primary stores exactly the locks of its slots.
    for primary in cluster.primaries().await {
        let c = node_client(primary).await;
        let mut expected = 0;
        for name in &names {
            if cluster.owner_of(naming::slot(name)).await == primary {
                expected += 1;
                let n: i64 = c
                    .custom(
                        CustomCommand::new_static("EXISTS", ClusterHash::Random, false),
                        vec![name.as_str()],
                    )
                    .await
                    .unwrap();
                assert_eq!(n, 1, "{name} lives on its slot's primary {primary}");
            }
        }
        assert!(expected >= 2);
        let _ = c.quit().await;
    }

    let slots: BTreeSet<u16> = names.iter().map(|n| naming::slot(n)).collect();
    assert_eq!(slots.len(), names.len() - 1);
    let mut updates = client.watchdog_updates();
    let stats = within("a full renewal cycle", async {
        loop {
            updates.changed().await.unwrap();
            let s = *updates.borrow_and_update();
            if s.last_cycle_locks == names.len() as u64 {
                return s;
            }
        }
    })
    .await;
    assert_eq!(
        stats.last_cycle_scripts,
        slots.len() as u64,
        "one renewal script per slot"
    );

    for guard in guards {
        guard.unlock().await.unwrap();
    }
    for name in &names {
        assert!(!client.lock(name).unwrap().is_locked().await.unwrap());
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_follow_their_shard_subscription_through_failover_and_resharding() {
    let cluster = Cluster::start().await;
    let holder = connect(&cluster, Duration::from_secs(2)).await;
    let waiter = connect(&cluster, Duration::from_secs(2)).await;
    let name = "shipments";
    let channel = naming::channel_name(name);
    let slot = naming::slot(name);

    // Three rounds, each with a waiter subscribed: nothing happens, the
    // slot's primary fails over, the slot migrates to another primary.
    for round in 0..3 {
        // A long explicit lease: only the unlock message can wake the waiter in time.
        let guard = holder
            .lock(name)
            .unwrap()
            .acquire()
            .lease(Duration::from_secs(120))
            .await
            .unwrap();
        let lock = waiter.lock(name).unwrap();
        let waiting = tokio::spawn(async move { lock.lock().await });
        let owner = cluster.owner_of(slot).await;
        until(
            "the waiter's shard subscription on the slot's owner",
            || async { shardnumsub(owner, &channel).await == 1 },
        )
        .await;
        // Classic pub/sub is not used in sharded mode.
        assert_eq!(common::numsub(&node_client(owner).await, &channel).await, 0);

        let moved_from = owner;
        let owner = match round {
            1 => cluster.failover(owner).await,
            2 => {
                let to = *cluster
                    .primaries()
                    .await
                    .iter()
                    .find(|p| **p != owner)
                    .unwrap();
                cluster.migrate_slot(slot, to).await;
                to
            }
            _ => owner,
        };
        assert_eq!(cluster.owner_of(slot).await, owner);
        // The server dropped the old subscription; the client re-made it on
        // the new owner while still waiting.
        until("the shard subscription moved to the new owner", || async {
            shardnumsub(owner, &channel).await == 1
        })
        .await;
        assert!(
            !waiting.is_finished(),
            "round {round}: the waiter is still waiting"
        );
        let moved_before = match round {
            2 => common::topology::error_count(moved_from, "MOVED").await,
            _ => 0,
        };
        // After the migration the holder's slot map is stale: its unlock is
        // refused with MOVED (allowed no redirection), and sent again to the
        // new owner.
        guard.unlock().await.unwrap();
        if round == 2 {
            assert!(common::topology::error_count(moved_from, "MOVED").await > moved_before);
        }
        let got = within("waiter woken by SPUBLISH", waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            got.unlock().await.unwrap(),
            redisson_lock::Unlocked::Released
        );
        until("the waiter left the channel", || async {
            shardnumsub(owner, &channel).await == 0
        })
        .await;
    }
    holder.shutdown().await;
    waiter.shutdown().await;
}

/// While a waiter is subscribed to a shard channel and nothing moves, the
/// client makes no new connection to any node: it compares its subscription
/// with the view its cluster scans keep, and re-reads the slot map (which
/// costs fred a new connection and three commands) only when they disagree.
/// Before, it re-read the map every second while any channel was
/// subscribed: this failed with "new connections while idle: 9".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_waiter_reads_no_slot_map_while_nothing_moves() {
    let cluster = Cluster::start().await;
    let waiter = connect(&cluster, Duration::from_secs(2)).await;
    let name = "idle-shipments";
    let channel = naming::channel_name(name);
    let owner = cluster.owner_of(naming::slot(name)).await;
    // Held by someone else, for longer than the test.
    let raw = node_client(owner).await;
    let _: () = raw.hset(name, ("elsewhere:1", 1)).await.unwrap();
    let _: () = raw.pexpire(name, 600_000, None).await.unwrap();
    let lock = waiter.lock(name).unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await });
    until("the waiter's shard subscription", || async {
        shardnumsub(owner, &channel).await == 1
    })
    .await;

    let mut nodes = vec![];
    for node in &cluster.nodes {
        nodes.push(node_client(node.port).await);
    }
    let connections = |nodes: &[Client]| {
        let nodes = nodes.to_vec();
        async move {
            let mut total = 0;
            for node in &nodes {
                let info: String = node.info(Some(fred::types::InfoKind::Stats)).await.unwrap();
                total += info
                    .lines()
                    .find_map(|l| l.strip_prefix("total_connections_received:"))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .unwrap();
            }
            total
        }
    };
    // CLUSTER NODES is counted as `cluster|nodes` from Redis 7, `cluster` before.
    let scans = |nodes: &[Client]| {
        let nodes = nodes.to_vec();
        async move {
            let mut total = 0;
            for node in &nodes {
                total += command_calls(node, "cluster|nodes").await
                    + command_calls(node, "cluster").await;
            }
            total
        }
    };
    let connections_before = connections(&nodes).await;
    let scans_before = scans(&nodes).await;
    // Two scans of the client: more than five checks of the subscription.
    until("two cluster scans by the waiting client", || {
        let scans = scans(&nodes);
        async move { scans.await >= scans_before + 2 }
    })
    .await;
    let new_connections = connections(&nodes).await - connections_before;
    assert_eq!(
        new_connections, 0,
        "new connections while idle: {new_connections}"
    );
    assert!(!waiting.is_finished(), "the waiter still waits");
    assert_eq!(shardnumsub(owner, &channel).await, 1);
    waiting.abort();
    waiter.shutdown().await;
}

/// A failover the client's cluster scan sees before its connections do:
/// the connection's slot map still sends the lock's slot to the deposed
/// primary, which the view says serves nothing. The acquire is not sent
/// there; the connection re-reads its map and the acquire goes to the new
/// primary. Before, the map was never re-read (nothing was sent that could
/// bring back a MOVED) and this failed with `NoPrimary("127.0.0.1:… is not
/// a primary in the cluster's last view")` once the settle budget ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_after_a_failover_only_the_view_saw_goes_to_the_new_primary() {
    let cluster = Cluster::start().await;
    let client = connect(&cluster, Duration::from_secs(2)).await;
    let name = "view-first";
    let lock = client.lock(name).unwrap();
    // The connection learns the slot's owner.
    lock.lock().await.unwrap().unlock().await.unwrap();
    let old = cluster.owner_of(naming::slot(name)).await;
    let new = cluster.failover(old).await;

    let mut nodes = vec![];
    for node in &cluster.nodes {
        nodes.push(node_client(node.port).await);
    }
    let scans = |nodes: &[Client]| {
        let nodes = nodes.to_vec();
        async move {
            let mut total = 0;
            for node in &nodes {
                total += command_calls(node, "cluster|nodes").await
                    + command_calls(node, "cluster").await;
            }
            total
        }
    };
    let before = scans(&nodes).await;
    until("a cluster scan by the client after the failover", || {
        let scans = scans(&nodes);
        async move { scans.await > before }
    })
    .await;

    let guard = within("the acquire after the failover", lock.lock())
        .await
        .expect("the acquire goes to the new primary");
    let on_new: bool = node_client(new).await.exists(name).await.unwrap();
    assert!(on_new, "the lock is on the new primary {new}");
    guard.unlock().await.unwrap();
    client.shutdown().await;
}

/// A client whose slot map is stale after a resharding sends its acquire to
/// the old owner, which refuses it with MOVED. The script did not run, so the
/// client sends it again to the new owner: the lock is taken, once, with no
/// read to resolve an unknown outcome (fred would otherwise follow the
/// redirect past the one write attempt a script gets, and fail it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_refused_with_moved_is_sent_again_to_the_new_owner() {
    let cluster = Cluster::start().await;
    let client = connect(&cluster, Duration::from_secs(3)).await;
    let name = "manifests";
    let lock = client.lock(name).unwrap();
    // The client learns the slot's owner.
    lock.lock().await.unwrap().unlock().await.unwrap();
    let from = cluster.owner_of(naming::slot(name)).await;
    let to = *cluster
        .primaries()
        .await
        .iter()
        .find(|p| **p != from)
        .unwrap();
    cluster.migrate_slot(naming::slot(name), to).await;
    let moved_before = common::topology::error_count(from, "MOVED").await;
    let new_owner = node_client(to).await;
    let (scripts_before, reads_before) = (
        command_calls(&new_owner, "evalsha").await,
        command_calls(&new_owner, "hget").await,
    );

    let guard = lock.lock().await.expect("acquired on the new owner");

    assert!(common::topology::error_count(from, "MOVED").await > moved_before);
    assert_eq!(
        command_calls(&new_owner, "evalsha").await,
        scripts_before + 1,
        "the acquire ran once on the new owner"
    );
    assert_eq!(
        command_calls(&new_owner, "hget").await,
        reads_before,
        "no read to resolve an unknown outcome"
    );
    assert_eq!(guard.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_no_replica_confirms_is_undone_and_refused() {
    let cluster = Cluster::start().await;
    let name = "ledger";
    let primary = cluster.owner_of(naming::slot(name)).await;
    let replica = cluster.replica_of(primary).await;
    let mut strict = config(&cluster.url(), Duration::from_secs(2));
    strict.slaves_sync_timeout = Duration::from_millis(200);
    strict.retry_attempts = 2;
    let client = RedissonClient::connect(strict.clone()).await.unwrap();
    let mut lax_config = strict;
    lax_config.check_lock_synced_slaves = false;
    let lax = RedissonClient::connect(lax_config).await.unwrap();
    let raw = node_client(primary).await;

    // Healthy: the acquire is followed by a WAIT on the primary.
    let waits = command_calls(&raw, "wait").await;
    let guard = client.lock(name).unwrap().lock().await.unwrap();
    assert!(command_calls(&raw, "wait").await > waits);
    guard.unlock().await.unwrap();

    cluster.node(replica).freeze();
    let lock = client.lock(name).unwrap();
    let refused = lock.lock().await.unwrap_err();
    cluster.node(replica).thaw();
    match &refused {
        Error::ReplicasNotSynced {
            operation,
            acked,
            required,
            promotable,
            ..
        } => {
            assert_eq!(
                (*operation, *acked, *required, *promotable),
                ("acquire", 0, 1, 1)
            );
        }
        other => panic!("expected ReplicasNotSynced, got {other:?}"),
    }
    assert!(refused
        .to_string()
        .contains("reached 0 of the 1 replicas a failover could promote"));
    // Both attempts were undone: nothing is held on the primary.
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(client.held_locks(), 0);

    // With checkLockSyncedSlaves off the shortfall is only logged.
    cluster.node(replica).freeze();
    let taken = lax.lock(name).unwrap().lock().await;
    cluster.node(replica).thaw();
    let taken = taken.unwrap();
    assert!(lax
        .lock(name)
        .unwrap()
        .is_held_by(taken.owner())
        .await
        .unwrap());
    taken.unlock().await.unwrap();

    // Once the replica answers again, the strict client gets the lock.
    cluster.await_healthy().await;
    let guard = within("acquire after the replica recovers", lock.lock())
        .await
        .unwrap();
    guard.unlock().await.unwrap();
    client.shutdown().await;
    lax.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_made_while_a_wait_is_in_flight_share_the_next_one() {
    // A `WAIT` holds its connection until its timeout while a replica does
    // not answer, and everything sent after it waits behind it. Writes made
    // meanwhile, each its own moment (so each its own flush), must all go
    // with one `WAIT`, not wait one timeout each in turn.
    let cluster = Cluster::start().await;
    let names: Vec<String> = (0..5).map(|i| format!("{{queue}}:{i}")).collect();
    let primary = cluster.owner_of(naming::slot(&names[0])).await;
    let replica = cluster.replica_of(primary).await;
    // No renewal while the replica is frozen: only the acquires' WAITs count.
    let mut lax = config(&cluster.url(), Duration::from_secs(30));
    lax.slaves_sync_timeout = Duration::from_millis(1500);
    // Acquires short of the quorum are kept: one attempt each, one WAIT each
    // at most.
    lax.check_lock_synced_slaves = false;
    let client = RedissonClient::connect(lax).await.unwrap();
    // The connection learns the slot's owner.
    let warm = client.lock(&names[0]).unwrap();
    warm.lock().await.unwrap().unlock().await.unwrap();
    let raw = node_client(primary).await;
    let waits = command_calls(&raw, "wait").await;

    cluster.node(replica).freeze();
    let mut acquires = vec![];
    for name in &names {
        let lock = client.lock(name).unwrap();
        acquires.push(tokio::spawn(async move { lock.lock().await }));
        // Each write a moment after the previous one, well inside the first
        // WAIT's timeout.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut guards = vec![];
    for acquire in acquires {
        guards.push(within("acquire", acquire).await.unwrap().unwrap());
    }
    cluster.node(replica).thaw();
    assert_eq!(
        command_calls(&raw, "wait").await - waits,
        2,
        "one WAIT for the first write, one shared by the four made while it was in flight"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_goes_straight_to_its_slots_primary() {
    // No replicas: no WAIT either (as Redisson: nothing to wait for).
    let cluster = Cluster::start_with_replicas(0).await;
    let client = connect(&cluster, Duration::from_secs(1)).await;
    let holder = connect(&cluster, Duration::from_secs(1)).await;
    // The clients' one `WAIT 0 0` each at connect (is WAIT there at all?).
    let mut waits_at_connect = vec![];
    for node in &cluster.nodes {
        waits_at_connect.push(command_calls(&node_client(node.port).await, "wait").await);
    }
    assert_eq!(waits_at_connect.iter().sum::<u64>(), 2);
    let names = names_on_every_primary(&cluster).await;
    for name in &names {
        let lock = client.lock(name).unwrap();
        let outer = lock.lock().await.unwrap();
        let inner = outer.scope(lock.lock()).await.unwrap();
        inner.unlock().await.unwrap();
        // Contended: the other client waits for the unlock message.
        let other = holder.lock(name).unwrap();
        let waiting = tokio::spawn(async move { other.lock().await });
        outer.unlock().await.unwrap();
        within("waiter", waiting)
            .await
            .unwrap()
            .unwrap()
            .unlock()
            .await
            .unwrap();
        assert!(client.lock(name).unwrap().force_unlock().await.is_ok());
    }
    // Renewals too.
    let guards = futures::future::join_all(names.iter().map(|n| {
        let lock = client.lock(n).unwrap();
        async move { lock.lock().await.unwrap() }
    }))
    .await;
    let mut updates = client.watchdog_updates();
    within("a renewal cycle", async {
        while updates.borrow_and_update().last_cycle_locks < names.len() as u64 {
            updates.changed().await.unwrap();
        }
    })
    .await;
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    for (node, at_connect) in cluster.nodes.iter().zip(waits_at_connect) {
        assert_eq!(
            common::topology::error_count(node.port, "MOVED").await,
            0,
            "node {} redirected a command: routed by the wrong key",
            node.port
        );
        assert_eq!(
            command_calls(&node_client(node.port).await, "wait").await,
            at_connect,
            "a WAIT on a primary without replicas"
        );
    }
    client.shutdown().await;
    holder.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_keep_mutual_exclusion_when_a_primary_dies() {
    let mut cluster = Cluster::start().await;
    let clients = [
        connect(&cluster, Duration::from_secs(3)).await,
        connect(&cluster, Duration::from_secs(3)).await,
    ];
    let name = "stock";
    const TASKS: usize = 6;
    const SECTIONS: u32 = 12;
    let (mut progress, tasks) = common::contenders(&clients, name, TASKS, SECTIONS);
    within("first sections", progress.wait_for(|n| *n >= 20))
        .await
        .unwrap();
    let primary = cluster.owner_of(naming::slot(name)).await;
    let promoted = cluster.kill_primary(primary).await;
    for task in tasks {
        within("every contender finishes", task).await.unwrap();
    }
    assert_eq!(*progress.borrow(), TASKS as u32 * SECTIONS);
    // The lock now lives on the promoted replica, and it is free.
    let c = node_client(promoted).await;
    let n: i64 = c
        .custom(
            CustomCommand::new_static("EXISTS", ClusterHash::Random, false),
            vec![name],
        )
        .await
        .unwrap();
    assert_eq!(n, 0);
    for client in clients {
        client.shutdown().await;
    }
}

#[tokio::test]
async fn a_cluster_behind_one_address_renews_and_deletes_by_slot() {
    // One cluster node owning every slot, reached as a plain server: what a
    // cluster proxy looks like to the client. It refuses cross-slot scripts.
    let server = RedisServer::start_with(&["--cluster-enabled", "yes"]).await;
    on_node(server.port, "CLUSTER", vec!["ADDSLOTSRANGE", "0", "16383"]).await;
    until("cluster state ok", || async {
        let info = on_node(server.port, "CLUSTER", vec!["INFO"]).await;
        info.as_string()
            .unwrap_or_default()
            .contains("cluster_state:ok")
    })
    .await;
    let client = client(&server, Duration::from_secs(1)).await;
    // Names in two slots, renewed by one watchdog.
    let names = ["left", "right"];
    assert_ne!(naming::slot(names[0]), naming::slot(names[1]));
    let guards = futures::future::join_all(names.iter().map(|n| {
        let lock = client.lock(n).unwrap();
        async move { lock.lock().await.unwrap() }
    }))
    .await;
    let mut updates = client.watchdog_updates();
    within("three renewal cycles", updates.wait_for(|s| s.cycles >= 3))
        .await
        .unwrap();
    let stats = client.watchdog_stats();
    assert_eq!((stats.failures, stats.lost), (0, 0), "{stats:?}");
    assert_eq!(stats.last_cycle_scripts, 2, "one script per slot");
    assert!(guards.iter().all(|g| !g.is_lost()));
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    // Names whose channel would land in another slot are refused here.
    assert!(matches!(
        client.lock("a{"),
        Err(redisson_lock::Error::InvalidArgument(_))
    ));
    client.shutdown().await;
}

/// Some proxies and managed services refuse `WAIT`. That is found at
/// connect and refused with the setting to change, never downgraded
/// silently; with the check off, guards say nothing was checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_wait_is_refused_at_connect_unless_the_check_is_off() {
    use redisson_lock::SafetyLevel;

    let cluster = Cluster::start_with(0, &["--rename-command", "WAIT", ""]).await;
    let err = RedissonClient::connect(config(&cluster.url(), Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::Config(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("refuses WAIT") && text.contains("checkLockSyncedSlaves: false"),
        "{text}"
    );

    let mut unchecked = config(&cluster.url(), Duration::from_secs(1));
    unchecked.check_lock_synced_slaves = false;
    let client = RedissonClient::connect(unchecked).await.unwrap();
    let guard = client.lock("no-wait").unwrap().lock().await.unwrap();
    assert_eq!(guard.safety(), SafetyLevel::NotChecked);
    guard.unlock().await.unwrap();
    client.shutdown().await;
}

/// A node that lost its bus link to one replica flags it `fail?`: its own
/// opinion, which the election never looks at (the rest of the cluster
/// reaches the replica, and would promote it). A client whose view comes
/// from that node still counts the replica, so its writes wait for it:
/// they used to go without `WAIT`, reported confirmed by 0 of 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_nodes_lost_link_to_a_replica_does_not_drop_it() {
    let cluster = Cluster::start_bus_proxied(&[]).await;
    // A new client reads its first view from the primary with the lowest
    // port: the one whose link is cut.
    let primary = cluster.primaries().await[0];
    let replica = cluster.replica_of(primary).await;
    cluster.cut_bus_link(primary, replica).await;
    until("the primary flags its replica fail?", || async {
        cluster
            .flags(primary, replica)
            .await
            .iter()
            .any(|f| f == "fail?")
    })
    .await;
    let others: Vec<u16> = cluster
        .primaries()
        .await
        .into_iter()
        .filter(|p| *p != primary)
        .collect();
    for other in others {
        assert_eq!(
            cluster.flags(other, replica).await,
            ["slave"],
            "only one node lost it"
        );
    }
    let mut k = 0;
    let name = loop {
        let name = format!("one-link-{k}");
        if cluster.owner_of(naming::slot(&name)).await == primary {
            break name;
        }
        k += 1;
    };
    let client = connect(&cluster, Duration::from_secs(2)).await;
    let guard = client.lock(&name).unwrap().lock().await.unwrap();
    assert_eq!(
        guard.safety(),
        redisson_lock::SafetyLevel::Replicas {
            acked: 1,
            promotable: 1
        }
    );
    guard.unlock().await.unwrap();
    client.shutdown().await;
}

/// A field of `INFO replication` on node `port`.
async fn replication_field(port: u16, field: &str) -> Option<String> {
    let info = on_node(port, "INFO", vec!["replication"])
        .await
        .as_string()
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// Whether node `port` has a connection named like the crate's replica
/// probes.
async fn has_age_probe(port: u16) -> bool {
    on_node(port, "CLIENT", vec!["LIST"])
        .await
        .as_string()
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains(":replica-age"))
}

/// Locks `lock` until a write is confirmed by its shard's one replica
/// (refusals and writes confirmed without it are tried again).
async fn confirmed_by_the_replica(lock: &redisson_lock::RLock) -> redisson_lock::LockGuard {
    within("a lock the replica confirms", async {
        loop {
            match lock.lock().await {
                Ok(guard)
                    if guard.safety()
                        == (redisson_lock::SafetyLevel::Replicas {
                            acked: 1,
                            promotable: 1,
                        }) =>
                {
                    return guard
                }
                Ok(guard) => guard.unlock().await.map(drop).unwrap(),
                Err(Error::ReplicasNotSynced { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
}

/// A cluster whose shard of `name` has its one replica too old to be
/// promoted: its replication refused (an ACL switched off) past its own
/// validity limit, while its bus is fine. Checks on the way that writes are
/// refused while it may still be promoted, and confirmed without it once it
/// is too old. Returns the cluster, a client (`slavesSyncTimeout` 200 ms),
/// its lock of `name`, the primary and the replica.
async fn with_a_too_old_replica(
    name: &str,
) -> (Cluster, RedissonClient, redisson_lock::RLock, u16, u16) {
    let cluster = Cluster::start().await;
    let primary = cluster.owner_of(naming::slot(name)).await;
    let replica = cluster.replica_of(primary).await;
    // The replica's own limit: past the 1 s node timeout, 1 s (ping
    // period) + 1 s (node timeout x factor 1).
    on_node(
        replica,
        "CONFIG",
        vec!["SET", "cluster-replica-validity-factor", "1"],
    )
    .await;
    on_node(
        replica,
        "CONFIG",
        vec!["SET", "repl-ping-replica-period", "1"],
    )
    .await;
    let mut strict = config(&cluster.url(), Duration::from_secs(2));
    strict.slaves_sync_timeout = Duration::from_millis(200);
    let client = RedissonClient::connect(strict).await.unwrap();
    let lock = client.lock(name).unwrap();
    // Healthy first: the replica confirms a write (a 200 ms `WAIT` may
    // miss its first acknowledgement on a loaded machine: tried again).
    until("the replica's link up", || async {
        replication_field(replica, "master_link_status")
            .await
            .as_deref()
            == Some("up")
    })
    .await;
    confirmed_by_the_replica(&lock)
        .await
        .unlock()
        .await
        .unwrap();

    // It replicates as a user the primary can switch off.
    on_node(
        primary,
        "ACL",
        vec!["SETUSER", "replication", "on", ">secret", "~*", "+@all"],
    )
    .await;
    on_node(replica, "CONFIG", vec!["SET", "masteruser", "replication"]).await;
    on_node(replica, "CONFIG", vec!["SET", "masterauth", "secret"]).await;
    on_node(primary, "ACL", vec!["SETUSER", "replication", "off"]).await;
    on_node(replica, "CLIENT", vec!["KILL", "TYPE", "master"]).await;
    // While the cluster would still promote it, writes are refused.
    let refused = within("a write refused", lock.lock()).await;
    assert!(
        matches!(refused, Err(Error::ReplicasNotSynced { .. })),
        "{refused:?}"
    );
    // 3 s past the node timeout, and a second for INFO's whole seconds.
    until(
        "the replica's link down for longer than its limit",
        || async {
            replication_field(replica, "master_link_status")
                .await
                .as_deref()
                == Some("down")
                && replication_field(replica, "master_link_down_since_seconds")
                    .await
                    .and_then(|s| s.parse::<i64>().ok())
                    .is_some_and(|s| s >= 5)
        },
    )
    .await;
    // The cluster still lists it, unflagged: only its age tells.
    let flags = on_node(primary, "CLUSTER", vec!["NODES"])
        .await
        .as_string()
        .unwrap_or_default();
    let id = cluster.node_id(replica).await;
    let line = flags
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap()
        .to_string();
    assert_eq!(line.split_whitespace().nth(2), Some("slave"), "{line}");

    // A write that falls short has the replica asked its age again (at
    // most every 5 s); refusals until then are the check doing its job.
    let mut refused = 0;
    let guard = within("a lock once the replica is too old", async {
        loop {
            match lock.lock().await {
                Ok(guard) => return guard,
                Err(Error::ReplicasNotSynced { .. }) => refused += 1,
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
    tracing::info!(refused, "refusals before the replica was judged too old");
    assert!(has_age_probe(replica).await, "the replica is asked again");
    guard.unlock().await.unwrap();
    (cluster, client, lock, primary, replica)
}

/// Lets the too-old replica replicate again (see `with_a_too_old_replica`)
/// and waits until a lock is confirmed by it.
async fn link_back_and_confirmed(primary: u16, replica: u16, lock: &redisson_lock::RLock) {
    on_node(primary, "ACL", vec!["SETUSER", "replication", "on"]).await;
    until("the replica's link up", || async {
        replication_field(replica, "master_link_status")
            .await
            .as_deref()
            == Some("up")
    })
    .await;
    confirmed_by_the_replica(lock).await.unlock().await.unwrap();
}

/// Issue 37 item 6: a replica whose replication is broken (its `AUTH`
/// refused) while its bus is fine is never flagged by the cluster, and the
/// cluster stops promoting it once its data is older than its validity
/// limit. Its shard's writes stop waiting for it then, and wait for it
/// again once its link is back. Before, the shard refused every lock for
/// as long as the link stayed broken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_too_old_to_be_promoted_holds_no_write_up() {
    let (_cluster, client, lock, primary, replica) = with_a_too_old_replica("archive").await;

    // Its link back (the sync brings it every write it missed), it counts
    // again, and its connection is closed.
    link_back_and_confirmed(primary, replica, &lock).await;
    until("the replica's connection closed", || async {
        !has_age_probe(replica).await
    })
    .await;
    client.shutdown().await;
}

/// Issue 49 item 4: a "too old" verdict is asked again on a new connection
/// when asking it fails. The probe's connection has no reconnect policy;
/// a failing one used to be kept and asked again forever, so a replica
/// whose probe connection was killed (or that restarted on its address)
/// stayed "too old" after its link was back, and its shard's writes went
/// on with no `WAIT` while a failover could promote it without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_old_verdict_is_asked_again_on_a_new_connection() {
    let (_cluster, client, lock, primary, replica) = with_a_too_old_replica("ledger-old").await;
    // The probe's connection killed on the replica's side.
    let clients = on_node(replica, "CLIENT", vec!["LIST"])
        .await
        .as_string()
        .unwrap_or_default();
    let probe = clients
        .lines()
        .find(|l| l.contains(":replica-age"))
        .and_then(|l| {
            l.split_whitespace()
                .next()?
                .strip_prefix("id=")
                .map(str::to_string)
        })
        .expect("the replica's probe connection");
    on_node(replica, "CLIENT", vec!["KILL", "ID", &probe]).await;
    // Its link back, it counts again: the shard's writes wait for it.
    link_back_and_confirmed(primary, replica, &lock).await;
    client.shutdown().await;
}

/// Issue 37 item 7 on a cluster: a replica flagged `nofailover` (a DR or
/// analytics copy) that stops acknowledging refuses no write that the
/// shard's promotable replica confirmed. Before, `WAIT` asked for both and
/// the acknowledgements beyond the non-promotable one were counted, so a
/// stopped one refused every lock of its shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_nofailover_replica_refuses_no_write() {
    let cluster = Cluster::start_with_replicas(2).await;
    let name = "dr-ledger";
    let primary = cluster.owner_of(naming::slot(name)).await;
    let replicas = cluster.replicas_of(primary).await;
    assert_eq!(replicas.len(), 2, "two replicas of {primary}");
    let (kept, dr) = (replicas[0], replicas[1]);
    on_node(
        dr,
        "CONFIG",
        vec!["SET", "cluster-replica-no-failover", "yes"],
    )
    .await;
    let dr_id = cluster.node_id(dr).await;
    until("every primary sees the replica nofailover", || async {
        for p in cluster.primaries().await {
            let nodes = on_node(p, "CLUSTER", vec!["NODES"])
                .await
                .as_string()
                .unwrap_or_default();
            let flagged = nodes
                .lines()
                .find(|l| l.starts_with(&dr_id))
                .and_then(|l| l.split_whitespace().nth(2))
                .is_some_and(|f| f.split(',').any(|f| f == "nofailover"));
            if !flagged {
                return false;
            }
        }
        true
    })
    .await;
    let client = connect(&cluster, Duration::from_secs(2)).await;
    let lock = client.lock(name).unwrap();
    let guard = lock.lock().await.unwrap();
    assert_eq!(
        guard.safety(),
        redisson_lock::SafetyLevel::Replicas {
            acked: 1,
            promotable: 1
        }
    );
    guard.unlock().await.unwrap();

    // The DR replica stops: the promotable one still confirms every write.
    cluster.node(dr).freeze();
    let taken = within("a lock while the DR replica is stopped", lock.lock()).await;
    cluster.node(dr).thaw();
    let guard = taken.expect("a write the promotable replica confirmed");
    assert_eq!(
        guard.safety(),
        redisson_lock::SafetyLevel::Replicas {
            acked: 1,
            promotable: 1
        },
        "confirmed by {kept}, the replica a failover could promote"
    );
    guard.unlock().await.unwrap();
    client.shutdown().await;
}

/// A shutdown's releases leave unlock latches that its latch sweeper
/// deletes, one `DEL` per slot, on the connection the shutdown then closes:
/// it waits for them (the soak of issue 38 left 2 keys on a cluster 30 s
/// after its client shut down).
#[tokio::test]
async fn shutdown_leaves_no_unlock_latch_behind_on_a_cluster() {
    let cluster = Cluster::start().await;
    let client = connect(&cluster, Duration::from_secs(30)).await;
    let mut guards = vec![];
    for i in 0..50 {
        let lock = client.lock(&format!("held:{i}")).unwrap();
        guards.push(lock.lock().await.unwrap());
    }
    client.shutdown().await;
    for primary in cluster.primaries().await {
        let left: Vec<String> = node_client(primary)
            .await
            .custom(
                CustomCommand::new_static("KEYS", ClusterHash::Random, false),
                vec!["*"],
            )
            .await
            .unwrap();
        assert!(left.is_empty(), "left on {primary}: {left:?}");
    }
    assert!(guards.iter().all(|g| g.is_lost()));
}
