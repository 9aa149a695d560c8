//! The Lua scripts in `lua/` and the one way they are sent: `EVALSHA` with at
//! most one attempt, falling back to `EVAL` on `NOSCRIPT`.
//!
//! fred re-sends a written command after a reconnect by default, and its
//! `with_options(..).evalsha(..)` ignores the options; a re-sent acquire would
//! double a hold count. So scripts go through `custom()`, which honours
//! `max_attempts = 1`, on a client that is also built with
//! `max_command_attempts = 1`.

use std::sync::LazyLock;
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
    fn new(text: &'static str) -> Self {
        Script {
            text,
            sha1: fred::util::sha1_hash(text),
        }
    }

    /// Runs the script once on the node that owns `keys[0]`.
    pub(crate) async fn run(
        &self,
        redis: &Client,
        timeout: Duration,
        keys: &[&str],
        args: Vec<Value>,
    ) -> Result<Value> {
        let mut argv: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
        argv.push(self.sha1.as_str().into());
        argv.push((keys.len() as i64).into());
        argv.extend(keys.iter().map(|k| Value::from(*k)));
        argv.extend(args);
        match send(redis, timeout, "EVALSHA", argv.clone()).await {
            // NOSCRIPT means the script did not run: sending its text is safe.
            Err(Error::Redis(msg)) if msg.starts_with("NOSCRIPT") => {
                argv[0] = self.text.into();
                send(redis, timeout, "EVAL", argv).await
            }
            other => other,
        }
    }
}

async fn send(
    redis: &Client,
    timeout: Duration,
    cmd: &'static str,
    argv: Vec<Value>,
) -> Result<Value> {
    let options = Options {
        max_attempts: Some(1),
        timeout: Some(timeout),
        ..Options::default()
    };
    // Offset 2 is the first key: routes to the node that owns the lock's slot.
    let command = CustomCommand::new_static(cmd, ClusterHash::Offset(2), false);
    let client = redis.with_options(&options);
    let call = client.custom::<Value, Value>(command, argv);
    // fred's own timeout normally fires first; this one only guards against a hang.
    match tokio::time::timeout(timeout + Duration::from_secs(1), call).await {
        Ok(reply) => reply.map_err(|e| Error::from_redis(&e, timeout)),
        Err(_) => Err(Error::Timeout(timeout)),
    }
}

/// `lua/acquire.lua`.
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/acquire.lua")));
/// `lua/unlock.lua`.
pub(crate) static UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/unlock.lua")));
/// `lua/force_unlock.lua`.
pub(crate) static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/force_unlock.lua")));
/// `lua/renew.lua`.
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));

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
    Error::Redis(format!("unexpected reply to {what}: {value:?}"))
}
