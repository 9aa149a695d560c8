//! Whether a cluster replica's data is too old for it to win an election:
//! the replica's own rule (`clusterHandleSlaveFailover`, the same from
//! Redis 6.0 to 8.0 and in Valkey 8), read from the replica itself.
//!
//! A replica runs for election only while its *data age* (how long its
//! link to the primary has been down, or, with the link up, since it last
//! heard from the primary), less `cluster-node-timeout`, is at most
//! `repl-ping-replica-period` + `cluster-node-timeout` x
//! `cluster-replica-validity-factor` (a factor of 0: no limit). A replica
//! whose replication is broken (a refused `AUTH`, a firewalled data port, a
//! resync loop) while its bus is fine stays in the cluster, unflagged, and
//! past that age the cluster never promotes it. It stays past it until its
//! link is up again, and the link comes up only through a sync, which
//! brings every write it missed: so while it is too old its shard's writes
//! need not wait for it, and are not at risk for it.
//!
//! The replica computes its age in whole seconds of its own clock, and
//! `INFO` reports the same seconds: what the replica says is what it will
//! decide, no clock of ours involved. A manual `CLUSTER FAILOVER FORCE` or
//! `TAKEOVER` skips the rule; that is an operator's choice, as in Redis.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Config as FredConfig;
use fred::types::{ClusterHash, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::topology::node;

/// The settings a replica judges its own data age by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ElectionSettings {
    pub(crate) node_timeout_ms: u64,
    pub(crate) validity_factor: u64,
    pub(crate) ping_period_s: u64,
}

impl ElectionSettings {
    /// Whether a replica of data age `age_ms` may still run for election.
    pub(crate) fn may_run(&self, age_ms: u64) -> bool {
        if self.validity_factor == 0 {
            return true;
        }
        // The time the primary took to be flagged `fail` is the baseline.
        let age = match age_ms > self.node_timeout_ms {
            true => age_ms - self.node_timeout_ms,
            false => age_ms,
        };
        let limit = self
            .ping_period_s
            .saturating_mul(1000)
            .saturating_add(self.node_timeout_ms.saturating_mul(self.validity_factor));
        age <= limit
    }

    /// How much longer a replica whose link is down (data age `age_ms`)
    /// may run: `None` without a limit.
    pub(crate) fn left_to_run(&self, age_ms: u64) -> Option<Duration> {
        if self.validity_factor == 0 {
            return None;
        }
        let limit = self
            .node_timeout_ms
            .saturating_add(self.ping_period_s.saturating_mul(1000))
            .saturating_add(self.node_timeout_ms.saturating_mul(self.validity_factor));
        Some(Duration::from_millis(limit.saturating_sub(age_ms)))
    }
}

/// Whether `info` (a replica's `INFO replication`) says its link to the
/// primary is down.
fn link_down(info: &str) -> bool {
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix("master_link_status:"))
        .is_some_and(|status| status != "up")
}

/// A replica's data age in milliseconds, from its own `INFO replication`:
/// `None` when it is not a replica (or the text is not `INFO`'s). A link
/// that never came up (`-1`) is as old as can be: the replica has nothing.
pub(crate) fn data_age_ms(info: &str) -> Option<u64> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim_end().strip_prefix(name)?.strip_prefix(':'))
    };
    if field("role")? != "slave" {
        return None;
    }
    let seconds = match field("master_link_status")? {
        "up" => field("master_last_io_seconds_ago")?.parse::<i64>().ok()?,
        _ => match field("master_link_down_since_seconds") {
            Some(s) => s.parse::<i64>().ok()?,
            // Down, and no time given: never connected.
            None => -1,
        },
    };
    Some(match u64::try_from(seconds) {
        Ok(s) => s.saturating_mul(1000),
        Err(_) => u64::MAX,
    })
}

