//! Scripts that concurrent tasks send at the same moment go out together.
//!
//! fred writes and flushes every script on its own, so under load each one
//! costs a system call and a pass through fred's command machinery, and the
//! client runs out of CPU before Redis does; Redis, too, spends less per
//! call when it reads many in one command. Here, once [`ALONE_BELOW`] calls
//! of one connection await replies, a new one is queued instead: a task
//! spawned for the queue sends everything queued by the end of that
//! scheduler tick as one `EVALSHA` per script, shape and hash slot, running
//! the same script once per call (`lua/engine/each.lua`), and hands each
//! caller its own reply. Below that, every script goes out on its own,
//! unchanged: a lone caller, or a few, pay nothing.
//!
//! A batch must not hold Redis for long: every other client, Java included,
//! waits while it runs. Only scripts whose work per call is bounded by what
//! the call sends are batched, so a batch costs at most what its calls would
//! cost sent one after the other, bounded by their size. A script that walks
//! data already on Redis (a fair lock's queue, a read lock's holds, ended
//! leases: `Script::walking`) costs what that data costs, whoever sent it:
//! 256 fair-lock give-ups on a queue of 5000 blocked Redis for 1.5 s in one
//! batch. Such a script goes out on its own, and few of them are in
//! flight per connection ([`Lane::walking`]): Redis runs every command it
//! reads from a connection (up to 16 KiB of them) before it turns to another
//! client, so walking scripts pipelined together would hold it for their sum
//! just the same. Those of one lock go one at a time (a burst of give-ups on
//! one queue, of read unlocks on one lock); those of different locks, at most
//! [`WALKING_AT_ONCE`] at a time. A script that walks only the data of some
//! keys (a fair lock's queue and deadlines: `Script::walking_over`) costs
//! what it sends when they are absent: when no place is free, its call goes
//! with the batches ([`Way::Checked`]), run only if it finds them absent at
//! that moment, inside the same script; otherwise it is answered "not run"
//! and waits for a place. An uncontended fair lock thus batches like an
//! RLock under load.
//!
//! What each call does on Redis is exactly what it would do alone, and it is
//! still sent at most once: the batch has one attempt, and a lost batch
//! reply is a lost reply for each of its calls, resolved by each as usual.
//!
//! A caller who stops waiting leaves its call in the queue, where it is sent
//! all the same. Until it has been answered, no other script goes out on the
//! connection, nor a settlement's read ([`Lane::after_abandoned`]): the
//! settlement of that caller's operation reads the state on the same
//! connection, and must read it after the call.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClusterInterface;
use fred::types::cluster::ClusterRouting;
use fred::types::config::Server;
use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::engine::script::{self, ScriptCall, WaitFor};
use crate::error::{Error, Result};

/// Most calls in one batch; a larger queue goes out as several.
const MOST_PER_BATCH: usize = 256;

/// Most scripts that walk data in flight at once on one connection: Redis
/// may run them back to back, so this bounds how long it serves nobody else
/// for one connection's sake.
const WALKING_AT_ONCE: usize = 16;

/// Walking scripts of hash slots in one stripe (among them, every script of
/// one lock) go out one at a time: a burst of them on one lock (waiters giving
/// up at once, readers leaving at once) reaches Redis one by one, each after
/// the previous one's reply, while other clients are served in between.
const WALKING_STRIPES: usize = 256;

/// Below this many calls awaiting a reply on a connection, a call that finds
/// the queue empty goes out on its own. Batching adds a hand-over between
/// tasks to each reply, which costs more than it saves until the client runs
/// short of CPU (see docs/benchmarks.md, "What we tried").
const ALONE_BELOW: usize = 32;

