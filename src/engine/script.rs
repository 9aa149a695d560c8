//! The Lua scripts in `lua/` and the one way they are sent: `EVALSHA` with at
//! most one attempt, falling back to `EVAL` on `NOSCRIPT`.
//!
//! fred re-sends a written command after a reconnect by default, and its
//! `with_options(..).evalsha(..)` ignores the options; a re-sent acquire would
//! double a hold count. So scripts go through `custom()`, which honours
//! `max_attempts = 1`, on a client that is also built with
//! `max_command_attempts = 1`.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::error::{Error, Result};

/// A script and its SHA-1.
pub(crate) struct Script {
    text: &'static str,
    sha1: String,
}

impl Script {
    pub(crate) fn new(text: &'static str) -> Self {
        Script {
            text,
            sha1: fred::util::sha1_hash(text),
        }
    }

    fn argv(&self, keys: &[&str], args: Vec<Value>) -> Vec<Value> {
        let mut argv: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
        argv.push(self.sha1.as_str().into());
        argv.push((keys.len() as i64).into());
        argv.extend(keys.iter().map(|k| Value::from(*k)));
        argv.extend(args);
        argv
    }

    /// Runs the script once on the node that owns `keys[0]`.
    pub(crate) async fn run(
        &self,
        redis: &Client,
        timeout: Duration,
        keys: &[&str],
        args: Vec<Value>,
    ) -> Result<Value> {
        let mut argv = self.argv(keys, args);
        let slot = fred::util::redis_keyslot(keys[0].as_bytes());
        match send(redis, timeout, "EVALSHA", argv.clone(), slot).await {
            // NOSCRIPT means the script did not run: sending its text is safe.
            Err(Error::Redis { message: msg, .. }) if msg.starts_with("NOSCRIPT") => {
                argv[0] = self.text.into();
                send(redis, timeout, "EVAL", argv, slot).await
            }
            other => other,
        }
    }
}

impl Script {
    /// Runs the script once, pipelined with `WAIT <replicas> <wait>` on the
    /// same connection, so the WAIT covers exactly this write. Returns the
    /// script's reply and how many replicas acknowledged, or `None` when the
    /// server has no WAIT (a proxy that refuses it).
    pub(crate) async fn run_then_wait(
        &self,
        redis: &Client,
        timeout: Duration,
        keys: &[&str],
        args: Vec<Value>,
        replicas: i64,
        wait: Duration,
    ) -> Result<(Value, Option<i64>)> {
        let mut argv = self.argv(keys, args);
        let limit = timeout + wait;
        let slot = fred::util::redis_keyslot(keys[0].as_bytes());
        let first =
            send_then_wait(redis, limit, "EVALSHA", argv.clone(), slot, replicas, wait).await;
        let (reply, acked) = match first {
            // NOSCRIPT means the script did not run: sending its text is safe.
            Err(Error::Redis { message: msg, .. }) if msg.starts_with("NOSCRIPT") => {
                argv[0] = self.text.into();
                send_then_wait(redis, limit, "EVAL", argv, slot, replicas, wait).await?
            }
            other => other?,
        };
        Ok((reply, acked))
    }
}

/// `cmd argv` then `WAIT replicas wait`, as one pipeline with one attempt.
async fn send_then_wait(
    redis: &Client,
    timeout: Duration,
    cmd: &'static str,
    argv: Vec<Value>,
    slot: u16,
    replicas: i64,
    wait: Duration,
) -> Result<(Value, Option<i64>)> {
    let options = once(timeout);
    let pipeline = fred::clients::Pipeline::from(redis.with_options(&options));
    let script = CustomCommand::new_static(cmd, ClusterHash::Custom(slot), false);
    let wait_cmd = CustomCommand::new_static("WAIT", ClusterHash::Custom(slot), false);
    let queue = |e: fred::error::Error| Error::from_redis(&e, timeout);
    pipeline
        .custom::<(), Value>(script, argv)
        .await
        .map_err(queue)?;
    pipeline
        .custom::<(), Value>(
            wait_cmd,
            vec![replicas.into(), (wait.as_millis() as i64).into()],
        )
        .await
        .map_err(queue)?;
    let call = pipeline.try_all::<Value>();
    let mut replies = match tokio::time::timeout(timeout + Duration::from_secs(1), call).await {
        Ok(replies) => replies.into_iter(),
        Err(_) => return Err(Error::Timeout(timeout)),
    };
    let reply = replies
        .next()
        .unwrap_or_else(|| Ok(Value::Null))
        .map_err(|e| Error::from_redis(&e, timeout))?;
    let acked = match replies.next() {
        Some(Ok(value)) => as_i64(&value),
        Some(Err(e)) if e.details().contains("unknown command") => None,
        // The script ran; its reply must not be lost to a WAIT error (an ACL
        // without WAIT, a primary demoted meanwhile): count no replica.
        Some(Err(e)) => {
            tracing::warn!(error = %e, "WAIT after a lock script failed; counting no replica");
            Some(0)
        }
        // The pipeline failed as a whole: only one (error) result.
        None => return Err(Error::connection("pipeline ended without a WAIT reply")),
    };
    Ok((reply, acked))
}

async fn send(
    redis: &Client,
    timeout: Duration,
    cmd: &'static str,
    argv: Vec<Value>,
    slot: u16,
) -> Result<Value> {
    let options = once(timeout);
    // The slot of the first key. Not `ClusterHash::Offset(2)`: fred 10.1
    // honours only `Custom` on a custom command and otherwise hashes the
    // first string argument, which is the script's SHA.
    let command = CustomCommand::new_static(cmd, ClusterHash::Custom(slot), false);
    let client = redis.with_options(&options);
    let call = client.custom::<Value, Value>(command, argv);
    // fred's own timeout normally fires first; this one only guards against a hang.
    match tokio::time::timeout(timeout + Duration::from_secs(1), call).await {
        Ok(reply) => reply.map_err(|e| Error::from_redis(&e, timeout)),
        Err(_) => Err(Error::Timeout(timeout)),
    }
}

/// Options for a script: one attempt, and no redirection either. fred would
/// follow a MOVED or ASK by writing the command again, which one attempt
/// forbids, and then report "Too many failed write attempts", exactly as
/// after a lost connection, where the script may have run. With no
/// redirection allowed, a redirect is its own error ("Too many redirections",
/// see `Error::was_redirected`): the node refused the script, so the caller
/// may send it again once fred has re-read the slot map.
fn once(timeout: Duration) -> Options {
    Options {
        max_attempts: Some(1),
        max_redirections: Some(0),
        timeout: Some(timeout),
        ..Options::default()
    }
}

/// Reads an integer reply (`Integer`, or a numeric string).
pub(crate) fn as_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Integer(i) => Some(*i),
        Value::String(s) => s.parse().ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// An unexpected reply shape, as an error.
pub(crate) fn unexpected(what: &str, value: &Value) -> Error {
    Error::redis(format!("unexpected reply to {what}: {value:?}"))
}
