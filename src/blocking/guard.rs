//! [`Guard`]: one hold of a blocking lock, over the async guard it wraps;
//! released by [`Guard::unlock`] or on drop.

use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::task::AbortHandle;

use super::runtime::Shared;
use crate::engine::lease::LostSignal;
use crate::engine::safety::SafetyLevel;
use crate::error::Result;
use crate::lock::Unlocked;
use crate::owner::OwnerId;

/// The async guards a blocking [`Guard`] can wrap: [`crate::LockGuard`] and
/// [`crate::FencedGuard`]. Sealed.
pub trait AsyncGuard: sealed::Sealed + Send + 'static {}

pub(crate) mod sealed {
    use std::future::Future;

    use crate::error::Result;
    use crate::lock::Unlocked;

    pub trait Sealed {
        fn lock_guard(&self) -> &crate::LockGuard;
        fn release(self) -> impl Future<Output = Result<Unlocked>> + Send
        where
            Self: Sized;
        fn keep(self)
        where
            Self: Sized;
    }
}

impl AsyncGuard for crate::LockGuard {}
impl sealed::Sealed for crate::LockGuard {
    fn lock_guard(&self) -> &crate::LockGuard {
        self
    }
    fn release(self) -> impl Future<Output = Result<Unlocked>> + Send {
        self.unlock()
    }
    fn keep(self) {
        crate::LockGuard::keep(self)
    }
}

impl AsyncGuard for crate::FencedGuard {}
impl sealed::Sealed for crate::FencedGuard {
    fn lock_guard(&self) -> &crate::LockGuard {
        self
    }
    fn release(self) -> impl Future<Output = Result<Unlocked>> + Send {
        self.unlock()
    }
    fn keep(self) {
        crate::FencedGuard::keep(self)
    }
}

/// A hold of a blocking lock of any kind but the fenced one.
pub type LockGuard = Guard<crate::LockGuard>;
/// A hold of a blocking fenced lock, with its fencing token.
pub type FencedGuard = Guard<crate::FencedGuard>;

/// One hold on a lock, taken through the blocking API. Release it with
/// [`Guard::unlock`], which reports errors and retries as the client's
/// retry policy says; dropping it releases it too, waiting for Redis's
/// reply at most one command timeout (`Config::timeout`), then finishing in
/// the background (inside a tokio runtime, where nothing may block, in the
/// background at once).
///
/// ```no_run
/// # fn demo(lock: redisson_lock::blocking::RLock) -> redisson_lock::Result<()> {
/// let outer = lock.lock()?;
/// outer.scope(|| -> redisson_lock::Result<()> {
///     let inner = lock.lock()?; // re-enters on this thread: hold count 2
///     assert_eq!(inner.hold_count()?, 2);
///     inner.unlock().map(drop)
/// })?;
/// outer.unlock()?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct Guard<G: AsyncGuard> {
    inner: Option<G>,
    shared: Arc<Shared>,
    /// The tasks of [`Guard::on_lost`], stopped when the hold is released.
    watchers: Mutex<Vec<AbortHandle>>,
}

impl<G: AsyncGuard> Guard<G> {
    pub(crate) fn new(inner: G, shared: Arc<Shared>) -> Self {
        Guard {
            inner: Some(inner),
            shared,
            watchers: Mutex::new(Vec::new()),
        }
    }

    fn held(&self) -> &G {
        self.inner.as_ref().expect("taken only by unlock and drop")
    }

    fn lock_guard(&self) -> &crate::LockGuard {
        self.held().lock_guard()
    }

    /// The async guard inside, for what only it has.
    pub fn as_async(&self) -> &G {
        self.held()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock_guard().name()
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> OwnerId {
        self.lock_guard().owner()
    }

    /// The owner's hash field on Redis: `<client-id>:<owner-id>`.
    pub fn field(&self) -> String {
        self.lock_guard().field()
    }

    /// Whether the watchdog renews this hold (no fixed lease was asked for).
    pub fn is_renewed(&self) -> bool {
        self.lock_guard().is_renewed()
    }

    /// How safe the acquisition was judged: [`crate::LockGuard::safety`].
    pub fn safety(&self) -> SafetyLevel {
        self.lock_guard().safety()
    }

    /// True while the lock is at risk (a renewal failed, or a write was not
    /// confirmed by the replicas asked for), and once it is lost.
    pub fn is_at_risk(&self) -> bool {
        self.lock_guard().is_at_risk()
    }

    /// True once the lock is lost: its lease ran out before a renewal was
    /// confirmed, or a renewal found it gone. Stop the work it protects.
    pub fn is_lost(&self) -> bool {
        self.lock_guard().is_lost()
    }

    /// A `'static` handle on the lost signal ([`LostSignal::is_lost`] from
    /// any thread).
    pub fn lost_signal(&self) -> LostSignal {
        self.lock_guard().lost_signal()
    }

    /// Runs `callback` on a thread of its own when the lock is lost; never
    /// if the hold is released first. It may block: the client's renewals
    /// run on the client's runtime thread, which it never holds up.
    pub fn on_lost(&self, callback: impl FnOnce() + Send + 'static) {
        let lost = self.lost_signal();
        let task = self.shared.runtime().spawn(async move {
            lost.lost().await;
            run_apart(callback);
        });
        self.watchers.lock().push(task.abort_handle());
    }

    /// A channel that receives `()` when the lock is lost; it disconnects
    /// without a message if the hold is released first.
    pub fn lost_channel(&self) -> std::sync::mpsc::Receiver<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.on_lost(move || {
            let _ = tx.send(());
        });
        rx
    }

