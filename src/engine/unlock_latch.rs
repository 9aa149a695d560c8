//! Unlock latches are deleted once their unlock is settled, as Redisson does,
//! but batched: one `DEL` carries every latch settled within a couple of
//! milliseconds (or while the previous `DEL` was in flight), so a client sends
//! far fewer commands than unlocks.
//! Nothing waits for it; a latch that is not deleted expires with its TTL.
//! Shutdown waits for the latches already settled ([`LatchSweeper::flush`]):
//! it closes the connection the `DEL`s go out on.

use fred::clients::Client;
use fred::interfaces::KeysInterface;
use tokio::sync::{mpsc, oneshot};

use crate::naming;

/// Most latches per `DEL`.
const BATCH: usize = 512;
/// Latches waiting for deletion at most; beyond that they are left to expire.
const QUEUE: usize = 65_536;
/// How long settled latches gather before a `DEL`.
const GATHER: std::time::Duration = std::time::Duration::from_millis(2);

pub(crate) struct LatchSweeper {
    settled: mpsc::Sender<Sweep>,
}

/// What the sweeping task is sent.
enum Sweep {
    /// A settled latch's key.
    Latch(String),
    /// Delete what was sent before, then answer.
    Flush(oneshot::Sender<()>),
}

impl LatchSweeper {
    /// Starts the sweeping task; it ends when the sweeper is dropped.
    pub(crate) fn start(redis: Client, cluster: bool) -> Self {
        let (settled, rx) = mpsc::channel(QUEUE);
        tokio::spawn(sweep(redis, cluster, rx));
        LatchSweeper { settled }
    }

    /// Queues a settled latch key for deletion (if the queue is full, the
    /// latch simply expires with its TTL).
    pub(crate) fn discard(&self, latch: String) {
        let _ = self.settled.try_send(Sweep::Latch(latch));
    }

    /// Waits until the latches discarded so far are deleted (or their `DEL`
    /// failed), at most `limit`.
    pub(crate) async fn flush(&self, limit: std::time::Duration) {
        let (done, deleted) = oneshot::channel();
        let flushed = async {
            if self.settled.send(Sweep::Flush(done)).await.is_ok() {
                let _ = deleted.await;
            }
        };
        let _ = tokio::time::timeout(limit, flushed).await;
    }
}

async fn sweep(redis: Client, cluster: bool, mut settled: mpsc::Receiver<Sweep>) {
    let mut received = Vec::with_capacity(BATCH);
    while settled.recv_many(&mut received, BATCH).await > 0 {
        // Gather a little longer so that, even at low rates, one DEL carries
        // several latches instead of trailing every unlock.
        tokio::time::sleep(GATHER).await;
        while received.len() < BATCH {
            match settled.try_recv() {
                Ok(sweep) => received.push(sweep),
                Err(_) => break,
            }
        }
        let mut flushed = vec![];
        let mut batch = Vec::with_capacity(received.len());
        for sweep in received.drain(..) {
            match sweep {
                Sweep::Latch(key) => batch.push(key),
                Sweep::Flush(done) => flushed.push(done),
            }
        }
        if cluster {
            // One DEL per hash slot: a multi-key command must stay in one slot.
            batch.sort_by_cached_key(|key| naming::slot(key));
            let deletes = batch
                .chunk_by(|a, b| naming::slot(a) == naming::slot(b))
                .map(|group| delete(&redis, group.to_vec()));
            futures::future::join_all(deletes).await;
        } else if !batch.is_empty() {
            delete(&redis, batch).await;
        }
        for done in flushed {
            let _ = done.send(());
        }
    }
}

async fn delete(redis: &Client, keys: Vec<String>) {
    if let Err(e) = redis.del::<i64, _>(keys).await {
        tracing::debug!(error = %e, "deleting unlock latches failed; they expire on their own");
    }
}
