//! `inspect`: every key of one object, read with bounded commands.

use fred::types::Value;
use futures::future::try_join_all;

use super::shape::{self, Counted, HashShape};
use super::wire::{array, int, score_ms, scored, text, ttl, Wire};
use super::{
    now_ms, ChannelWaiters, CounterState, ExpirableSemaphoreState, FairLockState, FencedLockState,
    GroupState, LatchState, Lease, LockState, ObjectInfo, ObjectState, QueuedWaiter, ReadHold,
    ReadWriteLockState, Reader, SemaphoreState, LISTED,
};
use crate::engine::Engine;
use crate::error::Result;
use crate::naming;

/// Fields one `HSCAN` call asks for.
pub(crate) const HSCAN_COUNT: u32 = 100;
/// The most fields read of one hash: beyond it, it is no lock.
const MAX_FIELDS: usize = 10 * LISTED;

pub(super) async fn inspect(engine: &Engine, name: &str) -> Result<ObjectInfo> {
    let w = Wire::new(engine);
    let now = now_ms();
    let key = |k: &str| Value::from(k);
    let (queue, deadlines) = (
        naming::fair_queue_name(name),
        naming::fair_timeout_name(name),
    );
    let (token, leases) = (naming::token_name(name), naming::permit_timeout_name(name));
    let (redis_type, pttl, queue_length, deadline_count, token_text, lease_count) = futures::try_join!(
        w.keyed("TYPE", vec![key(name)]),
        w.keyed("PTTL", vec![key(name)]),
        w.keyed("LLEN", vec![key(&queue)]),
        w.keyed("ZCARD", vec![key(&deadlines)]),
        w.keyed("GETRANGE", vec![key(&token), 0.into(), 23.into()]),
        w.keyed("ZCARD", vec![key(&leases)]),
    )?;
    let redis_type = redis_type
        .as_ref()
        .and_then(text)
        .unwrap_or_else(|| "none".into());
    let (ttl_ms, no_ttl) = pttl.as_ref().and_then(ttl).unwrap_or((None, false));
    let count = |v: Option<Value>| v.as_ref().and_then(int).unwrap_or(0).max(0) as u64;
    let (queue_length, deadline_count, lease_count) = (
        count(queue_length),
        count(deadline_count),
        count(lease_count),
    );
    let last_token = token_text
        .as_ref()
        .and_then(text)
        .and_then(|t| shape::counter(&t));
    let fair = queue_length > 0 || deadline_count > 0;

    let lock_channel = naming::channel_name(name);
    let mut channels = vec![];
    let state = match redis_type.as_str() {
        "hash" => match shape::hash(&fields(&w, name).await?, &engine.id) {
            HashShape::Lock(holders) if fair => {
                channels.push(lock_channel);
                fair_state(&w, name, holders, queue_length, now).await?
            }
            HashShape::Lock(holders) if last_token.is_some() => {
                channels.push(lock_channel);
                ObjectState::FencedLock(FencedLockState {
                    holders,
                    last_token,
                })
            }
            HashShape::Lock(holders) => {
                channels.push(lock_channel);
                ObjectState::Lock(LockState { holders })
            }
            HashShape::ReadWrite {
                mode,
                writer,
                readers,
            } => {
                channels.push(naming::rwlock_channel_name(name));
                ObjectState::ReadWriteLock(ReadWriteLockState {
                    mode,
                    writer,
                    readers: read_holds(&w, name, readers).await?,
                })
            }
            HashShape::Group(members) => {
                channels.push(lock_channel);
                ObjectState::MultiLockGroup(GroupState { members })
            }
            HashShape::Other => ObjectState::Other,
        },
        "string" => {
            let value = w
                .keyed("GETRANGE", vec![key(name), 0.into(), 23.into()])
                .await?;
            match value
                .as_ref()
                .and_then(text)
                .and_then(|t| shape::counter(&t))
            {
                Some(value) if lease_count > 0 => {
                    channels.push(naming::semaphore_channel_name(name));
                    lease_state(&w, name, Some(value), lease_count, now).await?
                }
                Some(value) => {
                    let sc = naming::semaphore_channel_name(name);
                    let latch = naming::count_down_latch_channel_name(name);
                    let subs = w.subscribers(&[sc.clone(), latch.clone()]).await?;
                    match shape::counted(value, ttl_ms.is_some(), subs[0], subs[1]) {
                        Counted::Semaphore => {
                            channels.push(sc);
                            ObjectState::Semaphore(SemaphoreState { permits: value })
                        }
                        Counted::Latch => {
                            channels.push(latch);
                            ObjectState::CountDownLatch(LatchState { count: value })
                        }
                        Counted::Unknown => {
                            channels.extend([sc, latch]);
                            ObjectState::Counter(CounterState { value })
                        }
                    }
                }
                None => ObjectState::Other,
            }
        }
        "none" if fair => {
            channels.push(lock_channel);
            fair_state(&w, name, vec![], queue_length, now).await?
        }
        "none" if last_token.is_some() => {
            channels.push(lock_channel);
            ObjectState::FencedLock(FencedLockState {
                holders: vec![],
                last_token,
            })
        }
        "none" if lease_count > 0 => {
            channels.push(naming::semaphore_channel_name(name));
            lease_state(&w, name, None, lease_count, now).await?
        }
        "none" => ObjectState::Absent,
        _ => ObjectState::Other,
    };
    let mut state = state;
    let counts = w.subscribers(&channels).await?;
    let mut channels: Vec<ChannelWaiters> = channels
        .into_iter()
        .zip(counts)
        .map(|(channel, subscribers)| ChannelWaiters {
            channel,
            subscribers,
        })
        .collect();
    if let ObjectState::FairLock(fair) = &mut state {
        let own: Vec<String> = fair
            .queue
            .iter()
            .map(|q| naming::fair_waiter_channel(name, &q.field))
            .collect();
        let counts = w.subscribers(&own).await?;
        for ((waiter, channel), subscribers) in fair.queue.iter_mut().zip(own).zip(counts) {
            waiter.subscribers = subscribers;
            channels.push(ChannelWaiters {
                channel,
                subscribers,
            });
        }
    }
    let clients = super::clients::identities(w.engine(), super::clients::of_state(&state)).await?;
    Ok(ObjectInfo {
        name: name.to_string(),
        state,
        redis_type,
        ttl_ms,
        no_ttl,
        channels,
        clients,
    })
}

