//! `scan_objects`: every object whose name matches a pattern, found with
//! `SCAN` on every primary and read with bounded commands.

use std::collections::{BTreeMap, HashSet};

use fred::types::config::Server;
use fred::types::Value;
use futures::future::try_join_all;

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

/// A key's time left (ms) and whether it has no TTL.
type Expiry = (Option<u64>, bool);

/// What the scan found of one object.
#[derive(Default)]
struct Found {
    /// Its own key, as a hash: expiry, fields.
    hash: Option<(Expiry, Vec<(String, String)>)>,
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
    // Each client once, however many objects it holds.
    let ids = objects
        .iter()
        .flat_map(super::clients::of_summary)
        .collect();
    let known = super::clients::identities(engine, ids).await?;
    for object in &mut objects {
        // A client whose entry could not be read stays out: unknown.
        object.clients = super::clients::of_summary(object)
            .into_iter()
            .filter_map(|id| Some((id.clone(), known.get(&id)?.clone())))
            .collect();
    }
    Ok(objects)
}

fn apply(found: &mut Found, update: Update) {
    match update {
        Update::Hash(ttl, no_ttl, fields) => found.hash = Some(((ttl, no_ttl), fields)),
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
/// in one pipeline while the next page is scanned.
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
        let scan = |cursor: String| async move {
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
            Ok::<_, Error>(scan_page(reply))
        };
        let mut page = scan("0".to_string()).await?;
        let mut cursors = read::Cursors::default();
        loop {
            let (next, keys) = page;
            let plans: Vec<Plan> = keys
                .iter()
                .filter_map(text)
                .filter(|k| seen.insert(k.clone()))
                .filter_map(|key| plan(redis_type, key, pattern))
                .collect();
            if next == "0" {
                updates.extend(read_page(w, plans, now).await?);
                break;
            }
            cursors.advance("SCAN", wide, &next)?;
            let (read, scanned) = futures::try_join!(read_page(w, plans, now), scan(next))?;
            updates.extend(read);
            page = scanned;
        }
    }
    Ok(updates)
}

/// What to read of one scanned key.
enum Read {
    /// An object's own hash: `PTTL`, first `HSCAN` page.
    Hash,
    /// An object's own string: `PTTL`, `GETRANGE 0 23`.
    Counter,
    /// A fenced lock's token: `GETRANGE 0 23`.
    Token,
    /// A latch or read-hold key: `PTTL`.
    Side(SideKeyRole),
    /// A fair lock's line: `LLEN`.
    Queue,
    /// A fair lock's deadlines: `ZCOUNT -inf now`.
    Deadlines,
    /// A lease set: `ZCARD`, `ZCOUNT -inf now`.
    Leases,
}

/// One scanned key to read: its object, the key, what to read.
struct Plan {
    name: String,
    key: String,
    read: Read,
}

/// What one scanned key needs read, if it belongs to an object whose name
/// matches.
fn plan(redis_type: &str, key: String, pattern: &str) -> Option<Plan> {
    let (name, role) = match keys::read(&key) {
        KeyName::Derived { name, role } => (name, Some(role)),
        KeyName::Own => (key.clone(), None),
        KeyName::Bookkeeping => return None,
    };
    if !glob::matches(pattern, &name) {
        return None;
    }
    let read = match (redis_type, role) {
        ("hash", None) => Read::Hash,
        ("string", None) => Read::Counter,
        ("string", Some(Derived::FenceToken)) => Read::Token,
        ("string", Some(Derived::UnlockLatch(request_id))) => {
            Read::Side(SideKeyRole::UnlockLatch { request_id })
        }
        ("string", Some(Derived::RequestLatch(request_id))) => {
            Read::Side(SideKeyRole::RequestLatch { request_id })
        }
        ("string", Some(Derived::ReadHold { field, n })) => {
            Read::Side(SideKeyRole::ReadHold { field, n })
        }
        ("list", Some(Derived::FairQueue)) => Read::Queue,
        ("zset", Some(Derived::FairDeadlines)) => Read::Deadlines,
        ("zset", Some(Derived::PermitLeases)) => Read::Leases,
        _ => return None,
    };
    Some(Plan { name, key, read })
}

