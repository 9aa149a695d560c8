//! "Is this Redis safe for locks?": an audit of the deployment a client
//! talks to, for the failures that are not client bugs. An eviction policy
//! that drops lock keys, a single server that restarts empty, a Sentinel
//! quorum a minority can meet, a cluster primary without a replica, an ACL
//! user without `PUBLISH`, a renamed `WAIT`, a JVM fleet whose
//! `lockWatchdogTimeout` differs: each is a [`Finding`] with a
//! [`Severity`], the evidence read, why it matters for locks and the fix.
//!
//! * [`crate::RedissonClient::audit`] audits the deployment of a connected client;
//! * [`audit()`] audits from settings alone, without connecting a client
//!   first (so it also looks at a deployment a client refuses to connect
//!   to, such as a cluster without `WAIT`);
//! * at connect, every client runs the cheap part once in the background
//!   (eviction policy, `WAIT`, pub/sub allowed) and logs one WARN per
//!   finding that can break exclusion (`tracing` target `redisson_lock`,
//!   the finding's parts as fields); connect never waits for it.
//!
//! The audit reaches every primary, replica and sentinel with short-lived
//! connections of its own built from the client's [`Config`] (credentials,
//! TLS), every command bounded by [`Config::timeout`], all nodes at once. It
//! only reads, except for harmless probes: `EVALSHA` of an unknown script,
//! `EVAL "return 0"`, the commands the lock scripts run in forms that fail
//! after the ACL let them through (`HINCRBY`, `PEXPIRE` and `SET` with a
//! non-numeric argument, a `DEL` of a latch key no request uses), a
//! `PUBLISH` of `0` on the channel of a lock named `redisson-lock-audit` (or
//! of [`AuditOptions::lock_name`]; and the `WAIT` after it), a subscription
//! to that channel on a connection that is then closed. What a server refuses to
//! show (a managed service's renamed `CONFIG`) is a finding of severity
//! [`Severity::Unknown`], and the audit goes on.
//!
//! ```no_run
//! use redisson_lock::audit::Severity;
//!
//! # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
//! let report = client.audit().await?;
//! for f in report.flagged() {
//!     println!("{} {} {}: {} (fix: {})", f.severity, f.rule, f.target, f.why, f.fix);
//! }
//! assert_eq!(report.has_failures(), report.findings.iter().any(|f| f.severity == Severity::Fail));
//! # Ok(()) }
//! ```
//!
//! The rules, in the order of the report (docs/operations.md explains each):
//! see [`RULES`].

mod gather;
mod link;
mod report;
mod rules;
pub(crate) mod startup;

use std::time::Instant;

use fred::clients::Client;
use fred::types::config::Config as FredConfig;

pub use report::{AuditReport, DeploymentKind, Fact, Finding, Severity, Summary};

use crate::config::Config;
use crate::engine::Engine;
use crate::error::{Error, Result};
use link::{Limits, Trouble};
use report::Finding as F;
use rules::Ctx;

/// Every rule id, in the order findings are reported.
pub const RULES: &[&str] = &[
    "address",
    "eviction-policy",
    "memory-usage",
    "persistence",
    "replicas",
    "replica-quorum",
    "min-replicas",
    "wait-command",
    "replica-priority",
    "replication-lag",
    "clock",
    "sentinels-answering",
    "sentinel-quorum",
    "sentinel-down-after",
    "sentinel-agreement",
    "cluster-replica-validity",
    "cluster-node-timeout",
    "cluster-full-coverage",
    "sharded-pubsub",
    "permissions",
    "java-watchdog",
    "redisson-fields",
    "latency",
];

