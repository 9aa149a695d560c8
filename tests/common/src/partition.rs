//! A proxy in front of one data node that can cut it off from its replicas
//! (or from its primary) while clients and sentinels still reach it: a
//! network partition of the replication links only.
//!
//! Everything that talks to the node goes through the proxy (the sentinels
//! know every node by its proxy's port, replicas announce theirs), and the
//! proxy tells replication links from the rest by what they send: a
//! replica's link sends `REPLCONF` and `PSYNC` before the stream starts.
//! It can also cut the connections of one client that names itself
//! (`CLIENT SETNAME`, which a sentinel sends first on each of its links:
//! `sentinel-<first 8 characters of its id>-cmd` and `...-pubsub`), so one
//! sentinel can be partitioned from a node while everything else reaches it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct ReplicationProxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    /// Replicas (by the port they announce) whose links are cut.
    cut_replicas: Arc<Mutex<Vec<u16>>>,
    /// Clients (by the start of the name they set) whose links are cut.
    cut_names: Arc<Mutex<Vec<String>>>,
    /// Every link through the proxy, and whether it is a replication link.
    links: Arc<Mutex<Vec<Link>>>,
    accept: tokio::task::JoinHandle<()>,
}

/// A link, and what it showed of itself so far.
struct Link {
    handle: tokio::task::AbortHandle,
    /// It is a replication link.
    replication: Arc<AtomicBool>,
    /// The port its replica announced (`REPLCONF listening-port`), once seen.
    replica_port: Arc<Mutex<Option<u16>>>,
    /// The name its client set (`CLIENT SETNAME`), once seen, in lowercase.
    name: Arc<Mutex<Option<String>>>,
}

/// The port a replica announces in its handshake, if `seen` has it.
fn announced_port(seen: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(seen).to_ascii_lowercase();
    let at = text.find("listening-port")?;
    // RESP: `$14\r\nlistening-port\r\n$5\r\n12345\r\n`
    text[at..].split("\r\n").nth(2)?.trim().parse().ok()
}

/// The name a client set (`CLIENT SETNAME`), in lowercase, if `seen` has it.
fn client_name(seen: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(seen).to_ascii_lowercase();
    let at = text.find("setname")?;
    // RESP: `$7\r\nsetname\r\n$21\r\nsentinel-1a2b3c4d-cmd\r\n`
    let name = text[at..].split("\r\n").nth(2)?.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// Whether what a connection sent so far shows it is a replication link.
fn is_replication(seen: &[u8]) -> bool {
    let has = |needle: &[u8]| {
        seen.windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
    };
    has(b"REPLCONF") || has(b"PSYNC") || has(b"\r\nSYNC\r\n")
}

impl ReplicationProxy {
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let cut_replicas: Arc<Mutex<Vec<u16>>> = Arc::default();
        let cut_names: Arc<Mutex<Vec<String>>> = Arc::default();
        let links: Arc<Mutex<Vec<Link>>> = Arc::default();
        let (c, cr, cn, l) = (
            cut.clone(),
            cut_replicas.clone(),
            cut_names.clone(),
            links.clone(),
        );
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (cut, cut_replicas, cut_names, links) =
                    (c.clone(), cr.clone(), cn.clone(), l.clone());
                let replication = Arc::new(AtomicBool::new(false));
                let marked = replication.clone();
                let replica_port: Arc<Mutex<Option<u16>>> = Arc::default();
                let announced = replica_port.clone();
                let name: Arc<Mutex<Option<String>>> = Arc::default();
                let named = name.clone();
                let link = tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    // Forwarded as it comes: with Nagle's algorithm a small
                    // write waits for the peer's delayed ACK (40 ms), a
                    // delay no real network adds to every WAIT.
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (mut down_r, mut down_w) = inbound.into_split();
                    let (mut up_r, mut up_w) = outbound.into_split();
                    let upward = async {
                        let mut seen = Vec::new();
                        let mut known = false;
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match down_r.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if seen.len() < 4096 {
                                seen.extend_from_slice(&buf[..n]);
                                if !known && is_replication(&seen) {
                                    known = true;
                                    marked.store(true, Ordering::SeqCst);
                                }
                                if let Some(port) = announced_port(&seen) {
                                    *announced.lock() = Some(port);
                                }
                                if let Some(name) = client_name(&seen) {
                                    *named.lock() = Some(name);
                                }
                            }
                            let replica = *announced.lock();
                            let severed = cut.load(Ordering::SeqCst)
                                || replica.is_some_and(|p| cut_replicas.lock().contains(&p));
                            if known && severed {
                                return;
                            }
                            let client = named.lock().clone();
                            if client.is_some_and(|n| {
                                cut_names.lock().iter().any(|cut| n.starts_with(cut))
                            }) {
                                return;
                            }
                            if up_w.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    let downward = tokio::io::copy(&mut up_r, &mut down_w);
                    // Either side ending ends both (the streams drop).
                    tokio::select! {
                        _ = upward => {}
                        _ = downward => {}
                    }
                });
                let mut links = links.lock();
                links.retain(|link| !link.handle.is_finished());
                links.push(Link {
                    handle: link.abort_handle(),
                    replication,
                    replica_port,
                    name,
                });
            }
        });
        ReplicationProxy {
            port,
            cut,
            cut_replicas,
            cut_names,
            links,
            accept,
        }
    }

    /// Cuts every connection whose client named itself (`CLIENT SETNAME`)
    /// with a name starting with `prefix`, and every one it makes, until
    /// `heal_client`: that client loses the node while everyone else still
    /// reaches it. A sentinel names its links `sentinel-<first 8
    /// characters of its id>-...`, so `sentinel-1a2b3c4d` partitions one
    /// sentinel from this node.
    pub fn cut_client(&self, prefix: &str) {
        let prefix = prefix.to_ascii_lowercase();
        for link in self.links.lock().iter() {
            if link
                .name
                .lock()
                .as_ref()
                .is_some_and(|n| n.starts_with(&prefix))
            {
                link.handle.abort();
            }
        }
        self.cut_names.lock().push(prefix);
    }

    pub fn heal_client(&self, prefix: &str) {
        let prefix = prefix.to_ascii_lowercase();
        self.cut_names.lock().retain(|p| *p != prefix);
    }

    /// Cuts the replication link of the replica that announces
    /// `replica_port` (through this proxy, its primary's), and every one it
    /// tries to start, until `heal_replica`: that replica stops receiving
    /// writes while the sentinels still reach it.
    pub fn cut_replica(&self, replica_port: u16) {
        self.cut_replicas.lock().push(replica_port);
        for link in self.links.lock().iter() {
            if link.replication.load(Ordering::SeqCst)
                && *link.replica_port.lock() == Some(replica_port)
            {
                link.handle.abort();
            }
        }
    }

    pub fn heal_replica(&self, replica_port: u16) {
        self.cut_replicas.lock().retain(|p| *p != replica_port);
    }

    /// Cuts every replication link through the proxy, and every one that
    /// tries to start, until `heal`.
    pub fn partition(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for link in self.links.lock().iter() {
            if link.replication.load(Ordering::SeqCst) {
                link.handle.abort();
            }
        }
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for ReplicationProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for link in self.links.lock().drain(..) {
            link.handle.abort();
        }
    }
}
