//! A proxy in front of one data node that can cut it off from its replicas
//! (or from its primary) while clients and sentinels still reach it: a
//! network partition of the replication links only.
//!
//! Everything that talks to the node goes through the proxy (the sentinels
//! know every node by its proxy's port, replicas announce theirs), and the
//! proxy tells replication links from the rest by what they send: a
//! replica's link sends `REPLCONF` and `PSYNC` before the stream starts.

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
    /// Every link through the proxy, and whether it is a replication link.
    links: Arc<Mutex<Vec<Link>>>,
    accept: tokio::task::JoinHandle<()>,
}

/// A link, whether it is a replication link, and the port its replica
/// announced (`REPLCONF listening-port`), once seen.
type Link = (
    tokio::task::AbortHandle,
    Arc<AtomicBool>,
    Arc<Mutex<Option<u16>>>,
);

/// The port a replica announces in its handshake, if `seen` has it.
fn announced_port(seen: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(seen).to_ascii_lowercase();
    let at = text.find("listening-port")?;
    // RESP: `$14\r\nlistening-port\r\n$5\r\n12345\r\n`
    text[at..].split("\r\n").nth(2)?.trim().parse().ok()
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
        let links: Arc<Mutex<Vec<Link>>> = Arc::default();
        let (c, cr, l) = (cut.clone(), cut_replicas.clone(), links.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (cut, cut_replicas, links) = (c.clone(), cr.clone(), l.clone());
                let replication = Arc::new(AtomicBool::new(false));
                let marked = replication.clone();
                let replica_port: Arc<Mutex<Option<u16>>> = Arc::default();
                let announced = replica_port.clone();
                let link = tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
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
                            }
                            let replica = *announced.lock();
                            let severed = cut.load(Ordering::SeqCst)
                                || replica.is_some_and(|p| cut_replicas.lock().contains(&p));
                            if known && severed {
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
                links.retain(|(handle, _, _)| !handle.is_finished());
                links.push((link.abort_handle(), replication, replica_port));
            }
        });
        ReplicationProxy {
            port,
            cut,
            cut_replicas,
            links,
            accept,
        }
    }

    /// Cuts the replication link of the replica that announces
    /// `replica_port` (through this proxy, its primary's), and every one it
    /// tries to start, until `heal_replica`: that replica stops receiving
    /// writes while the sentinels still reach it.
    pub fn cut_replica(&self, replica_port: u16) {
        self.cut_replicas.lock().push(replica_port);
        for (link, replication, port) in self.links.lock().iter() {
            if replication.load(Ordering::SeqCst) && *port.lock() == Some(replica_port) {
                link.abort();
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
        for (link, replication, _) in self.links.lock().iter() {
            if replication.load(Ordering::SeqCst) {
                link.abort();
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
        for (link, _, _) in self.links.lock().drain(..) {
            link.abort();
        }
    }
}
