//! The Lua scripts in `lua/` and the one way they are sent: `EVALSHA` with at
//! most one attempt, falling back to `EVAL` on `NOSCRIPT`.
//!
//! fred re-sends a written command after a reconnect by default, and its
//! `with_options(..).evalsha(..)` ignores the options; a re-sent acquire would
//! double a hold count. So scripts go through `custom()`, which honours
//! `max_attempts = 1`, on a client that is also built with
//! `max_command_attempts = 1`.

use std::sync::OnceLock;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::engine::boxed_reply;
use crate::error::{Error, Result};

/// The unlock latch of one release request.
pub(crate) struct Latch {
    pub(crate) key: String,
    pub(crate) ttl_ms: i64,
}

/// A script and what to run it with.
#[derive(Clone)]
pub(crate) struct ScriptCall {
    pub(crate) script: &'static Script,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Value>,
}

impl ScriptCall {
    /// `EVALSHA`'s or `EVAL`'s arguments: `head` (the SHA or the text), the
    /// key count, the keys, the arguments. The keys' strings are moved, not
    /// copied.
    pub(crate) fn into_argv(self, head: Value) -> Vec<Value> {
        let mut argv = Vec::with_capacity(2 + self.keys.len() + self.args.len());
        argv.push(head);
        argv.push((self.keys.len() as i64).into());
        argv.extend(self.keys.into_iter().map(Value::from));
        argv.extend(self.args);
        argv
    }
}

/// A script and its SHA-1.
pub(crate) struct Script {
    text: &'static str,
    /// The SHA-1 as a ready argument: cloning it shares its bytes.
    sha1: Value,
    /// Whether one call's work can grow with data already on Redis (a fair
    /// lock's queue, every read hold, every ended lease) rather than with
    /// its own arguments. Such a script is never batched as it is (see
    /// `engine::coalesce`): a batch of them would hold Redis for the sum.
    walks: bool,
    /// For a walking script, the keys (1-based, as `KEYS[i]`) holding the
    /// data it walks, if its work is bounded by its arguments whenever none
    /// of them exists: a batch may then carry its calls, and runs only
    /// those that find them all absent (`lua/engine/each.lua`).
    walks_over: &'static [usize],
    /// The same script run once per call of a batch, made when first needed.
    each: OnceLock<Box<Script>>,
}

/// The batch runner, with a `--BODY--` line where a script's text goes.
const EACH: &str = include_str!("../../lua/engine/each.lua");

impl Script {
    /// A script whose work for one call is bounded by what the call sends
    /// (its keys and arguments): it may be batched.
    pub(crate) fn new(text: &'static str) -> Self {
        Script {
            text,
            sha1: fred::util::sha1_hash(text).into(),
            walks: false,
            walks_over: &[],
            each: OnceLock::new(),
        }
    }

    /// A script whose work for one call can grow with data on Redis (it
    /// walks a queue, a hash's fields, a set of ended leases): always sent
    /// on its own, never batched.
    pub(crate) fn walking(text: &'static str) -> Self {
        Script {
            walks: true,
            ..Script::new(text)
        }
    }

    /// A walking script whose walk is over the data of `keys` (1-based, as
    /// `KEYS[i]`) only: a call that finds none of them on Redis costs what
    /// it sends, like a script that does not walk. Such calls may go out in
    /// a batch, which checks each call's keys as it runs it (see
    /// `engine::coalesce`).
    pub(crate) fn walking_over(text: &'static str, keys: &'static [usize]) -> Self {
        Script {
            walks_over: keys,
            ..Script::walking(text)
        }
    }

    /// Whether a call may go out in a batch: always for a script that does
    /// not walk data, and under [`Script::checked`] for one that walks
    /// only the data of some keys.
    pub(crate) fn batches(&self) -> bool {
        !self.walks || !self.walks_over.is_empty()
    }

    /// Whether one call's work can grow with data already on Redis: sent
    /// as it is, it goes out on its own, few at a time (`engine::coalesce`).
    pub(crate) fn walks(&self) -> bool {
        self.walks
    }

