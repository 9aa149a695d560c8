//! The `redisson-lock` binary against a real redis-server.

use redisson_lock_testkit as common;
mod support;

use std::time::Duration;

use common::*;
use fred::prelude::*;
use support::{cli, output, start_run};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[tokio::test]
async fn run_holds_the_lock_while_the_command_runs_and_returns_its_status() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let mut unlocks = Observer::new(&server, &["redisson_lock__channel:{job}"], &[]).await;
    let (mut child, _) = start_run(&server.url(), &["job"], "echo ready; read line; exit 7").await;
    // Held by the CLI's client, in Redisson's layout, while the command runs.
    let fields: Vec<String> = raw.hkeys("job").await.unwrap();
    assert_eq!(fields.len(), 1);
    let (client_id, owner) = fields[0].rsplit_once(':').unwrap();
    assert!(uuid::Uuid::parse_str(client_id).is_ok() && owner.parse::<u64>().is_ok());
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"go\n")
        .await
        .unwrap();
    let status = within("run exits", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(7));
    assert_eq!(raw.exists::<i64, _>("job").await.unwrap(), 0);
    assert_eq!(unlocks.next().await.1, "0");

    let mut cmd = cli(&server.url());
    cmd.args(["run", "job", "--", "true"]);
    assert_eq!(output(cmd).await.code, 0);
}

#[tokio::test]
async fn run_exits_75_when_the_lock_stays_taken() {
    let server = RedisServer::start().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let guard = holder.lock("busy").unwrap().lock().await.unwrap();
    let mut cmd = cli(&server.url());
    cmd.args(["run", "busy", "--wait", "200ms", "--", "echo", "never"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 75);
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("not acquired within 200ms"));
    // flock's and timeout's habits: seconds without a unit, -w, -n, -E;
    // `elect` gives up the same way.
    for (args, code, said) in [
        (vec!["run", "busy", "--wait", "0.2"], 75, "within 200ms"),
        (vec!["run", "busy", "-w", "0"], 75, "within 0s"),
        (vec!["run", "busy", "-n"], 75, "within 0s"),
        (vec!["run", "busy", "-n", "-E", "9"], 9, "within 0s"),
        (vec!["elect", "busy", "-w", "0.1"], 75, "within 100ms"),
        (
            vec!["elect", "busy", "--wait", "0", "--conflict-exit-code", "0"],
            0,
            "within 0s",
        ),
        (
            // run's own failures (usage errors too) exit 125.
            vec!["run", "busy", "-n", "-w", "1"],
            125,
            "cannot be used with",
        ),
        (
            vec!["run", "busy", "--wait=-1"],
            125,
            "seconds must be a number from 0 up",
        ),
        (
            vec!["run", "busy", "--wait", "soon"],
            125,
            "or seconds: 10, 0.5",
        ),
    ] {
        let mut cmd = cli(&server.url());
        cmd.args(&args).args(["--", "echo", "never"]);
        let out = output(cmd).await;
        assert_eq!(out.code, code, "{args:?}: {}", out.stderr);
        assert_eq!(out.stdout, "", "{args:?}");
        assert!(out.stderr.contains(said), "{args:?}: {}", out.stderr);
    }
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn run_stops_the_command_and_exits_76_when_the_lock_is_lost() {
    let server = RedisServer::start().await;
    let other = client(&server, Duration::from_secs(30)).await;
    let (mut child, mut lines) = start_run(
        &server.url(),
        &["--watchdog-timeout", "1s", "fragile"],
        "trap 'echo terminated; exit 0' TERM; echo ready; while :; do sleep 0.05; done",
    )
    .await;
    assert!(other.lock("fragile").unwrap().force_unlock().await.unwrap());
    let status = within("run exits after the loss", child.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(76));
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("terminated")
    );
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert!(stderr.contains("was lost"), "{stderr}");
}