/// A hash's fields, a bounded `HSCAN` page at a time, at most [`MAX_FIELDS`].
pub(crate) async fn fields(w: &Wire<'_>, name: &str) -> Result<Vec<(String, String)>> {
    let mut out = vec![];
    let mut cursor = "0".to_string();
    let mut cursors = Cursors::default();
    loop {
        let args = vec![
            Value::from(name),
            cursor.as_str().into(),
            "COUNT".into(),
            HSCAN_COUNT.into(),
        ];
        let Some(reply) = w.keyed("HSCAN", args).await? else {
            return Ok(out);
        };
        let (next, page) = scan_page(reply);
        out.extend(pairs(page));
        if next == "0" || out.len() >= MAX_FIELDS {
            return Ok(out);
        }
        cursors.advance("HSCAN", name, &next)?;
        cursor = next;
    }
}

/// The cursors a `*SCAN` walk was given so far. A server never hands out
/// the same cursor twice in one walk; one that does (a broken proxy in
/// between) would keep the walk going forever, so that ends it.
#[derive(Default)]
pub(crate) struct Cursors(std::collections::HashSet<String>);

impl Cursors {
    /// Takes `next` as the walk's next cursor; an error if it was given
    /// before.
    pub(crate) fn advance(&mut self, command: &str, of: &str, next: &str) -> Result<()> {
        if self.0.insert(next.to_string()) {
            return Ok(());
        }
        Err(crate::error::Error::redis(format!(
            "{command} of `{of}` was given cursor {next} a second time: the walk would not end"
        )))
    }
}

/// A `*SCAN` reply: the next cursor and the page.
pub(crate) fn scan_page(reply: Value) -> (String, Vec<Value>) {
    let mut parts = array(reply).into_iter();
    let cursor = parts
        .next()
        .as_ref()
        .and_then(text)
        .unwrap_or_else(|| "0".into());
    (cursor, parts.next().map(array).unwrap_or_default())
}

/// `[field, value, field, value, ...]` as text pairs (non-text skipped).
pub(crate) fn pairs(flat: Vec<Value>) -> Vec<(String, String)> {
    flat.chunks(2)
        .filter_map(|pair| Some((text(pair.first()?)?, text(pair.get(1)?)?)))
        .collect()
}