    /// Whether its batch form runs only the calls that find the data it
    /// walks absent (a walking script that may batch).
    pub(crate) fn checked(&self) -> bool {
        self.walks && !self.walks_over.is_empty()
    }

    /// This script wrapped to run once per call of a batch (see
    /// `engine::coalesce`), with the check of [`Script::walking_over`]'s
    /// keys for a walking one. Made once per script, and kept for good:
    /// scripts are statics.
    pub(crate) fn each(&self) -> &Script {
        self.each.get_or_init(|| {
            let mut text = EACH.replacen("--BODY--", self.text, 1);
            if self.checked() {
                let keys: Vec<String> = self
                    .walks_over
                    .iter()
                    .map(|i| format!("KEYS[{i}]"))
                    .collect();
                let small = format!(
                    "small = function(KEYS) return redis.call('exists', {}) == 0 end",
                    keys.join(", ")
                );
                text = text.replacen("--SMALL--", &small, 1);
            }
            Box::new(Script::new(Box::leak(text.into_boxed_str())))
        })
    }

    /// Sends `call` as `EVALSHA` only, with one attempt, followed by `wait`
    /// when given: a `NOSCRIPT` error comes back to the caller. Returns the
    /// reply and, with `wait`, how many replicas acknowledged.
    pub(crate) async fn send_cached(
        &self,
        redis: &Client,
        timeout: Duration,
        slot: u16,
        call: ScriptCall,
        wait: Option<WaitFor>,
    ) -> Result<(Value, Option<Acks>)> {
        let argv = call.into_argv(self.sha1.clone());
        send_waiting(redis, timeout, "EVALSHA", argv, slot, None, wait).await
    }

    /// `SCRIPT LOAD`s the script on the node owning `slot`. Loading twice
    /// is harmless, so it may be re-sent.
    pub(crate) async fn load(&self, redis: &Client, timeout: Duration, slot: u16) -> Result<()> {
        let command = CustomCommand::new_static("SCRIPT", ClusterHash::Custom(slot), false);
        let options = Options {
            max_attempts: Some(3),
            timeout: Some(timeout),
            ..Options::default()
        };
        redis
            .with_options(&options)
            .custom::<Value, Value>(
                command,
                vec!["LOAD".into(), Value::from_static_str(self.text)],
            )
            .await
            .map(drop)
            .map_err(|e| Error::from_redis(&e, timeout))
    }

    /// Runs `call` once on the node that owns its first key (`slot`),
    /// followed by `wait` when given. On `NOSCRIPT` the script did not run,
    /// so its text goes out instead, with the arguments `rebuild` makes
    /// again: the first ones went to fred, and keeping a copy of every call
    /// for that rare case would cost each call an allocation per argument.
    pub(crate) async fn run(
        &self,
        redis: &Client,
        timeout: Duration,
        slot: u16,
        call: ScriptCall,
        rebuild: &(dyn Fn() -> ScriptCall + Sync),
        wait: Option<WaitFor>,
    ) -> Result<(Value, Option<Acks>)> {
        match self.send_cached(redis, timeout, slot, call, wait).await {
            Err(e) if e.is_noscript() => {
                if self.batches() {
                    // The node's script cache is new (a first use, a
                    // restart, a promotion): its batch form is loaded now,
                    // while nothing waits for it. A batch that met NOSCRIPT
                    // would have followed it with a `WAIT`, which holds the
                    // connection for its timeout while a replica is down.
                    // Boxed: see `send_waiting`.
                    let load: futures::future::BoxFuture<'_, Result<()>> =
                        Box::pin(self.each().load(redis, timeout, slot));
                    if let Err(e) = load.await {
                        tracing::debug!(error = %e, "loading a batch script failed");
                    }
                }
                send_waiting(redis, timeout, "EVAL", self.eval(rebuild), slot, None, wait).await
            }
            other => other,
        }
    }

