//! [`Election`]: leader election on the [`RLock`] of the election's name, so
//! that a JVM service holding the same RLock is the leader for everyone.
//! Campaigning is `lock()`, resigning is `unlock()`; who leads is who holds
//! the lock, named by the client registry where it registered. Nothing here
//! adds to the wire: it is Redisson's lock, read and watched.

use std::future::Future;
use std::time::Duration;

use futures::{Stream, StreamExt};

use crate::engine::lease::LostSignal;
use crate::engine::registry::{self, ClientIdentity};
use crate::error::{Error, Result};
use crate::lock::fenced::{FencedGuard, RFencedLock};
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
    /// A fenced election's lock (the same hash, and its token counter):
    /// each leadership's term is its fencing token.
    fenced: Option<RFencedLock>,
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
    /// A fenced election's term: the last fencing token handed out, the
    /// leader's (etcd's revision, a Kubernetes lease's transitions). `None`
    /// for an election on the plain lock.
    pub term: Option<i64>,
}

impl Election {
    pub(crate) fn new(lock: RLock) -> Self {
        Election { lock, fenced: None }
    }

    pub(crate) fn fenced(lock: RLock, fenced: RFencedLock) -> Self {
        Election {
            lock,
            fenced: Some(fenced),
        }
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
        match &self.fenced {
            Some(fenced) => Ok(Leadership::fenced(fenced, fenced.lock().await?)),
            None => Ok(Leadership::new(&self.lock, self.lock.lock().await?)),
        }
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
        match &self.fenced {
            Some(fenced) => {
                let guard = fenced.try_lock_for(wait).await?;
                Ok(guard.map(|guard| Leadership::fenced(fenced, guard)))
            }
            None => {
                let guard = self.lock.try_lock_for(wait).await?;
                Ok(guard.map(|guard| Leadership::new(&self.lock, guard)))
            }
        }
    }

    /// Leads again and again (Curator's `LeaderSelector` with
    /// `autoRequeue`): campaigns, runs `term` while this client leads, and
    /// campaigns again. `term` gets the leadership's lost signal; when the
    /// leadership is lost, `term`'s future is dropped (stop: another may
    /// lead now) and the campaign starts again; when `term` returns
    /// `Ok(true)`, the leadership is resigned and the campaign starts again;
    /// `Ok(false)` resigns and returns.
    ///
    /// # Errors
    ///
    /// `term`'s error (the leadership resigned first), or a campaign's
    /// ([`crate::Error::Shutdown`] when the client shuts down).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `term`'s and resigns (in the background),
    /// as dropping a [`Leadership`] does.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// let election = client.election("scheduler")?;
    /// // Schedules while it leads; after a loss, waits to lead again.
    /// election
    ///     .lead(|lost| async move {
    ///         tokio::select! {
    ///             () = schedule_forever() => {}
    ///             () = lost.lost() => {}
    ///         }
    ///         Ok(true)
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// # async fn schedule_forever() {}
    /// ```
    pub async fn lead<F, Fut>(&self, mut term: F) -> Result<()>
    where
        F: FnMut(LostSignal) -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        loop {
            let leadership = self.campaign().await?;
            let outcome = tokio::select! {
                outcome = term(leadership.guard().lost_signal()) => Some(outcome),
                () = leadership.lost() => None,
            };
            match outcome {
                // Lost: let go (done in the background already) and campaign.
                None => drop(leadership),
                Some(Ok(again)) => {
                    // Resigned whatever its answer: a leadership lost meanwhile
                    // has nothing left to release.
                    let _ = leadership.resign().await;
                    if !again {
                        return Ok(());
                    }
                }
                Some(Err(e)) => {
                    let _ = leadership.resign().await;
                    return Err(e);
                }
            }
        }
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
        leader_of(&self.lock, self.fenced.as_ref(), holders).await
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
        let (lock, fenced) = (self.lock.clone(), self.fenced.clone());
        let mut last: Option<Option<(String, String, Option<i64>)>> = None;
        crate::engine::observe::holders(self.lock.raw.clone())
            .then(move |holders| {
                let (lock, fenced) = (lock.clone(), fenced.clone());
                async move {
                    match holders {
                        Ok(holders) => leader_of(&lock, fenced.as_ref(), holders).await,
                        Err(e) => Err(e),
                    }
                }
            })
            // A hold count going up or down, or the leader's registry entry
            // refreshed, is not a change of leader: the holder is, and in a
            // fenced election the term.
            .filter(move |leader| {
                let holder = |leader: &Option<Leader>| {
                    leader
                        .as_ref()
                        .map(|l| (l.client_id.clone(), l.owner.clone(), l.term))
                };
                let changed = match leader {
                    Ok(leader) => last.as_ref() != Some(&holder(leader)),
                    Err(_) => true,
                };
                if let Ok(leader) = leader {
                    last = Some(holder(leader));
                }
                futures::future::ready(changed)
            })
    }
}

/// The leader among a lock's holders, with its identity and, in a fenced
/// election, its term.
async fn leader_of(
    lock: &RLock,
    fenced: Option<&RFencedLock>,
    holders: Vec<crate::lock::Holder>,
) -> Result<Option<Leader>> {
    let Some(holder) = holders.into_iter().next() else {
        return Ok(None);
    };
    let term = match fenced {
        Some(fenced) => fenced.token().await?,
        None => None,
    };
    let identity = registry::identity_if_readable(&lock.raw.engine, &holder.client_id)
        .await
        .flatten();
    Ok(Some(Leader {
        client_id: holder.client_id,
        owner: holder.owner,
        this_client: holder.this_client,
        identity,
        term,
    }))
}

