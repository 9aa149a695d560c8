//! What the engine tells the outside: tracing spans and events, and with the
//! `metrics` feature, figures through the `metrics` facade. One place, so the
//! names stay consistent and the engine's code stays about locks.
//!
//! Spans (target `redisson_lock`, level DEBUG):
//!
//! | span | fields |
//! |---|---|
//! | `acquire` | `lock`, `owner`, `kind`; recorded at the end: `attempts`, `waited_ms`, `outcome` (`acquired`, `timed_out`, `error`); when acquired, `safety` (`2/2`: replicas that confirmed / replicas known; `not_checked`) |
//! | `release` | `lock`, `owner`, `kind`; `outcome` (`released`, `still_held`, `lost`, `not_held`, `error`) |
//! | `renewal` | one watchdog cycle; `locks`, `scripts`, `renewed`, `lost`, `failures` |
//!
//! A lost lock is a WARN event `lock lost` with `lock`, `owner`, `kind`,
//! `reason` (`gone`: a renewal found the field missing; `lease_expired`: the
//! lease ran out before a renewal was confirmed, noticed at release). A lock
//! put at risk is a WARN event `lock at risk` with the same fields and
//! `reason` (`renewal_failed`, `renewal_unconfirmed`: the replicas did not
//! confirm it; `renewal_delayed`: another operation of the hold kept the
//! renewal from going out before the deadline nears; `replica_left_out`: a
//! replica that could be promoted again once back lacks the acquisition or
//! renewal, until it confirms a later one).
//!
//! Metrics (feature `metrics`), labelled by `kind` (`lock`, `fair_lock`, ...):
//!
//! | name | type | what |
//! |---|---|---|
//! | `redisson_lock_acquire_seconds` | histogram | a whole acquire call, also labelled `outcome` |
//! | `redisson_lock_wait_seconds` | histogram | of an acquire that was refused at first, the time from that refusal to its end |
//! | `redisson_lock_held` | gauge | locks this client holds (owner and lock pairs) |
//! | `redisson_lock_renewals_total` | counter | renewals Redis confirmed |
//! | `redisson_lock_renewal_failures_total` | counter | renewal scripts that failed or were not confirmed by replicas |
//! | `redisson_lock_acquired_total` | counter | acquisitions, also labelled `safety`: `all_replicas`, `some_replicas`, `no_replica_acked` (check off), `no_replicas` (the primary had none), `not_checked` |
//! | `redisson_lock_lost_total` | counter | holds found lost, also labelled `reason` |
//! | `redisson_lock_at_risk_total` | counter | holds put at risk, also labelled `reason` |
//! | `redisson_lock_wakeups_total` | counter | waiters woken by a message (rather than by a TTL, re-check or deadline) |

use std::time::Duration;

use tracing::field::Empty;
use tracing::Span;

use crate::engine::safety::SafetyLevel;
use crate::owner::OwnerId;

/// The hold an event is about, as logs name it.
#[derive(Clone, Copy)]
pub(crate) struct Subject<'a> {
    /// The lock kind's name (`lock`, `fair_lock`, ...).
    pub(crate) kind: &'static str,
    pub(crate) lock: &'a str,
    pub(crate) owner: OwnerId,
}

/// An acquire being traced: its span, and what is recorded when it ends.
pub(crate) struct AcquireTrace {
    span: Span,
    kind: &'static str,
    started: tokio::time::Instant,
}