/// One write connection and the calls queued for it.
pub(crate) struct Lane {
    client: Client,
    timeout: Duration,
    /// Batches must not cross hash slots (a cluster, or a proxy in front of one).
    slot_grouped: bool,
    queue: Mutex<Vec<Queued>>,
    /// Calls sent or queued, not yet answered.
    in_flight: AtomicUsize,
    /// Calls whose caller stopped waiting before they were sent.
    abandoned: Mutex<Vec<Arc<Pending>>>,
    any_abandoned: AtomicBool,
    /// The one `WAIT` in flight on each node's connection (on a cluster the
    /// lane reaches every primary, and a `WAIT` holds only the node it went
    /// to). A `WAIT` holds the connection until the replicas answer or its
    /// timeout ends, and everything sent after it waits behind it: calls
    /// that need one while another is in flight wait in
    /// [`Lane::for_turn`] and all go out with the next, so a replica that
    /// stopped answering delays a write by at most two timeouts, not one
    /// per call (or per batch, or per slot) ahead of it.
    wait_turns: Mutex<HashMap<Node, Arc<tokio::sync::Semaphore>>>,
    /// Per node, the queued calls waiting for its `WAIT` turn: whichever
    /// flush gets the turn sends all of them, those queued after it too.
    for_turn: Mutex<HashMap<Node, Vec<Queued>>>,
    /// Walking scripts in flight on this connection ([`WALKING_AT_ONCE`]).
    walking: tokio::sync::Semaphore,
    /// One walking script in flight per stripe of hash slots.
    walking_stripes: Box<[tokio::sync::Semaphore]>,
    /// The hash slot of the script that took each stripe last.
    stripe_slots: Box<[std::sync::atomic::AtomicU16]>,
}

/// The node a call is written to, as its `WAIT` turn is kept.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Node {
    /// The connection's one node (not a cluster).
    One,
    /// The primary serving the call's slot in the client's slot map: every
    /// slot it serves shares its turn, and the turn's calls and `WAIT` are
    /// sent to it by address, so the `WAIT` covers every one of them.
    At(Server),
    /// A slot the map has no primary for (yet): its own turn, its calls
    /// routed by slot.
    Slot(u16),
}

impl Node {
    /// The address its calls are sent to, when they go by address.
    fn server(&self) -> Option<&Server> {
        match self {
            Node::At(server) => Some(server),
            _ => None,
        }
    }
}

struct Queued {
    call: ScriptCall,
    slot: u16,
    /// The `WAIT` that follows it (one per batch: calls with the same one
    /// go together).
    wait: Option<WaitFor>,
    pending: Arc<Pending>,
}

/// A call's reply, and how many replicas acknowledged the `WAIT` that
/// followed it (its batch's), if one did.
pub(crate) type Reply = Result<(Value, Option<script::Acks>)>;

/// A queued call's reply, once its batch is answered.
#[derive(Default)]
struct Pending {
    reply: Mutex<Option<Reply>>,
    done: AtomicBool,
    answered: Notify,
}

impl Pending {
    fn complete(&self, reply: Reply) {
        *self.reply.lock() = Some(reply);
        self.done.store(true, Ordering::Release);
        self.answered.notify_waiters();
    }

    async fn until_done(&self) {
        loop {
            let mut answered = pin!(self.answered.notified());
            answered.as_mut().enable();
            if self.done.load(Ordering::Acquire) {
                return;
            }
            answered.await;
        }
    }
}

/// What a call may run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// As it is, alone or in a batch: its work is bounded by what it sends.
    Any,
    /// A walking script's call, alone or in a batch, in the batch form that
    /// runs it only if the data it walks is absent
    /// ([`Script::walking_over`](script::Script::walking_over)); otherwise
    /// it is answered [`was_not_run`], and nothing ran.
    Checked,
    /// A walking script's call as it is, on its own, holding its places
    /// ([`Lane::walking`]).
    Walking,
}

/// The reply of a [`Way::Checked`] call that found the data it walks on
/// Redis: it did not run.
const NOT_RUN: &str = "NOTRUN the data this script walks is on Redis; it goes out on its own";

/// Whether `e` says a [`Way::Checked`] call did not run: it may be sent
/// again, as it is.
pub(crate) fn was_not_run(e: &Error) -> bool {
    e.reply() == Some(NOT_RUN)
}

