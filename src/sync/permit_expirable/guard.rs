//! [`ExpirablePermits`]: the guard of permits leased from an
//! [`RPermitExpirableSemaphore`].

use std::fmt;
use std::time::Duration;

use super::{PermitId, RPermitExpirableSemaphore};
use crate::engine::loan::Lent;
use crate::error::Result;

/// Permits leased from an [`RPermitExpirableSemaphore`], given back when
/// this guard is dropped (in the background), by
/// [`ExpirablePermits::release`], or by the client's shutdown; exactly once.
/// A lease that ends first returns them by itself.
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
    /// let permits = slots.acquire(2, Some(Duration::from_secs(60))).await?;
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
    /// let permit = slots.acquire(1, Some(Duration::from_secs(30))).await?;
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
    /// their leases end. Returns the ids.
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
