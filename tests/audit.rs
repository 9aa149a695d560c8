//! `client.audit()` and `redisson_lock::audit::audit` on single servers
//! started by the test, one misconfiguration each: each is named with the
//! right severity, and nothing else is flagged.
//!
//! The clean baseline is a server with `appendonly yes`: the test servers of
//! tests/common run without persistence (a restart loses every lock), which
//! the audit rightly fails (`a_server_without_persistence_fails_only_persistence`).

use redisson_lock_testkit as common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::java::JavaPeer;
use common::topology::until;
use common::*;
use fred::prelude::*;
use parking_lot::Mutex;
use redisson_lock::audit::{AuditOptions, AuditReport, Fact, Finding, Severity};
use redisson_lock::RedissonClient;

const WATCHDOG: Duration = Duration::from_secs(30);

/// Every finding that is not ok, as (rule, severity), sorted.
fn flagged(report: &AuditReport) -> Vec<(&str, Severity)> {
    let mut out: Vec<_> = report
        .flagged()
        .map(|f| (f.rule.as_str(), f.severity))
        .collect();
    out.sort();
    out
}

fn only(report: &AuditReport, rule: &str) -> Finding {
    let mut found = report.rule(rule);
    let f = found
        .next()
        .unwrap_or_else(|| panic!("no {rule} finding: {report:#?}"))
        .clone();
    assert!(found.next().is_none(), "two {rule} findings: {report:#?}");
    f
}

fn number(f: &Finding, fact: &str) -> u64 {
    match f.facts.get(fact) {
        Some(Fact::Number(n)) => *n,
        other => panic!("{}: fact {fact} is {other:?}", f.rule),
    }
}

/// The rules a single server is audited on.
const SINGLE_RULES: [&str; 9] = [
    "address",
    "eviction-policy",
    "memory-usage",
    "persistence",
    "wait-command",
    "permissions",
    "java-watchdog",
    "redisson-fields",
    "latency",
];

fn rules(report: &AuditReport) -> Vec<&str> {
    report.findings.iter().map(|f| f.rule.as_str()).collect()
}

async fn audited(server: &RedisServer) -> AuditReport {
    let client = client(server, WATCHDOG).await;
    let report = within("audit", client.audit()).await.unwrap();
    client.shutdown().await;
    report
}

#[tokio::test]
async fn a_clean_server_has_every_finding_ok() {
    let server = RedisServer::start_with(&["--appendonly", "yes"]).await;
    let report = audited(&server).await;
    assert_eq!(flagged(&report), [], "{report:#?}");
    assert_eq!(rules(&report), SINGLE_RULES);
    assert!(!report.has_failures());
    assert_eq!(report.summary.ok, 9);
    assert_eq!(report.watchdog_ms, 30_000);
    // The same from settings alone, without a client.
    let config = common::config(&server.url(), WATCHDOG);
    let standalone = redisson_lock::audit::audit(&config).await.unwrap();
    assert_eq!(flagged(&standalone), []);
    assert_eq!(rules(&standalone), SINGLE_RULES);
    // JSON: severities as words, facts as typed numbers.
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["deployment"], "single");
    assert_eq!(json["summary"]["fail"], 0);
    let eviction = &json["findings"][1];
    assert_eq!(eviction["rule"], "eviction-policy");
    assert_eq!(eviction["severity"], "ok");
    assert_eq!(eviction["facts"]["maxmemory_bytes"], 0);
    assert_eq!(eviction["facts"]["maxmemory_policy"], "noeviction");
}

