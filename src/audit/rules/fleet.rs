//! The other clients: `java-watchdog` (the lease their watchdog renews
//! locks to, read from the TTLs of the locks they hold) and
//! `redisson-fields` (lock fields of a shape this crate cannot read).

use std::collections::BTreeMap;
use std::time::Duration;

use fred::types::Value;
use futures::future::join_all;

use super::{secs, Ctx};
use crate::audit::link::{int, text, Link, Trouble};
use crate::audit::report::{Finding, Severity};

/// `SCAN` calls per primary, and keys each examines: bounded work on a big keyspace.
const SCANS: usize = 20;
const SCAN_COUNT: &str = "1000";
/// Hashes read per primary.
const HASHES: usize = 500;

/// A hash field a Redisson client writes for a holder: `<client-id>:<owner>`
/// (a writer's ends in `:write`).
enum FieldShape {
    /// `<uuid>:<decimal>`: this crate reads it.
    Holder(String),
    /// Looks like a holder, but not one this crate can parse.
    Unreadable,
    /// Not a holder's field (`mode`, or another hash altogether).
    Other,
}

fn shape(field: &str) -> FieldShape {
    let field = field.strip_suffix(":write").unwrap_or(field);
    let Some((client, owner)) = field.rsplit_once(':') else {
        return FieldShape::Other;
    };
    let owner_like = !owner.is_empty()
        && owner
            .trim_start_matches('-')
            .chars()
            .all(|c| c.is_ascii_digit());
    let client_like = client.len() >= 8
        && client.contains('-')
        && client.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if !(owner_like && client_like) {
        return FieldShape::Other;
    }
    if is_uuid(client) && owner.parse::<i64>().is_ok() {
        FieldShape::Holder(client.to_string())
    } else {
        FieldShape::Unreadable
    }
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && s.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, 'a'..='f' | '-'))
}

/// What the lock hashes of one primary showed.
#[derive(Default)]
struct Sample {
    /// Per holding client: (locks, longest TTL in ms).
    clients: BTreeMap<String, (u64, u64)>,
    unreadable: Vec<String>,
    hashes: u64,
}

/// The findings, and the shortest lease other clients' holds show where
/// it is surely shorter than this client's (the lease-based rules judge by
/// it: those locks expire first).
pub(crate) async fn check(ctx: &Ctx<'_>) -> (Vec<Finding>, Option<Duration>) {
    let primaries: Vec<_> = ctx.seen.primaries().collect();
    let mut total = Sample::default();
    for node in primaries {
        let link = match &node.link {
            Ok(link) => link,
            Err(t) => return (unknown_both(&node.addr, t), None),
        };
        match sample(link, ctx.own_id).await {
            Ok(s) => {
                total.hashes += s.hashes;
                total.unreadable.extend(s.unreadable);
                for (client, (n, ttl)) in s.clients {
                    let entry = total.clients.entry(client).or_default();
                    entry.0 += n;
                    entry.1 = entry.1.max(ttl);
                }
            }
            Err(t) => return (unknown_both(&node.addr, &t), None),
        }
    }
    let (finding, shorter) = watchdog(ctx, &total);
    (vec![finding, fields(&total)], shorter)
}

fn unknown_both(target: &str, t: &Trouble) -> Vec<Finding> {
    vec![
        Finding::unknown("java-watchdog", target, format!("SCAN {t}")),
        Finding::unknown("redisson-fields", target, format!("SCAN {t}")),
    ]
}

async fn sample(link: &Link, own_id: Option<&str>) -> Result<Sample, Trouble> {
    let mut keys = vec![];
    let mut cursor = "0".to_string();
    for _ in 0..SCANS {
        let reply = link
            .ask("SCAN", &[&cursor, "COUNT", SCAN_COUNT, "TYPE", "hash"])
            .await?;
        let Value::Array(mut parts) = reply else {
            break;
        };
        let found = if parts.len() == 2 { parts.pop() } else { None };
        cursor = parts.first().and_then(text).unwrap_or_else(|| "0".into());
        if let Some(Value::Array(found)) = found {
            keys.extend(found.iter().filter_map(text));
        }
        if cursor == "0" || keys.len() >= HASHES {
            break;
        }
    }
    keys.truncate(HASHES);
    let reads = keys.iter().map(|key| async move {
        let (fields, ttl) = futures::join!(
            link.ask("HSCAN", &[key, "0", "COUNT", "20"]),
            link.ask("PTTL", &[key])
        );
        (key, fields, ttl)
    });
    let mut out = Sample::default();
    for (key, fields, ttl) in join_all(reads).await {
        let (Ok(Value::Array(page)), Ok(ttl)) = (fields, ttl) else {
            continue;
        };
        let ttl = int(&ttl).unwrap_or(-2);
        let names: Vec<String> = match page.get(1) {
            Some(Value::Array(items)) => items.chunks(2).filter_map(|kv| text(&kv[0])).collect(),
            _ => continue,
        };
        let shapes: Vec<FieldShape> = names
            .iter()
            .filter(|f| f.as_str() != "mode")
            .map(|f| shape(f))
            .collect();
        if shapes.is_empty() || shapes.iter().any(|s| matches!(s, FieldShape::Other)) {
            continue;
        }
        out.hashes += 1;
        if shapes.iter().any(|s| matches!(s, FieldShape::Unreadable)) {
            out.unreadable.push(key.clone());
            continue;
        }
        if ttl <= 0 {
            continue;
        }
        for s in shapes {
            if let FieldShape::Holder(client) = s {
                if Some(client.as_str()) == own_id {
                    continue;
                }
                let entry = out.clients.entry(client).or_default();
                entry.0 += 1;
                entry.1 = entry.1.max(ttl as u64);
            }
        }
    }
    Ok(out)
}

