//! Per operation and client: refusals, no-wait try latency, signals (each
//! lost signal judged true or false), overlaps.

use std::collections::BTreeMap;

use crate::load::{HoldRecord, Log, Probe, Role, CRATE, CRATE_ALL, REDISSON};
use crate::operations::Operation;
use crate::workload::Section;

/// One operation as it ran.
pub struct Run {
    pub operation: Operation,
    pub label: String,
    /// From before its preparation to the next operation's: critical
    /// sections and contenders' signals in here are the operation's.
    pub from_us: i64,
    pub to_us: i64,
    /// From the start of the operation to the end of its tail (every
    /// client served again): what is measured.
    pub started_us: i64,
    pub healed_us: i64,
    pub ended_us: i64,
    pub events: Vec<(i64, String)>,
    /// The primary or the configuration epoch changed while the holds
    /// were held.
    pub failed_over: bool,
    pub holders: Vec<HoldRecord>,
}

/// What one client saw during one operation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClientRow {
    pub client: &'static str,
    /// No-wait tries of a free lock, and how many were refused.
    pub tries: usize,
    pub refused: usize,
    /// The longest time from a refused try to the next acquiring one.
    pub longest_refusal_ms: f64,
    pub refusals: BTreeMap<String, usize>,
    pub try_p50_ms: f64,
    pub try_max_ms: f64,
    /// At-risk signals and lost signals heard by this client's holds
    /// (`None` for Redisson, which tells its holders nothing).
    pub at_risk: Option<usize>,
    /// When each of those at-risk signals came, and to which hold.
    pub risks: Vec<String>,
    pub lost_true: Option<usize>,
    pub lost_false: Option<usize>,
    /// Overlaps after this client's holder that nobody was told of.
    pub silent_overlaps: usize,
    pub false_lost: Vec<String>,
    /// The true ones, each with what made it true.
    pub true_lost: Vec<String>,
    pub silent: Vec<String>,
}

/// One operation's row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub deployment: &'static str,
    pub timings: &'static str,
    /// The timings in words.
    pub settings: String,
    pub operation: Operation,
    pub label: String,
    /// From the start until the deployment was healthy again, and until
    /// every client was served again.
    pub healed_ms: f64,
    pub duration_ms: f64,
    pub failed_over: bool,
    /// What was done, ms from the start.
    pub events: Vec<String>,
    pub sections: usize,
    pub jvm_sections: usize,
    /// Overlaps signalled to the earlier holder (lost) or the later (at risk).
    pub signalled: usize,
    pub token_regressions: usize,
    pub clients: Vec<ClientRow>,
}

/// Which client a section's holder belongs to.
fn client_of(holder: &str) -> &'static str {
    if holder.starts_with('j') {
        REDISSON
    } else if holder.contains("-all-") {
        CRATE_ALL
    } else {
        CRATE
    }
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

/// What the deployment and the run were, for every row.
pub struct Context<'a> {
    pub deployment: &'static str,
    pub timings: &'static str,
    pub settings: String,
    pub clients: &'a [&'static str],
}

pub fn rows(context: &Context, runs: &[Run], log: &Log) -> Vec<Row> {
    let sections = log.sections.lock().clone();
    let probes = log.probes.lock().clone();
    let contended = log.holds.lock().clone();
    runs.iter()
        .map(|run| row(context, run, &sections, &probes, &contended))
        .collect()
}

