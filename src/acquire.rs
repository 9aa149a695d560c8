//! [`Acquire`]: one acquire builder for every lock and semaphore, instead of
//! five method combinations: `lock.acquire().wait(d).lease(l).await`,
//! `semaphore.acquire(2).wait(d).await`, `slots.acquire(1).kept_alive().await`.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use crate::engine::kind::Patience;
use crate::error::Result;

/// What can be acquired with an [`Acquire`] builder: every [`crate::Lock`],
/// [`crate::RGroupLock`], [`crate::RMultiLock`], [`crate::RSemaphore`] and
/// [`crate::RPermitExpirableSemaphore`]. Sealed.
pub trait Acquirable: sealed::Sealed + Sync {
    /// What an acquisition hands out.
    type Guard: Send + 'static;

    /// Waits as long as it takes: only the lock, or an error, ends it.
    #[doc(hidden)]
    fn acquire_until(&self, terms: sealed::Until) -> BoxFuture<'_, Result<Self::Guard>>;

    /// Waits within a bound: `None` when the lock stayed taken.
    #[doc(hidden)]
    fn acquire_within(&self, terms: sealed::Within) -> BoxFuture<'_, Result<Option<Self::Guard>>>;
}

/// A boxed, sendable future.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub(crate) mod sealed {
    use super::*;

    /// The terms of an acquisition that waits as long as it takes, opaque
    /// outside the crate.
    pub struct Until {
        pub(crate) lease: Option<Duration>,
        /// Permits asked for (1 for a lock).
        pub(crate) permits: u32,
        /// How expirable permits are held when no lease is given.
        pub(crate) keep: Keep,
    }

    /// The terms of an acquisition that may give up, opaque outside the
    /// crate: one try (`wait: None`) or up to `wait`.
    pub struct Within {
        pub(crate) lease: Option<Duration>,
        pub(crate) wait: Option<Duration>,
        pub(crate) permits: u32,
        pub(crate) keep: Keep,
    }

    impl Within {
        /// The engine's patience for these terms.
        pub(crate) fn patience(&self) -> Patience {
            match self.wait {
                Some(wait) => Patience::For(wait),
                None => Patience::Once,
            }
        }
    }

    /// Not nameable outside the crate: only its objects are [`super::Acquirable`].
    pub trait Sealed {}

    /// What is held for a time (a lease): every lock, and expirable permits.
    pub trait Leasable {}
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
/// let leased = lock.acquire().lease(Duration::from_secs(10)).await?; // held for 10 s, never renewed
/// leased.unlock().await?;
/// if let Some(guard) = lock
///     .acquire()
///     .wait(Duration::from_secs(2))
///     .lease(Duration::from_secs(10))
///     .await? // waits up to 2 s
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
    pub(crate) permits: u32,
    pub(crate) keep: Keep,
}

/// How expirable permits acquired without a lease are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Keep {
    /// For the watchdog timeout, renewed by the watchdog every third of it,
    /// as a lock is; the default.
    #[default]
    KeptAlive,
    /// For this lease, renewed every third of it.
    KeptAliveFor(Duration),
    /// Never expiring (Redisson's `acquire()` without a lease).
    Forever,
}

impl<'a, L: Acquirable> Acquire<'a, L> {
    pub(crate) fn new(target: &'a L) -> Self {
        Self::of_permits(target, 1)
    }

    /// `permits` of a semaphore.
    pub(crate) fn of_permits(target: &'a L, permits: u32) -> Self {
        Acquire {
            target,
            lease: None,
            wait: UntilAcquired,
            permits,
            keep: Keep::default(),
        }
    }

    /// Waits at most `wait` (`try_lock_for`, `tryAcquire(permits, wait)`);
    /// the result is then an `Option`.
    pub fn wait(self, wait: Duration) -> Acquire<'a, L, Bounded> {
        self.bounded(Bounded(Some(wait)))
    }

    /// One try, no waiting (`try_lock`, `tryAcquire(permits)`); the result
    /// is then an `Option`.
    pub fn no_wait(self) -> Acquire<'a, L, Bounded> {
        self.bounded(Bounded(None))
    }

    fn bounded(self, wait: Bounded) -> Acquire<'a, L, Bounded> {
        Acquire {
            target: self.target,
            lease: self.lease,
            wait,
            permits: self.permits,
            keep: self.keep,
        }
    }
}

impl<L: sealed::Leasable, W> Acquire<'_, L, W> {
    /// Holds for `lease`, never renewed: a lock instead of being renewed by
    /// the watchdog until released; expirable permits instead of never
    /// expiring (or of being kept alive).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self.keep = Keep::default();
        self
    }
}

impl<'a, L: Acquirable> IntoFuture for Acquire<'a, L, UntilAcquired> {
    type Output = Result<L::Guard>;
    type IntoFuture = BoxFuture<'a, Result<L::Guard>>;

    fn into_future(self) -> Self::IntoFuture {
        self.target.acquire_until(sealed::Until {
            lease: self.lease,
            permits: self.permits,
            keep: self.keep,
        })
    }
}

impl<'a, L: Acquirable> IntoFuture for Acquire<'a, L, Bounded> {
    type Output = Result<Option<L::Guard>>;
    type IntoFuture = BoxFuture<'a, Result<Option<L::Guard>>>;

    fn into_future(self) -> Self::IntoFuture {
        self.target.acquire_within(sealed::Within {
            lease: self.lease,
            wait: self.wait.0,
            permits: self.permits,
            keep: self.keep,
        })
    }
}
