//! `top`: a live view of the objects whose name matches, refreshed every
//! second (ratatui over crossterm): most contended first, who holds each and
//! for how long, and recent events (acquired, released, lost).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use ratatui::crossterm::event::{Event, EventStream, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;
use redisson_lock::inspect::{ObjectKind, ObjectSummary};
use tokio::signal::unix::{signal, SignalKind};

use crate::fit::{self, fit, Column};
use crate::ls::{detail, holders_within, short_duration, short_holder, ttl, waiting};
use crate::{connect_read_only, parse_duration, Cli};

#[derive(clap::Args)]
pub struct TopArgs {
    /// Object names to show, as a Redis glob. On a big keyspace, narrow it:
    /// each refresh scans the keyspace as `ls` does.
    #[arg(default_value = "*")]
    pattern: String,
    /// Keys each SCAN call examines (see `ls --count`).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    count: u32,
    /// Time between refreshes; at least three times the last scan's own
    /// duration, so that a large keyspace is not scanned back to back.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    interval: Duration,
}

/// The time to the next refresh: `--interval`, or three times what the last
/// scan took if that is longer, so that `top` keeps Redis busy with its
/// scans at most a quarter of the time, however large the keyspace.
fn refresh_gap(interval: Duration, scan: Duration) -> Duration {
    interval.max(scan.saturating_mul(3))
}

/// Events kept for the bottom panel.
const EVENTS: usize = 50;

/// One holder as last seen.
struct Seen {
    /// The holder as shown.
    label: String,
    /// When this view first saw it, and whether it was there at the start
    /// (then it has been held for at least that long).
    since: Instant,
    at_start: bool,
    /// Its key's TTL then, and when that was read.
    ttl_ms: Option<u64>,
    seen_at: Instant,
}

#[derive(Default)]
struct View {
    objects: Vec<ObjectSummary>,
    /// (object, holder) → when first seen.
    holders: HashMap<(String, String), Seen>,
    events: VecDeque<(SystemTime, String, bool)>,
    refreshes: u64,
    error: Option<String>,
}

/// A holder as the events panel names it: its short id, and the client
/// registry's `service@host` where its client registered.
fn named(o: &ObjectSummary, h: &redisson_lock::Holder, role: &str) -> String {
    match o.clients.get(&h.client_id) {
        Some(Some(who)) => format!("{}{role} ({}@{})", short_holder(h), who.service, who.host),
        _ => format!("{}{role}", short_holder(h)),
    }
}

/// A holder's identity in one object: its field, and `write` for a writer.
fn holder_keys(o: &ObjectSummary) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = o
        .holders
        .iter()
        .map(|h| (format!("{}:{}", h.client_id, h.owner), named(o, h, "")))
        .collect();
    if let Some(w) = &o.writer {
        keys.push((
            format!("{}:{}:write", w.client_id, w.owner),
            named(o, w, " (write)"),
        ));
    }
    keys
}

impl View {
    fn event(&mut self, text: String, bad: bool) {
        self.events.push_front((SystemTime::now(), text, bad));
        self.events.truncate(EVENTS);
    }

