//! `doctor`: what crashes and old clients leave behind, whether it matters,
//! and (`--fix`) removing what provably nobody can be using.

use std::time::Duration;

use redisson_lock::inspect::{ObjectKind, ObjectState, ObjectSummary, QueuedWaiter, SideKeyRole};
use redisson_lock::{naming, RedissonClient, Reply};
use serde::Serialize;

use crate::ls::short_duration;
use crate::{connect_read_only, Cli};

/// The lifetime `--fix` gives a latch without a TTL: longer than any
/// client's retry budget with default settings (Redisson's 16-20 s, this
/// crate's 16-24 s), as the latch would have had.
const LATCH_TTL: Duration = Duration::from_secs(60);

const FAIR_PRUNE: &str = include_str!("../lua/doctor/fair_prune.lua");
const READ_HOLD_DROP: &str = include_str!("../lua/doctor/read_hold_drop.lua");
const LATCH_EXPIRE: &str = include_str!("../lua/doctor/latch_expire.lua");

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Object names to check, as a Redis glob.
    #[arg(default_value = "*")]
    pattern: String,
    /// Keys each SCAN call examines (see `ls --count`).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    count: u32,
    /// Remove (or, for latches, give a TTL to) what provably nobody can be
    /// using, re-checked atomically on Redis; print each change.
    #[arg(long)]
    fix: bool,
    /// Print a JSON array of findings instead of text.
    #[arg(long)]
    json: bool,
}

/// One thing left behind.
#[derive(Serialize)]
struct Finding {
    /// The object's name.
    name: String,
    /// Which check found it.
    check: &'static str,
    /// The key concerned.
    key: String,
    /// What was found.
    detail: String,
    /// Whether it gets in anyone's way or never goes away by itself.
    harmful: bool,
    /// Why it is harmless, or what it blocks.
    why: String,
    /// What `--fix` does about it; `None`: nothing (and what to do instead is in `why`).
    fix: Option<String>,
    /// With `--fix`: whether the change was made (`false`: the state had
    /// changed, and there was nothing left to fix).
    fixed: Option<bool>,
    /// What a fair-lock finding was judged on; `None` for the other checks.
    evidence: Option<Evidence>,
    #[serde(skip)]
    repair: Option<Repair>,
}

/// What a fair-lock waiter's finding was judged on.
#[derive(Serialize)]
struct Evidence {
    /// Its place in line, from 1; `None` for a deadline with no place.
    place: Option<usize>,
    /// Its deadline (wall-clock ms, written by its own client).
    deadline_ms: Option<i64>,
    /// The server's clock (`TIME` on the lock's node) when doctor read it:
    /// deadlines are judged by it, never by the clock of the CLI's host.
    server_time_ms: i64,
    /// Its own channel, on which its client is told when its turn comes.
    channel: String,
    /// Connections subscribed to that channel (classic and sharded, on
    /// every primary); `None` for a deadline with no place, whose channel
    /// is not read.
    subscribers: Option<u64>,
}

