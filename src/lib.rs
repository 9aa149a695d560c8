//! # redisson-lock
//!
//! Distributed locks for Rust services that share them with JVM services using
//! [Redisson](https://redisson.org): the same Redis keys, the same scripts'
//! semantics and the same pub/sub messages, so neither side can tell the other
//! is not Java.
//!
//! * A lock is a Redis hash `name`, field `<client-id>:<owner-id>` → reentrant
//!   hold count, with a `PX` lease ([`RLock`]).
//! * Every acquisition is its own owner: two futures polled by one task
//!   (`join!`, `select!`) exclude each other. Re-entry is scoped: inside
//!   [`LockGuard::scope`], acquiring the same lock again re-enters the guard's
//!   hold, as a nested `lock()` in one Java thread does. [`OwnerId`] explains
//!   the model and the explicit owners of Redisson's `lockAsync(threadId)`.
//! * Unlocking publishes `0` on `redisson_lock__channel:{name}`, waking one
//!   waiter per client, Java or Rust; waiters never poll.
//! * One watchdog per client renews every lock held without an explicit lease,
//!   in batches ([`WatchdogStats`]).
//! * Beyond Redisson: every [`LockGuard`] tells its holder when the lock is lost
//!   ([`LostSignal`]); scripts are sent at most once, and a lost reply is
//!   resolved by reading the state instead of being re-sent blindly.
//! * [`RedissonClient::audit`] checks the deployment itself: an eviction
//!   policy that drops lock keys, a server that restarts empty, a primary
//!   without a replica, an ACL without `PUBLISH`, ... ([`audit`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use redisson_lock::{Config, RedissonClient};
//!
//! # async fn demo() -> redisson_lock::Result<()> {
//! let mut config = Config::from_url("redis://127.0.0.1:6379");
//! config.lock_watchdog_timeout = Duration::from_secs(30); // as on the JVM side
//! let client = RedissonClient::connect(config).await?;
//!
//! let lock = client.lock("orders:42")?;
//! let guard = lock.lock().await?;          // waits on pub/sub if taken
//! let nested = guard.scope(lock.lock()).await?; // re-enters: hold count 2
//! nested.unlock().await?;
//! tokio::select! {
//!     _ = tokio::time::sleep(Duration::from_secs(1)) => {} // the work
//!     _ = guard.lost() => eprintln!("lost the lock, stop"),
//! }
//! guard.unlock().await?;                   // publishes `0`: a waiter wakes
//! client.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## What is in it
//!
//! | Redisson | here |
//! |---|---|
//! | `getLock`, `getFairLock`, `getReadWriteLock`, `getFencedLock`, `getSpinLock` | [`RLock`], [`RFairLock`], [`RReadWriteLock`], [`RFencedLock`] (with [`FencedGuard::set_if_newest`] for the resource), [`RSpinLock`] |
//! | `getMultiLock`, `getRedLock`, the non-reentrant locks, the group lock | [`RMultiLock`], [`RNonReentrantLock`], [`RNonReentrantFairLock`], [`RGroupLock`] |
//! | `getSemaphore`, `getPermitExpirableSemaphore`, `getCountDownLatch` | [`RSemaphore`], [`RPermitExpirableSemaphore`], [`RCountDownLatch`] |
//! | leader election on a lock | [`Election`]: campaign, [`Leadership`], observe the [`Leader`] |
//! | synchronous code | the `blocking` module (feature `blocking`): the same objects on a runtime the client owns |
//! | who holds what | [`inspect`]: a lock's holders, waiters and TTLs, typed; [`RedissonClient::scan_objects`] lists them |
//! | is this deployment safe for locks | [`audit`]: eviction, persistence, replicas, sentinels, ACLs, clocks, latency |
//!
//! Every client writes a small entry about itself, `redisson_lock__client:<client-id>` (host,
//! pid, service, labels; [`Registry`], on by default, renewed with the watchdog), so that
//! [`inspect`] and the CLI name a holder ("billing on node-3, pid 4242"); a JVM service can
//! write the same entry (the repository's `docs/interop.md`). The keys and commands a
//! service needs, and the ACL rules that allow them, are in `docs/acl.md`; reading the
//! registry needs `~redisson_lock__client:*` and `+hgetall`.
//!
//! ## Topologies
//!
//! The address decides the deployment: `redis://` (a single server),
//! `redis-cluster://host:port?node=...` (a Redis Cluster, with sharded pub/sub
//! on Redis 7 as Redisson 4.7 uses it) or
//! `redis-sentinel://host:port?sentinelServiceName=...` (Sentinel); `rediss`
//! variants for TLS, with [`Config::tls_ca_file`] for a private CA. On a
//! cluster or Sentinel, every lock write waits for a replica to confirm it
//! (Redisson's `checkLockSyncedSlaves`; see [`ReplicaQuorum`]):
//!
//! ```no_run
//! use redisson_lock::{Config, RedissonClient, ReplicaQuorum};
//!
//! # async fn demo() -> redisson_lock::Result<()> {
//! let mut config = Config::from_url("redis-cluster://10.0.0.1:7000?node=10.0.0.2:7000&node=10.0.0.3:7000");
//! config.replica_quorum = ReplicaQuorum::All; // stricter than Redisson's "at least one"
//! let client = RedissonClient::connect(config).await?;
//! let guard = client.lock("orders:42")?.lock().await?; // undone and retried if no replica confirms
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! ## Cargo features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `rustls-ring` | yes | TLS (`rediss://`) through rustls with the ring provider |
//! | `rustls-aws-lc` | | TLS through rustls with aws-lc-rs |
//! | `native-tls` | | TLS through native-tls (OpenSSL on Linux); wins when both kinds are on, as in fred |
//! | `redisson-config` | | `Config::from_redisson_yaml` and `Config::from_redisson_json`: the config file of a Java service |
//! | `metrics` | | acquire, wait, hold, renewal and loss figures through the [`metrics`](https://docs.rs/metrics) facade |
//! | `blocking` | | `redisson_lock::blocking`: the same objects for synchronous code, on a runtime the client owns |
//! | `fred-tracing` | | fred's per-command tracing spans |
//!
//! Without a TLS feature a `rediss://` address is refused rather than
//! connected in plain text.
//!
//! ## Further reading
//!
//! The wire contract (keys, scripts, messages, version differences) is in
//! the repository's `docs/protocol.md`; `docs/design.md` follows one
//! `lock().await` through the layers; `docs/topologies.md` covers Cluster,
//! Sentinel, TLS and replica sync; `docs/interop.md` lists where behaviour
//! differs from Redisson's on purpose.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
pub mod audit;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod client;
mod command;
mod config;
mod engine;
mod error;
pub mod inspect;
mod lock;
pub mod naming;
mod owner;
mod sync;
mod topology;

