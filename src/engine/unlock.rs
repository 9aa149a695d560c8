//! Sending a kind's unlock (or undo) script for one owner's field through an
//! unlock latch (`redisson_unlock_latch:{name}:<request-id>`, a [`Request`]),
//! so that a retry replays the first outcome instead of releasing twice.
//! Nothing here knows the hold table: the stages above (`release`,
//! `resolve`) decide what to send and keep the books.

use tokio::time::Instant;

use crate::engine::kind::{Call, Patience};
use crate::engine::raw::Unlocked;
use crate::engine::request::{Confirm, Request, Target};
use crate::engine::safety::Synced;
use crate::engine::script;
use crate::error::{Error, Result};
use crate::naming;

/// What a release sends.
#[derive(Clone, Copy)]
pub(crate) enum Release {
    /// The kind's unlock, confirmed by the replicas (replayed until it is,
    /// then an error).
    Unlock,
    /// The kind's undo of a grant the replicas did not confirm, for a
    /// waiter with the call's patience; not waited for.
    Undo,
}

/// Sends the kind's unlock script for the call's field as `request`: a lost
/// reply is replayed through its latch (see [`Request::send`]). Returns the
/// outcome and when the request was first sent: a replayed reply describes
/// an execution no earlier than that. A reply the replicas did not confirm
/// is replayed the same way, and is an error on the last attempt.
pub(crate) async fn send_unlock(call: &Call<'_>, request: &Request) -> Result<(Unlocked, Instant)> {
    send_release(call, request, Release::Unlock).await
}

/// Sends a release of the call's field as `request` (see [`send_unlock`]).
pub(crate) async fn send_release(
    call: &Call<'_>,
    request: &Request,
    how: Release,
) -> Result<(Unlocked, Instant)> {
    let (confirm, operation) = match how {
        Release::Unlock => (Confirm::Replay, "unlock"),
        Release::Undo => (Confirm::Skip, "undo"),
    };
    let target = Target {
        operation,
        name: call.lock,
        latch_key: naming::latch_name(call.key, request.id()),
        confirm,
    };
    let unlock = Call {
        patience: Patience::Once,
        ..*call
    };
    let sent = request
        .send(call.engine, target, |latch| match how {
            Release::Unlock => call.kind.unlock(&unlock, latch),
            Release::Undo => call.kind.undo(call, latch),
        })
        .await
        .map_err(|e| call.wrong_type(e))?;
    if let short @ Synced::Short { .. } = sent.synced {
        return Err(call
            .engine
            .replica_sync
            .not_synced(operation, call.lock, short));
    }
    let unlocked = match script::as_i64(&sent.reply) {
        Some(1) => Unlocked::Released,
        Some(0) => Unlocked::StillHeld,
        None if sent.reply.is_null() => {
            return Err(Error::NotHeld {
                name: call.lock.to_string(),
                field: call.field.to_string(),
            })
        }
        _ => return Err(script::unexpected(operation, &sent.reply)),
    };
    Ok((unlocked, sent.first_sent))
}