    /// Takes a new snapshot: holders that appeared were acquired; holders
    /// that vanished were released, or lost when their key's TTL had run
    /// out by then (nobody renewed it: the holder stopped).
    ///
    /// `started` is when the snapshot's reads began: a key read then with
    /// TTL `t` cannot have expired before `started + t`, so a holder gone by
    /// `now` whose TTL had run out by `now` was lost, and one gone earlier
    /// was released.
    fn update(&mut self, objects: Vec<ObjectSummary>, started: Instant) {
        let now = Instant::now();
        let first = self.refreshes == 0;
        self.refreshes += 1;
        let mut present: HashMap<(String, String), (String, Option<u64>)> = HashMap::new();
        for o in &objects {
            for (id, label) in holder_keys(o) {
                present.insert((o.name.clone(), id), (label, o.ttl_ms));
            }
        }
        let gone: Vec<(String, String)> = self
            .holders
            .keys()
            .filter(|k| !present.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            let seen = self.holders.remove(&key).expect("listed above");
            let label = &seen.label;
            let held = short_duration(seen.seen_at.duration_since(seen.since));
            let expired = seen
                .ttl_ms
                .is_some_and(|ttl| Duration::from_millis(ttl) <= now.duration_since(seen.seen_at));
            if expired {
                self.event(
                    format!(
                        "{}: LOST by {label} after {held}: its lease ran out unrenewed (holder gone?)",
                        key.0
                    ),
                    true,
                );
            } else {
                self.event(
                    format!("{}: released by {label} after {held}", key.0),
                    false,
                );
            }
        }
        for (key, (label, ttl_ms)) in present {
            match self.holders.get_mut(&key) {
                Some(seen) => {
                    seen.ttl_ms = ttl_ms;
                    seen.seen_at = started;
                }
                None => {
                    if !first {
                        self.event(format!("{}: acquired by {label}", key.0), false);
                    }
                    self.holders.insert(
                        key,
                        Seen {
                            label,
                            since: started,
                            at_start: first,
                            ttl_ms,
                            seen_at: started,
                        },
                    );
                }
            }
        }
        let mut objects = objects;
        let held_for = |o: &ObjectSummary| -> Duration {
            holder_keys(o)
                .iter()
                .filter_map(|(id, _)| self.holders.get(&(o.name.clone(), id.clone())))
                .map(|s| now.duration_since(s.since))
                .max()
                .unwrap_or_default()
        };
        objects.sort_by(|a, b| {
            b.contention()
                .cmp(&a.contention())
                .then(held_for(b).cmp(&held_for(a)))
                .then(a.name.cmp(&b.name))
        });
        self.objects = objects;
        self.error = None;
    }

    /// How long the object has been held, as this view saw it.
    fn held_for(&self, o: &ObjectSummary) -> String {
        let now = Instant::now();
        holder_keys(o)
            .iter()
            .filter_map(|(id, _)| self.holders.get(&(o.name.clone(), id.clone())))
            .max_by_key(|s| now.duration_since(s.since))
            .map_or("-".into(), |s| {
                let d = short_duration(now.duration_since(s.since));
                if s.at_start {
                    format!(">={d}")
                } else {
                    d
                }
            })
    }
}

fn render(frame: &mut Frame, view: &View, title: &str) {
    let events_height = (view.events.len().min(8) as u16) + 2;
    let [header, body, events, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(events_height),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let status = match &view.error {
        Some(e) => format!("{title} | error: {e}"),
        None => format!("{title} | {} object(s)", view.objects.len()),
    };
    let columns_total = usize::from(frame.area().width);
    frame.render_widget(Paragraph::new(fit(&status, columns_total)).bold(), header);
    frame.render_widget(table(view, columns_total), body);
    let inside = usize::from(events.width.saturating_sub(2));
    let lines: Vec<Line> = view
        .events
        .iter()
        .take(8)
        .map(|(at, text, bad)| {
            let time = humantime::format_rfc3339_seconds(*at).to_string();
            let time = time.get(11..19).unwrap_or(&time).to_string();
            let line = Line::from(fit(&format!("{time} {text}"), inside));
            if *bad {
                line.style(Style::default().fg(Color::Red))
            } else {
                line
            }
        })
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" recent events ")),
        events,
    );
    frame.render_widget(
        Paragraph::new(fit(
            "q: quit | sorted by waiting, then time held | HELD FOR counts from when top \
             first saw the holder",
            columns_total,
        ))
        .dim(),
        help,
    );
}

const HEADER: [&str; 7] = [
    "NAME", "KIND", "WAITING", "HOLDERS", "HELD FOR", "TTL", "DETAIL",
];
/// The HOLDERS column, which keeps owner ids whole first.
const HOLDERS: usize = 3;