/// The README's examples, compiled as doc tests (one shows the blocking API).
#[cfg(all(doctest, feature = "blocking"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use acquire::{Acquirable, Acquire, Bounded, UntilAcquired};
pub use client::RedissonClient;
pub use command::Reply;
#[cfg(feature = "redisson-config")]
pub use config::RedissonFile;
pub use config::MAX_LEASE;
pub use config::{BackOff, Config, Delays, Registry, ReplicaQuorum, ShardedSubscriptionMode};
pub use engine::lease::LostSignal;
pub use engine::registry::ClientIdentity;
pub use engine::safety::SafetyLevel;
pub use engine::watchdog::WatchdogStats;
pub use error::{Cause, Error, Result};
pub use lock::election::{Election, Leader, Leadership};
pub use lock::fair::RFairLock;
pub use lock::fenced::{FencedGuard, RFencedLock};
pub use lock::group::{GroupValue, RGroupLock};
pub use lock::handle::Lock;
pub use lock::multi::{MultiGuard, RMultiLock};
pub use lock::non_reentrant::{RNonReentrantFairLock, RNonReentrantLock};
pub use lock::read_write::{RReadWriteLock, ReadLock, RwMode, WriteLock};
pub use lock::rlock::RLock;
pub use lock::spin::RSpinLock;
pub use lock::{Holder, LockGuard, Ttl, Unlocked};
pub use sync::count_down_latch::RCountDownLatch;
pub use sync::permit_expirable::{
    ExpirablePermits, PermitId, PermitLease, RPermitExpirableSemaphore,
};
pub use sync::semaphore::{RSemaphore, SemaphorePermits};

/// The kinds of [`Lock`]: type-level tags that pick the Redisson protocol a
/// lock speaks. Use the aliases instead ([`RLock`], [`RFairLock`],
/// [`ReadLock`], [`WriteLock`]).
pub mod kind {
    pub use crate::lock::fair::{Fair, Queued};
    pub use crate::lock::fenced::Fenced;
    pub use crate::lock::handle::Kind;
    pub use crate::lock::non_reentrant::{NonReentrant, NonReentrantFair};
    pub use crate::lock::read_write::{Read, Write};
    pub use crate::lock::rlock::Reentrant;
    pub use crate::lock::spin::Spin;
}
pub use owner::OwnerId;
