//! Redisson's synchronizers that are not locks: [`RSemaphore`],
//! [`RPermitExpirableSemaphore`] and [`RCountDownLatch`]. They wait, settle
//! and shut down through the same engine as the locks; what they add is a
//! counter instead of an owner.
//!
//! | module | job |
//! |---|---|
//! | `pool` | what both semaphores share, as tokio's semaphores share its `batch_semaphore`: taking permits through the engine's `Waiter` with their wake-up rule, replayable writes, loans given back on drop |
//! | `semaphore` | [`RSemaphore`] and its guard: its scripts' arguments and its API |
//! | `permit_expirable` | [`RPermitExpirableSemaphore`]: its API (`mod.rs`), permit ids (`id`), leases (`lease`), its guard (`guard`) |
//! | `count_down_latch` | [`RCountDownLatch`] |
//!
//! [`RSemaphore`]: semaphore::RSemaphore
//! [`RPermitExpirableSemaphore`]: permit_expirable::RPermitExpirableSemaphore
//! [`RCountDownLatch`]: count_down_latch::RCountDownLatch

pub(crate) mod count_down_latch;
pub(crate) mod permit_expirable;
mod pool;
pub(crate) mod semaphore;

use crate::engine::now_ms;