/// How a call goes out.
pub(crate) enum Route {
    /// On its own, now. The `Alone` counts it as in flight until dropped.
    Alone(ScriptCall, Alone),
    /// Queued for the next batch.
    Queued(Waiting),
}

/// Counts a call sent on its own as in flight until dropped, and holds the
/// connection's `WAIT` if the call carries one.
pub(crate) struct Alone {
    lane: Arc<Lane>,
    _turn: Option<WaitTurn>,
}

impl Drop for Alone {
    fn drop(&mut self) {
        self.lane.in_flight.fetch_sub(1, Ordering::Release);
    }
}

/// The connection's one `WAIT` in flight, until the reply.
pub(crate) struct WaitTurn {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// A walking script's places on its connection, until its reply.
pub(crate) struct Walking<'a> {
    _stripe: tokio::sync::SemaphorePermit<'a>,
    _any: tokio::sync::SemaphorePermit<'a>,
}

/// A caller waiting for its queued call's reply.
pub(crate) struct Waiting {
    lane: Arc<Lane>,
    pending: Arc<Pending>,
}

impl Waiting {
    /// The call's reply.
    pub(crate) async fn reply(self) -> Reply {
        self.pending.until_done().await;
        self.pending
            .reply
            .lock()
            .take()
            .unwrap_or_else(|| Err(Error::connection("a queued call's reply was taken twice")))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.pending.done.load(Ordering::Acquire) {
            self.lane.abandoned.lock().push(self.pending.clone());
            self.lane.any_abandoned.store(true, Ordering::Release);
        }
    }
}

impl Lane {
    pub(crate) fn new(client: Client, timeout: Duration, slot_grouped: bool) -> Arc<Self> {
        Arc::new(Lane {
            client,
            timeout,
            slot_grouped,
            queue: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            abandoned: Mutex::default(),
            any_abandoned: AtomicBool::new(false),
            wait_turns: Mutex::default(),
            for_turn: Mutex::default(),
            walking: tokio::sync::Semaphore::new(WALKING_AT_ONCE),
            walking_stripes: (0..WALKING_STRIPES)
                .map(|_| tokio::sync::Semaphore::new(1))
                .collect(),
            stripe_slots: (0..WALKING_STRIPES)
                .map(|_| std::sync::atomic::AtomicU16::new(0))
                .collect(),
        })
    }

    /// Whether a walking script of `slot` (among them, every one of its
    /// lock) awaits a reply: a sign that the lock is contended, and that the
    /// data a script would walk is there. A hint: read without a lock.
    pub(crate) fn slot_busy(&self, slot: u16) -> bool {
        let stripe = usize::from(slot) % WALKING_STRIPES;
        self.walking_stripes[stripe].available_permits() == 0
            && self.stripe_slots[stripe].load(Ordering::Relaxed) == slot
    }

