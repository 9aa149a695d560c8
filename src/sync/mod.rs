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

use crate::engine::script::ScriptCall;
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

/// Adds (or with a negative `permits`, takes away) permits through the
/// object's `add_permits` script, replayable; the new total. Both
/// semaphores share it; their scripts differ in what they announce.
async fn add_permits(
    object: &crate::engine::object::Object,
    script: &'static crate::engine::script::Script,
    permits: i32,
) -> Result<i64> {
    use crate::engine::script as sent;
    let _busy = object.enter()?;
    let name = object.name.to_string();
    let channel = crate::naming::semaphore_channel_name(&name);
    let publish = object.engine.publish_command;
    let reply = object
        .synced_request("add_permits", |latch| ScriptCall {
            script,
            keys: vec![name.clone(), channel.clone(), latch.key.clone()],
            args: vec![
                i64::from(permits).into(),
                publish.into(),
                latch.ttl_ms.into(),
            ],
        })
        .await?;
    match sent::as_i64(&reply) {
        Some(total) => Ok(total),
        None if reply.is_null() => Err(Error::InvalidArgument(format!(
            "adding {permits} permits to `{name}` would leave the Java int range"
        ))),
        None => Err(sent::unexpected("add_permits", &reply)),
    }
}
