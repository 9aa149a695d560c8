//! `ls` and `inspect`: what is in Redis, from the library's inspection API.

use std::time::Duration;

use redisson_lock::inspect::{ObjectInfo, ObjectKind, ObjectState, ObjectSummary, SideKeyRole};
use redisson_lock::{Holder, RwMode};

use crate::{connect_read_only, Cli};

#[derive(clap::Args)]
pub struct LsArgs {
    /// Object names to list, as a Redis glob (`orders:*`, `job-?`).
    #[arg(default_value = "*")]
    pub pattern: String,
    /// Keys each SCAN call examines (its COUNT): the most work one call
    /// asks of Redis. Larger is faster on a big keyspace.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also list names of which only leftover keys remain (unlock and
    /// request latches, read-hold keys): see `doctor`.
    #[arg(long)]
    pub all: bool,
}

#[derive(clap::Args)]
pub struct InspectArgs {
    /// Object name: the lock's, semaphore's or latch's key.
    pub name: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub async fn ls(cli: &Cli, args: &LsArgs) -> Result<u8, String> {
    let client = connect_read_only(cli).await?;
    let found = client.scan_objects(&args.pattern, args.count).await;
    client.shutdown().await;
    let found = found.map_err(text)?;
    let (shown, hidden): (Vec<_>, Vec<_>) = found
        .into_iter()
        .partition(|o| args.all || o.kind != ObjectKind::Leftovers);
    if args.json {
        crate::print_json(&serde_json::json!({ "objects": shown }))?;
    } else {
        print!("{}", table(&shown));
    }
    if !hidden.is_empty() {
        eprintln!(
            "({} more name(s) have only leftover keys: `ls --all` lists them, `doctor` explains them)",
            hidden.len()
        );
    }
    Ok(0)
}

/// The `ls` table: one line per object, columns padded to fit.
pub fn table(objects: &[ObjectSummary]) -> String {
    let header = ["NAME", "KIND", "HOLDERS", "WHO", "TTL", "WAITING", "DETAIL"].map(String::from);
    let rows: Vec<[String; 7]> = objects
        .iter()
        .map(|o| {
            [
                o.name.clone(),
                o.kind.to_string(),
                holders(o),
                who_holds(o),
                ttl(o.ttl_ms, o.no_ttl, o.kind),
                waiting(o),
                detail(o),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The WHO column: the first holder's client as the registry names it
/// (`service@host`), `unregistered`, or `-`; `+N` more clients.
pub fn who_holds(o: &ObjectSummary) -> String {
    let mut clients: Vec<&str> = vec![];
    for h in o.writer.iter().chain(&o.holders) {
        if !clients.contains(&h.client_id.as_str()) {
            clients.push(&h.client_id);
        }
    }
    let Some(first) = clients.first() else {
        return "-".into();
    };
    let named = match o.clients.get(*first) {
        Some(Some(identity)) => format!("{}@{}", identity.service, identity.host),
        _ => "unregistered".into(),
    };
    match clients.len() {
        1 => named,
        n => format!("{named} +{}", n - 1),
    }
}

/// Digits of the client id `ls` and `top` show (as a short commit id).
const CLIENT_DIGITS: usize = 8;

/// A holder as `ls` and `top` show it: the client id's first 8 digits,
/// the owner, and the hold count when above 1.
pub fn short_holder(h: &Holder) -> String {
    holder_label(h, CLIENT_DIGITS)
}

/// A holder with `digits` digits of its client id; fewer than the usual 8
/// end in `…`. The owner id is always whole.
fn holder_label(h: &Holder, digits: usize) -> String {
    let mut client: String = h.client_id.chars().take(digits).collect();
    if digits < CLIENT_DIGITS {
        client.push(crate::fit::MARK);
    }
    let count = if h.hold_count > 1 {
        format!(" x{}", h.hold_count)
    } else {
        String::new()
    };
    format!("{client}:{}{count}", h.owner)
}

/// The holders column: up to two holders, and how many more.
pub fn holders(o: &ObjectSummary) -> String {
    holders_shown(o, CLIENT_DIGITS, 2)
}

/// The holders column in `columns` terminal columns: client ids are cut
/// (marked `…`) before fewer holders are shown, and owner ids only when
/// even one holder with one client digit does not fit.
pub fn holders_within(o: &ObjectSummary, columns: usize) -> String {
    let candidates = [
        (CLIENT_DIGITS, 2),
        (4, 2),
        (1, 2),
        (CLIENT_DIGITS, 1),
        (4, 1),
        (1, 1),
    ];
    crate::fit::first_fitting(
        candidates
            .into_iter()
            .map(|(digits, shown)| holders_shown(o, digits, shown)),
        columns,
    )
}

/// The holders column with one holder, as usual, and how many more.
pub fn one_holder(o: &ObjectSummary) -> String {
    holders_shown(o, CLIENT_DIGITS, 1)
}

fn holders_shown(o: &ObjectSummary, digits: usize, shown: usize) -> String {
    let mut all: Vec<String> = vec![];
    if let Some(writer) = &o.writer {
        all.push(format!("{} (write)", holder_label(writer, digits)));
    }
    all.extend(o.holders.iter().map(|h| holder_label(h, digits)));
    match all.len() {
        0 => "-".into(),
        n if n <= shown => all.join(", "),
        n => format!("{}, +{} more", all[..shown].join(", "), n - shown),
    }
}

pub fn ttl(ms: Option<u64>, no_ttl: bool, kind: ObjectKind) -> String {
    match (ms, no_ttl) {
        (Some(ms), _) => short_duration(Duration::from_millis(ms)),
        (None, true) if is_lock(kind) => "none!".into(),
        (None, true) => "none".into(),
        _ => "-".into(),
    }
}

fn is_lock(kind: ObjectKind) -> bool {
    matches!(
        kind,
        ObjectKind::Lock
            | ObjectKind::FairLock
            | ObjectKind::FencedLock
            | ObjectKind::ReadWriteLock
            | ObjectKind::MultiLockGroup
    )
}

/// `1.5s`, `42s`, `3m05s`, `2h10m`.
pub fn short_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 10 {
        format!("{:.1}s", d.as_secs_f64())
    } else if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    }
}

pub fn waiting(o: &ObjectSummary) -> String {
    match o.contention() {
        0 => "-".into(),
        n => n.to_string(),
    }
}

pub fn detail(o: &ObjectSummary) -> String {
    let mut parts: Vec<String> = vec![];
    match o.kind {
        ObjectKind::ReadWriteLock => parts.push(match o.mode {
            Some(RwMode::Read) => format!("read, {} reader(s)", o.holders.len()),
            Some(RwMode::Write) => "write".into(),
            None => "no mode".into(),
        }),
        ObjectKind::FairLock => {
            let mut line = format!("queue {}", o.queue_length);
            if o.overdue_waiters > 0 {
                line.push_str(&format!(" ({} overdue)", o.overdue_waiters));
            }
            parts.push(line);
        }
        ObjectKind::FencedLock => {
            if let Some(token) = o.last_token {
                parts.push(format!("token {token}"));
            }
        }
        ObjectKind::Semaphore => parts.push(format!("{} permit(s)", o.value.unwrap_or(0))),
        ObjectKind::ExpirableSemaphore => {
            let mut line = match o.value {
                Some(v) => format!("{v} permit(s), {} leased", o.leases),
                None => format!("no key, {} leased", o.leases),
            };
            if o.expired_leases > 0 {
                line.push_str(&format!(" ({} ended)", o.expired_leases));
            }
            parts.push(line);
        }
        ObjectKind::CountDownLatch => parts.push(format!("count {}", o.value.unwrap_or(0))),
        ObjectKind::Counter => parts.push(format!("{} (semaphore or latch)", o.value.unwrap_or(0))),
        _ => {}
    }
    let left = leftovers(o);
    if left > 0 {
        parts.push(format!("{left} leftover key(s)"));
    }
    parts.join("; ")
}

/// Side keys that no current hold uses: latches, and read-hold keys beyond
/// their reader's count.
pub fn leftovers(o: &ObjectSummary) -> usize {
    o.side_keys
        .iter()
        .filter(|side| match &side.role {
            SideKeyRole::ReadHold { field, n } => !o
                .holders
                .iter()
                .any(|h| format!("{}:{}", h.client_id, h.owner) == *field && h.hold_count >= *n),
            _ => true,
        })
        .count()
}

pub async fn inspect(cli: &Cli, args: &InspectArgs) -> Result<u8, String> {
    let client = connect_read_only(cli).await?;
    let info = client.inspect(&args.name).await;
    client.shutdown().await;
    let info = info.map_err(text)?;
    if args.json {
        crate::print_json(&info)?;
    } else {
        print!("{}", describe(&info));
    }
    Ok(0)
}

fn holder_line(h: &Holder, what: &str, clients: &Clients) -> String {
    let own = if h.this_client { " (this client)" } else { "" };
    format!(
        "  {what} client {} owner {}{own}, hold count {}\n{}",
        h.client_id,
        h.owner,
        h.hold_count,
        who_line(clients, &h.client_id)
    )
}

/// Who each client is, by client id, from the registry.
pub type Clients = std::collections::BTreeMap<String, Option<redisson_lock::ClientIdentity>>;

/// What the registry says of a client: `service/instance on host pid N`
/// and its labels.
pub fn who(clients: &Clients, client_id: &str) -> String {
    match clients.get(client_id) {
        Some(Some(identity)) => {
            let labels: Vec<String> = identity
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            match labels.is_empty() {
                true => identity.describe(),
                false => format!("{} ({})", identity.describe(), labels.join(", ")),
            }
        }
        Some(None) => {
            "unregistered (a JVM Redisson client, or a Rust client with the registry off)".into()
        }
        None => "unknown (the client registry, redisson_lock__client:*, cannot be read)".into(),
    }
}

/// The `who:` line under a holder or waiter.
fn who_line(clients: &Clients, client_id: &str) -> String {
    format!("    who: {}\n", who(clients, client_id))
}

/// Wall-clock ms since the epoch, as `in 4.2s` / `4.2s ago`.
fn from_now(at_ms: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let d = Duration::from_millis(at_ms.abs_diff(now));
    if at_ms >= now {
        format!("in {}", short_duration(d))
    } else {
        format!("{} ago", short_duration(d))
    }
}

/// `inspect`'s text.
pub fn describe(info: &ObjectInfo) -> String {
    let name = &info.name;
    let expiry = match (info.ttl_ms, info.no_ttl) {
        (Some(ms), _) => format!("expires in {}", short_duration(Duration::from_millis(ms))),
        (None, true) => "no TTL: stays until deleted".into(),
        _ => "no key".into(),
    };
    let mut out = String::new();
    match &info.state {
        ObjectState::Absent => out.push_str(&format!("{name}: no such object\n")),
        ObjectState::Other => out.push_str(&format!(
            "{name}: not a Redisson object (a {} key)\n",
            info.redis_type
        )),
        ObjectState::Lock(lock) => {
            out.push_str(&format!("{name}: lock, {expiry}\n"));
            for h in &lock.holders {
                out.push_str(&holder_line(h, "holder", &info.clients));
            }
        }
        ObjectState::FencedLock(lock) => {
            let state = if lock.holders.is_empty() {
                "free"
            } else {
                "held"
            };
            let token = lock
                .last_token
                .map_or("none".to_string(), |t| t.to_string());
            out.push_str(&format!(
                "{name}: fenced lock, {state}, last token {token}, {expiry}\n"
            ));
            for h in &lock.holders {
                out.push_str(&holder_line(h, "holder", &info.clients));
            }
        }
        ObjectState::FairLock(fair) => {
            out.push_str(&format!(
                "{name}: fair lock, {}, {} waiting, {expiry}\n",
                if fair.holders.is_empty() {
                    "free"
                } else {
                    "held"
                },
                fair.queue_length
            ));
            for h in &fair.holders {
                out.push_str(&holder_line(h, "holder", &info.clients));
            }
            for (i, w) in fair.queue.iter().enumerate() {
                let deadline = match w.deadline_ms {
                    Some(at) if w.overdue => format!("deadline passed {}", from_now(at)),
                    Some(at) => format!("gives up {}", from_now(at)),
                    None => "no deadline".into(),
                };
                out.push_str(&format!(
                    "  {}. client {} owner {}, {deadline}\n",
                    i + 1,
                    w.client_id,
                    w.owner
                ));
                out.push_str(&who_line(&info.clients, &w.client_id));
            }
            for w in &fair.stray_deadlines {
                out.push_str(&format!(
                    "  deadline without a place in line: {} ({})\n",
                    w.field,
                    w.deadline_ms.map_or("?".into(), from_now)
                ));
            }
        }
        ObjectState::ReadWriteLock(rw) => {
            let mode = match rw.mode {
                Some(RwMode::Read) => "read",
                Some(RwMode::Write) => "write",
                None => "no mode",
            };
            out.push_str(&format!("{name}: read-write lock, mode {mode}, {expiry}\n"));
            if let Some(w) = &rw.writer {
                out.push_str(&holder_line(w, "writer", &info.clients));
            }
            for r in &rw.readers {
                out.push_str(&holder_line(&r.holder, "reader", &info.clients));
                for hold in &r.holds {
                    let left = match (hold.exists, hold.ttl_ms) {
                        (false, _) => "missing".to_string(),
                        (true, Some(ms)) => {
                            format!("expires in {}", short_duration(Duration::from_millis(ms)))
                        }
                        (true, None) => "no TTL".into(),
                    };
                    out.push_str(&format!("    hold {} {} ({left})\n", hold.n, hold.key));
                }
            }
        }
        ObjectState::MultiLockGroup(group) => {
            out.push_str(&format!("{name}: group multi lock, {expiry}\n"));
            for m in &group.members {
                out.push_str(&format!(
                    "  value {}: client {} owner {}, hold count {}{}\n",
                    m.hash,
                    m.holder.client_id,
                    m.holder.owner,
                    m.holder.hold_count,
                    m.expires_at_ms
                        .map_or(String::new(), |at| format!(", expires {}", from_now(at)))
                ));
                out.push_str(&who_line(&info.clients, &m.holder.client_id));
            }
        }
        ObjectState::Semaphore(s) => out.push_str(&format!(
            "{name}: semaphore, {} permit(s) available, {expiry}\n",
            s.permits
        )),
        ObjectState::ExpirableSemaphore(s) => {
            let available = s
                .available
                .map_or("no key".to_string(), |n| format!("{n} permit(s) available"));
            out.push_str(&format!(
                "{name}: expirable semaphore, {available}, {} leased\n",
                s.leases_total
            ));
            for lease in &s.leases {
                let end = match lease.expires_at_ms {
                    None => "never expires".to_string(),
                    Some(at) if lease.expired => format!("ended {}", from_now(at)),
                    Some(at) => format!("expires {}", from_now(at)),
                };
                out.push_str(&format!("  permit {} {end}\n", lease.id));
            }
        }
        ObjectState::CountDownLatch(l) => {
            out.push_str(&format!("{name}: count-down latch, count {}\n", l.count))
        }
        ObjectState::Counter(c) => out.push_str(&format!(
            "{name}: a counter of {} (a semaphore's permits or a latch's count: nobody waits \
             on either channel to tell which), {expiry}\n",
            c.value
        )),
        _ => out.push_str(&format!("{name}: {}\n", info.kind())),
    }
    for c in &info.channels {
        out.push_str(&format!(
            "  channel {}: {} subscriber(s)\n",
            c.channel, c.subscribers
        ));
    }
    out
}