/// Being the leader: the hold of the election's lock. Lost signals are the
/// lock's: a leadership that is lost (its lease ran out before a renewal was
/// confirmed, or a renewal found the lock gone) is never believed.
///
/// A lost leadership is let go at once: the lock is released on Redis (if it
/// is still this client's) and no longer renewed, so a leader that keeps
/// its handle after a loss never blocks the other candidates, and
/// [`Election::observe`] stops naming it. (A plain lock's lost hold is
/// renewed until dropped, as Redisson's is.)
#[derive(Debug)]
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    hold: Hold,
    /// Lets the lock go once the leadership is lost; stopped by a resign or
    /// a drop.
    letting_go: LetGo,
}

/// The hold behind a leadership: a fenced election's carries its term.
#[derive(Debug)]
enum Hold {
    Plain(LockGuard),
    Fenced(FencedGuard),
}

impl Hold {
    fn lock_guard(&self) -> &LockGuard {
        match self {
            Hold::Plain(guard) => guard,
            Hold::Fenced(guard) => guard,
        }
    }
}

/// The task that releases a lost leadership's lock, stopped on drop.
#[derive(Debug)]
struct LetGo(tokio::task::AbortHandle);

impl LetGo {
    /// Once `guard`'s hold is lost, `release` (its owner's unlock of the
    /// election's lock `name`): another candidate may be elected now, so
    /// this client's hold goes (released on Redis if still there, no longer
    /// renewed), whoever still holds the handle.
    fn when_lost(
        guard: &LockGuard,
        name: String,
        release: impl Future<Output = Result<crate::lock::Unlocked>> + Send + 'static,
    ) -> LetGo {
        let lost = guard.lost_signal();
        let task = tokio::spawn(async move {
            lost.lost().await;
            match release.await {
                Ok(_) | Err(Error::LockLost { .. } | Error::NotHeld { .. } | Error::Shutdown) => {}
                Err(e) => {
                    tracing::warn!(election = %name, error = %e, "letting a lost leadership go failed; its lease runs out")
                }
            }
        });
        LetGo(task.abort_handle())
    }
}

impl Drop for LetGo {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Leadership {
    fn new(lock: &RLock, guard: LockGuard) -> Self {
        let owner = lock.with_owner(guard.owner());
        let name = owner.name().to_string();
        let letting_go = LetGo::when_lost(&guard, name, async move { owner.unlock().await });
        Leadership {
            hold: Hold::Plain(guard),
            letting_go,
        }
    }

    fn fenced(lock: &RFencedLock, guard: FencedGuard) -> Self {
        let owner = lock.with_owner(guard.owner());
        let name = owner.name().to_string();
        let letting_go = LetGo::when_lost(&guard, name, async move { owner.unlock().await });
        Leadership {
            hold: Hold::Fenced(guard),
            letting_go,
        }
    }

    /// A fenced election's term: this leadership's fencing token, above
    /// every earlier leadership's (`None` on the plain lock). Hand it to
    /// what the leader writes ([`Leadership::set_if_newest`], or the
    /// resource's own check), so a former leader that resumes after a pause
    /// is refused.
    pub fn term(&self) -> Option<i64> {
        match &self.hold {
            Hold::Plain(_) => None,
            Hold::Fenced(guard) => Some(guard.token()),
        }
    }

    /// Writes `value` to `key` only if no later term wrote it
    /// ([`FencedGuard::set_if_newest`] with this leadership's term): what a
    /// leader writes is refused once a newer leader wrote it, even if this
    /// one resumes after a pause believing it still leads.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] on a plain election (no term: use
    /// [`crate::RedissonClient::fenced_election`]); otherwise those of
    /// [`FencedGuard::set_if_newest`].
    ///
    /// # Cancel safety
    ///
    /// The script is sent once; dropping the future does not stop it.
    pub async fn set_if_newest(&self, key: &str, value: &str) -> Result<bool> {
        match &self.hold {
            Hold::Fenced(guard) => guard.set_if_newest(key, value).await,
            Hold::Plain(guard) => Err(Error::InvalidArgument(format!(
                "election `{}` has no terms: set_if_newest needs a fenced election \
                 (RedissonClient::fenced_election)",
                guard.name()
            ))),
        }
    }

    /// Completes when the leadership is lost: stop acting as the leader.
    ///
    /// # Cancel safety
    ///
    /// It only waits.
    pub async fn lost(&self) {
        self.hold.lock_guard().lost().await
    }

    /// Completes when the leadership is at risk (a renewal failed): another
    /// may lead soon.
    ///
    /// # Cancel safety
    ///
    /// It only waits.
    pub async fn at_risk(&self) {
        self.hold.lock_guard().at_risk().await
    }

    /// True once the leadership is lost.
    pub fn is_lost(&self) -> bool {
        self.hold.lock_guard().is_lost()
    }

    /// True while the leadership is at risk, and once lost.
    pub fn is_at_risk(&self) -> bool {
        self.hold.lock_guard().is_at_risk()
    }

    /// The lock hold behind the leadership (its owner, field, lost signal).
    pub fn guard(&self) -> &LockGuard {
        self.hold.lock_guard()
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
        let Leadership { hold, letting_go } = self;
        drop(letting_go);
        match hold {
            Hold::Plain(guard) => guard.unlock().await.map(drop),
            Hold::Fenced(guard) => guard.unlock().await.map(drop),
        }
    }
}
