//! [`Election`]: leader election, blocking, over [`crate::Election`];
//! [`Leadership`], being the leader.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::Shared;
use crate::error::Result;
use crate::lock::election::Leader;

/// Leader election, blocking: [`crate::Election`] for synchronous code (the
/// holder of the election's lock leads, a JVM holder too). Cheap to clone.
///
/// ```no_run
/// # fn demo(client: redisson_lock::blocking::RedissonClient) -> redisson_lock::Result<()> {
/// let election = client.fenced_election("ledger:writer")?;
/// let leadership = election.campaign()?; // waits, woken by the unlock message
/// leadership.set_if_newest("ledger:head", "entry-42")?; // refused once a later term wrote
/// leadership.resign()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    inner: crate::Election,
    shared: Arc<Shared>,
}

impl Election {
    pub(crate) fn new(inner: crate::Election, shared: Arc<Shared>) -> Self {
        Election { inner, shared }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The async election, for code inside a runtime.
    pub fn as_async(&self) -> &crate::Election {
        &self.inner
    }

    /// Campaigns until elected: [`crate::Election::campaign`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::Election::campaign`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn campaign(&self) -> Result<Leadership> {
        let inner = self.shared.block_on(self.inner.campaign())??;
        Ok(self.leadership(inner))
    }

    /// Campaigns for at most `wait`: [`crate::Election::try_campaign_for`].
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`].
    pub fn try_campaign_for(&self, wait: Duration) -> Result<Option<Leadership>> {
        let inner = self.shared.block_on(self.inner.try_campaign_for(wait))??;
        Ok(inner.map(|inner| self.leadership(inner)))
    }

    /// Who leads now: [`crate::Election::leader`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::Election::leader`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn leader(&self) -> Result<Option<Leader>> {
        self.shared.block_on(self.inner.leader())?
    }

    fn leadership(&self, inner: crate::Leadership) -> Leadership {
        Leadership {
            inner: Some(inner),
            shared: self.shared.clone(),
        }
    }
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Election")
            .field(&self.inner)
            .finish()
    }
}

/// Being the leader, blocking: [`crate::Leadership`]. Dropping it resigns
/// (in the background, on the client's runtime); a lost leadership lets
/// go by itself.
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    inner: Option<crate::Leadership>,
    shared: Arc<Shared>,
}

impl Leadership {
    fn held(&self) -> &crate::Leadership {
        self.inner.as_ref().expect("taken only by resign and drop")
    }

    /// The async leadership inside.
    pub fn as_async(&self) -> &crate::Leadership {
        self.held()
    }

    /// A fenced election's term: [`crate::Leadership::term`].
    pub fn term(&self) -> Option<i64> {
        self.held().term()
    }

    /// True once the leadership is lost: stop acting as the leader.
    pub fn is_lost(&self) -> bool {
        self.held().is_lost()
    }

    /// True while the leadership is at risk, and once lost.
    pub fn is_at_risk(&self) -> bool {
        self.held().is_at_risk()
    }

    /// Writes with this leadership's term: [`crate::Leadership::set_if_newest`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::Leadership::set_if_newest`];
    /// [`crate::Error::InsideAsyncRuntime`].
    pub fn set_if_newest(&self, key: &str, value: &str) -> Result<bool> {
        self.shared
            .block_on(self.held().set_if_newest(key, value))?
    }

    /// Steps down: [`crate::Leadership::resign`].
    ///
    /// # Errors
    ///
    /// Those of [`crate::Leadership::resign`]; [`crate::Error::InsideAsyncRuntime`].
    pub fn resign(mut self) -> Result<()> {
        let inner = self.inner.take().expect("taken only by resign and drop");
        self.shared.block_on(inner.resign())?
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            self.shared
                .release_dropped(inner, crate::Leadership::resign);
        }
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Leadership")
            .field(&self.inner)
            .finish()
    }
}