#[tokio::test]
async fn a_server_without_persistence_fails_only_persistence() {
    // tests/common's servers: --save "" --appendonly no.
    let server = RedisServer::start().await;
    let report = audited(&server).await;
    assert_eq!(
        flagged(&report),
        [("persistence", Severity::Fail)],
        "{report:#?}"
    );
    let f = only(&report, "persistence");
    assert_eq!(f.evidence, "appendonly no, no RDB save points");
    // What the lost signal covers: a holder hears at its next renewal.
    assert_eq!(number(&f, "renewal_ms"), 10_000);
    assert!(f.why.contains("up to 10 s"), "{}", f.why);
    assert!(report.has_failures());

    // RDB snapshots only: what changed since the last one is lost.
    // (Set at run time: Redis 6.0 keeps the test servers' `--save ""`.)
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let _: Value = raw
        .custom(
            fred::types::CustomCommand::new_static(
                "CONFIG",
                fred::types::ClusterHash::Random,
                false,
            ),
            vec!["SET", "save", "3600 1"],
        )
        .await
        .unwrap();
    let report = audited(&server).await;
    assert_eq!(
        flagged(&report),
        [("persistence", Severity::Warn)],
        "{report:#?}"
    );
    // AOF the OS flushes when it likes.
    let server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "no"]).await;
    let report = audited(&server).await;
    assert_eq!(
        flagged(&report),
        [("persistence", Severity::Warn)],
        "{report:#?}"
    );
}

#[tokio::test]
async fn allkeys_lru_with_maxmemory_fails_and_really_evicts_a_held_lock() {
    let server = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--maxmemory",
        "50mb",
        "--maxmemory-policy",
        "allkeys-lru",
    ])
    .await;
    let holder = client(&server, WATCHDOG).await;
    let report = within("audit", holder.audit()).await.unwrap();
    assert_eq!(
        flagged(&report),
        [("eviction-policy", Severity::Fail)],
        "{report:#?}"
    );
    let f = only(&report, "eviction-policy");
    assert_eq!(
        f.evidence,
        "maxmemory-policy allkeys-lru, maxmemory 50.0 MiB"
    );
    assert_eq!(number(&f, "maxmemory_bytes"), 50 << 20);

    // The reason, shown to be real: fill memory until Redis drops the
    // lock key of a held lock; another client then takes the same lock
    // while the holder still believes it holds it.
    let guard = holder.lock("orders:evicted").unwrap().lock().await.unwrap();
    let raw = server.raw().await;
    let filler = "x".repeat(1 << 20);
    within("the lock key evicted", async {
        let mut i = 0u64;
        loop {
            let present: i64 = raw.exists("orders:evicted").await.unwrap();
            if present == 0 {
                return;
            }
            let _: () = raw
                .set(format!("filler:{i}"), filler.as_str(), None, None, false)
                .await
                .unwrap();
            i += 1;
        }
    })
    .await;
    let other = client(&server, WATCHDOG).await;
    let second = other
        .lock("orders:evicted")
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    assert!(second.is_some(), "the evicted lock is free for anyone");
    assert!(!guard.is_lost(), "the first holder has not heard yet");
    let report = within("audit", other.audit()).await.unwrap();
    let f = only(&report, "eviction-policy");
    assert_eq!(f.severity, Severity::Fail);
    assert!(number(&f, "evicted_keys") > 0, "{f:?}");
    assert!(f.evidence.contains("evicted since start"), "{}", f.evidence);
    drop(second);
    drop(guard);
    other.shutdown().await;
    holder.shutdown().await;
}

#[tokio::test]
async fn volatile_lru_with_maxmemory_fails() {
    let server = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--maxmemory",
        "50mb",
        "--maxmemory-policy",
        "volatile-lru",
    ])
    .await;
    let report = audited(&server).await;
    assert_eq!(
        flagged(&report),
        [("eviction-policy", Severity::Fail)],
        "{report:#?}"
    );
    assert!(only(&report, "eviction-policy")
        .why
        .contains("every lock key has one"));

    // Without maxmemory the policy is inert, but waiting for a limit.
    let server =
        RedisServer::start_with(&["--appendonly", "yes", "--maxmemory-policy", "volatile-lru"])
            .await;
    let report = audited(&server).await;
    assert_eq!(
        flagged(&report),
        [("eviction-policy", Severity::Warn)],
        "{report:#?}"
    );
}