async fn fair_state(
    w: &Wire<'_>,
    name: &str,
    holders: Vec<crate::lock::Holder>,
    queue_length: u64,
    now: i64,
) -> Result<ObjectState> {
    let queue = naming::fair_queue_name(name);
    let deadlines = naming::fair_timeout_name(name);
    let listed = (LISTED - 1).to_string();
    let (fields, ranked) = futures::try_join!(
        w.keyed(
            "LRANGE",
            vec![queue.as_str().into(), 0.into(), listed.as_str().into()]
        ),
        w.keyed(
            "ZRANGE",
            vec![
                deadlines.as_str().into(),
                0.into(),
                listed.as_str().into(),
                "WITHSCORES".into(),
            ]
        ),
    )?;
    let fields: Vec<String> = fields
        .map(array)
        .unwrap_or_default()
        .iter()
        .filter_map(text)
        .collect();
    let ranked: Vec<(String, Option<i64>)> = ranked
        .map(scored)
        .unwrap_or_default()
        .iter()
        .filter_map(|(member, score)| Some((text(member)?, score_ms(score))))
        .collect();
    let scores = try_join_all(
        fields
            .iter()
            .map(|f| w.keyed("ZSCORE", vec![deadlines.as_str().into(), f.as_str().into()])),
    )
    .await?;
    let waiter = |field: &str, deadline: Option<i64>| {
        let (client_id, owner) = field.rsplit_once(':').unwrap_or((field, ""));
        QueuedWaiter {
            field: field.to_string(),
            client_id: client_id.to_string(),
            owner: owner.to_string(),
            deadline_ms: deadline,
            overdue: deadline.is_some_and(|d| d <= now),
            this_client: client_id == w.client_id(),
            subscribers: 0,
        }
    };
    let queue: Vec<QueuedWaiter> = fields
        .iter()
        .zip(scores)
        .map(|(field, score)| waiter(field, score.as_ref().and_then(score_ms)))
        .collect();
    // Strays can only be told when the whole line was read.
    let stray_deadlines = if (fields.len() as u64) < queue_length {
        vec![]
    } else {
        ranked
            .iter()
            .filter(|(field, _)| !fields.contains(field))
            .map(|(field, score)| waiter(field, *score))
            .collect()
    };
    Ok(ObjectState::FairLock(FairLockState {
        holders,
        queue,
        queue_length,
        stray_deadlines,
    }))
}

async fn read_holds(
    w: &Wire<'_>,
    name: &str,
    readers: Vec<(String, crate::lock::Holder)>,
) -> Result<Vec<Reader>> {
    let mut out = vec![];
    for (field, holder) in readers {
        let prefix = naming::read_timeout_prefix(name, &field);
        let held = holder.hold_count.min(LISTED as u32);
        let keys: Vec<String> = (1..=held).map(|n| format!("{prefix}:{n}")).collect();
        let ttls = try_join_all(
            keys.iter()
                .map(|k| w.keyed("PTTL", vec![k.as_str().into()])),
        )
        .await?;
        let holds = keys
            .into_iter()
            .zip(ttls)
            .enumerate()
            .map(|(i, (key, pttl))| {
                let read = pttl.as_ref().and_then(ttl);
                ReadHold {
                    n: i as u32 + 1,
                    key,
                    exists: read.is_some(),
                    ttl_ms: read.and_then(|(ms, _)| ms),
                }
            })
            .collect();
        out.push(Reader { holder, holds });
    }
    Ok(out)
}

async fn lease_state(
    w: &Wire<'_>,
    name: &str,
    available: Option<i64>,
    leases_total: u64,
    now: i64,
) -> Result<ObjectState> {
    let args = vec![
        naming::permit_timeout_name(name).into(),
        0.into(),
        (LISTED as i64 - 1).into(),
        "WITHSCORES".into(),
    ];
    let members = w
        .keyed("ZRANGE", args)
        .await?
        .map(scored)
        .unwrap_or_default();
    let leases = members
        .iter()
        .filter_map(|(member, score)| {
            let at = score_ms(score)?;
            Some(Lease {
                id: shape::permit_id(member),
                expires_at_ms: (at != shape::NEVER).then_some(at),
                expired: at <= now,
            })
        })
        .collect();
    Ok(ObjectState::ExpirableSemaphore(ExpirableSemaphoreState {
        available,
        leases,
        leases_total,
    }))
}
