//! What one lock / wait / unlock / loss cycle tells a tracing subscriber and a
//! `metrics` recorder: span names, their fields, and the figures.
#![cfg(feature = "metrics")]

use redisson_lock_testkit as common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fred::prelude::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};
use parking_lot::Mutex;
use redisson_lock::Error;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A closed span or an event: its name and fields as text.
#[derive(Debug, Clone)]
struct Seen {
    name: String,
    fields: HashMap<String, String>,
}

impl Seen {
    fn get(&self, field: &str) -> &str {
        self.fields.get(field).map(String::as_str).unwrap_or("")
    }
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").trim_matches('"').to_string(),
        );
    }
}

/// Keeps the crate's spans (when they close, with every field recorded) and
/// events.
#[derive(Clone, Default)]
struct Recorder {
    closed: Arc<Mutex<Vec<Seen>>>,
}

struct Open(Seen);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: attrs.metadata().name().to_string(),
            fields: HashMap::new(),
        };
        attrs.record(&mut Fields(&mut seen.fields));
        ctx.span(id).unwrap().extensions_mut().insert(Open(seen));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(open) = ctx.span(id).unwrap().extensions_mut().get_mut::<Open>() {
            values.record(&mut Fields(&mut open.0.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut seen = Seen {
            name: "event".into(),
            fields: HashMap::new(),
        };
        event.record(&mut Fields(&mut seen.fields));
        self.closed.lock().push(seen);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(open) = ctx.span(&id).unwrap().extensions_mut().remove::<Open>() {
            self.closed.lock().push(open.0);
        }
    }
}

impl Recorder {
    fn spans(&self, name: &str, lock: &str) -> Vec<Seen> {
        self.closed
            .lock()
            .iter()
            .filter(|s| s.name == name && (lock.is_empty() || s.get("lock") == lock))
            .cloned()
            .collect()
    }
}

type Snapshot = Vec<(
    CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// One metric's values by labels. Read from one snapshot: taking a snapshot
/// drains the histograms.
fn metric<'a>(
    snapshot: &'a Snapshot,
    kind: MetricKind,
    name: &str,
) -> Vec<(Vec<String>, &'a DebugValue)> {
    snapshot
        .iter()
        .filter(|(key, ..)| key.kind() == kind && key.key().name() == name)
        .map(|(key, _, _, value)| {
            let labels = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            (labels, value)
        })
        .collect()
}

#[tokio::test]
async fn one_lock_wait_unlock_and_loss_cycle_is_traced_and_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let spans = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(
        spans.clone().with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target("redisson_lock", tracing::Level::DEBUG),
        ),
    );
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let client = client(&server, Duration::from_secs(1)).await;
    let lock = client.lock("traced").unwrap();

    // Taken at once.
    let first = lock.lock().await.unwrap();
    // A second flow waits until the first unlocks: woken by the message.
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    await_subscribers(&server, &lock.channel(), 1).await;
    first.unlock().await.unwrap();
    let second = within("the waiter", waiter).await.unwrap().unwrap();

    // The key vanishes under the second holder: the next renewal finds it
    // gone and the holder is told.
    let _: i64 = raw.del("traced").await.unwrap();
    within("the lost signal", second.lost()).await;
    let err = second.unlock().await.unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");

    // Spans: two acquisitions, the second after a wait; two releases.
    let acquires = spans.spans("acquire", "traced");
    assert_eq!(acquires.len(), 2, "{acquires:?}");
    for a in &acquires {
        assert_eq!(a.get("outcome"), "acquired", "{a:?}");
        // A single server: nothing to confirm.
        assert_eq!(a.get("safety"), "not_checked", "{a:?}");
        assert_eq!(a.get("kind"), "lock", "{a:?}");
        assert!(a.get("owner").parse::<u64>().is_ok(), "{a:?}");
    }
    let (at_once, waited): (Vec<_>, Vec<_>) =
        acquires.iter().partition(|a| a.get("attempts") == "1");
    assert_eq!(at_once.len(), 1, "{acquires:?}");
    let waited = waited[0];
    assert!(
        waited.get("attempts").parse::<u32>().unwrap() >= 2,
        "{waited:?}"
    );
    assert!(waited.get("waited_ms").parse::<u64>().is_ok(), "{waited:?}");

    let releases = spans.spans("release", "traced");
    let outcomes: Vec<&str> = releases.iter().map(|r| r.get("outcome")).collect();
    assert_eq!(outcomes, ["released", "lost"], "{releases:?}");

    let renewals = spans.spans("renewal", "");
    assert!(
        renewals
            .iter()
            .any(|r| r.get("lost") == "1" && r.get("locks") == "1"),
        "{renewals:?}"
    );
    let lost: Vec<Seen> = spans
        .spans("event", "traced")
        .into_iter()
        .filter(|e| e.get("message") == "lock lost")
        .collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].get("reason"), "gone");

    // A renewal that fails puts the hold at risk before it is lost, and the
    // next confirmed renewal clears it. Renewals every 2 s; the server holds
    // every write for 4 s just after one, so the next one times out (1 s)
    // and the one after lands well inside the 6 s lease.
    let slow = common::client(&server, Duration::from_secs(6)).await;
    let risky = slow.lock("risky").unwrap().lock().await.unwrap();
    let mut cycles = slow.watchdog_updates();
    within("a renewal cycle", cycles.changed()).await.unwrap();
    let _: () = raw
        .custom(
            fred::types::CustomCommand::new_static(
                "CLIENT",
                fred::types::ClusterHash::Random,
                false,
            ),
            vec!["PAUSE", "4000", "WRITE"],
        )
        .await
        .unwrap();
    within("the at-risk signal", risky.at_risk()).await;
    assert!(!risky.is_lost(), "at risk before lost");
    within("a confirmed renewal clears the risk", async {
        while risky.is_at_risk() {
            cycles.changed().await.unwrap();
        }
    })
    .await;
    assert!(!risky.is_lost());
    risky.unlock().await.unwrap();
    slow.shutdown().await;
    let at_risk: Vec<Seen> = spans
        .spans("event", "risky")
        .into_iter()
        .filter(|e| e.get("message") == "lock at risk")
        .collect();
    assert_eq!(at_risk.len(), 1, "{at_risk:?}");
    assert_eq!(at_risk[0].get("reason"), "renewal_failed");

    // Metrics.
    let snapshot: Snapshot = snapshotter.snapshot().into_vec();
    let acquired = metric(
        &snapshot,
        MetricKind::Counter,
        "redisson_lock_acquired_total",
    );
    assert!(
        matches!(&acquired[..], [(labels, DebugValue::Counter(3))] if labels.contains(&"safety=not_checked".to_string())),
        "{acquired:?}"
    );
    let at_risk = metric(
        &snapshot,
        MetricKind::Counter,
        "redisson_lock_at_risk_total",
    );
    assert!(
        matches!(&at_risk[..], [(labels, DebugValue::Counter(1))] if labels.contains(&"reason=renewal_failed".to_string())),
        "{at_risk:?}"
    );
    let acquire_seconds = metric(
        &snapshot,
        MetricKind::Histogram,
        "redisson_lock_acquire_seconds",
    );
    let samples: usize = acquire_seconds
        .iter()
        .filter(|(labels, _)| labels.contains(&"outcome=acquired".to_string()))
        .map(|(_, v)| match v {
            DebugValue::Histogram(h) => h.len(),
            _ => 0,
        })
        .sum();
    // "traced" twice, "risky" once.
    assert_eq!(samples, 3, "{acquire_seconds:?}");
    let wait = metric(
        &snapshot,
        MetricKind::Histogram,
        "redisson_lock_wait_seconds",
    );
    assert!(
        matches!(&wait[..], [(labels, DebugValue::Histogram(h))] if h.len() == 1 && labels == &["kind=lock"]),
        "{wait:?}"
    );
    let lost = metric(&snapshot, MetricKind::Counter, "redisson_lock_lost_total");
    assert!(
        matches!(&lost[..], [(labels, DebugValue::Counter(1))] if labels.contains(&"reason=gone".to_string())),
        "{lost:?}"
    );
    let wakeups = metric(
        &snapshot,
        MetricKind::Counter,
        "redisson_lock_wakeups_total",
    );
    assert!(
        matches!(&wakeups[..], [(_, DebugValue::Counter(n))] if *n >= 1),
        "{wakeups:?}"
    );
    // Both holds ended: the gauge is back at zero.
    let held = metric(&snapshot, MetricKind::Gauge, "redisson_lock_held");
    assert!(
        matches!(&held[..], [(_, DebugValue::Gauge(g))] if g.into_inner() == 0.0),
        "{held:?}"
    );
    client.shutdown().await;
}
