//! A pool of permits on Redis: the machinery [`crate::RSemaphore`] and
//! [`crate::RPermitExpirableSemaphore`] share, as tokio's semaphores share
//! its `batch_semaphore`. Each object keeps what is its own (its scripts'
//! keys and arguments, how it reads their replies, its public API); here is
//! what they do alike:
//!
//! * the available permits in the string `name`, announced on
//!   `redisson_sc:{name}`, whose message wakes up to that many waiters
//!   ([`Wake::UpTo`]), Java or Rust;
//! * every write a replayable request (see `engine::request`): a lost reply
//!   is replayed through its latch, never applied twice;
//! * taking permits: one attempt at a time as a task of its own (see
//!   [`detached`]), waited for through the engine's [`Waiter`]; a grant the
//!   replicas did not confirm is given back at once;
//! * what was taken is a loan ([`Lent`]), given back once: on the guard's
//!   drop, its release, or the client's shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::KeysInterface;
use fred::types::Value;
use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::engine::hub::Wake;
use crate::engine::loan::{detached, Lent, LoanLease};
use crate::engine::object::Object;
use crate::engine::request::Request;
use crate::engine::safety::Synced;
use crate::engine::script::{self, Latch, Script, ScriptCall};
use crate::engine::wait::{Attempts, Step, Waiter};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::naming;

/// The semaphore's `trySetPermits`, shared by both kinds.
static TRY_SET_PERMITS: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(include_str!("../../lua/semaphore/try_set_permits.lua"))
});

/// One semaphore's name and engine, and what it calls itself in errors.
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    pub(crate) object: Object,
}

/// What an acquire script answered.
pub(crate) enum Answer {
    /// The permits are taken.
    Granted,
    /// Too few were free. Look again after a message, or after this long at
    /// most (a lease that ends frees one without any message).
    Refused(Option<Duration>),
}

/// What one attempt got: the permits, or a refusal with the pause it asks
/// for (see [`Answer::Refused`]).
pub(crate) enum Taken<G> {
    Lent(G),
    Not(Option<Duration>),
}

impl<G> Taken<G> {
    /// What was lent, made into `H` (a kind's guard).
    pub(crate) fn map<H>(self, guard: impl FnOnce(G) -> H) -> Taken<H> {
        match self {
            Taken::Lent(lent) => Taken::Lent(guard(lent)),
            Taken::Not(pause) => Taken::Not(pause),
        }
    }
}

impl Pool {
    pub(crate) fn new(engine: Arc<Engine>, name: &str, what: &'static str) -> Self {
        Pool {
            object: Object::new(engine, name, what),
        }
    }

    /// Checks a semaphore's name, with the keys of its own beside the
    /// shared channel and request latch.
    pub(crate) fn check_name(name: &str, slot_grouped: bool, own: &[String]) -> Result<()> {
        let mut keys = vec![
            naming::semaphore_channel_name(name),
            naming::request_latch_name(name, "0"),
        ];
        keys.extend_from_slice(own);
        naming::validate_name(name, slot_grouped, "semaphore", &keys)
    }

    pub(crate) fn name(&self) -> &str {
        &self.object.name
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.object.engine
    }

    /// `redisson_sc:{name}`.
    pub(crate) fn channel(&self) -> String {
        naming::semaphore_channel_name(&self.object.name)
    }

    /// `PUBLISH` or `SPUBLISH`, for the scripts (see `Engine::publish_arg`).
    pub(crate) fn publish(&self) -> Value {
        self.object.engine.publish_arg()
    }

    /// Sets `permits` if the semaphore does not exist, expiring after
    /// `ttl_ms` when given; true if it was set.
    pub(crate) async fn try_set_permits(&self, permits: u32, ttl_ms: Option<i64>) -> Result<bool> {
        let permits = permits_arg(permits)?;
        let _busy = self.object.enter()?;
        let reply = self
            .object
            .announcing(
                "try_set_permits",
                &TRY_SET_PERMITS,
                self.channel(),
                vec![permits.into()],
                vec![ttl_ms.unwrap_or(0).into()],
            )
            .await?;
        flag("try_set_permits", &reply)
    }

    /// Adds (or with a negative `permits`, takes away) permits through the
    /// kind's `add_permits` script; the new total. The kinds' scripts differ
    /// in what they announce.
    pub(crate) async fn add_permits(&self, script: &'static Script, permits: i32) -> Result<i64> {
        let _busy = self.object.enter()?;
        let reply = self
            .object
            .announcing(
                "add_permits",
                script,
                self.channel(),
                vec![i64::from(permits).into()],
                vec![],
            )
            .await?;
        match script::as_i64(&reply) {
            Some(total) => Ok(total),
            None if reply.is_null() => Err(Error::InvalidArgument(format!(
                "adding {permits} permits to `{}` would leave the Java int range",
                self.name()
            ))),
            None => Err(script::unexpected("add_permits", &reply)),
        }
    }

