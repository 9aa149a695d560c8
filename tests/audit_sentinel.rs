//! `client.audit()` on a real Sentinel deployment (1 primary, 2 replicas,
//! 3 sentinels): clean as started, then a quorum of 1 in 3, then a sentinel
//! that hangs.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::topology::{Sentinel, SERVICE};
use common::*;
use redisson_lock::audit::{AuditReport, Severity};
use redisson_lock::RedissonClient;

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
async fn a_sentinel_quorum_of_one_in_three_fails() {
    let deployment = Sentinel::start().await;
    let client = RedissonClient::connect(common::config(&deployment.url(), WATCHDOG))
        .await
        .unwrap();
    let report = within("audit", client.audit()).await.unwrap();
    assert_eq!(flagged(&report), [], "{report:#?}");
    // Every primary's and every sentinel's rules were looked at.
    for (rule, n) in [
        ("eviction-policy", 3),
        ("replicas", 1),
        ("replica-quorum", 1),
        ("min-replicas", 3),
        ("wait-command", 1),
        ("replica-priority", 1),
        ("replication-lag", 1),
        ("sentinels-answering", 1),
        ("sentinel-quorum", 3),
        ("sentinel-down-after", 3),
        ("sentinel-agreement", 1),
        ("permissions", 4),
        ("latency", 1),
    ] {
        assert_eq!(count(&report, rule), n, "{rule}: {report:#?}");
    }
    assert_eq!(count(&report, "persistence"), 3, "every data node's");
    assert_eq!(count(&report, "clock"), 2, "every replica's");
    let replicas = report.rule("replicas").next().unwrap();
    assert!(
        replicas.evidence.starts_with("2 replica(s) known"),
        "{}",
        replicas.evidence
    );

    deployment
        .on_sentinels(&["SET", SERVICE, "quorum", "1"])
        .await;
    let report = within("audit", client.audit()).await.unwrap();
    assert_eq!(
        flagged(&report),
        [("sentinel-quorum", Severity::Fail); 3],
        "{report:#?}"
    );
    let f = report.rule("sentinel-quorum").next().unwrap();
    assert_eq!(f.evidence, "quorum 1 of 3 sentinel(s), majority 2");
    assert_eq!(f.fix, "SENTINEL SET mymaster quorum 2 on every sentinel");
    client.shutdown().await;
}

/// Issue 49 item 10: a replica the sentinels mark down (`s_down`) is
/// named, with the command that forgets it if it is gone for good: while
/// it is listed, every lock of the primary is at risk. Once the sentinels
/// are reset (one at a time) and find the live replica again, the finding
/// is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_marked_down_is_named_with_the_command_that_forgets_it() {
    let mut deployment = Sentinel::start().await;
    let client = RedissonClient::connect(common::config(&deployment.url(), WATCHDOG))
        .await
        .unwrap();
    let gone = deployment.replicas[1].port;
    deployment.replicas[1].kill().await;
    deployment.await_replica_down(gone, true).await;
    let report = within("audit", client.audit()).await.unwrap();
    let f = report.rule("replicas-down").next().unwrap();
    assert_eq!(f.severity, Severity::Warn, "{f:#?}");
    assert_eq!(
        f.evidence,
        format!("marked down by the deployment: 127.0.0.1:{gone}")
    );
    assert!(f.fix.contains("SENTINEL RESET mymaster"), "{}", f.fix);
    // A hold taken while it is listed is at risk (once the client's view
    // has polled the sentinels that flag it).
    common::topology::until(
        "a hold taken while the replica is listed down is at risk",
        || async {
            let guard = client.lock("while-listed").unwrap().lock().await.unwrap();
            let at_risk = guard.is_at_risk();
            guard.unlock().await.unwrap();
            at_risk
        },
    )
    .await;

    for i in 0..deployment.sentinels.len() {
        deployment.on_sentinel(i, &["RESET", SERVICE]).await;
    }
    let live = deployment.replicas[0].port;
    common::topology::until("the sentinels list the live replica only", || async {
        let report = client.audit().await.unwrap();
        report
            .rule("replicas-down")
            .all(|f| f.severity == Severity::Ok)
            && report
                .rule("replicas")
                .any(|f| f.evidence.starts_with("1 replica(s) known"))
    })
    .await;
    let _ = live;
    client.shutdown().await;
}