/// A single-server address must lead to a lone primary: a managed HA
/// endpoint (a primary with replicas) never has its writes confirmed, a
/// replica refuses every write, a cluster node those of other slots.
#[tokio::test]
async fn a_single_address_is_judged_by_what_is_behind_it() {
    let primary = RedisServer::start_with(&["--appendonly", "yes"]).await;
    let port = primary.port.to_string();
    let replica =
        RedisServer::start_with(&["--appendonly", "yes", "--replicaof", "127.0.0.1", &port]).await;
    let raw = primary.raw().await;
    until("the replica attached", || async {
        let info: String = raw
            .info(Some(fred::types::InfoKind::Replication))
            .await
            .unwrap();
        info.contains("connected_slaves:1")
    })
    .await;
    let judged = |url: String| async move {
        let config = common::config(&url, WATCHDOG);
        let report = within("audit", redisson_lock::audit::audit(&config))
            .await
            .unwrap();
        only(&report, "address")
    };
    let f = judged(primary.url()).await;
    assert_eq!(f.severity, Severity::Warn, "{f:#?}");
    assert_eq!(f.facts["connected_replicas"], Fact::Number(1));
    assert!(f.why.contains("never confirmed by a replica"), "{}", f.why);
    let f = judged(replica.url()).await;
    assert_eq!(f.severity, Severity::Fail, "{f:#?}");
    assert!(f.why.contains("READONLY"), "{}", f.why);

    let cluster = common::topology::Cluster::start().await;
    let node = cluster.primaries().await[0];
    let f = judged(format!("redis://127.0.0.1:{node}")).await;
    assert_eq!(f.severity, Severity::Fail, "{f:#?}");
    assert_eq!(f.facts["cluster_enabled"], Fact::Flag(true));
}

