//! What the sentinels of a Sentinel deployment say, and what they announce.
//!
//! * **What they say**: every sentinel is asked (`SENTINEL MASTER`,
//!   `SENTINEL REPLICAS`), at most once a second. Sentinels disagree during
//!   a failover: one that has not heard of it yet names the old primary, and
//!   one that has just heard knows the new primary's address but not yet
//!   its run id. The answer with the newest configuration epoch names the
//!   primary; the view is *settled* only when every sentinel that answered
//!   agrees on it, none flags it (`failover_in_progress`, `s_down`,
//!   `o_down`), and its run id is known (from the sentinels, or, while
//!   they have not read it yet, from the node they name). A sentinel that does not answer
//!   is left alone for a while (doubling up to 10 s), so one dead sentinel
//!   does not slow every write.
//! * **What they announce**: every sentinel publishes the steps of a
//!   failover it runs (`+try-failover` comes a timer tick or more before a
//!   replica is promoted) and its end. Each sentinel's announcements are
//!   tracked on their own: a failover one sentinel started is over when that
//!   sentinel says so, or when it is polled afterwards and shows none (a
//!   missed message costs at most a poll).
//!
//! Between the promotion of one replica and the reconfiguration of the
//! other, the old primary still takes writes and its remaining replica still
//! confirms them, and those writes are gone once the replica resyncs from
//! the new primary: without these two, one `SENTINEL FAILOVER` handed out 87
//! fencing tokens a second time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::config::{Config as FredConfig, ReconnectPolicy, ServerConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// How long the sentinels' answers are trusted.
const VIEW_TTL: Duration = Duration::from_secs(1);

/// How long a failover a sentinel announced counts as under way when that
/// sentinel neither announces its end nor can be polled.
const FAILOVER_MAX: Duration = Duration::from_secs(60);

/// The longest a sentinel that did not answer is left alone.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What the sentinels say about the service's primary.
#[derive(Debug, Clone)]
pub(crate) struct View {
    /// The primary's run id.
    pub(crate) master_run_id: String,
    /// Its replicas the sentinels have not concluded are down.
    pub(crate) replicas: i64,
    /// Every sentinel that answered names this primary, at the same epoch,
    /// unflagged, with a known run id.
    pub(crate) settled: bool,
    read_at: Instant,
}

/// One sentinel's answer.
struct Answer {
    master: (String, u16),
    run_id: String,
    replicas: i64,
    epoch: u64,
    /// It flags the primary `failover_in_progress`, `s_down` or `o_down`.
    flagged: bool,
}

/// A command connection to one sentinel, and when a failed one may be
/// tried again.
#[derive(Default)]
struct Link {
    client: Option<Client>,
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// A subscription to one sentinel: the client, fred's connection task, and
/// the task that reads the announcements.
struct Listener {
    subscriber: SubscriberClient,
    connection: fred::types::ConnectHandle,
    follower: tokio::task::JoinHandle<()>,
}

impl Listener {
    /// Stops it: a polite `QUIT` for a connected sentinel, and the tasks
    /// stopped in any case (a sentinel still being connected to would never
    /// answer it).
    async fn stop(self) {
        self.follower.abort();
        let _ = tokio::time::timeout(Duration::from_millis(200), self.subscriber.quit()).await;
        self.connection.abort();
    }
}

/// The sentinels of one client.
pub(crate) struct Sentinels {
    /// The client's fred settings (credentials, TLS), pointed at one sentinel at a time.
    base: FredConfig,
    hosts: Vec<(String, u16)>,
    service: String,
    timeout: Duration,
    links: tokio::sync::Mutex<Vec<Link>>,
    view: Mutex<Option<View>>,
    /// Per sentinel: since when it has announced a failover it has not
    /// announced the end of.
    announced: Arc<Mutex<Vec<Option<Instant>>>>,
    /// Bumped at every announcement: cached node states are read again.
    generation: Arc<AtomicU64>,
    listeners: Mutex<Vec<Listener>>,
}

impl Sentinels {
    pub(crate) fn new(
        base: &FredConfig,
        hosts: Vec<(String, u16)>,
        service: String,
        timeout: Duration,
        generation: Arc<AtomicU64>,
    ) -> Self {
        Sentinels {
            base: base.clone(),
            links: tokio::sync::Mutex::new(hosts.iter().map(|_| Link::default()).collect()),
            announced: Arc::new(Mutex::new(vec![None; hosts.len()])),
            hosts,
            service,
            timeout,
            view: Mutex::new(None),
            generation,
            listeners: Mutex::new(vec![]),
        }
    }