/// After a loss the whole command goes (its process group: what a `sh -c`
/// started too), and what ignores SIGTERM gets SIGKILL after --kill-after.
#[tokio::test]
async fn a_lost_run_stops_the_whole_command_even_what_ignores_sigterm() {
    let server = RedisServer::start().await;
    let other = client(&server, Duration::from_secs(30)).await;
    let (mut child, mut lines) = start_run(
        &server.url(),
        &["--watchdog-timeout", "1s", "--kill-after", "1s", "stubborn"],
        // The ignored TERM is inherited by the background sleep.
        "trap '' TERM; sleep 1000 & echo ready; echo $!; while :; do sleep 0.05; done",
    )
    .await;
    let grandchild: i32 = within("the background pid", lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    assert!(other
        .lock("stubborn")
        .unwrap()
        .force_unlock()
        .await
        .unwrap());
    let status = within("run exits after the loss", child.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(76));
    common::topology::until("what the command started is gone", || async {
        // Gone, or dead and not yet reaped.
        std::fs::read_to_string(format!("/proc/{grandchild}/stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    })
    .await;
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert!(stderr.contains("outlived --kill-after 1s"), "{stderr}");
    other.shutdown().await;
}

/// The state letter of process `pid` (`R`, `S`, `T` stopped, `Z` dead and
/// not reaped), `None` once it is gone.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

fn kill(pid: u32, signal: i32) {
    // SAFETY: kill(2) on a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
}

/// `run` killed with SIGKILL (the OOM killer) leaves nobody to renew its
/// lock: its command, and what the command started, must go with it, or a
/// second `run` takes the expired lock while the first job still runs.
#[tokio::test]
async fn a_killed_run_takes_its_whole_command_with_it() {
    let server = RedisServer::start().await;
    let (mut child, mut lines) = start_run(
        &server.url(),
        &["--watchdog-timeout", "1s", "killed"],
        "sleep 1000 & echo ready; echo $$; echo $!; wait",
    )
    .await;
    let mut pids = vec![];
    for _ in 0..2 {
        let line = within("a pid", lines.next_line()).await.unwrap().unwrap();
        pids.push(line.parse::<i32>().unwrap());
    }
    let (shell, background) = (pids[0], pids[1]);
    kill(child.id().unwrap(), libc::SIGKILL);
    within("run killed", child.wait()).await.unwrap();
    for (what, pid) in [("the command", shell), ("what it started", background)] {
        common::topology::until(what, || async {
            process_state(pid).is_none_or(|s| s == 'Z')
        })
        .await;
    }
}

/// A hang-up (an ssh session that drops), SIGQUIT and the user signals go
/// to the command's process group, as INT and TERM do; `run` releases once
/// the command exits. Before, a SIGHUP ended `run` and left its command
/// running with nobody renewing the lock.
#[tokio::test]
async fn run_passes_hang_up_and_user_signals_to_its_command() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let (mut child, mut lines) = start_run(
        &server.url(),
        &["hangup"],
        "trap 'echo usr1' USR1; trap 'echo usr2' USR2; trap 'echo quit' QUIT; \
         trap 'echo hup; exit 3' HUP; echo ready; while :; do sleep 0.05; done",
    )
    .await;
    let run = child.id().unwrap();
    for (signal, echoed) in [
        (libc::SIGUSR1, "usr1"),
        (libc::SIGUSR2, "usr2"),
        (libc::SIGQUIT, "quit"),
    ] {
        kill(run, signal);
        let line = within("the command's trap", lines.next_line())
            .await
            .unwrap();
        assert_eq!(line.as_deref(), Some(echoed));
    }
    assert_eq!(
        raw.exists::<i64, _>("hangup").await.unwrap(),
        1,
        "still held"
    );
    kill(run, libc::SIGHUP);
    let line = within("the command's trap", lines.next_line())
        .await
        .unwrap();
    assert_eq!(line.as_deref(), Some("hup"));
    let status = within("run exits", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(raw.exists::<i64, _>("hangup").await.unwrap(), 0, "released");
}

/// Ctrl-Z stops the command with `run` (it is in a process group of its own,
/// which the terminal does not stop), and `fg` continues both. A stop that
/// outlasts the lock's lease loses it: then the command is not continued
/// but killed, and `run` exits 76.
#[tokio::test]
async fn ctrl_z_stops_the_command_with_run_and_a_long_stop_loses_the_lock() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    // One process, the command itself (`exec`): a shell looping over
    // `sleep` can be caught inside vfork, its child stopped before exec and
    // the shell itself in uninterruptible wait ('D', not 'T') for as long as
    // the child is stopped: stopped in effect, yet not as /proc says it.
    let (mut child, mut lines) = start_run(
        &server.url(),
        &["--watchdog-timeout", "1s", "stopped"],
        "echo ready; echo $$; exec sleep 1000",
    )
    .await;
    let shell: i32 = within("the shell's pid", lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    let run = child.id().unwrap();
    let both = |state: char| {
        move || async move {
            process_state(run as i32) == Some(state) && process_state(shell) == Some(state)
        }
    };
    kill(run, libc::SIGTSTP);
    common::topology::until("run and its command stopped", both('T')).await;
    kill(run, libc::SIGCONT);
    common::topology::until("both continued", || async {
        process_state(run as i32).is_some_and(|s| s != 'T')
            && process_state(shell).is_some_and(|s| s != 'T')
    })
    .await;
    assert_eq!(
        raw.exists::<i64, _>("stopped").await.unwrap(),
        1,
        "still held"
    );

    // Stopped until the lease runs out: nobody renews it meanwhile.
    kill(run, libc::SIGTSTP);
    common::topology::until("run and its command stopped", both('T')).await;
    common::topology::until("the lock expired", || async {
        raw.exists::<i64, _>("stopped").await.unwrap() == 0
    })
    .await;
    kill(run, libc::SIGCONT);
    let status = within("run exits", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(76));
    common::topology::until("the command killed, not continued", || async {
        process_state(shell).is_none_or(|s| s == 'Z')
    })
    .await;
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    // Found by the watchdog's first renewal after the stop, or by the
    // check `run` makes before it continues the command.
    assert!(stderr.contains("was lost"), "{stderr}");
    assert!(!stderr.contains("outlived --kill-after"), "{stderr}");
}

/// A command that cannot start exits as a shell (and timeout(1)) says:
/// 127 not found, 126 not runnable; the lock is given back.
#[tokio::test]
async fn run_exits_127_or_126_when_the_command_cannot_start() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let dir = common::topology::Scratch::new("cli-not-runnable");
    let plain = dir.0.join("not-executable");
    std::fs::write(&plain, "echo never").unwrap();
    for (command, code) in [
        ("/nonexistent/redisson-lock-test", 127),
        (plain.to_str().unwrap(), 126),
    ] {
        let mut cmd = cli(&server.url());
        cmd.args(["run", "--wait", "0s", "unstartable", "--", command]);
        let out = output(cmd).await;
        assert_eq!(out.code, code, "{command}: {}", out.stderr);
        assert!(out.stderr.contains("cannot run"), "{}", out.stderr);
        assert_eq!(raw.exists::<i64, _>("unstartable").await.unwrap(), 0);
    }
}

#[tokio::test]
async fn a_signal_to_run_reaches_the_command_and_the_lock_is_released() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let (mut child, mut lines) = start_run(
        &server.url(),
        &["signalled"],
        "trap 'echo got-term; exit 9' TERM; echo ready; while :; do sleep 0.05; done",
    )
    .await;
    assert_eq!(raw.exists::<i64, _>("signalled").await.unwrap(), 1);
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) };
    let status = within("run exits", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(9));
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("got-term")
    );
    assert_eq!(raw.exists::<i64, _>("signalled").await.unwrap(), 0);
}