/// A command that ran long stalled every renewal behind it: the audit
/// reads it from the slow log and judges it against the renewal interval.
#[tokio::test]
async fn a_stall_in_the_slow_log_is_judged_against_the_renewal() {
    // The latency monitor on: it records the same stall.
    let server =
        RedisServer::start_with(&["--appendonly", "yes", "--latency-monitor-threshold", "1"]).await;
    let raw = server.raw().await;
    // A script of fixed work, half a second or so here (a script
    // sees a frozen clock on some servers, so it cannot time itself).
    let busy = "for i = 1, 1000000 do redis.call('PING') end return 1";
    let _: i64 = raw
        .eval(busy, Vec::<String>::new(), Vec::<String>::new())
        .await
        .unwrap();
    // How long it really took, as the server logged it.
    let command = fred::types::CustomCommand::new_static(
        "SLOWLOG",
        fred::types::ClusterHash::FirstKey,
        false,
    );
    let log: fred::types::Value = raw.custom(command, vec!["GET", "1"]).await.unwrap();
    let took_us = match &log {
        fred::types::Value::Array(entries) => match entries.first() {
            Some(fred::types::Value::Array(parts)) => parts[2].as_i64().unwrap() as u64,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    // A lease of 12 times the stall renews every 4 of it: the stall is over
    // a tenth of the renewal interval (warn), under half (fail).
    let config = common::config(&server.url(), Duration::from_micros(took_us * 12));
    let report = within("audit", redisson_lock::audit::audit(&config))
        .await
        .unwrap();
    let f = only(&report, "latency");
    assert_eq!(f.severity, Severity::Warn, "{f:#?}");
    assert!(f.evidence.contains("longest in SLOWLOG"), "{}", f.evidence);
    assert_eq!(f.facts["slowlog_max_us"], Fact::Number(took_us), "{f:#?}");
    assert!(
        f.evidence.contains("worst spike in LATENCY LATEST"),
        "{}",
        f.evidence
    );
    let Fact::Number(spike_ms) = f.facts["latency_max_ms"] else {
        panic!("{f:#?}")
    };
    // The monitor keeps whole ms of the same measure.
    assert!(
        spike_ms.abs_diff(took_us / 1000) <= 1,
        "{spike_ms} ms against {took_us} µs"
    );
}

/// A runaway script answers nothing until it is killed, and SCRIPT KILL
/// works only after `busy-reply-threshold` (`lua-time-limit`): past the
/// shortest watchdog TTL (2/3 of the lease), locks expire before anyone can act.
#[tokio::test]
async fn a_script_killable_only_after_the_renewal_is_flagged() {
    let server = RedisServer::start().await;
    // A 6 s lease's TTLs go down to 4 s; Redis's default threshold is 5 s.
    let config = common::config(&server.url(), Duration::from_secs(6));
    let report = within("audit", redisson_lock::audit::audit(&config))
        .await
        .unwrap();
    let f = only(&report, "latency");
    assert_eq!(f.severity, Severity::Warn, "{f:#?}");
    assert_eq!(
        f.facts["busy_reply_threshold_ms"],
        Fact::Number(5000),
        "{f:#?}"
    );
    assert!(f.why.contains("busy-reply-threshold"), "{f:#?}");
    common::topology::on_node(server.port, "CONFIG", vec!["SET", "lua-time-limit", "900"]).await;
    let report = within("audit", redisson_lock::audit::audit(&config))
        .await
        .unwrap();
    let f = only(&report, "latency");
    assert_eq!(f.severity, Severity::Ok, "{f:#?}");
    assert_eq!(
        f.facts["busy_reply_threshold_ms"],
        Fact::Number(900),
        "{f:#?}"
    );
}

/// Whether the server has channel permissions (`&pattern`, Redis 6.2+):
/// the matrix names the server's version, the default server is Redis 7.
fn channel_acls() -> bool {
    std::env::var("REDIS_SERVER_VERSION").map_or(true, |v| !v.starts_with("6.0"))
}

/// A rule with every key and channel allowed, in the server's dialect.
fn open_rule(extra: &[&'static str]) -> Vec<&'static str> {
    let mut rule = vec!["on", ">pw", "~*"];
    if channel_acls() {
        rule.push("&*");
    }
    rule.push("+@all");
    rule.extend(extra);
    rule
}

fn user_flags(user: &str, rule: &[&str]) -> Vec<String> {
    let mut flags = vec![
        "--appendonly".to_string(),
        "yes".into(),
        "--user".into(),
        user.into(),
    ];
    flags.extend(rule.iter().map(|s| s.to_string()));
    flags
}

#[tokio::test]
async fn an_acl_user_without_publish_fails_permissions() {
    // Everything but PUBLISH, so the audit can read all else.
    let flags = user_flags("locker", &open_rule(&["-publish"]));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = RedisServer::start_with(&flags).await;
    let mut config = common::config(&server.url(), WATCHDOG);
    config.username = Some("locker".into());
    config.password = Some("pw".into());
    let client = RedissonClient::connect(config).await.unwrap();
    let report = within("audit", client.audit()).await.unwrap();
    assert_eq!(
        flagged(&report),
        [("permissions", Severity::Fail)],
        "{report:#?}"
    );
    let f = only(&report, "permissions");
    assert!(f.evidence.contains("refused PUBLISH"), "{}", f.evidence);
    assert!(!f.evidence.contains("SUBSCRIBE ("), "{}", f.evidence);
    assert_eq!(
        f.fix,
        "ACL SETUSER locker +publish (docs/acl.md has the whole rule)"
    );
    client.shutdown().await;
    if !channel_acls() {
        // Redis 6.0: the documented rule below needs channel patterns.
        return;
    }

    // The minimal rule of docs/acl.md without +publish: no ACL DRYRUN, no
    // INFO, no SCAN for this user. PUBLISH is found by its refusal; what
    // the audit could not read is unknown, not flagged otherwise.
    let rule: Vec<&str> = common::LOCK_ACL_RULE
        .iter()
        .copied()
        .filter(|p| *p != "+publish")
        .collect();
    let flags = user_flags("locker", &rule);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = RedisServer::start_with(&flags).await;
    let mut config = common::config(&server.url(), WATCHDOG);
    config.username = Some("locker".into());
    config.password = Some("locker-pw".into());
    let report = within("audit", redisson_lock::audit::audit(&config))
        .await
        .unwrap();
    let f = only(&report, "permissions");
    assert_eq!(f.severity, Severity::Fail, "{report:#?}");
    assert!(
        f.evidence.contains("checked with each command's answer")
            && f.evidence.contains(": refused PUBLISH"),
        "{}",
        f.evidence
    );
    let failing_or_warned: Vec<_> = report
        .flagged()
        .filter(|f| f.severity != Severity::Unknown)
        .map(|f| f.rule.as_str())
        .collect();
    assert_eq!(failing_or_warned, ["permissions"], "{report:#?}");
    let unknown: Vec<_> = report
        .flagged()
        .filter(|f| f.severity == Severity::Unknown)
        .map(|f| f.rule.as_str())
        .collect();
    assert_eq!(
        unknown,
        [
            "address",
            "eviction-policy",
            "memory-usage",
            "persistence",
            "java-watchdog",
            "redisson-fields"
        ],
        "{report:#?}"
    );
    for f in report.flagged().filter(|f| f.severity == Severity::Unknown) {
        assert!(f.evidence.contains("NOPERM"), "{f:?}");
        assert!(!f.why.is_empty(), "{f:?}");
    }
    // On a single server the crate sends no WAIT: not having it is fine.
    assert_eq!(only(&report, "wait-command").severity, Severity::Ok);

    // The whole documented rule: only the batch script's SCRIPT LOAD is
    // missing, which slows batches and breaks nothing.
    let flags = user_flags("locker", common::LOCK_ACL_RULE);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = RedisServer::start_with(&flags).await;
    config.address = server.url();
    let report = within("audit", redisson_lock::audit::audit(&config))
        .await
        .unwrap();
    let f = only(&report, "permissions");
    assert_eq!(f.severity, Severity::Warn, "{report:#?}");
    assert!(
        f.evidence
            .contains(": refused SCRIPT LOAD (refused: NOPERM")
            && !f.evidence.contains("PUBLISH"),
        "{}",
        f.evidence
    );
    assert_eq!(
        f.fix,
        "ACL SETUSER locker +script|load (docs/acl.md has the whole rule)"
    );

    // Without the client registry's part: a warning (who holds a lock is
    // shown without who they are), never a failure, and what to add.
    let rule: Vec<&str> = common::LOCK_ACL_RULE
        .iter()
        .copied()
        .filter(|p| !["~redisson_lock__client:*", "+hset"].contains(p))
        .collect();
    let flags = user_flags("locker", &rule);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = RedisServer::start_with(&flags).await;
    config.address = server.url();
    let report = within("audit", redisson_lock::audit::audit(&config))
        .await
        .unwrap();
    let f = only(&report, "permissions");
    assert_eq!(f.severity, Severity::Warn, "{report:#?}");
    assert!(
        f.evidence.contains("HSET on the client registry")
            && f.evidence.contains("HGETALL on the client registry"),
        "{}",
        f.evidence
    );
    assert!(
        f.fix.contains("+hset") && f.fix.contains("~redisson_lock__client:*"),
        "{}",
        f.fix
    );
}

/// The documented rule of docs/acl.md (locks named `app:*`), with the
/// optional `SCRIPT LOAD`: nothing the audit flags.
fn lock_rule() -> Vec<&'static str> {
    let mut rule = common::LOCK_ACL_RULE.to_vec();
    rule.push("+script|load");
    rule
}

fn fact(f: &Finding, name: &str) -> Fact {
    f.facts
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("no fact {name}: {f:?}"))
}

/// The permissions rule checks the keys a lock's scripts touch, and the
/// commands they run, against one of the service's lock names; an
/// administrator checks the service's user with `ACL DRYRUN`.
#[tokio::test]
async fn permissions_are_checked_against_a_lock_s_keys_and_for_another_user() {
    if !channel_acls() {
        // Redis 6.0: the documented rule needs channel patterns.
        return;
    }
    let mut flags = user_flags("locker", &lock_rule());
    // The same rule, with the locks' keys readable only (Redis 7 selectors).
    let mut reader: Vec<&str> = lock_rule()
        .into_iter()
        .map(|p| if p == "~app:*" { "%R~app:*" } else { p })
        .collect();
    reader[0] = "on";
    flags.push("--user".into());
    flags.push("reader".into());
    flags.extend(reader.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = RedisServer::start_with(&flags).await;
    let as_user = |user: &str| {
        let mut config = common::config(&server.url(), WATCHDOG);
        config.username = Some(user.into());
        config.password = Some("locker-pw".into());
        config
    };
    let permissions = |config: redisson_lock::Config, options: AuditOptions| async move {
        let report = within("audit", redisson_lock::audit::audit_with(&config, &options))
            .await
            .unwrap();
        only(&report, "permissions")
    };

    // No lock name: the audit's own lock is outside `~app:*`, so the key
    // patterns are said not to be checked; the commands are.
    let f = permissions(as_user("locker"), AuditOptions::new()).await;
    assert_eq!(f.severity, Severity::Ok, "{f:?}");
    assert_eq!(fact(&f, "keys_checked"), Fact::Flag(false), "{f:?}");
    assert!(
        f.evidence.contains("key patterns not checked"),
        "{}",
        f.evidence
    );
    assert!(f.evidence.contains("HINCRBY"), "{}", f.evidence);

    // One of the service's locks: every key and command allowed.
    let f = permissions(
        as_user("locker"),
        AuditOptions::new().lock_name("app:orders"),
    )
    .await;
    assert_eq!(f.severity, Severity::Ok, "{f:?}");
    assert_eq!(fact(&f, "keys_checked"), Fact::Flag(true), "{f:?}");
    assert!(
        f.evidence
            .contains("each command's answer on keys of lock app:orders"),
        "{}",
        f.evidence
    );

    // A lock outside the user's key patterns: every script would fail.
    let f = permissions(
        as_user("locker"),
        AuditOptions::new().lock_name("billing:x"),
    )
    .await;
    assert_eq!(f.severity, Severity::Fail, "{f:?}");
    assert!(f.evidence.contains("refused EVALSHA ("), "{}", f.evidence);
    assert!(
        f.fix.starts_with("ACL SETUSER locker ~billing:x "),
        "{}",
        f.fix
    );
    // Nothing the probes sent changed the keyspace.
    let raw = server.raw().await;
    assert_eq!(raw.dbsize::<i64>().await.unwrap(), 0);

    // Readable lock keys: the writes inside the scripts are refused.
    let f = permissions(
        as_user("reader"),
        AuditOptions::new().lock_name("app:orders"),
    )
    .await;
    assert_eq!(f.severity, Severity::Fail, "{f:?}");
    for refused in ["HINCRBY (", "PEXPIRE ("] {
        assert!(f.evidence.contains(refused), "{refused}: {}", f.evidence);
    }
    assert!(!f.evidence.contains("HGETALL ("), "{}", f.evidence);

    // An administrator checks the service's users with ACL DRYRUN.
    let admin = common::config(&server.url(), WATCHDOG);
    let f = permissions(
        admin.clone(),
        AuditOptions::new()
            .lock_name("app:orders")
            .acl_user("locker"),
    )
    .await;
    assert_eq!(f.severity, Severity::Ok, "{f:?}");
    assert_eq!(fact(&f, "user"), Fact::Text("locker".into()));
    assert!(
        f.evidence.contains("checked with ACL DRYRUN"),
        "{}",
        f.evidence
    );
    let f = permissions(
        admin.clone(),
        AuditOptions::new()
            .lock_name("app:orders")
            .acl_user("reader"),
    )
    .await;
    assert_eq!(f.severity, Severity::Fail, "{f:?}");
    assert!(f.evidence.contains("HINCRBY ("), "{}", f.evidence);
    // The service's user cannot run ACL DRYRUN: nothing is claimed.
    let f = permissions(
        as_user("locker"),
        AuditOptions::new()
            .lock_name("app:orders")
            .acl_user("reader"),
    )
    .await;
    assert_eq!(f.severity, Severity::Unknown, "{f:?}");
    assert!(f.evidence.contains("ACL DRYRUN"), "{}", f.evidence);
    // Bad input is a typed error, and nothing is sent.
    let err = redisson_lock::audit::audit_with(&admin, &AuditOptions::new().lock_name(" "))
        .await
        .unwrap_err();
    assert!(
        matches!(err, redisson_lock::Error::InvalidArgument(_)),
        "{err}"
    );
    assert_eq!(raw.dbsize::<i64>().await.unwrap(), 0);
}

/// A server started with `lines` in a config file of its own.
async fn with_config_file(lines: &str, extra: &[&str]) -> (RedisServer, common::topology::Scratch) {
    let dir = common::topology::Scratch::new("audit-conf");
    let file = dir.0.join("redis.conf");
    std::fs::write(&file, lines).unwrap();
    (
        RedisServer::start_on_free_port(Some(file), extra).await,
        dir,
    )
}

#[tokio::test]
async fn wait_renamed_away_is_named() {
    let (server, _dir) =
        with_config_file("rename-command WAIT \"\"\n", &["--appendonly", "yes"]).await;
    let report = audited(&server).await;
    // A single-server address never waits for replicas: a warning, for the
    // day this server is behind Sentinel or a cluster.
    assert_eq!(
        flagged(&report),
        [("wait-command", Severity::Warn)],
        "{report:#?}"
    );
    let f = only(&report, "wait-command");
    assert!(f.evidence.contains("unknown command"), "{}", f.evidence);
    assert!(f.fix.contains("rename-command WAIT"), "{}", f.fix);
}

#[tokio::test]
async fn config_renamed_away_makes_findings_unknown_and_the_rest_still_counts() {
    let (server, _dir) =
        with_config_file("rename-command CONFIG \"\"\n", &["--appendonly", "yes"]).await;
    let report = audited(&server).await;
    assert_eq!(
        flagged(&report),
        [("persistence", Severity::Unknown)],
        "{report:#?}"
    );
    let f = only(&report, "persistence");
    assert!(
        f.evidence.contains("AOF is on (INFO)") && f.evidence.contains("CONFIG"),
        "{}",
        f.evidence
    );
    assert!(!report.has_failures(), "unknown is not a failure");

    // The eviction policy is read from INFO: still judged without CONFIG.
    let (server, _dir) = with_config_file(
        "rename-command CONFIG \"\"\n",
        &[
            "--appendonly",
            "yes",
            "--maxmemory",
            "50mb",
            "--maxmemory-policy",
            "allkeys-lru",
        ],
    )
    .await;
    let report = audited(&server).await;
    assert_eq!(
        flagged(&report),
        [
            ("eviction-policy", Severity::Fail),
            ("persistence", Severity::Unknown)
        ],
        "{report:#?}"
    );
    assert!(report.has_failures());
}

#[tokio::test]
async fn a_jvm_fleet_with_another_watchdog_is_named() {
    let server = RedisServer::start_with(&["--appendonly", "yes"]).await;
    let java = JavaPeer::start("redisson-4", "4.7.0", &server.url(), 10_000).await;
    java.ok("lock fleet:orders 7 -1").await;
    let report = audited(&server).await;
    assert_eq!(
        flagged(&report),
        [("java-watchdog", Severity::Warn)],
        "{report:#?}"
    );
    let f = only(&report, "java-watchdog");
    assert_eq!(number(&f, "holding_clients"), 1);
    assert!(number(&f, "longest_ttl_ms") <= 10_000, "{f:?}");
    assert!(f.evidence.contains(&java.client_id[..8]), "{}", f.evidence);
    assert!(
        f.evidence.contains("lockWatchdogTimeout 30 s"),
        "{}",
        f.evidence
    );

    // A client with the fleet's 10 s: nothing to say.
    let client = RedissonClient::connect(common::config(&server.url(), Duration::from_secs(10)))
        .await
        .unwrap();
    let report = within("audit", client.audit()).await.unwrap();
    assert_eq!(flagged(&report), [], "{report:#?}");
    // Its own holds are not the fleet's.
    let own = client
        .lock("rust:own")
        .unwrap()
        .acquire()
        .lease(Duration::from_secs(100))
        .await
        .unwrap();
    let report = within("audit", client.audit()).await.unwrap();
    assert_eq!(flagged(&report), [], "{report:#?}");
    own.unlock().await.unwrap();
    client.shutdown().await;
    java.ok("unlock fleet:orders 7").await;
    java.quit().await;
}

#[tokio::test]
async fn redisson_fields_of_another_shape_are_named() {
    let server = RedisServer::start_with(&["--appendonly", "yes"]).await;
    let raw = server.raw().await;
    // An upper-case client id: Redisson-like, but not what this crate parses.
    let _: () = raw
        .hset("odd:lock", ("8743C9C0-0795-4907-87FD-6C719A6B4586:12", "1"))
        .await
        .unwrap();
    let _: () = raw.pexpire("odd:lock", 60_000, None).await.unwrap();
    // Not a lock at all: never flagged.
    let _: () = raw.hset("profile", ("name", "bob")).await.unwrap();
    let report = audited(&server).await;
    assert_eq!(
        flagged(&report),
        [("redisson-fields", Severity::Warn)],
        "{report:#?}"
    );
    assert!(only(&report, "redisson-fields")
        .evidence
        .contains("odd:lock"));
}

/// Records every tracing event's fields on this thread.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<HashMap<String, String>>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Visit<'a>(&'a mut HashMap<String, String>);
        impl tracing::field::Visit for Visit<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.insert(field.name().into(), format!("{value:?}"));
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                self.0.insert(field.name().into(), value.into());
            }
        }
        let mut fields = HashMap::new();
        fields.insert("level".into(), event.metadata().level().to_string());
        event.record(&mut Visit(&mut fields));
        self.0.lock().push(fields);
    }
}

