//! [`RedissonClient`]: the blocking client, one private runtime and one async
//! client inside.

use std::sync::Arc;

use super::election::Election;
use super::expirable::ExpirableSemaphore;
use super::latch::CountDownLatch;
use super::lock::{
    FairLock, FencedLock, Lock, NonReentrantFairLock, NonReentrantLock, RLock, ReadWriteLock,
    SpinLock,
};
use super::multi::{GroupLock, MultiLock};
use super::runtime::Shared;
use super::semaphore::Semaphore;
use crate::config::Config;
use crate::error::Result;

/// A blocking Redisson-compatible client: [`crate::RedissonClient`] for
/// synchronous code. Cheap to clone (the clones share the connections and
/// the runtime); the last clone, object or guard dropped shuts the client
/// down, as [`RedissonClient::shutdown`] does.
///
/// ```no_run
/// # fn demo() -> redisson_lock::Result<()> {
/// let client = redisson_lock::blocking::RedissonClient::from_url("redis://127.0.0.1:6379")?;
/// let guard = client.lock("payroll:run")?.lock()?;
/// // ... the payroll run, renewed by the watchdog ...
/// drop(guard); // released (as unlock() does, errors aside)
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedissonClient {
    shared: Arc<Shared>,
}

impl RedissonClient {
    /// Connects with `config`, as [`crate::RedissonClient::connect`] does, on
    /// a runtime of its own.
    ///
    /// # Errors
    ///
    /// Those of [`crate::RedissonClient::connect`];
    /// [`crate::Error::BlockingRuntime`] when its runtime cannot start.
    pub fn connect(config: Config) -> Result<Self> {
        let runtime = Shared::start()?;
        match super::runtime::run_on(&runtime, crate::RedissonClient::connect(config)) {
            Ok(Ok(client)) => Ok(RedissonClient {
                shared: Arc::new(Shared::new(client, runtime)),
            }),
            Ok(Err(e)) | Err(e) => {
                // Not dropped here, which may be inside a runtime.
                runtime.shutdown_background();
                Err(e)
            }
        }
    }

    /// Connects to a `redis://`, `rediss://`, `redis-sentinel://` or
    /// `redis-cluster://` URL with default settings.
    ///
    /// # Errors
    ///
    /// As [`RedissonClient::connect`]; [`crate::Error::Config`] for a bad URL.
    pub fn from_url(url: &str) -> Result<Self> {
        RedissonClient::connect(Config::from_url(url))
    }

    /// The async client behind this one, on the same connections: for code
    /// that runs inside a runtime of its own.
    pub fn as_async(&self) -> &crate::RedissonClient {
        &self.shared.client
    }

    /// This client's id (a UUID): the first half of every owner field it writes.
    pub fn id(&self) -> &str {
        self.shared.client.id()
    }

    /// The configuration the client was connected with.
    pub fn config(&self) -> &Config {
        self.shared.client.config()
    }

    /// How many lock holds this client has, across every lock.
    pub fn held_locks(&self) -> usize {
        self.shared.client.held_locks()
    }

    fn lock_of<K: crate::kind::Kind>(&self, inner: crate::Lock<K>) -> Lock<K>
    where
        K::Guard: super::guard::AsyncGuard,
    {
        Lock::new(inner, self.shared.clone())
    }