fn row(
    context: &Context,
    run: &Run,
    sections: &[Section],
    probes: &[Probe],
    contended: &[HoldRecord],
) -> Row {
    // Probes count while the operation runs; sections and signals from its
    // preparation to the next one's, so that none falls between two.
    let within = |t: i64| t >= run.started_us && t <= run.ended_us;
    let owned = |t: i64| t >= run.from_us && t < run.to_us;
    let at = |t: i64| format!("{:+.0} ms", ms(t - run.started_us));
    // The crate's view of the replicas, as its probes were confirmed or
    // refused, joins what was done and what the deployment said.
    let mut timeline = run.events.clone();
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    for p in probes
        .iter()
        .filter(|p| within(p.at_us) && p.client != REDISSON)
    {
        let now = match (&p.safety, &p.refusal) {
            (Some(safety), _) => format!("acquires on {safety}"),
            (None, Some(refusal)) => format!("refused ({refusal})"),
            (None, None) => continue,
        };
        if seen.get(p.client) != Some(&now) {
            timeline.push((p.at_us, format!("{} probe {now}", p.client)));
            seen.insert(p.client, now);
        }
    }
    timeline.sort_by_key(|(t, _)| *t);
    let events: Vec<String> = timeline
        .iter()
        .map(|(t, what)| format!("{}: {what}", at(*t)))
        .collect();
    let window: Vec<&Section> = sections.iter().filter(|s| owned(s.enter_us)).collect();
    let mut silent: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut signalled = 0;
    for later in &window {
        for earlier in sections.iter().filter(|a| {
            a.lock == later.lock && a.enter_us < later.enter_us && a.exit_us > later.enter_us
        }) {
            if earlier.lost_us.is_some_and(|t| t <= later.enter_us) || later.at_risk_at_entry {
                signalled += 1;
            } else {
                silent
                    .entry(client_of(&earlier.holder))
                    .or_default()
                    .push(overlap(earlier, later, &at));
            }
        }
    }
    // Every Rust hold of the operation: its holders, and the contenders'
    // holds that heard a signal then.
    let holds: Vec<&HoldRecord> = run
        .holders
        .iter()
        .chain(
            contended
                .iter()
                .filter(|h| h.lost_us.is_some_and(owned) || h.at_risk_us.iter().any(|t| owned(*t))),
        )
        .collect();
    let clients = context
        .clients
        .iter()
        .map(|&client| {
            let mine: Vec<&Probe> = probes
                .iter()
                .filter(|p| p.client == client && within(p.at_us))
                .collect();
            let (longest, refusals) = refusals(&mine, run.ended_us);
            let mut latency: Vec<i64> = mine.iter().map(|p| p.latency_us).collect();
            latency.sort_unstable();
            let mut risks = vec![];
            let (at_risk, lost_true, lost_false, false_lost, true_lost) = if client == REDISSON {
                (None, None, None, vec![], vec![])
            } else {
                let mine: Vec<&&HoldRecord> = holds.iter().filter(|h| h.client == client).collect();
                for h in &mine {
                    for t in h
                        .at_risk_us
                        .iter()
                        .filter(|t| h.role == Role::Holder || owned(**t))
                    {
                        risks.push(format!("{} at {}", h.holder, at(*t)));
                    }
                }
                let at_risk = risks.len();
                let (mut false_lost, mut true_lost) = (vec![], vec![]);
                for h in mine.iter().filter(|h| h.lost_us.is_some()) {
                    let (was_false, why) = verdict(h, run, sections, &at);
                    let timeline = lost_timeline(h, &why, &at, &events);
                    match was_false {
                        true => false_lost.push(timeline),
                        false => true_lost.push(timeline),
                    }
                }
                (
                    Some(at_risk),
                    Some(true_lost.len()),
                    Some(false_lost.len()),
                    false_lost,
                    true_lost,
                )
            };
            let silent = silent.remove(client).unwrap_or_default();
            ClientRow {
                client,
                tries: mine.len(),
                refused: mine.iter().filter(|p| !p.acquired).count(),
                longest_refusal_ms: ms(longest),
                refusals,
                try_p50_ms: latency.get(latency.len() / 2).map_or(0.0, |l| ms(*l)),
                try_max_ms: latency.last().map_or(0.0, |l| ms(*l)),
                at_risk,
                risks,
                lost_true,
                lost_false,
                silent_overlaps: silent.len(),
                false_lost,
                true_lost,
                silent,
            }
        })
        .collect();
    Row {
        deployment: context.deployment,
        timings: context.timings,
        settings: context.settings.clone(),
        operation: run.operation,
        label: run.label.clone(),
        healed_ms: ms(run.healed_us - run.started_us),
        duration_ms: ms(run.ended_us - run.started_us),
        failed_over: run.failed_over,
        events,
        sections: window.len(),
        jvm_sections: window.iter().filter(|s| s.holder.starts_with('j')).count(),
        signalled,
        token_regressions: window
            .iter()
            .filter(|s| s.regressed_after.is_some())
            .count(),
        clients,
    }
}

/// The longest refusal (µs, from a refused try to the next acquiring one,
/// or to `end`) and the refusals by kind.
fn refusals(probes: &[&Probe], end: i64) -> (i64, BTreeMap<String, usize>) {
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let (mut longest, mut since) = (0, None);
    for p in probes {
        if p.acquired {
            if let Some(start) = since.take() {
                longest = longest.max(p.at_us - start);
            }
        } else {
            since.get_or_insert(p.at_us);
            *by_kind
                .entry(p.refusal.clone().unwrap_or_default())
                .or_default() += 1;
        }
    }
    if let Some(start) = since {
        longest = longest.max(end - start);
    }
    (longest, by_kind)
}