/// What a rule looks for, one line: the `why` of a finding the audit could
/// not make.
pub(crate) fn purpose(rule: &str) -> &'static str {
    match rule {
        "address" => "a single-server address must lead to a primary that is not a cluster node",
        "eviction-policy" => {
            "an eviction policy other than noeviction drops lock keys under memory pressure"
        }
        "memory-usage" => "at maxmemory Redis evicts keys or refuses lock writes",
        "persistence" => {
            "without persistence a restart empties every lock while holders keep working"
        }
        "replicas" => {
            "a primary without a replica cannot confirm a lock write; a failover loses it"
        }
        "replica-quorum" => {
            "the quorum decides how many replicas must hold a lock write before it counts"
        }
        "min-replicas" => {
            "min-replicas-to-write above the replicas attached refuses every lock write"
        }
        "wait-command" => "without WAIT no lock write can be confirmed by a replica",
        "replica-priority" => {
            "a priority-0 replica is never promoted, yet can confirm a lock write"
        }
        "replication-lag" => "a lagging replica fails lock confirmations",
        "clock" => {
            "a replica whose clock runs ahead of its primary's expires every lock early once promoted"
        }
        "sentinels-answering" => {
            "a failover needs a majority of sentinels, and the client asks each"
        }
        "sentinel-quorum" => {
            "a quorum below the majority lets a minority of sentinels depose the primary"
        }
        "sentinel-down-after" => {
            "a failover slower than the shortest watchdog TTL (2/3 of the lease) loses locks"
        }
        "cluster-node-timeout" => {
            "a failover slower than the shortest watchdog TTL (2/3 of the lease) loses locks"
        }
        "sentinel-agreement" => {
            "sentinels that disagree on the primary hold lock confirmations back"
        }
        "cluster-replica-validity" => {
            "a replica promoted after a long disconnection lacks recent locks"
        }
        "cluster-full-coverage" => "how a cluster missing a slot treats lock writes",
        "sharded-pubsub" => "unlock messages must go where the Redisson fleet listens",
        "permissions" => {
            "a command the crate sends that the ACL refuses makes lock operations fail"
        }
        "java-watchdog" => {
            "a fleet whose lockWatchdogTimeout differs renews shared locks to another lease"
        }
        "redisson-fields" => {
            "holder fields of another shape are invisible to holders(), inspect and doctor"
        }
        "latency" => "a round trip near the renewal interval lets leases run out",
        _ => "",
    }
}

/// What the audit checks beyond what it can find alone.
///
/// ```
/// let options = redisson_lock::audit::AuditOptions::new()
///     .lock_name("app:orders")
///     .acl_user("orders-service");
/// assert_eq!(options.lock_name.as_deref(), Some("app:orders"));
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AuditOptions {
    /// One of the service's lock names: the `permissions` rule checks the
    /// ACL's key patterns against that lock's keys (the lock, its channel,
    /// its unlock latches). Without it, key patterns are checked only as far
    /// as they allow the audit's own lock `redisson-lock-audit`.
    pub lock_name: Option<String>,
    /// The ACL user to check instead of the connecting one, so that an
    /// administrator can check a service's user. Needs `ACL DRYRUN` (Redis 7
    /// or Valkey, and `+acl|dryrun` for the connecting user); without it the
    /// `permissions` findings are unknown.
    pub acl_user: Option<String>,
}

impl AuditOptions {
    /// No lock name, the connecting user.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`AuditOptions::lock_name`].
    pub fn lock_name(mut self, name: impl Into<String>) -> Self {
        self.lock_name = Some(name.into());
        self
    }

    /// Sets [`AuditOptions::acl_user`].
    pub fn acl_user(mut self, user: impl Into<String>) -> Self {
        self.acl_user = Some(user.into());
        self
    }
}

/// Audits the deployment `config` describes, connecting as a client with
/// these settings would (address, ACL user, TLS), but without starting one.
///
/// # Errors
///
/// [`Error::Config`] for invalid settings; [`Error::Connection`],
/// [`Error::Timeout`] or [`Error::Auth`] when not even the first connection
/// can be made (no node, or on Sentinel no sentinel, answers). Anything
/// after that is a finding.
///
/// # Cancel safety
///
/// Dropping the future closes the audit's connections; nothing was written
/// but the probes the [module docs](self) list.
///
/// ```no_run
/// # async fn demo() -> redisson_lock::Result<()> {
/// let config = redisson_lock::Config::from_url("redis://10.0.0.5:6379");
/// let report = redisson_lock::audit::audit(&config).await?;
/// println!("{}", serde_json::to_string_pretty(&report).unwrap());
/// # Ok(()) }
/// ```
pub async fn audit(config: &Config) -> Result<AuditReport> {
    audit_with(config, &AuditOptions::default()).await
}

/// As [`audit()`], with [`AuditOptions`]: a lock name to check the ACL's
/// key patterns against, another ACL user to check.
///
/// # Errors
///
/// As [`audit()`]; [`Error::InvalidArgument`] for an empty lock or user name.
///
/// # Cancel safety
///
/// As [`audit()`].
pub async fn audit_with(config: &Config, options: &AuditOptions) -> Result<AuditReport> {
    config.validate()?;
    options.validate()?;
    let base = config.to_fred_config()?;
    let run: futures::future::BoxFuture<'_, _> = Box::pin(run(config, &base, None, None, options));
    run.await
}