    /// A walking script's places for `slot`, if both are free now.
    pub(crate) fn try_walking(&self, slot: u16) -> Option<Walking<'_>> {
        let stripe = self.walking_stripes[usize::from(slot) % WALKING_STRIPES]
            .try_acquire()
            .ok()?;
        self.stripe_slots[usize::from(slot) % WALKING_STRIPES].store(slot, Ordering::Relaxed);
        let any = self.walking.try_acquire().ok()?;
        Some(Walking {
            _stripe: stripe,
            _any: any,
        })
    }

    /// Waits until a walking script of `slot` may go out on this connection:
    /// none of its stripe awaits a reply, and fewer than [`WALKING_AT_ONCE`]
    /// in all. The permits go with the call until its reply (or its caller's
    /// leaving). Cancel safe: a caller that leaves while waiting sent nothing.
    pub(crate) async fn walking(&self, slot: u16) -> Walking<'_> {
        let closed = "the walking semaphores are never closed";
        // The stripe first: a call never holds a place in the whole count
        // while it waits for its stripe.
        let stripe = self.walking_stripes[usize::from(slot) % WALKING_STRIPES]
            .acquire()
            .await
            .expect(closed);
        self.stripe_slots[usize::from(slot) % WALKING_STRIPES].store(slot, Ordering::Relaxed);
        let any = self.walking.acquire().await.expect(closed);
        Walking {
            _stripe: stripe,
            _any: any,
        }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Waits for the connection's `WAIT` to be free, for a call that is
    /// never batched and carries one. Cancel safe: nothing is sent while
    /// waiting.
    pub(crate) async fn wait_turn(&self, wait: Option<WaitFor>, slot: u16) -> Option<WaitTurn> {
        wait?;
        // The semaphore is never closed.
        let permit = self.turns(&self.node_of(slot)).acquire_owned().await.ok()?;
        Some(WaitTurn { _permit: permit })
    }

    /// The node `slot` is written to.
    fn node_of(&self, slot: u16) -> Node {
        if !self.slot_grouped {
            return Node::One;
        }
        self.node_in(self.client.cached_cluster_state().as_ref(), slot)
    }

    /// The node `slot` is written to by `map` (the client's slot map, read
    /// once for a whole flush).
    fn node_in(&self, map: Option<&ClusterRouting>, slot: u16) -> Node {
        match (self.slot_grouped, map.and_then(|m| m.get_server(slot))) {
            (false, _) => Node::One,
            (true, Some(server)) => Node::At(server.clone()),
            (true, None) => Node::Slot(slot),
        }
    }

    /// The `WAIT` turn of `node`.
    fn turns(&self, node: &Node) -> Arc<tokio::sync::Semaphore> {
        self.wait_turns
            .lock()
            .entry(node.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(1)))
            .clone()
    }

    /// Sends `call` on its own while few calls of this lane await a reply,
    /// or when it walks data as it is ([`Way::Walking`]), otherwise queues
    /// it for the batch of this scheduler tick.
    pub(crate) fn route(
        self: &Arc<Self>,
        call: ScriptCall,
        slot: u16,
        wait: Option<WaitFor>,
        way: Way,
    ) -> Route {
        if way == Way::Walking {
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            return Route::Alone(
                call,
                Alone {
                    lane: self.clone(),
                    _turn: None,
                },
            );
        }
        let mut queue = self.queue.lock();
        let in_flight = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if queue.is_empty() && in_flight < ALONE_BELOW {
            match wait {
                None => {
                    return Route::Alone(
                        call,
                        Alone {
                            lane: self.clone(),
                            _turn: None,
                        },
                    )
                }
                Some(_) => {
                    if let Ok(turn) = self.turns(&self.node_of(slot)).try_acquire_owned() {
                        return Route::Alone(
                            call,
                            Alone {
                                lane: self.clone(),
                                _turn: Some(WaitTurn { _permit: turn }),
                            },
                        );
                    }
                }
            }
        }
        let pending = Arc::new(Pending::default());
        queue.push(Queued {
            call,
            slot,
            wait,
            pending: pending.clone(),
        });
        let first = queue.len() == 1;
        drop(queue);
        if first {
            tokio::spawn(flush(self.clone()));
        }
        Route::Queued(Waiting {
            lane: self.clone(),
            pending,
        })
    }

    /// Returns once every call abandoned by its caller has been sent and
    /// answered, so whatever goes out next is ordered after them.
    pub(crate) async fn after_abandoned(&self) {
        while self.any_abandoned.load(Ordering::Acquire) {
            let first = {
                let mut abandoned = self.abandoned.lock();
                abandoned.retain(|p| !p.done.load(Ordering::Acquire));
                if abandoned.is_empty() {
                    self.any_abandoned.store(false, Ordering::Release);
                    return;
                }
                abandoned[0].clone()
            };
            first.until_done().await;
        }
    }
}

