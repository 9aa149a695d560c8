//! `status` and `force-unlock`.

use redisson_lock::Ttl;
use serde::Serialize;

use crate::{connect, connect_read_only, Cli};

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Object name: the lock's, semaphore's or latch's key.
    name: String,
    /// What the key is. `auto` reads its Redis type: a hash is a lock, a
    /// string with a `{NAME}:timeout` sorted set an expirable semaphore, any
    /// other string a counter (a semaphore's permits or a latch's count).
    #[arg(long, value_enum, default_value = "auto")]
    kind: Kind,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Exit 1 when taking the object now would wait (a lock with a holder, a
    /// semaphore without a free permit, a latch not yet at zero), 0
    /// otherwise, 2 on an error.
    #[arg(long)]
    pub exit_code: bool,
}

/// The kinds `status` reads, named as `inspect` and `ls` name them (the
/// short names of earlier versions are aliases).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Kind {
    Auto,
    Lock,
    Semaphore,
    ExpirableSemaphore,
    #[value(alias = "latch")]
    CountDownLatch,
}

#[derive(clap::Args)]
pub struct ForceUnlockArgs {
    /// Lock name.
    name: String,
    /// Which lock it is: each kind's waiters listen on their own channel.
    /// `auto` reads the keys: a hash with a `mode` field is a read-write
    /// lock, one with a fair queue beside it a fair lock, any other a lock.
    #[arg(long, value_enum, default_value = "auto")]
    kind: LockKind,
    /// Remove it only while this holder (`<client-id>:<owner>`, as `status`
    /// shows it) still holds it, checked inside the script: a holder that
    /// took the lock since you looked keeps it.
    #[arg(long, value_name = "CLIENT-ID:OWNER", value_parser = parse_holder)]
    if_holder: Option<(String, String)>,
    /// Say what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print JSON (`{"name": ..., "kind": ..., "removed": true}`, and the
    /// holders with --dry-run) instead of text.
    #[arg(long)]
    json: bool,
}

/// `<client-id>:<owner>`: the owner after the last colon.
fn parse_holder(text: &str) -> Result<(String, String), String> {
    match text.rsplit_once(':') {
        Some((client, owner)) if !client.is_empty() && owner.parse::<u64>().is_ok() => {
            Ok((client.to_string(), owner.to_string()))
        }
        _ => Err(format!(
            "`{text}` is not CLIENT-ID:OWNER (a holder as `status` shows it, such as \
             4d6f...e2:57)"
        )),
    }
}

/// The lock kinds, named as `inspect` and `ls` name them (`fair` and
/// `read-write` are aliases).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LockKind {
    Auto,
    /// An RLock (also a fenced or spin lock).
    Lock,
    /// An RFairLock: the first waiter in line is woken on its own channel.
    #[value(alias = "fair")]
    FairLock,
    /// An RReadWriteLock, in whichever mode it is held.
    #[value(alias = "read-write")]
    ReadWriteLock,
}

#[derive(Serialize)]
struct Status {
    name: String,
    /// "lock", "semaphore", "expirable-semaphore", "count-down-latch", "counter" (a
    /// string that `auto` cannot tell apart), "absent", or "other".
    kind: &'static str,
    /// The Redis type of the key.
    redis_type: String,
    holders: Vec<redisson_lock::Holder>,
    /// Who each holder's client is, by client id, from the client registry
    /// (null: unregistered).
    clients: crate::ls::Clients,
    /// Remaining TTL in ms; null when absent or without TTL.
    ttl_ms: Option<u64>,
    /// Semaphores: permits available now.
    #[serde(skip_serializing_if = "Option::is_none")]
    permits_available: Option<i64>,
    /// Expirable semaphores: the leased permits.
    #[serde(skip_serializing_if = "Option::is_none")]
    leases: Option<Vec<Lease>>,
    /// Latches and counters: the value of the string.
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<i64>,
}