/// The objects' table in `total` terminal columns: short columns as wide as
/// their values, HOLDERS next (client ids are cut before owner ids), NAME
/// and DETAIL share the rest; whatever does not fit is cut with `…`.
fn table(view: &View, total: usize) -> Table<'static> {
    let cells: Vec<[String; 7]> = view
        .objects
        .iter()
        .map(|o| {
            [
                o.name.clone(),
                o.kind.to_string(),
                waiting(o),
                crate::ls::holders(o),
                view.held_for(o),
                ttl(o.ttl_ms, o.no_ttl, o.kind),
                detail(o),
            ]
        })
        .collect();
    let widest = |i: usize| {
        cells
            .iter()
            .map(|row| fit::width(&row[i]))
            .chain([fit::width(HEADER[i])])
            .max()
            .unwrap_or(0)
    };
    let columns: Vec<Column> = (0..HEADER.len())
        .map(|i| match i {
            0 | 6 => Column::Shared(widest(i)),
            // Every owner id whole first, all holders if there is room.
            HOLDERS => Column::First {
                need: view
                    .objects
                    .iter()
                    .map(|o| fit::width(&crate::ls::one_holder(o)))
                    .chain([fit::width(HEADER[i])])
                    .max()
                    .unwrap_or(0),
                want: widest(i),
            },
            _ => Column::Fixed(widest(i)),
        })
        .collect();
    let widths = fit::widths(&columns, total, 1);
    let rows: Vec<Row> = view
        .objects
        .iter()
        .zip(cells)
        .map(|(o, row)| {
            let shown: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, cell)| match i {
                    HOLDERS => holders_within(o, widths[i]),
                    _ => fit(cell, widths[i]),
                })
                .collect();
            let row = Row::new(shown);
            if o.contention() > 0 {
                row.style(Style::default().fg(Color::Yellow))
            } else {
                row
            }
        })
        .collect();
    let header: Vec<String> = HEADER
        .iter()
        .zip(&widths)
        .map(|(h, w)| fit(h, *w))
        .collect();
    Table::new(
        rows,
        widths
            .iter()
            .map(|w| Constraint::Length(u16::try_from(*w).unwrap_or(u16::MAX))),
    )
    .header(Row::new(header).style(Style::default().add_modifier(Modifier::REVERSED)))
    .column_spacing(1)
}

pub async fn top(cli: &Cli, args: &TopArgs) -> Result<u8, String> {
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return Err(
            "top needs a terminal (stdout is not a TTY); use `ls` or `ls --json` in scripts".into(),
        );
    }
    let client = connect_read_only(cli).await?;
    let title = format!(
        "redisson-lock top | {} | {}",
        redisson_lock::naming::redact_url(&client.config().address),
        args.pattern
    );
    let mut terminal =
        ratatui::try_init().map_err(|e| format!("cannot set up the terminal: {e}"))?;
    let mut keys = EventStream::new();
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut hangup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
    let mut tick = tokio::time::interval(args.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut view = View::default();
    let outcome = loop {
        tokio::select! {
            _ = tick.tick() => {
                let started = Instant::now();
                match client.scan_objects(&args.pattern, args.count).await {
                    Ok(objects) => view.update(
                        objects.into_iter().filter(|o| o.kind != ObjectKind::Leftovers).collect(),
                        started,
                    ),
                    Err(e) => view.error = Some(e.to_string()),
                }
                tick.reset_after(refresh_gap(args.interval, started.elapsed()));
            }
            key = keys.next() => match key {
                Some(Ok(Event::Key(k))) if k.kind == KeyEventKind::Press => {
                    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc) {
                        break Ok(0);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => break Err(format!("reading the terminal: {e}")),
                None => break Ok(0),
            },
            _ = terminate.recv() => break Ok(0),
            _ = hangup.recv() => break Ok(0),
        }
        if let Err(e) = terminal.draw(|frame| render(frame, &view, &title)) {
            break Err(format!("drawing: {e}"));
        }
    };
    ratatui::restore();
    client.shutdown().await;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_scan_spaces_the_refreshes() {
        let second = Duration::from_secs(1);
        assert_eq!(refresh_gap(second, Duration::from_millis(20)), second);
        // A keyspace that takes 800 ms to scan: refreshed every 2.4 s, not
        // back to back.
        assert_eq!(
            refresh_gap(second, Duration::from_millis(800)),
            Duration::from_millis(2400)
        );
    }
}
