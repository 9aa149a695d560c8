//! `scan_objects`: every object whose name matches a pattern, found with
//! `SCAN` on every primary and read with bounded commands.

use std::collections::{BTreeMap, HashSet};

use fred::types::config::Server;
use fred::types::Value;
use futures::future::{try_join_all, BoxFuture};

use super::glob;
use super::keys::{self, Derived, KeyName};
use super::read::{self, pairs, scan_page, HSCAN_COUNT};
use super::shape::{self, Counted, HashShape};
use super::wire::{int, text, ttl, Wire};
use super::{now_ms, ObjectKind, ObjectSummary, SideKey, SideKeyRole};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::naming;

/// The Redis types Redisson's keys have, one `SCAN ... TYPE` pass each.
const TYPES: [&str; 4] = ["hash", "string", "list", "zset"];

/// What the scan found of one object.
#[derive(Default)]
struct Found {
    /// Its own key, as a hash: (ttl, no ttl, fields).
    hash: Option<(Option<u64>, bool, Vec<(String, String)>)>,
    /// Its own key, as an integer string: (ttl, no ttl, value).
    counter: Option<(Option<u64>, bool, i64)>,
    /// Its own key exists but is not Redisson's.
    foreign: bool,
    queue_length: u64,
    /// The fair lock's deadline set exists; how many deadlines are past.
    deadlines: Option<u64>,
    token: Option<Option<i64>>,
    /// The lease set: (leases, ended ones).
    leases: Option<(u64, u64)>,
    side_keys: Vec<SideKey>,
}

/// One read's result, for the object `name`.
enum Update {
    Hash(Option<u64>, bool, Vec<(String, String)>),
    Counter(Option<u64>, bool, i64),
    Foreign,
    Queue(u64),
    Deadlines(u64),
    Token(Option<i64>),
    Leases(u64, u64),
    Side(SideKey),
}

pub(super) async fn scan(engine: &Engine, pattern: &str, count: u32) -> Result<Vec<ObjectSummary>> {
    let w = Wire::new(engine);
    let now = now_ms();
    let wide = glob::superset(pattern);
    let nodes = w.nodes()?;
    let per_node = try_join_all(
        nodes
            .iter()
            .map(|node| scan_node(&w, node, pattern, &wide, count, now)),
    )
    .await?;
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    for updates in per_node {
        for (name, update) in updates {
            apply(found.entry(name).or_default(), update);
        }
    }
    let mut objects: Vec<ObjectSummary> = found
        .into_iter()
        .filter_map(|(name, found)| summarize(name, found, &engine.id))
        .collect();
    count_subscribers(&w, &mut objects).await?;
    Ok(objects)
}

fn apply(found: &mut Found, update: Update) {
    match update {
        Update::Hash(ttl, no_ttl, fields) => found.hash = Some((ttl, no_ttl, fields)),
        Update::Counter(ttl, no_ttl, value) => found.counter = Some((ttl, no_ttl, value)),
        Update::Foreign => found.foreign = true,
        Update::Queue(n) => found.queue_length = n,
        Update::Deadlines(overdue) => found.deadlines = Some(overdue),
        Update::Token(token) => found.token = Some(token),
        Update::Leases(total, ended) => found.leases = Some((total, ended)),
        Update::Side(side) => {
            if !found.side_keys.iter().any(|s| s.key == side.key) {
                found.side_keys.push(side);
            }
        }
    }
}

/// Every pass on one node: `SCAN` pages of `count`, each page's keys read
/// together.
async fn scan_node(
    w: &Wire<'_>,
    node: &Option<Server>,
    pattern: &str,
    wide: &str,
    count: u32,
    now: i64,
) -> Result<Vec<(String, Update)>> {
    let mut updates = vec![];
    for redis_type in TYPES {
        let mut seen: HashSet<String> = HashSet::new();
        let mut cursor = "0".to_string();
        loop {
            let args: Vec<Value> = vec![
                cursor.as_str().into(),
                "MATCH".into(),
                wide.into(),
                "COUNT".into(),
                i64::from(count).into(),
                "TYPE".into(),
                redis_type.into(),
            ];
            let reply = w.on_node(node, "SCAN", args).await.map_err(|e| match e.reply() {
                Some(reply) if reply.contains("syntax") => Error::redis(format!(
                    "the server refused `SCAN ... TYPE` ({reply}): listing objects needs Redis 6.0 or later"
                )),
                _ => e,
            })?;
            let (next, page) = scan_page(reply);
            let keys: Vec<String> = page
                .iter()
                .filter_map(text)
                .filter(|k| seen.insert(k.clone()))
                .collect();
            let reads: Vec<BoxFuture<'_, Result<Option<(String, Update)>>>> = keys
                .into_iter()
                .filter_map(|key| read_key(w, redis_type, key, pattern, now))
                .collect();
            updates.extend(try_join_all(reads).await?.into_iter().flatten());
            if next == "0" {
                break;
            }
            cursor = next;
        }
    }
    Ok(updates)
}

