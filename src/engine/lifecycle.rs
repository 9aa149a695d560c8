//! A client's life: open, closing, stopped.
//!
//! * **Closing** (`shutdown()` has begun): no new operation starts, and every
//!   waiter stops waiting with `Error::Shutdown` at once.
//! * Operations already running, and the background work that settles an
//!   abandoned one (a dropped acquire, an unlock finished for a caller who
//!   left, a drain of untracked holds), are counted as [`Busy`]; shutdown
//!   waits for them (bounded) before it releases what is still held, so a
//!   lock taken by a cancelled acquire is given back instead of outliving
//!   the client for a lease.
//! * **Stopped**: the background tasks (watchdog, subscriber, latch sweeper)
//!   end and the connections close.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::error::{Error, Result};

pub(crate) struct Lifecycle {
    closing: AtomicBool,
    closing_tx: watch::Sender<bool>,
    stop_tx: watch::Sender<bool>,
    busy: AtomicUsize,
    idle: Notify,
}

/// One operation in flight; dropping it ends it.
pub(crate) struct Busy(Arc<Lifecycle>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Lifecycle {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Lifecycle {
            closing: AtomicBool::new(false),
            closing_tx: watch::Sender::new(false),
            stop_tx: watch::Sender::new(false),
            busy: AtomicUsize::new(0),
            idle: Notify::new(),
        })
    }

    /// Starts an operation, unless the client is closing.
    pub(crate) fn enter(self: &Arc<Self>) -> Result<Busy> {
        let busy = self.track();
        // Counted before the check: shutdown sets the flag before it reads
        // the count, so either it waits for this operation or we see the flag.
        if self.closing.load(Ordering::SeqCst) {
            return Err(Error::Shutdown);
        }
        Ok(busy)
    }

    /// Counts work that must finish before shutdown goes on, even while
    /// closing: the settlement of something already started.
    pub(crate) fn track(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Completes once the client is closing.
    pub(crate) fn closing(&self) -> watch::Receiver<bool> {
        self.closing_tx.subscribe()
    }

    /// Completes once the background tasks must stop.
    pub(crate) fn stopped(&self) -> watch::Receiver<bool> {
        self.stop_tx.subscribe()
    }

    /// Begins closing; false if it had begun already.
    pub(crate) fn begin_closing(&self) -> bool {
        if self.closing.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.closing_tx.send_replace(true);
        true
    }

    /// Waits until no operation is in flight, at most `limit`; false on timeout.
    pub(crate) async fn until_idle(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                let idle = self.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if self.busy.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        })
        .await
        .is_ok()
    }

    /// Stops the background tasks.
    pub(crate) fn stop(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.closing_tx.send_replace(true);
        self.stop_tx.send_replace(true);
    }
}

/// Completes once `flag` turns true (or its sender is gone).
pub(crate) async fn until_set(mut flag: watch::Receiver<bool>) {
    let _ = flag.wait_for(|set| *set).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closing_refuses_new_work_and_waits_for_the_running() {
        let life = Lifecycle::new();
        let running = life.enter().unwrap();
        assert!(life.begin_closing());
        assert!(!life.begin_closing());
        assert!(matches!(life.enter(), Err(Error::Shutdown)));
        // A settlement of started work is still counted.
        let settling = life.track();
        assert!(!life.until_idle(Duration::from_millis(10)).await);
        drop(running);
        drop(settling);
        assert!(life.until_idle(Duration::from_secs(5)).await);
    }
}
