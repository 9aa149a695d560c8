//! Commands of your own on the client's connection
//! ([`crate::RedissonClient::command`]), and [`Reply`], what Redis answers:
//! the crate's own types, so that the Redis library underneath is not part
//! of this crate's API.

use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::naming;

/// What Redis answered to a command of your own.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reply {
    /// `nil` (or RESP3 null).
    Nil,
    /// An integer.
    Integer(i64),
    /// A RESP3 double.
    Double(f64),
    /// A RESP3 boolean.
    Boolean(bool),
    /// A simple or bulk string that is valid UTF-8.
    Text(String),
    /// A bulk string that is not UTF-8.
    Bytes(Vec<u8>),
    /// An array (or RESP3 set or push).
    Array(Vec<Reply>),
    /// A RESP3 map, in the order Redis sent it.
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    /// The integer, or the text of an integer.
    ///
    /// ```
    /// use redisson_lock::Reply;
    /// assert_eq!(Reply::Text("42".into()).as_i64(), Some(42));
    /// assert_eq!(Reply::Nil.as_i64(), None);
    /// ```
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Reply::Integer(i) => Some(*i),
            Reply::Text(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// The text, for a string reply.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Text(s) => Some(s),
            _ => None,
        }
    }

    /// Whether it is `nil`.
    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Nil)
    }
}

impl Reply {
    /// A fred reply, as this crate's (a function, not `From`, so that no
    /// fred type shows in the public API).
    pub(crate) fn from_value(value: Value) -> Self {
        match value {
            Value::Null => Reply::Nil,
            Value::Integer(i) => Reply::Integer(i),
            Value::Double(d) => Reply::Double(d),
            Value::Boolean(b) => Reply::Boolean(b),
            Value::String(s) => Reply::Text(s.to_string()),
            Value::Bytes(b) => match std::str::from_utf8(&b) {
                Ok(s) => Reply::Text(s.to_string()),
                Err(_) => Reply::Bytes(b.to_vec()),
            },
            Value::Array(values) => {
                Reply::Array(values.into_iter().map(Reply::from_value).collect())
            }
            Value::Map(map) => Reply::Map(
                map.inner()
                    .into_iter()
                    .map(|(k, v)| (Reply::from_value(Value::from(k)), Reply::from_value(v)))
                    .collect(),
            ),
            Value::Queued => Reply::Text("QUEUED".into()),
        }
    }
}

/// Sends `command` with `args` once on `engine`'s command connection, to
/// the node that serves `key` (any node without one).
pub(crate) async fn send<S: AsRef<[u8]>>(
    engine: &Engine,
    key: Option<&str>,
    command: &str,
    args: impl IntoIterator<Item = S>,
) -> Result<Reply> {
    if command.trim().is_empty() || command.contains(char::is_whitespace) {
        return Err(Error::InvalidArgument(format!(
            "a command is one word, like GET or CLUSTER, got {command:?}; its words go in args"
        )));
    }
    let route = match key {
        Some(key) => ClusterHash::Custom(naming::slot(key)),
        None => ClusterHash::Random,
    };
    let command = CustomCommand::new(command.to_string(), route, false);
    let args: Vec<Value> = args
        .into_iter()
        .map(|a| Value::Bytes(a.as_ref().to_vec().into()))
        .collect();
    // Sent at most once: a command of your own may not be safe to repeat.
    let options = Options {
        max_attempts: Some(1),
        timeout: Some(engine.timeout()),
        ..Options::default()
    };
    let client = engine.redis.with_options(&options);
    let reply: Value = crate::engine::boxed_reply(|| client.custom::<Value, Value>(command, args))
        .await
        .map_err(|e| Error::from_redis(&e, engine.timeout()))?;
    Ok(Reply::from_value(reply))
}