/// One sentinel address (a Kubernetes Service in front of three): the
/// client finds the others through it (`SENTINEL SENTINELS`), and so does
/// the audit. It judged the one it was given alone: "fewer than a
/// majority answer", a failure, on a healthy deployment.
#[tokio::test]
async fn one_sentinel_address_is_audited_with_the_sentinels_it_names() {
    let deployment = Sentinel::start().await;
    let config = common::config(&deployment.url_of_first(), WATCHDOG);
    let report = within("audit", redisson_lock::audit::audit(&config))
        .await
        .unwrap();
    assert_eq!(flagged(&report), [], "{report:#?}");
    let f = report.rule("sentinels-answering").next().unwrap();
    assert_eq!(
        f.evidence,
        "3 of 3 sentinel(s) answered (1 in the address, 2 named by them); they know 3"
    );
    // Every sentinel's own settings are judged.
    assert_eq!(count(&report, "sentinel-quorum"), 3, "{report:#?}");
    assert_eq!(count(&report, "sentinel-down-after"), 3, "{report:#?}");
    assert_eq!(count(&report, "permissions"), 4, "{report:#?}");
}

#[tokio::test]
async fn a_hung_sentinel_is_a_finding_not_a_hang() {
    let deployment = Sentinel::start().await;
    let config = common::config(&deployment.url(), WATCHDOG);
    deployment.sentinels[2].freeze();
    // The audit's own connections: each call bounded by the 1 s timeout.
    let report = within("audit", redisson_lock::audit::audit(&config)).await;
    deployment.sentinels[2].thaw();
    let report = report.unwrap();
    assert_eq!(
        flagged(&report),
        [("sentinels-answering", Severity::Warn)],
        "{report:#?}"
    );
    let f = report.rule("sentinels-answering").next().unwrap();
    let silent = format!("127.0.0.1:{}", deployment.sentinels[2].port);
    assert!(
        f.evidence
            .starts_with("2 of 3 sentinel(s) answered (3 in the address, 0 named by them)"),
        "{}",
        f.evidence
    );
    assert!(f.evidence.contains(&silent), "{}", f.evidence);
    assert_eq!(count(&report, "sentinel-quorum"), 2);
}

/// `min-replicas-to-write` above the replicas attached refuses every write,
/// unless `min-replicas-max-lag` is 0, which turns the limit off in Redis:
/// the audit judges it as Redis does, and the lock works then.
#[tokio::test]
async fn min_replicas_is_off_when_its_max_lag_is_zero() {
    let deployment = Sentinel::start().await;
    let client = RedissonClient::connect(common::config(&deployment.url(), WATCHDOG))
        .await
        .unwrap();
    let primary = deployment.primary.port;
    let set = |name: &'static str, value: &'static str| {
        common::topology::on_node(primary, "CONFIG", vec!["SET", name, value])
    };
    set("min-replicas-max-lag", "0").await;
    set("min-replicas-to-write", "5").await;
    let report = within("audit", client.audit()).await.unwrap();
    assert_eq!(flagged(&report), [], "{report:#?}");
    let guard = client
        .lock("min-replicas-off")
        .unwrap()
        .lock()
        .await
        .unwrap();
    guard.unlock().await.unwrap();
    // With a lag, the limit is on: 5 of 2 replicas refuses every write,
    // lock scripts included since Redis 7 (Redis 6 lets scripts through).
    set("min-replicas-max-lag", "10").await;
    let report = within("audit", client.audit()).await.unwrap();
    let taken = client.lock("min-replicas-on").unwrap().try_lock().await;
    if common::server_major() < 7 {
        assert_eq!(
            flagged(&report),
            [("min-replicas", Severity::Warn)],
            "{report:#?}"
        );
        assert!(matches!(&taken, Ok(Some(_))), "{taken:?}");
    } else {
        assert_eq!(
            flagged(&report),
            [("min-replicas", Severity::Fail)],
            "{report:#?}"
        );
        assert!(
            matches!(&taken, Err(e) if e.code() == Some("NOREPLICAS")),
            "{taken:?}"
        );
    }
    drop(taken);
    set("min-replicas-to-write", "0").await;
    client.shutdown().await;
}

