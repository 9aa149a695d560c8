//! The subscription hub: one Redis subscription per channel per client,
//! shared by every local waiter on that channel, whatever object it waits for.
//!
//! * How a message wakes local waiters is the object kind's [`Wake`] policy,
//!   as Redisson has a listener per kind: for locks, `0` wakes one waiter and
//!   `1` wakes them all (LockPubSub); for semaphores `n` wakes up to n; for
//!   count-down latches `0` wakes all. A wake-up only triggers a new attempt,
//!   so a lost or extra message costs time, never correctness.
//! * SUBSCRIBE and UNSUBSCRIBE are issued by one task, in the order the
//!   decisions were taken, so an unsubscribe can never overtake the
//!   re-subscription of the same channel. fred resolves SUBSCRIBE as soon as
//!   it is written, so a PING on the same connection, routed to the node that
//!   holds the subscription, proves the server processed it (and brings back
//!   its refusal, say by an ACL).
//! * A subscription that fails is forgotten, so the next waiter subscribes
//!   afresh; a waiter with time left tries again.
//! * fred's broadcast receivers report `Lagged` when messages were dropped;
//!   that wakes every waiter instead of ending the listener. After a
//!   reconnect exactly the channels in the registry are subscribed again (not
//!   fred's `resubscribe_all`, which sends argument-less SUBSCRIBEs whose error
//!   replies would land on a waiter's PING), and every waiter re-checks.
//! * Sharded subscriptions live on the primary that owns the channel's slot.
//!   When the slot moves (failover, resharding) the server drops them with a
//!   `sunsubscribe` push that fred discards, so each subscription's node is
//!   compared with the deployment's view of the slot's owner (in memory, at
//!   every change of the view and every [`SHARD_CHECK_PERIOD`]); a channel
//!   whose owner changed is subscribed again on the new owner and its
//!   waiters re-check.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface, PubsubInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, Value};
use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::config::Config;
use crate::engine::lifecycle::{until_set, Lifecycle};
use crate::error::{Error, Result};
use crate::topology::Topology;

/// Message that releases one waiter (Redisson's UNLOCK_MESSAGE).
pub(crate) const UNLOCK_MESSAGE: i64 = 0;
/// Message that releases every waiter (Redisson's READ_UNLOCK_MESSAGE).
pub(crate) const WAKE_ALL_MESSAGE: i64 = 1;

/// How a message on a channel wakes the local waiters there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Redisson's LockPubSub: `0` wakes one waiter, `1` wakes every waiter,
    /// anything else is ignored.
    OneOrAll,
    /// A lock message (`0` or `1`) wakes every waiter: the group lock's,
    /// whose waiters want different values of one group, so that one
    /// release may free what any of them waits for.
    All,
    /// Redisson's SemaphorePubSub: a message `n` (the permits now available,
    /// or just released) wakes up to `n` waiters.
    UpTo,
    /// Redisson's CountDownLatchPubSub: messages are a level; `0` (the count
    /// reached zero) wakes every waiter, `1` (a new count) wakes nobody.
    Level,
}

impl Wake {
    fn deliver(self, wake: &Notify, waiters: usize, payload: &Value) {
        match (self, crate::engine::script::as_i64(payload)) {
            (Wake::OneOrAll, Some(UNLOCK_MESSAGE)) => wake.notify_one(),
            (Wake::OneOrAll, Some(WAKE_ALL_MESSAGE)) => wake.notify_waiters(),
            (Wake::All, Some(UNLOCK_MESSAGE | WAKE_ALL_MESSAGE)) => wake.notify_waiters(),
            (Wake::UpTo, Some(n)) if n > 0 => {
                let n = usize::try_from(n).unwrap_or(usize::MAX).min(waiters);
                for _ in 0..n {
                    wake.notify_one();
                }
            }
            (Wake::Level, Some(0)) => wake.notify_waiters(),
            (Wake::UpTo | Wake::Level, Some(_)) => {}
            _ => tracing::debug!(?payload, "ignoring an unknown message"),
        }
    }
}

/// How often sharded subscriptions are checked against the cluster map.
pub(crate) const SHARD_CHECK_PERIOD: Duration = Duration::from_secs(1);

