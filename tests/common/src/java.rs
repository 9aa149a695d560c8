//! Drives the JVM Redisson peer in tests/interop/java (the real Redisson jar).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;

use super::within;

/// The Redisson versions the suite runs against (Maven profile, version).
/// Loop over [`versions`], which honours `INTEROP_REDISSON`.
pub const VERSIONS: [(&str, &str); 2] = [("redisson-4", "4.7.0"), ("redisson-3", "3.16.4")];

/// The newest 4.x and the last 3.x. For the fenced lock (3.19+), and for
/// contention runs: Redisson 3.16 can miss a wake-up that arrives while it
/// registers its listener, and then sleeps until its TTL, which for a queued
/// fair-lock waiter is minutes and for a semaphore waiter forever (a
/// Redisson bug that stalls Java-only fleets too; docs/interop.md).
pub const NEWEST_VERSIONS: [(&str, &str); 2] =
    [("redisson-4", "4.7.0"), ("redisson-3-last", "3.52.0")];

/// [`VERSIONS`], or those of them `INTEROP_REDISSON` names (a comma-separated
/// list of versions, e.g. `4.7.0`): the server matrix runs the JVM peers at
/// the newest Redisson only, the default server at every version.
pub fn versions() -> Vec<(&'static str, &'static str)> {
    chosen(&VERSIONS)
}

/// [`NEWEST_VERSIONS`], filtered as [`versions`].
pub fn newest_versions() -> Vec<(&'static str, &'static str)> {
    chosen(&NEWEST_VERSIONS)
}

fn chosen(all: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let wanted = std::env::var("INTEROP_REDISSON").unwrap_or_default();
    let wanted: Vec<&str> = wanted
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    let kept: Vec<_> = all
        .iter()
        .copied()
        .filter(|(_, version)| wanted.is_empty() || wanted.contains(version))
        .collect();
    assert!(
        !kept.is_empty(),
        "INTEROP_REDISSON={wanted:?} names none of the versions {all:?}"
    );
    kept
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Result<String, String>>>>>;

/// A running JVM peer.
pub struct JavaPeer {
    pub client_id: String,
    pub version: String,
    child: Child,
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Pending,
    next: AtomicU64,
}

/// The peer jar of a version, built with Maven on first use. Fails loudly when
/// Java or Maven is missing: interop is never skipped silently.
pub fn jar(profile: &str, version: &str) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let _one_build_at_a_time = BUILD.lock();
    // The library's tests run from the workspace root, the CLI's from cli/.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("tests/interop/java"))
        .find(|d| d.join("pom.xml").exists())
        .unwrap_or_else(|| PathBuf::from("tests/interop/java"));
    let jar = dir.join(format!("target/interop-peer-{version}.jar"));
    if !jar.exists() || modified(&jar) < newest_source(&dir) {
        let status = std::process::Command::new("mvn")
            .args([
                "-q",
                "-B",
                "-Dstyle.color=never",
                "-P",
                profile,
                "package",
                "-DskipTests",
                "-f",
            ])
            .arg(dir.join("pom.xml"))
            .status()
            .expect("JVM interop needs Maven (mvn) and a JDK on PATH");
        assert!(
            status.success(),
            "building the Redisson {version} interop peer failed"
        );
    }
    jar
}

fn modified(path: &std::path::Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// The newest modification among the peer's sources and its pom.
fn newest_source(dir: &std::path::Path) -> std::time::SystemTime {
    fn walk(path: &std::path::Path, newest: &mut std::time::SystemTime) {
        *newest = (*newest).max(modified(path));
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                walk(&entry.path(), newest);
            }
        }
    }
    let mut newest = modified(&dir.join("pom.xml"));
    walk(&dir.join("src"), &mut newest);
    newest
}

impl JavaPeer {
    pub async fn start(profile: &str, version: &str, url: &str, watchdog_ms: u64) -> JavaPeer {
        Self::start_with(profile, version, url, watchdog_ms, &[]).await
    }

    /// A peer whose fair-lock waiters queue with a budget of `fair_wait_ms`
    /// (Redisson's `fairLockWaitTimeout`, 3.46+) instead of 5 minutes.
    pub async fn start_with_fair_wait(
        profile: &str,
        version: &str,
        url: &str,
        watchdog_ms: u64,
        fair_wait_ms: u64,
    ) -> JavaPeer {
        let wait = fair_wait_ms.to_string();
        Self::start_with(
            profile,
            version,
            url,
            watchdog_ms,
            &["--fair-wait-ms", &wait],
        )
        .await
    }

    /// A peer whose client encodes values with `codec` (`string`:
    /// `StringCodec`; `default`: Redisson's default, `Kryo5Codec`), which is
    /// what a group multi lock hashes its values with.
    pub async fn start_with_codec(
        profile: &str,
        version: &str,
        url: &str,
        watchdog_ms: u64,
        codec: &str,
    ) -> JavaPeer {
        Self::start_with(profile, version, url, watchdog_ms, &["--codec", codec]).await
    }