    /// Redisson's `RLock` of this name: [`crate::RedissonClient::lock`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn lock(&self, name: &str) -> Result<RLock> {
        Ok(self.lock_of(self.shared.client.lock(name)?))
    }

    /// Redisson's `RFairLock`: [`crate::RedissonClient::fair_lock`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        Ok(self.lock_of(self.shared.client.fair_lock(name)?))
    }

    /// Redisson's `RFencedLock`: [`crate::RedissonClient::fenced_lock`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn fenced_lock(&self, name: &str) -> Result<FencedLock> {
        Ok(self.lock_of(self.shared.client.fenced_lock(name)?))
    }

    /// Redisson's spin lock: [`crate::RedissonClient::spin_lock`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn spin_lock(&self, name: &str) -> Result<SpinLock> {
        Ok(self.lock_of(self.shared.client.spin_lock(name)?))
    }

    /// Redisson's non-reentrant lock: [`crate::RedissonClient::non_reentrant_lock`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn non_reentrant_lock(&self, name: &str) -> Result<NonReentrantLock> {
        Ok(self.lock_of(self.shared.client.non_reentrant_lock(name)?))
    }

    /// Redisson's non-reentrant fair lock:
    /// [`crate::RedissonClient::non_reentrant_fair_lock`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn non_reentrant_fair_lock(&self, name: &str) -> Result<NonReentrantFairLock> {
        Ok(self.lock_of(self.shared.client.non_reentrant_fair_lock(name)?))
    }

    /// Redisson's `RReadWriteLock`: [`crate::RedissonClient::read_write_lock`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        Ok(ReadWriteLock::new(
            self.shared.client.read_write_lock(name)?,
            self.shared.clone(),
        ))
    }

    /// A multi lock over the locks `names` (every one, or none):
    /// [`crate::RedissonClient::multi_lock`].
    ///
    /// # Errors
    ///
    /// As [`crate::RedissonClient::multi_lock`].
    pub fn multi_lock(&self, names: &[&str]) -> Result<MultiLock> {
        Ok(MultiLock::new(
            self.shared.client.multi_lock(names)?,
            self.shared.clone(),
        ))
    }

    /// A RedLock over the locks `names` (held while a majority is):
    /// [`crate::RedissonClient::red_lock`].
    ///
    /// # Errors
    ///
    /// As [`crate::RedissonClient::red_lock`].
    pub fn red_lock(&self, names: &[&str]) -> Result<MultiLock> {
        Ok(MultiLock::new(
            self.shared.client.red_lock(names)?,
            self.shared.clone(),
        ))
    }

    /// Redisson's group multi lock of `values` in `group`:
    /// [`crate::RedissonClient::group_lock`].
    ///
    /// # Errors
    ///
    /// As [`crate::RedissonClient::group_lock`].
    pub fn group_lock(
        &self,
        group: &str,
        values: impl IntoIterator<Item = crate::GroupValue>,
    ) -> Result<GroupLock> {
        Ok(GroupLock::new(
            self.shared.client.group_lock(group, values)?,
            self.shared.clone(),
        ))
    }

    /// Leader election on the `RLock` of this name:
    /// [`crate::RedissonClient::election`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn election(&self, name: &str) -> Result<Election> {
        Ok(Election::new(
            self.shared.client.election(name)?,
            self.shared.clone(),
        ))
    }

    /// Leader election on the fenced lock of this name, with terms:
    /// [`crate::RedissonClient::fenced_election`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn fenced_election(&self, name: &str) -> Result<Election> {
        Ok(Election::new(
            self.shared.client.fenced_election(name)?,
            self.shared.clone(),
        ))
    }

    /// Redisson's `RSemaphore`: [`crate::RedissonClient::semaphore`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn semaphore(&self, name: &str) -> Result<Semaphore> {
        Ok(Semaphore::new(
            self.shared.client.semaphore(name)?,
            self.shared.clone(),
        ))
    }

    /// Redisson's `RPermitExpirableSemaphore`:
    /// [`crate::RedissonClient::permit_expirable_semaphore`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn permit_expirable_semaphore(&self, name: &str) -> Result<ExpirableSemaphore> {
        Ok(ExpirableSemaphore::new(
            self.shared.client.permit_expirable_semaphore(name)?,
            self.shared.clone(),
        ))
    }

    /// Redisson's `RCountDownLatch`: [`crate::RedissonClient::count_down_latch`].
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty name.
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        Ok(CountDownLatch::new(
            self.shared.client.count_down_latch(name)?,
            self.shared.clone(),
        ))
    }

    /// Releases every hold and permit this client has (waking their waiters),
    /// as [`crate::RedissonClient::shutdown`] does; later calls through any
    /// clone fail with [`crate::Error::Shutdown`]. Inside a tokio runtime it
    /// sends nothing (the holds expire with their lease).
    pub fn shutdown(&self) {
        let _ = self.shared.block_on(self.shared.client.shutdown());
    }
}

impl std::fmt::Debug for RedissonClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::RedissonClient")
            .field(&self.shared.client)
            .finish()
    }
}
