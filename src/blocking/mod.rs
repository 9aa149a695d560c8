//! The blocking API: the same objects, guards, semantics and errors as the
//! async API, for synchronous code (batch jobs, CLIs, services on
//! synchronous frameworks), as `reqwest::blocking` and redis-rs offer one.
//! Enabled by the `blocking` feature.
//!
//! A [`RedissonClient`] owns a small private tokio runtime (one worker
//! thread) that keeps its connections, its pub/sub subscriptions and its
//! watchdog running while your threads do their work; every call waits on
//! the calling thread for the async call it wraps, so the wire is exactly
//! the async API's (and Redisson's). Guards release on drop, as a
//! `std::sync::MutexGuard` does.
//!
//! ```no_run
//! use std::time::Duration;
//! use redisson_lock::blocking::RedissonClient;
//!
//! fn main() -> redisson_lock::Result<()> {
//!     let client = RedissonClient::from_url("redis://127.0.0.1:6379")?;
//!     let lock = client.lock("reports:daily")?;
//!     if let Some(guard) = lock.try_lock_for(Duration::from_secs(5))? {
//!         // held, renewed by the watchdog until unlocked or dropped
//!         guard.unlock()?;
//!     }
//!     client.shutdown();
//!     Ok(())
//! }
//! ```
//!
//! **Threads, not tasks.** Blocking calls are for threads: a plain one, or
//! a `spawn_blocking` closure, where tokio runs sync code (there, and on
//! any other thread of another runtime, the call runs on a short-lived
//! thread of the client's while the caller's waits, since tokio runs no
//! runtime inside another's context). Called from an async task, it blocks
//! that task's worker as a `std` mutex would: use the async API there;
//! [`RedissonClient::as_async`] gives it for the same connections. Only a
//! call from the client's own runtime, which it would wait for, is refused
//! ([`crate::Error::InsideAsyncRuntime`]; nothing is sent).
//!
//! **The thread is the owner**, as in Java's `RLock` and parking_lot's
//! `ReentrantMutex`: a lock taken again on the thread that holds it
//! re-enters (the hold count goes up, as a nested `lock()` in one Java
//! thread does); another thread waits. [`Lock::is_held`] is Java's
//! `isHeldByCurrentThread`, [`Lock::hold_count`] its `getHoldCount`, and
//! [`Lock::unlock`] releases one of this thread's holds, so Java's
//! `lock(); ... unlock();` ports line by line with [`Guard::keep`] (a guard
//! kept leaves its hold to the thread). Inside [`Guard::scope`]'s closure,
//! the same lock re-enters that guard's hold whichever thread took it (a
//! guard moved to another thread); [`Lock::with_owner`] fixes the owner
//! instead (Redisson's `lock(threadId)`).
//!
//! **Loss** is told as the async API tells it: [`Guard::is_lost`], a
//! callback ([`Guard::on_lost`]) run on a thread of its own (it may block:
//! renewals go on), or a channel ([`Guard::lost_channel`]).
//!
//! **Drop** releases, waiting for Redis's reply at most one command timeout
//! (then the release finishes in the background), so a guard dropped while
//! a panic unwinds never holds the thread for the whole retry policy;
//! [`Guard::unlock`] waits for the outcome and reports it.
//!
//! **Cancel safety**: a blocking call cannot be cancelled from outside; it
//! returns when the async call it wraps does, bounded as that one is (by
//! its `wait`, and by the client's command timeout on every network call).

mod client;
mod election;
mod expirable;
mod guard;
mod latch;
mod lock;
mod multi;
mod runtime;
mod semaphore;

pub use client::RedissonClient;
pub use election::{Election, Leadership};
pub use expirable::{ExpirablePermits, ExpirableSemaphore, PermitHold};
pub use guard::{AsyncGuard, FencedGuard, Guard, LockGuard};
pub use latch::CountDownLatch;
pub use lock::{
    FairLock, FencedLock, Lock, NonReentrantFairLock, NonReentrantLock, RLock, ReadLock,
    ReadWriteLock, SpinLock, WriteLock,
};
pub use multi::{GroupLock, MultiGuard, MultiLock};
pub use semaphore::{Permits, Semaphore};
