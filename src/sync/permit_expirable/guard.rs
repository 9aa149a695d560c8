//! [`ExpirablePermits`]: the guard of permits leased from an
//! [`RPermitExpirableSemaphore`].

use std::fmt;
use std::time::Duration;

use super::{PermitId, RPermitExpirableSemaphore};
use crate::engine::lease::LostSignal;
use crate::engine::loan::Lent;
use crate::error::Result;

/// Permits leased from an [`RPermitExpirableSemaphore`], given back when
/// this guard is dropped (in the background), by
/// [`ExpirablePermits::release`], or by the client's shutdown; exactly once.
/// A lease that ends first returns them by itself.
///
/// As a lock guard, it says when the permits are lost
/// ([`ExpirablePermits::lost`]): permits kept alive
/// ([`Acquire::kept_alive`](crate::Acquire::kept_alive)) when a renewal finds
/// one gone (its lease ended, or it was released by id elsewhere) or when
/// renewals fail until the lease runs out; permits with a fixed lease when
/// it ends; permits without a lease never.
#[must_use = "dropping the guard gives the permits back at once"]
pub struct ExpirablePermits {
    pub(super) semaphore: RPermitExpirableSemaphore,
    pub(super) ids: Vec<PermitId>,
    pub(super) lent: Lent,
}

impl ExpirablePermits {
    /// The permits' ids, as Redisson hands them out.
    pub fn ids(&self) -> &[PermitId] {
        &self.ids
    }

    /// The semaphore they came from.
    pub fn semaphore(&self) -> &RPermitExpirableSemaphore {
        &self.semaphore
    }

    /// Completes when the permits are lost (see [`ExpirablePermits`]): from
    /// then on others may hold them.
    ///
    /// # Cancel safety
    ///
    /// It only waits: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// // Kept alive by the watchdog while the render runs, however long.
    /// let permit = slots.acquire(1).kept_alive().await?;
    /// tokio::select! {
    ///     _ = render_invoice() => { permit.release().await?; }
    ///     _ = permit.lost() => eprintln!("render slot lost: stop rendering"),
    /// }
    /// # Ok(()) }
    /// # async fn render_invoice() {}
    /// ```
    pub async fn lost(&self) {
        self.lent.lost_signal().lost().await
    }

    /// Whether the permits are lost (see [`ExpirablePermits::lost`]).
    pub fn is_lost(&self) -> bool {
        self.lent.lost_signal().is_lost()
    }

    /// Whether the last renewal of kept-alive permits failed (Redis did not
    /// answer): they may be lost if the next one fails too. Cleared by a
    /// renewal that succeeds. True once lost.
    pub fn is_at_risk(&self) -> bool {
        self.lent.is_at_risk()
    }

    /// A `'static` handle on [`ExpirablePermits::lost`], to move into
    /// another task.
    pub fn lost_signal(&self) -> LostSignal {
        self.lent.lost_signal()
    }

    /// Moves the end of every permit's lease to `lease` from now (`None`:
    /// never); how many were still leased.
    ///
    /// # Errors
    ///
    /// As [`RPermitExpirableSemaphore::update_lease`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let permits = slots.acquire(2).lease(Duration::from_secs(60)).await?;
    /// // ... rendering takes longer than planned ...
    /// let extended = permits.set_lease(Some(Duration::from_secs(600))).await?;
    /// println!("{extended} of 2 slots now leased for 10 more minutes");
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_lease(&self, lease: Option<Duration>) -> Result<u32> {
        let mut moved = 0;
        for id in &self.ids {
            moved += u32::from(self.semaphore.update_lease(*id, lease).await?);
        }
        Ok(moved)
    }

    /// Gives the permits back now; how many were still leased (the others'
    /// leases had ended, which returned them already).
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`](crate::error::Error::Shutdown) if the client's shutdown
    /// gave them back already; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the release runs to its end in the background.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let permit = slots.acquire(1).lease(Duration::from_secs(30)).await?;
    /// // ... render the invoice PDF ...
    /// let returned = permit.release().await?; // 0 if the lease ended first
    /// println!("{returned} render slot(s) returned to the pool");
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<u32> {
        // At most the ids it holds, which `acquire(permits: u32)` bounds.
        self.lent.settle().await.map(|n| n as u32)
    }

    /// Keeps the permits leased and drops the guard: release them later by
    /// id ([`RPermitExpirableSemaphore::release`]), from any client, or let
    /// their leases end. Kept-alive permits are renewed no more: they end
    /// within the watchdog timeout. Returns the ids.
    pub fn forget(self) -> Vec<PermitId> {
        self.lent.forget();
        self.ids.clone()
    }
}

impl fmt::Debug for ExpirablePermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpirablePermits")
            .field("semaphore", &self.semaphore.name())
            .field("ids", &self.ids)
            .finish()
    }
}