    /// Runs `call` once like [`Script::run`], for a caller that cannot
    /// make it again (a queued call, a batch): its arguments are kept (one
    /// vector, their bytes shared) for the `EVAL` that follows a `NOSCRIPT`.
    /// The call is answered on the spot either way, inside the `WAIT` turn
    /// its sender holds: handing a `NOSCRIPT` back to each caller to send
    /// alone put one `WAIT` per call back on the connection. With `node`,
    /// it goes to that node's connection whatever the slot map says (a
    /// node that no longer serves `slot` refuses it: nothing runs).
    pub(crate) async fn run_kept(
        &self,
        redis: &Client,
        timeout: Duration,
        slot: u16,
        node: Option<&Server>,
        call: ScriptCall,
        wait: Option<WaitFor>,
    ) -> Result<(Value, Option<Acks>)> {
        let argv = call.into_argv(self.sha1.clone());
        let mut kept = argv.clone();
        match send_waiting(redis, timeout, "EVALSHA", argv, slot, node, wait).await {
            Err(e) if e.is_noscript() => {
                kept[0] = Value::from_static_str(self.text);
                send_waiting(redis, timeout, "EVAL", kept, slot, node, wait).await
            }
            other => other,
        }
    }

    /// The `EVAL` arguments of the call `rebuild` makes: the script's text,
    /// then its keys and arguments.
    fn eval(&self, rebuild: &(dyn Fn() -> ScriptCall + Sync)) -> Vec<Value> {
        rebuild().into_argv(Value::from_static_str(self.text))
    }
}

/// `cmd argv` alone, or pipelined with `WAIT` on the same connection so
/// that the `WAIT` covers exactly this write.
///
/// The path with a `WAIT` is behind `dyn`, for the reason of
/// [`boxed_reply`]: every lock write's future would otherwise carry its
/// pipeline, fred's futures inline. The path without one is only [`send`],
/// whose fred future is boxed already: boxing it again cost every script an
/// allocation and a copy of its state (issue 38).
fn send_waiting<'a>(
    redis: &'a Client,
    timeout: Duration,
    cmd: &'static str,
    argv: Vec<Value>,
    slot: u16,
    node: Option<&'a Server>,
    wait: Option<WaitFor>,
) -> impl std::future::Future<Output = Result<(Value, Option<Acks>)>> + Send + 'a {
    use futures::future::{Either, FutureExt};
    match wait {
        None => Either::Left(
            send(redis, timeout, cmd, argv, slot, node)
                .map(|reply| reply.map(|reply| (reply, None))),
        ),
        Some(wait) => {
            let waited: futures::future::BoxFuture<'a, _> = Box::pin(async move {
                let wait = WaitFor {
                    timeout: wait.timeout_now(),
                    by: None,
                    ..wait
                };
                let (reply, acks) =
                    send_then_wait(redis, timeout + wait.timeout, cmd, argv, slot, node, wait)
                        .await?;
                Ok((reply, Some(acks)))
            });
            Either::Right(waited)
        }
    }
}

/// The `WAIT <replicas> <timeout>` that follows a script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WaitFor {
    pub(crate) replicas: i64,
    pub(crate) timeout: Duration,
    /// When the reply is needed at the latest (a renewal, before the
    /// deadline it would move): the timeout is cut to it when the `WAIT`
    /// goes out, which may be a while after the call was made (it waits
    /// for the connection's one `WAIT` in flight).
    pub(crate) by: Option<tokio::time::Instant>,
    /// Read which replicas acknowledged (a `ROLE` before and after the
    /// `WAIT`): where replicas that cannot be promoted may acknowledge, so
    /// that theirs is not mistaken for a promotable one's.
    pub(crate) by_replica: bool,
}

impl WaitFor {
    /// One `WAIT` for both: as many replicas as either asks, answered as
    /// soon as either needs.
    pub(crate) fn join(self, other: WaitFor) -> WaitFor {
        WaitFor {
            replicas: self.replicas.max(other.replicas),
            timeout: self.timeout.min(other.timeout),
            by: match (self.by, other.by) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            by_replica: self.by_replica || other.by_replica,
        }
    }

