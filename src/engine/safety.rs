//! What the replicas confirmed of one lock write ([`Synced`]) and what
//! stands behind a hold against a failover ([`SafetyLevel`]): plain values,
//! made by `replica_sync` and read by everyone else.

/// What stands behind a hold against a failover: how many of the replicas a
/// failover could promote had confirmed the write that took it (see
/// [`crate::LockGuard::safety`]).
///
/// Replication in Redis is asynchronous; a `WAIT` only tells how many
/// replicas had the write when it answered. A failover that promotes a
/// replica without the write loses the lock, whatever any client does: the
/// more replicas confirmed, the fewer failovers can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum SafetyLevel {
    /// Nothing was checked: a single-server address (Redisson never waits
    /// for replicas there), or a server without `WAIT` with
    /// `checkLockSyncedSlaves` off.
    NotChecked,
    /// `acked` of the `promotable` replicas a failover could promote
    /// confirmed the write. `promotable == 0`: no replica could take over
    /// from the primary, so no failover can lose the lock (and none can
    /// keep the deployment up without the primary).
    Replicas {
        /// Promotable replicas that confirmed.
        acked: u32,
        /// Replicas a failover could promote, in the deployment's view.
        promotable: u32,
    },
}

/// What the replicas confirmed for one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Synced {
    /// Nothing to wait for: a single-server address, or a server without
    /// `WAIT` with `checkLockSyncedSlaves` off.
    NotWaited,
    /// The quorum confirmed (or the check is off). `left_out` replicas
    /// could be promoted again once back, without the write: confirmed for
    /// now only (the hold is at risk until they acknowledge a later write).
    Confirmed {
        acked: u32,
        promotable: u32,
        left_out: u32,
    },
    /// Too few promotable replicas confirmed within `slavesSyncTimeout`,
    /// or none could (`unsettled`: a failover under way).
    Short {
        acked: u32,
        required: u32,
        promotable: u32,
        unsettled: Option<String>,
    },
}

impl Synced {
    /// The safety level a hold confirmed this way reached.
    pub(crate) fn level(&self) -> SafetyLevel {
        match *self {
            Synced::NotWaited => SafetyLevel::NotChecked,
            Synced::Confirmed {
                acked, promotable, ..
            }
            | Synced::Short {
                acked, promotable, ..
            } => SafetyLevel::Replicas { acked, promotable },
        }
    }

    pub(crate) fn is_short(&self) -> bool {
        matches!(self, Synced::Short { .. })
    }

    /// Confirmed while a replica that could be promoted again once back
    /// was left out: it does not have the write.
    pub(crate) fn is_for_now(&self) -> bool {
        matches!(self, Synced::Confirmed { left_out, .. } if *left_out > 0)
    }
}