/// Sends what the lane queued by the end of this scheduler tick.
async fn flush(lane: Arc<Lane>) {
    // Let the tasks that are ready now queue their calls first.
    tokio::task::yield_now().await;
    let queued = std::mem::take(&mut *lane.queue.lock());
    if queued.is_empty() {
        return;
    }
    let n_calls = queued.len();
    // Per node written to (a primary on a cluster, else the one connection).
    let map = match lane.slot_grouped {
        true => lane.client.cached_cluster_state(),
        false => None,
    };
    let mut nodes: HashMap<Node, Vec<Queued>> = HashMap::new();
    for q in queued {
        nodes
            .entry(lane.node_in(map.as_ref(), q.slot))
            .or_default()
            .push(q);
    }
    let sent = nodes
        .into_iter()
        .map(|(key, queued)| flush_node(&lane, key, queued));
    futures::future::join_all(sent).await;
    lane.in_flight.fetch_sub(n_calls, Ordering::AcqRel);
}

/// Sends the calls queued for one node. Calls that need no `WAIT` go now;
/// otherwise they join the node's calls waiting for its `WAIT` turn, and
/// whichever flush gets the turn sends every call waiting then, followed by
/// one `WAIT` for as many replicas as any call asked and no longer than any
/// may wait (it covers every write sent before it on the connection). A
/// flush that took its snapshot of the queue before waiting would hold the
/// node once per flush: with a replica not answering, calls queued while
/// the turn was taken waited one `WAIT` timeout per flush ahead of them,
/// and a renewal queued behind three of them missed its lease.
async fn flush_node(lane: &Lane, node: Node, queued: Vec<Queued>) {
    if queued.iter().all(|q| q.wait.is_none()) {
        let sent = group(queued, lane.slot_grouped)
            .into_iter()
            .map(|batch| send(lane, batch, None, None));
        for (pending, reply) in futures::future::join_all(sent).await.into_iter().flatten() {
            pending.complete(reply);
        }
        return;
    }
    lane.for_turn
        .lock()
        .entry(node.clone())
        .or_default()
        .extend(queued);
    let _turn = lane.turns(&node).acquire_owned().await.ok();
    let queued = lane.for_turn.lock().remove(&node).unwrap_or_default();
    if queued.is_empty() {
        // An earlier flush sent them with its `WAIT`.
        return;
    }
    let wait = queued.iter().filter_map(|q| q.wait).reduce(WaitFor::join);
    let mut batches = group(queued, lane.slot_grouped);
    let last = match wait {
        Some(_) => batches.pop(),
        None => None,
    };
    // Every batch and the `WAIT` to the node by address: on one connection,
    // so the `WAIT` covers them all (a slot moved meanwhile is refused there).
    let to = node.server();
    let sent = batches.into_iter().map(|batch| send(lane, batch, to, None));
    let mut done: Vec<Done> = futures::future::join_all(sent)
        .await
        .into_iter()
        .flatten()
        .collect();
    if let Some(last) = last {
        let waited = send(lane, last, to, wait).await;
        let acked = waited.iter().find_map(|(_, reply)| match reply {
            Ok((_, acked)) => acked.clone(),
            _ => None,
        });
        for (_, reply) in &mut done {
            if let Ok((_, no_wait)) = reply {
                *no_wait = acked.clone();
            }
        }
        done.extend(waited);
    }
    for (pending, reply) in done {
        pending.complete(reply);
    }
}

/// A queued call and its reply.
type Done = (Arc<Pending>, Reply);

/// Splits calls into batches of one script, one shape (key and argument
/// counts) and, if needed, one slot. Their `WAIT` is the flush's.
fn group(queued: Vec<Queued>, slot_grouped: bool) -> Vec<Vec<Queued>> {
    let mut batches: Vec<Vec<Queued>> = Vec::new();
    for q in queued {
        let same = |b: &Vec<Queued>| {
            let first = &b[0];
            b.len() < MOST_PER_BATCH
                && std::ptr::eq(first.call.script, q.call.script)
                && first.call.keys.len() == q.call.keys.len()
                && first.call.args.len() == q.call.args.len()
                && (!slot_grouped || first.slot == q.slot)
        };
        match batches.iter_mut().find(|b| same(b)) {
            Some(batch) => batch.push(q),
            None => batches.push(vec![q]),
        }
    }
    batches
}