type Ready = Option<std::result::Result<(), Error>>;

struct Channel {
    wake: Notify,
    /// Every message and every re-check, whatever the policy: what an
    /// observer (an election's `observe`) waits on. Apart from `wake` so that
    /// an observer never takes a wake-up meant for a waiter.
    observed: Notify,
    /// How messages here wake waiters (set by the first waiter's kind).
    policy: Wake,
    /// Local waiters; changed only with the registry's map locked.
    waiters: AtomicUsize,
    ready: watch::Sender<Ready>,
    /// Sharded mode: the node the subscription was made on.
    node: Mutex<Option<String>>,
    /// Sharded mode: a move to the slot's new owner is queued.
    moving: std::sync::atomic::AtomicBool,
}

enum Op {
    Subscribe(Arc<str>, Arc<Channel>),
    /// Sharded mode: subscribe again on the slot's current owner.
    Resubscribe(Arc<str>, Arc<Channel>),
    Unsubscribe(Arc<str>),
    /// After a reconnect: subscribe every channel of the registry again.
    RestoreAll,
}

/// The registry of channels this client listens on.
pub(crate) struct Hub {
    client: SubscriberClient,
    channels: Mutex<HashMap<Arc<str>, Arc<Channel>>>,
    ops: mpsc::UnboundedSender<Op>,
}

/// One waiter's membership of a channel; leaving is dropping it.
pub(crate) struct Subscription {
    registry: Arc<Hub>,
    name: Arc<str>,
    channel: Arc<Channel>,
}

impl Subscription {
    /// A future that completes on this channel's next wake-up. Call
    /// `enable()` on it before the acquire attempt it guards, so a message
    /// that arrives during the attempt is not missed.
    pub(crate) fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.channel.wake.notified()
    }
}

impl Subscription {
    /// A future that completes on this channel's next message (of any
    /// payload) or re-check, without taking a waiter's wake-up. Enable it
    /// before the read it guards.
    pub(crate) fn observed(&self) -> tokio::sync::futures::Notified<'_> {
        self.channel.observed.notified()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut map = self.registry.channels.lock();
        if self.channel.waiters.fetch_sub(1, Ordering::AcqRel) == 1
            && map
                .get(&self.name)
                .is_some_and(|c| Arc::ptr_eq(c, &self.channel))
        {
            map.remove(&self.name);
            let _ = self.registry.ops.send(Op::Unsubscribe(self.name.clone()));
        }
    }
}

impl Hub {
    /// Starts the registry's tasks on an initialized subscriber client. They
    /// end when the client stops.
    pub(crate) fn start(
        client: SubscriberClient,
        sharded: bool,
        topology: &Arc<Topology>,
        config: &Config,
        lifecycle: &Lifecycle,
    ) -> Arc<Self> {
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let registry = Arc::new(Hub {
            client,
            channels: Mutex::new(HashMap::new()),
            ops,
        });
        let messages = registry.client.message_rx();
        let reconnects = registry.client.reconnect_rx();
        let weak = Arc::downgrade(&registry);
        let stopped = lifecycle.stopped();
        let subscriber = Subscriber {
            client: registry.client.clone(),
            sharded,
            timeout: config.subscription_timeout,
        };
        tokio::spawn(until_stopped(
            stopped.clone(),
            run_ops(subscriber, weak.clone(), ops_rx),
        ));
        tokio::spawn(until_stopped(
            stopped.clone(),
            listen(weak.clone(), messages),
        ));
        tokio::spawn(until_stopped(
            stopped.clone(),
            restore_on_reconnect(weak.clone(), reconnects),
        ));
        if sharded {
            tokio::spawn(until_stopped(
                stopped,
                follow_shard_owners(weak, Arc::downgrade(topology)),
            ));
        }
        registry
    }

