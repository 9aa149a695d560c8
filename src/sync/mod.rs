//! Redisson's synchronizers that are not locks: [`RSemaphore`],
//! [`RPermitExpirableSemaphore`] and [`RCountDownLatch`], one file each with
//! its guards. They wait, settle and shut down through the same engine as
//! the locks; what they add is a counter instead of an owner.
//!
//! [`RSemaphore`]: semaphore::RSemaphore
//! [`RPermitExpirableSemaphore`]: permit_expirable::RPermitExpirableSemaphore
//! [`RCountDownLatch`]: count_down_latch::RCountDownLatch

pub(crate) mod count_down_latch;
pub(crate) mod permit_expirable;
pub(crate) mod semaphore;

use crate::error::{Error, Result};

/// Checks a number of permits to take or return: at least 1, and a Java
/// `int`, as every JVM client reads them.
fn permits(n: u32) -> Result<i64> {
    if n == 0 || n > i32::MAX as u32 {
        return Err(Error::InvalidArgument(format!(
            "permits must be between 1 and {} (a Java int), not {n}",
            i32::MAX
        )));
    }
    Ok(i64::from(n))
}

/// The current wall-clock time in ms, which the permit-expirable
/// semaphore's scripts compare lease deadlines with (Redisson passes
/// `System.currentTimeMillis()`).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
