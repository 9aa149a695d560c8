//! The reads inspection sends: plain, bounded commands on the client's
//! command connection, routed by key, or to every primary for `SCAN` and
//! `PUBSUB`.

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::engine::{boxed_reply, Engine};
use crate::error::{Error, Result};

/// Channels per `PUBSUB NUMSUB` call, so that one call stays short.
const CHANNELS_PER_CALL: usize = 500;

/// Reads for one inspection.
pub(crate) struct Wire<'a> {
    engine: &'a Engine,
}

impl<'a> Wire<'a> {
    pub(crate) fn new(engine: &'a Engine) -> Self {
        Wire { engine }
    }

    /// The reading client's engine.
    pub(crate) fn engine(&self) -> &'a Engine {
        self.engine
    }

    /// The reading client's id.
    pub(crate) fn client_id(&self) -> &str {
        &self.engine.id
    }

    fn redis(&self) -> &Client {
        &self.engine.redis
    }

    fn error(&self, e: fred::error::Error) -> Error {
        Error::from_redis(&e, self.engine.config.timeout)
    }

    /// Every primary on a cluster; the one server (or Sentinel's primary)
    /// otherwise, as `None`.
    pub(crate) fn nodes(&self) -> Result<Vec<Option<Server>>> {
        if !self.redis().is_clustered() {
            return Ok(vec![None]);
        }
        let state = self
            .redis()
            .cached_cluster_state()
            .ok_or_else(|| Error::Connection {
                message: "no cluster slot map yet".into(),
                source: None,
            })?;
        Ok(state.unique_primary_nodes().into_iter().map(Some).collect())
    }

    /// A command on the node that owns its first argument, a key. `None`:
    /// the key has another type than the command reads (it changed since
    /// it was listed, or it is not Redisson's).
    pub(crate) async fn keyed(
        &self,
        command: &'static str,
        args: Vec<Value>,
    ) -> Result<Option<Value>> {
        let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        let call = boxed_reply(|| self.redis().custom::<Value, Value>(cmd, args));
        match call.await.map_err(|e| self.error(e)) {
            Ok(value) => Ok(Some(value)),
            Err(e) if e.is_wrong_type() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Commands on the nodes that own their first arguments, keys, sent as
    /// one pipeline; each reply as [`Wire::keyed`] gives it.
    pub(crate) async fn pipeline(
        &self,
        commands: Vec<(&'static str, Vec<Value>)>,
    ) -> Result<Vec<Option<Value>>> {
        if commands.is_empty() {
            return Ok(vec![]);
        }
        let sent = commands.len();
        let pipeline = self.redis().pipeline();
        for (command, args) in commands {
            let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
            // Queued, not sent: the reply comes from `try_all`.
            let queued: std::result::Result<Value, _> = pipeline.custom(cmd, args).await;
            queued.map_err(|e| self.error(e))?;
        }
        let replies = boxed_reply(|| async { Ok(pipeline.try_all::<Value>().await) }).await;
        let replies: Vec<_> = replies.map_err(|e: fred::error::Error| self.error(e))?;
        // Callers take one reply per command; a pipeline that failed as a
        // whole answers with one error only.
        if replies.len() != sent {
            let first = replies.into_iter().find_map(|r| r.err());
            return Err(match first {
                Some(e) => self.error(e),
                None => Error::redis(format!(
                    "a pipeline of {sent} commands got other than {sent} replies"
                )),
            });
        }
        replies
            .into_iter()
            .map(|reply| match reply.map_err(|e| self.error(e)) {
                Ok(value) => Ok(Some(value)),
                Err(e) if e.is_wrong_type() => Ok(None),
                Err(e) => Err(e),
            })
            .collect()
    }

    /// A command on one node (`None`: the default route).
    pub(crate) async fn on_node(
        &self,
        node: &Option<Server>,
        command: &'static str,
        args: Vec<Value>,
    ) -> Result<Value> {
        let cmd = CustomCommand::new_static(command, ClusterHash::Random, false);
        let reply = match node {
            Some(server) => {
                let routed = self.redis().with_cluster_node(server.clone());
                boxed_reply(|| routed.custom::<Value, Value>(cmd, args)).await
            }
            None => boxed_reply(|| self.redis().custom::<Value, Value>(cmd, args)).await,
        };
        reply.map_err(|e| self.error(e))
    }

    /// Subscribers of each channel, classic and sharded together, summed over
    /// every primary: a classic subscription lives on whichever node the
    /// subscriber chose, a sharded one on its slot's owner. Each connection
    /// counts once, however many of its client's waiters share it.
    pub(crate) async fn subscribers(&self, channels: &[String]) -> Result<Vec<u64>> {
        let mut counts = vec![0u64; channels.len()];
        if channels.is_empty() {
            return Ok(counts);
        }
        for node in self.nodes()? {
            let mut sharded = true;
            for (chunk_at, chunk) in channels.chunks(CHANNELS_PER_CALL).enumerate() {
                let offset = chunk_at * CHANNELS_PER_CALL;
                let mut kinds = vec!["NUMSUB"];
                if sharded {
                    kinds.push("SHARDNUMSUB");
                }
                for kind in kinds {
                    let mut args: Vec<Value> = vec![kind.into()];
                    args.extend(chunk.iter().map(|c| Value::from(c.as_str())));
                    let reply = match self.on_node(&node, "PUBSUB", args).await {
                        Ok(reply) => reply,
                        // Redis before 7 has no sharded channels.
                        Err(e) if kind == "SHARDNUMSUB" && e.reply().is_some() => {
                            sharded = false;
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    let Value::Array(pairs) = reply else {
                        return Err(crate::engine::script::unexpected("PUBSUB", &reply));
                    };
                    // Pairs beyond the channels asked about are not counted.
                    let asked = &mut counts[offset..offset + chunk.len()];
                    for (count, pair) in asked.iter_mut().zip(pairs.chunks(2)) {
                        let n = pair.get(1).and_then(crate::engine::script::as_i64);
                        *count = count.saturating_add(n.unwrap_or(0).max(0) as u64);
                    }
                }
            }
        }
        Ok(counts)
    }
}

/// A reply as text (bulk strings and simple strings alike).
pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => std::str::from_utf8(b).ok().map(str::to_string),
        Value::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

/// An integer reply, or an integer held in a string.
pub(crate) fn int(value: &Value) -> Option<i64> {
    crate::engine::script::as_i64(value)
}

/// The elements of an array reply (nil and other replies: none).
pub(crate) fn array(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        _ => vec![],
    }
}

/// A sorted set read `WITHSCORES`: (member, score) pairs, from RESP2's flat
/// array or RESP3's pairs.
pub(crate) fn scored(value: Value) -> Vec<(Value, Value)> {
    let items = array(value);
    if matches!(items.first(), Some(Value::Array(_))) {
        items
            .into_iter()
            .filter_map(|pair| {
                let mut pair = array(pair).into_iter();
                Some((pair.next()?, pair.next()?))
            })
            .collect()
    } else {
        let mut items = items.into_iter();
        std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
    }
}

/// A sorted-set score as whole ms.
pub(crate) fn score_ms(value: &Value) -> Option<i64> {
    match value {
        Value::Double(d) => Some(*d as i64),
        other => text(other)?.parse::<f64>().ok().map(|s| s as i64),
    }
}

/// A `PTTL` reply as (ms left, key without TTL); `None` when there is no key.
pub(crate) fn ttl(value: &Value) -> Option<(Option<u64>, bool)> {
    match int(value)? {
        -2 => None,
        -1 => Some((None, true)),
        ms => Some((Some(ms.max(0) as u64), false)),
    }
}