/// A fix, as a script that re-checks before it changes anything.
enum Repair {
    Script {
        script: &'static str,
        keys: Vec<String>,
        args: Vec<String>,
    },
    /// Return ended leases to the pool (any client's next call would).
    Reclaim(String),
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The clock of the node that holds `name`'s keys (`TIME` there), in ms.
/// Fair-lock deadlines are judged by it: a waiter is overdue when its
/// deadline is past for Redis, whatever the clock of the host doctor runs on.
async fn server_time_ms(client: &RedissonClient, name: &str) -> Result<i64, String> {
    let reply = client
        .command(Some(name), "TIME", Vec::<&str>::new())
        .await
        .map_err(|e| format!("reading the server's clock (TIME): {e}"))?;
    time_ms(&reply).ok_or_else(|| format!("unexpected reply to TIME: {reply:?}"))
}

/// A `TIME` reply (seconds, microseconds) in ms; `None` for any other shape,
/// or numbers no clock gives (checked: they are whatever came back).
fn time_ms(reply: &Reply) -> Option<i64> {
    let parts: Vec<i64> = match reply {
        Reply::Array(parts) => parts.iter().filter_map(Reply::as_i64).collect(),
        _ => vec![],
    };
    match parts[..] {
        [secs, micros] if secs >= 0 && (0..1_000_000).contains(&micros) => {
            secs.checked_mul(1000)?.checked_add(micros / 1000)
        }
        _ => None,
    }
}

pub async fn doctor(cli: &Cli, args: &DoctorArgs) -> Result<u8, String> {
    let client = connect_read_only(cli).await?;
    let outcome = examine(&client, args).await;
    client.shutdown().await;
    let findings = outcome?;
    let harmful_left = findings
        .iter()
        .filter(|f| f.harmful && f.fixed != Some(true))
        .count();
    if args.json {
        crate::print_json(&serde_json::json!({ "findings": findings }))?;
    } else {
        for f in &findings {
            println!("{}: {} ({})", f.name, f.detail, f.key);
            let verdict = if f.harmful { "harmful" } else { "harmless" };
            println!("  {verdict}: {}", f.why);
            match (&f.fix, f.fixed) {
                (Some(fix), Some(true)) => println!("  fixed: {fix}"),
                (Some(_), Some(false)) => {
                    println!("  nothing to fix any more: the state had changed")
                }
                (Some(fix), None) => println!("  fix: {fix} (doctor --fix)"),
                (None, _) => {}
            }
        }
        let harmful = findings.iter().filter(|f| f.harmful).count();
        println!(
            "{} finding(s), {harmful} harmful{}",
            findings.len(),
            if args.fix {
                format!(", {harmful_left} left")
            } else {
                String::new()
            }
        );
    }
    Ok(if harmful_left > 0 { 1 } else { 0 })
}

async fn examine(client: &RedissonClient, args: &DoctorArgs) -> Result<Vec<Finding>, String> {
    let objects = client
        .scan_objects(&args.pattern, args.count)
        .await
        .map_err(text)?;
    let mut findings = vec![];
    for o in &objects {
        lock_without_ttl(o, &mut findings);
        fenced_token_alone(o, &mut findings);
        orphan_read_holds(o, &mut findings);
        latches_without_ttl(o, &mut findings);
        ended_leases(o, &mut findings);
        if o.kind == ObjectKind::FairLock {
            fair_line(client, o, &mut findings).await?;
        }
    }
    if args.fix {
        for f in &mut findings {
            if let Some(repair) = f.repair.take() {
                f.fixed = Some(apply(client, repair).await?);
            }
        }
    }
    Ok(findings)
}

fn lock_without_ttl(o: &ObjectSummary, out: &mut Vec<Finding>) {
    let lock = matches!(
        o.kind,
        ObjectKind::Lock
            | ObjectKind::FairLock
            | ObjectKind::FencedLock
            | ObjectKind::ReadWriteLock
            | ObjectKind::MultiLockGroup
    );
    if !(lock && o.no_ttl) {
        return;
    }
    let holders: Vec<String> = o
        .holders
        .iter()
        .chain(&o.writer)
        .map(|h| format!("{}:{}", h.client_id, h.owner))
        .collect();
    out.push(Finding {
        name: o.name.clone(),
        check: "lock-without-ttl",
        key: o.name.clone(),
        detail: format!(
            "{} key without a TTL, held by {}",
            o.kind,
            holders.join(", ")
        ),
        harmful: true,
        why: "every lock client writes its locks with a lease, so this key was written by hand \
              or restored without its TTL; nothing expires it, and if its holder is gone it \
              blocks everyone for good. Check that holder, then `redisson-lock force-unlock NAME`"
            .into(),
        fix: None,
        fixed: None,
        evidence: None,
        repair: None,
    });
}

fn fenced_token_alone(o: &ObjectSummary, out: &mut Vec<Finding>) {
    if o.kind != ObjectKind::FencedLock || !o.holders.is_empty() {
        return;
    }
    out.push(Finding {
        name: o.name.clone(),
        check: "fenced-token-without-lock",
        key: naming::token_name(&o.name),
        detail: format!(
            "fenced lock token {} with no lock held",
            o.last_token.map_or("?".into(), |t| t.to_string())
        ),
        harmful: false,
        why: "a free fenced lock keeps its counter so that the next holder's token is larger; \
              deleting it would restart tokens at 1, and every resource fenced with the old \
              tokens would refuse new holders. Keep it"
            .into(),
        fix: None,
        fixed: None,
        evidence: None,
        repair: None,
    });
}

fn orphan_read_holds(o: &ObjectSummary, out: &mut Vec<Finding>) {
    for side in &o.side_keys {
        let SideKeyRole::ReadHold { field, n } = &side.role else {
            continue;
        };
        let held = if o.kind == ObjectKind::ReadWriteLock {
            o.holders
                .iter()
                .find(|h| format!("{}:{}", h.client_id, h.owner) == *field)
                .map_or(0, |h| h.hold_count)
        } else {
            0
        };
        if held >= *n {
            continue;
        }
        let left = match (side.ttl_ms, side.no_ttl) {
            (Some(ms), _) => format!(
                "it expires in {}",
                short_duration(Duration::from_millis(ms))
            ),
            _ => "it has no TTL and never expires".into(),
        };
        out.push(Finding {
            name: o.name.clone(),
            check: "read-hold-without-reader",
            key: side.key.clone(),
            detail: format!("read hold {n} of {field}, whose reader holds {held}"),
            harmful: false,
            why: format!(
                "only the holds a reader still has are read (a force unlock or delete leaves \
                 these behind); {left}"
            ),
            fix: Some("delete it, if the reader still does not hold it".into()),
            fixed: None,
            evidence: None,
            repair: Some(Repair::Script {
                script: READ_HOLD_DROP,
                keys: vec![o.name.clone(), side.key.clone()],
                args: vec![field.clone(), n.to_string()],
            }),
        });
    }
}

fn latches_without_ttl(o: &ObjectSummary, out: &mut Vec<Finding>) {
    for side in o.side_keys.iter().filter(|s| s.no_ttl) {
        let what = match &side.role {
            SideKeyRole::UnlockLatch { .. } => "unlock latch",
            SideKeyRole::RequestLatch { .. } => "request latch",
            _ => continue,
        };
        out.push(Finding {
            name: o.name.clone(),
            check: "latch-without-ttl",
            key: side.key.clone(),
            detail: format!("{what} without a TTL"),
            harmful: false,
            why: "a latch only answers a retry of its own request, whose id is never reused, \
                  but without a TTL it is never removed (every client writes latches with one)"
                .into(),
            fix: Some(format!(
                "give it the {}s TTL a latch gets, after which it expires",
                LATCH_TTL.as_secs()
            )),
            fixed: None,
            evidence: None,
            repair: Some(Repair::Script {
                script: LATCH_EXPIRE,
                keys: vec![side.key.clone()],
                args: vec![LATCH_TTL.as_millis().to_string()],
            }),
        });
    }
}

fn ended_leases(o: &ObjectSummary, out: &mut Vec<Finding>) {
    if o.kind != ObjectKind::ExpirableSemaphore || o.expired_leases == 0 {
        return;
    }
    out.push(Finding {
        name: o.name.clone(),
        check: "ended-permit-lease",
        key: naming::permit_timeout_name(&o.name),
        detail: format!("{} permit lease(s) past their end", o.expired_leases),
        harmful: false,
        why: "the permits of ended leases go back to the pool at any client's next call on the \
              semaphore, which also wakes its waiters"
            .into(),
        fix: Some("return them to the pool now (and wake waiters)".into()),
        fixed: None,
        evidence: None,
        repair: (o.value.is_some()).then(|| Repair::Reclaim(o.name.clone())),
    });
}

async fn fair_line(
    client: &RedissonClient,
    o: &ObjectSummary,
    out: &mut Vec<Finding>,
) -> Result<(), String> {
    let info = client.inspect(&o.name).await.map_err(text)?;
    let ObjectState::FairLock(fair) = info.state else {
        return Ok(());
    };
    if fair.queue.is_empty() && fair.stray_deadlines.is_empty() {
        return Ok(());
    }
    let now = server_time_ms(client, &o.name).await?;
    let queue = naming::fair_queue_name(&o.name);
    let deadlines = naming::fair_timeout_name(&o.name);
    // The script re-checks each deadline against `TIME` on its node.
    let prune = |field: &str| Repair::Script {
        script: FAIR_PRUNE,
        keys: vec![queue.clone(), deadlines.clone()],
        args: vec![field.to_string()],
    };
    let evidence = |place: Option<usize>, w: &QueuedWaiter| Evidence {
        place,
        deadline_ms: w.deadline_ms,
        server_time_ms: now,
        channel: naming::fair_waiter_channel(&o.name, &w.field),
        subscribers: place.map(|_| w.subscribers),
    };
    for (place, w) in fair.queue.iter().enumerate() {
        let (check, detail, harmful, why) = match w.deadline_ms {
            None => (
                "fair-waiter-without-deadline",
                format!("waiter {} (place {}) has no deadline", w.field, place + 1),
                true,
                "fair-lock scripts stop clearing the line at a waiter without a deadline: \
                 while it is first, nobody else gets the lock until that owner takes it"
                    .to_string(),
            ),
            Some(at) if at <= now => (
                "fair-waiter-overdue",
                format!(
                    "waiter {} (place {}) is past its deadline by {} (server time)",
                    w.field,
                    place + 1,
                    short_duration(Duration::from_millis(now.saturating_sub(at) as u64))
                ),
                false,
                "it gave up or died (Redisson's lock() leaves its place when interrupted); \
                 the next fair-lock script that finds it first in line removes it"
                    .to_string(),
            ),
            Some(at) if w.subscribers == 0 => {
                let evidence = evidence(Some(place + 1), w);
                out.push(probably_gone(o, w, at - now, evidence));
                continue;
            }
            _ => continue,
        };
        out.push(Finding {
            name: o.name.clone(),
            check,
            key: queue.clone(),
            detail,
            harmful,
            why,
            fix: Some("remove it from the line, if it has still no future deadline".into()),
            fixed: None,
            evidence: Some(evidence(Some(place + 1), w)),
            repair: Some(prune(&w.field)),
        });
    }
    for w in &fair.stray_deadlines {
        if w.deadline_ms.is_some_and(|at| at > now) {
            continue;
        }
        out.push(Finding {
            name: o.name.clone(),
            check: "fair-stray-deadline",
            key: deadlines.clone(),
            detail: format!("past deadline of {}, who has no place in line", w.field),
            harmful: false,
            why: "a deadline without a place in line is never read for the line's order".into(),
            fix: Some("remove it, if still past".into()),
            fixed: None,
            evidence: Some(evidence(None, w)),
            repair: Some(prune(&w.field)),
        });
    }
    Ok(())
}

/// A waiter before its deadline that nobody listens for: every waiting
/// Redisson or redisson-lock client is subscribed to its own channel for as
/// long as it waits, so 0 subscribers most likely means its process died in
/// line (or has lost its connection). Nothing is fixed: Redisson's scripts
/// keep it until its deadline, `left_ms` from now by the server's clock.
fn probably_gone(o: &ObjectSummary, w: &QueuedWaiter, left_ms: i64, evidence: Evidence) -> Finding {
    let left = short_duration(Duration::from_millis(left_ms.max(0) as u64));
    let queue = naming::fair_queue_name(&o.name);
    let place = evidence.place.unwrap_or_default();
    let channel = &evidence.channel;
    Finding {
        name: o.name.clone(),
        check: "fair-waiter-probably-gone",
        key: queue.clone(),
        detail: format!(
            "waiter {} (place {place}) is probably gone: 0 subscribers on its channel; \
             its deadline is in {left} (server time)",
            w.field
        ),
        harmful: true,
        why: format!(
            "a waiting client listens on its own channel {channel} until it gets the lock or \
             gives up, and nobody does: its process most likely died in line (or lost its \
             connection). It keeps its place until its deadline, and until then nobody \
             behind it gets the lock: once its turn comes the lock stays free for it, and the \
             waiters behind it (Redisson's poll Redis in a tight loop) get theirs only after \
             that deadline. Redisson's scripts remove it only then, and so does doctor --fix. \
             If client {} is known to be gone, removing it earlier by hand is safe: \
             LREM {queue} 0 {field} and ZREM {} {field}",
            w.client_id,
            naming::fair_timeout_name(&o.name),
            field = w.field,
        ),
        fix: None,
        fixed: None,
        evidence: Some(evidence),
        repair: None,
    }
}

/// Runs one repair; whether it changed anything.
async fn apply(client: &RedissonClient, repair: Repair) -> Result<bool, String> {
    match repair {
        Repair::Reclaim(name) => {
            // Reading the count runs the semaphore's reclaim, as every call does.
            let semaphore = client.permit_expirable_semaphore(&name).map_err(text)?;
            semaphore.available_permits().await.map_err(text)?;
            Ok(true)
        }
        Repair::Script { script, keys, args } => {
            // Routed by its first key's slot: every key of a repair shares it.
            let first = keys.first().cloned();
            let mut argv: Vec<String> = vec![script.to_string(), keys.len().to_string()];
            argv.extend(keys);
            argv.extend(args);
            // Sent once: a lost reply is reported, and a second doctor run
            // re-checks (every repair re-checks before it changes anything).
            let reply = client
                .command(first.as_deref(), "EVAL", argv)
                .await
                .map_err(|e| format!("{e} (run doctor again to see what is left)"))?;
            Ok(reply.as_i64().unwrap_or(0) > 0)
        }
    }
}

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn a_time_reply_of_any_shape_is_read_without_panicking() {
        let time = |secs: Reply, micros: Reply| Reply::Array(vec![secs, micros]);
        let text = |t: &str| Reply::Text(t.to_string());
        assert_eq!(
            time_ms(&time(text("1700000000"), text("123456"))),
            Some(1_700_000_000_123)
        );
        for garbage in [
            Reply::Nil,
            Reply::Integer(7),
            Reply::Array(vec![]),
            Reply::Array(vec![Reply::Integer(1)]),
            time(Reply::Integer(i64::MAX), Reply::Integer(0)),
            time(Reply::Integer(-1), Reply::Integer(0)),
            time(Reply::Integer(1), Reply::Integer(-5)),
            time(Reply::Integer(1), Reply::Integer(i64::MAX)),
            time(text("x"), text("y")),
        ] {
            assert_eq!(time_ms(&garbage), None, "{garbage:?}");
        }
    }
}
