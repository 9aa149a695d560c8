//! `ls`, `inspect`, `doctor`, `run` for every kind and the latch and
//! semaphore commands, against real servers (and the JVM's Redisson 4.7.0).

use redisson_lock_testkit as common;
mod support;

use std::time::Duration;

use common::java::JavaPeer;
use common::topology::until;
use common::*;
use fred::prelude::*;
use serde_json::Value as Json;
use support::*;

#[tokio::test]
async fn ls_and_inspect_show_every_kind_of_object() {
    let server = RedisServer::start().await;
    let url = server.url();
    let raw = server.raw().await;
    let owner = client(&server, Duration::from_secs(30)).await;
    let other = client(&server, Duration::from_secs(30)).await;

    // A lock held twice by one owner, and a waiter from another client.
    let lock = owner.lock("orders:42").unwrap();
    let outer = lock.lock().await.unwrap();
    let inner = outer.scope(lock.lock()).await.unwrap();
    let waiting = {
        let lock = other.lock("orders:42").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    await_subscribers(&server, "redisson_lock__channel:{orders:42}", 1).await;
    // A fair lock with one waiter in line.
    let fair = owner.fair_lock("payouts").unwrap().lock().await.unwrap();
    let queued = {
        let lock = other.fair_lock("payouts").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    until("waiter in line and listening", || async {
        let info = json(&url, &["inspect", "payouts"]).await;
        info["queue"][0]["subscribers"] == 1
    })
    .await;
    // Two readers; a writer elsewhere; a fenced lock.
    let rw = owner.read_write_lock("doc").unwrap();
    let (r1, r2) = (
        rw.read().lock().await.unwrap(),
        rw.read().lock().await.unwrap(),
    );
    let writer = owner
        .read_write_lock("pricing")
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();
    let fenced = owner.fenced_lock("ledger").unwrap().lock().await.unwrap();
    // Semaphores: one at zero with a waiter, one that could be a latch.
    let pool = owner.semaphore("pool").unwrap();
    pool.try_set_permits(1).await.unwrap();
    let taken = pool.acquire(1).await.unwrap();
    let pool_waiter = {
        let pool = other.semaphore("pool").unwrap();
        tokio::spawn(async move { pool.acquire(1).await })
    };
    await_subscribers(&server, "redisson_sc:{pool}", 1).await;
    let exports = owner.semaphore("exports").unwrap();
    exports.try_set_permits(4).await.unwrap();
    let slots = owner.permit_expirable_semaphore("slots").unwrap();
    slots.try_set_permits(2).await.unwrap();
    let leased = slots
        .acquire(1)
        .lease(Duration::from_secs(600))
        .await
        .unwrap();
    let latch = owner.count_down_latch("loaded").unwrap();
    latch.try_set_count(2).await.unwrap();
    let latch_waiter = {
        let latch = other.count_down_latch("loaded").unwrap();
        tokio::spawn(async move { latch.wait().await })
    };
    await_subscribers(&server, "redisson_countdownlatch__channel__{loaded}", 1).await;
    // A group multi lock's hash as Redisson writes it, and keys of others.
    let java = "8743c9c0-0795-4907-87fd-6c719a6b4586";
    let _: () = raw
        .hset(
            "batch",
            vec![
                ("Ab3".to_string(), format!("{java}:1")),
                (format!("Ab3:{java}:1:lock_count"), "1".into()),
                (format!("Ab3:{java}:1:expire_time"), "4102444800000".into()),
            ],
        )
        .await
        .unwrap();
    let _: () = raw.pexpire("batch", 60_000, None).await.unwrap();
    let _: () = raw
        .set("cache:x", "hello", None, None, false)
        .await
        .unwrap();
    let _: () = raw.hset("profile", ("name", "bob")).await.unwrap();

    let list = json(&url, &["ls"]).await;
    let names: Vec<&str> = list["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "batch",
            "doc",
            "exports",
            "ledger",
            "loaded",
            "orders:42",
            "payouts",
            "pool",
            "pricing",
            "slots"
        ],
        "sorted, Redisson objects only"
    );
    let o = entry(&list, "orders:42");
    assert_eq!(o["kind"], "lock");
    assert_eq!(o["holders"][0]["client_id"], owner.id());
    assert_eq!(o["holders"][0]["hold_count"], 2);
    assert_eq!(o["subscribers"], 1, "the other client waits");
    assert!(o["ttl_ms"].as_u64().unwrap() > 0);
    let o = entry(&list, "payouts");
    assert_eq!(
        (o["kind"].as_str(), o["queue_length"].as_u64()),
        (Some("fair-lock"), Some(1))
    );
    let o = entry(&list, "doc");
    assert_eq!(
        (o["kind"].as_str(), o["mode"].as_str()),
        (Some("read-write-lock"), Some("read"))
    );
    assert_eq!(o["holders"].as_array().unwrap().len(), 2);
    let o = entry(&list, "pricing");
    assert_eq!(o["writer"]["client_id"], owner.id());
    let o = entry(&list, "ledger");
    assert_eq!(
        (o["kind"].as_str(), o["last_token"].as_i64()),
        (Some("fenced-lock"), Some(1))
    );
    let o = entry(&list, "pool");
    assert_eq!(
        (o["kind"].as_str(), o["value"].as_i64()),
        (Some("semaphore"), Some(0))
    );
    assert_eq!(o["subscribers"], 1);
    let o = entry(&list, "exports");
    assert_eq!(
        (o["kind"].as_str(), o["value"].as_i64()),
        (Some("counter"), Some(4))
    );
    let o = entry(&list, "slots");
    assert_eq!(o["kind"], "expirable-semaphore");
    assert_eq!(
        (o["value"].as_i64(), o["leases"].as_u64()),
        (Some(1), Some(1))
    );
    let o = entry(&list, "loaded");
    assert_eq!(
        (o["kind"].as_str(), o["value"].as_i64()),
        (Some("count-down-latch"), Some(2))
    );
    let o = entry(&list, "batch");
    assert_eq!(o["kind"], "multi-lock-group");
    assert_eq!(o["holders"][0]["client_id"], java);

    // The table and a pattern.
    let out = run(&url, &["ls", "p*"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("WAITING"),
        "{}",
        out.stdout
    );
    assert_eq!(lines.len(), 4, "payouts, pool, pricing: {}", out.stdout);
    assert!(
        lines[1].starts_with("payouts") && lines[1].contains("queue 1"),
        "{}",
        out.stdout
    );

    // inspect: everything about each.
    let info = json(&url, &["inspect", "orders:42"]).await;
    assert_eq!(info["kind"], "lock");
    assert_eq!(info["redis_type"], "hash");
    assert_eq!(info["holders"][0]["owner"], outer.owner().to_string());
    assert_eq!(
        info["holders"][0]["this_client"], false,
        "the CLI's own client holds nothing"
    );
    assert_eq!(
        info["channels"],
        serde_json::json!([{"channel": "redisson_lock__channel:{orders:42}", "subscribers": 1}])
    );
    let info = json(&url, &["inspect", "payouts"]).await;
    assert_eq!(info["kind"], "fair-lock");
    let waiter = &info["queue"][0];
    assert_eq!(waiter["client_id"], other.id());
    assert!(waiter["deadline_ms"].as_i64().is_some() && waiter["overdue"] == false);
    assert_eq!(waiter["subscribers"], 1, "its own channel");
    let info = json(&url, &["inspect", "doc"]).await;
    let readers = info["readers"].as_array().unwrap();
    assert_eq!(readers.len(), 2);
    for reader in readers {
        let hold = &reader["holds"][0];
        assert_eq!(
            (hold["n"].as_u64(), hold["exists"].as_bool()),
            (Some(1), Some(true))
        );
        assert!(hold["key"].as_str().unwrap().ends_with(":rwlock_timeout:1"));
    }
    let info = json(&url, &["inspect", "slots"]).await;
    assert_eq!(info["available"], 1);
    assert_eq!(info["leases"][0]["id"], leased.ids()[0].to_string());
    assert_eq!(info["leases"][0]["expired"], false);
    let info = json(&url, &["inspect", "ledger"]).await;
    assert_eq!(info["last_token"], fenced.token());
    let info = json(&url, &["inspect", "loaded"]).await;
    assert_eq!(
        (info["kind"].as_str(), info["count"].as_i64()),
        (Some("count-down-latch"), Some(2))
    );
    let info = json(&url, &["inspect", "exports"]).await;
    assert_eq!(
        (info["kind"].as_str(), info["value"].as_i64()),
        (Some("counter"), Some(4))
    );
    for (name, kind) in [
        ("cache:x", "other"),
        ("profile", "other"),
        ("nothing", "absent"),
    ] {
        let info = json(&url, &["inspect", name]).await;
        assert_eq!(info["kind"], kind, "{name}");
    }
    let out = run(&url, &["inspect", "doc"]).await;
    assert!(
        out.stdout.starts_with("doc: read-write lock, mode read"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("hold 1 {doc}:"), "{}", out.stdout);

    waiting.abort();
    queued.abort();
    pool_waiter.abort();
    latch_waiter.abort();
    for guard in [inner, outer, fair, r1, r2, writer] {
        guard.unlock().await.unwrap();
    }
    drop((fenced, taken, leased));
    owner.shutdown().await;
    other.shutdown().await;
}

#[tokio::test]
async fn a_jvm_holder_shows_in_ls_and_inspect() {
    let server = RedisServer::start().await;
    let url = server.url();
    let java = JavaPeer::start("redisson-4", "4.7.0", &url, 30_000).await;
    java.ok("lock orders:7 5 -1").await;
    java.ok("lock orders:7 5 -1").await;
    java.ok("rlock report 6 -1").await;
    java.ok("fencedLock ledger 8 -1").await;

    let list = json(&url, &["ls"]).await;
    let o = entry(&list, "orders:7");
    assert_eq!(o["kind"], "lock");
    assert_eq!(o["holders"][0]["client_id"], java.client_id.as_str());
    assert_eq!(
        (
            o["holders"][0]["owner"].as_str(),
            o["holders"][0]["hold_count"].as_i64()
        ),
        (Some("5"), Some(2))
    );
    assert_eq!(entry(&list, "report")["kind"], "read-write-lock");
    assert_eq!(entry(&list, "ledger")["last_token"], 1);

    let info = json(&url, &["inspect", "orders:7"]).await;
    assert_eq!(info["holders"][0]["client_id"], java.client_id.as_str());
    let ttl = info["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    let info = json(&url, &["inspect", "report"]).await;
    assert_eq!(info["mode"], "read");
    let reader = &info["readers"][0];
    assert_eq!(
        (reader["owner"].as_str(), reader["hold_count"].as_i64()),
        (Some("6"), Some(1))
    );
    assert_eq!(
        reader["holds"][0]["key"],
        format!("{{report}}:{}:6:rwlock_timeout:1", java.client_id)
    );
    assert_eq!(reader["holds"][0]["exists"], true);

    // A Java waiter in a fair lock's line, behind a Rust holder.
    let rust = client(&server, Duration::from_secs(30)).await;
    let held = rust.fair_lock("payouts").unwrap().lock().await.unwrap();
    let java_waits = java.send("flock payouts 9 -1").await;
    let raw = server.raw().await;
    until("Java in line", || async {
        raw.llen::<i64, _>("redisson_lock_queue:{payouts}")
            .await
            .unwrap()
            == 1
    })
    .await;
    let info = json(&url, &["inspect", "payouts"]).await;
    assert_eq!(info["holders"][0]["client_id"], rust.id());
    let waiter = &info["queue"][0];
    assert_eq!(waiter["field"], format!("{}:9", java.client_id));
    assert!(waiter["deadline_ms"].as_i64().is_some());
    assert_eq!(
        entry(&json(&url, &["ls"]).await, "payouts")["queue_length"],
        1
    );
    held.unlock().await.unwrap();
    drop(java_waits);
    java.kill().await;
    rust.shutdown().await;
}

/// The registry entries on `raw`'s server, each as its fields and values.
async fn registry_entries(raw: &Client) -> Vec<std::collections::HashMap<String, String>> {
    let keys: Vec<String> = raw
        .scan_page("0", "redisson_lock__client:*", Some(1000), None)
        .await
        .map(|(_, keys): (String, Vec<String>)| keys)
        .unwrap();
    let mut entries = vec![];
    for key in keys {
        entries.push(raw.hgetall(&key).await.unwrap());
    }
    entries
}

/// Issue 51 item 2: `run` names its command in the registry by its name
/// only, never its arguments, which anyone who can read the keyspace sees
/// (`inspect`, `status`, `ls --json`): a password in a connection string
/// was published there. `--label` adds labels; `--no-register` writes no
/// entry.
#[tokio::test]
async fn run_registers_the_command_name_never_its_arguments() {
    let server = RedisServer::start().await;
    let url = server.url();
    let raw = server.raw().await;
    let (mut child, _lines) = start_run(
        &url,
        &["--label", "team=billing", "dump"],
        "echo ready; read line; : postgres://app:hunter2@db/ledger",
    )
    .await;
    let entries = registry_entries(&raw).await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(
        entries[0].values().all(|v| !v.contains("hunter2")),
        "{entries:?}"
    );
    let status = json(&url, &["status", "dump"]).await;
    let id = status["holders"][0]["client_id"].as_str().unwrap();
    let labels = &status["clients"][id]["labels"];
    assert_eq!(
        (&labels["command"], &labels["team"]),
        (&Json::from("sh"), &Json::from("billing")),
        "{status}"
    );
    assert_eq!(finish(&mut child).await, 0);

    let (mut child, _lines) =
        start_run(&url, &["--no-register", "unnamed"], "echo ready; read line").await;
    assert_eq!(registry_entries(&raw).await.len(), 0);
    assert_eq!(finish(&mut child).await, 0);
    let out = run(&url, &["run", "--label", "nokey", "x", "--", "true"]).await;
    assert_eq!(out.code, 125, "{}", out.stderr);
    assert!(out.stderr.contains("is not KEY=VALUE"), "{}", out.stderr);
}

/// Who holds it: a `run` holder is named by the client registry (host, pid,
/// the command it runs) in `status`, `inspect` and `ls`; its entry goes when
/// it exits, and a crashed holder's expires with its TTL. A JVM holder shows
/// unregistered until it registers itself as docs/interop.md shows.
#[tokio::test]
async fn holders_are_named_by_the_client_registry() {
    let server = RedisServer::start().await;
    let url = server.url();
    let raw = server.raw().await;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();

    let (mut child, _lines) = start_run(&url, &["payroll"], "echo ready; read line").await;
    let pid = child.id().unwrap();
    let status = json(&url, &["status", "payroll"]).await;
    let id = status["holders"][0]["client_id"]
        .as_str()
        .unwrap()
        .to_string();
    let who = &status["clients"][&id];
    assert_eq!(
        (&who["host"], &who["pid"], &who["service"], &who["runtime"]),
        (
            &Json::from(host),
            &Json::from(pid),
            &Json::from("redisson-lock"),
            &Json::from("rust")
        ),
        "{status}"
    );
    // The command's name only: its arguments may hold a secret.
    assert_eq!(who["labels"]["command"], "sh");
    let text = run(&url, &["inspect", "payroll"]).await.stdout;
    assert!(
        text.contains(&format!(
            "who: redisson-lock on {host} pid {pid} (command=sh)"
        )),
        "{text}"
    );
    assert_eq!(
        json(&url, &["inspect", "payroll"]).await["clients"][&id]["pid"],
        pid
    );
    assert_eq!(
        entry(&json(&url, &["ls"]).await, "payroll")["clients"][&id]["pid"],
        pid
    );
    let table = run(&url, &["ls", "payroll"]).await.stdout;
    assert!(table.contains(&format!("redisson-lock@{host}")), "{table}");
    // Read-only commands register nothing of their own.
    let entries: Vec<String> = raw
        .scan_page("0", "redisson_lock__client:*", Some(100), None)
        .await
        .map(|(_, keys): (String, Vec<String>)| keys)
        .unwrap();
    assert_eq!(entries, [format!("redisson_lock__client:{id}")]);
    assert_eq!(finish(&mut child).await, 0);
    let entry_key = format!("redisson_lock__client:{id}");
    assert_eq!(raw.exists::<i64, _>(&entry_key).await.unwrap(), 0);

    // A holder killed outright: its entry expires with the watchdog timeout.
    let (mut child, _lines) = start_run(
        &url,
        &["--watchdog-timeout", "1s", "crashes"],
        "echo ready; read line",
    )
    .await;
    let status = json(&url, &["status", "crashes"]).await;
    let id = status["holders"][0]["client_id"].as_str().unwrap();
    let entry_key = format!("redisson_lock__client:{id}");
    let ttl: i64 = raw.pttl(&entry_key).await.unwrap();
    assert!((1..=1000).contains(&ttl), "{ttl}");
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGKILL) };
    within("run killed", child.wait()).await.unwrap();
    until("the crashed holder's entry expires", || async {
        raw.exists::<i64, _>(&entry_key).await.unwrap() == 0
    })
    .await;

    // A JVM holder: unregistered, then named once it registers.
    let java = JavaPeer::start("redisson-4", "4.7.0", &url, 30_000).await;
    java.ok("lock ledger 5 -1").await;
    let status = json(&url, &["status", "ledger"]).await;
    assert_eq!(status["clients"][&java.client_id], Json::Null, "{status}");
    let text = run(&url, &["inspect", "ledger"]).await.stdout;
    assert!(
        text.contains("who: unregistered (a JVM Redisson client"),
        "{text}"
    );
    let table = run(&url, &["ls", "ledger"]).await.stdout;
    assert!(table.contains(" unregistered "), "{table}");
    // The registrar docs/interop.md ships (RedissonLockRegistrar.java), as a
    // service runs it: a 1 s TTL here, kept alive every third of it.
    java.ok("register billing-java pod-3 1000 team=payments")
        .await;
    let status = json(&url, &["status", "ledger"]).await;
    let who = &status["clients"][&java.client_id];
    assert_eq!(
        (&who["service"], &who["instance"], &who["runtime"]),
        (
            &Json::from("billing-java"),
            &Json::from("pod-3"),
            &Json::from("java")
        )
    );
    assert_eq!(who["labels"]["team"], "payments", "{status}");
    // (With its version where the jar's manifest says it: a shaded jar
    // does not.)
    assert!(
        who["version"].as_str().unwrap().starts_with("redisson"),
        "{who}"
    );
    let text = run(&url, &["inspect", "ledger"]).await.stdout;
    assert!(
        text.contains("who: billing-java/pod-3 on ") && text.contains("(team=payments)"),
        "{text}"
    );
    // Kept alive past its TTL, its start time kept: a refresh is a PEXPIRE.
    let key = format!("redisson_lock__client:{}", java.client_id);
    let started: String = raw.hget(&key, "started").await.unwrap();
    let first_end =
        std::time::Instant::now() + Duration::from_millis(raw.pttl::<u64, _>(&key).await.unwrap());
    until("the entry's TTL renewed", || async {
        let left: i64 = raw.pttl(&key).await.unwrap();
        left > 0
            && std::time::Instant::now() + Duration::from_millis(left as u64)
                > first_end + Duration::from_millis(200)
    })
    .await;
    assert_eq!(
        raw.hget::<String, _, _>(&key, "started").await.unwrap(),
        started
    );
    // Registered again with other labels: the stale ones go.
    java.ok("register billing-java pod-3 1000 tier=gold").await;
    let labels: Vec<String> = raw.hkeys(&key).await.unwrap();
    assert!(labels.contains(&"label:tier".to_string()), "{labels:?}");
    assert!(!labels.contains(&"label:team".to_string()), "{labels:?}");
    // Closed at shutdown: the entry goes with it.
    java.ok("unregister").await;
    assert_eq!(raw.exists::<i64, _>(&key).await.unwrap(), 0);
    java.kill().await;
}

/// The documented rules at work (docs/acl.md, docs/operations.md): `run`
/// and `elect` under the service rule, `status`, `ls` and `inspect` under
/// the read-only operator rule, which names the holder from the registry.
#[tokio::test]
async fn the_documented_acl_rules_run_the_cli() {
    if common::server_major() < 7 {
        // Read-only key patterns (`%R~`) came with Redis 7 (channel ones
        // with 6.2): the matrix's Redis 6.0 has neither rule's dialect.
        eprintln!("skipped: the documented rules need Redis 7 or Valkey");
        return;
    }
    let operator = common::OPERATOR_ACL_RULE;
    let mut flags = vec!["--user", "locker"];
    flags.extend(common::LOCK_ACL_RULE);
    flags.extend(["--user", "operator"]);
    flags.extend(operator.split(' '));
    let server = RedisServer::start_with(&flags).await;
    let as_user =
        |user: &str, password: &str| format!("redis://{user}:{password}@127.0.0.1:{}", server.port);
    let (locker, looker) = (
        as_user("locker", "locker-pw"),
        as_user("operator", "operator-pw"),
    );

    let (mut child, _lines) = start_run(&locker, &["app:job"], "echo ready; read line").await;
    let status = json(&looker, &["status", "app:job"]).await;
    let id = status["holders"][0]["client_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        status["clients"][&id]["labels"]["command"], "sh",
        "{status}"
    );
    assert_eq!(
        entry(&json(&looker, &["ls", "app:*"]).await, "app:job")["clients"][&id]["service"],
        "redisson-lock"
    );
    assert_eq!(
        json(&looker, &["inspect", "app:job"]).await["clients"][&id]["runtime"],
        "rust"
    );
    assert_eq!(finish(&mut child).await, 0);

    let out = run(&locker, &["elect", "app:leader", "--", "echo", "leading"]).await;
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, "leading"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_inspect_doctor_and_top_on_a_cluster() {
    use common::topology::Cluster;
    let cluster = Cluster::start().await;
    let url = cluster.url();
    let holder = redisson_lock::RedissonClient::connect(config(&url, Duration::from_secs(30)))
        .await
        .unwrap();
    let waiter = redisson_lock::RedissonClient::connect(config(&url, Duration::from_secs(30)))
        .await
        .unwrap();
    let names: Vec<String> = (0..12).map(|i| format!("c:{i}")).collect();
    let mut owners = std::collections::BTreeSet::new();
    let mut guards = vec![];
    for name in &names {
        owners.insert(cluster.owner_of(redisson_lock::naming::slot(name)).await);
        guards.push(holder.lock(name).unwrap().lock().await.unwrap());
    }
    assert_eq!(owners.len(), 3, "the names cover every primary");
    // A waiter, counted wherever its client subscribed (a sharded channel
    // on its slot's primary where the nodes have sharded pub/sub).
    let waiting = {
        let lock = waiter.lock("c:0").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    let channel = redisson_lock::naming::channel_name("c:0");
    until("waiter subscribed", || async {
        cluster.subscribers(&channel).await == 1
    })
    .await;
    let list = json(&url, &["ls", "c:*", "--count", "10"]).await;
    let listed: Vec<&str> = list["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(listed, sorted);
    for o in list["objects"].as_array().unwrap() {
        assert_eq!(o["holders"][0]["client_id"], holder.id());
    }
    assert_eq!(entry(&list, "c:0")["subscribers"], 1);
    assert_eq!(entry(&list, "c:1")["subscribers"], 0);
    let info = json(&url, &["inspect", "c:0"]).await;
    assert_eq!(info["channels"][0]["subscribers"], 1);
    // The table shows every owner id whole.
    let out = run(&url, &["ls", "c:*"]).await;
    for guard in &guards {
        assert!(
            out.stdout.contains(&format!(":{}", guard.owner())),
            "{}",
            out.stdout
        );
    }

    // doctor: a fair line of each kind of trouble, and a latch without TTL,
    // on every primary; each fix runs on its keys' node.
    let mut fixable: Vec<(String, u16)> = vec![];
    for i in 0.. {
        let name = format!("d:{i}");
        let node = cluster.owner_of(redisson_lock::naming::slot(&name)).await;
        if !fixable.iter().any(|(_, n)| *n == node) {
            fixable.push((name, node));
        }
        if fixable.len() == 3 {
            break;
        }
    }
    let redis = fred::types::Builder::from_config(holder.config().__fred_config().unwrap())
        .build()
        .unwrap();
    redis.init().await.unwrap();
    let someone = uuid::Uuid::new_v4();
    for (name, _) in &fixable {
        let queue = redisson_lock::naming::fair_queue_name(name);
        let deadlines = redisson_lock::naming::fair_timeout_name(name);
        let (undated, overdue) = (format!("{someone}:1"), format!("{someone}:2"));
        let _: () = redis
            .rpush(&queue, vec![undated, overdue.clone()])
            .await
            .unwrap();
        let _: () = redis
            .zadd(&deadlines, None, None, false, false, (1.0, overdue))
            .await
            .unwrap();
        let latch = format!("redisson_unlock_latch:{{{name}}}:0123456789abcdef0123456789abcdef");
        let _: () = redis.set(&latch, "1", None, None, false).await.unwrap();
    }
    // The fair line's clock is read on its own node: TIME there, nowhere else.
    let primaries = cluster.primaries().await;
    let times = || async {
        let mut calls = vec![];
        for port in &primaries {
            let c = common::topology::node_client(*port).await;
            calls.push(command_calls(&c, "time").await);
            let _ = c.quit().await;
        }
        calls
    };
    let (one, one_node) = &fixable[0];
    let before = times().await;
    let (code, found) = doctor(&url, &[one.as_str()]).await;
    assert_eq!(code, 1, "{found:?}");
    let after = times().await;
    for ((port, before), after) in primaries.iter().zip(&before).zip(&after) {
        let read = after - before;
        if port == one_node {
            assert!(read >= 1, "TIME on {port}, the node of {one}");
        } else {
            assert_eq!(read, 0, "TIME on {port}, not the node of {one}");
        }
    }
    let (code, found) = doctor(&url, &["d:*"]).await;
    assert_eq!(code, 1, "undated waiters are harmful: {found:?}");
    let mut want = vec![];
    for (name, _) in &fixable {
        for check in [
            "fair-waiter-overdue",
            "fair-waiter-without-deadline",
            "latch-without-ttl",
        ] {
            want.push((name.clone(), check.to_string()));
        }
    }
    want.sort();
    assert_eq!(checks(&found), want);
    let (code, fixed) = doctor(&url, &["d:*", "--fix"]).await;
    assert_eq!(code, 0, "everything fixed: {fixed:?}");
    for f in &fixed {
        assert_eq!(f["fixed"], true, "{f}");
    }
    for (name, _) in &fixable {
        let queue = redisson_lock::naming::fair_queue_name(name);
        let deadlines = redisson_lock::naming::fair_timeout_name(name);
        let left: i64 = redis.exists(vec![queue, deadlines]).await.unwrap();
        assert_eq!(left, 0, "{name}'s line is clear");
        let latch = format!("redisson_unlock_latch:{{{name}}}:0123456789abcdef0123456789abcdef");
        let ttl: i64 = redis.pttl(&latch).await.unwrap();
        assert!(ttl > 0, "{name}'s latch expires: {ttl}");
    }
    let (code, left) = doctor(&url, &["d:*"]).await;
    assert_eq!((code, left.len()), (0, 0), "{left:?}");

    // top: every primary's objects, the waited-for one first.
    let top = Top::start(&url, &["c:*"], 120, 40);
    let screen = top
        .tmux
        .until("every lock on screen", |s| {
            names.iter().all(|name| row(s, name).is_some())
        })
        .await;
    let (at, cells) = row(&screen, "c:0").unwrap();
    assert_eq!(&cells[1..3], ["lock", "1"], "{screen}");
    assert!(
        names.iter().all(|name| row(&screen, name).unwrap().0 >= at),
        "the waited-for lock first:\n{screen}"
    );
    for guard in &guards {
        assert!(screen.contains(&format!(":{}", guard.owner())), "{screen}");
    }
    assert_eq!(top.quit().await, "0");

    waiting.abort();
    drop(guards);
    holder.shutdown().await;
    waiter.shutdown().await;
}

/// The findings of `doctor --json` (its exit code first).
async fn doctor(url: &str, args: &[&str]) -> (i32, Vec<Json>) {
    let out = run(url, &[&["doctor", "--json"], args].concat()).await;
    let report: Json = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", out.stdout, out.stderr));
    assert_eq!(report["schema"], 1, "{report}");
    (out.code, report["findings"].as_array().unwrap().clone())
}

fn checks(findings: &[Json]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = findings
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().into(),
                f["check"].as_str().unwrap().into(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn doctor_finds_what_crashes_leave_and_fixes_only_what_nobody_can_use() {
    let server = RedisServer::start().await;
    let url = server.url();
    let raw = server.raw().await;
    // A JVM that crashes while waiting in a fair lock's line (its budget is
    // 100 ms past the holder's 1 s lease), while holding a read lock, and
    // with a permit leased for 100 ms.
    let java = JavaPeer::start_with_fair_wait("redisson-4", "4.7.0", &url, 30_000, 100).await;
    let rust = client(&server, Duration::from_secs(1)).await;
    let fair = rust.fair_lock("payouts").unwrap().lock().await.unwrap();
    let _java_waits = java.send("flock payouts 9 -1").await;
    until("Java in line", || async {
        raw.llen::<i64, _>("redisson_lock_queue:{payouts}")
            .await
            .unwrap()
            == 1
    })
    .await;
    java.ok("rlock report 6 -1").await;
    java.ok("pesTrySetPermits slots 2").await;
    java.ok("pesAcquire slots 100").await;
    java.ok("fencedLock ledger 8 -1").await;
    java.ok("fencedUnlock ledger 8").await;
    let java_id = java.client_id.clone();
    java.kill().await;
    // The operator frees the crashed reader's lock: its hold key stays.
    let out = run(&url, &["force-unlock", "report"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let hold_key = format!("{{report}}:{java_id}:6:rwlock_timeout:1");
    assert_eq!(raw.exists::<i64, _>(&hold_key).await.unwrap(), 1);
    // What no client writes, but hand edits and restores leave: a lock and a
    // latch without TTL, a place in line without a deadline.
    let _: () = raw
        .hset("stuck", (format!("{java_id}:3"), "1"))
        .await
        .unwrap();
    let latch = "redisson_unlock_latch:{gone}:0123456789abcdef0123456789abcdef";
    let _: () = raw.set(latch, "1", None, None, false).await.unwrap();
    let undated = format!("{java_id}:4");
    let _: () = raw
        .rpush("redisson_lock_queue:{line}", undated.as_str())
        .await
        .unwrap();

    // Wait until the dead waiter's deadline and the lease have passed.
    until("deadline and lease past", || async {
        let (_, found) = doctor(&url, &[]).await;
        let c = checks(&found);
        c.contains(&("payouts".into(), "fair-waiter-overdue".into()))
            && c.contains(&("slots".into(), "ended-permit-lease".into()))
    })
    .await;
    let (code, found) = doctor(&url, &[]).await;
    assert_eq!(code, 1, "harmful findings");
    assert_eq!(
        checks(&found),
        [
            ("gone", "latch-without-ttl"),
            ("ledger", "fenced-token-without-lock"),
            ("line", "fair-waiter-without-deadline"),
            ("payouts", "fair-waiter-overdue"),
            ("report", "read-hold-without-reader"),
            ("slots", "ended-permit-lease"),
            ("stuck", "lock-without-ttl"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    for f in &found {
        let harmful = matches!(
            f["check"].as_str().unwrap(),
            "fair-waiter-without-deadline" | "lock-without-ttl"
        );
        assert_eq!(f["harmful"], harmful, "{f}");
        assert!(!f["why"].as_str().unwrap().is_empty());
    }
    // The text names each finding and says why.
    let out = run(&url, &["doctor"]).await;
    assert!(
        out.stdout.contains("harmful: fair-lock scripts stop"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("7 finding(s), 2 harmful"),
        "{}",
        out.stdout
    );

    let (code, fixed) = doctor(&url, &["--fix"]).await;
    assert_eq!(code, 1, "the lock without TTL is left to the operator");
    for f in &fixed {
        let want = match f["check"].as_str().unwrap() {
            "lock-without-ttl" | "fenced-token-without-lock" => Json::Null,
            _ => Json::Bool(true),
        };
        assert_eq!(f["fixed"], want, "{f}");
    }
    assert_eq!(
        raw.llen::<i64, _>("redisson_lock_queue:{payouts}")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        raw.zcard::<i64, _>("redisson_lock_timeout:{payouts}")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        raw.exists::<i64, _>("redisson_lock_queue:{line}")
            .await
            .unwrap(),
        0
    );
    assert_eq!(raw.exists::<i64, _>(&hold_key).await.unwrap(), 0);
    let ttl: i64 = raw.pttl(latch).await.unwrap();
    assert!(ttl > 0, "{ttl}");
    let available: i64 = raw.get("slots").await.unwrap();
    assert_eq!(available, 2, "the ended lease's permit is back");
    let token: i64 = raw.get("redisson_lock_token:{ledger}").await.unwrap();
    assert_eq!(token, 1, "kept");
    assert_eq!(raw.exists::<i64, _>("stuck").await.unwrap(), 1, "kept");
    // The holder still holds the fair lock it had.
    assert!(fair.hold_count().await.unwrap() == 1);

    let out = run(&url, &["force-unlock", "stuck"]).await;
    assert_eq!(out.code, 0);
    let (code, left) = doctor(&url, &[]).await;
    assert_eq!(code, 0, "{left:?}");
    assert_eq!(
        checks(&left),
        [(
            "ledger".to_string(),
            "fenced-token-without-lock".to_string()
        )],
        "a fenced lock's token is kept"
    );
    fair.unlock().await.unwrap();
    rust.shutdown().await;
}

#[tokio::test]
async fn run_holds_every_kind_of_lock() {
    let server = RedisServer::start().await;
    let url = server.url();
    let raw = server.raw().await;
    let rust = client(&server, Duration::from_secs(30)).await;

    // --fair: held by the CLI's client while the command runs.
    let (mut child, _) = start_run(&url, &["--fair", "line"], "echo ready; read x").await;
    let info = json(&url, &["inspect", "line"]).await;
    assert_eq!(info["holders"].as_array().unwrap().len(), 1);
    assert!(rust
        .fair_lock("line")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_none());
    assert_eq!(finish(&mut child).await, 0);
    assert_eq!(raw.exists::<i64, _>("line").await.unwrap(), 0);

    // --read twice at once; --write waits for them (exit 75 with --wait 0s).
    let (mut r1, _) = start_run(&url, &["--read", "doc"], "echo ready; read x").await;
    let (mut r2, _) = start_run(&url, &["--read", "doc"], "echo ready; read x").await;
    let info = json(&url, &["inspect", "doc"]).await;
    assert_eq!(
        (
            info["mode"].as_str(),
            info["readers"].as_array().unwrap().len()
        ),
        (Some("read"), 2)
    );
    let out = run(
        &url,
        &["run", "--write", "--wait", "0s", "doc", "--", "true"],
    )
    .await;
    assert_eq!(out.code, 75, "{}", out.stderr);
    assert!(
        out.stderr.contains("`doc` not acquired within 0s"),
        "{}",
        out.stderr
    );
    assert_eq!((finish(&mut r1).await, finish(&mut r2).await), (0, 0));
    let out = run(
        &url,
        &[
            "run",
            "--write",
            "doc",
            "--",
            "sh",
            "-c",
            "echo $REDISSON_LOCK_NAME",
        ],
    )
    .await;
    assert_eq!((out.code, out.stdout.trim()), (0, "doc"), "{}", out.stderr);

    // --fenced: the token, larger each time, in the command's environment.
    for token in ["1", "2"] {
        let out = run(
            &url,
            &[
                "run",
                "--fenced",
                "ledger",
                "--",
                "sh",
                "-c",
                "echo $REDISSON_LOCK_TOKEN",
            ],
        )
        .await;
        assert_eq!((out.code, out.stdout.trim()), (0, token), "{}", out.stderr);
    }
    // Kinds exclude each other.
    let out = run(&url, &["run", "--fair", "--fenced", "x", "--", "true"]).await;
    assert_eq!(out.code, 125, "{}", out.stderr);
    rust.shutdown().await;
}

#[tokio::test]
async fn run_holds_permits_and_renews_expirable_leases() {
    let server = RedisServer::start().await;
    let url = server.url();
    let raw = server.raw().await;

    // --semaphore N: a fleet-wide limit of 1.
    let out = run(&url, &["semaphore", "set-permits", "exports", "1"]).await;
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, "exports: 1 permits"),
        "{}",
        out.stderr
    );
    let out = run(&url, &["semaphore", "set-permits", "exports", "5"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("add-permits"),
        "says what to do: {}",
        out.stderr
    );
    let (mut child, _) =
        start_run(&url, &["--semaphore", "1", "exports"], "echo ready; read x").await;
    assert_eq!(raw.get::<i64, _>("exports").await.unwrap(), 0);
    let out = run(
        &url,
        &[
            "run",
            "--semaphore",
            "1",
            "--wait",
            "0s",
            "exports",
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(out.code, 75);
    assert!(
        out.stderr.contains("1 permit(s) of `exports` not acquired"),
        "{}",
        out.stderr
    );
    assert_eq!(finish(&mut child).await, 0);
    assert_eq!(raw.get::<i64, _>("exports").await.unwrap(), 1);
    let out = run(&url, &["semaphore", "add-permits", "exports", "-1"]).await;
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, "exports: 0 permits available"),
        "{}",
        out.stderr
    );
    let out = run(
        &url,
        &[
            "run",
            "--semaphore",
            "1",
            "--lease",
            "1s",
            "exports",
            "--",
            "true",
        ],
    )
    .await;
    assert_eq!(out.code, 125);
    assert!(
        out.stderr.contains("--expirable-semaphore"),
        "{}",
        out.stderr
    );

    // --expirable-semaphore N --lease: renewed while the command runs.
    let out = run(
        &url,
        &["semaphore", "set-permits", "--expirable", "slots", "1"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (mut child, mut lines) = start_run(
        &url,
        &["--expirable-semaphore", "1", "--lease", "600ms", "slots"],
        "echo ready; echo $REDISSON_LOCK_PERMIT_IDS; read x",
    )
    .await;
    let id = lines.next_line().await.unwrap().unwrap();
    let info = json(&url, &["inspect", "slots"]).await;
    assert_eq!(info["leases"][0]["id"], id.as_str());
    let first = info["leases"][0]["expires_at_ms"].as_i64().unwrap();
    until("the lease renewed", || async {
        let info = json(&url, &["inspect", "slots"]).await;
        info["leases"][0]["expires_at_ms"].as_i64().unwrap() > first
    })
    .await;
    assert_eq!(finish(&mut child).await, 0);
    assert_eq!(raw.zcard::<i64, _>("{slots}:timeout").await.unwrap(), 0);
    assert_eq!(raw.get::<i64, _>("slots").await.unwrap(), 1);
    // A lease someone removes is lost: the command is stopped, exit 76.
    let (mut child, mut lines) = start_run(
        &url,
        &["--expirable-semaphore", "1", "--lease", "600ms", "slots"],
        "trap 'echo terminated; exit 0' TERM; echo ready; while :; do sleep 0.05; done",
    )
    .await;
    let _: i64 = raw.zremrangebyrank("{slots}:timeout", 0, -1).await.unwrap();
    let status = within("run exits", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(76));
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("terminated")
    );
}

#[tokio::test]
async fn latch_commands_set_count_down_and_wait() {
    let server = RedisServer::start().await;
    let url = server.url();
    let out = run(&url, &["latch", "set", "deploy", "2"]).await;
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, "deploy: count set to 2"),
        "{}",
        out.stderr
    );
    let out = run(&url, &["latch", "set", "deploy", "5"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("already set (count 2)"),
        "{}",
        out.stderr
    );
    let out = run(&url, &["latch", "wait", "deploy", "--wait", "50ms"]).await;
    assert_eq!(out.code, 75, "{}", out.stderr);
    let mut waiter = cli(&url);
    waiter.args(["latch", "wait", "deploy"]);
    let waiter = waiter.spawn().unwrap();
    await_subscribers(&server, "redisson_countdownlatch__channel__{deploy}", 1).await;
    let info = json(&url, &["inspect", "deploy"]).await;
    assert_eq!(info["kind"], "count-down-latch", "told by its waiter");
    for left in ["1", "0"] {
        let out = run(&url, &["latch", "count-down", "deploy"]).await;
        assert_eq!(
            (out.code, out.stdout.trim()),
            (0, format!("deploy: count {left}").as_str())
        );
    }
    let out = within("wait returns", waiter.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "deploy: open");
}

#[tokio::test]
async fn errors_are_one_line_and_say_what_went_wrong() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    for args in [
        vec!["ls"],
        vec!["inspect", "x"],
        vec!["doctor"],
        vec!["latch", "count-down", "x"],
        vec!["semaphore", "add-permits", "x", "1"],
        vec!["run", "--semaphore", "1", "x", "--", "true"],
    ] {
        let out = run(&url, &args).await;
        let code = if args[0] == "run" { 125 } else { 2 };
        assert_eq!(out.code, code, "{args:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains("cannot connect"), "{}", out.stderr);
    }
    let server = RedisServer::start().await;
    for (args, code, says) in [
        (vec!["ls", "--count", "0"], 2, "0 is not in 1.."),
        (vec!["inspect", ""], 2, "object name is empty"),
        (
            vec!["run", "--expirable-semaphore", "0", "x", "--", "true"],
            125,
            "permits must be between 1 and",
        ),
        (vec!["top"], 2, "top needs a terminal"),
    ] {
        let out = run(&server.url(), &args).await;
        assert_eq!(out.code, code, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

/// The CLI with `args` (then `--json`), its wall clock moved by `shift`
/// (`+1h`, `-1h`) and its monotonic clock left alone.
async fn json_at(url: &str, shift: &str, args: &[&str]) -> (i32, Json) {
    let mut cmd = cli(url);
    cmd.env("LD_PRELOAD", common::libfaketime())
        .env("FAKETIME", shift)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .args(args)
        .arg("--json");
    let out = output(cmd).await;
    let json = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", out.stdout, out.stderr));
    (out.code, json)
}

/// The server's clock (`TIME`), in ms.
async fn server_ms(raw: &Client) -> i64 {
    let time: Vec<String> = raw
        .custom(
            fred::types::CustomCommand::new_static("TIME", fred::types::ClusterHash::Random, false),
            Vec::<String>::new(),
        )
        .await
        .unwrap();
    time[0].parse::<i64>().unwrap() * 1000 + time[1].parse::<i64>().unwrap() / 1000
}

#[tokio::test]
async fn doctor_judges_fair_deadlines_by_the_servers_clock() {
    let server = RedisServer::start().await;
    let url = server.url();
    let raw = server.raw().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let other = client(&server, Duration::from_secs(30)).await;
    let held = holder.fair_lock("line").unwrap().lock().await.unwrap();
    // A live waiter: its deadline is minutes ahead by every clock here.
    let waiting = {
        let lock = other.fair_lock("line").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    until("waiter in line and listening", || async {
        let info = json(&url, &["inspect", "line"]).await;
        info["queue"][0]["subscribers"] == 1
    })
    .await;
    let live: String = raw.lindex("redisson_lock_queue:{line}", 0).await.unwrap();
    let queued = || async {
        raw.lrange::<Vec<String>, _>("redisson_lock_queue:{line}", 0, -1)
            .await
            .unwrap()
    };

    // The CLI's clock an hour ahead: by it the live waiter's deadline is
    // long past (inspect, which uses the CLI's clock, says so), but not by
    // the server's, so doctor leaves it alone.
    let (_, info) = json_at(&url, "+1h", &["inspect", "line"]).await;
    assert_eq!(
        info["queue"][0]["overdue"], true,
        "the CLI's clock is ahead: {info}"
    );
    let (code, found) = json_at(&url, "+1h", &["doctor", "--fix"]).await;
    assert_eq!(
        (code, found["findings"].clone()),
        (0, Json::Array(vec![])),
        "{found}"
    );
    assert_eq!(
        queued().await,
        std::slice::from_ref(&live),
        "the live waiter keeps its place"
    );

    // A waiter whose deadline passed a minute ago by the server's clock,
    // and the CLI's clock an hour behind: doctor removes it all the same.
    let gone = format!("{}:7", uuid::Uuid::new_v4());
    let _: () = raw
        .rpush("redisson_lock_queue:{line}", gone.as_str())
        .await
        .unwrap();
    let past = server_ms(&raw).await - 60_000;
    let _: () = raw
        .zadd(
            "redisson_lock_timeout:{line}",
            None,
            None,
            false,
            false,
            (past as f64, gone.as_str()),
        )
        .await
        .unwrap();
    let (_, info) = json_at(&url, "-1h", &["inspect", "line"]).await;
    assert_eq!(
        info["queue"][1]["overdue"], false,
        "the CLI's clock is behind: {info}"
    );
    let (code, found) = json_at(&url, "-1h", &["doctor", "--fix"]).await;
    let found = found["findings"].as_array().unwrap();
    assert_eq!(code, 0, "{found:?}");
    assert_eq!(
        checks(found),
        [("line".to_string(), "fair-waiter-overdue".to_string())]
    );
    assert_eq!(found[0]["fixed"], true);
    let evidence = &found[0]["evidence"];
    assert_eq!(evidence["deadline_ms"], past);
    assert!(evidence["server_time_ms"].as_i64().unwrap() >= past + 60_000);
    assert_eq!(queued().await, [live], "only the overdue waiter left");

    held.unlock().await.unwrap();
    within("the waiter gets the lock", waiting)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    holder.shutdown().await;
    other.shutdown().await;
}

#[tokio::test]
async fn doctor_names_dead_fair_waiters_and_leaves_them_until_their_deadline() {
    let server = RedisServer::start().await;
    let url = server.url();
    let raw = server.raw().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let held = holder.fair_lock("payouts").unwrap().lock().await.unwrap();
    let line = "redisson_lock_queue:{payouts}";
    let in_line = |n: i64| {
        let (raw, server) = (&raw, &server);
        async move {
            until("waiter in line", || async {
                raw.llen::<i64, _>(line).await.unwrap() == n
            })
            .await;
            let field: String = raw.lindex(line, n - 1).await.unwrap();
            let channel = redisson_lock::naming::fair_waiter_channel("payouts", &field);
            await_subscribers(server, &channel, 1).await;
            (field, channel)
        }
    };
    // Three waiters in line: a JVM (Redisson 4.7.0), a Rust process (the
    // CLI's `run --fair`) and a Rust client in this test.
    let java = JavaPeer::start("redisson-4", "4.7.0", &url, 30_000).await;
    let _java_waits = java.send("flock payouts 9 -1").await;
    let (java_field, java_channel) = in_line(1).await;
    let mut rust_process = cli(&url);
    rust_process.args(["run", "--fair", "payouts", "--", "true"]);
    let mut rust_process = rust_process.spawn().unwrap();
    let (process_field, process_channel) = in_line(2).await;
    let live = client(&server, Duration::from_secs(30)).await;
    let live_waits = {
        let lock = live.fair_lock("payouts").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    let (live_field, _) = in_line(3).await;
    let (code, found) = doctor(&url, &[]).await;
    assert_eq!((code, found.len()), (0, 0), "live waiters: {found:?}");

    // The JVM and the Rust process die in line without giving up.
    java.kill().await;
    rust_process.kill().await.unwrap();
    await_subscribers(&server, &java_channel, 0).await;
    await_subscribers(&server, &process_channel, 0).await;

    let (code, found) = doctor(&url, &[]).await;
    assert_eq!(code, 1, "they hold up the line: {found:?}");
    assert_eq!(
        checks(&found),
        [("payouts", "fair-waiter-probably-gone"); 2].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    for (f, (field, channel, place)) in found.iter().zip([
        (&java_field, &java_channel, 1),
        (&process_field, &process_channel, 2),
    ]) {
        assert!(
            f["detail"].as_str().unwrap().contains(field.as_str()),
            "{f}"
        );
        assert_eq!(f["harmful"], true, "{f}");
        assert_eq!(f["fix"], Json::Null, "nothing before its deadline: {f}");
        let evidence = &f["evidence"];
        assert_eq!(evidence["channel"], channel.as_str(), "{f}");
        assert_eq!(evidence["subscribers"], 0, "{f}");
        assert_eq!(evidence["place"], place, "{f}");
        let (deadline, now) = (
            evidence["deadline_ms"].as_i64().unwrap(),
            evidence["server_time_ms"].as_i64().unwrap(),
        );
        assert!(deadline > now, "a deadline still ahead: {f}");
    }
    let out = run(&url, &["doctor"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stdout
            .contains(&format!("waiter {java_field} (place 1) is probably gone")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("0 subscribers"), "{}", out.stdout);

    // --fix leaves them: Redisson's scripts would, until their deadlines.
    let (code, fixed) = doctor(&url, &["--fix"]).await;
    assert_eq!(code, 1, "{fixed:?}");
    assert!(fixed.iter().all(|f| f["fixed"].is_null()), "{fixed:?}");
    let left: Vec<String> = raw.lrange(line, 0, -1).await.unwrap();
    assert_eq!(left, [java_field, process_field, live_field]);

    held.unlock().await.unwrap();
    live_waits.abort();
    holder.shutdown().await;
    live.shutdown().await;
}

/// `force-unlock` wakes a JVM waiter (Redisson 4.7.0) where it listens: a
/// fair lock's first waiter on its own channel, a read-write lock's reader
/// on the read-write channel. The holder's 60 s lease is longer than the
/// test waits, so only the message can wake them in time.
#[tokio::test]
async fn force_unlock_wakes_jvm_waiters_of_fair_and_read_write_locks() {
    let server = RedisServer::start().await;
    let url = server.url();
    let raw = server.raw().await;
    let holder = client(&server, Duration::from_secs(60)).await;
    let java = JavaPeer::start("redisson-4", "4.7.0", &url, 30_000).await;

    let _held = holder.fair_lock("jvm-fair").unwrap().lock().await.unwrap();
    let before = common::java::scripts_run(&raw).await;
    let waiting = java.send("flock jvm-fair 7 -1").await;
    let channel = format!("redisson_lock__channel:{{jvm-fair}}:{}:7", java.client_id);
    common::java::java_is_waiting(&java, &server, &raw, &channel, before).await;
    let out = run(&url, &["force-unlock", "jvm-fair"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    within("the JVM's fair waiter", waiting)
        .await
        .unwrap()
        .unwrap();
    let holders: std::collections::HashMap<String, String> = raw.hgetall("jvm-fair").await.unwrap();
    assert_eq!(
        holders.keys().collect::<Vec<_>>(),
        [&format!("{}:7", java.client_id)]
    );
    java.ok("funlock jvm-fair 7").await;

    let rw = holder.read_write_lock("jvm-rw").unwrap();
    let _written = rw.write().lock().await.unwrap();
    let before = common::java::scripts_run(&raw).await;
    let reading = java.send("rlock jvm-rw 8 -1").await;
    common::java::java_is_waiting(&java, &server, &raw, "redisson_rwlock:{jvm-rw}", before).await;
    let out = run(&url, &["force-unlock", "jvm-rw"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    within("the JVM's reader", reading).await.unwrap().unwrap();
    let mode: Option<String> = raw.hget("jvm-rw", "mode").await.unwrap();
    assert_eq!(mode.as_deref(), Some("read"));
    java.ok("runlock jvm-rw 8").await;
    java.quit().await;
    holder.shutdown().await;
}