/// The read one scanned key needs, if it belongs to an object whose name
/// matches.
fn read_key<'a>(
    w: &'a Wire<'a>,
    redis_type: &'static str,
    key: String,
    pattern: &'a str,
    now: i64,
) -> Option<BoxFuture<'a, Result<Option<(String, Update)>>>> {
    let (name, role) = match keys::read(&key) {
        KeyName::Derived { name, role } => (name, Some(role)),
        KeyName::Own => (key.clone(), None),
        KeyName::Bookkeeping => return None,
    };
    if !glob::matches(pattern, &name) {
        return None;
    }
    let k = |key: &str| Value::from(key);
    let read: BoxFuture<'a, Result<Option<Update>>> = match (redis_type, role) {
        ("hash", None) => Box::pin(async move {
            let (pttl, first) = futures::try_join!(
                w.keyed("PTTL", vec![k(&key)]),
                w.keyed(
                    "HSCAN",
                    vec![k(&key), "0".into(), "COUNT".into(), HSCAN_COUNT.into()]
                ),
            )?;
            let (Some((ttl_ms, no_ttl)), Some(first)) = (pttl.as_ref().and_then(ttl), first) else {
                return Ok(None);
            };
            let (cursor, page) = scan_page(first);
            let mut fields = pairs(page);
            // A big hash is read on only if its first page looks like a lock.
            if cursor != "0" {
                if matches!(shape::hash(&fields, ""), HashShape::Other) {
                    return Ok(Some(Update::Foreign));
                }
                fields = read::fields(w, &key).await?;
            }
            Ok(Some(Update::Hash(ttl_ms, no_ttl, fields)))
        }),
        ("string", None) => Box::pin(async move {
            let (pttl, value) = futures::try_join!(
                w.keyed("PTTL", vec![k(&key)]),
                w.keyed("GETRANGE", vec![k(&key), 0.into(), 23.into()]),
            )?;
            let value = value
                .as_ref()
                .and_then(text)
                .and_then(|t| shape::counter(&t));
            Ok(match (pttl.as_ref().and_then(ttl), value) {
                (Some((ttl_ms, no_ttl)), Some(value)) => {
                    Some(Update::Counter(ttl_ms, no_ttl, value))
                }
                (Some(_), None) => Some(Update::Foreign),
                (None, _) => None,
            })
        }),
        ("string", Some(Derived::FenceToken)) => Box::pin(async move {
            let value = w
                .keyed("GETRANGE", vec![k(&key), 0.into(), 23.into()])
                .await?;
            Ok(value.map(|v| Update::Token(text(&v).and_then(|t| shape::counter(&t)))))
        }),
        (
            "string",
            Some(
                role @ (Derived::UnlockLatch(_)
                | Derived::RequestLatch(_)
                | Derived::ReadHold { .. }),
            ),
        ) => {
            let role = match role {
                Derived::UnlockLatch(request_id) => SideKeyRole::UnlockLatch { request_id },
                Derived::RequestLatch(request_id) => SideKeyRole::RequestLatch { request_id },
                Derived::ReadHold { field, n } => SideKeyRole::ReadHold { field, n },
                _ => return None,
            };
            Box::pin(async move {
                let pttl = w.keyed("PTTL", vec![k(&key)]).await?;
                Ok(pttl.as_ref().and_then(ttl).map(|(ttl_ms, no_ttl)| {
                    Update::Side(SideKey {
                        key,
                        role,
                        ttl_ms,
                        no_ttl,
                    })
                }))
            })
        }
        ("list", Some(Derived::FairQueue)) => Box::pin(async move {
            let n = w.keyed("LLEN", vec![k(&key)]).await?;
            Ok(n.as_ref()
                .and_then(int)
                .map(|n| Update::Queue(n.max(0) as u64)))
        }),
        ("zset", Some(Derived::FairDeadlines)) => Box::pin(async move {
            let overdue = w
                .keyed("ZCOUNT", vec![k(&key), "-inf".into(), now.into()])
                .await?;
            Ok(overdue
                .as_ref()
                .and_then(int)
                .map(|n| Update::Deadlines(n.max(0) as u64)))
        }),
        ("zset", Some(Derived::PermitLeases)) => Box::pin(async move {
            let (total, ended) = futures::try_join!(
                w.keyed("ZCARD", vec![k(&key)]),
                w.keyed("ZCOUNT", vec![k(&key), "-inf".into(), now.into()]),
            )?;
            let n = |v: Option<Value>| v.as_ref().and_then(int).map(|n| n.max(0) as u64);
            Ok(n(total).map(|total| Update::Leases(total, n(ended).unwrap_or(0))))
        }),
        _ => return None,
    };
    Some(Box::pin(async move {
        Ok(read.await?.map(|update| (name, update)))
    }))
}