    /// The timeout to send now.
    fn timeout_now(&self) -> Duration {
        match self.by {
            // `WAIT` with a timeout of 0 would block for good.
            Some(by) => self.timeout.min(
                by.saturating_duration_since(tokio::time::Instant::now())
                    .max(Duration::from_millis(1)),
            ),
            None => self.timeout,
        }
    }
}

/// `cmd argv` then `WAIT`, as one pipeline with one attempt; with
/// [`WaitFor::by_replica`], the `WAIT` between two `ROLE`s.
async fn send_then_wait(
    redis: &Client,
    timeout: Duration,
    cmd: &'static str,
    argv: Vec<Value>,
    slot: u16,
    node: Option<&Server>,
    wait: WaitFor,
) -> Result<(Value, Acks)> {
    let options = once(timeout, node);
    let pipeline = fred::clients::Pipeline::from(redis.with_options(&options));
    let command =
        |name: &'static str| CustomCommand::new_static(name, ClusterHash::Custom(slot), false);
    let queue = |e: fred::error::Error| Error::from_redis(&e, timeout);
    pipeline
        .custom::<(), Value>(command(cmd), argv)
        .await
        .map_err(queue)?;
    if wait.by_replica {
        pipeline
            .custom::<(), Value>(command("ROLE"), Vec::<Value>::new())
            .await
            .map_err(queue)?;
    }
    pipeline
        .custom::<(), Value>(
            command("WAIT"),
            vec![
                wait.replicas.into(),
                // Never 0: `WAIT n 0` blocks the connection for good.
                (wait.timeout.as_millis().max(1) as i64).into(),
            ],
        )
        .await
        .map_err(queue)?;
    if wait.by_replica {
        pipeline
            .custom::<(), Value>(command("ROLE"), Vec::<Value>::new())
            .await
            .map_err(queue)?;
    }
    let call = pipeline.try_all::<Value>();
    let mut replies = match tokio::time::timeout(timeout + Duration::from_secs(1), call).await {
        Ok(replies) => replies.into_iter(),
        Err(_) => return Err(Error::Timeout(timeout)),
    };
    let reply = replies
        .next()
        .unwrap_or_else(|| Ok(Value::Null))
        .map_err(|e| Error::from_redis(&e, timeout))?;
    let before = match wait.by_replica {
        true => replies.next().and_then(|r| r.ok()),
        false => None,
    };
    let count = match replies.next() {
        Some(Ok(value)) => as_i64(&value).unwrap_or(0),
        // A server without WAIT (a proxy that refuses it) confirmed nothing.
        Some(Err(e)) if e.details().contains("unknown command") => 0,
        // The script ran; its reply must not be lost to a WAIT error (an ACL
        // without WAIT, a primary demoted meanwhile): count no replica.
        Some(Err(e)) => {
            tracing::warn!(error = %e, "WAIT after a lock script failed; counting no replica");
            0
        }
        // The pipeline failed as a whole: only one (error) result.
        None => return Err(Error::connection("pipeline ended without a WAIT reply")),
    };
    let after = replies.next().and_then(|r| r.ok());
    let caught_up = match (before, after) {
        (Some(before), Some(after)) => caught_up(&before, &after),
        _ => None,
    };
    Ok((reply, Acks { count, caught_up }))
}

/// What the replicas acknowledged of a write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Acks {
    /// The `WAIT` reply: how many replicas acknowledged.
    pub(crate) count: i64,
    /// With [`WaitFor::by_replica`]: the replicas (`ip:port`, as the
    /// primary names them) whose acknowledged offset, read by the `ROLE`
    /// after the `WAIT`, reached the primary's offset read by the `ROLE`
    /// right after the write. That offset is past the write (a script's
    /// effects are in the replication stream before its reply), so those
    /// replicas surely have it.
    pub(crate) caught_up: Option<Vec<String>>,
}