/// `down-after-milliseconds` against the shortest TTL a watchdog lock has
/// when the primary dies (2/3 of the lease, just before a renewal), and
/// against the fleet's lease where other clients' holds show a shorter one.
#[tokio::test]
async fn down_after_is_judged_against_the_shortest_ttl_and_the_fleet_s_lease() {
    let deployment = Sentinel::start().await;
    for sentinel in &deployment.sentinels {
        common::topology::on_node(
            sentinel.port,
            "SENTINEL",
            vec![
                "SET",
                common::topology::SERVICE,
                "down-after-milliseconds",
                "20000",
            ],
        )
        .await;
    }
    let judged = |lease_s: u64| {
        let config = common::config(&deployment.url(), Duration::from_secs(lease_s));
        async move {
            let report = within("audit", redisson_lock::audit::audit(&config))
                .await
                .unwrap();
            let found: Vec<_> = report.rule("sentinel-down-after").cloned().collect();
            assert_eq!(found.len(), 3, "{report:#?}");
            (found[0].clone(), report)
        }
    };
    // 20 s against a 60 s lease (TTLs down to 40 s): replaced in time.
    let (f, _) = judged(60).await;
    assert_eq!(f.severity, Severity::Ok, "{f:#?}");
    // Against 25 s (TTLs down to 16.7 s): the locks renewed longest ago are lost.
    let (f, _) = judged(25).await;
    assert_eq!(f.severity, Severity::Warn, "{f:#?}");
    assert!(f.why.contains("some are lost"), "{}", f.why);
    assert_eq!(
        f.facts["shortest_ttl_ms"],
        redisson_lock::audit::Fact::Number(16_666)
    );
    // Against 18 s: every one.
    let (f, _) = judged(18).await;
    assert_eq!(f.severity, Severity::Warn, "{f:#?}");
    assert!(f.why.contains("all are lost"), "{}", f.why);

    // Another client holds a lock renewed to 25 s: on a 60 s lease this
    // client would be replaced in time, that client's locks would not.
    let primary = deployment.primary.port;
    let holder = "7f3c467f-0ca4-4344-a63d-5fab355a13f6:1";
    common::topology::on_node(primary, "HSET", vec!["foreign-lock", holder, "1"]).await;
    common::topology::on_node(primary, "PEXPIRE", vec!["foreign-lock", "25000"]).await;
    let (f, report) = judged(60).await;
    assert_eq!(f.severity, Severity::Warn, "{f:#?}");
    assert!(
        f.evidence.contains("the fleet's shortest lease"),
        "{}",
        f.evidence
    );
    assert_eq!(
        report.rule("java-watchdog").next().unwrap().severity,
        Severity::Warn,
        "{report:#?}"
    );
}

/// A replica runs on its own settings once promoted: its eviction policy
/// (it ignores `maxmemory` while it replicates) and its `min-replicas`
/// (against the replicas it would have then) are judged too.
#[tokio::test]
async fn a_replica_is_judged_on_its_own_settings_once_promoted() {
    let deployment = Sentinel::start().await;
    let evicting = deployment.replicas[0].port;
    for (name, value) in [("maxmemory", "100mb"), ("maxmemory-policy", "allkeys-lru")] {
        common::topology::on_node(evicting, "CONFIG", vec!["SET", name, value]).await;
    }
    // Promoted, it would have 1 replica, and want 2.
    let demanding = deployment.replicas[1].port;
    for (name, value) in [
        ("min-replicas-to-write", "2"),
        ("min-replicas-max-lag", "10"),
    ] {
        common::topology::on_node(demanding, "CONFIG", vec!["SET", name, value]).await;
    }
    let config = common::config(&deployment.url(), WATCHDOG);
    let report = within("audit", redisson_lock::audit::audit(&config))
        .await
        .unwrap();
    let expected = if common::server_major() < 7 {
        // Redis 6 lets scripts through min-replicas: a warning.
        [
            ("eviction-policy", Severity::Fail),
            ("min-replicas", Severity::Warn),
        ]
    } else {
        [
            ("eviction-policy", Severity::Fail),
            ("min-replicas", Severity::Fail),
        ]
    };
    assert_eq!(flagged(&report), expected, "{report:#?}");
    let f = report
        .rule("eviction-policy")
        .find(|f| f.severity == Severity::Fail)
        .unwrap();
    assert_eq!(f.target, format!("127.0.0.1:{evicting}"));
    assert!(
        f.why
            .starts_with("a replica runs on its own policy once promoted"),
        "{}",
        f.why
    );
    let f = report
        .rule("min-replicas")
        .find(|f| f.severity != Severity::Ok)
        .unwrap();
    assert_eq!(f.target, format!("127.0.0.1:{demanding}"));
}

#[test]
fn the_worst_severity_is_the_greatest() {
    let worst = [
        Severity::Unknown,
        Severity::Fail,
        Severity::Warn,
        Severity::Ok,
    ]
    .into_iter()
    .max();
    assert_eq!(worst, Some(Severity::Fail));
    assert!(Severity::Unknown > Severity::Warn);
}