    /// Runs `work` on this thread inside this hold's scope: an acquisition of
    /// the same lock through the same client, made by `work` on this thread,
    /// re-enters this hold instead of waiting for it. Other threads are not
    /// in the scope. Scopes nest.
    pub fn scope<R>(&self, work: impl FnOnce() -> R) -> R {
        self.lock_guard().scope_thread(work)
    }

    /// How many times this guard's owner holds the lock, as Redis counts it.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Connection`], [`crate::Error::Timeout`],
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn hold_count(&self) -> Result<u32> {
        self.shared.block_on(self.lock_guard().hold_count())?
    }

    /// Releases this hold: [`crate::LockGuard::unlock`]. The last release
    /// deletes the lock and publishes the unlock message.
    ///
    /// # Errors
    ///
    /// Those of [`crate::LockGuard::unlock`] ([`crate::Error::LockLost`] if it
    /// was lost meanwhile); [`crate::Error::InsideAsyncRuntime`] on the
    /// client's own runtime, in which case the release runs in the
    /// background.
    pub fn unlock(mut self) -> Result<Unlocked> {
        self.stop_watchers();
        let held = self.inner.take().expect("taken only by unlock and drop");
        self.shared.block_on(held.release())?
    }

    /// Keeps the hold for this guard's owner, the thread that took it, with
    /// no guard: it is released by [`crate::blocking::Lock::unlock`] on that
    /// thread, as Java's `lock()` is by its `unlock()`; the watchdog renews
    /// it until then (this guard's [`Guard::on_lost`] callbacks stop; the
    /// hold's loss is still told to [`crate::blocking::Lock::unlock`]). A
    /// port of Java code reads line by line:
    ///
    /// ```no_run
    /// # fn demo(lock: redisson_lock::blocking::RLock) -> redisson_lock::Result<()> {
    /// lock.lock()?.keep(); //       lock.lock();
    /// lock.lock()?.keep(); //       lock.lock();  (re-entered: this thread holds it)
    /// assert_eq!(lock.hold_count()?, 2); // lock.getHoldCount()
    /// lock.unlock()?; //            lock.unlock();
    /// lock.unlock()?; //            lock.unlock();
    /// # Ok(()) }
    /// ```
    pub fn keep(mut self) {
        self.stop_watchers();
        if let Some(held) = self.inner.take() {
            held.keep();
        }
    }

    fn stop_watchers(&self) {
        for watcher in self.watchers.lock().drain(..) {
            watcher.abort();
        }
    }
}

/// Runs `callback` on a new thread (not the runtime's blocking pool, which
/// the client's drop would wait for); where no thread can be made, here.
fn run_apart(callback: impl FnOnce() + Send + 'static) {
    let slot = Arc::new(Mutex::new(Some(callback)));
    let theirs = slot.clone();
    let spawned = std::thread::Builder::new()
        .name("redisson-lock-on-lost".into())
        .spawn(move || {
            if let Some(callback) = theirs.lock().take() {
                callback();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread for an on_lost callback: it runs on the client's runtime thread");
        if let Some(callback) = slot.lock().take() {
            callback();
        }
    }
}

impl Guard<crate::FencedGuard> {
    /// The fencing token of this acquisition: higher than every earlier one's.
    pub fn token(&self) -> i64 {
        self.held().token()
    }

    /// Writes `value` to `key` only if no holder with a newer token wrote
    /// it: [`crate::FencedGuard::set_if_newest`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::FencedGuard::set_if_newest`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn set_if_newest(&self, key: &str, value: &str) -> Result<bool> {
        self.shared
            .block_on(self.held().set_if_newest(key, value))?
    }
}

impl<G: AsyncGuard> Drop for Guard<G> {
    fn drop(&mut self) {
        self.stop_watchers();
        if let Some(held) = self.inner.take() {
            self.shared.release_dropped(held, G::release);
        }
    }
}

impl<G: AsyncGuard + std::fmt::Debug> std::fmt::Debug for Guard<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Guard").field(&self.inner).finish()
    }
}
