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

use crate::engine::safety::Synced;
use crate::engine::script::{Latch, ScriptCall};
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
    /// Whether the replicas must confirm it: replayed while they do not
    /// (its `WAIT` runs again and covers the first write), up to the retry
    /// budget; or not waited for at all.
    pub(crate) confirm: Confirm,
}

/// Whether a request waits for the replicas.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Confirm {
    /// Replayed until they confirm, within the retry budget.
    Replay,
    /// Not waited for: taking back a grant the replicas did not confirm
    /// (waiting again would only double the caller's wait).
    Skip,
}

impl Request {
    pub(crate) fn new() -> Self {
        Request {
            // 32 hex digits, written without `format!`, which cost about 1%
            // of a lock + unlock pair's instructions (issue 38).
            id: uuid::Uuid::from_u128(rand::random())
                .simple()
                .encode_lower(&mut uuid::Uuid::encode_buffer())
                .to_owned(),
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
                    source: None,
                });
            }
        }
        let first_sent = *self.first_sent.get_or_init(Instant::now);
        let mut attempt = 0;
        loop {
            let pause = crate::config::retry_pause(config.retry_delay, attempt);
            let may_retry = attempt + 1 < config.retry_attempts
                && !too_late(first_sent, Instant::now() + pause);
            let sent = match target.confirm {
                Confirm::Replay => engine.write(|| build(&latch)).await,
                Confirm::Skip => engine
                    .run_unsynced(|| build(&latch))
                    .await
                    .map(|reply| (reply, Synced::NotWaited)),
            };
            match sent {
                Ok((
                    _,
                    Synced::Short {
                        acked, promotable, ..
                    },
                )) if may_retry => {
                    tracing::info!(name = %target.name, operation = target.operation, attempt, acked, promotable, "write not confirmed by replicas; replaying through its latch");
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
            tokio::time::sleep(pause).await;
        }
    }
}

/// The longest one send may take: the command timeout, and a synced write's
/// `WAIT`.
fn per_attempt(engine: &Engine) -> Duration {
    engine.config.timeout + engine.replica_sync.extra_time()
}

/// How long a latch lives: long enough to outlive every replay, each send
/// and the longest pause before it (Redisson: `(timeout + retryDelay) *
/// retryAttempts`, with its pauses of at most twice `retryDelay`).
pub(crate) fn latch_ttl(engine: &Engine) -> Duration {
    let config = &engine.config;
    let attempts = config.retry_attempts.max(1);
    let pauses: Duration = (0..attempts)
        .map(|retry| crate::config::retry_step(config.retry_delay, retry))
        .sum();
    let ms = (per_attempt(engine) * attempts + pauses)
        .as_millis()
        .clamp(1, crate::engine::lease::MAX_LEASE.as_millis());
    Duration::from_millis(ms as u64)
}
