//! When this client is not sure what Redis holds for an owner: an acquire
//! whose reply was lost, a grant it will not keep, holds Redis counts that
//! it never recorded. Each is settled by reading the state (the owner's hold
//! count, on the connection the scripts went out on, so the read comes after
//! them) and giving back what is not ours to keep; never by guessing. A lost
//! acquire is read in one script, confirmed by the replicas like the
//! acquire itself would have been.
//!
//! Everything here runs with the hold's `ops` slot taken, so nothing else of
//! that owner on that lock changes the count in between.

use std::sync::Arc;

use fred::interfaces::HashesInterface;
use fred::types::Value;

use crate::engine::hold::Hold;
use crate::engine::kind::{Call, Grant};
use crate::engine::raw::Unlocked;
use crate::engine::request::Request;
use crate::engine::safety::Synced;
use crate::engine::script::{self, Script, ScriptCall};
use crate::engine::unlock::{send_release, send_unlock, Release};
use crate::error::{Error, Result};

/// `lua/engine/resolve.lua`: what a lost acquire left, read in one step,
/// and a write the replicas must acknowledge when the owner holds a count.
static RESOLVE: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(include_str!("../../lua/engine/resolve.lua")));

/// What the resolution read.
struct Found {
    /// The owner's hold count.
    count: i64,
    /// The fencing token, for a kind that hands one out.
    token: Option<i64>,
    /// The lock's PTTL (-2: no key).
    ttl: i64,
}

/// The reply to an acquire was lost (`cause`). Reads the hold count, the
/// token and the TTL in one script on the lock's writer (so after the
/// acquire, if it was sent), followed by the `WAIT` a write gets: one more
/// than ours means the script ran, and what the replicas confirmed of it is
/// known before any token is handed out. Returns what the reply would have
/// said, and what the replicas confirmed.
///
/// # Errors
///
/// `cause` itself when the script has not run (after a timeout or a lost
/// connection an old copy might still arrive, so the caller hears it, as in
/// Redisson); [`Error::OutcomeUnknown`] when the state cannot be read, or
/// when the script ran for a fenced kind whose token is missing (the hold
/// is then given back).
pub(crate) async fn unknown_acquire(
    call: &Call<'_>,
    hold: &Arc<Hold>,
    cause: Error,
) -> Result<(Grant, Synced)> {
    let unknown = |e: String| Error::OutcomeUnknown {
        operation: "acquire",
        name: call.lock.to_string(),
        cause: format!("{cause}; {e}"),
        source: Some(Box::new(cause.clone())),
    };
    let (found, synced) = read_after_acquire(call)
        .await
        .map_err(|e| unknown(format!("then {e}")))?;
    let ours = i64::from(hold.count());
    let count = found.count;
    tracing::info!(lock = %call.lock, count, ours, ?synced, "resolved an acquire whose reply was lost");
    if count == ours + 1 {
        // Held by us, so nobody else can have advanced the token since.
        if call.kind.token_key(call.lock).is_none() || found.token.is_some() {
            return Ok((Grant::Acquired { token: found.token }, synced));
        }
        // Its key was deleted or evicted: a hold of a fenced kind without
        // its token is given back.
        give_back_one(call, hold).await;
        return Err(unknown(
            "it ran, but its fencing token was missing when read back \
             (the token key deleted or evicted), so the hold was given back"
                .to_string(),
        ));
    }
    if count != ours {
        let found = Error::redis(format!(
            "hold count on Redis is {count}, expected {ours} or {}",
            ours + 1
        ));
        return Err(unknown(format!("then {found}")));
    }
    if ours > 0 {
        // A re-entry that did not run: the lock is still ours alone.
        return Err(cause);
    }
    match found.ttl {
        -2 => Err(cause),
        ttl => Ok((Grant::Refused(ttl), synced)),
    }
}

