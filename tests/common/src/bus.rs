//! A proxy in front of one cluster node's bus port, so that a node can be
//! cut off the cluster bus while clients, and its replication link, still
//! reach it: a partition of the bus only.
//!
//! Each node announces its proxy's port as its bus port
//! (`cluster-announce-bus-port`), so every other node's link to it goes
//! through the proxy. A node's own links to the others go through their
//! proxies; each link's first message names its sender (the 40-character
//! node id at byte 40 of the bus header), so those proxies can cut the
//! links a given node makes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The bus header's signature, and where its sender id sits.
const SIGNATURE: &[u8] = b"RCmb";
const SENDER: std::ops::Range<usize> = 40..80;

pub struct BusProxy {
    pub port: u16,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct State {
    /// Every link into the node is cut, and every new one.
    isolated: AtomicBool,
    /// Node ids whose links into the node are cut.
    cut_senders: Mutex<Vec<String>>,
    links: Mutex<Vec<Link>>,
}

struct Link {
    handle: tokio::task::AbortHandle,
    /// The node that opened the link, once its first message is seen.
    sender: Arc<Mutex<Option<String>>>,
}

/// The sender's node id in the first bus message, if `seen` holds it.
fn sender_of(seen: &[u8]) -> Option<String> {
    if seen.len() < SENDER.end || !seen.starts_with(SIGNATURE) {
        return None;
    }
    Some(String::from_utf8_lossy(&seen[SENDER]).into_owned())
}

impl State {
    fn severs(&self, sender: Option<&str>) -> bool {
        self.isolated.load(Ordering::SeqCst)
            || sender.is_some_and(|s| self.cut_senders.lock().iter().any(|c| c == s))
    }
}

impl BusProxy {
    /// A proxy forwarding to the bus port `upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if shared.isolated.load(Ordering::SeqCst) {
                    // Refused at once: the node is unreachable on its bus.
                    continue;
                }
                let state = shared.clone();
                let sender: Arc<Mutex<Option<String>>> = Arc::default();
                let seen_sender = sender.clone();
                let link = tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    // Forwarded as it comes, as the nodes themselves send.
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (mut down_r, mut down_w) = inbound.into_split();
                    let (mut up_r, mut up_w) = outbound.into_split();
                    let upward = async {
                        let mut seen = Vec::new();
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match down_r.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if seen.len() < SENDER.end {
                                seen.extend_from_slice(&buf[..n]);
                                if let Some(id) = sender_of(&seen) {
                                    *seen_sender.lock() = Some(id);
                                }
                            }
                            let from = seen_sender.lock().clone();
                            if state.severs(from.as_deref()) {
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
                let mut links = shared.links.lock();
                links.retain(|l| !l.handle.is_finished());
                links.push(Link {
                    handle: link.abort_handle(),
                    sender,
                });
            }
        });
        BusProxy {
            port,
            state,
            accept,
        }
    }

    /// Cuts every link into the node, and refuses new ones, until `rejoin`.
    pub fn isolate(&self) {
        self.state.isolated.store(true, Ordering::SeqCst);
        for link in self.state.links.lock().drain(..) {
            link.handle.abort();
        }
    }

    pub fn rejoin(&self) {
        self.state.isolated.store(false, Ordering::SeqCst);
    }

    /// Cuts every link node `id` opens into this node, until `heal_sender`.
    pub fn cut_sender(&self, id: &str) {
        self.state.cut_senders.lock().push(id.to_string());
        for link in self.state.links.lock().iter() {
            if link.sender.lock().as_deref() == Some(id) {
                link.handle.abort();
            }
        }
    }

    pub fn heal_sender(&self, id: &str) {
        self.state.cut_senders.lock().retain(|s| s != id);
    }
}

impl Drop for BusProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for link in self.state.links.lock().drain(..) {
            link.handle.abort();
        }
    }
}
