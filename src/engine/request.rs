//! Writes that may be replayed: one request id, fixed before anything is
//! sent, names a latch key that the script writes its outcome to. If the
//! reply is lost, the same request is sent again: a copy that finds the latch
//! returns the recorded outcome instead of applying the change twice.
//!
//! This is Redisson's unlock latch (`redisson_unlock_latch:{name}:<id>`,
//! 3.24+), used here by every write whose effect cannot be read back from
//! the state afterwards: unlocks, and the semaphores' acquires and releases
//! (a permit has no owner to look up). A replay never goes out after the
//! latch could have expired, so a late copy can never apply twice.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;
use tokio::time::Instant;

use crate::engine::kind::{Latch, ScriptCall};
use crate::engine::replica_sync::Synced;
use crate::engine::Engine;
use crate::error::{Error, Result};

/// One request: its latch id, and when it was first sent (the latch's
/// lifetime starts there). Clones share both, so a background task that
/// finishes a request for a caller who left replays the same one.
#[derive(Clone)]
pub(crate) struct Request {
    id: String,
    first_sent: Arc<std::sync::OnceLock<Instant>>,
}

/// What a request's reply said, once it arrived.
pub(crate) struct Sent {
    pub(crate) reply: Value,
    /// When the request was first sent: the reply describes an execution no
    /// earlier than that.
    pub(crate) first_sent: Instant,
    /// What the replicas confirmed on the last send.
    pub(crate) synced: Synced,
}

/// Where a request goes and what it is, for errors and logs.
pub(crate) struct Target<'a> {
    /// What is sent (unlock, acquire, release, ...).
    pub(crate) operation: &'static str,
    /// The object's name.
    pub(crate) name: &'a str,
    /// The latch key of this request, in the object's hash slot.
    pub(crate) latch_key: String,
    /// Replay a reply the replicas did not confirm (its `WAIT` runs again and
    /// covers the first write), up to the retry budget.
    pub(crate) replay_short: bool,
}

impl Request {
    pub(crate) fn new() -> Self {
        Request {
            id: format!("{:032x}", rand::random::<u128>()),
            first_sent: Arc::default(),
        }
    }

    /// The request id, part of its latch key.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Sends the script `build` makes for this request's latch. A lost reply
    /// (and, with `replay_short`, a reply short of replica confirmations) is
    /// replayed through the latch while the retry budget and the latch's
    /// lifetime allow. A reply still short after the last attempt is
    /// returned as it is, with `synced` saying so.
    pub(crate) async fn send(
        &self,
        engine: &Engine,
        target: Target<'_>,
        build: impl Fn(&Latch) -> ScriptCall + Sync,
    ) -> Result<Sent> {
        let config = &engine.config;
        let per_attempt = per_attempt(engine);
        let latch = Latch {
            key: target.latch_key,
            ttl_ms: latch_ttl(engine).as_millis() as i64,
        };
        // A send after the latch expired could apply the change a second
        // time. The latch lives from the first send, so only a request that
        // was sent already (by a caller who then left) can be too late.
        let too_late = |first: Instant, now: Instant| {
            now + per_attempt >= first + Duration::from_millis(latch.ttl_ms as u64)
        };
        if let Some(first) = self.first_sent.get().copied() {
            if too_late(first, Instant::now()) {
                return Err(Error::OutcomeUnknown {
                    operation: target.operation,
                    name: target.name.to_string(),
                    cause: "its latch may have expired, so it cannot be replayed safely".into(),
                });
            }
        }
        let first_sent = *self.first_sent.get_or_init(Instant::now);
        let mut attempt = 0;
        loop {
            let may_retry = attempt + 1 < config.retry_attempts
                && !too_late(first_sent, Instant::now() + config.retry_delay);
            match engine.write(|| build(&latch)).await {
                Ok((_, Synced::Short { acked, known, .. })) if target.replay_short && may_retry => {
                    tracing::info!(name = %target.name, operation = target.operation, attempt, acked, known, "write not confirmed by replicas; replaying through its latch");
                }
                Ok((reply, synced)) => {
                    // The latch only matters while a replay could still come;
                    // delete it now (without waiting, as Redisson does)
                    // instead of leaving it to its TTL.
                    engine.latches.discard(latch.key);
                    return Ok(Sent {
                        reply,
                        first_sent,
                        synced,
                    });
                }
                Err(e) if e.outcome_unknown() && may_retry => {
                    tracing::info!(name = %target.name, operation = target.operation, error = %e, attempt, "reply lost; replaying through the latch");
                }
                // Nothing was sent (a failover the sentinels do not agree
                // on yet): sending it later is safe.
                Err(Error::NoPrimary(reason)) if may_retry => {
                    tracing::info!(name = %target.name, operation = target.operation, %reason, attempt, "no primary yet; sending again");
                }
                Err(e) => return Err(e),
            }
            attempt += 1;
            tokio::time::sleep(config.retry_delay).await;
        }
    }
}

/// The longest one send may take: the command timeout, and a synced write's
/// `WAIT`.
fn per_attempt(engine: &Engine) -> Duration {
    engine.config.timeout + engine.replica_sync.extra_time()
}

/// How long a latch lives: long enough to outlive every replay (Redisson:
/// `(timeout + retryDelay) * retryAttempts`).
pub(crate) fn latch_ttl(engine: &Engine) -> Duration {
    let config = &engine.config;
    let ms = (per_attempt(engine).as_millis() + config.retry_delay.as_millis())
        .saturating_mul(u128::from(config.retry_attempts.max(1)))
        .clamp(1, crate::engine::lease::MAX_LEASE.as_millis());
    Duration::from_millis(ms as u64)
}