/// What a probe of one replica found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its data is too old to win an election.
    TooOld,
    /// It may run (or its settings cannot be read: a replica that cannot
    /// be judged is never dropped). `too_old_in`: its link is down, and
    /// it will be too old that much later unless the link comes back.
    MayRun { too_old_in: Option<Duration> },
}

/// A connection to one replica, kept while its verdict is needed (clones
/// share it).
#[derive(Clone)]
pub(crate) struct ReplicaProbe {
    client: Client,
    timeout: Duration,
    /// Read on the connection at most every [`SETTINGS_TTL`], and when
    /// read; `None` inside when `CONFIG GET` is refused (a managed
    /// service).
    settings: Arc<Mutex<Option<ReadSettings>>>,
}

/// A replica's settings (`None`: unreadable) and when they were read.
type ReadSettings = (Option<ElectionSettings>, Instant);

/// How long a replica's settings read on its connection are used: an
/// operator may change them, and a connection in use is kept for as long
/// as its primary's writes fall short.
const SETTINGS_TTL: Duration = Duration::from_secs(30);

impl ReplicaProbe {
    /// Connects to the replica at `address` (`host:port`).
    pub(crate) async fn connect(
        base: &FredConfig,
        address: &str,
        timeout: Duration,
        name: &str,
    ) -> Result<ReplicaProbe> {
        let (host, port) = address
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| Error::connection(format!("not a replica address: {address}")))?;
        let client = node::connect(base, host, port, timeout, name).await?;
        Ok(ReplicaProbe {
            client,
            timeout,
            settings: Arc::new(Mutex::new(None)),
        })
    }

    /// Asks the replica how old its data is, against its own settings.
    pub(crate) async fn judge(&self) -> Result<Verdict> {
        let known = *self.settings.lock();
        let settings = match known {
            Some((settings, at)) if at.elapsed() < SETTINGS_TTL => settings,
            _ => {
                let read = self.read_settings().await?;
                *self.settings.lock() = Some((read, Instant::now()));
                read
            }
        };
        let Some(settings) = settings else {
            return Ok(Verdict::MayRun { too_old_in: None });
        };
        let info: String = self
            .client
            .custom(
                CustomCommand::new_static("INFO", ClusterHash::Random, false),
                vec!["replication"],
            )
            .await
            .map_err(|e| Error::from_redis(&e, self.timeout))?;
        Ok(match data_age_ms(&info) {
            Some(age) if !settings.may_run(age) => Verdict::TooOld,
            // Asked again as soon as it may be too old (INFO's whole
            // seconds: a second later), not when a write next falls short.
            Some(age) if link_down(&info) => Verdict::MayRun {
                too_old_in: settings
                    .left_to_run(age)
                    .map(|left| left + Duration::from_secs(1)),
            },
            _ => Verdict::MayRun { too_old_in: None },
        })
    }

    /// `CONFIG GET` of each setting (one per call: Redis 6 takes one
    /// pattern). A refusal is `None`; a transport failure is an error.
    async fn read_settings(&self) -> Result<Option<ElectionSettings>> {
        let mut values = [0u64; 3];
        let names = [
            "cluster-node-timeout",
            "cluster-replica-validity-factor",
            "repl-ping-replica-period",
        ];
        for (name, value) in names.iter().zip(values.iter_mut()) {
            let reply: std::result::Result<Value, _> = self
                .client
                .custom(
                    CustomCommand::new_static("CONFIG", ClusterHash::Random, false),
                    vec!["GET", name],
                )
                .await;
            let parsed = match reply {
                Ok(reply) => config_value(reply),
                Err(e) if is_refusal(&e) => None,
                Err(e) => return Err(Error::from_redis(&e, self.timeout)),
            };
            match parsed {
                Some(v) => *value = v,
                None => {
                    tracing::debug!(
                        setting = name,
                        "a replica's election setting is unreadable; it is never judged too old"
                    );
                    return Ok(None);
                }
            }
        }
        Ok(Some(ElectionSettings {
            node_timeout_ms: values[0],
            validity_factor: values[1],
            ping_period_s: values[2],
        }))
    }

    /// Closes the connection.
    pub(crate) async fn close(self) {
        let _ = tokio::time::timeout(self.timeout, self.client.quit()).await;
    }
}

