//! [`Acquire`]: one acquire builder for every lock object, instead of five
//! method combinations: `lock.acquire().wait(d).lease(l).await`.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use crate::engine::kind::Patience;
use crate::error::Result;

/// What can be acquired with an [`Acquire`] builder: every [`crate::Lock`]
/// and [`crate::RMultiLock`]. Sealed.
pub trait Acquirable: sealed::Sealed + Sync {
    /// What an acquisition hands out.
    type Guard: Send + 'static;

    #[doc(hidden)]
    fn acquire_on(&self, terms: sealed::Terms) -> BoxFuture<'_, Result<Option<Self::Guard>>>;
}

/// A boxed, sendable future.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub(crate) mod sealed {
    use super::*;

    /// One acquisition's terms, opaque outside the crate.
    pub struct Terms {
        pub(crate) lease: Option<Duration>,
        pub(crate) patience: Patience,
    }

    /// Not nameable outside the crate: only its objects are [`super::Acquirable`].
    pub trait Sealed {}
}

/// The wait of an [`Acquire`] that waits as long as it takes.
#[derive(Debug, Clone, Copy)]
pub struct UntilAcquired;

/// The wait of an [`Acquire`] that may give up: one try, or up to a time.
#[derive(Debug, Clone, Copy)]
pub struct Bounded(pub(crate) Option<Duration>);

/// Builds one acquisition: how long to wait (as long as it takes by
/// default; [`Acquire::wait`] or [`Acquire::no_wait`]) and for how long to
/// hold (renewed by the watchdog by default; [`Acquire::lease`]). Awaiting
/// it acquires: as long as it takes, it yields the guard; with a bounded
/// wait, `None` when the lock stayed taken.
///
/// ```no_run
/// use std::time::Duration;
/// # async fn demo(lock: redisson_lock::RLock) -> redisson_lock::Result<()> {
/// let guard = lock.acquire().await?; // lock()
/// guard.unlock().await?;
/// let leased = lock.acquire().lease(Duration::from_secs(10)).await?; // lock_with_lease
/// leased.unlock().await?;
/// if let Some(guard) = lock
///     .acquire()
///     .wait(Duration::from_secs(2))
///     .lease(Duration::from_secs(10))
///     .await? // try_lock_for_with_lease
/// {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
///
/// # Cancel safety
///
/// As the object's `lock()`: dropping the future leaves nothing held.
#[must_use = "an acquisition does nothing until awaited"]
pub struct Acquire<'a, L, W = UntilAcquired> {
    pub(crate) target: &'a L,
    pub(crate) lease: Option<Duration>,
    pub(crate) wait: W,
}

impl<'a, L: Acquirable> Acquire<'a, L> {
    pub(crate) fn new(target: &'a L) -> Self {
        Acquire {
            target,
            lease: None,
            wait: UntilAcquired,
        }
    }

    /// Waits at most `wait` (`try_lock_for`); the result is then an
    /// `Option`.
    pub fn wait(self, wait: Duration) -> Acquire<'a, L, Bounded> {
        Acquire {
            target: self.target,
            lease: self.lease,
            wait: Bounded(Some(wait)),
        }
    }

    /// One try, no waiting (`try_lock`); the result is then an `Option`.
    pub fn no_wait(self) -> Acquire<'a, L, Bounded> {
        Acquire {
            target: self.target,
            lease: self.lease,
            wait: Bounded(None),
        }
    }
}

impl<L, W> Acquire<'_, L, W> {
    /// Holds for `lease`, never renewed, instead of being renewed by the
    /// watchdog until released.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }
}

impl<'a, L: Acquirable> IntoFuture for Acquire<'a, L, UntilAcquired> {
    type Output = Result<L::Guard>;
    type IntoFuture = BoxFuture<'a, Result<L::Guard>>;

    fn into_future(self) -> Self::IntoFuture {
        let terms = sealed::Terms {
            lease: self.lease,
            patience: Patience::Forever,
        };
        let acquired = self.target.acquire_on(terms);
        Box::pin(async move {
            acquired
                .await
                .map(|g| g.expect("waiting forever only ends once acquired"))
        })
    }
}

impl<'a, L: Acquirable> IntoFuture for Acquire<'a, L, Bounded> {
    type Output = Result<Option<L::Guard>>;
    type IntoFuture = BoxFuture<'a, Result<Option<L::Guard>>>;

    fn into_future(self) -> Self::IntoFuture {
        let patience = match self.wait.0 {
            Some(wait) => Patience::For(wait),
            None => Patience::Once,
        };
        self.target.acquire_on(sealed::Terms {
            lease: self.lease,
            patience,
        })
    }
}
