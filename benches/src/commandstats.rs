//! What every node has run: `INFO all` (its commandstats, connection counts)
//! read over one plain socket per node, opened once, speaking RESP by hand.
//! A read then sends exactly one `INFO` to each node and nothing else (no
//! handshake, no reconnection), so the reads' own share of the counts is
//! known: one `INFO` per node between two snapshots (a command is counted
//! once it has run, so a snapshot's own `INFO` shows in the next one).
//!
//! A sentinel has no commandstats: its commands are counted by the proxy in
//! front of it (`counting_proxy.rs`), and its `total_commands_processed`
//! tells whether any went around the proxy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::counting_proxy::CountingProxy;

/// One node's counters at one moment.
#[derive(Clone, Debug, Default)]
pub struct NodeStats {
    /// Calls per command (`cluster|nodes`, `evalsha`, ...).
    pub calls: BTreeMap<String, u64>,
    pub connections_received: u64,
    pub connected_clients: u64,
    /// `total_commands_processed`, the node's own count (the probe's `INFO`
    /// included).
    pub commands_processed: u64,
    /// `calls` and `connections_received` come from the node itself (its
    /// commandstats, which count the probe's `INFO`), not from a proxy.
    pub own_counts: bool,
}

/// Every node's counters at one moment.
pub struct Snapshot {
    pub at: Instant,
    pub nodes: Vec<NodeStats>,
}

/// One open socket per node, and the proxy in front of it if any.
pub struct Probe {
    links: Vec<(BufReader<TcpStream>, Option<Arc<CountingProxy>>)>,
}

const LIMIT: Duration = Duration::from_secs(10);

impl Probe {
    pub async fn connect(nodes: &[(u16, Option<Arc<CountingProxy>>)]) -> Probe {
        let mut links = vec![];
        for (port, proxy) in nodes {
            let stream = tokio::time::timeout(LIMIT, TcpStream::connect(("127.0.0.1", *port)))
                .await
                .expect("connecting to a node timed out")
                .expect("a node refused the probe");
            stream.set_nodelay(true).unwrap();
            links.push((BufReader::new(stream), proxy.clone()));
        }
        Probe { links }
    }

    /// Reads every node, one after the other (each read takes well under a
    /// millisecond).
    pub async fn snapshot(&mut self) -> Snapshot {
        let mut nodes = vec![];
        for (link, proxy) in &mut self.links {
            let text = tokio::time::timeout(LIMIT, info_all(link))
                .await
                .expect("INFO timed out");
            let mut stats = parse(&text);
            if let Some(proxy) = proxy {
                stats.calls = proxy.calls();
                stats.connections_received = proxy.connections();
                stats.own_counts = false;
            }
            nodes.push(stats);
        }
        Snapshot {
            at: Instant::now(),
            nodes,
        }
    }
}

async fn info_all(link: &mut BufReader<TcpStream>) -> String {
    link.get_mut()
        .write_all(b"*2\r\n$4\r\nINFO\r\n$3\r\nall\r\n")
        .await
        .unwrap();
    let mut header = String::new();
    link.read_line(&mut header).await.unwrap();
    let len: usize = header
        .strip_prefix('$')
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO answered {header:?}"));
    let mut body = vec![0; len + 2];
    link.read_exact(&mut body).await.unwrap();
    body.truncate(len);
    String::from_utf8_lossy(&body).into_owned()
}

fn parse(text: &str) -> NodeStats {
    let mut stats = NodeStats {
        own_counts: true,
        ..NodeStats::default()
    };
    for line in text.lines() {
        let line = line.trim();
        if let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        {
            let calls = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            stats.calls.insert(name.to_string(), calls);
        } else if let Some(n) = line.strip_prefix("total_connections_received:") {
            stats.connections_received = n.parse().unwrap_or(0);
        } else if let Some(n) = line.strip_prefix("connected_clients:") {
            stats.connected_clients = n.parse().unwrap_or(0);
        } else if let Some(n) = line.strip_prefix("total_commands_processed:") {
            stats.commands_processed = n.parse().unwrap_or(0);
        }
    }
    stats
}

/// Calls per command on one node between two snapshots, the reads' own
/// `INFO` taken out.
pub fn delta(before: &NodeStats, after: &NodeStats) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (name, &calls) in &after.calls {
        let mut n = calls.saturating_sub(before.calls.get(name).copied().unwrap_or(0));
        if name == "info" && after.own_counts {
            n = n.saturating_sub(1);
        }
        if n > 0 {
            out.insert(name.clone(), n);
        }
    }
    out
}

/// What a command is for, in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Learning the deployment: `CLUSTER *`, `INFO`, `ROLE`, `SENTINEL *`,
    /// `COMMAND *`, `HELLO`, `CONFIG *` (a replica's election settings).
    Discovery,
    Wait,
    Script,
    Other,
}

pub fn kind(command: &str) -> Kind {
    let base = command.split('|').next().unwrap_or(command);
    match base {
        "cluster" | "info" | "role" | "sentinel" | "command" | "hello" | "config" => {
            Kind::Discovery
        }
        "wait" => Kind::Wait,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" => Kind::Script,
        _ => Kind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_commandstats_and_takes_the_probe_out() {
        let before = parse(
            "# Stats\r\ntotal_connections_received:5\r\n# Commandstats\r\n\
             cmdstat_info:calls=3,usec=1,usec_per_call=0.3,rejected_calls=0,failed_calls=0\r\n",
        );
        let after = parse(
            "connected_clients:7\r\ntotal_connections_received:9\r\n\
             cmdstat_info:calls=4,usec=1\r\ncmdstat_cluster|nodes:calls=2,usec=9\r\n",
        );
        assert_eq!(after.connections_received, 9);
        assert_eq!(after.connected_clients, 7);
        let d = delta(&before, &after);
        assert_eq!(d.get("info"), None, "the probe's own INFO");
        assert_eq!(d["cluster|nodes"], 2);
        assert_eq!(kind("cluster|nodes"), Kind::Discovery);
        assert_eq!(kind("sentinel|get-master-addr-by-name"), Kind::Discovery);
        assert_eq!(kind("evalsha"), Kind::Script);
        assert_eq!(kind("ping"), Kind::Other);
    }
}