/// An error the server replied with (an ACL or a renamed command), as
/// opposed to a connection that failed.
fn is_refusal(e: &fred::error::Error) -> bool {
    !matches!(
        e.kind(),
        fred::error::ErrorKind::IO
            | fred::error::ErrorKind::Timeout
            | fred::error::ErrorKind::Canceled
            | fred::error::ErrorKind::Backpressure
    )
}

/// The value of a one-setting `CONFIG GET` reply (`[name, value]`, or a
/// RESP3 map).
fn config_value(reply: Value) -> Option<u64> {
    let value = match reply {
        Value::Array(items) => items.into_iter().nth(1)?,
        Value::Map(map) => map.inner().into_iter().next()?.1,
        _ => return None,
    };
    value.as_string()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(
        node_timeout_ms: u64,
        validity_factor: u64,
        ping_period_s: u64,
    ) -> ElectionSettings {
        ElectionSettings {
            node_timeout_ms,
            validity_factor,
            ping_period_s,
        }
    }

    #[test]
    fn the_limit_is_the_ping_period_and_the_node_timeout_times_the_factor() {
        // Defaults: 15 s node timeout, factor 10, 10 s ping period: a link
        // may be down 15 + 10 + 150 = 175 s.
        let defaults = settings(15_000, 10, 10);
        assert!(defaults.may_run(175_000));
        assert!(!defaults.may_run(176_000));
        // Within the node timeout nothing is taken off.
        let tight = settings(1_000, 1, 1);
        assert!(tight.may_run(3_000));
        assert!(!tight.may_run(4_000));
        assert!(settings(1_000, 1, 1).may_run(500));
        // A factor of 0: no limit, even for a replica that never synced.
        assert!(settings(15_000, 0, 10).may_run(u64::MAX));
        assert!(!defaults.may_run(u64::MAX));
        // Asked again when the limit is reached.
        assert_eq!(tight.left_to_run(1_000), Some(Duration::from_secs(2)));
        assert_eq!(tight.left_to_run(9_000), Some(Duration::ZERO));
        assert_eq!(settings(15_000, 0, 10).left_to_run(0), None);
        assert!(link_down("role:slave\r\nmaster_link_status:down\r\n"));
        assert!(!link_down("role:slave\r\nmaster_link_status:up\r\n"));
    }

    #[test]
    fn the_age_is_read_as_the_replica_reads_it() {
        let down = "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.1\r\n\
                    master_link_status:down\r\nmaster_last_io_seconds_ago:-1\r\n\
                    master_link_down_since_seconds:42\r\nslave_priority:100\r\n";
        assert_eq!(data_age_ms(down), Some(42_000));
        let up = "role:slave\nmaster_link_status:up\nmaster_last_io_seconds_ago:3\n";
        assert_eq!(data_age_ms(up), Some(3_000));
        let never = "role:slave\nmaster_link_status:down\nmaster_link_down_since_seconds:-1\n";
        assert_eq!(data_age_ms(never), Some(u64::MAX));
        let no_time = "role:slave\nmaster_link_status:down\n";
        assert_eq!(data_age_ms(no_time), Some(u64::MAX));
        assert_eq!(data_age_ms("role:master\nconnected_slaves:1\n"), None);
        for garbage in [
            "",
            "role:slave",
            "role:slave\nmaster_link_status:up\nmaster_last_io_seconds_ago:x",
        ] {
            assert_eq!(data_age_ms(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn a_config_reply_in_either_protocol_is_read() {
        let resp2 = Value::Array(vec!["cluster-node-timeout".into(), "15000".into()]);
        assert_eq!(config_value(resp2), Some(15_000));
        assert_eq!(config_value(Value::Array(vec![])), None);
        assert_eq!(config_value(Value::Null), None);
    }
}