/// Runs `lua/engine/resolve.lua` for the call's owner as a lock write,
/// followed by the deployment's `WAIT`.
async fn read_after_acquire(call: &Call<'_>) -> Result<(Found, Synced)> {
    let fields = call.kind.count_fields(call.lock, call.field);
    let token_key = call.kind.token_key(call.lock);
    let build = || ScriptCall {
        script: &RESOLVE,
        keys: vec![
            call.key.to_string(),
            token_key.clone().unwrap_or_else(|| call.key.to_string()),
        ],
        args: fields.iter().map(|f| Value::from(f.as_str())).collect(),
    };
    // Sent again if its own reply is lost (up to three times, as the reads
    // it replaces were): reading twice, and setting a TTL to what is left
    // of it twice, changes nothing.
    let mut tries = 1;
    let (reply, synced) = loop {
        match call.engine.write(&build).await {
            Err(e) if e.outcome_unknown() && tries < 3 => tries += 1,
            done => break done?,
        }
    };
    let Value::Array(values) = &reply else {
        return Err(script::unexpected("resolve", &reply));
    };
    let (Some(ttl), Some(token)) = (values.first().and_then(Value::as_i64), values.get(1)) else {
        return Err(script::unexpected("resolve", &reply));
    };
    let counts: Vec<Option<String>> = values[2..]
        .iter()
        .map(|v| if v.is_null() { None } else { v.as_string() })
        .collect();
    let token = match token {
        Value::Null => None,
        token => Some(
            token
                .as_i64()
                .ok_or_else(|| script::unexpected("resolve", &reply))?,
        ),
    };
    Ok((
        Found {
            count: call.kind.hold_count(call.field, &counts),
            token,
            ttl,
        },
        synced,
    ))
}

/// Takes back one acquisition that Redis counted but this client will not
/// record (no replica confirmed it, it was confirmed too late, or its token
/// is gone), with the kind's undo for a waiter of the call's patience (a
/// fair waiter keeps its place). If the undo's outcome is unknown, whatever
/// Redis counts beyond our holds is given back. False if the undo failed.
pub(crate) async fn give_back_one(call: &Call<'_>, hold: &Arc<Hold>) -> bool {
    // The holds left after the undo keep their own lease.
    let undo = Call {
        lease_ms: lease_ms_after_release(call, hold),
        ..*call
    };
    match send_release(&undo, &Request::new(), Release::Undo).await {
        Ok(_) => true,
        // Expired meanwhile: nothing of ours is left to give back.
        Err(Error::NotHeld { .. }) => true,
        Err(e) => {
            tracing::warn!(lock = %call.lock, error = %e, "undoing an acquire failed; checking what is left");
            give_back_untracked(&undo, hold).await;
            false
        }
    }
}

/// Reads the owner's hold count on Redis and releases whatever exceeds
/// ours (acquires this client never recorded), then retires the hold if it
/// holds nothing. `call` is of the hold's field. The read is ordered after
/// any script this owner sent on the same connection.
pub(crate) async fn give_back_untracked(call: &Call<'_>, hold: &Arc<Hold>) {
    let engine = call.engine;
    // An abandoned acquire may still be queued for a batch: read after it.
    engine.after_abandoned(call.key).await;
    let extra = match hold_count(call, &engine.reader(call.key)).await {
        Ok(count) => count - i64::from(hold.count()),
        Err(e) => {
            tracing::warn!(lock = %call.lock, error = %e, "could not check for untracked holds; any expire with their lease");
            0
        }
    };
    let unlock = Call {
        lease_ms: lease_ms_after_release(call, hold),
        ..*call
    };
    for _ in 0..extra.clamp(0, 64) {
        tracing::info!(lock = %call.lock, "giving back a hold this client did not record");
        match send_unlock(&unlock, &Request::new()).await {
            Ok((Unlocked::StillHeld, _)) => {}
            Ok((Unlocked::Released, _)) => {
                // That was the last count Redis had: the holds this client
                // recorded went with it (changed under us), so its guards
                // hear they are lost rather than believing they hold it.
                if hold.count() > 0 {
                    hold.found_gone();
                }
                break;
            }
            Err(e) => {
                tracing::warn!(lock = %call.lock, error = %e, "giving back an untracked hold failed; it expires with its lease");
                break;
            }
        }
    }
    engine.holds.retire_if_done(hold);
}

/// The call's owner's hold count on Redis, read through `redis` where and
/// as the kind says (`HGET <name> <field>` for every kind but the group
/// lock).
pub(crate) async fn hold_count<C: HashesInterface + Sync>(
    call: &Call<'_>,
    redis: &C,
) -> Result<i64> {
    let mut fields = call.kind.count_fields(call.lock, call.field);
    let values: Vec<Option<String>> = if fields.len() == 1 {
        let one = fields.pop().expect("one field");
        vec![call.engine.read(redis.hget(call.key, one)).await?]
    } else {
        call.engine.read(redis.hmget(call.key, fields)).await?
    };
    Ok(call.kind.hold_count(call.field, &values))
}

/// The lease the holds left after giving one back keep, in ms.
fn lease_ms_after_release(call: &Call<'_>, hold: &Hold) -> i64 {
    let lease = hold.lease_after_release(false, call.engine.config.lock_watchdog_timeout);
    lease.as_millis().min(i64::MAX as u128) as i64
}
