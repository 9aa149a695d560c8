//! What an audit returns: findings with a severity, the evidence read, why
//! it matters for locks and the fix; a summary.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How bad a finding is. Ordered from the least to the most serious, so
/// the worst of a report is its `max()`: `Fail` above `Unknown` (what is
/// known to be broken before what could not be looked at), `Unknown` above
/// `Warn` (a check that did not run may hide a failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Severity {
    /// Nothing here can break a lock.
    Ok,
    /// Locks work, but this weakens them or will once something else goes
    /// wrong (a restart, a failover, memory pressure).
    Warn,
    /// The audit could not look (the server refused the command, or did not
    /// answer in time); the finding's evidence says why.
    Unknown,
    /// This deployment can lose or hand out a held lock, or refuse every
    /// lock write, as configured now.
    Fail,
}

impl Severity {
    /// `ok`, `warn`, `fail` or `unknown`, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Warn => "warn",
            Severity::Fail => "fail",
            Severity::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A number or word the audit read, typed: what a health page or a script
/// compares without parsing the evidence line. The unit is in the fact's
/// name (`maxmemory_bytes`, `lag_ms`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum Fact {
    /// A count, a size in bytes or a duration in ms.
    Number(u64),
    /// A setting's word (`allkeys-lru`, `everysec`).
    Text(String),
    /// A yes / no setting.
    Flag(bool),
}

impl From<u64> for Fact {
    fn from(n: u64) -> Self {
        Fact::Number(n)
    }
}

impl From<u32> for Fact {
    fn from(n: u32) -> Self {
        Fact::Number(u64::from(n))
    }
}

impl From<bool> for Fact {
    fn from(b: bool) -> Self {
        Fact::Flag(b)
    }
}

impl From<&str> for Fact {
    fn from(s: &str) -> Self {
        Fact::Text(s.to_string())
    }
}

impl From<String> for Fact {
    fn from(s: String) -> Self {
        Fact::Text(s)
    }
}

/// One thing the audit checked, on one node, sentinel or the deployment as
/// a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Finding {
    /// The rule, a stable kebab-case id (`eviction-policy`, `persistence`,
    /// ...; docs/operations.md lists them).
    pub rule: String,
    /// How bad it is.
    pub severity: Severity,
    /// What was looked at: `host:port` of a node, `sentinel host:port`, or
    /// `deployment`.
    pub target: String,
    /// What was read, one line.
    pub evidence: String,
    /// Why it matters for locks, one line.
    pub why: String,
    /// What to do about it, one line (empty when nothing needs doing).
    pub fix: String,
    /// The values read, typed.
    pub facts: BTreeMap<String, Fact>,
}

impl Finding {
    pub(crate) fn new(rule: &'static str, severity: Severity, target: impl Into<String>) -> Self {
        Finding {
            rule: rule.to_string(),
            severity,
            target: target.into(),
            evidence: String::new(),
            why: String::new(),
            fix: String::new(),
            facts: BTreeMap::new(),
        }
    }

    pub(crate) fn evidence(mut self, text: impl Into<String>) -> Self {
        self.evidence = text.into();
        self
    }

    pub(crate) fn why(mut self, text: impl Into<String>) -> Self {
        self.why = text.into();
        self
    }

    pub(crate) fn fix(mut self, text: impl Into<String>) -> Self {
        self.fix = text.into();
        self
    }

    pub(crate) fn fact(mut self, name: &'static str, value: impl Into<Fact>) -> Self {
        self.facts.insert(name.to_string(), value.into());
        self
    }

    /// A finding the audit could not make: `why` says what it would have
    /// checked, the evidence what stopped it.
    pub(crate) fn unknown(
        rule: &'static str,
        target: impl Into<String>,
        because: impl std::fmt::Display,
    ) -> Self {
        Finding::new(rule, Severity::Unknown, target)
            .evidence(format!("could not look: {because}"))
            .why(super::purpose(rule))
    }
}

/// The kind of deployment audited, from the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum DeploymentKind {
    /// One server (`redis://`): no replica confirms a lock write.
    Single,
    /// A Redis Cluster (`redis-cluster://`).
    Cluster,
    /// Sentinel (`redis-sentinel://`).
    Sentinel,
}

/// How many findings of each severity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// Findings that are fine.
    pub ok: u32,
    /// Findings that weaken locks.
    pub warn: u32,
    /// Findings that break them.
    pub fail: u32,
    /// Findings the audit could not make.
    pub unknown: u32,
}

/// What [`crate::RedissonClient::audit`] and [`crate::audit::audit`] found.
/// Serializes to JSON as the CLI's `audit --json` prints it, and reads back
/// from it (fields a later schema adds are ignored).
///
/// ```
/// # fn demo(json: &str) -> serde_json::Result<()> {
/// use redisson_lock::audit::AuditReport;
/// let report: AuditReport = serde_json::from_str(json)?;
/// assert!(report.schema <= AuditReport::SCHEMA);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditReport {
    /// The shape of this report, [`AuditReport::SCHEMA`] when written: it
    /// changes when a field changes meaning or goes away (a new field or
    /// rule does not change it).
    pub schema: u32,
    /// The address audited, any password hidden.
    pub address: String,
    /// Single server, cluster or Sentinel.
    pub deployment: DeploymentKind,
    /// The lease of watchdog locks the findings were judged against
    /// (`Config::lock_watchdog_timeout`), in ms.
    pub watchdog_ms: u64,
    /// Every finding, grouped by rule in the order of the docs' table.
    pub findings: Vec<Finding>,
    /// Counts per severity.
    pub summary: Summary,
    /// How long the audit took, in ms.
    pub elapsed_ms: u64,
}

impl AuditReport {
    /// The schema this version writes.
    pub const SCHEMA: u32 = 1;

    pub(crate) fn summarize(&mut self) {
        let mut summary = Summary::default();
        for f in &self.findings {
            match f.severity {
                Severity::Ok => summary.ok += 1,
                Severity::Warn => summary.warn += 1,
                Severity::Fail => summary.fail += 1,
                Severity::Unknown => summary.unknown += 1,
            }
        }
        self.summary = summary;
    }

    /// Whether any finding is [`Severity::Fail`]: the CLI then exits 1.
    pub fn has_failures(&self) -> bool {
        self.summary.fail > 0
    }

    /// The findings of one rule.
    pub fn rule<'a>(&'a self, rule: &'a str) -> impl Iterator<Item = &'a Finding> + 'a {
        self.findings.iter().filter(move |f| f.rule == rule)
    }

    /// The findings that are not [`Severity::Ok`].
    pub fn flagged(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.severity != Severity::Ok)
    }
}
