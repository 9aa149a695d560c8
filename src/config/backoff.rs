//! [`BackOff`]: how a waiter without pub/sub (the spin lock) spaces its
//! attempts, as Redisson's `LockOptions.BackOff` does.

use std::time::Duration;

/// How a spin-lock waiter spaces its attempts. The default is Redisson's
/// `ExponentialBackOff`: 1 ms, then doubling plus a little jitter, up to
/// 128 ms.
///
/// ```
/// use std::time::Duration;
/// use redisson_lock::BackOff;
///
/// let mut delays = BackOff::default().start();
/// assert_eq!(delays.next_delay(), Duration::from_millis(1));
/// assert!(delays.next_delay() >= Duration::from_millis(2));
/// let constant = BackOff::Constant(Duration::from_millis(64));
/// assert_eq!(constant.start().next_delay(), Duration::from_millis(64));
/// ```
///
/// Serialized as `{"exponential": {"initial": 1, "max": 128, "multiplier":
/// 2}}` or `{"constant": 64}` (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum BackOff {
    /// Starts at `initial`; each next delay is the previous one times
    /// `multiplier`, plus a random jitter of up to as many milliseconds as
    /// attempts so far, capped at `max` (Redisson's `ExponentialBackOff`).
    Exponential {
        /// The first delay.
        #[serde(with = "super::millis")]
        initial: Duration,
        /// The largest delay.
        #[serde(with = "super::millis")]
        max: Duration,
        /// The growth factor.
        multiplier: u32,
    },
    /// The same delay every time (Redisson's `ConstantBackOff`, 64 ms by
    /// default there).
    Constant(#[serde(with = "super::millis")] Duration),
}

impl Default for BackOff {
    fn default() -> Self {
        BackOff::Exponential {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(128),
            multiplier: 2,
        }
    }
}

impl BackOff {
    /// A fresh sequence of delays.
    pub fn start(self) -> Delays {
        Delays {
            policy: self,
            next: None,
            attempts: 0,
        }
    }
}

/// The delays of one wait, from [`BackOff::start`].
#[derive(Debug, Clone)]
pub struct Delays {
    policy: BackOff,
    next: Option<Duration>,
    attempts: u32,
}

impl Delays {
    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        match self.policy {
            BackOff::Constant(delay) => delay,
            BackOff::Exponential {
                initial,
                max,
                multiplier,
            } => {
                let delay = self.next.unwrap_or(initial).min(max);
                self.attempts += 1;
                let jitter = Duration::from_millis(rand::random_range(0..u64::from(self.attempts)));
                self.next = Some(
                    delay
                        .saturating_mul(multiplier.max(1))
                        .saturating_add(jitter)
                        .min(max),
                );
                delay
            }
        }
    }
}

/// The longest pause between two retries of a write, however many came before.
pub(crate) const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);

/// The step of retry number `retry` (0 for the first): `base` doubled per
/// retry, at most [`MAX_RETRY_PAUSE`].
pub(crate) fn retry_step(base: Duration, retry: u32) -> Duration {
    base.saturating_mul(1u32 << retry.min(16))
        .min(MAX_RETRY_PAUSE.max(base))
}

/// The pause before retry number `retry`: exponential from `base` with full
/// jitter (a uniform draw between zero and [`retry_step`]), so clients that
/// failed together do not come back together.
pub(crate) fn retry_pause(base: Duration, retry: u32) -> Duration {
    let step = retry_step(base, retry).as_millis() as u64;
    Duration::from_millis(rand::random_range(0..=step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_pauses_grow_and_stay_bounded() {
        let base = Duration::from_secs(1);
        assert_eq!(retry_step(base, 0), base);
        assert_eq!(retry_step(base, 2), Duration::from_secs(4));
        assert_eq!(retry_step(base, 30), MAX_RETRY_PAUSE);
        for retry in 0..8 {
            assert!(retry_pause(base, retry) <= retry_step(base, retry));
        }
        assert_eq!(retry_pause(Duration::ZERO, 3), Duration::ZERO);
    }
}
