//! Several workers contend for one lock: Rust workers (separate clients, as
//! separate services would be) and, when available, a JVM Redisson worker.
//! Watch for reentrant nesting, watchdog renewal past the lease, and pub/sub
//! hand-off from one holder to the next.
//!
//! `REDIS_URL` (default `redis://127.0.0.1:6379`); `scripts/demo.sh` starts a
//! throwaway server and sets it. `DEMO_JAVA_JAR` points at the JVM peer jar.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redisson_lock::{Config, RedissonClient, Ttl};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

const LOCK: &str = "demo:orders";
const LEASE: Duration = Duration::from_secs(3);

struct Clock {
    start: Instant,
    released_at: Mutex<Option<Instant>>,
}

impl Clock {
    fn say(&self, who: &str, what: impl AsRef<str>) {
        println!(
            "[{:>7.3}s] {who:<11} {}",
            self.start.elapsed().as_secs_f64(),
            what.as_ref()
        );
    }
    fn released(&self) {
        *self.released_at.lock() = Some(Instant::now());
    }
    fn handoff(&self) -> String {
        match self.released_at.lock().take() {
            Some(at) => format!(
                "{:.2} ms after the previous unlock",
                at.elapsed().as_secs_f64() * 1e3
            ),
            None => "at once".into(),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let clock = Arc::new(Clock {
        start: Instant::now(),
        released_at: Mutex::new(None),
    });
    let mut config = Config::from_url(&url);
    config.lock_watchdog_timeout = LEASE;
    clock.say(
        "demo",
        format!("Redis at {url}; lock `{LOCK}`; watchdog lease {LEASE:?}"),
    );

    let first = RedissonClient::connect(config.clone()).await?;
    let lock = first.lock(LOCK)?;
    let outer = lock.lock().await?;
    clock.say("rust-1", format!("acquired; hash field {}", outer.field()));
    // A nested lock() inside the holder's scope re-enters its hold.
    let inner = outer.scope(lock.lock()).await?;
    clock.say(
        "rust-1",
        format!(
            "nested lock() in the holder's scope re-enters: hold count {}",
            inner.hold_count().await?
        ),
    );
    inner.unlock().await?;
    clock.say(
        "rust-1",
        format!(
            "inner unlock: still held, hold count {}",
            outer.hold_count().await?
        ),
    );

    // Waiters: two more Rust services and, if present, a JVM Redisson client.
    let mut waiters = vec![];
    for n in 2..=3 {
        let client = RedissonClient::connect(config.clone()).await?;
        let clock = clock.clone();
        waiters.push(tokio::spawn(async move {
            let who = format!("rust-{n}");
            let lock = client.lock(LOCK)?;
            clock.say(
                &who,
                "waiting (subscribed to redisson_lock__channel:{demo:orders})",
            );
            let guard = lock.lock().await?;
            clock.say(
                &who,
                format!("acquired {} (woken by pub/sub)", clock.handoff()),
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
            clock.released();
            guard.unlock().await?;
            clock.say(&who, "unlocked: published 0");
            client.shutdown().await;
            Ok::<_, redisson_lock::Error>(())
        }));
    }
    let java = match std::env::var("DEMO_JAVA_JAR") {
        Ok(jar) if std::path::Path::new(&jar).exists() => {
            Some(tokio::spawn(java_worker(jar, url.clone(), clock.clone())))
        }
        _ => {
            clock.say(
                "java",
                "skipped: no JVM peer jar (install a JDK and Maven, then rerun scripts/demo.sh)",
            );
            None
        }
    };

    // Hold past the lease: the watchdog keeps renewing it.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ttl = match lock.remaining_ttl().await? {
            Ttl::Expires(ttl) => format!("{} ms", ttl.as_millis()),
            other => format!("{other:?}"),
        };
        clock.say(
            "rust-1",
            format!(
                "still held after {:.0?}; PTTL {ttl}; watchdog renewals so far {}",
                clock.start.elapsed(),
                first.watchdog_stats().renewed
            ),
        );
    }
    assert!(!outer.is_lost());
    clock.released();
    outer.unlock().await?;
    clock.say(
        "rust-1",
        "unlocked after 4 s, past the 3 s lease: published 0",
    );

    for waiter in waiters {
        waiter.await??;
    }
    if let Some(java) = java {
        java.await??;
    }
    first.shutdown().await;
    clock.say(
        "demo",
        "done: every worker held the lock once, one at a time",
    );
    Ok(())
}

/// A JVM Redisson worker, driven through the interop peer's line protocol.
async fn java_worker(jar: String, url: String, clock: Arc<Clock>) -> std::io::Result<()> {
    let io = |e: std::io::Error| std::io::Error::new(e.kind(), format!("JVM peer: {e}"));
    let mut child = tokio::process::Command::new("java")
        .args([
            "-XX:-UsePerfData",
            "-Xlog:all=warning:stderr",
            "-jar",
            &jar,
            "--url",
            &url,
            "--watchdog-ms",
            &LEASE.as_millis().to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io)?;
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ready = String::new();
    while !ready.starts_with("READY") {
        ready = lines.next_line().await.map_err(io)?.ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "JVM peer exited before READY",
            )
        })?;
    }
    let version = ready.split_whitespace().nth(2).unwrap_or("?").to_string();
    clock.say(
        "java",
        format!("Redisson {version} client started; waiting"),
    );
    let mut call = async |request: &str| -> std::io::Result<String> {
        stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .map_err(io)?;
        Ok(lines.next_line().await.map_err(io)?.unwrap_or_default())
    };
    call(&format!("1 lock {LOCK} 1 -1")).await?;
    clock.say(
        "java",
        format!("acquired {} (woken by pub/sub)", clock.handoff()),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    clock.released();
    call(&format!("2 unlock {LOCK} 1")).await?;
    clock.say("java", "unlocked: published 0");
    call("3 quit").await?;
    let _ = child.wait().await;
    Ok(())
}