    /// Whether a sentinel has announced a failover that is not over.
    pub(crate) fn failover_announced(&self) -> bool {
        self.announced
            .lock()
            .iter()
            .any(|a| a.is_some_and(|since| since.elapsed() < FAILOVER_MAX))
    }

    /// Forgets the last answers: the next write asks again.
    pub(crate) fn forget(&self) {
        *self.view.lock() = None;
    }

    /// The settings of a connection to one sentinel.
    fn config_for(&self, host: &str, port: u16) -> FredConfig {
        let mut config = self.base.clone();
        config.server = ServerConfig::new_centralized(host, port);
        config.database = None;
        config
    }

    /// Subscribes to every sentinel's failover announcements, for the life
    /// of the client; `topology_changed` is woken when a failover ends. A
    /// sentinel that cannot be reached now is subscribed to once it can.
    pub(crate) fn listen(&self, topology_changed: Arc<tokio::sync::Notify>) {
        let mut listeners = self.listeners.lock();
        for (index, (host, port)) in self.hosts.iter().enumerate() {
            let mut config = self.config_for(host, *port);
            // Keep trying a sentinel that is down now.
            config.fail_fast = false;
            let Ok(subscriber) = Builder::from_config(config)
                .with_connection_config(|c| {
                    c.connection_timeout = self.timeout;
                    c.internal_command_timeout = self.timeout;
                })
                .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
                .build_subscriber_client()
            else {
                continue;
            };
            // Subscribed to before connecting, so the first connection's
            // event is not missed.
            let connections = subscriber.reconnect_rx();
            let messages = subscriber.message_rx();
            let connection = subscriber.connect();
            let follower = tokio::spawn(follow(
                subscriber.clone(),
                connections,
                messages,
                index,
                self.service.clone(),
                self.announced.clone(),
                self.generation.clone(),
                topology_changed.clone(),
            ));
            listeners.push(Listener {
                subscriber,
                connection,
                follower,
            });
        }
    }

    /// What the sentinels say, asked again when the last answers are a
    /// second old.
    pub(crate) async fn view(&self) -> Result<View> {
        if let Some(view) = self.fresh_view() {
            return Ok(view);
        }
        let mut links = self.links.lock().await;
        // Another write may have asked while this one waited for the links.
        if let Some(view) = self.fresh_view() {
            return Ok(view);
        }
        let asked_at = Instant::now();
        let answers = futures::future::join_all(
            links
                .iter_mut()
                .zip(&self.hosts)
                .map(|(link, (host, port))| self.ask(link, host, *port)),
        )
        .await;
        let mut last_error = None;
        let mut answered = vec![];
        for (index, answer) in answers.into_iter().enumerate() {
            match answer {
                Some(Ok(answer)) => answered.push((index, answer)),
                Some(Err(e)) => last_error = Some(e),
                None => {}
            }
        }
        let Some(newest) = answered.iter().map(|(_, a)| a).max_by_key(|a| a.epoch) else {
            // Nothing was sent: a definite failure.
            return Err(Error::NoPrimary(match last_error {
                Some(e) => format!("no sentinel answered: {e}"),
                None => "every sentinel failed recently".into(),
            }));
        };
        let agreed = answered
            .iter()
            .all(|(_, a)| !a.flagged && a.epoch == newest.epoch && a.master == newest.master);
        let mut run_id = newest.run_id.clone();
        if run_id.is_empty() && agreed {
            // After a failover a sentinel learns the new primary's run id
            // from its next INFO of it, up to 10 s later (Sentinel's INFO
            // period), and until then nothing could be confirmed: the node
            // the sentinels agree on is asked instead.
            run_id = self
                .primary_run_id(&newest.master)
                .await
                .unwrap_or_default();
        }
        let settled = !run_id.is_empty() && agreed;
        // A failover a sentinel announced before this poll, and that it
        // shows no more, is over even if its end message was missed.
        let mut announced = self.announced.lock();
        for (index, answer) in &answered {
            if !answer.flagged && announced[*index].is_some_and(|since| since < asked_at) {
                announced[*index] = None;
            }
        }
        drop(announced);
        let view = View {
            master_run_id: run_id,
            replicas: newest.replicas,
            settled,
            read_at: Instant::now(),
        };
        *self.view.lock() = Some(view.clone());
        Ok(view)
    }