impl AcquireTrace {
    pub(crate) fn start(subject: Subject<'_>) -> Self {
        let span = tracing::debug_span!(
            target: "redisson_lock",
            "acquire",
            lock = subject.lock,
            owner = subject.owner.get(),
            kind = subject.kind,
            attempts = Empty,
            waited_ms = Empty,
            outcome = Empty,
            safety = Empty,
        );
        AcquireTrace {
            span,
            kind: subject.kind,
            started: tokio::time::Instant::now(),
        }
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// The call ended as `end` says, after `attempts`, the first of which
    /// to find the lock taken at `first_refusal`.
    pub(crate) fn finish(
        self,
        end: AcquireEnd,
        attempts: u32,
        first_refusal: Option<tokio::time::Instant>,
    ) {
        let outcome = match end {
            AcquireEnd::Acquired(level) => {
                self.acquired_at(level);
                "acquired"
            }
            AcquireEnd::TimedOut => "timed_out",
            AcquireEnd::Failed => "error",
        };
        let waited = first_refusal.map(|at| at.elapsed());
        self.span.record("attempts", attempts);
        self.span.record("outcome", outcome);
        self.span
            .record("waited_ms", waited.unwrap_or_default().as_millis() as u64);
        metrics::acquired(self.kind, outcome, self.started.elapsed(), waited);
    }

    /// The acquisition was confirmed to `level`.
    fn acquired_at(&self, level: SafetyLevel) {
        let (field, label) = match level {
            SafetyLevel::Replicas { acked, promotable } => (
                format!("{acked}/{promotable}"),
                match (acked, promotable) {
                    (_, 0) => "no_replicas",
                    (0, _) => "no_replica_acked",
                    (a, k) if a >= k => "all_replicas",
                    _ => "some_replicas",
                },
            ),
            SafetyLevel::NotChecked => ("not_checked".to_string(), "not_checked"),
        };
        self.span.record("safety", field.as_str());
        metrics::acquired_at(self.kind, label);
    }
}

/// How an acquire call ended.
pub(crate) enum AcquireEnd {
    /// With the lock, confirmed to this level.
    Acquired(SafetyLevel),
    /// Without it, within its wait.
    TimedOut,
    /// With an error.
    Failed,
}

/// The span of one release; [`released`] records its outcome.
pub(crate) fn release_span(subject: Subject<'_>) -> Span {
    tracing::debug_span!(
        target: "redisson_lock",
        "release",
        lock = subject.lock,
        owner = subject.owner.get(),
        kind = subject.kind,
        outcome = Empty,
    )
}

/// Records how a release ended.
pub(crate) fn released(span: &Span, outcome: &'static str) {
    span.record("outcome", outcome);
}

/// The span of one watchdog cycle; [`renewed`] records its figures.
pub(crate) fn renewal_span() -> Span {
    tracing::debug_span!(
        target: "redisson_lock",
        "renewal",
        locks = Empty,
        scripts = Empty,
        renewed = Empty,
        lost = Empty,
        failures = Empty,
    )
}

/// Records a watchdog cycle's figures.
pub(crate) fn renewed(
    span: &Span,
    locks: u64,
    scripts: u64,
    renewed: u64,
    lost: u64,
    failures: u64,
) {
    span.record("locks", locks);
    span.record("scripts", scripts);
    span.record("renewed", renewed);
    span.record("lost", lost);
    span.record("failures", failures);
    metrics::renewed(renewed, failures);
}

/// A hold was found lost.
pub(crate) fn lost(subject: Subject<'_>, reason: &'static str) {
    warn_of(subject, reason, "lock lost");
    metrics::lost(subject.kind, reason);
}

/// A hold was put at risk (it was not before).
pub(crate) fn at_risk(subject: Subject<'_>, reason: &'static str) {
    warn_of(subject, reason, "lock at risk");
    metrics::at_risk(subject.kind, reason);
}

/// The WARN event of a hold's signal.
fn warn_of(subject: Subject<'_>, reason: &'static str, event: &'static str) {
    tracing::warn!(
        target: "redisson_lock",
        lock = subject.lock,
        owner = subject.owner.get(),
        kind = subject.kind,
        reason,
        "{event}"
    );
}

/// A hold count went from 0 to 1 (`true`) or from 1 to 0 (`false`).
pub(crate) fn held(kind: &'static str, now_held: bool) {
    metrics::held(kind, now_held);
}

/// A waiter was woken by a message.
pub(crate) fn woken() {
    metrics::woken();
}

#[cfg(feature = "metrics")]
mod metrics {
    use super::*;
    use ::metrics::{counter, gauge, histogram};

    pub(super) fn acquired(
        kind: &'static str,
        outcome: &'static str,
        took: Duration,
        waited: Option<Duration>,
    ) {
        histogram!("redisson_lock_acquire_seconds", "kind" => kind, "outcome" => outcome)
            .record(took.as_secs_f64());
        if let Some(waited) = waited {
            histogram!("redisson_lock_wait_seconds", "kind" => kind).record(waited.as_secs_f64());
        }
    }

    pub(super) fn renewed(renewed: u64, failures: u64) {
        counter!("redisson_lock_renewals_total").increment(renewed);
        counter!("redisson_lock_renewal_failures_total").increment(failures);
    }

    pub(super) fn lost(kind: &'static str, reason: &'static str) {
        counter!("redisson_lock_lost_total", "kind" => kind, "reason" => reason).increment(1);
    }

    pub(super) fn acquired_at(kind: &'static str, safety: &'static str) {
        counter!("redisson_lock_acquired_total", "kind" => kind, "safety" => safety).increment(1);
    }

    pub(super) fn at_risk(kind: &'static str, reason: &'static str) {
        counter!("redisson_lock_at_risk_total", "kind" => kind, "reason" => reason).increment(1);
    }

    pub(super) fn held(kind: &'static str, now_held: bool) {
        let gauge = gauge!("redisson_lock_held", "kind" => kind);
        if now_held {
            gauge.increment(1.0);
        } else {
            gauge.decrement(1.0);
        }
    }

    pub(super) fn woken() {
        counter!("redisson_lock_wakeups_total").increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod metrics {
    use super::*;

    pub(super) fn acquired(_: &'static str, _: &'static str, _: Duration, _: Option<Duration>) {}
    pub(super) fn renewed(_: u64, _: u64) {}
    pub(super) fn lost(_: &'static str, _: &'static str) {}
    pub(super) fn at_risk(_: &'static str, _: &'static str) {}
    pub(super) fn acquired_at(_: &'static str, _: &'static str) {}
    pub(super) fn held(_: &'static str, _: bool) {}
    pub(super) fn woken() {}
}
