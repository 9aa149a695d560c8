//! Unlock-message subscriptions: one Redis subscription per lock channel per
//! client, shared by every local waiter of that lock.
//!
//! * Message `0` wakes one local waiter, `1` wakes them all (Redisson's
//!   LockPubSub). A wake-up only triggers a new acquire attempt, so a lost or
//!   extra message costs time, never correctness.
//! * SUBSCRIBE and UNSUBSCRIBE are issued by one task, in the order the
//!   decisions were taken, so an unsubscribe can never overtake the
//!   re-subscription of the same channel. A PING after each SUBSCRIBE makes
//!   sure the server has processed it before a waiter relies on it.
//! * fred's broadcast receivers report `Lagged` when messages were dropped;
//!   that wakes every waiter instead of ending the listener. After a
//!   reconnect every channel is subscribed again and every waiter re-checks.
//! * Sharded subscriptions live on the primary that owns the channel's slot.
//!   When the slot moves (failover, resharding) the server drops them with a
//!   `sunsubscribe` push that fred discards, so while any channel is
//!   subscribed the cluster map is re-read every [`SHARD_CHECK_PERIOD`]; a
//!   channel whose owner changed is subscribed again on the new owner and
//!   its waiters re-check.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface, PubsubInterface};
use fred::types::Value;
use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{mpsc, watch, Notify};

use crate::error::{Error, Result};

/// Message that releases one waiter (Redisson's UNLOCK_MESSAGE).
pub(crate) const UNLOCK_MESSAGE: i64 = 0;
/// Message that releases every waiter (Redisson's READ_UNLOCK_MESSAGE).
pub(crate) const WAKE_ALL_MESSAGE: i64 = 1;

/// How often sharded subscriptions are checked against the cluster map.
pub(crate) const SHARD_CHECK_PERIOD: Duration = Duration::from_secs(1);

type Ready = Option<std::result::Result<(), Error>>;

struct Channel {
    wake: Notify,
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
}

/// The registry of channels this client listens on.
pub(crate) struct Subscriptions {
    client: SubscriberClient,
    channels: Mutex<HashMap<Arc<str>, Arc<Channel>>>,
    ops: mpsc::UnboundedSender<Op>,
}

/// One waiter's membership of a channel; leaving is dropping it.
pub(crate) struct Subscription {
    registry: Arc<Subscriptions>,
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

impl Subscriptions {
    /// Starts the registry's tasks on an initialized subscriber client. They
    /// end when `shutdown` turns true.
    pub(crate) fn start(
        client: SubscriberClient,
        sharded: bool,
        timeout: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let registry = Arc::new(Subscriptions {
            client,
            channels: Mutex::new(HashMap::new()),
            ops,
        });
        let messages = registry.client.message_rx();
        let reconnects = registry.client.reconnect_rx();
        let weak = Arc::downgrade(&registry);
        tokio::spawn(run_ops(registry.client.clone(), sharded, timeout, ops_rx));
        tokio::spawn(until_shutdown(
            shutdown.clone(),
            listen(weak.clone(), messages),
        ));
        tokio::spawn(until_shutdown(
            shutdown.clone(),
            resubscribe_on_reconnect(weak.clone(), reconnects),
        ));
        if sharded {
            tokio::spawn(until_shutdown(shutdown, follow_shard_owners(weak)));
        }
        registry
    }

