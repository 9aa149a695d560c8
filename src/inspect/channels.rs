//! [`ChannelWatch`]: the messages published on chosen channels, on a
//! connection of its own, for tools that show what the objects say
//! (the CLI's `watch`). Locks, waiters and the hub are not involved.

use fred::clients::SubscriberClient;
use fred::interfaces::{EventInterface, PubsubInterface};
use fred::types::Message;
use tokio::sync::broadcast;

use crate::client::RedissonClient;
use crate::error::{Error, Result};

/// A message published on a watched channel.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelMessage {
    /// The channel it was published on.
    pub channel: String,
    /// Its payload, as text (`0`, `1`, a permit count, ...).
    pub payload: String,
}

/// What [`ChannelWatch::next`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Watched {
    /// A message.
    Message(ChannelMessage),
    /// This many messages came faster than they were read, and were dropped.
    Missed(u64),
}

/// Subscriptions on a connection of their own (built from the client's
/// settings; on Sentinel it follows the primary; subscriptions are renewed
/// after a reconnection), made by [`RedissonClient::watch_channels`].
/// Sharded pub/sub where the client uses it (`SSUBSCRIBE`), classic
/// otherwise.
pub struct ChannelWatch {
    client: RedissonClient,
    subscriber: SubscriberClient,
    messages: broadcast::Receiver<Message>,
    sharded: bool,
    patterns: bool,
    closed: bool,
}

impl std::fmt::Debug for ChannelWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelWatch")
            .field("sharded", &self.sharded)
            .finish_non_exhaustive()
    }
}

impl RedissonClient {
    /// Opens a [`ChannelWatch`]: a connection of its own that subscribes
    /// to the channels it is given, for tools that show an object's
    /// messages (`redisson-lock watch`).
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] after [`RedissonClient::shutdown`];
    /// [`Error::Connection`] or [`Error::Timeout`] when the connection
    /// cannot be made.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes may leave the connection
    /// opening; it is closed when the client shuts down.
    ///
    /// ```no_run
    /// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
    /// use redisson_lock::inspect::Watched;
    /// let mut watch = client.watch_channels().await?;
    /// watch.subscribe(&client.lock("orders")?.channel()).await?;
    /// while let Some(Watched::Message(m)) = watch.next().await {
    ///     println!("{} {}", m.channel, m.payload);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn watch_channels(&self) -> Result<ChannelWatch> {
        let subscriber = self.engine.extra_subscriber().await?;
        // Subscriptions are sent again after every reconnection (a task of
        // fred's, detached: it ends when the connection is closed).
        drop(subscriber.manage_subscriptions());
        let messages = subscriber.message_rx();
        Ok(ChannelWatch {
            client: self.clone(),
            subscriber,
            messages,
            sharded: self.sharded_pubsub(),
            patterns: false,
            closed: false,
        })
    }
}

impl ChannelWatch {
    /// Whether this watch uses sharded pub/sub (`SSUBSCRIBE`), which has
    /// no patterns.
    pub fn is_sharded(&self) -> bool {
        self.sharded
    }

    /// Subscribes to `channel`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name; [`Error::Redis`] when
    /// the server refuses (an ACL without the channel); [`Error::Timeout`]
    /// or [`Error::Connection`].
    ///
    /// # Cancel safety
    ///
    /// Cancelled, the subscription may or may not be made.
    pub async fn subscribe(&self, channel: &str) -> Result<()> {
        if channel.is_empty() {
            return Err(Error::InvalidArgument("the channel name is empty".into()));
        }
        let timeout = self.client.engine.timeout();
        let sent = async {
            if self.sharded {
                self.subscriber.ssubscribe(channel).await
            } else {
                self.subscriber.subscribe(channel).await
            }
        };
        match tokio::time::timeout(timeout, crate::engine::boxed_reply(|| sent)).await {
            Ok(outcome) => outcome.map_err(|e| Error::from_redis(&e, timeout)),
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }

    /// Subscribes to every channel matching the glob `pattern`
    /// (`PSUBSCRIBE`; a fair lock's waiters' channels, say).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] on sharded pub/sub, which has no
    /// patterns, or for an empty pattern; otherwise as
    /// [`ChannelWatch::subscribe`].
    ///
    /// # Cancel safety
    ///
    /// As [`ChannelWatch::subscribe`].
    pub async fn subscribe_pattern(&mut self, pattern: &str) -> Result<()> {
        if self.sharded {
            return Err(Error::InvalidArgument(
                "sharded pub/sub has no patterns: subscribe to each channel".into(),
            ));
        }
        if pattern.is_empty() {
            return Err(Error::InvalidArgument("the pattern is empty".into()));
        }
        let timeout = self.client.engine.timeout();
        let sent = self.subscriber.psubscribe(pattern);
        match tokio::time::timeout(timeout, crate::engine::boxed_reply(|| sent)).await {
            Ok(outcome) => {
                outcome.map_err(|e| Error::from_redis(&e, timeout))?;
                self.patterns = true;
                Ok(())
            }
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }

    /// The next message, or how many were missed; `None` once the
    /// connection is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a message not returned stays for the next call.
    pub async fn next(&mut self) -> Option<Watched> {
        if self.closed {
            return None;
        }
        match self.messages.recv().await {
            Ok(m) => Some(Watched::Message(ChannelMessage {
                channel: m.channel.to_string(),
                payload: m.value.as_string().unwrap_or_default(),
            })),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(Watched::Missed(n)),
            Err(broadcast::error::RecvError::Closed) => {
                self.closed = true;
                None
            }
        }
    }

    /// Closes the connection.
    ///
    /// # Cancel safety
    ///
    /// Cancelled, the connection is closed by the client's shutdown instead.
    pub async fn close(mut self) {
        self.closed = true;
        self.client.engine.drop_subscriber(&self.subscriber).await;
    }
}

impl Drop for ChannelWatch {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        // Not closed: close in the background (a runtime is needed).
        let (engine, subscriber) = (self.client.engine.clone(), self.subscriber.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { engine.drop_subscriber(&subscriber).await });
        }
    }
}