    /// Joins the channel, subscribing it if this is its first local waiter.
    /// Waits at most `limit` for the subscription to be confirmed; a failed
    /// subscription is tried again while time is left.
    pub(crate) async fn join(
        self: &Arc<Self>,
        name: &str,
        policy: Wake,
        limit: Duration,
    ) -> Result<Subscription> {
        let until = Instant::now().checked_add(limit);
        loop {
            let membership = self.member(name, policy);
            let failure = {
                let mut ready = membership.channel.ready.subscribe();
                let confirmed = ready.wait_for(Option::is_some);
                let outcome = match until {
                    Some(until) => match tokio::time::timeout_at(until, confirmed).await {
                        Ok(outcome) => outcome,
                        Err(_) => return Err(Error::Timeout(limit)),
                    },
                    None => confirmed.await,
                };
                match outcome {
                    Err(_) => return Err(Error::Shutdown),
                    Ok(state) => match state.as_ref() {
                        Some(Ok(())) => None,
                        Some(Err(e)) => Some(e.clone()),
                        None => unreachable!("wait_for returned an unset state"),
                    },
                }
            };
            let Some(e) = failure else {
                return Ok(membership);
            };
            let retry_at = Instant::now() + RETRY_PAUSE;
            if !e.outcome_unknown() || until.is_some_and(|until| retry_at >= until) {
                return Err(e);
            }
            drop(membership);
            tokio::time::sleep_until(retry_at).await;
        }
    }

    /// This waiter's membership of the channel, creating (and subscribing)
    /// the channel if it has no local waiter.
    fn member(self: &Arc<Self>, name: &str, policy: Wake) -> Subscription {
        let mut map = self.channels.lock();
        let channel = match map.get(name) {
            Some(channel) => channel.clone(),
            None => {
                let name: Arc<str> = name.into();
                let channel = Arc::new(Channel {
                    wake: Notify::new(),
                    observed: Notify::new(),
                    policy,
                    waiters: AtomicUsize::new(0),
                    ready: watch::Sender::new(None),
                    node: Mutex::new(None),
                    moving: std::sync::atomic::AtomicBool::new(false),
                });
                map.insert(name.clone(), channel.clone());
                let _ = self.ops.send(Op::Subscribe(name, channel.clone()));
                channel
            }
        };
        channel.waiters.fetch_add(1, Ordering::AcqRel);
        Subscription {
            registry: self.clone(),
            name: name.into(),
            channel,
        }
    }

    fn dispatch(&self, channel: &str, payload: &Value) {
        let Some(target) = self.channels.lock().get(channel).cloned() else {
            return;
        };
        target.policy.deliver(
            &target.wake,
            target.waiters.load(Ordering::Acquire),
            payload,
        );
        target.observed.notify_waiters();
    }

    fn wake_all(&self) {
        for channel in self.channels.lock().values() {
            channel.wake.notify_waiters();
            channel.observed.notify_waiters();
        }
    }

    /// Closes the subscriber connection.
    pub(crate) async fn quit(&self) {
        let _ = self.client.quit().await;
    }
}

async fn until_stopped(
    stopped: watch::Receiver<bool>,
    task: impl std::future::Future<Output = ()>,
) {
    tokio::select! {
        _ = until_set(stopped) => {}
        _ = task => {}
    }
}

/// Pause before a waiter tries a failed subscription again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The subscriber connection and how to confirm subscriptions on it.
struct Subscriber {
    client: SubscriberClient,
    sharded: bool,
    /// Redisson's `subscriptionTimeout`.
    timeout: Duration,
}