#[derive(Serialize)]
struct Lease {
    id: String,
    /// Wall-clock end of the lease in ms since the epoch; null: never ends.
    expires_at_ms: Option<u64>,
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub async fn status(cli: &Cli, args: &StatusArgs) -> Result<u8, String> {
    let client = connect_read_only(cli).await?;
    let status = read(&client, args).await;
    client.shutdown().await;
    let status = status?;
    if args.json {
        crate::print_json(&status)?;
    } else {
        print(&status);
    }
    Ok(if args.exit_code && status.would_wait() {
        1
    } else {
        0
    })
}

impl Status {
    /// Whether taking the object now would wait.
    fn would_wait(&self) -> bool {
        match self.kind {
            "lock" => !self.holders.is_empty(),
            "semaphore" | "expirable-semaphore" => self.permits_available.unwrap_or(0) <= 0,
            "count-down-latch" => self.count.unwrap_or(0) > 0,
            _ => false,
        }
    }
}

async fn read(client: &redisson_lock::RedissonClient, args: &StatusArgs) -> Result<Status, String> {
    let name = &args.name;
    let key_type = |key: String| async move {
        let reply = client
            .command(Some(&key), "TYPE", [&key])
            .await
            .map_err(text)?;
        Ok::<_, String>(reply.as_str().unwrap_or("none").to_string())
    };
    let redis_type = key_type(name.clone()).await?;
    let kind = match (args.kind, redis_type.as_str()) {
        (_, "none") => "absent",
        (Kind::Auto | Kind::Lock, "hash") => "lock",
        (Kind::Auto, "string") => {
            let leases = client
                .permit_expirable_semaphore(name)
                .map_err(text)?
                .leases_key();
            let leases_type = key_type(leases).await?;
            if leases_type == "zset" {
                "expirable-semaphore"
            } else {
                "counter"
            }
        }
        (Kind::Semaphore, "string") => "semaphore",
        (Kind::ExpirableSemaphore, "string") => "expirable-semaphore",
        (Kind::CountDownLatch, "string") => "count-down-latch",
        _ => "other",
    };
    let mut status = Status {
        name: name.clone(),
        kind,
        redis_type,
        holders: vec![],
        clients: Default::default(),
        ttl_ms: None,
        permits_available: None,
        leases: None,
        count: None,
    };
    let ttl = client
        .command(Some(name), "PTTL", [name])
        .await
        .map_err(text)?
        .as_i64()
        .unwrap_or(-2);
    status.ttl_ms = u64::try_from(ttl).ok();
    match kind {
        "lock" => {
            let lock = client.lock(name).map_err(text)?;
            status.holders = lock.holders().await.map_err(text)?;
            for h in &status.holders {
                // Unreadable (an ACL without the registry's keys): unknown,
                // left out, and the rest shown.
                if let Ok(identity) = client.client_identity(&h.client_id).await {
                    status.clients.insert(h.client_id.clone(), identity);
                }
            }
            if let Ttl::Expires(ttl) = lock.remaining_ttl().await.map_err(text)? {
                status.ttl_ms = Some(ttl.as_millis() as u64);
            }
        }
        "semaphore" => {
            let semaphore = client.semaphore(name).map_err(text)?;
            status.permits_available = Some(semaphore.available_permits().await.map_err(text)?);
        }
        "expirable-semaphore" => {
            let semaphore = client.permit_expirable_semaphore(name).map_err(text)?;
            status.permits_available = Some(semaphore.available_permits().await.map_err(text)?);
            let leases = semaphore.leases().await.map_err(text)?;
            status.leases = Some(
                leases
                    .into_iter()
                    .map(|l| Lease {
                        id: l.id.to_string(),
                        expires_at_ms: l.expires_at_ms.map(|ms| ms.max(0) as u64),
                    })
                    .collect(),
            );
        }
        "count-down-latch" | "counter" => {
            let value = client
                .command(Some(name), "GET", [name])
                .await
                .map_err(text)?;
            let value = value.as_str().map(str::to_string);
            status.count = value.and_then(|v| v.trim().parse().ok());
            if status.count.is_none() {
                status.kind = "other";
            }
        }
        _ => {}
    }
    Ok(status)
}

fn print(status: &Status) {
    let name = &status.name;
    let ttl = status.ttl_ms.map_or("no TTL".to_string(), |ms| {
        format!(
            "expires in {}",
            humantime::format_duration(std::time::Duration::from_millis(ms))
        )
    });
    match status.kind {
        "absent" => println!("{name}: free (no such key)"),
        "other" => println!(
            "{name}: not a lock, semaphore or latch: the key holds a {}",
            status.redis_type
        ),
        "lock" => {
            println!("{name}: held, {ttl}");
            for h in &status.holders {
                println!(
                    "  client {} owner {} hold count {}",
                    h.client_id, h.owner, h.hold_count
                );
                println!("    who: {}", crate::ls::who(&status.clients, &h.client_id));
            }
        }
        "semaphore" => println!(
            "{name}: semaphore, {} permits available, {ttl}",
            status.permits_available.unwrap_or(0)
        ),
        "expirable-semaphore" => {
            let leases = status.leases.as_deref().unwrap_or_default();
            println!(
                "{name}: expirable semaphore, {} permits available, {} leased",
                status.permits_available.unwrap_or(0),
                leases.len()
            );
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64;
            for lease in leases {
                match lease.expires_at_ms {
                    Some(at) => println!(
                        "  permit {} expires in {}",
                        lease.id,
                        humantime::format_duration(std::time::Duration::from_millis(
                            at.saturating_sub(now)
                        ))
                    ),
                    None => println!("  permit {} never expires", lease.id),
                }
            }
        }
        "count-down-latch" => println!(
            "{name}: count-down latch, count {}",
            status.count.unwrap_or(0)
        ),
        _ => println!(
            "{name}: a counter of {} (a semaphore's permits or a latch's count; \
             say which with --kind), {ttl}",
            status.count.unwrap_or(0)
        ),
    }
}

/// Exits 0 when a lock was removed (or would be, with --dry-run), 1 when
/// nothing was: the lock was free, or not held by --if-holder.
pub async fn force_unlock(cli: &Cli, args: &ForceUnlockArgs) -> Result<u8, String> {
    let client = if args.dry_run {
        connect_read_only(cli).await?
    } else {
        connect(cli).await?
    };
    let outcome = force_unlock_kind(&client, args).await;
    client.shutdown().await;
    let Outcome {
        kind,
        removed,
        holders,
    } = outcome?;
    let name = &args.name;
    if args.json {
        let mut report = serde_json::json!({ "name": name, "kind": kind, "removed": removed });
        if args.dry_run {
            report["dry_run"] = true.into();
            report["holders"] = serde_json::to_value(&holders).map_err(|e| e.to_string())?;
        }
        crate::print_json(&report)?;
    } else {
        // In words: `fair lock`, as the JSON's `fair-lock`.
        let kind = kind.replace('-', " ");
        let whose = match &args.if_holder {
            Some((client, owner)) => format!(" by {client}:{owner}"),
            None => String::new(),
        };
        match (removed, args.dry_run) {
            (true, false) => println!("{name}: {kind} removed; waiters notified"),
            (true, true) => println!(
                "{name}: {kind} held by {}; would be removed (dry run)",
                held_by(&holders)
            ),
            (false, true) if !holders.is_empty() => println!(
                "{name}: {kind} held by {}, not{whose}; nothing would be removed (dry run)",
                held_by(&holders)
            ),
            (false, _) if whose.is_empty() => println!("{name}: no lock to remove"),
            (false, _) => println!("{name}: no lock held{whose}; nothing removed"),
        }
    }
    Ok(if removed { 0 } else { 1 })
}

/// `client:owner (2 holds), ...`.
fn held_by(holders: &[redisson_lock::Holder]) -> String {
    holders
        .iter()
        .map(|h| format!("{}:{} ({} holds)", h.client_id, h.owner, h.hold_count))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `force-unlock` did, or with --dry-run would do.
struct Outcome {
    kind: &'static str,
    /// Removed, or with --dry-run, would be.
    removed: bool,
    /// With --dry-run, the holders read.
    holders: Vec<redisson_lock::Holder>,
}

/// Force-unlocks `args.name` as the kind it is (or is said to be), with
/// that kind's script, so the message goes where its waiters listen.
async fn force_unlock_kind(
    client: &redisson_lock::RedissonClient,
    args: &ForceUnlockArgs,
) -> Result<Outcome, String> {
    use redisson_lock::inspect::ObjectKind;
    let name = &args.name;
    let kind = match args.kind {
        LockKind::Auto => match client.inspect(name).await.map_err(text)?.kind() {
            ObjectKind::FairLock => LockKind::FairLock,
            ObjectKind::ReadWriteLock => LockKind::ReadWriteLock,
            _ => LockKind::Lock,
        },
        kind => kind,
    };
    Ok(match kind {
        LockKind::FairLock => {
            Outcome::of("fair-lock", &client.fair_lock(name).map_err(text)?, args).await?
        }
        LockKind::ReadWriteLock => {
            let lock = client.read_write_lock(name).map_err(text)?;
            match lock.mode().await.map_err(text)? {
                Some(redisson_lock::RwMode::Read) => {
                    Outcome::of("read-write-lock", &lock.read(), args).await?
                }
                Some(redisson_lock::RwMode::Write) => {
                    Outcome::of("read-write-lock", &lock.write(), args).await?
                }
                None => Outcome {
                    kind: "read-write-lock",
                    removed: false,
                    holders: vec![],
                },
            }
        }
        LockKind::Auto | LockKind::Lock => {
            Outcome::of("lock", &client.lock(name).map_err(text)?, args).await?
        }
    })
}

impl Outcome {
    /// Removes `lock` (with --if-holder, only while that holder is in it),
    /// or with --dry-run reads who holds it.
    async fn of<K: redisson_lock::kind::Kind>(
        kind: &'static str,
        lock: &redisson_lock::Lock<K>,
        args: &ForceUnlockArgs,
    ) -> Result<Outcome, String> {
        let only = args.if_holder.as_ref();
        if args.dry_run {
            let holders = lock.holders().await.map_err(text)?;
            let removed = match only {
                Some((client, owner)) => holders
                    .iter()
                    .any(|h| &h.client_id == client && &h.owner == owner),
                None => !holders.is_empty(),
            };
            return Ok(Outcome {
                kind,
                removed,
                holders,
            });
        }
        let removed = match only {
            Some((client, owner)) => lock.force_unlock_if_held_by(client, owner).await,
            None => lock.force_unlock().await,
        };
        Ok(Outcome {
            kind,
            removed: removed.map_err(text)?,
            holders: vec![],
        })
    }
}