    /// One attempt to take permits, sent as a replayable request: `build`
    /// makes the kind's acquire call, `answer` reads its reply. What was
    /// granted becomes a loan that `give_back` returns, expiring on Redis as
    /// `lease` says; a grant the replicas
    /// did not confirm is given back at once and is an error (Redisson's
    /// NoSyncedSlaves handling): a failover now would hand it out again.
    pub(crate) async fn take(
        &self,
        build: impl Fn(&Latch) -> ScriptCall + Sync,
        answer: impl FnOnce(&Value) -> Result<Answer>,
        give_back: impl Fn() -> BoxFuture<'static, Result<usize>> + Send + Sync + 'static,
        lease: LoanLease,
    ) -> Result<Taken<Lent>> {
        let sent = self
            .object
            .request("acquire", &Request::new(), build)
            .await?;
        if let Answer::Refused(pause) = answer(&sent.reply)? {
            return Ok(Taken::Not(pause));
        }
        let lent = Lent::open(self.engine(), give_back, lease, sent.first_sent);
        if let short @ Synced::Short { .. } = sent.synced {
            let _ = lent.settle().await;
            return Err(self
                .object
                .engine
                .replica_sync
                .not_synced("acquire", self.name(), short));
        }
        Ok(Taken::Lent(lent))
    }

    /// Makes one attempt `take` and returns what it got. The attempt runs
    /// as a task of its own (see [`detached`]): a caller that stops waiting
    /// leaves nothing taken, as the guard nobody receives gives it back.
    pub(crate) async fn try_once<G: Send + 'static>(
        &self,
        take: impl Future<Output = Result<Taken<G>>> + Send + 'static,
    ) -> Result<Option<G>> {
        Ok(match detached(self.engine(), take).await? {
            Taken::Lent(guard) => Some(guard),
            Taken::Not(_) => None,
        })
    }

    /// Makes attempts `take` until one gets the permits (`Some`) or
    /// `deadline` passes (`None`; no deadline: until it gets them), woken
    /// by the semaphore's messages, the pause a refusal asked for, or the
    /// re-check.
    pub(crate) async fn wait_for<G, F, T>(
        &self,
        deadline: Option<Instant>,
        take: T,
    ) -> Result<Option<G>>
    where
        G: Send + 'static,
        F: Future<Output = Result<Taken<G>>> + Send + 'static,
        T: FnMut() -> F,
    {
        let waiter = Waiter {
            engine: self.engine(),
            channel: Some((self.channel(), Wake::UpTo)),
            deadline,
            topology: None,
        };
        let mut takes = Takes {
            engine: self.engine(),
            take,
        };
        waiter.wait(&mut takes).await
    }

    /// As [`Pool::wait_for`] without a deadline: the permits, or an error.
    pub(crate) async fn wait<G, F, T>(&self, take: T) -> Result<G>
    where
        G: Send + 'static,
        F: Future<Output = Result<Taken<G>>> + Send + 'static,
        T: FnMut() -> F,
    {
        self.wait_for(None, take)
            .await?
            .ok_or(Error::Timeout(Duration::MAX))
    }

    /// Deletes `keys` (Redisson's `delete`, a plain `DEL`, no message):
    /// true if there was anything.
    pub(crate) async fn delete(&self, keys: Vec<String>) -> Result<bool> {
        let _busy = self.object.enter()?;
        let deleted: i64 = self.object.query(self.object.reader().del(keys)).await?;
        Ok(deleted > 0)
    }
}

/// A waiting acquire's attempts, each detached from its caller.
struct Takes<'a, T> {
    engine: &'a Arc<Engine>,
    take: T,
}

impl<G, F, T> Attempts for Takes<'_, T>
where
    G: Send + 'static,
    F: Future<Output = Result<Taken<G>>> + Send + 'static,
    T: FnMut() -> F,
{
    type Output = G;

    async fn attempt(&mut self) -> Result<Step<G>> {
        Ok(match detached(self.engine, (self.take)()).await? {
            Taken::Lent(guard) => Step::Done(guard),
            Taken::Not(pause) => Step::Again(pause),
        })
    }
}

/// Checks a number of permits to take or return: at least 1, and a Java
/// `int`, as every JVM client reads them.
pub(crate) fn permits_arg(n: u32) -> Result<i64> {
    if n == 0 || n > i32::MAX as u32 {
        return Err(Error::InvalidArgument(format!(
            "permits must be between 1 and {} (a Java int), not {n}",
            i32::MAX
        )));
    }
    Ok(i64::from(n))
}

/// A 0/1 reply as a bool.
pub(crate) fn flag(operation: &str, reply: &Value) -> Result<bool> {
    match script::as_i64(reply) {
        Some(n) => Ok(n == 1),
        None => Err(script::unexpected(operation, reply)),
    }
}

/// Reads a counter value: missing is 0.
pub(crate) fn parse_count(name: &str, value: Option<String>) -> Result<i64> {
    match value {
        None => Ok(0),
        Some(text) => text
            .parse()
            .map_err(|_| Error::redis(format!("`{name}` holds `{text}`, not a number of permits"))),
    }
}
