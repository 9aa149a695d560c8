//! A TCP proxy in front of one sentinel that counts the commands passing
//! through it by Redis's own names (`sentinel|master`, `ping`): a sentinel
//! has no `INFO commandstats` (Redis 7.0 and 8.0, Valkey 8.0 and 8.1 alike).
//!
//! Each sentinel announces its proxy's port (`sentinel announce-port`), so
//! clients that discover sentinels (Redisson's `SENTINEL SENTINELS`) and the
//! other sentinels come through the proxies too. The sentinel's own
//! `total_commands_processed` checks that nothing went around them
//! (`discovery.rs` records the difference per window).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Counts {
    calls: Mutex<BTreeMap<String, u64>>,
    connections: AtomicU64,
}

pub struct CountingProxy {
    pub port: u16,
    counts: Arc<Counts>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl CountingProxy {
    /// Listens on `port` and forwards every connection to `target` (which
    /// need not be up yet: each connection is made when one comes).
    pub async fn start(port: u16, target: u16) -> CountingProxy {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("the proxy's port");
        let counts = Arc::new(Counts::default());
        let shared = counts.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(pipe(client, target, shared.clone()));
            }
        });
        CountingProxy {
            port,
            counts,
            accept,
        }
    }

    /// Commands seen so far, by name.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.counts.calls.lock().clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.counts.connections.load(Ordering::Relaxed)
    }
}

async fn pipe(client: TcpStream, target: u16, counts: Arc<Counts>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
        let _ = to_client.shutdown().await;
    });
    let mut buffer = vec![0; 16 * 1024];
    let mut pending = Vec::new();
    loop {
        let n = match from_client.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to_server.write_all(&buffer[..n]).await.is_err() {
            break;
        }
        pending.extend_from_slice(&buffer[..n]);
        let mut used = 0;
        while let Some((length, name)) = command(&pending[used..]) {
            used += length;
            if !name.is_empty() {
                *counts.calls.lock().entry(name).or_default() += 1;
            }
        }
        pending.drain(..used);
    }
    let _ = to_server.shutdown().await;
}

/// Commands Redis names with their subcommand (`sentinel|master`).
const CONTAINERS: [&str; 8] = [
    "sentinel", "cluster", "client", "command", "config", "pubsub", "script", "acl",
];

/// The first whole command in `buf`: its length and name (empty for a
/// blank inline line); `None` until it has all arrived.
fn command(buf: &[u8]) -> Option<(usize, String)> {
    let line_end = |from: usize| {
        buf.get(from..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p)
    };
    let number = |from: usize, to: usize| -> Option<usize> {
        std::str::from_utf8(&buf[from..to]).ok()?.parse().ok()
    };
    let mut args: Vec<String> = vec![];
    let used = if buf.first()? == &b'*' {
        let end = line_end(1)?;
        let count = number(1, end)?;
        let mut at = end + 2;
        for _ in 0..count {
            if buf.get(at)? != &b'$' {
                return None;
            }
            let end = line_end(at + 1)?;
            let len = number(at + 1, end)?;
            let start = end + 2;
            if buf.len() < start + len + 2 {
                return None;
            }
            if args.len() < 2 {
                args.push(String::from_utf8_lossy(&buf[start..start + len]).to_lowercase());
            }
            at = start + len + 2;
        }
        at
    } else {
        // An inline command: one line.
        let end = buf.iter().position(|&b| b == b'\n')?;
        args = String::from_utf8_lossy(&buf[..end])
            .split_whitespace()
            .take(2)
            .map(str::to_lowercase)
            .collect();
        end + 1
    };
    let name = match args.as_slice() {
        [] => String::new(),
        [first, second, ..] if CONTAINERS.contains(&first.as_str()) => format!("{first}|{second}"),
        [first, ..] => first.clone(),
    };
    Some((used, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_whole_commands_only() {
        let two = b"*3\r\n$8\r\nSENTINEL\r\n$6\r\nMASTER\r\n$8\r\nmymaster\r\n*1\r\n$4\r\nPING\r\n";
        let (used, name) = command(two).unwrap();
        assert_eq!(name, "sentinel|master");
        assert_eq!(command(&two[used..]).unwrap(), (14, "ping".to_string()));
        // Cut anywhere: not yet.
        for cut in 1..used {
            assert_eq!(command(&two[..cut]), None, "cut at {cut}");
        }
        assert_eq!(command(b"PING\r\n").unwrap(), (6, "ping".to_string()));
        assert_eq!(command(b"\r\n").unwrap(), (2, String::new()));
    }
}