    /// Joins the channel, subscribing it if this is its first local waiter.
    /// Waits at most `limit` for the subscription to be confirmed.
    pub(crate) async fn join(
        self: &Arc<Self>,
        name: &str,
        limit: Duration,
    ) -> Result<Subscription> {
        let membership = {
            let mut map = self.channels.lock();
            let channel = match map.get(name) {
                Some(channel) => channel.clone(),
                None => {
                    let name: Arc<str> = name.into();
                    let channel = Arc::new(Channel {
                        wake: Notify::new(),
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
        };
        let mut ready = membership.channel.ready.subscribe();
        let outcome = tokio::time::timeout(limit, ready.wait_for(Option::is_some)).await;
        match outcome {
            Err(_) => Err(Error::Timeout(limit)),
            Ok(Err(_)) => Err(Error::Shutdown),
            Ok(Ok(state)) => match state.as_ref() {
                Some(Ok(())) => Ok(membership),
                Some(Err(e)) => Err(e.clone()),
                None => unreachable!("wait_for returned an unset state"),
            },
        }
    }

    fn dispatch(&self, channel: &str, payload: &Value) {
        let Some(target) = self.channels.lock().get(channel).cloned() else {
            return;
        };
        match crate::script::as_i64(payload) {
            Some(UNLOCK_MESSAGE) => target.wake.notify_one(),
            Some(WAKE_ALL_MESSAGE) => target.wake.notify_waiters(),
            _ => tracing::debug!(channel, ?payload, "ignoring unknown lock message"),
        }
    }

    fn wake_all(&self) {
        for channel in self.channels.lock().values() {
            channel.wake.notify_waiters();
        }
    }

    /// Closes the subscriber connection.
    pub(crate) async fn quit(&self) {
        let _ = self.client.quit().await;
    }
}

async fn until_shutdown(
    mut shutdown: watch::Receiver<bool>,
    task: impl std::future::Future<Output = ()>,
) {
    tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => {}
        _ = task => {}
    }
}

/// Issues SUBSCRIBE / UNSUBSCRIBE strictly in decision order.
async fn run_ops(
    client: SubscriberClient,
    sharded: bool,
    timeout: Duration,
    mut ops: mpsc::UnboundedReceiver<Op>,
) {
    while let Some(op) = ops.recv().await {
        match op {
            Op::Subscribe(name, channel) => {
                let subscribed = if sharded {
                    ssubscribe(&client, &name).await
                } else {
                    client.subscribe(&*name).await
                };
                // Classic SUBSCRIBE resolves when written; the PING reply proves
                // the server processed it.
                let result = match subscribed {
                    Ok(()) => client.ping::<Value>(None).await.map(drop),
                    Err(e) => Err(e),
                };
                let result = result.map_err(|e| Error::from_redis(&e, timeout));
                if let Err(e) = &result {
                    tracing::warn!(channel = %name, error = %e, "subscribe failed");
                }
                if sharded && result.is_ok() {
                    *channel.node.lock() = shard_owner(&client, &name);
                }
                channel.ready.send_replace(Some(result));
            }
            Op::Resubscribe(name, channel) => {
                if channel.waiters.load(Ordering::Acquire) == 0 {
                    channel.moving.store(false, Ordering::Release);
                    continue; // left meanwhile; its unsubscribe is queued
                }
                match ssubscribe(&client, &name).await {
                    Ok(()) => {
                        *channel.node.lock() = shard_owner(&client, &name);
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
            }
            Op::Unsubscribe(name) => {
                let result = if sharded {
                    client.sunsubscribe(&*name).await
                } else {
                    client.unsubscribe(&*name).await
                };
                if let Err(e) = result {
                    tracing::debug!(channel = %name, error = %e, "unsubscribe failed");
                }
            }
        }
    }
}

async fn listen(
    registry: std::sync::Weak<Subscriptions>,
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
async fn ssubscribe(client: &SubscriberClient, channel: &str) -> fred::prelude::FredResult<()> {
    let mut tries = 0;
    loop {
        match client.ssubscribe(channel).await {
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

/// Re-reads the cluster map while shard channels are subscribed, and moves
/// every subscription whose slot changed owner.
async fn follow_shard_owners(registry: std::sync::Weak<Subscriptions>) {
    loop {
        tokio::time::sleep(SHARD_CHECK_PERIOD).await;
        let Some(registry) = registry.upgrade() else {
            return;
        };
        let channels: Vec<(Arc<str>, Arc<Channel>)> = registry
            .channels
            .lock()
            .iter()
            .map(|(name, channel)| (name.clone(), channel.clone()))
            .collect();
        if channels.is_empty() {
            continue;
        }
        if let Err(e) = registry.client.sync_cluster().await {
            tracing::debug!(error = %e, "cluster map refresh failed");
            continue;
        }
        for (name, channel) in channels {
            let subscribed_on = channel.node.lock().clone();
            // Not yet confirmed: the subscribe in flight records its node.
            if subscribed_on.is_none() {
                continue;
            }
            if shard_owner(&registry.client, &name) != subscribed_on
                && !channel.moving.swap(true, Ordering::AcqRel)
            {
                let _ = registry.ops.send(Op::Resubscribe(name, channel));
            }
        }
    }
}

async fn resubscribe_on_reconnect(
    registry: std::sync::Weak<Subscriptions>,
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
        let mut delay = Duration::from_millis(50);
        while let Err(e) = registry.client.resubscribe_all().await {
            tracing::warn!(error = %e, "resubscribe failed; retrying");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
        // Messages sent while disconnected are lost: every waiter re-checks.
        registry.wake_all();
    }
}
