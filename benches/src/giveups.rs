//! Issue 25, item 5: what many fair-lock give-ups at once cost everyone
//! else. A fair lock's queue holds `queued` entries of JVM waiters (ended
//! Java threads whose deadlines are minutes away: Redisson leaves them in
//! line when interrupted); `waiters` Rust waiters queue behind them and all
//! give up at once (their futures dropped, as a timeout around each would).
//! Each give-up walks the whole queue. Meanwhile a thread of its own sends
//! PINGs back to back on a plain socket: how long Redis left them unanswered
//! is what every other client, Java included, waited too. Redis' own SLOWLOG
//! gives the longest command it ran.

use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use redisson_lock::naming::{fair_queue_name, fair_timeout_name};
use redisson_lock::{Config, RedissonClient};

use crate::server::Server;

#[derive(serde::Serialize)]
pub struct Row {
    pub queued: usize,
    pub waiters: usize,
    /// From the first give-up to the last waiter gone from the queue.
    pub drain_ms: f64,
    pub pings: usize,
    pub ping_p50_us: f64,
    pub ping_p99_us: f64,
    pub ping_max_us: f64,
    /// The longest command Redis ran in the window (SLOWLOG), and its name.
    pub slowest_us: u64,
    pub slowest: String,
    /// EVALSHAs Redis ran for the give-ups.
    pub evalshas: u64,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "queue {} + {} giving up: drained in {:.0} ms, {} EVALSHA; PING p50 {:.0} us p99 {:.0} us max {:.0} us ({} PINGs); slowest command {} us ({})",
            self.queued,
            self.waiters,
            self.drain_ms,
            self.evalshas,
            self.ping_p50_us,
            self.ping_p99_us,
            self.ping_max_us,
            self.pings,
            self.slowest_us,
            self.slowest
        )
    }
}

async fn command(raw: &Client, name: &'static str, args: Vec<Value>) -> Value {
    raw.custom(
        CustomCommand::new_static(name, ClusterHash::Random, false),
        args,
    )
    .await
    .unwrap()
}

async fn llen(raw: &Client, key: &str) -> usize {
    match command(raw, "LLEN", vec![key.into()]).await {
        Value::Integer(n) => n as usize,
        other => panic!("LLEN {key}: {other:?}"),
    }
}

async fn evalshas(raw: &Client) -> u64 {
    let info: String = raw
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A first, small round caches the scripts (and any batch form of them);
/// the second is measured.
pub async fn run(server: &Server, queued: usize, waiters: usize) -> Row {
    round(server, 100, waiters).await;
    round(server, queued, waiters).await
}

async fn round(server: &Server, queued: usize, waiters: usize) -> Row {
    server.flush().await;
    let raw = server.raw().await;
    let name = "giveups";
    let (queue, deadlines) = (fair_queue_name(name), fair_timeout_name(name));
    // The holder, and the JVM waiters left in line (deadlines 10 min away).
    let holder = RedissonClient::connect(Config::from_url(&server.url))
        .await
        .unwrap();
    let held = holder
        .fair_lock(name)
        .unwrap()
        .acquire()
        .lease(Duration::from_secs(600))
        .await
        .unwrap();
    let far = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 600_000;
    for chunk in (0..queued).collect::<Vec<_>>().chunks(1000) {
        let fields: Vec<String> = chunk
            .iter()
            .map(|i| format!("00000000-0000-4000-8000-000000000000:{i}"))
            .collect();
        let mut rpush: Vec<Value> = vec![queue.clone().into()];
        rpush.extend(fields.iter().map(|f| Value::from(f.as_str())));
        command(&raw, "RPUSH", rpush).await;
        let mut zadd: Vec<Value> = vec![deadlines.clone().into()];
        for (k, f) in fields.iter().enumerate() {
            zadd.push((far + k as i64).into());
            zadd.push(f.as_str().into());
        }
        command(&raw, "ZADD", zadd).await;
    }
    // The Rust waiters join the line, then sleep (two attempts each).
    let client = RedissonClient::connect(Config::from_url(&server.url))
        .await
        .unwrap();
    let lock = client.fair_lock(name).unwrap();
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.lock().await })
        })
        .collect();
    // Every waiter in line and subscribed (each on its own channel); then
    // the attempt each makes after subscribing.
    let pattern = format!("{}:*", redisson_lock::naming::channel_name(name));
    loop {
        let len = llen(&raw, &queue).await;
        let channels = command(
            &raw,
            "PUBSUB",
            vec!["CHANNELS".into(), pattern.clone().into()],
        )
        .await;
        let subscribed = match channels {
            Value::Array(c) => c.len(),
            _ => 0,
        };
        if len == queued + waiters && subscribed == waiters {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let _ = command(
        &raw,
        "CONFIG",
        vec![
            "SET".into(),
            "slowlog-log-slower-than".into(),
            "1000".into(),
        ],
    )
    .await;
    let _ = command(&raw, "SLOWLOG", vec!["RESET".into()]).await;
    // PINGs from a thread of their own, on a plain socket: what they wait
    // for is Redis, not this process's scheduler.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pings = {
        let stop = stop.clone();
        let address = server.url.trim_start_matches("redis://").to_string();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut socket = std::net::TcpStream::connect(address).unwrap();
            socket.set_nodelay(true).unwrap();
            let mut pong = [0u8; 7];
            let mut took = vec![];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = Instant::now();
                socket.write_all(b"PING\r\n").unwrap();
                socket.read_exact(&mut pong).unwrap();
                took.push(sent.elapsed());
            }
            took
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = evalshas(&raw).await;
    let started = Instant::now();
    for task in &tasks {
        task.abort();
    }
    loop {
        let len = llen(&raw, &queue).await;
        if len == queued {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let drain = started.elapsed();
    let evalshas = evalshas(&raw).await - before;
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut took = pings.join().unwrap();
    took.sort();
    let pct = |p: f64| took[((took.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
    let slowlog = command(&raw, "SLOWLOG", vec!["GET".into(), "1000".into()]).await;
    let (slowest_us, slowest) = slowest(&slowlog);
    let _ = command(
        &raw,
        "CONFIG",
        vec![
            "SET".into(),
            "slowlog-log-slower-than".into(),
            "10000".into(),
        ],
    )
    .await;
    held.unlock().await.unwrap();
    client.shutdown().await;
    holder.shutdown().await;
    Row {
        queued,
        waiters,
        drain_ms: drain.as_secs_f64() * 1e3,
        pings: took.len(),
        ping_p50_us: pct(0.5),
        ping_p99_us: pct(0.99),
        ping_max_us: pct(1.0),
        slowest_us,
        slowest,
        evalshas,
    }
}

/// The longest entry of a `SLOWLOG GET` reply: its duration (us) and command.
fn slowest(reply: &Value) -> (u64, String) {
    let Value::Array(entries) = reply else {
        return (0, String::new());
    };
    entries
        .iter()
        .filter_map(|entry| {
            let Value::Array(fields) = entry else {
                return None;
            };
            let us = fields.get(2)?.as_u64()?;
            let command = match fields.get(3)? {
                Value::Array(args) => args
                    .iter()
                    .take(3)
                    .filter_map(|a| a.as_string())
                    .map(|a| a.chars().take(12).collect::<String>())
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => String::new(),
            };
            Some((us, command))
        })
        .max()
        .unwrap_or_default()
}