/// Sends one batch with one attempt (and its `EVAL` after a `NOSCRIPT`:
/// nothing ran), followed by `wait` if given, and returns each call's reply.
async fn send(
    lane: &Lane,
    mut batch: Vec<Queued>,
    to: Option<&Server>,
    wait: Option<WaitFor>,
) -> Vec<Done> {
    let (script, slot) = (batch[0].call.script, batch[0].slot);
    // A walking script's calls run checked, in the batch form, even alone.
    if let ([_], false) = (&batch[..], script.walks()) {
        let Some(q) = batch.pop() else {
            return vec![];
        };
        let reply = script
            .run_kept(&lane.client, lane.timeout, slot, to, q.call, wait)
            .await;
        return vec![(q.pending, reply)];
    }
    let (pending, calls): (Vec<_>, Vec<_>) = batch.into_iter().map(|q| (q.pending, q.call)).unzip();
    let replies = run_each(lane, calls, slot, to, wait).await;
    pending.into_iter().zip(replies).collect()
}

impl Lane {
    /// Runs a [`Way::Checked`] call that goes out on its own: the batch form
    /// with one call.
    pub(crate) async fn run_checked(
        &self,
        call: ScriptCall,
        slot: u16,
        wait: Option<WaitFor>,
    ) -> Reply {
        run_each(self, vec![call], slot, None, wait)
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::connection("a batch of one call had no reply")))
    }
}

/// Runs `calls` (one script and shape, at least one) as one `EVALSHA` of
/// the script's batch form, with one attempt, and returns each call's reply.
async fn run_each(
    lane: &Lane,
    calls: Vec<ScriptCall>,
    slot: u16,
    to: Option<&Server>,
    wait: Option<WaitFor>,
) -> Vec<Reply> {
    let n = calls.len();
    let Some(first) = calls.first() else {
        return vec![];
    };
    let each = first.script.each();
    let (nk, na) = (first.keys.len(), first.args.len());
    let mut keys = Vec::with_capacity(n * nk);
    let mut args = Vec::with_capacity(3 + n * na);
    args.extend([n as i64, nk as i64, na as i64].map(Value::from));
    for call in calls {
        keys.extend(call.keys);
        args.extend(call.args);
    }
    let call = ScriptCall {
        script: each,
        keys,
        args,
    };
    match each
        .run_kept(&lane.client, lane.timeout, slot, to, call, wait)
        .await
    {
        Ok((Value::Array(replies), acked)) if replies.len() == 2 * n => {
            // One WAIT after the batch covers every write in it.
            let mut replies = replies.into_iter();
            (0..n)
                .map(|_| {
                    let (code, reply) = (replies.next(), replies.next());
                    unpack(code, reply).map(|reply| (reply, acked.clone()))
                })
                .collect()
        }
        Ok((other, _)) => {
            // It ran, but what each call did cannot be told: each resolves
            // its outcome as after a lost reply.
            let message = format!("unexpected reply to a batch of scripts: {other:?}");
            (0..n)
                .map(|_| Err(Error::connection(message.clone())))
                .collect()
        }
        Err(e) => (0..n).map(|_| Err(e.clone())).collect(),
    }
}

/// One call's two entries in a batch reply: `1, reply`, `2, 0` for nil,
/// `0, message`, or `3, 0` for a checked call that did not run.
fn unpack(code: Option<Value>, reply: Option<Value>) -> Result<Value> {
    let reply = reply.unwrap_or(Value::Null);
    match code.as_ref().and_then(script::as_i64) {
        Some(1) => Ok(reply),
        Some(2) => Ok(Value::Null),
        Some(3) => Err(Error::redis(NOT_RUN)),
        Some(0) => Err(Error::redis(
            reply.as_string().unwrap_or_else(|| format!("{reply:?}")),
        )),
        _ => Err(Error::connection(format!(
            "unexpected entry in a batch reply: {code:?}, {reply:?}"
        ))),
    }
}