#[tokio::test]
async fn status_decodes_a_redisson_hash_written_by_hand() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let java_id = "8743c9c0-0795-4907-87fd-6c719a6b4586";
    let _: () = raw
        .hset("orders:42", (format!("{java_id}:1"), "2"))
        .await
        .unwrap();
    let _: () = raw.pexpire("orders:42", 25_000, None).await.unwrap();
    let mut cmd = cli(&server.url());
    cmd.args(["status", "orders:42", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["kind"], "lock");
    assert_eq!(json["holders"][0]["client_id"], java_id);
    assert_eq!(json["holders"][0]["owner"], "1");
    assert_eq!(json["holders"][0]["hold_count"], 2);
    let ttl = json["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 20_000 && ttl <= 25_000, "{ttl}");

    let mut cmd = cli(&server.url());
    cmd.args(["status", "orders:42"]);
    let out = output(cmd).await;
    assert!(
        out.stdout.contains("held")
            && out.stdout.contains(java_id)
            && out.stdout.contains("hold count 2")
    );

    let mut cmd = cli(&server.url());
    cmd.args(["status", "nothing", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&output(cmd).await.stdout).unwrap();
    assert_eq!(json["kind"], "absent");
}

#[tokio::test]
async fn status_reads_semaphores_and_latches() {
    let server = RedisServer::start().await;
    let owner = client(&server, Duration::from_secs(30)).await;
    let json = |args: Vec<&'static str>| {
        let url = server.url();
        async move {
            let mut cmd = cli(&url);
            cmd.args(args).arg("--json");
            let out = output(cmd).await;
            assert_eq!(out.code, 0, "{}", out.stderr);
            serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()
        }
    };

    let semaphore = owner.semaphore("exports").unwrap();
    semaphore.try_set_permits(4).await.unwrap();
    let taken = semaphore.acquire(1).await.unwrap();
    let seen = json(vec!["status", "exports"]).await;
    assert_eq!(seen["kind"], "counter", "a bare string could be either");
    assert_eq!(seen["count"], 3);
    let seen = json(vec!["status", "exports", "--kind", "semaphore"]).await;
    assert_eq!(seen["kind"], "semaphore");
    assert_eq!(seen["permits_available"], 3);
    drop(taken);

    let slots = owner.permit_expirable_semaphore("slots").unwrap();
    slots.try_set_permits(2).await.unwrap();
    let leased = slots
        .acquire(1)
        .lease(Duration::from_secs(600))
        .await
        .unwrap();
    let forever = slots.acquire(1).forever().await.unwrap();
    let seen = json(vec!["status", "slots"]).await;
    assert_eq!(seen["kind"], "expirable-semaphore");
    assert_eq!(seen["permits_available"], 0);
    let leases = seen["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2);
    let of = |id: String| leases.iter().find(|l| l["id"] == id.as_str()).unwrap();
    assert!(of(leased.ids()[0].to_string())["expires_at_ms"]
        .as_u64()
        .is_some());
    assert!(of(forever.ids()[0].to_string())["expires_at_ms"].is_null());

    let latch = owner.count_down_latch("loaded").unwrap();
    latch.try_set_count(3).await.unwrap();
    // `latch`: the earlier name of `count-down-latch`, as `inspect` says.
    let seen = json(vec!["status", "loaded", "--kind", "latch"]).await;
    assert_eq!(seen["kind"], "count-down-latch");
    assert_eq!(seen["schema"], 1);
    assert_eq!(seen["count"], 3);
    let mut cmd = cli(&server.url());
    cmd.args(["status", "loaded", "--kind", "latch"]);
    assert!(output(cmd)
        .await
        .stdout
        .contains("count-down latch, count 3"));

    // A kind that does not match the key.
    let seen = json(vec!["status", "slots", "--kind", "lock"]).await;
    assert_eq!(seen["kind"], "other");
}

#[tokio::test]
async fn rust_log_turns_on_the_cli_logs_on_stderr() {
    let server = RedisServer::start().await;
    let mut quiet = cli(&server.url());
    quiet.args(["status", "x"]);
    let out = output(quiet).await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let mut verbose = cli(&server.url());
    verbose.env("RUST_LOG", "debug").args(["status", "x"]);
    let out = output(verbose).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("DEBUG"), "{}", out.stderr);
    assert!(out.stdout.contains("x: free"), "{}", out.stdout);
}

#[tokio::test]
async fn force_unlock_removes_and_notifies_but_refuses_other_types() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let guard = holder.lock("stuck").unwrap().lock().await.unwrap();
    let mut unlocks = Observer::new(&server, &["redisson_lock__channel:{stuck}"], &[]).await;
    let mut cmd = cli(&server.url());
    cmd.args(["force-unlock", "stuck"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("lock removed"));
    assert_eq!(unlocks.next().await.1, "0");
    assert_eq!(raw.exists::<i64, _>("stuck").await.unwrap(), 0);
    drop(guard);

    let _: () = raw
        .set("plain", "keep me", None, None, false)
        .await
        .unwrap();
    for (args, code) in [
        (vec!["force-unlock", "plain"], 2),
        (vec!["run", "plain", "--", "true"], 125),
    ] {
        let mut cmd = cli(&server.url());
        cmd.args(&args);
        let out = output(cmd).await;
        assert_eq!(out.code, code, "{args:?}");
        assert_eq!(
            out.stderr.trim(),
            "redisson-lock: key `plain` is not a lock (WRONGTYPE)"
        );
    }
    let mut cmd = cli(&server.url());
    cmd.args(["status", "plain"]);
    assert!(output(cmd)
        .await
        .stdout
        .contains("not a lock, semaphore or latch: the key holds a string"));
    let value: String = raw.get("plain").await.unwrap();
    assert_eq!(value, "keep me");
}

/// `force-unlock --if-holder` removes a lock only while the holder the
/// operator inspected still holds it (checked inside the script);
/// `--dry-run` says what would go and removes nothing; nothing removed
/// exits 1.
#[tokio::test]
async fn force_unlock_checks_the_holder_says_what_it_would_do_and_exits_1_on_nothing() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let guard = holder.lock("ifh").unwrap().lock().await.unwrap();
    let field = guard.field();
    let force = |args: &[&str]| {
        let mut cmd = cli(&server.url());
        cmd.arg("force-unlock").args(args);
        output(cmd)
    };
    // A holder that is not (or no longer) in the lock: kept, exit 1.
    let stale = format!("{}:1", holder.id());
    let out = force(&["ifh", "--if-holder", &stale]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stdout
            .contains(&format!("no lock held by {stale}; nothing removed")),
        "{}",
        out.stdout
    );
    assert_eq!(raw.exists::<i64, _>("ifh").await.unwrap(), 1);
    // A dry run: who holds it, what would go; nothing goes.
    let out = force(&["ifh", "--dry-run"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!(
            "lock held by {field} (1 holds); would be removed (dry run)"
        )),
        "{}",
        out.stdout
    );
    let out = force(&["ifh", "--dry-run", "--if-holder", &stale, "--json"]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(report["removed"], false);
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["holders"][0]["owner"], guard.owner().to_string());
    assert_eq!(raw.exists::<i64, _>("ifh").await.unwrap(), 1);
    assert!(!guard.is_lost());
    // The holder inspected: removed.
    let out = force(&["ifh", "--if-holder", &field]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("ifh: lock removed; waiters notified"),
        "{}",
        out.stdout
    );
    assert_eq!(raw.exists::<i64, _>("ifh").await.unwrap(), 0);
    // Nothing left to remove: exit 1.
    let out = force(&["ifh"]).await;
    assert_eq!((out.code, out.stdout.trim()), (1, "ifh: no lock to remove"));
    // Not a holder: a usage error that names the form.
    let out = force(&["ifh", "--if-holder", "nobody"]).await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("is not CLIENT-ID:OWNER"),
        "{}",
        out.stderr
    );
    drop(guard);
}