impl AuditOptions {
    fn validate(&self) -> Result<()> {
        for (what, value) in [("lock name", &self.lock_name), ("ACL user", &self.acl_user)] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(Error::InvalidArgument(format!(
                    "the audit's {what} is empty"
                )));
            }
        }
        Ok(())
    }
}

/// The audit of the deployment a connected client talks to, through its
/// discovery connection; its own holds are not counted as the fleet's.
pub(crate) async fn of_engine(engine: &Engine, options: &AuditOptions) -> Result<AuditReport> {
    options.validate()?;
    let config = &engine.config;
    let base = config.to_fred_config()?;
    let run: futures::future::BoxFuture<'_, _> = Box::pin(run(
        config,
        &base,
        Some(&engine.redis),
        Some(&engine.id),
        options,
    ));
    run.await
}

async fn run(
    config: &Config,
    base: &FredConfig,
    discovery: Option<&Client>,
    own_id: Option<&str>,
    options: &AuditOptions,
) -> Result<AuditReport> {
    let started = Instant::now();
    let limits = Limits {
        connect: config.connect_timeout,
        call: config.timeout,
    };
    let seen = gather::gather(base, limits, discovery).await;
    if let Some(e) = unreachable(&seen) {
        seen.close().await;
        return Err(e);
    }
    // The fleet first: where other clients' holds show a shorter lease,
    // the lease-based rules judge by it.
    let (fleet, fleet_lease) = rules::fleet::check(&Ctx {
        config,
        seen: &seen,
        own_id,
        fleet_lease: None,
    })
    .await;
    let ctx = Ctx {
        config,
        seen: &seen,
        own_id,
        fleet_lease,
    };
    let mut findings = vec![];
    if let Some(t) = &seen.discovery {
        findings.push(F::unknown(
            "replicas",
            "deployment",
            format!("the deployment's nodes: {t}"),
        ));
    }
    rules::address::check(&ctx, &mut findings);
    rules::memory::check(&ctx, &mut findings);
    rules::persistence::check(&ctx, &mut findings);
    rules::replication::check(&ctx, &mut findings);
    rules::clock::check(&ctx, &mut findings);
    rules::sentinel::check(&ctx, &mut findings);
    let (waits, cluster, permissions, latency) = futures::join!(
        rules::replication::wait_command(&ctx),
        rules::cluster::check(&ctx),
        rules::permissions::check(&ctx, base, limits, options),
        rules::latency::check(&ctx),
    );
    findings.extend(waits);
    findings.extend(cluster);
    findings.extend(permissions);
    findings.extend(fleet);
    findings.extend(latency);
    seen.close().await;
    let order = |rule: &str| RULES.iter().position(|r| *r == rule).unwrap_or(RULES.len());
    findings.sort_by(|a, b| {
        order(&a.rule)
            .cmp(&order(&b.rule))
            .then_with(|| a.target.cmp(&b.target))
    });
    let mut report = AuditReport {
        schema: AuditReport::SCHEMA,
        address: crate::naming::redact_url(&config.address),
        deployment: seen.kind,
        watchdog_ms: config.lock_watchdog_timeout.as_millis() as u64,
        findings,
        summary: Summary::default(),
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    report.summarize();
    Ok(report)
}

/// The error to return when nothing answered at all.
fn unreachable(seen: &gather::Seen) -> Option<Error> {
    let first_failure = |t: &Trouble| match t {
        Trouble::Unreachable(m)
            if m.contains("WRONGPASS") || m.contains("NOAUTH") || m.contains("authentication") =>
        {
            Error::Auth {
                message: m.clone(),
                source: None,
            }
        }
        Trouble::Unreachable(m) | Trouble::Refused(m) => Error::Connection {
            message: m.clone(),
            source: None,
        },
    };
    let any_sentinel = seen.sentinels.iter().any(|s| s.answer.is_ok());
    let any_node = seen.nodes.iter().any(|n| n.link.is_ok());
    if any_node || any_sentinel {
        return None;
    }
    if let Some(t) = seen.sentinels.iter().find_map(|s| s.answer.as_ref().err()) {
        return Some(first_failure(t));
    }
    if let Some(t) = &seen.discovery {
        return Some(first_failure(t));
    }
    seen.nodes
        .iter()
        .find_map(|n| n.link.as_ref().err())
        .map(first_failure)
}