    fn fresh_view(&self) -> Option<View> {
        self.view
            .lock()
            .clone()
            .filter(|v| v.read_at.elapsed() < VIEW_TTL)
    }

    /// Asks one sentinel, connecting first if needed. `None`: it failed
    /// recently and is left alone for now.
    async fn ask(&self, link: &mut Link, host: &str, port: u16) -> Option<Result<Answer>> {
        if link.retry_at.is_some_and(|at| Instant::now() < at) {
            return None;
        }
        let asked = tokio::time::timeout(self.timeout, async {
            if link.client.is_none() {
                link.client = Some(self.connect(host, port).await?);
            }
            self.ask_connected(link.client.as_ref().expect("connected"))
                .await
        })
        .await
        .unwrap_or(Err(Error::Timeout(self.timeout)));
        match &asked {
            Ok(_) => {
                link.retry_at = None;
                link.backoff = Duration::ZERO;
            }
            Err(_) => {
                if let Some(client) = link.client.take() {
                    tokio::spawn(async move {
                        let _ = client.quit().await;
                    });
                }
                link.backoff = (link.backoff * 2).clamp(Duration::from_millis(500), MAX_BACKOFF);
                link.retry_at = Some(Instant::now() + link.backoff);
            }
        }
        Some(asked)
    }

    async fn connect(&self, host: &str, port: u16) -> Result<Client> {
        let mut config = self.config_for(host, port);
        config.fail_fast = true;
        let client = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = self.timeout;
                c.internal_command_timeout = self.timeout;
            })
            .with_performance_config(|p| p.default_command_timeout = self.timeout)
            .build()
            .map_err(|e| Error::Config(e.details().to_string()))?;
        match client.init().await {
            Ok(_) => Ok(client),
            Err(e) => {
                let _ = client.quit().await;
                Err(Error::from_redis(&e, self.timeout))
            }
        }
    }

    /// The run id of the node at `address`, if it answers that it is a
    /// primary.
    async fn primary_run_id(&self, (host, port): &(String, u16)) -> Option<String> {
        let info = tokio::time::timeout(self.timeout, async {
            let client = self.connect(host, *port).await.ok()?;
            let info: Option<String> = client
                .custom(
                    CustomCommand::new_static("INFO", ClusterHash::Random, false),
                    Vec::<Value>::new(),
                )
                .await
                .ok();
            let _ = client.quit().await;
            info
        })
        .await
        .ok()
        .flatten()?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        if field("role:").as_deref() != Some("master") {
            return None;
        }
        field("run_id:").filter(|id| !id.is_empty())
    }

    async fn ask_connected(&self, client: &Client) -> Result<Answer> {
        let sentinel = |args: Vec<&str>| {
            let args: Vec<Value> = args.into_iter().map(Value::from).collect();
            client.custom::<Value, Value>(
                CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
                args,
            )
        };
        let map_err = |e: fred::error::Error| Error::from_redis(&e, self.timeout);
        let master = sentinel(vec!["MASTER", &self.service])
            .await
            .map_err(map_err)?;
        let replicas = sentinel(vec!["REPLICAS", &self.service])
            .await
            .map_err(map_err)?;
        let fields = field_map(&master);
        let host = fields.get("ip").cloned();
        let port = fields.get("port").and_then(|p| p.parse().ok());
        let (Some(host), Some(port)) = (host, port) else {
            return Err(Error::redis(format!(
                "the sentinels know no primary for service `{}`",
                self.service
            )));
        };
        let flags = fields.get("flags").cloned().unwrap_or_default();
        Ok(Answer {
            master: (host, port),
            run_id: fields.get("runid").cloned().unwrap_or_default(),
            replicas: healthy_replicas(&replicas),
            epoch: fields
                .get("config-epoch")
                .and_then(|e| e.parse().ok())
                .unwrap_or(0),
            flagged: flags
                .split(',')
                .any(|f| matches!(f, "failover_in_progress" | "s_down" | "o_down")),
        })
    }

    /// Closes every connection to the sentinels and stops listening.
    pub(crate) async fn quit(&self) {
        let listeners: Vec<_> = self.listeners.lock().drain(..).collect();
        for listener in listeners {
            listener.stop().await;
        }
        for link in self.links.lock().await.iter_mut() {
            if let Some(client) = link.client.take() {
                let _ = client.quit().await;
            }
        }
    }
}