/// A fair lock's waiter listens on a channel of its own, a read-write
/// lock's waiters on the read-write channel: `force-unlock` tells the kind
/// and wakes them there (a plain lock's message reached none of them, and
/// they woke only at their own timeout).
#[tokio::test]
async fn force_unlock_wakes_fair_and_read_write_waiters_where_they_listen() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let waiter = client(&server, Duration::from_secs(30)).await;

    let _held = holder
        .fair_lock("fair-stuck")
        .unwrap()
        .lock()
        .await
        .unwrap();
    let lock = waiter.fair_lock("fair-stuck").unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await.map(|g| g.field().to_string()) });
    let queue = "redisson_lock_queue:{fair-stuck}";
    common::topology::until("the fair waiter in line", || async {
        raw.llen::<i64, _>(queue).await.unwrap() == 1
    })
    .await;
    let first: String = raw.lindex(queue, 0).await.unwrap();
    let mut messages = Observer::new(&server, &[], &["*{fair-stuck}*"]).await;
    let mut cmd = cli(&server.url());
    cmd.args(["force-unlock", "fair-stuck"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout.trim(),
        "fair-stuck: fair lock removed; waiters notified"
    );
    assert_eq!(
        messages.next().await.0,
        format!("redisson_lock__channel:{{fair-stuck}}:{first}")
    );
    assert_eq!(
        within("the fair waiter", waiting).await.unwrap().unwrap(),
        first
    );

    let writer = holder.read_write_lock("rw-stuck").unwrap();
    let _written = writer.write().lock().await.unwrap();
    let readers = waiter.read_write_lock("rw-stuck").unwrap();
    let reading = tokio::spawn(async move { readers.read().lock().await.map(drop) });
    await_subscribers(&server, "redisson_rwlock:{rw-stuck}", 1).await;
    let mut messages = Observer::new(&server, &[], &["*{rw-stuck}*"]).await;
    let mut cmd = cli(&server.url());
    cmd.args(["force-unlock", "rw-stuck", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["kind"], "read-write-lock");
    assert_eq!(json["removed"], true);
    assert_eq!(messages.next().await.0, "redisson_rwlock:{rw-stuck}");
    within("the reader", reading).await.unwrap().unwrap();
    holder.shutdown().await;
    waiter.shutdown().await;
}

/// The next line of a child's output that `wanted` picks, skipping others
/// (`watch` prints holder changes between its messages).
async fn next_line_with(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> String {
    loop {
        let line = within(what, lines.next_line())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: the output ended"));
        if wanted(&line) {
            return line;
        }
    }
}

#[tokio::test]
async fn watch_prints_unlock_messages_as_they_arrive() {
    let server = RedisServer::start().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let mut cmd = cli(&server.url());
    cmd.args(["watch", "watched"]);
    let mut child = cmd.spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let banner = within("watch started", stderr.next_line())
        .await
        .unwrap()
        .unwrap();
    assert!(banner.contains("redisson_lock__channel:{watched}"));
    await_subscribers(&server, "redisson_lock__channel:{watched}", 1).await;
    holder
        .lock("watched")
        .unwrap()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = next_line_with(&mut stdout, "message printed", |l| {
        l.contains("redisson_lock__channel")
    })
    .await;
    assert!(
        line.ends_with(
            "redisson_lock__channel:{watched} 0 (unlocked: one waiter per client wakes)"
        ),
        "{line}"
    );
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGINT) };
    assert_eq!(
        within("watch exits", child.wait()).await.unwrap().code(),
        Some(0)
    );
}