impl Subscriber {
    /// SUBSCRIBE (or SSUBSCRIBE) `channels`, then a PING on the connection
    /// that carries them, whose answer proves the server processed them.
    ///
    /// fred resolves a SUBSCRIBE as soon as it is written and drops an error
    /// reply that arrives before a later command is queued, so a refusal can
    /// vanish. Two checks catch it: the PING is queued together with the
    /// SUBSCRIBE (so the refusal usually lands on it), and its reply must
    /// have the shape of a subscribed connection (`["pong", ""]`, not
    /// `PONG`). A refusal of one channel on a connection that already holds
    /// others can still go unseen; such a waiter wakes at the lock's TTL.
    async fn subscribe(&self, channels: Vec<Arc<str>>) -> Result<()> {
        if channels.is_empty() {
            return Ok(());
        }
        let options = Options {
            timeout: Some(self.timeout),
            ..Options::default()
        };
        let slot = if self.sharded {
            fred::util::redis_keyslot(channels[0].as_bytes())
        } else {
            // Where fred sends classic subscriptions on a cluster.
            fred::util::redis_keyslot(self.client.id().as_bytes())
        };
        let confirm = Options {
            cluster_hash: Some(ClusterHash::Custom(slot)),
            ..options.clone()
        };
        let names: Vec<String> = channels.iter().map(|c| c.to_string()).collect();
        let redis = |e: fred::error::Error| Error::from_redis(&e, self.timeout);
        let pong = if self.sharded {
            // SSUBSCRIBE waits for the server's reply (to follow MOVED), one
            // slot at a time.
            for name in &names {
                ssubscribe(&self.client, name, &options)
                    .await
                    .map_err(redis)?;
            }
            self.client.with_options(&confirm).ping::<Value>(None).await
        } else {
            let subscriber = self.client.with_options(&options);
            let pinger = self.client.with_options(&confirm);
            let (subscribed, pong) =
                tokio::join!(subscriber.subscribe(names), pinger.ping::<Value>(None));
            subscribed.map_err(redis)?;
            pong
        };
        match pong.map_err(redis)? {
            Value::Array(_) => Ok(()),
            other => Err(Error::redis(format!(
                "SUBSCRIBE did not take effect (the connection is not subscribed; PING said \
                 {other:?}); is the user allowed to subscribe?"
            ))),
        }
    }
}

/// Issues SUBSCRIBE / UNSUBSCRIBE strictly in decision order.
async fn run_ops(
    subscriber: Subscriber,
    registry: Weak<Hub>,
    mut ops: mpsc::UnboundedReceiver<Op>,
) {
    let client = &subscriber.client;
    while let Some(op) = ops.recv().await {
        match op {
            Op::Subscribe(name, channel) => {
                let result = subscriber.subscribe(vec![name.clone()]).await;
                match &result {
                    Ok(()) if subscriber.sharded => {
                        *channel.node.lock() = shard_owner(client, &name);
                    }
                    Ok(()) => {}
                    Err(e) => {
                        tracing::warn!(channel = %name, error = %e, "subscribe failed");
                        // Forget it, so that the next waiter subscribes afresh
                        // (and make sure the server does not keep half of it).
                        if let Some(registry) = registry.upgrade() {
                            let mut map = registry.channels.lock();
                            if map.get(&name).is_some_and(|c| Arc::ptr_eq(c, &channel)) {
                                map.remove(&name);
                                let _ = registry.ops.send(Op::Unsubscribe(name.clone()));
                            }
                        }
                    }
                }
                channel.ready.send_replace(Some(result));
            }
            Op::Resubscribe(name, channel) => {
                if channel.waiters.load(Ordering::Acquire) == 0 {
                    channel.moving.store(false, Ordering::Release);
                    continue; // left meanwhile; its unsubscribe is queued
                }
                match subscriber.subscribe(vec![name.clone()]).await {
                    Ok(()) => {
                        *channel.node.lock() = shard_owner(client, &name);
                        tracing::info!(channel = %name, node = ?channel.node.lock(), "shard subscription moved with its slot");
                    }
                    // The next check tries again.
                    Err(e) => {
                        tracing::warn!(channel = %name, error = %e, "re-subscribing a moved shard channel failed")
                    }
                }
                channel.moving.store(false, Ordering::Release);
                // A message sent while it moved is lost: re-check.
                channel.wake.notify_waiters();
                channel.observed.notify_waiters();
            }
            Op::Unsubscribe(name) => {
                let result = if subscriber.sharded {
                    client.sunsubscribe(&*name).await
                } else {
                    client.unsubscribe(&*name).await
                };
                if let Err(e) = result {
                    tracing::debug!(channel = %name, error = %e, "unsubscribe failed");
                }
            }
            Op::RestoreAll => {
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                let mut delay = Duration::from_millis(50);
                loop {
                    let names: Vec<Arc<str>> = registry.channels.lock().keys().cloned().collect();
                    let restored = if subscriber.sharded {
                        // One slot per SSUBSCRIBE.
                        let mut outcome = Ok(());
                        for name in names {
                            outcome = subscriber.subscribe(vec![name]).await;
                            if outcome.is_err() {
                                break;
                            }
                        }
                        outcome
                    } else {
                        subscriber.subscribe(names).await
                    };
                    match restored {
                        Ok(()) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "resubscribe after a reconnect failed; retrying");
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(2));
                        }
                    }
                }
                // Messages sent while disconnected are lost: every waiter re-checks.
                registry.wake_all();
            }
        }
    }
}