impl Drop for Sentinels {
    /// A client dropped without `shutdown`: fred's connection tasks hold
    /// their own handles, so they are told to quit, not just dropped.
    fn drop(&mut self) {
        let listeners: Vec<_> = self.listeners.lock().drain(..).collect();
        let clients: Vec<Client> = self
            .links
            .get_mut()
            .iter_mut()
            .filter_map(|l| l.client.take())
            .collect();
        if listeners.is_empty() && clients.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for listener in listeners {
                    listener.stop().await;
                }
                for client in clients {
                    let _ = client.quit().await;
                }
            });
        }
    }
}

/// Follows one sentinel's failover announcements: subscribes on every
/// (re)connection, and records the start and end of each failover of
/// `service` in `announced[index]`.
#[allow(clippy::too_many_arguments)]
async fn follow(
    subscriber: SubscriberClient,
    mut connections: tokio::sync::broadcast::Receiver<fred::types::config::Server>,
    mut messages: tokio::sync::broadcast::Receiver<fred::types::Message>,
    index: usize,
    service: String,
    announced: Arc<Mutex<Vec<Option<Instant>>>>,
    generation: Arc<AtomicU64>,
    topology_changed: Arc<tokio::sync::Notify>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut warned = false;
    loop {
        tokio::select! {
            connected = connections.recv() => match connected {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    if let Err(e) = subscriber.subscribe(FAILOVER_EVENTS.to_vec()).await {
                        if !std::mem::replace(&mut warned, true) {
                            tracing::warn!(error = %e, "cannot follow a sentinel's failover announcements; during a failover lock writes are judged by the polled view only");
                        }
                    }
                }
                Err(RecvError::Closed) => return,
            },
            message = messages.recv() => match message {
                Ok(message) => {
                    let text = message.value.as_string().unwrap_or_default();
                    if !text.split_whitespace().any(|w| w == service) {
                        continue;
                    }
                    let event = message.channel.to_string();
                    let ended = ENDS.contains(&event.as_str());
                    announced.lock()[index] = (!ended).then(Instant::now);
                    generation.fetch_add(1, Ordering::Relaxed);
                    if ended {
                        tracing::info!(%event, "sentinel: failover over");
                        topology_changed.notify_one();
                    } else {
                        tracing::info!(%event, "sentinel: failover under way; lock writes are not confirmed until it ends");
                    }
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
        }
    }
}

/// The sentinels' pub/sub channels that announce a failover's steps.
const FAILOVER_EVENTS: [&str; 10] = [
    "+try-failover",
    "+elected-leader",
    "+selected-slave",
    "+promoted-slave",
    "+switch-master",
    "+failover-end",
    "+failover-end-for-timeout",
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
    "-failover-abort-slave-timeout",
];

/// Of those, the ones a sentinel publishes when a failover it saw is over.
const ENDS: [&str; 6] = [
    "+switch-master",
    "+failover-end",
    "+failover-end-for-timeout",
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
    "-failover-abort-slave-timeout",
];

/// A flat `[name, value, ...]` reply as a map.
fn field_map(reply: &Value) -> std::collections::HashMap<String, String> {
    let Value::Array(fields) = reply else {
        return Default::default();
    };
    fields
        .chunks(2)
        .filter_map(|kv| Some((kv.first()?.as_string()?, kv.get(1)?.as_string()?)))
        .collect()
}

/// Counts the entries of `SENTINEL REPLICAS` the sentinels have not
/// concluded are down.
fn healthy_replicas(reply: &Value) -> i64 {
    let Value::Array(replicas) = reply else {
        return 0;
    };
    replicas
        .iter()
        .filter(|r| {
            let flags = field_map(r).remove("flags").unwrap_or_default();
            // Not `disconnected`: right after a failover the sentinels
            // make new entries for the new primary's replicas, which stay
            // disconnected until their links are up, and a primary whose
            // replicas all read so would confirm nothing (measured: writes
            // on a promoted replica counted 0 replicas and were not
            // waited for). Down is what the sentinels have concluded.
            !flags.split(',').any(|f| matches!(f, "s_down" | "o_down"))
        })
        .count() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_replicas_down_do_not_count_and_disconnected_ones_do() {
        let replica = |flags: &str| {
            Value::Array(vec![
                "name".into(),
                "127.0.0.1:1".into(),
                "flags".into(),
                flags.into(),
            ])
        };
        let reply = Value::Array(vec![
            replica("slave"),
            replica("slave,s_down,disconnected"),
            replica("slave,disconnected"),
            replica("slave,o_down"),
        ]);
        assert_eq!(healthy_replicas(&reply), 2);
    }
}
