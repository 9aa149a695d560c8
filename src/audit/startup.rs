//! The cheap part of the audit, run once in the background at connect:
//! the eviction policy of each primary, `WAIT` where lock writes need it,
//! and whether unlock messages may be published. One WARN per finding that
//! can break exclusion; never an error, never a wait for the caller.

use std::collections::HashMap;
use std::sync::Arc;

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::config::ServerConfig;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::report::{Finding, Severity};
use super::rules::memory;
use super::rules::permissions::PROBE_CHANNEL;
use crate::engine::{boxed_reply, Engine};

/// Starts the check; returns at once.
pub(crate) fn spawn(engine: &Arc<Engine>) {
    let redis = engine.redis.clone();
    let timeout = engine.config.timeout;
    let replicated = !matches!(
        engine.config.to_fred_config().map(|c| c.server),
        Ok(ServerConfig::Centralized { .. })
    );
    let wait_missing = replicated && !engine.replica_sync.is_enabled();
    let publish = engine.publish_command;
    let address = crate::naming::redact_url(&engine.config.address);
    // Every step is bounded by the command timeout; the whole by a few.
    let bound = timeout * 4;
    tokio::spawn(async move {
        let check = findings(&redis, timeout, wait_missing, publish);
        match tokio::time::timeout(bound, check).await {
            Ok(findings) => {
                let failing = findings.iter().filter(|f| f.severity == Severity::Fail);
                tracing::debug!(
                    target: "redisson_lock",
                    checked = findings.len(),
                    warned = failing.clone().count(),
                    "connect-time audit done"
                );
                for f in failing {
                    tracing::warn!(
                        target: "redisson_lock",
                        rule = f.rule,
                        node = %f.target,
                        evidence = %f.evidence,
                        why = %f.why,
                        fix = %f.fix,
                        address = %address,
                        "this deployment can break lock exclusion (`redisson-lock audit` checks more)"
                    );
                }
            }
            Err(_) => {
                tracing::debug!(target: "redisson_lock", "the connect-time audit did not finish within {bound:?}")
            }
        }
    });
}

async fn findings(
    redis: &Client,
    timeout: std::time::Duration,
    wait_missing: bool,
    publish: &'static str,
) -> Vec<Finding> {
    let mut out = vec![];
    let nodes: Vec<Option<fred::types::config::Server>> = if redis.is_clustered() {
        redis
            .cached_cluster_state()
            .map(|s| s.unique_primary_nodes().into_iter().map(Some).collect())
            .unwrap_or_default()
    } else {
        vec![None]
    };
    for node in nodes {
        let target = node.as_ref().map_or_else(
            || "primary".to_string(),
            |s| format!("{}:{}", s.host, s.port),
        );
        let cmd = CustomCommand::new_static("INFO", ClusterHash::Random, false);
        // One section: Redis 6.0 takes no more.
        let args = vec![Value::from("memory")];
        let reply = match &node {
            Some(server) => {
                let routed = redis.with_cluster_node(server.clone());
                let call = boxed_reply(|| routed.custom::<Value, Value>(cmd, args));
                tokio::time::timeout(timeout, call).await
            }
            None => {
                let call = boxed_reply(|| redis.custom::<Value, Value>(cmd, args));
                tokio::time::timeout(timeout, call).await
            }
        };
        if let Ok(Ok(reply)) = reply {
            let text = super::link::text(&reply).unwrap_or_default();
            let info: HashMap<String, String> = super::link::info_fields(&text);
            out.push(memory::eviction(&target, &info));
        }
    }
    if wait_missing {
        out.push(
            Finding::new("wait-command", Severity::Fail, "primary")
                .evidence("the server refuses WAIT (checkLockSyncedSlaves is off)")
                .why("no lock write is confirmed by a replica: a failover can lose any lock")
                .fix("remove rename-command WAIT from the servers' config (managed services: ask for WAIT)"),
        );
    }
    // An unlock publishes inside its script: refused, every unlock fails.
    let slot = crate::naming::slot(PROBE_CHANNEL);
    let cmd = CustomCommand::new_static(publish, ClusterHash::Custom(slot), false);
    let call =
        boxed_reply(|| redis.custom::<Value, Value>(cmd, vec![PROBE_CHANNEL.into(), "0".into()]));
    if let Ok(Err(e)) = tokio::time::timeout(timeout, call).await {
        let details = e.details();
        if details.starts_with("NOPERM") || details.contains("unknown command") {
            out.push(
                Finding::new("permissions", Severity::Fail, "primary")
                    .evidence(format!("{publish} refused: {details}"))
                    .why("every unlock publishes inside its script: refused, unlocks fail and waiters wait out the lease")
                    .fix(format!("ACL SETUSER <user> +{} &redisson_lock__channel:* (docs/acl.md)", publish.to_lowercase())),
            );
        }
    }
    out
}
