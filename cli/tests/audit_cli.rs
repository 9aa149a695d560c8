//! `redisson-lock audit`: the table, `--json`, and the exit status (0
//! nothing fails, 1 something does, 2 could not connect), against real servers.

use redisson_lock_testkit as common;
mod support;

use common::*;
use serde_json::Value as Json;
use support::*;

#[tokio::test]
async fn a_clean_server_exits_0_with_every_finding_ok() {
    let server = RedisServer::start_with(&["--appendonly", "yes"]).await;
    let out = run(&server.url(), &["audit"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "redisson-lock audit | {} | single server | lockWatchdogTimeout 30000 ms",
            server.url()
        )
    );
    assert!(lines[1].starts_with("STATUS   RULE"), "{}", lines[1]);
    // One row per finding, every one ok, and no why/fix lines.
    assert_eq!(lines.len(), 2 + 9 + 1, "{}", out.stdout);
    assert!(
        lines[2..11].iter().all(|l| l.starts_with("ok ")),
        "{}",
        out.stdout
    );
    assert!(
        lines[11].starts_with("9 finding(s): 9 ok, 0 warn, 0 fail, 0 unknown"),
        "{}",
        lines[11]
    );

    let report = json(&server.url(), &["audit"]).await;
    assert_eq!(report["deployment"], "single");
    // The JSON reads back as the library's report, and writes out the same.
    let typed: redisson_lock::audit::AuditReport = serde_json::from_value(report.clone()).unwrap();
    assert_eq!(report["schema"], 1);
    assert_eq!(typed.schema, redisson_lock::audit::AuditReport::SCHEMA);
    assert_eq!(typed.findings.len(), 9);
    assert_eq!(serde_json::to_value(&typed).unwrap(), report);
    assert_eq!(report["summary"]["ok"], 9);
    let rules: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert_eq!(
        rules,
        [
            "address",
            "eviction-policy",
            "memory-usage",
            "persistence",
            "wait-command",
            "permissions",
            "java-watchdog",
            "redisson-fields",
            "latency"
        ]
    );
}

#[tokio::test]
async fn a_misconfigured_server_exits_1_and_names_the_fault_with_its_fix() {
    let server = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--maxmemory",
        "50mb",
        "--maxmemory-policy",
        "allkeys-lru",
    ])
    .await;
    let out = run(&server.url(), &["audit"]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("FAIL     eviction-policy"))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(
        lines[at].ends_with("maxmemory-policy allkeys-lru, maxmemory 50.0 MiB"),
        "{}",
        lines[at]
    );
    assert!(
        lines[at + 1]
            .trim_start()
            .starts_with("why: under memory pressure"),
        "{}",
        out.stdout
    );
    assert!(
        lines[at + 2]
            .trim_start()
            .starts_with("fix: CONFIG SET maxmemory-policy noeviction"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(", 1 fail, "), "{}", out.stdout);

    // The same exit status with --json, which still prints the report.
    let mut cmd = cli(&server.url());
    cmd.args(["audit", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 1);
    let report: Json = serde_json::from_str(&out.stdout).unwrap();
    let failing: Vec<&Json> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] != "ok")
        .collect();
    assert_eq!(failing.len(), 1, "{report}");
    assert_eq!(failing[0]["rule"], "eviction-policy");
    assert_eq!(failing[0]["severity"], "fail");
    assert_eq!(failing[0]["facts"]["maxmemory_bytes"], 52428800);
}

#[tokio::test]
async fn unknown_findings_fail_the_audit_only_with_fail_on_unknown() {
    let dir = common::topology::Scratch::new("audit-cli");
    let file = dir.0.join("redis.conf");
    std::fs::write(&file, "rename-command CONFIG \"\"\n").unwrap();
    let server = RedisServer::start_on_free_port(Some(file), &["--appendonly", "yes"]).await;
    let out = run(&server.url(), &["audit"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let unknown: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("UNKNOWN"))
        .collect();
    assert_eq!(unknown.len(), 1, "{}", out.stdout);
    assert!(
        unknown[0].contains("persistence") && unknown[0].contains("CONFIG"),
        "{}",
        unknown[0]
    );
    assert!(
        out.stdout.contains("1 rule(s) not checked"),
        "{}",
        out.stdout
    );
    // A CI gate that must not pass having checked nothing.
    let out = run(&server.url(), &["audit", "--fail-on", "unknown"]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let out = run(&server.url(), &["audit", "--fail-on", "unknown", "--json"]).await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
}

#[tokio::test]
async fn an_unreachable_server_exits_2_and_says_what_to_check() {
    let port = free_port();
    let out = run(&format!("redis://127.0.0.1:{port}"), &["audit"]).await;
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(
        out.stderr.starts_with(&format!(
            "redisson-lock: cannot audit redis://127.0.0.1:{port}: "
        )),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("check the address"), "{}", out.stderr);
}

/// `--lock` checks the ACL's key patterns against one of the service's
/// locks; `--acl-user` checks another user with ACL DRYRUN.
#[tokio::test]
async fn acl_user_and_lock_check_a_service_s_user_and_its_keys() {
    if std::env::var("REDIS_SERVER_VERSION").is_ok_and(|v| v.starts_with("6.")) {
        // Redis 6: no ACL DRYRUN, no channel patterns.
        return;
    }
    let server = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--user",
        "locker",
        "on",
        "nopass",
        "~app:*",
        "~redisson_unlock_latch:*",
        "~redisson_lock__channel:*",
        "&redisson_lock__channel:*",
        "+@all",
    ])
    .await;
    // The administrator's URL, the service's user and lock.
    let out = run(
        &server.url(),
        &["audit", "--acl-user", "locker", "--lock", "app:orders"],
    )
    .await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let out = run(
        &server.url(),
        &[
            "audit",
            "--acl-user",
            "locker",
            "--lock",
            "billing:x",
            "--json",
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let report: Json = serde_json::from_str(&out.stdout).unwrap();
    let permissions: Vec<&Json> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "permissions")
        .collect();
    assert_eq!(permissions.len(), 1, "{report}");
    assert_eq!(permissions[0]["severity"], "fail");
    assert_eq!(permissions[0]["facts"]["user"], "locker");
    assert!(
        permissions[0]["fix"]
            .as_str()
            .unwrap()
            .starts_with("ACL SETUSER locker ~billing:x"),
        "{report}"
    );
    // An empty name is an error of its own, not a finding.
    let out = run(&server.url(), &["audit", "--lock", ""]).await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("lock name is empty"), "{}", out.stderr);
}
