//! [`Election`]: leader election on the [`RLock`] of the election's name, so
//! that a JVM service holding the same RLock is the leader for everyone.
//! Campaigning is `lock()`, resigning is `unlock()`; who leads is who holds
//! the lock, named by the client registry where it registered. Nothing here
//! adds to the wire: it is Redisson's lock, read and watched.

use std::time::Duration;

use futures::{Stream, StreamExt};

use crate::engine::registry::{self, ClientIdentity};
use crate::error::Result;
use crate::lock::rlock::RLock;
use crate::lock::LockGuard;

/// Leader election among every service, Rust or JVM, that takes the
/// [`RLock`] of this name: "only one instance runs the scheduler". Made by
/// [`crate::RedissonClient::election`]; cheap to clone.
///
/// ```no_run
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// let election = client.election("scheduler")?;
/// let leadership = election.campaign().await?; // waits, woken by the unlock message
/// tokio::select! {
///     () = run_scheduler() => leadership.resign().await?,
///     () = leadership.lost() => eprintln!("leadership lost: stop scheduling"),
/// }
/// # Ok(()) }
/// # async fn run_scheduler() {}
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    lock: RLock,
}

/// Who leads an [`Election`]: the holder of its lock.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's client id (Rust or JVM).
    pub client_id: String,
    /// The owner within that client (a thread id on the JVM).
    pub owner: String,
    /// Whether the leader is this client.
    pub this_client: bool,
    /// Who the leader's client is, if it registered (see [`crate::Registry`]);
    /// `None` too where the registry cannot be read (an ACL without its
    /// keys: logged once), as the leader is still the leader.
    pub identity: Option<ClientIdentity>,
}

impl Election {
    pub(crate) fn new(lock: RLock) -> Self {
        Election { lock }
    }

    /// The election's name: its lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The lock this election runs on.
    pub fn lock(&self) -> &RLock {
        &self.lock
    }

    /// Campaigns until elected: waits for the lock (woken by its unlock
    /// message, as [`crate::Lock::lock`]) and holds it, renewed by the
    /// watchdog, until [`Leadership::resign`] or a loss.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`crate::Lock::lock`]: dropping the future gives up the campaign,
    /// and a lock it had just taken is released.
    pub async fn campaign(&self) -> Result<Leadership> {
        Ok(Leadership {
            guard: self.lock.lock().await?,
        })
    }

    /// Campaigns for at most `wait`; `None` if another leads all that time.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::try_lock_for`].
    ///
    /// # Cancel safety
    ///
    /// As [`Election::campaign`].
    pub async fn try_campaign_for(&self, wait: Duration) -> Result<Option<Leadership>> {
        let guard = self.lock.try_lock_for(wait).await?;
        Ok(guard.map(|guard| Leadership { guard }))
    }

    /// Who leads now, as Redis says (`None`: nobody).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Connection`] / [`crate::Error::Timeout`];
    /// [`crate::Error::WrongType`] if the key is not a lock.
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let holders = self.lock.raw.holders().await?;
        leader_of(&self.lock, holders).await
    }

    /// Who leads, now and each time it changes: `Some(leader)`, or `None`
    /// while nobody does. Woken by the lock's own unlock messages (Java's
    /// and Rust's), and read again every `recheck_interval` for what sends
    /// no message (an acquisition, a crashed leader's lease running out).
    /// One leader at a time: each item replaces the one before. An error
    /// (the connection down, say) is an item too, and the stream goes on;
    /// it ends after [`crate::Error::Shutdown`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream unsubscribes; it never takes a waiter's wake-up.
    pub fn observe(&self) -> impl Stream<Item = Result<Option<Leader>>> + Send + 'static {
        let lock = self.lock.clone();
        let mut last: Option<Option<Leader>> = None;
        crate::engine::observe::holders(self.lock.raw.clone())
            .then(move |holders| {
                let lock = lock.clone();
                async move {
                    match holders {
                        Ok(holders) => leader_of(&lock, holders).await,
                        Err(e) => Err(e),
                    }
                }
            })
            // A hold count going up or down is not a change of leader.
            .filter(move |leader| {
                let changed = match leader {
                    Ok(leader) => last.as_ref() != Some(leader),
                    Err(_) => true,
                };
                if let Ok(leader) = leader {
                    last = Some(leader.clone());
                }
                futures::future::ready(changed)
            })
    }
}

/// The leader among a lock's holders, with its identity.
async fn leader_of(lock: &RLock, holders: Vec<crate::lock::Holder>) -> Result<Option<Leader>> {
    let Some(holder) = holders.into_iter().next() else {
        return Ok(None);
    };
    let identity = registry::identity_if_readable(&lock.raw.engine, &holder.client_id)
        .await
        .flatten();
    Ok(Some(Leader {
        client_id: holder.client_id,
        owner: holder.owner,
        this_client: holder.this_client,
        identity,
    }))
}

/// Being the leader: the hold of the election's lock. Lost signals are the
/// lock's: a leadership that is lost (its lease ran out before a renewal was
/// confirmed, or a renewal found the lock gone) is never believed.
///
/// A lost leadership may still be this client's on Redis: the watchdog keeps
/// renewing it, as Redisson does, so that a leader winding down is not
/// overlapped, and no other candidate is elected until it is dropped or
/// resigned. Once told, let go.
#[derive(Debug)]
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// Completes when the leadership is lost: stop acting as the leader.
    ///
    /// # Cancel safety
    ///
    /// It only waits.
    pub async fn lost(&self) {
        self.guard.lost().await
    }

    /// Completes when the leadership is at risk (a renewal failed): another
    /// may lead soon.
    ///
    /// # Cancel safety
    ///
    /// It only waits.
    pub async fn at_risk(&self) {
        self.guard.at_risk().await
    }

    /// True once the leadership is lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// True while the leadership is at risk, and once lost.
    pub fn is_at_risk(&self) -> bool {
        self.guard.is_at_risk()
    }

    /// The lock hold behind the leadership (its owner, field, lost signal).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Steps down: releases the lock, waking the next candidate.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock`]: [`crate::Error::LockLost`] if the leadership
    /// had been lost.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::unlock`]: the release runs to completion.
    pub async fn resign(self) -> Result<()> {
        self.guard.unlock().await.map(drop)
    }
}