impl Events {
    fn with(&self, key: &str, value: &str) -> Vec<HashMap<String, String>> {
        self.0
            .lock()
            .iter()
            .filter(|e| e.get(key).map(String::as_str) == Some(value))
            .cloned()
            .collect()
    }
}

/// Connects, and waits for the connect-time audit to have logged.
async fn connect_and_wait_for_check(
    config: redisson_lock::Config,
    events: &Events,
) -> RedissonClient {
    let client = RedissonClient::connect(config)
        .await
        .expect("connect never fails for the audit");
    until("the connect-time audit done", || async {
        !events.with("message", "connect-time audit done").is_empty()
    })
    .await;
    client
}

// The current-thread runtime runs the connect-time check on this thread,
// where the recording subscriber is the default.
#[tokio::test(flavor = "current_thread")]
async fn connect_warns_once_per_finding_that_can_break_exclusion() {
    use tracing_subscriber::layer::SubscriberExt;
    let events = Events::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));

    let flags = user_flags("locker", &open_rule(&["-publish"]));
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend(["--maxmemory", "50mb", "--maxmemory-policy", "allkeys-lru"]);
    let server = RedisServer::start_with(&flags).await;
    let mut config = common::config(&server.url(), WATCHDOG);
    config.username = Some("locker".into());
    config.password = Some("pw".into());
    let client = connect_and_wait_for_check(config, &events).await;
    let warnings: Vec<_> = events.with("level", "WARN");
    let rules: Vec<&str> = warnings.iter().map(|w| w["rule"].as_str()).collect();
    assert_eq!(rules, ["eviction-policy", "permissions"], "{warnings:#?}");
    assert!(
        warnings[0]["evidence"].contains("allkeys-lru"),
        "{warnings:#?}"
    );
    assert!(
        warnings[1]["evidence"].contains("PUBLISH refused"),
        "{warnings:#?}"
    );
    assert!(warnings
        .iter()
        .all(|w| !w["fix"].is_empty() && !w["why"].is_empty()));
    // The service started: locks work (evictions aside).
    client
        .lock("app:job")
        .unwrap()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap_err();
    client.shutdown().await;

    // A healthy server: the check runs, and says nothing.
    events.0.lock().clear();
    let server = RedisServer::start().await;
    let client = connect_and_wait_for_check(common::config(&server.url(), WATCHDOG), &events).await;
    assert!(
        events.with("level", "WARN").is_empty(),
        "{:#?}",
        events.0.lock()
    );
    client.shutdown().await;
}