/// What one object's keys add up to; `None` for a name that is no Redisson
/// object.
fn summarize(name: String, found: Found, reader_id: &str) -> Option<ObjectSummary> {
    let mut s = ObjectSummary::new(name);
    s.queue_length = found.queue_length;
    s.overdue_waiters = found.deadlines.unwrap_or(0);
    let fair = found.queue_length > 0 || found.deadlines.is_some();
    s.last_token = found.token.flatten();
    if let Some((leases, ended)) = found.leases {
        s.leases = leases;
        s.expired_leases = ended;
    }
    s.side_keys = found.side_keys;
    s.side_keys.sort_by(|a, b| a.key.cmp(&b.key));
    if let Some((ttl_ms, no_ttl, fields)) = &found.hash {
        (s.ttl_ms, s.no_ttl) = (*ttl_ms, *no_ttl);
        match shape::hash(fields, reader_id) {
            HashShape::Lock(holders) => {
                s.holders = holders;
                s.kind = if fair {
                    ObjectKind::FairLock
                } else if found.token.is_some() {
                    ObjectKind::FencedLock
                } else {
                    ObjectKind::Lock
                };
            }
            HashShape::ReadWrite {
                mode,
                writer,
                readers,
            } => {
                s.kind = ObjectKind::ReadWriteLock;
                s.mode = mode;
                s.writer = writer;
                s.holders = readers.into_iter().map(|(_, h)| h).collect();
            }
            HashShape::Group(members) => {
                s.kind = ObjectKind::MultiLockGroup;
                s.holders = members.into_iter().map(|m| m.holder).collect();
            }
            HashShape::Other => return None,
        }
    } else if let Some((ttl_ms, no_ttl, value)) = found.counter {
        (s.ttl_ms, s.no_ttl) = (ttl_ms, no_ttl);
        s.value = Some(value);
        // Decided once the channels' subscribers are known.
        s.kind = if found.leases.is_some() {
            ObjectKind::ExpirableSemaphore
        } else {
            ObjectKind::Counter
        };
    } else if found.foreign {
        return None;
    } else if fair {
        s.kind = ObjectKind::FairLock;
    } else if found.token.is_some() {
        s.kind = ObjectKind::FencedLock;
    } else if found.leases.is_some() {
        s.kind = ObjectKind::ExpirableSemaphore;
    } else if s.side_keys.is_empty() {
        return None;
    }
    Some(s)
}

/// Fills in `subscribers`, and decides counters where the channels tell.
async fn count_subscribers(w: &Wire<'_>, objects: &mut [ObjectSummary]) -> Result<()> {
    let mut channels: Vec<String> = vec![];
    let mut owners: Vec<(usize, bool)> = vec![]; // (object, latch channel)
    for (i, o) in objects.iter().enumerate() {
        let mut add = |channel: String, latch: bool| {
            channels.push(channel);
            owners.push((i, latch));
        };
        match o.kind {
            ObjectKind::Lock
            | ObjectKind::FairLock
            | ObjectKind::FencedLock
            | ObjectKind::MultiLockGroup => add(naming::channel_name(&o.name), false),
            ObjectKind::ReadWriteLock => add(naming::rwlock_channel_name(&o.name), false),
            ObjectKind::Semaphore | ObjectKind::ExpirableSemaphore => {
                add(naming::semaphore_channel_name(&o.name), false)
            }
            ObjectKind::CountDownLatch => add(naming::count_down_latch_channel_name(&o.name), true),
            ObjectKind::Counter => {
                add(naming::semaphore_channel_name(&o.name), false);
                add(naming::count_down_latch_channel_name(&o.name), true);
            }
            _ => {}
        }
    }
    let counts = w.subscribers(&channels).await?;
    let mut latch_subs = vec![0u64; objects.len()];
    let mut other_subs = vec![0u64; objects.len()];
    for ((i, latch), n) in owners.into_iter().zip(counts) {
        if latch {
            latch_subs[i] += n;
        } else {
            other_subs[i] += n;
        }
    }
    for (i, o) in objects.iter_mut().enumerate() {
        o.subscribers = latch_subs[i] + other_subs[i];
        if o.kind == ObjectKind::Counter {
            let value = o.value.unwrap_or(0);
            o.kind = match shape::counted(value, o.ttl_ms.is_some(), other_subs[i], latch_subs[i]) {
                Counted::Semaphore => ObjectKind::Semaphore,
                Counted::Latch => ObjectKind::CountDownLatch,
                Counted::Unknown => ObjectKind::Counter,
            };
        }
    }
    Ok(())
}