impl Plan {
    /// The commands this read sends.
    fn commands(&self, now: i64) -> Vec<(&'static str, Vec<Value>)> {
        let k = || Value::from(self.key.as_str());
        let range = || vec![k(), 0.into(), 23.into()];
        let overdue = || vec![k(), "-inf".into(), now.into()];
        match self.read {
            Read::Hash => vec![
                ("PTTL", vec![k()]),
                (
                    "HSCAN",
                    vec![k(), "0".into(), "COUNT".into(), HSCAN_COUNT.into()],
                ),
            ],
            Read::Counter => vec![("PTTL", vec![k()]), ("GETRANGE", range())],
            Read::Token => vec![("GETRANGE", range())],
            Read::Side(_) => vec![("PTTL", vec![k()])],
            Read::Queue => vec![("LLEN", vec![k()])],
            Read::Deadlines => vec![("ZCOUNT", overdue())],
            Read::Leases => vec![("ZCARD", vec![k()]), ("ZCOUNT", overdue())],
        }
    }

    /// What the replies (`None`: the key changed type) say about the object.
    /// A hash too big for one `HSCAN` page is read on through `w`.
    async fn update(
        self,
        w: &Wire<'_>,
        replies: Vec<Option<Value>>,
    ) -> Result<Option<(String, Update)>> {
        let n = |v: &Option<Value>| v.as_ref().and_then(int).map(|n| n.max(0) as u64);
        let update = match self.read {
            Read::Hash => {
                let (Some((ttl_ms, no_ttl)), Some(first)) =
                    (replies[0].as_ref().and_then(ttl), replies[1].clone())
                else {
                    return Ok(None);
                };
                let (cursor, page) = scan_page(first);
                let mut fields = pairs(page);
                if cursor != "0" {
                    // Read on only if the first page looks like a lock's.
                    if matches!(shape::hash(&fields, ""), HashShape::Other) {
                        return Ok(Some((self.name, Update::Foreign)));
                    }
                    fields = read::fields(w, &self.key).await?;
                }
                Some(Update::Hash(ttl_ms, no_ttl, fields))
            }
            Read::Counter => {
                let value = replies[1]
                    .as_ref()
                    .and_then(text)
                    .and_then(|t| shape::counter(&t));
                match (replies[0].as_ref().and_then(ttl), value) {
                    (Some((ttl_ms, no_ttl)), Some(value)) => {
                        Some(Update::Counter(ttl_ms, no_ttl, value))
                    }
                    (Some(_), None) => Some(Update::Foreign),
                    (None, _) => None,
                }
            }
            Read::Token => replies[0]
                .as_ref()
                .map(|v| Update::Token(text(v).and_then(|t| shape::counter(&t)))),
            Read::Side(role) => replies[0].as_ref().and_then(ttl).map(|(ttl_ms, no_ttl)| {
                Update::Side(SideKey {
                    key: self.key.clone(),
                    role,
                    ttl_ms,
                    no_ttl,
                })
            }),
            Read::Queue => n(&replies[0]).map(Update::Queue),
            Read::Deadlines => n(&replies[0]).map(Update::Deadlines),
            Read::Leases => {
                n(&replies[0]).map(|total| Update::Leases(total, n(&replies[1]).unwrap_or(0)))
            }
        };
        Ok(update.map(|u| (self.name, u)))
    }
}

/// Reads one page's keys: every command in one pipeline, then the updates.
async fn read_page(w: &Wire<'_>, plans: Vec<Plan>, now: i64) -> Result<Vec<(String, Update)>> {
    let commands: Vec<Vec<(&'static str, Vec<Value>)>> =
        plans.iter().map(|p| p.commands(now)).collect();
    let mut replies = w
        .pipeline(commands.iter().flatten().cloned().collect())
        .await?
        .into_iter();
    let mut updates = vec![];
    for (plan, sent) in plans.into_iter().zip(&commands) {
        let mine: Vec<Option<Value>> = replies.by_ref().take(sent.len()).collect();
        if let Some(update) = plan.update(w, mine).await? {
            updates.push(update);
        }
    }
    Ok(updates)
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
    if let Some(((ttl_ms, no_ttl), fields)) = &found.hash {
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