async fn listen(
    registry: Weak<Hub>,
    mut messages: tokio::sync::broadcast::Receiver<fred::types::Message>,
) {
    loop {
        let received = messages.recv().await;
        let Some(registry) = registry.upgrade() else {
            return;
        };
        match received {
            Ok(message) => registry.dispatch(&message.channel, &message.value),
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "pub/sub receiver lagged; waking every waiter");
                registry.wake_all();
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// SSUBSCRIBE on the slot's owner. fred's cluster map may be stale after a
/// failover or a resharding (and a redirect can exhaust its attempts), so a
/// failure re-reads the map and tries again, a few times.
async fn ssubscribe(
    client: &SubscriberClient,
    channel: &str,
    options: &Options,
) -> fred::prelude::FredResult<()> {
    let mut tries = 0;
    loop {
        match client.with_options(options).ssubscribe(channel).await {
            Ok(()) => return Ok(()),
            Err(e) if tries < 3 => {
                tracing::debug!(channel, error = %e, "SSUBSCRIBE failed; re-reading the cluster map");
                tries += 1;
                let _ = client.sync_cluster().await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The node that owns `channel`'s slot, as fred's cluster map says.
fn shard_owner(client: &SubscriberClient, channel: &str) -> Option<String> {
    let slot = fred::util::redis_keyslot(channel.as_bytes());
    client
        .cached_cluster_state()
        .and_then(|state| state.get_server(slot).map(|s| s.to_string()))
}

/// Moves every shard subscription whose slot changed owner. Each is
/// compared with the deployment's view (which follows the cluster by its
/// scans and fred's slot-map changes) at every change of the view and every
/// [`SHARD_CHECK_PERIOD`]: a comparison in memory, no traffic. Only when one
/// disagrees is the subscriber's slot map read again, at most once per
/// change of the view (re-reading it costs fred a new connection and three
/// commands on the server).
async fn follow_shard_owners(registry: Weak<Hub>, topology: Weak<Topology>) {
    let Some(mut changes) = topology.upgrade().map(|t| t.changes()) else {
        return;
    };
    let mut synced_at = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SHARD_CHECK_PERIOD) => {}
            changed = changes.changed() => if changed.is_err() { return },
        }
        let generation = *changes.borrow_and_update();
        let (Some(registry), Some(topology)) = (registry.upgrade(), topology.upgrade()) else {
            return;
        };
        let moved: Vec<(Arc<str>, Arc<Channel>)> = registry
            .channels
            .lock()
            .iter()
            .filter(|(name, channel)| {
                // Not yet confirmed: the subscribe in flight records its node.
                channel.node.lock().as_deref().is_some_and(|node| {
                    let slot = fred::util::redis_keyslot(name.as_bytes());
                    topology.serves(slot, node) == Some(false)
                })
            })
            .map(|(name, channel)| (name.clone(), channel.clone()))
            .collect();
        if moved.is_empty() || synced_at == Some(generation) {
            continue;
        }
        if let Err(e) = registry.client.sync_cluster().await {
            tracing::debug!(error = %e, "cluster map refresh failed");
            continue;
        }
        synced_at = Some(generation);
        for (name, channel) in moved {
            let subscribed_on = channel.node.lock().clone();
            if shard_owner(&registry.client, &name) != subscribed_on
                && !channel.moving.swap(true, Ordering::AcqRel)
            {
                let _ = registry.ops.send(Op::Resubscribe(name, channel));
            }
        }
    }
}

async fn restore_on_reconnect(
    registry: Weak<Hub>,
    mut reconnects: tokio::sync::broadcast::Receiver<fred::types::config::Server>,
) {
    loop {
        match reconnects.recv().await {
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
        let Some(registry) = registry.upgrade() else {
            return;
        };
        // In decision order with the other subscription changes.
        let _ = registry.ops.send(Op::RestoreAll);
    }
}
