//! The audit on a Sentinel deployment whose nodes differ in what they run
//! on: a replica whose clock runs ahead of its primary's (libfaketime), and
//! nodes with and without persistence. One test in its own binary: it
//! chooses the server binary for every node (`REDIS_SERVER`), which would
//! change the other tests' servers beside it.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::topology::{until, Sentinel};
use common::*;
use redisson_lock::audit::{AuditReport, Fact, Finding, Severity};
use redisson_lock::RedissonClient;

fn of<'a>(report: &'a AuditReport, rule: &'a str, port: u16) -> &'a Finding {
    report
        .rule(rule)
        .find(|f| f.target.ends_with(&format!(":{port}")))
        .unwrap_or_else(|| panic!("no {rule} finding for :{port}: {report:#?}"))
}

#[tokio::test]
async fn a_replica_ahead_of_its_primary_and_nodes_without_persistence_are_flagged() {
    let binary = clock_shiftable_server();
    if std::env::var("REDIS_SERVER").ok().as_deref() != Some(binary.as_str()) {
        // Another server than the run's: its version is not the one named.
        std::env::remove_var("REDIS_SERVER_VERSION");
        std::env::set_var("REDIS_SERVER", &binary);
    }
    // tests/common's nodes run without persistence.
    let deployment = Sentinel::start().await;
    let primary = deployment.primary_port().await;
    // A third replica, with AOF, its clock 40 s ahead of everyone's.
    let faketime = libfaketime();
    let ahead = RedisServer::start_with_env(
        &[
            "--replicaof",
            "127.0.0.1",
            &primary.to_string(),
            "--appendonly",
            "yes",
        ],
        &[
            ("LD_PRELOAD", faketime.as_str()),
            ("FAKETIME", "+40s"),
            ("DONT_FAKE_MONOTONIC", "1"),
        ],
    )
    .await;
    let time = common::topology::on_node(ahead.port, "TIME", vec![]).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let shifted: u64 = match &time {
        fred::types::Value::Array(parts) => parts[0].as_u64().unwrap(),
        other => panic!("TIME: {other:?}"),
    };
    assert!(shifted >= now + 39, "libfaketime moved the replica's clock");
    // Known and linked: a sentinel lists a replica it has just found as
    // `disconnected` until its link is up, and the audit (rightly) judges
    // no clock of a replica marked down (1 failure in CI).
    until(
        "every sentinel knows and reaches the third replica",
        || async {
            let mut all = true;
            for port in deployment.sentinels.iter().map(|s| s.port) {
                all &= common::topology::replica_flags(port)
                    .await
                    .iter()
                    .any(|(p, flags)| *p == ahead.port && flags == "slave");
            }
            all
        },
    )
    .await;

    // Against a 30 s lease: 40 s ahead outlasts every TTL (fail).
    let client =
        RedissonClient::connect(common::config(&deployment.url(), Duration::from_secs(30)))
            .await
            .unwrap();
    let report = within("audit", client.audit()).await.unwrap();
    let f = of(&report, "clock", ahead.port);
    assert_eq!(f.severity, Severity::Fail, "{f:#?}");
    let Fact::Number(ahead_ms) = f.facts["ahead_ms"] else {
        panic!("{f:#?}")
    };
    assert!((39_000..=41_000).contains(&ahead_ms), "{f:#?}");
    assert!(f.fix.contains("synchronize the clocks"), "{f:#?}");
    // The others' clocks are the host's.
    let others: Vec<_> = report
        .rule("clock")
        .filter(|f| !f.target.ends_with(&format!(":{}", ahead.port)))
        .collect();
    assert_eq!(others.len(), 2, "{report:#?}");
    assert!(
        others.iter().all(|f| f.severity == Severity::Ok),
        "{others:#?}"
    );
    // Persistence on every node: the AOF replica is fine; the others, left
    // without, come back empty if restarted before a failover.
    for node in deployment.data_nodes() {
        let f = of(&report, "persistence", node.port);
        assert_eq!(f.severity, Severity::Warn, "{f:#?}");
        assert!(
            f.why
                .contains("comes back empty, and its replicas copy that"),
            "{f:#?}"
        );
    }
    assert_eq!(
        of(&report, "persistence", ahead.port).severity,
        Severity::Ok
    );
    client.shutdown().await;

    // Against a 120 s lease, 40 s ahead shortens every lock (warn).
    let client =
        RedissonClient::connect(common::config(&deployment.url(), Duration::from_secs(120)))
            .await
            .unwrap();
    let report = within("audit", client.audit()).await.unwrap();
    let f = of(&report, "clock", ahead.port);
    assert_eq!(f.severity, Severity::Warn, "{f:#?}");
    assert!(f.why.contains("sooner"), "{f:#?}");
    client.shutdown().await;
}