fn watchdog(ctx: &Ctx<'_>, sample: &Sample) -> (Finding, Option<Duration>) {
    let ours = ctx.own_lease();
    let base = Finding::new("java-watchdog", Severity::Ok, "deployment")
        .fact("watchdog_ms", ours.as_millis() as u64)
        .fact("holding_clients", sample.clients.len() as u64);
    if sample.clients.is_empty() {
        let finding = base
            .evidence(format!(
                "no lock held by another client (of {} lock hash(es) read): nothing to compare with lockWatchdogTimeout {}",
                sample.hashes,
                secs(ours)
            ))
            .why("the fleet's watchdog shows in the TTLs of the locks it holds; run the audit while the JVM services hold locks");
        return (finding, None);
    }
    // A watchdog lock is renewed every third of its lease back to the
    // whole lease, so its TTL lies in (2/3 W, W]: W is in [ttl, 1.5 ttl].
    let slack = Duration::from_millis(500);
    let mut odd = vec![];
    let mut seen = vec![];
    let mut longest = 0u64;
    // The least a surely shorter lease can be: its holds' longest TTL.
    let mut shorter: Option<Duration> = None;
    for (client, (locks, ttl)) in &sample.clients {
        let low = Duration::from_millis(*ttl);
        let high = Duration::from_millis(ttl.saturating_mul(3) / 2);
        longest = longest.max(*ttl);
        let short = &client[..8.min(client.len())];
        let line = format!(
            "{short}: {locks} lock(s), TTL up to {} (lease {}-{})",
            secs(low),
            secs(low),
            secs(high)
        );
        if ours > high + slack {
            shorter = Some(shorter.map_or(low, |s| s.min(low)));
        }
        if ours + slack < low || ours > high + slack {
            odd.push(line);
        } else {
            seen.push(line);
        }
    }
    let base = base.fact("longest_ttl_ms", longest);
    if odd.is_empty() {
        let finding = base
            .evidence(format!("{}; this client {}", seen.join("; "), secs(ours)))
            .why("the holders' TTLs fit this client's lockWatchdogTimeout");
        return (finding, None);
    }
    let finding = Finding {
        severity: Severity::Warn,
        ..base
    }
    .evidence(format!(
        "{}; this client's lockWatchdogTimeout {}",
        odd.join("; "),
        secs(ours)
    ))
    .why("leases differ across the fleet: a read-write lock's hash is renewed by each reader to its own lease, so a shorter one can let it expire under a holder that counts on a longer one")
    .fix("use the JVM fleet's lockWatchdogTimeout (Config::lock_watchdog_timeout, --watchdog-timeout); a lock taken with an explicit lease also shows here");
    (finding, shorter)
}

fn fields(sample: &Sample) -> Finding {
    let base = Finding::new("redisson-fields", Severity::Ok, "deployment")
        .fact("lock_hashes", sample.hashes)
        .fact("unreadable", sample.unreadable.len() as u64);
    if sample.unreadable.is_empty() {
        return base
            .evidence(format!(
                "{} lock hash(es) read, every holder field <uuid>:<owner>",
                sample.hashes
            ))
            .why("this crate reads every holder (holders(), inspect, ls, doctor)");
    }
    let shown: Vec<&str> = sample
        .unreadable
        .iter()
        .take(3)
        .map(String::as_str)
        .collect();
    Finding {
        severity: Severity::Warn,
        ..base
    }
    .evidence(format!(
        "{} lock hash(es) with holder fields this crate cannot parse: {}",
        sample.unreadable.len(),
        shown.join(", ")
    ))
    .why("holders written by a client with another id format are invisible to holders(), inspect, ls and doctor")
    .fix("check which client writes these fields (a Redisson fork or an old version), and keep its locks apart")
}