#[tokio::test]
async fn errors_are_one_line_and_a_nonzero_exit() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    // `run` keeps 125 for its own failures, as timeout(1): 2 may be its
    // command's.
    for (args, code) in [
        (vec!["status", "x"], 2),
        (vec!["force-unlock", "x"], 2),
        (vec!["run", "x", "--", "true"], 125),
        (vec!["elect", "x", "--", "true"], 125),
        (vec!["watch", "x"], 2),
    ] {
        let mut cmd = cli(&url);
        cmd.args(&args);
        let out = output(cmd).await;
        assert_eq!(out.code, code, "{args:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.starts_with("redisson-lock: ") && out.stderr.contains("cannot connect"),
            "{}",
            out.stderr
        );
    }
    let server = RedisServer::start().await;
    for (args, code) in [
        (vec!["run", "", "--", "true"], 125),
        (vec!["run", "x", "--lease", "0s", "--", "true"], 125),
        (vec!["run", "x", "--wait", "-1s", "--", "true"], 125),
        (vec!["run", "x", "--no-such-flag", "--", "true"], 125),
        (vec!["elect", "--", "true"], 125),
        (vec!["--watchdog-timeout", "banana", "status", "x"], 2),
    ] {
        let mut cmd = cli(&server.url());
        cmd.args(&args);
        let out = output(cmd).await;
        assert_eq!(out.code, code, "{args:?}: {}", out.stderr);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_and_sentinel_addresses_and_redisson_config_files() {
    use common::topology::{Cluster, Scratch, Sentinel};

    let cluster = Cluster::start().await;
    let holder =
        redisson_lock::RedissonClient::connect(config(&cluster.url(), Duration::from_secs(30)))
            .await
            .unwrap();
    let guard = holder.lock("jobs").unwrap().lock().await.unwrap();

    // A redis-cluster:// URL: status reads the lock on its slot's primary.
    let mut cmd = cli(&cluster.url());
    cmd.args(["status", "jobs", "--json"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["holders"][0]["client_id"], holder.id());

    // The Java service's Redisson YAML file names the same cluster.
    let dir = Scratch::new("cli-config");
    let file = dir.0.join("redisson.yaml");
    let nodes: Vec<String> = cluster
        .addresses()
        .split(',')
        .map(|a| format!("  - \"{a}\""))
        .collect();
    std::fs::write(
        &file,
        format!(
            "clusterServersConfig:\n  scanInterval: 1000\n  nodeAddresses:\n{}\nlockWatchdogTimeout: 5000\nthreads: 16\n",
            nodes.join("\n")
        ),
    )
    .unwrap();
    let mut cmd = cli("redis://127.0.0.1:1");
    cmd.args(["--redisson-config", file.to_str().unwrap()]);
    cmd.args(["run", "--wait", "0s", "jobs", "--", "true"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 75, "held by `holder`: {}", out.stderr);
    assert!(
        out.stderr
            .contains("clusterServersConfig.scanInterval, threads"),
        "{}",
        out.stderr
    );
    let mut cmd = cli("redis://127.0.0.1:1");
    cmd.args(["--redisson-config", file.to_str().unwrap()]);
    cmd.args(["force-unlock", "jobs"]);
    assert_eq!(output(cmd).await.code, 0);
    within("holder told", guard.lost()).await;
    let mut cmd = cli("redis://127.0.0.1:1");
    cmd.args(["--redisson-config", file.to_str().unwrap()]);
    cmd.args(["run", "--wait", "0s", "jobs", "--", "sh", "-c", "echo ran"]);
    let out = output(cmd).await;
    assert_eq!((out.code, out.stdout.trim()), (0, "ran"), "{}", out.stderr);
    holder.shutdown().await;

    // Sentinels: the CLI asks them for the primary.
    let sentinel = Sentinel::start().await;
    let holder =
        redisson_lock::RedissonClient::connect(config(&sentinel.url(), Duration::from_secs(30)))
            .await
            .unwrap();
    let _guard = holder.lock("nightly").unwrap().lock().await.unwrap();
    let mut cmd = cli(&sentinel.url());
    cmd.args(["status", "nightly"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains(holder.id()), "{}", out.stdout);
    holder.shutdown().await;
}

/// A Java service's Redisson YAML names its server through environment
/// variables, which Redisson fills in before parsing; so does the CLI.
#[tokio::test]
async fn a_redisson_config_file_takes_its_variables_from_the_environment() {
    let server = RedisServer::start().await;
    // The lock is held on database 3 only.
    let mut settings = config(&server.url(), Duration::from_secs(30));
    settings.database = Some(3);
    let holder = redisson_lock::RedissonClient::connect(settings)
        .await
        .unwrap();
    let _held = holder.lock("env-config").unwrap().lock().await.unwrap();
    let dir = common::topology::Scratch::new("cli-env-config");
    let file = dir.0.join("redisson.yaml");
    std::fs::write(
        &file,
        "singleServerConfig:\n  address: \"redis://${REDIS_HOST:-127.0.0.1}:${REDIS_PORT}\"\n  database: ${REDIS_DB}\n",
    )
    .unwrap();
    let mut cmd = cli("redis://127.0.0.1:1");
    cmd.env("REDIS_PORT", server.port.to_string())
        .env("REDIS_DB", "3")
        .env_remove("REDIS_HOST")
        .args(["--redisson-config", file.to_str().unwrap()])
        .args(["run", "--wait", "0s", "env-config", "--", "true"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 75, "held there: {}", out.stderr);
    // With the variable unset: an error that names it.
    let mut cmd = cli("redis://127.0.0.1:1");
    cmd.env("REDIS_PORT", server.port.to_string())
        .env_remove("REDIS_DB")
        .args(["--redisson-config", file.to_str().unwrap()])
        .args(["status", "env-config"]);
    let out = output(cmd).await;
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("REDIS_DB, which is not set"),
        "{}",
        out.stderr
    );
    holder.shutdown().await;
}

/// Commands that only read need no replica check and send nothing: on a
/// Sentinel deployment whose servers refuse `WAIT` (a proxy, a managed
/// service), `status`, `ls` and `inspect` work and publish nothing, while
/// `run`, which takes a lock, still refuses and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_commands_need_no_wait_and_publish_nothing() {
    let sentinel =
        common::topology::Sentinel::start_with(&["--rename-command", "WAIT", ""], "").await;
    for args in [
        vec!["status", "somewhere"],
        vec!["ls", "some*"],
        vec!["inspect", "somewhere"],
    ] {
        let mut cmd = cli(&sentinel.url());
        cmd.args(&args);
        let out = output(cmd).await;
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    }
    let mut cmd = cli(&sentinel.url());
    cmd.args(["run", "--wait", "0s", "somewhere", "--", "true"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 125, "{}", out.stderr);
    assert!(out.stderr.contains("refuses WAIT"), "{}", out.stderr);

    // A single server (the sentinels publish their own hellos): nothing
    // published at all.
    let server = RedisServer::start().await;
    for args in [vec!["status", "x"], vec!["ls"], vec!["inspect", "x"]] {
        let mut cmd = cli(&server.url());
        cmd.args(&args);
        assert_eq!(output(cmd).await.code, 0, "{args:?}");
    }
    let stats: String = common::topology::on_node(server.port, "INFO", vec!["commandstats"])
        .await
        .convert()
        .unwrap();
    assert!(!stats.contains("cmdstat_publish"), "{stats}");
}

/// Where settings come from: an explicit flag, then the URL or the
/// Redisson file, then the environment; two flags naming the servers are
/// an error, not one silently ignored.
#[tokio::test]
async fn settings_come_from_the_flag_then_the_url_then_the_environment() {
    let server = RedisServer::start_with(&["--requirepass", "right"]).await;
    let with_password = format!("redis://default:right@127.0.0.1:{}", server.port);
    let admin =
        redisson_lock::RedissonClient::connect(config(&with_password, Duration::from_secs(30)))
            .await
            .unwrap();
    // Channel rules (`&*`) came with Redis 6.2; 6.0 allows every channel.
    let mut rule = vec!["SETUSER", "ops", "on", ">ops-pw", "~*", "+@all"];
    if common::server_major() >= 7 {
        rule.push("&*");
    }
    admin.command(None, "ACL", rule).await.unwrap();
    admin.shutdown().await;
    // The URL's password wins over REDIS_PASSWORD.
    let mut cmd = cli(&with_password);
    cmd.env("REDIS_PASSWORD", "wrong").args(["status", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Without one in the URL, the environment's is used; the user too.
    let bare = format!("redis://127.0.0.1:{}", server.port);
    let mut cmd = cli(&bare);
    cmd.env("REDIS_USERNAME", "ops")
        .env("REDIS_PASSWORD", "ops-pw")
        .args(["status", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    // --user wins over REDIS_USERNAME.
    let mut cmd = cli(&bare);
    cmd.env("REDIS_USERNAME", "nobody")
        .env("REDIS_PASSWORD", "ops-pw")
        .args(["--user", "ops", "status", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    // --url beside --redisson-config: an error that says so.
    let dir = common::topology::Scratch::new("cli-precedence");
    let file = dir.0.join("redisson.yaml");
    std::fs::write(
        &file,
        format!("singleServerConfig:\n  address: \"{with_password}\"\n"),
    )
    .unwrap();
    let mut cmd = cli(&bare);
    cmd.args([
        "--url",
        &bare,
        "--redisson-config",
        file.to_str().unwrap(),
        "status",
        "x",
    ]);
    let out = output(cmd).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("both name the servers"),
        "{}",
        out.stderr
    );
    // REDIS_URL does not compete with the file: the file is used.
    let mut cmd = cli(&bare);
    cmd.args(["--redisson-config", file.to_str().unwrap(), "status", "x"]);
    assert_eq!(output(cmd).await.code, 0);
}

#[tokio::test]
async fn the_password_stays_out_of_help_errors_and_the_command_line() {
    const SECRET: &str = "cli-s3cret";
    let server = RedisServer::start_with(&["--requirepass", SECRET]).await;
    let with_password = format!("redis://default:{SECRET}@127.0.0.1:{}", server.port);
    // --help must not show the value of REDIS_URL.
    let mut cmd = cli(&with_password);
    cmd.arg("--help");
    let out = output(cmd).await;
    assert_eq!(out.code, 0);
    assert!(!out.stdout.contains(SECRET), "{}", out.stdout);
    // An error names the server without its password.
    let mut cmd = cli(&format!(
        "redis://default:{SECRET}@127.0.0.1:{}",
        free_port()
    ));
    cmd.args(["status", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("default:***@127.0.0.1"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains(SECRET), "{}", out.stderr);
    // The password from REDIS_PASSWORD or a file, with none in the URL.
    let without = format!("redis://default@127.0.0.1:{}", server.port);
    let mut cmd = cli(&without);
    cmd.env("REDIS_PASSWORD", SECRET).args(["status", "x"]);
    assert_eq!(output(cmd).await.code, 0);
    let file = std::env::temp_dir().join(format!("redisson-lock-pw-{}", free_port()));
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let mut cmd = cli(&without);
    cmd.args(["status", "x", "--password-file", file.to_str().unwrap()]);
    let out = output(cmd).await;
    std::fs::remove_file(&file).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Without it, the server refuses, and says so.
    let mut cmd = cli(&without);
    cmd.args(["status", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 2, "{}", out.stdout);
}

#[tokio::test]
async fn scripting_flags_exit_codes_json_completions_and_verbose() {
    let server = RedisServer::start().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let status = |name: &str| {
        let mut cmd = cli(&server.url());
        cmd.args(["status", name, "--exit-code"]);
        cmd
    };
    // Free: 0; held: 1; trouble: 2 (not to be read as "held").
    assert_eq!(output(status("scripted")).await.code, 0);
    let guard = holder.lock("scripted").unwrap().lock().await.unwrap();
    let out = output(status("scripted")).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stdout.contains("scripted: held"), "{}", out.stdout);
    let mut down = cli("redis://127.0.0.1:1");
    down.args(["status", "scripted", "--exit-code"]);
    assert_eq!(output(down).await.code, 2);
    // A latch not yet at zero would make a waiter wait.
    let latch = holder.count_down_latch("gate").unwrap();
    assert!(latch.try_set_count(2).await.unwrap());
    let mut cmd = cli(&server.url());
    cmd.args(["status", "gate", "--kind", "latch", "--exit-code"]);
    assert_eq!(output(cmd).await.code, 1);

    // flock's --conflict-exit-code.
    let mut cmd = cli(&server.url());
    cmd.args([
        "run",
        "scripted",
        "--wait",
        "0s",
        "--conflict-exit-code",
        "3",
        "--",
        "true",
    ]);
    assert_eq!(output(cmd).await.code, 3);

    // force-unlock --json.
    let mut cmd = cli(&server.url());
    cmd.args(["force-unlock", "scripted", "--json"]);
    let out = output(cmd).await;
    let report: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        report,
        serde_json::json!({"name": "scripted", "kind": "lock", "removed": true, "schema": 1})
    );
    drop(guard);

    // Completions name the subcommands.
    let mut cmd = cli(&server.url());
    cmd.args(["completions", "bash"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("force-unlock") && out.stdout.contains("--conflict-exit-code"));

    // -vv logs the crate's debug output; the examples are in --help.
    let mut cmd = cli(&server.url());
    cmd.args(["-vv", "status", "scripted"]);
    let out = output(cmd).await;
    assert!(out.stderr.contains("DEBUG"), "{}", out.stderr);
    let mut cmd = cli(&server.url());
    cmd.arg("--help");
    assert!(output(cmd)
        .await
        .stdout
        .contains("--exit-code             exit 0 free, 1 held"));
}

#[tokio::test]
async fn watch_json_prints_one_object_per_message() {
    let server = RedisServer::start().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let mut cmd = cli(&server.url());
    cmd.args(["watch", "watched-json", "--json"]);
    let mut child = cmd.spawn().unwrap();
    await_subscribers(&server, "redisson_lock__channel:{watched-json}", 1).await;
    let lock = holder.lock("watched-json").unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = next_line_with(&mut stdout, "message printed", |l| {
        l.contains("\"channel\"")
    })
    .await;
    let message: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(message["schema"], 1);
    assert_eq!(message["channel"], "redisson_lock__channel:{watched-json}");
    assert_eq!(message["message"], "0");
    assert!(message["time"].as_str().unwrap().ends_with('Z'), "{line}");
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGINT) };
    assert_eq!(
        within("watch exits", child.wait()).await.unwrap().code(),
        Some(0)
    );
}

/// A fair lock tells only its first waiter, on that waiter's own channel:
/// `watch` hears it there (a pattern, with classic pub/sub).
#[tokio::test]
async fn watch_hears_a_fair_lock_tell_its_first_waiter() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let other = client(&server, Duration::from_secs(30)).await;
    let guard = holder.fair_lock("w-fair").unwrap().lock().await.unwrap();
    let waiting = other.fair_lock("w-fair").unwrap();
    let waiter = tokio::spawn(async move { waiting.lock().await });
    let queued = holder.fair_lock("w-fair").unwrap();
    common::topology::until("the waiter in line", || async {
        queued.queue().await.unwrap().len() == 1
    })
    .await;
    let first = queued.queue().await.unwrap().remove(0);
    let mut cmd = cli(&server.url());
    cmd.args(["watch", "w-fair", "--json"]);
    let mut child = cmd.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    // Who holds it when the watch starts.
    let event = |line: &str| serde_json::from_str::<serde_json::Value>(line).unwrap();
    let held = next_line_with(&mut stdout, "the holder", |l| l.contains("\"event\"")).await;
    assert_eq!(
        (
            event(&held)["event"].clone(),
            event(&held)["holder"].clone()
        ),
        ("held".into(), guard.field().into()),
        "{held}"
    );
    let numpat = || async {
        let command = fred::types::CustomCommand::new_static(
            "PUBSUB",
            fred::types::ClusterHash::FirstKey,
            false,
        );
        raw.custom::<i64, &str>(command, vec!["NUMPAT"])
            .await
            .unwrap()
    };
    common::topology::until("watch subscribed to the waiters' channels", || async {
        numpat().await == 1
    })
    .await;
    let held_by = guard.field();
    guard.unlock().await.unwrap();
    let taken = within("the waiter", waiter).await.unwrap().unwrap();
    let line = next_line_with(&mut stdout, "message printed", |l| {
        l.contains("\"channel\"")
    })
    .await;
    let message: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        message["channel"],
        format!("redisson_lock__channel:{{w-fair}}:{first}"),
        "{line}"
    );
    assert_eq!(message["message"], "0");
    assert!(
        message["meaning"]
            .as_str()
            .unwrap()
            .contains("first in line, is told"),
        "{line}"
    );
    // No message says who took it: the holders read do, with who they are.
    let mut events = vec![];
    while !events.contains(&("acquired".to_string(), taken.field())) {
        let line = next_line_with(&mut stdout, "holder events", |l| l.contains("\"event\"")).await;
        let e = event(&line);
        // Both clients are this test's, registered under its pid.
        let pid = format!(" pid {}", std::process::id());
        assert!(e["who"].as_str().unwrap().contains(&pid), "{line}");
        events.push((
            e["event"].as_str().unwrap().to_string(),
            e["holder"].as_str().unwrap().to_string(),
        ));
    }
    assert!(
        events.contains(&("released".to_string(), held_by)),
        "{events:?}"
    );
    taken.unlock().await.unwrap();
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGINT) };
    assert_eq!(
        within("watch exits", child.wait()).await.unwrap().code(),
        Some(0)
    );
    // Its connection is gone with it.
    common::topology::until("the pattern unsubscribed", || async { numpat().await == 0 }).await;
    holder.shutdown().await;
    other.shutdown().await;
}

/// `watch` reads what the object is and listens where its waiters do: a
/// read-write lock, a semaphore and a latch each on their own channel.
#[tokio::test]
async fn watch_follows_each_kind_on_its_own_channel() {
    let server = RedisServer::start().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let rw = holder.read_write_lock("w-rw").unwrap();
    let read = rw.read().lock().await.unwrap();
    let semaphore = holder.semaphore("w-sem").unwrap();
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let latch = holder.count_down_latch("w-latch").unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let watch = |name: &str, channel: &str| {
        let mut cmd = cli(&server.url());
        cmd.args(["watch", name, "--json"]);
        let child = cmd.spawn().unwrap();
        let channel = channel.to_string();
        let server = &server;
        async move {
            await_subscribers(server, &channel, 1).await;
            child
        }
    };
    let readers = watch("w-rw", "redisson_rwlock:{w-rw}").await;
    // A semaphore's permits and a latch's count are both integer strings.
    let permits = watch("w-sem", "redisson_sc:{w-sem}").await;
    let count = watch("w-latch", "redisson_countdownlatch__channel__{w-latch}").await;
    read.unlock().await.unwrap();
    semaphore.release(1).await.unwrap();
    latch.count_down().await.unwrap();
    for (mut child, channel, meaning) in [
        (readers, "redisson_rwlock:{w-rw}", "unlocked"),
        (
            permits,
            "redisson_sc:{w-sem}",
            "permits released: 2 available",
        ),
        (
            count,
            "redisson_countdownlatch__channel__{w-latch}",
            "the latch is open",
        ),
    ] {
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = next_line_with(&mut stdout, "message printed", |l| {
            l.contains("\"channel\"")
        })
        .await;
        let message: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(message["channel"], channel, "{line}");
        assert!(
            message["meaning"].as_str().unwrap().contains(meaning),
            "{line}"
        );
        unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGINT) };
        assert_eq!(
            within("watch exits", child.wait()).await.unwrap().code(),
            Some(0)
        );
    }
    holder.shutdown().await;
}

/// `elect`: waits while another (here a library client) leads, runs the
/// command once this process leads, and resigns when it exits.
#[tokio::test]
async fn elect_runs_the_command_once_this_process_leads() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let other = client(&server, Duration::from_secs(30)).await;
    let leading = other.lock("scheduler").unwrap().lock().await.unwrap();

    let mut cmd = cli(&server.url());
    cmd.args([
        "elect",
        "scheduler",
        "--",
        "sh",
        "-c",
        "echo leading; read line",
    ])
    .stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Waiting on the lock's channel: it leads only once the other resigns.
    await_subscribers(&server, "redisson_lock__channel:{scheduler}", 1).await;
    leading.unlock().await.unwrap();
    let first = within("elected", lines.next_line()).await.unwrap();
    assert_eq!(first.as_deref(), Some("leading"));
    let holders: Vec<String> = raw.hkeys("scheduler").await.unwrap();
    assert_eq!(holders.len(), 1);
    assert!(!holders[0].starts_with(other.id()), "{holders:?}");

    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"done\n")
        .await
        .unwrap();
    let status = within("elect exits", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(raw.exists::<i64, _>("scheduler").await.unwrap(), 0);

    // --fenced: the term, the fenced lock's token, goes to the command.
    let _: () = raw
        .set(
            "redisson_lock_token:{fenced-scheduler}",
            41,
            None,
            None,
            false,
        )
        .await
        .unwrap();
    let mut cmd = cli(&server.url());
    cmd.args(["elect", "fenced-scheduler", "--fenced", "--", "sh", "-c"])
        .arg("echo \"term $REDISSON_LOCK_TOKEN\"");
    let out = output(cmd).await;
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, "term 42"),
        "{}",
        out.stderr
    );
    other.shutdown().await;
}

