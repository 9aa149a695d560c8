//! The permit-expirable semaphore's leases: reading them, moving their
//! ends, and the deadlines its scripts compare with the wall clock (as
//! Redisson's, `System.currentTimeMillis()`).

use std::sync::LazyLock;
use std::time::Duration;

use fred::interfaces::SortedSetsInterface;
use fred::types::Value;

use super::{PermitId, PermitLease, RPermitExpirableSemaphore};
use crate::engine::lease::lease_millis;
use crate::engine::script::{self, Script};
use crate::error::{Error, Result};
use crate::sync::now_ms;
use crate::sync::pool::flag;

/// Returns every ended lease first: never batched.
static LEASE_TIME: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../../lua/permit_expirable/lease_time.lua")));
static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../../lua/permit_expirable/renew.lua")));
static UPDATE_LEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::walking(include_str!(
        "../../../lua/permit_expirable/update_lease.lua"
    ))
});

/// The score Redisson gives a lease that never ends.
pub(super) const NEVER: i64 = 922_337_203_685_477;

/// The lease deadline a lease means now, in wall-clock ms.
pub(super) fn deadline(lease: Option<Duration>) -> Result<i64> {
    match lease {
        None => Ok(NEVER),
        Some(lease) => Ok(now_ms() + lease_millis(lease, "lease")?),
    }
}

impl RPermitExpirableSemaphore {
    /// Moves the leases of `ids` to `lease` from now, in one script; how
    /// many were still leased. The watchdog's renewal of kept-alive permits.
    pub(super) async fn renew(&self, ids: &[PermitId], lease: Duration) -> Result<usize> {
        let object = &self.pool.object;
        let _busy = object.enter()?;
        let mut args: Vec<Value> = vec![
            deadline(Some(lease))?.into(),
            now_ms().into(),
            self.pool.publish(),
        ];
        args.extend(ids.iter().map(|id| id.to_value()));
        let keys = vec![self.name().into(), self.leases_key(), self.channel()];
        let reply = object.run(object.call(&RENEW, keys, args)).await?;
        match script::as_i64(&reply) {
            Some(moved) if moved >= 0 => Ok(moved as usize),
            _ => Err(script::unexpected("renew", &reply)),
        }
    }

    /// Every permit leased now, with its lease's end, earliest first
    /// (expired leases not yet returned are left out).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a read.
    ///
    /// ```no_run
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// for lease in slots.leases().await? {
    ///     match lease.expires_at_ms {
    ///         Some(at) => println!("slot {} leased until {at} ms (Unix time)", lease.id),
    ///         None => println!("slot {} leased until released", lease.id),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leases(&self) -> Result<Vec<PermitLease>> {
        let object = &self.pool.object;
        let _busy = object.enter()?;
        let now = now_ms();
        let entries: Vec<(Value, f64)> = object
            .query(
                object
                    .reader()
                    .zrange(self.leases_key(), 0, -1, None, false, None, true),
            )
            .await?;
        Ok(entries
            .into_iter()
            .filter_map(|(member, score)| {
                let bytes = member.as_bytes()?;
                let id = PermitId(bytes.try_into().ok()?);
                let deadline = score as i64;
                if deadline <= now {
                    return None;
                }
                let expires_at_ms = (deadline != NEVER).then_some(deadline);
                Some(PermitLease { id, expires_at_ms })
            })
            .collect())
    }

    /// Moves the end of permit `id`'s lease to `lease` from now (`None`:
    /// never), as Redisson's `updateLeaseTime`. False if it is no longer
    /// leased (released, or expired).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 1 ms or beyond
    /// [`crate::MAX_LEASE`]; [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: setting the same end twice sets it once.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let permit = slots.acquire(1).lease(Duration::from_secs(60)).await?;
    /// let id = permit.ids()[0];
    /// // The year-end statement runs long: 5 more minutes from now.
    /// if !slots.update_lease(id, Some(Duration::from_secs(300))).await? {
    ///     eprintln!("lease {id} had ended already: the slot went back to the pool");
    /// }
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn update_lease(&self, id: PermitId, lease: Option<Duration>) -> Result<bool> {
        let deadline = deadline(lease)?;
        let reply = self
            .reclaiming(&UPDATE_LEASE, vec![id.to_value(), deadline.into()])
            .await?;
        flag("update_lease", &reply)
    }

    /// How long permit `id`'s lease has left: `Some(left)`, or `None` for a
    /// permit leased without an end (Redisson's `getLeaseTime`, which answers
    /// `-1` for that). Ended leases are returned to the pool first, as by
    /// every call of this object.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `id` is not leased (released, its
    /// lease ended, or never leased): Redisson's `IllegalArgumentException`
    /// "Permit with id ... has already been released or doesn't exist";
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a read, but for returning ended leases, which any call
    /// would do.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redisson_lock::RPermitExpirableSemaphore;
    /// # async fn demo(slots: RPermitExpirableSemaphore) -> redisson_lock::Result<()> {
    /// let permit = slots.acquire(1).lease(Duration::from_secs(60)).await?;
    /// if let Some(left) = slots.lease_time(permit.ids()[0]).await? {
    ///     println!("render slot leased for {left:?} more");
    /// }
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lease_time(&self, id: PermitId) -> Result<Option<Duration>> {
        let reply = self
            .reclaiming(&LEASE_TIME, vec![id.to_value(), NEVER.into()])
            .await?;
        match script::as_i64(&reply) {
            Some(-1) => Ok(None),
            Some(left) if left > 0 => Ok(Some(Duration::from_millis(left as u64))),
            Some(0) => Err(Error::InvalidArgument(format!(
                "permit {id} of `{}` has already been released, its lease ended, or it does not exist",
                self.name()
            ))),
            _ => Err(script::unexpected("lease_time", &reply)),
        }
    }
}
