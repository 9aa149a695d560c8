//! The audit's own connections: one short-lived fred client per node or
//! sentinel, built from the client's settings (credentials, TLS), one
//! attempt per command, every call bounded by the command timeout. Kept in
//! this one file so it can be swapped for a shared topology module.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, PubsubInterface};
use fred::types::config::{Config as FredConfig, ServerConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};

use crate::error::Error;

/// Why a command gave no answer to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Trouble {
    /// The server answered with an error (`NOPERM`, `ERR unknown command`).
    Refused(String),
    /// No answer: connection refused or lost, or the timeout.
    Unreachable(String),
}

impl Trouble {
    fn of(e: &fred::error::Error, timeout: Duration) -> Trouble {
        match Error::from_redis(e, timeout) {
            Error::Redis { message, .. } => Trouble::Refused(message.trim().to_string()),
            other => Trouble::Unreachable(other.to_string()),
        }
    }

    /// The server does not know the command (renamed or disabled).
    pub(crate) fn is_unknown_command(&self) -> bool {
        matches!(self, Trouble::Refused(m) if m.contains("unknown command") || m.contains("unknown subcommand"))
    }

    /// The ACL user may not run it.
    pub(crate) fn is_no_permission(&self) -> bool {
        matches!(self, Trouble::Refused(m) if m.starts_with("NOPERM") || m.contains("no permissions"))
    }
}

impl std::fmt::Display for Trouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trouble::Refused(m) => write!(f, "refused: {m}"),
            Trouble::Unreachable(m) => write!(f, "no answer: {m}"),
        }
    }
}

pub(crate) type Reply = std::result::Result<Value, Trouble>;

/// The limits of every connection and call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) connect: Duration,
    pub(crate) call: Duration,
}

/// One connection to one node or sentinel.
pub(crate) struct Link {
    client: Client,
    limits: Limits,
}

impl Link {
    /// Connects to `host:port` with `base`'s credentials and TLS. A
    /// sentinel gets no database.
    pub(crate) async fn open(
        base: &FredConfig,
        host: &str,
        port: u16,
        sentinel: bool,
        limits: Limits,
    ) -> std::result::Result<Link, Trouble> {
        let mut config = base.clone();
        config.server = ServerConfig::new_centralized(host, port);
        config.fail_fast = true;
        if sentinel {
            config.database = None;
        }
        let client = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = limits.connect;
                c.internal_command_timeout = limits.call;
                c.max_command_attempts = 1;
            })
            .with_performance_config(|p| p.default_command_timeout = limits.call)
            .build()
            .map_err(|e| Trouble::Unreachable(e.details().to_string()))?;
        let bound = limits.connect + limits.call;
        let started = tokio::time::timeout(bound, client.init()).await;
        let outcome = match started {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Trouble::of(&e, limits.call)),
            Err(_) => Err(Trouble::Unreachable(format!(
                "no connection within {bound:?}"
            ))),
        };
        let link = Link { client, limits };
        match outcome {
            Ok(()) => Ok(link),
            Err(trouble) => {
                link.close().await;
                Err(trouble)
            }
        }
    }

    /// Sends one command, once, and waits at most the call limit.
    pub(crate) async fn call(&self, command: &'static str, args: Vec<Value>) -> Reply {
        let cmd = CustomCommand::new_static(command, ClusterHash::Random, false);
        let call = crate::engine::boxed_reply(|| self.client.custom::<Value, Value>(cmd, args));
        match tokio::time::timeout(self.limits.call, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(Trouble::of(&e, self.limits.call)),
            Err(_) => Err(Trouble::Unreachable(format!(
                "no reply within {:?}",
                self.limits.call
            ))),
        }
    }

    /// `command` with text arguments.
    pub(crate) fn ask(
        &self,
        command: &'static str,
        args: &[&str],
    ) -> impl std::future::Future<Output = Reply> + '_ {
        let args = args.iter().map(|a| Value::from(*a)).collect();
        self.call(command, args)
    }

    /// Sends `SUBSCRIBE`, `UNSUBSCRIBE`, `SSUBSCRIBE` or `SUNSUBSCRIBE` of
    /// `channel` and a `PING` behind it: these commands get no reply of
    /// their own to wait for, so a refusal comes back in the PING's place.
    /// Leaves the connection subscribed: use one of its own, then close it.
    pub(crate) async fn subscription(&self, command: &str, channel: &str) -> Reply {
        let sent = async {
            match command {
                "SUBSCRIBE" => self.client.subscribe(channel).await,
                "UNSUBSCRIBE" => self.client.unsubscribe(channel).await,
                "SSUBSCRIBE" => self.client.ssubscribe(channel).await,
                _ => self.client.sunsubscribe(channel).await,
            }?;
            self.client.ping::<Value>(None).await
        };
        match tokio::time::timeout(self.limits.call, crate::engine::boxed_reply(|| sent)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(Trouble::of(&e, self.limits.call)),
            Err(_) => Err(Trouble::Unreachable(format!(
                "no reply within {:?}",
                self.limits.call
            ))),
        }
    }

    /// Closes the connection, without waiting long for the QUIT.
    pub(crate) async fn close(&self) {
        let _ = tokio::time::timeout(self.limits.call, self.client.quit()).await;
    }
}

/// A reply as text.
pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => std::str::from_utf8(b).ok().map(str::to_string),
        Value::Integer(i) => Some(i.to_string()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    }
}

/// An integer reply, or one held in a string.
pub(crate) fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Integer(i) => Some(*i),
        other => text(other)?.trim().parse().ok(),
    }
}

/// A flat `[name, value, ...]` reply (or RESP3's map) as pairs.
pub(crate) fn pairs(value: &Value) -> Vec<(String, String)> {
    match value {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| Some((text(kv.first()?)?, text(kv.get(1)?)?)))
            .collect(),
        Value::Map(map) => map
            .clone()
            .inner()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str()?.to_string(), text(v)?)))
            .collect(),
        _ => vec![],
    }
}

/// `INFO` text as `field -> value`.
pub(crate) fn info_fields(info: &str) -> std::collections::HashMap<String, String> {
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}