/// `--timeout` bounds every call to Redis, in every subcommand: against a
/// hung server (SIGSTOP: its socket accepts, nothing answers) a command
/// fails with exit 2 and names the limit, instead of waiting on it.
#[tokio::test]
async fn timeout_bounds_each_call_in_every_subcommand() {
    let server = RedisServer::start().await;
    server.freeze();
    for args in [
        vec!["--timeout", "300ms", "status", "x"],
        vec!["--timeout", "300ms", "ls"],
        vec!["--timeout", "300ms", "run", "x", "--", "true"],
        vec!["latch", "wait", "x", "--timeout", "300ms", "--wait", "1s"],
    ] {
        let mut cmd = cli(&server.url());
        cmd.args(&args);
        let out = within("the command gives up", output(cmd)).await;
        let code = if args.contains(&"run") { 125 } else { 2 };
        assert_eq!(out.code, code, "{args:?}: {}", out.stderr);
        // The limit given, not the default connect timeout (10 s).
        assert!(
            out.stderr.contains("no answer within ") && !out.stderr.contains("within 10"),
            "{args:?}: {}",
            out.stderr
        );
    }
    server.thaw();
    let mut cmd = cli(&server.url());
    cmd.args(["--timeout", "0s", "status", "x"]);
    let out = output(cmd).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
}
