//! `client.audit()` and `audit::audit` on real clusters (3 primaries with a
//! replica each): clean as started, then a primary whose replica died, and
//! a cluster without WAIT, which no client with the default settings
//! connects to.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::topology::{on_node, until, Cluster};
use common::*;
use redisson_lock::audit::{AuditReport, Severity};
use redisson_lock::{Error, RedissonClient};

const WATCHDOG: Duration = Duration::from_secs(30);

/// What the audit flags, but persistence: tests/common's nodes run without
/// it, which the audit rightly warns of on every node
/// (tests/audit_clock.rs).
fn flagged(report: &AuditReport) -> Vec<(&str, Severity)> {
    let mut out: Vec<_> = report
        .flagged()
        .filter(|f| f.rule != "persistence")
        .map(|f| (f.rule.as_str(), f.severity))
        .collect();
    out.sort();
    out
}

fn count(report: &AuditReport, rule: &str) -> usize {
    report.rule(rule).count()
}

#[tokio::test]
async fn a_cluster_primary_without_a_replica_fails() {
    let mut cluster = Cluster::start().await;
    let client = RedissonClient::connect(common::config(&cluster.url(), WATCHDOG))
        .await
        .unwrap();
    let report = within("audit", client.audit()).await.unwrap();
    assert_eq!(flagged(&report), [], "{report:#?}");
    for (rule, n) in [
        ("eviction-policy", 6),
        ("replicas", 3),
        ("replica-quorum", 1),
        ("min-replicas", 6),
        ("wait-command", 3),
        ("replica-priority", 3),
        ("replication-lag", 3),
        ("cluster-replica-validity", 3),
        ("cluster-node-timeout", 3),
        ("cluster-full-coverage", 1),
        ("sharded-pubsub", 1),
        ("permissions", 3),
        ("latency", 3),
        ("persistence", 6),
        ("clock", 3),
    ] {
        assert_eq!(count(&report, rule), n, "{rule}: {report:#?}");
    }

    // cluster-node-timeout 1000 (tests/common): a failover starts 1.5 s
    // after a primary dies at the earliest; a 2 s lease leaves TTLs down to
    // 1.33 s, so the locks renewed longest ago would be lost.
    let short = common::config(&cluster.url(), Duration::from_secs(2));
    let report = within("audit", redisson_lock::audit::audit(&short))
        .await
        .unwrap();
    let slow: Vec<_> = report.rule("cluster-node-timeout").collect();
    assert_eq!(slow.len(), 3, "{report:#?}");
    for f in slow {
        assert_eq!(f.severity, Severity::Warn, "{f:#?}");
        assert!(f.why.contains("some are lost"), "{}", f.why);
        assert!(
            f.evidence.starts_with("cluster-node-timeout 1000"),
            "{}",
            f.evidence
        );
    }

    let primary = cluster.primaries().await[0];
    let replica = cluster.replica_of(primary).await;
    let target = format!("127.0.0.1:{primary}");

    // Its only replica may never fail over: nothing takes over the primary.
    let no_failover = |value: &'static str| {
        on_node(
            replica,
            "CONFIG",
            vec!["SET", "cluster-replica-no-failover", value],
        )
    };
    no_failover("yes").await;
    let report = within("audit", client.audit()).await.unwrap();
    assert_eq!(
        flagged(&report),
        [("replica-priority", Severity::Fail)],
        "{report:#?}"
    );
    let f = report
        .rule("replica-priority")
        .find(|f| f.severity == Severity::Fail)
        .unwrap();
    assert_eq!(f.target, target);
    no_failover("no").await;

    let replica_id = cluster.node_id(replica).await;
    cluster.node_mut(replica).kill().await;
    let replica_failed = |report: &AuditReport| {
        report
            .rule("replicas")
            .any(|f| f.target == target && f.severity == Severity::Fail)
    };
    // Every live node marks it failing (`fail`, not one node's `fail?`),
    // so whichever node the audit asks says so.
    let live: Vec<u16> = cluster
        .nodes
        .iter()
        .map(|n| n.port)
        .filter(|p| *p != replica)
        .collect();
    let dead = format!("127.0.0.1:{replica}@");
    until("every node marks the replica failing", || async {
        for port in &live {
            let nodes = on_node(*port, "CLUSTER", vec!["NODES"]).await;
            let nodes = nodes.as_string().unwrap_or_default();
            let marked = nodes.lines().any(|l| {
                let parts: Vec<&str> = l.split_whitespace().collect();
                parts.len() > 2
                    && parts[1].starts_with(&dead)
                    && parts[2].split(',').any(|f| f == "fail")
            });
            if !marked {
                return false;
            }
        }
        true
    })
    .await;
    let report = within("audit", client.audit()).await.unwrap();
    assert!(replica_failed(&report), "{report:#?}");
    assert_eq!(
        flagged(&report),
        [
            ("replicas", Severity::Fail),
            ("replicas-down", Severity::Warn)
        ],
        "{report:#?}"
    );
    let f = report
        .rule("replicas")
        .find(|f| f.target == target)
        .unwrap();
    assert!(
        f.evidence.starts_with("0 replica(s) known, 1 marked down"),
        "{}",
        f.evidence
    );
    // Named, with the command that forgets it if it is gone for good
    // (issue 49 item 10): until then every hold of its shard is at risk.
    let f = report
        .rule("replicas-down")
        .find(|f| f.target == target)
        .unwrap();
    assert_eq!(
        f.evidence,
        format!("marked down by the deployment: 127.0.0.1:{replica}")
    );
    assert!(
        f.fix.contains(&format!("CLUSTER FORGET {replica_id}")),
        "{}",
        f.fix
    );
    client.shutdown().await;
}

#[tokio::test]
async fn a_cluster_without_wait_is_named_though_no_client_connects() {
    let cluster = Cluster::start_with(1, &["--rename-command", "WAIT", ""]).await;
    let config = common::config(&cluster.url(), WATCHDOG);
    let err = RedissonClient::connect(config.clone()).await.unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    let report = within("audit", redisson_lock::audit::audit(&config))
        .await
        .unwrap();
    assert_eq!(
        flagged(&report),
        [("wait-command", Severity::Fail); 3],
        "{report:#?}"
    );
    let f = report.rule("wait-command").next().unwrap();
    assert!(f.why.contains("refuses to connect"), "{}", f.why);
    assert!(report.has_failures());
}