    /// A peer on a cluster: `nodes` is a comma-separated list of
    /// `redis://host:port` addresses.
    pub async fn start_cluster(
        profile: &str,
        version: &str,
        nodes: &str,
        watchdog_ms: u64,
    ) -> JavaPeer {
        Self::start_with(profile, version, nodes, watchdog_ms, &["--cluster"]).await
    }

    /// A peer on a Sentinel deployment: `sentinels` is a comma-separated
    /// list of `redis://host:port` sentinel addresses.
    pub async fn start_sentinel(
        profile: &str,
        version: &str,
        sentinels: &str,
        master: &str,
        watchdog_ms: u64,
    ) -> JavaPeer {
        Self::start_with(
            profile,
            version,
            sentinels,
            watchdog_ms,
            &["--sentinel", master],
        )
        .await
    }

    async fn start_with(
        profile: &str,
        version: &str,
        url: &str,
        watchdog_ms: u64,
        extra: &[&str],
    ) -> JavaPeer {
        let jar = jar(profile, version);
        let mut child = Command::new("java")
            .args(["-XX:-UsePerfData", "-Xlog:all=warning:stderr"])
            .arg("-jar")
            .arg(&jar)
            .args(["--url", url, "--watchdog-ms", &watchdog_ms.to_string()])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("JVM interop needs java on PATH");
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // The JVM itself may print a line before ours (its logging goes to
        // stderr, but be safe): wait for the protocol's READY line.
        let ready = within("JVM peer READY", async {
            loop {
                let line = lines.next_line().await.unwrap().expect("peer exited");
                if line.starts_with("READY ") {
                    return line;
                }
                eprintln!("JVM peer: {line}");
            }
        })
        .await;
        let mut words = ready.split_whitespace();
        assert_eq!(words.next(), Some("READY"), "{ready}");
        let client_id = words.next().unwrap().to_string();
        let reported = words.next().unwrap().to_string();
        assert_eq!(reported, version, "the jar runs the pinned Redisson");
        let pending: Pending = Arc::default();
        let routes = pending.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut parts = line.splitn(3, ' ');
                let id = parts.next().unwrap_or_default().to_string();
                let status = parts.next().unwrap_or_default();
                let rest = parts.next().unwrap_or_default().to_string();
                if let Some(tx) = routes.lock().remove(&id) {
                    let _ = tx.send(if status == "OK" { Ok(rest) } else { Err(rest) });
                }
            }
        });
        JavaPeer {
            client_id,
            version: reported,
            child,
            stdin: tokio::sync::Mutex::new(stdin),
            pending,
            next: AtomicU64::new(1),
        }
    }

    /// Sends a request; the returned receiver yields its reply.
    pub async fn send(&self, command: &str) -> oneshot::Receiver<Result<String, String>> {
        let id = format!("r{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id.clone(), tx);
        let mut stdin = self.stdin.lock().await;
        stdin
            .write_all(format!("{id} {command}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
        rx
    }

    /// Sends a request and waits for its reply.
    pub async fn call(&self, command: &str) -> Result<String, String> {
        let rx = self.send(command).await;
        within(&format!("JVM reply to `{command}`"), rx)
            .await
            .expect("peer exited")
    }

    /// Like `call`, for requests that must succeed.
    pub async fn ok(&self, command: &str) -> String {
        self.call(command)
            .await
            .unwrap_or_else(|e| panic!("JVM `{command}` failed: {e}"))
    }

    /// SIGKILL, as a crash: nothing is released, renewals stop.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    pub async fn quit(mut self) {
        let _ = self.call("quit").await;
        let _ = self.child.wait().await;
    }
}

/// Scripts Redis has run so far (EVAL and EVALSHA).
pub async fn scripts_run(raw: &fred::clients::Client) -> u64 {
    super::command_calls(raw, "evalsha").await + super::command_calls(raw, "eval").await
}

/// Waits until a Java `lock` sent after `scripts_before` is really waiting:
/// subscribed, its retry after subscribing run on Redis, and (Redisson 3.x)
/// its wake-up listener queued.
pub async fn java_is_waiting(
    java: &JavaPeer,
    server: &super::RedisServer,
    raw: &fred::clients::Client,
    channel: &str,
    scripts_before: u64,
) {
    super::await_subscribers(server, channel, 1).await;
    within("Java's retry after subscribing", async {
        while scripts_run(raw).await < scripts_before + 2 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    java_listening(java).await;
}

/// Waits until the peer's waiter can be woken by a message. Redisson queues
/// its wake-up listener only after handling the reply to the retry it makes
/// after subscribing; a message arriving in between is missed (3.16: any;
/// 3.52 and 4.x: a `1`, what a write unlock publishes) and it sleeps until
/// the TTL (docs/interop.md). The peer reports the queued listeners.
pub async fn java_listening(java: &JavaPeer) {
    within("Java's wake-up listener queued", async {
        while java.ok("wakeListeners").await == "0" {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
}
