//! `audit`: is this Redis safe for locks? The deployment's findings, as a
//! table or JSON; exit 0 when nothing fails, 1 when something does (or,
//! with `--fail-on`, is less than ok), 2 when it could not connect.

use std::io::IsTerminal;

use redisson_lock::audit::{AuditReport, DeploymentKind, Severity};

use crate::{settings, Cli};

#[derive(clap::Args)]
pub struct AuditArgs {
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Exit 1 when a finding is this serious or more: `fail` (the
    /// default), `unknown` (also when a rule could not be checked: for a CI
    /// gate that must not pass having checked nothing), or `warn` (anything
    /// but ok).
    #[arg(long, value_enum, default_value = "fail", value_name = "SEVERITY")]
    fail_on: FailOn,
    /// One of the service's lock names: the ACL's key patterns are checked
    /// against its keys (the lock, its channel, its unlock latches).
    #[arg(long, value_name = "NAME")]
    lock: Option<String>,
    /// Check this ACL user's permissions instead of the connecting user's
    /// (with ACL DRYRUN: Redis 7 or Valkey, and +acl|dryrun for the
    /// connecting user).
    #[arg(long, value_name = "USER")]
    acl_user: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FailOn {
    Warn,
    Unknown,
    Fail,
}

impl FailOn {
    fn severity(self) -> Severity {
        match self {
            FailOn::Warn => Severity::Warn,
            FailOn::Unknown => Severity::Unknown,
            FailOn::Fail => Severity::Fail,
        }
    }
}

/// Exit status when the deployment could not be reached at all.
const EXIT_UNREACHABLE: u8 = 2;

pub async fn audit(cli: &Cli, args: &AuditArgs) -> Result<u8, String> {
    let config = settings(cli)?;
    let mut options = redisson_lock::audit::AuditOptions::new();
    if let Some(lock) = &args.lock {
        options = options.lock_name(lock);
    }
    if let Some(user) = &args.acl_user {
        options = options.acl_user(user);
    }
    let report = match redisson_lock::audit::audit_with(&config, &options).await {
        Err(e @ redisson_lock::Error::InvalidArgument(_)) => return Err(e.to_string()),
        Ok(report) => report,
        Err(e) => {
            eprintln!(
                "redisson-lock: cannot audit {}: {e}; check the address (--url / REDIS_URL, \
                 --redisson-config), the credentials and TLS settings",
                redisson_lock::naming::redact_url(&config.address)
            );
            return Ok(EXIT_UNREACHABLE);
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        let width = std::io::stdout()
            .is_terminal()
            .then(|| {
                crossterm::terminal::size()
                    .ok()
                    .map(|(w, _)| usize::from(w))
            })
            .flatten();
        for line in table(&report, width) {
            println!("{}", fit(&line, width));
        }
        if report.summary.unknown > 0
            && args.fail_on != FailOn::Unknown
            && args.fail_on != FailOn::Warn
        {
            println!(
                "{} rule(s) not checked: this run does not vouch for them (--fail-on unknown \
                 makes that exit 1)",
                report.summary.unknown
            );
        }
    }
    let threshold = args.fail_on.severity();
    Ok(u8::from(
        report.findings.iter().any(|f| f.severity >= threshold),
    ))
}

fn label(severity: Severity) -> &'static str {
    match severity {
        Severity::Ok => "ok",
        Severity::Warn => "WARN",
        Severity::Fail => "FAIL",
        _ => "UNKNOWN",
    }
}

/// The report as lines: a header, one row per finding (why and fix under
/// any that is not ok), a summary.
/// `width`: the terminal's, to wrap the `why:` and `fix:` lines to (the
/// rows themselves are cut to it by the caller).
pub fn table(report: &AuditReport, width: Option<usize>) -> Vec<String> {
    let kind = match report.deployment {
        DeploymentKind::Single => "single server",
        DeploymentKind::Cluster => "cluster",
        DeploymentKind::Sentinel => "Sentinel",
        _ => "deployment",
    };
    let mut lines = vec![format!(
        "redisson-lock audit | {} | {kind} | lockWatchdogTimeout {} ms",
        report.address, report.watchdog_ms
    )];
    let rule_w = report
        .findings
        .iter()
        .map(|f| f.rule.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let target_w = report
        .findings
        .iter()
        .map(|f| f.target.len())
        .max()
        .unwrap_or(6)
        .max(6);
    lines.push(format!(
        "{:<7}  {:<rule_w$}  {:<target_w$}  EVIDENCE",
        "STATUS", "RULE", "TARGET"
    ));
    let indent = " ".repeat(9 + rule_w + 2);
    for f in &report.findings {
        lines.push(format!(
            "{:<7}  {:<rule_w$}  {:<target_w$}  {}",
            label(f.severity),
            f.rule,
            f.target,
            f.evidence
        ));
        if f.severity != Severity::Ok {
            for (label, text) in [("why", &f.why), ("fix", &f.fix)] {
                if text.is_empty() {
                    continue;
                }
                let first = format!("{indent}{label}: ");
                match width {
                    // Wrapped under its label, never cut: the fix is a command.
                    Some(w) => {
                        let rest = " ".repeat(crate::fit::width(&first));
                        lines.extend(crate::fit::wrap(text, &first, &rest, w));
                    }
                    None => lines.push(format!("{first}{text}")),
                }
            }
        }
    }
    let s = &report.summary;
    lines.push(format!(
        "{} finding(s): {} ok, {} warn, {} fail, {} unknown ({} ms)",
        report.findings.len(),
        s.ok,
        s.warn,
        s.fail,
        s.unknown,
        report.elapsed_ms
    ));
    lines
}

/// `line` cut to `width` characters, the cut marked with `…`.
pub fn fit(line: &str, width: Option<usize>) -> String {
    match width {
        Some(w) if w > 1 && line.chars().count() > w => {
            let mut cut: String = line.chars().take(w - 1).collect();
            cut.push('…');
            cut
        }
        _ => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn lines_are_cut_to_the_terminal_with_a_mark() {
        assert_eq!(fit("ok eviction-policy", Some(10)), "ok evicti…");
        assert_eq!(fit("ok eviction-policy", Some(18)), "ok eviction-policy");
        assert_eq!(fit("ok eviction-policy", None), "ok eviction-policy");
        assert_eq!(fit("FAIL über", Some(7)), "FAIL ü…");
    }

    /// On a terminal the why and fix lines are wrapped under their label,
    /// every word kept; the finding's row is what gets cut.
    #[test]
    fn why_and_fix_wrap_to_the_terminal() {
        let report: redisson_lock::audit::AuditReport = serde_json::from_value(serde_json::json!({
            "schema": 1, "address": "redis://127.0.0.1:6379", "deployment": "single",
            "watchdog_ms": 30000, "elapsed_ms": 5,
            "summary": {"ok": 0, "warn": 0, "fail": 1, "unknown": 0},
            "findings": [{
                "rule": "persistence", "severity": "fail", "target": "127.0.0.1:6379",
                "evidence": "appendonly no, no RDB save points",
                "why": "a restart comes back empty: every lock is gone; holders hear of it at their next renewal",
                "fix": "CONFIG SET appendonly yes (appendfsync everysec), and in redis.conf",
                "facts": {}
            }]
        }))
        .unwrap();
        let lines = super::table(&report, Some(50));
        let why: Vec<&String> = lines
            .iter()
            .skip_while(|l| !l.trim_start().starts_with("why: "))
            .take_while(|l| !l.trim_start().starts_with("fix: "))
            .collect();
        assert!(why.len() > 1, "{lines:#?}");
        assert!(
            lines
                .iter()
                .filter(|l| l.starts_with(' '))
                .all(|l| crate::fit::width(l) <= 50),
            "{lines:#?}"
        );
        let words = |text: &str| {
            text.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let joined: Vec<String> = why.iter().flat_map(|l| words(l)).skip(1).collect();
        assert_eq!(joined, words(&report.findings[0].why));
        // Piped (no terminal): one line each, as before.
        let piped = super::table(&report, None);
        assert_eq!(piped.iter().filter(|l| l.contains("why: ")).count(), 1);
    }
}