/// Whether a lost signal was false, and why: it was false when the hold's
/// field was still on the primary with its count when read right after, no
/// failover happened, and nobody else entered the lock's critical section
/// meanwhile; otherwise the lock may well have been gone.
fn verdict(
    hold: &HoldRecord,
    run: &Run,
    sections: &[Section],
    at: &dyn Fn(i64) -> String,
) -> (bool, String) {
    if run.failed_over {
        return (false, "a failover happened during the operation".into());
    }
    match &hold.count_after {
        Ok(Some(1)) => {}
        Ok(Some(n)) => return (false, format!("the owner's count was {n}, not 1")),
        Ok(None) => return (false, "the field was gone".into()),
        Err(e) => return (false, format!("the field could not be read ({e})")),
    }
    match sections.iter().find(|s| {
        s.lock == hold.lock && s.enter_us > hold.enter_us && s.enter_us <= hold.checked_us
    }) {
        Some(other) => (
            false,
            format!("{} entered at {}", other.holder, at(other.enter_us)),
        ),
        None => (
            true,
            "field still on the primary with count 1, no failover, nobody else entered".into(),
        ),
    }
}

fn lost_timeline(
    hold: &HoldRecord,
    why: &str,
    at: &dyn Fn(i64) -> String,
    events: &[String],
) -> String {
    let risks: Vec<String> = hold.at_risk_us.iter().map(|t| at(*t)).collect();
    format!(
        "{role} {holder} on {lock}: entered {enter}, at risk {risk}, told lost {lost}, left {exit}; \
         read back on the primary at {checked}: {why}. The operation: {events}",
        role = match hold.role {
            Role::Holder => "holder",
            Role::Contender => "contender",
        },
        holder = hold.holder,
        lock = hold.lock,
        enter = at(hold.enter_us),
        risk = if risks.is_empty() { "never".into() } else { risks.join(", ") },
        lost = hold.lost_us.map_or("never".into(), at),
        exit = at(hold.exit_us),
        checked = at(hold.checked_us),
        events = events.join("; "),
    )
}

/// An overlap in words, times from the operation's start.
fn overlap(a: &Section, b: &Section, at: &dyn Fn(i64) -> String) -> String {
    let heard = |t: Option<i64>| t.map_or("never".to_string(), at);
    format!(
        "{lock}: {a_holder} (token {a_token}, acquired on {a_safety}) inside {a_in}..{a_out}, at risk {a_risk}, lost {a_lost}; \
         {b_holder} (token {b_token}, {b_safety}) entered {b_in}",
        lock = a.lock,
        a_holder = a.holder,
        a_token = a.token,
        a_safety = a.safety,
        a_in = at(a.enter_us),
        a_out = at(a.exit_us),
        a_risk = heard(a.at_risk_us),
        a_lost = heard(a.lost_us),
        b_holder = b.holder,
        b_token = b.token,
        b_safety = b.safety,
        b_in = at(b.enter_us),
    )
}

pub fn print(rows: &[Row]) {
    println!(
        "{:<9} {:<10} {:<48} {:<18} {:>5} {:>5} {:>9} {:>8} {:>8} {:>5} {:>9} {:>6}",
        "deploy",
        "timings",
        "operation",
        "client",
        "tries",
        "refus",
        "longest",
        "p50 ms",
        "max ms",
        "risk",
        "lost t/f",
        "silent"
    );
    for r in rows {
        for c in &r.clients {
            let opt = |v: Option<usize>| v.map_or("-".to_string(), |v| v.to_string());
            println!(
                "{:<9} {:<10} {:<48} {:<18} {:>5} {:>5} {:>9.0} {:>8.1} {:>8.1} {:>5} {:>9} {:>6}",
                r.deployment,
                r.timings,
                r.label,
                c.client,
                c.tries,
                c.refused,
                c.longest_refusal_ms,
                c.try_p50_ms,
                c.try_max_ms,
                opt(c.at_risk),
                format!("{}/{}", opt(c.lost_true), opt(c.lost_false)),
                c.silent_overlaps,
            );
            if !c.refusals.is_empty() {
                println!("    refusals: {:?}", c.refusals);
            }
            if !c.risks.is_empty() {
                println!("    at risk: {}", c.risks.join(", "));
            }
            for t in &c.false_lost {
                println!("    FALSE LOST {t}");
            }
            for t in &c.true_lost {
                println!("    TRUE LOST {t}");
            }
            for t in &c.silent {
                println!("    SILENT {t}");
            }
        }
        println!(
            "    healthy after {:.1} s, served after {:.1} s; {} sections ({} JVM), {} signalled overlaps, {} token regressions{}",
            r.healed_ms / 1000.0,
            r.duration_ms / 1000.0,
            r.sections,
            r.jvm_sections,
            r.signalled,
            r.token_regressions,
            if r.failed_over { ", FAILED OVER" } else { "" }
        );
        for e in &r.events {
            println!("      {e}");
        }
    }
}
