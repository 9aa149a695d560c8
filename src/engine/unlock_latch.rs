//! Unlock latches are deleted once their unlock is settled, as Redisson does,
//! but batched: one `DEL` carries every latch settled within a couple of
//! milliseconds (or while the previous `DEL` was in flight), so a client sends
//! far fewer commands than unlocks.
//! Nothing waits for it; a latch that is not deleted expires with its TTL.

use fred::clients::Client;
use fred::interfaces::KeysInterface;
use tokio::sync::mpsc;

use crate::naming;

/// Most latches per `DEL`.
const BATCH: usize = 512;
/// Latches waiting for deletion at most; beyond that they are left to expire.
const QUEUE: usize = 65_536;
/// How long settled latches gather before a `DEL`.
const GATHER: std::time::Duration = std::time::Duration::from_millis(2);

pub(crate) struct LatchSweeper {
    settled: mpsc::Sender<String>,
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
        let _ = self.settled.try_send(latch);
    }
}

async fn sweep(redis: Client, cluster: bool, mut settled: mpsc::Receiver<String>) {
    let mut batch = Vec::with_capacity(BATCH);
    while settled.recv_many(&mut batch, BATCH).await > 0 {
        // Gather a little longer so that, even at low rates, one DEL carries
        // several latches instead of trailing every unlock.
        tokio::time::sleep(GATHER).await;
        while batch.len() < BATCH {
            match settled.try_recv() {
                Ok(latch) => batch.push(latch),
                Err(_) => break,
            }
        }
        if cluster {
            // One DEL per hash slot: a multi-key command must stay in one slot.
            batch.sort_by_cached_key(|key| naming::slot(key));
            let deletes = batch
                .chunk_by(|a, b| naming::slot(a) == naming::slot(b))
                .map(|group| delete(&redis, group.to_vec()));
            futures::future::join_all(deletes).await;
        } else {
            delete(&redis, std::mem::take(&mut batch)).await;
        }
        batch.clear();
    }
}

async fn delete(redis: &Client, keys: Vec<String>) {
    if let Err(e) = redis.del::<i64, _>(keys).await {
        tracing::debug!(error = %e, "deleting unlock latches failed; they expire on their own");
    }
}