/// The replicas of `after` (a primary's `ROLE`) whose acknowledged offset
/// reached the primary's offset in `before`; `None` if either is not a
/// primary's `ROLE` (a demoted node).
fn caught_up(before: &Value, after: &Value) -> Option<Vec<String>> {
    let master = |role: &Value| -> Option<(i64, Vec<Value>)> {
        let Value::Array(parts) = role else {
            return None;
        };
        match (
            parts.first()?.as_str()?.as_ref(),
            parts.get(1),
            parts.get(2),
        ) {
            ("master", Some(offset), Some(Value::Array(replicas))) => {
                Some((as_i64(offset)?, replicas.clone()))
            }
            _ => None,
        }
    };
    let (written, _) = master(before)?;
    let (_, replicas) = master(after)?;
    Some(
        replicas
            .iter()
            .filter_map(|replica| match replica {
                Value::Array(r) if r.len() >= 3 && as_i64(&r[2])? >= written => {
                    Some(format!("{}:{}", r[0].as_str()?, as_i64(&r[1])?))
                }
                _ => None,
            })
            .collect(),
    )
}

async fn send(
    redis: &Client,
    timeout: Duration,
    cmd: &'static str,
    argv: Vec<Value>,
    slot: u16,
    node: Option<&Server>,
) -> Result<Value> {
    let options = once(timeout, node);
    // The slot of the first key. Not `ClusterHash::Offset(2)`: fred 10.1
    // honours only `Custom` on a custom command and otherwise hashes the
    // first string argument, which is the script's SHA.
    let command = CustomCommand::new_static(cmd, ClusterHash::Custom(slot), false);
    let client = redis.with_options(&options);
    // fred's timeout (the options') covers the whole wait for the reply.
    // Boxed: see `engine::boxed_reply`.
    boxed_reply(|| client.custom::<Value, Value>(command, argv))
        .await
        .map_err(|e| Error::from_redis(&e, timeout))
}

/// Options for a script: one attempt, and no redirection either. fred would
/// follow a MOVED or ASK by writing the command again, which one attempt
/// forbids, and then report "Too many failed write attempts", exactly as
/// after a lost connection, where the script may have run. With no
/// redirection allowed, a redirect is its own error ("Too many redirections",
/// see `Error::was_redirected`): the node refused the script, so the caller
/// may send it again; after a MOVED fred has re-read the slot map first.
/// fred honours `Some(0)` only on a connection that allows no redirect
/// either, which script connections do (`connection::builder`).
fn once(timeout: Duration, node: Option<&Server>) -> Options {
    Options {
        max_attempts: Some(1),
        max_redirections: Some(0),
        timeout: Some(timeout),
        cluster_node: node.cloned(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn role(offset: i64, replicas: &[(&str, i64, i64)]) -> Value {
        let replicas = replicas
            .iter()
            .map(|(ip, port, ack)| {
                // As RESP2 sends them: the port and offset as bulk strings.
                Value::Array(vec![
                    Value::from(*ip),
                    Value::from(port.to_string()),
                    Value::from(ack.to_string()),
                ])
            })
            .collect();
        Value::Array(vec![
            Value::from("master"),
            Value::from(offset),
            Value::Array(replicas),
        ])
    }

    #[test]
    fn the_replicas_caught_up_are_those_past_the_write() {
        let before = role(500, &[("10.0.0.2", 6379, 400), ("10.0.0.3", 6379, 400)]);
        let after = role(
            700,
            &[
                ("10.0.0.2", 6379, 500),
                ("10.0.0.3", 6379, 499),
                ("10.0.0.4", 6380, 650),
            ],
        );
        assert_eq!(
            caught_up(&before, &after),
            Some(vec![
                "10.0.0.2:6379".to_string(),
                "10.0.0.4:6380".to_string()
            ])
        );
        // A node that is no longer a primary names no replica.
        let replica = Value::Array(vec![
            Value::from("slave"),
            Value::from("10.0.0.9"),
            Value::from(6379),
            Value::from("connected"),
            Value::from(700),
        ]);
        assert_eq!(caught_up(&before, &replica), None);
        assert_eq!(caught_up(&replica, &after), None);
    }
}
