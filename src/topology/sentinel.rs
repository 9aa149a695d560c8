//! The sentinels of a Sentinel deployment: who the primary is, which of its
//! replicas a failover could promote, and whether a failover is under way.
//!
//! * **Asked one at a time, never waited on together.** Each sentinel has
//!   its own connection, made and used under the command timeout; one poll
//!   per second goes to the sentinel whose answer is oldest (a sentinel is
//!   asked every `n` seconds; one hung or left alone after failing takes
//!   no other's turn), and an event, or a write the replicas fell short of, asks
//!   them all at once (at most twice a second). A sentinel that does not
//!   answer (dead, hung, partitioned) is left alone for a while, doubling up
//!   to 10 s, and logged once; nothing waits for it.
//! * **Every sentinel of the deployment**, not only those the address lists:
//!   each answer names the sentinel's peers (`SENTINEL SENTINELS`), and a
//!   peer not known yet is asked and listened to from then on (as Redisson's
//!   `sentinelsDiscovery`). A sentinel's peers and id are asked on each new
//!   connection and then once a minute (sooner when it counts another
//!   number of peers): a poll is `MASTER` and `REPLICAS`, two commands. One address in front of three sentinels (a
//!   Kubernetes Service) would otherwise hear one sentinel, and miss a
//!   failover another runs. A sentinel found so that has failed every poll
//!   for a while, and that no sentinel answering names any more (a pod of
//!   an old rollout, `SENTINEL RESET` away), is forgotten and its place
//!   reused: at most 16 are asked at once.
//! * **A majority decides**, as in Sentinel itself: the primary is the one
//!   named, at the newest configuration epoch, by a majority of the
//!   deployment's sentinels (as many as they count themselves:
//!   `num-other-sentinels` + 1, the voters a failover needs a majority of)
//!   among their recent answers, one vote per sentinel (`SENTINEL MYID`: two
//!   addresses of one sentinel vote once). *Recent* is bounded by the
//!   sentinel's own `down-after-milliseconds` (three quarters of it, counted
//!   from when it was asked), and a sentinel whose last poll failed has no
//!   vote: cut off from the client, it may be on the side that promotes a
//!   replica, which it cannot do sooner than `down-after` after the cut. A
//!   client that reaches only a minority of the sentinels confirms nothing.
//!   Polls come as often as that needs (a `down-after` of 1 s and three
//!   sentinels: a poll every 187 ms), once a second at most otherwise. The view is *settled*
//!   when that majority agrees and none of it flags the primary
//!   `o_down` or `failover_in_progress`, and no sentinel has announced a
//!   failover it has not ended. A minority (one sentinel behind, one that
//!   lost the primary, one frozen) changes nothing.
//! * **Promotable replicas** come from the majority's answers, each replica
//!   judged by Sentinel's own rule (`promotion`) and taken at the best any
//!   of them says.
//! * **Announcements**: every sentinel publishes the steps of a failover it
//!   runs (`+try-failover` comes a timer tick or more before a replica is
//!   promoted) and its end. Between the promotion of one replica and the
//!   reconfiguration of the other, the old primary still takes writes and
//!   its remaining replica still confirms them, and those writes are gone
//!   once the replica resyncs from the new primary: without this, one
//!   `SENTINEL FAILOVER` handed out 87 fencing tokens a second time. Each
//!   sentinel's announcements are tracked apart: a failover one sentinel
//!   started is over when that sentinel says so, or when a poll of it shows
//!   none.
//!
//! One file, longer than the others, on purpose: the polls, the majority
//! rule and the announcements all read and write one view under
//! construction, and apart they would share its fields across modules. A
//! sixth of it is the majority rule's tests, at the bottom.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::{ClientInterface, ClientLike, EventInterface, PubsubInterface};
use fred::types::config::{Config as FredConfig, ReconnectPolicy};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::topology::node;
use crate::topology::promotion::{sentinel_standing, SentinelPrimary, SentinelReplica, Standing};

/// One sentinel is polled per tick, the oldest answer first (sooner where the sentinels'
/// `down-after` is short: [`poll_tick`]).
const POLL_TICK: Duration = Duration::from_secs(1);

/// The shortest tick, whatever the sentinels' `down-after`.
const MIN_POLL_TICK: Duration = Duration::from_millis(50);

/// Forced polls of every sentinel are at least this far apart.
const FORCED_GAP: Duration = Duration::from_millis(500);

/// How long a failover a sentinel announced counts as under way when that
/// sentinel neither announces its end nor can be polled.
const FAILOVER_MAX: Duration = Duration::from_secs(60);

/// The longest a sentinel that did not answer is left alone.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How long a sentinel's id and peer list, asked on its connection, are
/// taken as they were: each poll asks only `MASTER` and `REPLICAS` (what
/// moves), as Redisson's scan asks three commands. The peers are asked
/// again sooner when the sentinel counts a different number of them.
const IDENTITY_TTL: Duration = Duration::from_secs(60);

/// At most this many sentinels are asked and listened to at once: a
/// deployment that lists more (gone sentinels never reset) costs a
/// connection each.
const MAX_MEMBERS: usize = 16;

/// A sentinel found through another (not one the address lists) that has
/// failed every poll for this long, and that no sentinel answering names,
/// is forgotten: its place goes to sentinels found later. Sentinels
/// addressed by pod IP leave three dead addresses behind each rollout.
/// Short, because the rule that matters is the other one: the deployment
/// names its sentinels until it is `SENTINEL RESET`, so a sentinel that is
/// only out of the client's reach stays named, and is never forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(10);

/// One sentinel's answer: what it says of the primary and its replicas.
#[derive(Debug, Clone)]
struct Answer {
    primary: Address,
    epoch: u64,
    /// The sentinel's run id (`SENTINEL MYID`, Redis 6.2 on), when it says.
    id: Option<String>,
    /// How many sentinels it counts in the deployment, itself included.
    sentinels: usize,
    /// The other sentinels it knows (`SENTINEL SENTINELS`).
    peers: Vec<Address>,
    /// It flags the primary `o_down` or `failover_in_progress`.
    failing_over: bool,
    rule: SentinelPrimary,
    replicas: Vec<SentinelReplica>,
    at: Instant,
}

/// A node's address, as the sentinels announce it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Address {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// What the sentinels say, as the client uses it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SentinelView {
    /// The primary a majority named last (kept while no majority answers).
    pub(crate) primary: Option<Address>,
    /// A majority names it now, none of it sees a failover, and no sentinel
    /// announced one: a write confirmed now stays confirmed.
    pub(crate) settled: bool,
    /// Why not settled, for logs and errors.
    pub(crate) unsettled: Option<String>,
    /// Replicas of the primary a failover could promote.
    pub(crate) promotable: u32,
    /// Replicas that cannot be promoted but may acknowledge a `WAIT`.
    pub(crate) others: u32,
    /// Replicas left out for now (silent, down): promotable again once back.
    pub(crate) left_out: u32,
    /// The promotable replicas' addresses.
    pub(crate) promotable_at: Arc<[String]>,
    /// A replica is listed that cannot be promoted now (see
    /// [`crate::topology::Requirement::Replicas`]).
    pub(crate) mixed: bool,
}

/// One sentinel of the deployment: listed in the address, or named by one.
struct Member {
    address: Address,
    /// Its command connection, behind its own lock, so a hung one holds up
    /// nobody else.
    link: Arc<tokio::sync::Mutex<Option<Client>>>,
    /// What its connection said of it, asked again after [`IDENTITY_TTL`]
    /// or on a new connection.
    identity: Arc<Mutex<Option<Identity>>>,
}

impl Member {
    fn new(address: Address) -> Self {
        Member {
            address,
            link: Arc::new(tokio::sync::Mutex::new(None)),
            identity: Arc::new(Mutex::new(None)),
        }
    }
}

/// A sentinel's id and peers, which change only when it is replaced or the
/// deployment gains or loses a sentinel.
#[derive(Debug, Clone)]
struct Identity {
    /// `SENTINEL MYID` (Redis 6.2 on).
    id: Option<String>,
    /// `SENTINEL SENTINELS`.
    peers: Vec<Address>,
    /// `SENTINEL SENTINELS` was refused (an ACL): not asked again before
    /// the TTL, whatever the count says.
    peers_refused: bool,
    at: Instant,
}

/// What is known of one sentinel.
#[derive(Default)]
struct Known {
    answer: Option<Answer>,
    /// The last poll failed: why, and when it may be tried again.
    failing: Option<(String, Instant)>,
    /// Since when every poll has failed.
    failing_since: Option<Instant>,
    /// When its announcements could be heard again (its listener
    /// reconnected): a poll asked before then that fails is stale.
    heard_at: Option<Instant>,
    /// Forgotten (see [`FORGET_AFTER`]): not asked, not counted, its place
    /// free for a sentinel found later.
    forgotten: bool,
    backoff: Duration,
    /// It has been logged as not answering (logged once per outage).
    warned: bool,
    /// Since when it has announced a failover it has not ended.
    announced: Option<Instant>,
    polling: bool,
}

/// A subscription to one sentinel: the client, fred's connection task, and
/// the task that reads the announcements.
struct Listener {
    /// The member it listens to.
    index: usize,
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
    /// The sentinels known: those the address lists, then those they name.
    /// An index names one sentinel until it is forgotten, when its place
    /// may go to another; `known` has an entry for each, pushed first.
    members: parking_lot::RwLock<Vec<Member>>,
    /// How many the address lists (the first ones): never forgotten.
    listed: usize,
    service: String,
    timeout: Duration,
    /// The name its connections give themselves (`CLIENT SETNAME`), so an
    /// operator (or a test) tells them from the sentinels' own links.
    connection_name: String,
    known: Mutex<Vec<Known>>,
    view: watch::Sender<SentinelView>,
    /// Asks every sentinel now (rate-limited).
    refresh: Arc<Notify>,
    listeners: Mutex<Vec<Listener>>,
    poller: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// `listen` was called: a sentinel found later is listened to too.
    listening: AtomicBool,
    stopped: AtomicBool,
}

impl Sentinels {
    /// Connects to the sentinels of `hosts` (and those they name) for
    /// `service` and waits, at most `limit`, until a majority names the
    /// primary. The sentinels that answer first decide: a hung one is not
    /// waited for, and one that failed is asked again meanwhile.
    pub(crate) async fn start(
        base: &FredConfig,
        hosts: Vec<(String, u16)>,
        service: String,
        timeout: Duration,
        limit: Duration,
        connection_name: String,
    ) -> Result<Arc<Sentinels>> {
        let mut members: Vec<Member> = vec![];
        for (host, port) in hosts {
            let address = Address { host, port };
            if !members.iter().any(|m| m.address == address) {
                members.push(Member::new(address));
            }
        }
        let listed = members.len();
        let sentinels = Arc::new(Sentinels {
            base: base.clone(),
            known: Mutex::new(members.iter().map(|_| Known::default()).collect()),
            members: parking_lot::RwLock::new(members),
            listed,
            service,
            timeout,
            connection_name,
            view: watch::Sender::new(SentinelView::default()),
            refresh: Arc::new(Notify::new()),
            listeners: Mutex::new(vec![]),
            poller: Mutex::new(None),
            listening: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        });
        let mut view = sentinels.view.subscribe();
        for index in 0..listed {
            sentinels.clone().spawn_poll(index);
        }
        // Polling from the start: a sentinel whose first answer was
        // an error (a restart, `LOADING`) is asked again within the limit.
        let poller = tokio::spawn(poll_in_turn(
            Arc::downgrade(&sentinels),
            sentinels.refresh.clone(),
        ));
        *sentinels.poller.lock() = Some(poller);
        let found = tokio::time::timeout(limit, async {
            view.wait_for(|v| v.primary.is_some()).await.is_ok()
        })
        .await;
        if found != Ok(true) {
            let counted = sentinels.view.borrow().unsettled.clone();
            let why = sentinels.describe();
            sentinels.quit().await;
            return Err(Error::connection(format!(
                "no majority of the sentinels named a primary for `{}` within {limit:?} ({}; {why}). \
                 Every sentinel of the deployment counts (as many as they count themselves): \
                 list reachable addresses of a majority of them, and run `SENTINEL RESET {}` \
                 on each if they still count sentinels that are gone",
                sentinels.service,
                counted.unwrap_or_else(|| "no sentinel answered".to_string()),
                sentinels.service,
            )));
        }
        Ok(sentinels)
    }

    /// The view, as it changes.
    pub(crate) fn view(&self) -> watch::Receiver<SentinelView> {
        self.view.subscribe()
    }

    /// Asks every sentinel again soon: a write found the primary's replicas
    /// short, or a connection event.
    pub(crate) fn refresh(&self) {
        self.refresh.notify_one();
    }

    /// How many sentinels are known (listed and found).
    fn count(&self) -> usize {
        self.members.read().len()
    }

    /// Sentinel `index`'s address.
    fn address(&self, index: usize) -> Address {
        self.members.read()[index].address.clone()
    }

    /// Sentinel `index`'s command connection.
    fn link(&self, index: usize) -> Arc<tokio::sync::Mutex<Option<Client>>> {
        self.members.read()[index].link.clone()
    }

    /// Sentinels that `peers` names and that are not known yet (or were
    /// forgotten) are asked now, and listened to if the client listens; a
    /// new one takes the place of a forgotten one.
    fn discover(self: &Arc<Self>, peers: &[Address]) {
        let added: Vec<usize> = {
            let mut known = self.known.lock();
            let mut members = self.members.write();
            let mut added = vec![];
            for peer in peers {
                let index = match members.iter().position(|m| m.address == *peer) {
                    Some(i) if known[i].forgotten => i,
                    Some(_) => continue,
                    None if known.iter().filter(|k| !k.forgotten).count() >= MAX_MEMBERS => {
                        continue
                    }
                    None => match known.iter().position(|k| k.forgotten) {
                        Some(i) => {
                            members[i] = Member::new(peer.clone());
                            i
                        }
                        None => {
                            known.push(Known::default());
                            members.push(Member::new(peer.clone()));
                            members.len() - 1
                        }
                    },
                };
                known[index] = Known::default();
                tracing::info!(sentinel = %peer, "found a sentinel the address does not list; it is asked and listened to as well");
                added.push(index);
            }
            added
        };
        for index in added {
            self.clone().spawn_poll(index);
            if self.listening.load(Ordering::Acquire) {
                self.listen_to(index);
            }
        }
    }

    /// What every sentinel last said, for an error message.
    fn describe(&self) -> String {
        let known = self.known.lock();
        let members = self.members.read();
        members
            .iter()
            .map(|m| &m.address)
            .zip(known.iter())
            .filter(|(_, k)| !k.forgotten)
            .map(|(host, k)| match (&k.answer, &k.failing) {
                (_, Some((why, _))) => format!("{host}: {why}"),
                (Some(a), None) => format!("{host}: names {} at epoch {}", a.primary, a.epoch),
                (None, None) => format!("{host}: no answer yet"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Polls sentinel `index` in its own task, unless a poll of it is in
    /// flight or it is left alone after failing.
    fn spawn_poll(self: Arc<Self>, index: usize) {
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        {
            let mut known = self.known.lock();
            let k = &mut known[index];
            if k.polling
                || k.forgotten
                || k.failing
                    .as_ref()
                    .is_some_and(|(_, at)| Instant::now() < *at)
            {
                return;
            }
            k.polling = true;
        }
        tokio::spawn(async move {
            let asked_at = Instant::now();
            let answer = match tokio::time::timeout(self.timeout, self.ask(index)).await {
                Ok(answer) => answer,
                Err(_) => {
                    // A hung sentinel: its connection goes, the next poll
                    // (after the back-off) makes a new one.
                    self.drop_link(index);
                    Err(Error::Timeout(self.timeout))
                }
            };
            self.record(index, asked_at, answer);
        });
    }

    /// Asks sentinel `index`, connecting first if needed.
    async fn ask(&self, index: usize) -> Result<Answer> {
        let link = self.link(index);
        let identity = self.members.read()[index].identity.clone();
        let client = {
            let mut link = link.lock().await;
            // A connection the sentinel closed (a restart) is made again at
            // once: without a reconnect policy, a command on it would wait
            // for the timeout, and the sentinel's vote with it.
            if link.as_ref().is_some_and(|c| !c.is_connected()) {
                if let Some(client) = link.take() {
                    tokio::spawn(async move {
                        let _ = client.quit().await;
                    });
                }
            }
            match link.as_ref() {
                Some(client) => client.clone(),
                None => {
                    let client = self.connect(&self.address(index)).await?;
                    if self.stopped.load(Ordering::Acquire) {
                        // Shut down meanwhile: no connection outlives it.
                        let _ = client.quit().await;
                        return Err(Error::Shutdown);
                    }
                    *link = Some(client.clone());
                    // A new connection may reach another sentinel on that
                    // address (a replaced pod): asked who it is again.
                    *identity.lock() = None;
                    client
                }
            }
        };
        let known = identity.lock().clone();
        match self.ask_connected(&client, known).await {
            Ok((answer, now)) => {
                *identity.lock() = Some(now);
                Ok(answer)
            }
            Err(e) => {
                *identity.lock() = None;
                self.drop_link(index);
                Err(e)
            }
        }
    }

    /// Closes sentinel `index`'s command connection (in the background).
    fn drop_link(&self, index: usize) {
        if let Ok(mut link) = self.link(index).try_lock() {
            if let Some(client) = link.take() {
                let timeout = self.timeout;
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(timeout, client.quit()).await;
                });
            }
        }
    }

    fn record(self: &Arc<Self>, index: usize, asked_at: Instant, answer: Result<Answer>) {
        let host = &self.address(index);
        let peers = answer.as_ref().map(|a| a.peers.clone()).unwrap_or_default();
        let mut forgotten = false;
        {
            let mut known = self.known.lock();
            let k = &mut known[index];
            k.polling = false;
            let stale = answer.is_err() && k.heard_at.is_some_and(|at| asked_at < at);
            match answer {
                // Asked before the sentinel was heard again: a newer poll
                // stands for it.
                Err(_) if stale => {}
                Ok(mut answer) => {
                    // It stands for what the sentinel knew when asked.
                    answer.at = asked_at;
                    if k.warned {
                        tracing::info!(sentinel = %host, "sentinel answers again");
                    }
                    // A failover this sentinel announced before the poll, and
                    // that it shows no more, is over even if its end was missed.
                    if !answer.failing_over && k.announced.is_some_and(|since| since < asked_at) {
                        k.announced = None;
                    }
                    k.answer = Some(answer);
                    k.failing = None;
                    k.failing_since = None;
                    k.backoff = Duration::ZERO;
                    k.warned = false;
                }
                Err(e) => {
                    k.backoff = (k.backoff * 2).clamp(Duration::from_millis(500), MAX_BACKOFF);
                    k.failing = Some((e.to_string(), Instant::now() + k.backoff));
                    let since = *k.failing_since.get_or_insert_with(Instant::now);
                    if !std::mem::replace(&mut k.warned, true) {
                        tracing::warn!(sentinel = %host, error = %e, "a sentinel does not answer; ignored while a majority does");
                    }
                    if index >= self.listed
                        && since.elapsed() >= FORGET_AFTER
                        && !named_by_another(&known, index, host)
                    {
                        known[index] = Known {
                            forgotten: true,
                            ..Known::default()
                        };
                        forgotten = true;
                    }
                }
            }
        }
        if forgotten {
            tracing::info!(sentinel = %host, "forgot a sentinel that has not answered for {FORGET_AFTER:?} and that no sentinel answering names");
            self.stop_listening(index);
            self.drop_link(index);
        }
        self.publish();
        self.discover(&peers);
    }

    /// Stops listening to sentinel `index` (forgotten).
    fn stop_listening(&self, index: usize) {
        let stopped: Vec<Listener> = {
            let mut listeners = self.listeners.lock();
            let (stopped, kept) = listeners.drain(..).partition(|l| l.index == index);
            *listeners = kept;
            stopped
        };
        for listener in stopped {
            tokio::spawn(listener.stop());
        }
    }

    /// Recomputes the view from what every sentinel said, and publishes it
    /// if it changed.
    fn publish(&self) {
        // Judged and sent under one lock: polls that answer at once must
        // not send their views out of order (a view judged before the
        // majority had answered, sent after one that named the primary,
        // named none, and a connection made then failed).
        let known = self.known.lock();
        let previous = self.view.borrow().primary.clone();
        let view = judge(&known, previous, self.timeout);
        self.view.send_if_modified(|current| {
            let changed = *current != view;
            if changed {
                if current.primary != view.primary {
                    tracing::info!(primary = ?view.primary.as_ref().map(ToString::to_string), "the sentinels name a new primary");
                }
                if current.settled != view.settled {
                    tracing::debug!(unsettled = ?view.unsettled, "the sentinels' view changed");
                }
                *current = view;
            }
            changed
        });
    }

    async fn connect(&self, host: &Address) -> Result<Client> {
        node::connect(
            &self.base,
            &host.host,
            host.port,
            self.timeout,
            &self.connection_name,
        )
        .await
    }

    /// The settings of a connection to one sentinel.
    fn config_for(&self, host: &Address) -> FredConfig {
        node::config_for(&self.base, &host.host, host.port)
    }

    /// Asks a sentinel what it says of the primary and its replicas; its
    /// id and peers too when `known` (what its connection said before) is
    /// missing or old, or its peers when it counts a different number.
    async fn ask_connected(
        &self,
        client: &Client,
        known: Option<Identity>,
    ) -> Result<(Answer, Identity)> {
        let sentinel = |args: Vec<&str>| {
            let args: Vec<Value> = args.into_iter().map(Value::from).collect();
            client.custom::<Value, Value>(
                CustomCommand::new_static("SENTINEL", ClusterHash::Random, false),
                args,
            )
        };
        let peers_of = |reply: std::result::Result<Value, fred::error::Error>| match reply {
            Ok(peers) => (peer_list(&peers), false),
            Err(e) => {
                tracing::debug!(error = %e, "SENTINEL SENTINELS refused: only the listed sentinels are asked");
                (vec![], true)
            }
        };
        let map_err = |e: fred::error::Error| Error::from_redis(&e, self.timeout);
        let known = known.filter(|k| k.at.elapsed() < IDENTITY_TTL);
        // One round trip (fred pipelines what is sent together).
        let ask_identity = known.is_none();
        let (master, replicas, peers, id) = tokio::join!(
            sentinel(vec!["MASTER", &self.service]),
            sentinel(vec!["REPLICAS", &self.service]),
            async {
                match ask_identity {
                    true => Some(sentinel(vec!["SENTINELS", &self.service]).await),
                    false => None,
                }
            },
            async {
                match ask_identity {
                    true => Some(sentinel(vec!["MYID"]).await),
                    false => None,
                }
            },
        );
        let (master, replicas) = (master.map_err(map_err)?, replicas.map_err(map_err)?);
        let fields = field_map(&master);
        let number = |name: &str| fields.get(name).and_then(|v| v.parse::<u64>().ok());
        let sentinels = number("num-other-sentinels").map_or(1, |n| n as usize + 1);
        // Both optional: without them (an ACL, Redis 6.0 has no MYID) the
        // sentinels are the listed ones, and each address votes apart.
        let mut identity = match known {
            Some(known) => known,
            None => {
                let (peers, peers_refused) = peers.map_or((vec![], true), peers_of);
                Identity {
                    id: id.and_then(|id| id.ok()).and_then(|id| id.as_string()),
                    peers,
                    peers_refused,
                    at: Instant::now(),
                }
            }
        };
        // A sentinel joined or left since the peers were read.
        if !identity.peers_refused && identity.peers.len() + 1 != sentinels {
            let (peers, peers_refused) = peers_of(sentinel(vec!["SENTINELS", &self.service]).await);
            identity.peers = peers;
            identity.peers_refused = peers_refused;
        }
        let host = fields.get("ip").cloned();
        let port = fields.get("port").and_then(|p| p.parse().ok());
        let (Some(host), Some(port)) = (host, port) else {
            return Err(Error::redis(format!(
                "the sentinel knows no primary for service `{}`",
                self.service
            )));
        };
        let flags = fields.get("flags").cloned().unwrap_or_default();
        let answer = Answer {
            primary: Address { host, port },
            epoch: number("config-epoch").unwrap_or(0),
            id: identity.id.clone(),
            sentinels,
            peers: identity.peers.clone(),
            failing_over: flags
                .split(',')
                .any(|f| matches!(f, "failover_in_progress" | "o_down")),
            rule: SentinelPrimary {
                down_after_ms: number("down-after-milliseconds").unwrap_or(30_000),
                s_down_ms: number("s-down-time"),
            },
            replicas: replica_list(&replicas),
            at: Instant::now(),
        };
        Ok((answer, identity))
    }

    /// Subscribes to every sentinel's announcements, for the life of the
    /// client (those found later too). A sentinel that cannot be reached now
    /// is subscribed to once it can.
    pub(crate) fn listen(self: &Arc<Self>) {
        self.listening.store(true, Ordering::Release);
        let active: Vec<usize> = {
            let known = self.known.lock();
            (0..known.len()).filter(|&i| !known[i].forgotten).collect()
        };
        for index in active {
            self.listen_to(index);
        }
    }

    /// Subscribes to sentinel `index`'s announcements.
    fn listen_to(self: &Arc<Self>, index: usize) {
        let mut config = self.config_for(&self.address(index));
        // Keep trying a sentinel that is down now.
        config.fail_fast = false;
        let Ok(subscriber) = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = self.timeout;
                c.internal_command_timeout = self.timeout;
            })
            .with_performance_config(|p| p.default_command_timeout = self.timeout)
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build_subscriber_client()
        else {
            return;
        };
        // Checked under the lock `quit` drains: no listener outlives it.
        let mut listeners = self.listeners.lock();
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
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
            Arc::downgrade(self),
            self.connection_name.clone(),
        ));
        listeners.push(Listener {
            index,
            subscriber,
            connection,
            follower,
        });
    }

    /// Sentinel `index`'s announcements can be heard again (its listener
    /// reconnected): it is asked now, whatever its back-off, so that a
    /// restarted sentinel votes again within a round trip, not after a
    /// back-off of up to 10 s.
    fn heard_again(self: &Arc<Self>, index: usize) {
        {
            let mut known = self.known.lock();
            let k = &mut known[index];
            if let Some((_, until)) = &mut k.failing {
                *until = Instant::now();
                k.backoff = Duration::ZERO;
            }
            // A poll in flight may hang on the connection the restart
            // closed (no reconnect policy): a new one goes on a new
            // connection, and the old one's failure is ignored.
            k.heard_at = Some(Instant::now());
            k.polling = false;
        }
        self.drop_link(index);
        self.clone().spawn_poll(index);
    }

    /// A sentinel announced `event` for this service.
    fn announced(&self, index: usize, event: &str) {
        let ended = ENDS.contains(&event);
        let starts = FAILOVER_EVENTS.contains(&event) && !ended;
        if FAILOVER_EVENTS.contains(&event) {
            self.known.lock()[index].announced = starts.then(Instant::now);
            if ended {
                tracing::info!(%event, sentinel = %self.address(index), "sentinel: failover over");
            } else {
                tracing::info!(%event, sentinel = %self.address(index), "sentinel: failover under way; lock writes are not confirmed until it ends");
            }
            self.publish();
        }
        self.refresh();
    }

    /// Closes every connection to the sentinels and stops listening.
    pub(crate) async fn quit(&self) {
        self.stopped.store(true, Ordering::Release);
        if let Some(poller) = self.poller.lock().take() {
            poller.abort();
        }
        let listeners: Vec<_> = self.listeners.lock().drain(..).collect();
        for listener in listeners {
            listener.stop().await;
        }
        let links: Vec<_> = self.members.read().iter().map(|m| m.link.clone()).collect();
        for link in links {
            let held = link.try_lock().ok().map(|mut l| l.take());
            match held {
                Some(Some(client)) => {
                    let _ = tokio::time::timeout(self.timeout, client.quit()).await;
                }
                Some(None) => {}
                // A poll is connecting (a hung sentinel holds it for the
                // command timeout): its connection is closed when it is
                // made, without holding the shutdown up.
                None => {
                    let timeout = self.timeout;
                    tokio::spawn(async move {
                        if let Ok(mut link) = tokio::time::timeout(timeout, link.lock()).await {
                            if let Some(client) = link.take() {
                                let _ = tokio::time::timeout(timeout, client.quit()).await;
                            }
                        }
                    });
                }
            }
        }
    }
}

impl Drop for Sentinels {
    /// A client dropped without `shutdown`: fred's connection tasks hold
    /// their own handles, so they are told to quit, not just dropped.
    fn drop(&mut self) {
        if let Some(poller) = self.poller.get_mut().take() {
            poller.abort();
        }
        let listeners: Vec<_> = self.listeners.get_mut().drain(..).collect();
        let clients: Vec<Client> = self
            .members
            .get_mut()
            .iter()
            .filter_map(|m| m.link.try_lock().ok()?.take())
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

/// Polls one sentinel per tick, the oldest answer first, and every sentinel when asked
/// (rate-limited), until the client stops.
async fn poll_in_turn(sentinels: std::sync::Weak<Sentinels>, refresh: Arc<Notify>) {
    let mut last_forced: Option<Instant> = None;
    let mut period = POLL_TICK;
    let mut next_tick = Instant::now();
    loop {
        let forced = tokio::select! {
            _ = tokio::time::sleep_until(next_tick) => {
                next_tick = Instant::now() + period;
                false
            }
            _ = refresh.notified() => true,
        };
        if forced {
            if let Some(last) = last_forced {
                tokio::time::sleep_until(last + FORCED_GAP).await;
            }
            last_forced = Some(Instant::now());
        }
        let Some(s) = sentinels.upgrade() else {
            return;
        };
        if s.stopped.load(Ordering::Acquire) {
            return;
        }
        period = poll_tick(&s.known.lock());
        if forced {
            for index in 0..s.count() {
                s.clone().spawn_poll(index);
            }
        } else {
            // Ages announcements and answers out even when nothing answers.
            s.publish();
            let next = next_to_poll(&s.known.lock(), Instant::now());
            if let Some(index) = next {
                s.spawn_poll(index);
            }
        }
    }
}

/// How old an answer may be and still count: two full rounds of polls and
/// one command timeout, and never as long as its sentinel's own
/// `down-after-milliseconds` (see [`vote_lasts`]).
fn fresh_for(answer: &Answer, sentinels: usize, timeout: Duration) -> Duration {
    (POLL_TICK * (2 * sentinels as u32).max(2) + timeout).min(vote_lasts(answer.rule.down_after_ms))
}

/// How long a sentinel's answer, counted from when it was asked, still
/// stands for that sentinel: three quarters of its `down-after`.
///
/// A sentinel cut off from the client since it answered may be on the side
/// that fails the primary over. That side promotes a replica no sooner than
/// `down-after` after it last heard the primary (Sentinel calls a node down
/// only after that long without a reply to its oldest unanswered ping, then
/// gathers the quorum and elects a leader). Until then the answer is as good
/// as a fresh one; after it, the client cannot know, so the answer stops
/// voting (a client that reaches only a minority of the sentinels then
/// confirms nothing, as a minority of etcd makes no progress). The quarter
/// left covers the write judged after the poll's last tick.
fn vote_lasts(down_after_ms: u64) -> Duration {
    Duration::from_millis(down_after_ms.saturating_mul(3) / 4)
}

/// The sentinel to poll at `now`: the one whose answer is oldest (one that
/// never answered first), among those not being polled, not left alone
/// after failing and not forgotten.
///
/// Oldest first, not in turn: a poll that hangs takes one tick, never the
/// turn of a sentinel that answers, so each of those is asked again within
/// `n` ticks of its last poll whatever the others do. In turn, a hung
/// sentinel's poll pushed the next one's a tick later, past its vote's end:
/// the routine suite's frozen sentinel made the view unsettled for the few
/// milliseconds until that answer came (a refusal in CI).
fn next_to_poll(known: &[Known], now: Instant) -> Option<usize> {
    known
        .iter()
        .enumerate()
        .filter(|(_, k)| {
            let left_alone = matches!(&k.failing, Some((_, until)) if now < *until);
            !k.polling && !left_alone && !k.forgotten
        })
        .min_by_key(|(_, k)| k.answer.as_ref().map(|a| a.at))
        .map(|(i, _)| i)
}

/// How often a sentinel is polled (the one [`next_to_poll`] picks): once a
/// second, sooner where the sentinels' `down-after` is short. With `n`
/// sentinels each is asked every `n` ticks, and `n + 1` ticks fit in a
/// vote's life, so an answer is renewed a tick before it stops voting (a
/// `down-after` of 1 s and three sentinels: a poll every 187 ms, each
/// sentinel every 562 ms, 187 ms for the reply to come back).
fn poll_tick(known: &[Known]) -> Duration {
    let shortest = known
        .iter()
        .filter_map(|k| k.answer.as_ref())
        .map(|a| a.rule.down_after_ms)
        .min();
    let Some(down_after_ms) = shortest else {
        return POLL_TICK;
    };
    let members = known.iter().filter(|k| !k.forgotten).count();
    (vote_lasts(down_after_ms) / (members as u32 + 1)).clamp(MIN_POLL_TICK, POLL_TICK)
}

/// Whether a sentinel answering, other than `index`, names `address` among
/// its peers.
fn named_by_another(known: &[Known], index: usize, address: &Address) -> bool {
    known.iter().enumerate().any(|(i, k)| {
        i != index
            && k.failing.is_none()
            && k.answer.as_ref().is_some_and(|a| a.peers.contains(address))
    })
}

/// The view from what each sentinel last said.
fn judge(known: &[Known], previous: Option<Address>, timeout: Duration) -> SentinelView {
    // A sentinel whose last poll failed has no vote: what it said before
    // may be what the other side of a partition has since overruled.
    let members = known.iter().filter(|k| !k.forgotten).count();
    let mut fresh: Vec<&Answer> = known
        .iter()
        .filter(|k| k.failing.is_none() && !k.forgotten)
        .filter_map(|k| k.answer.as_ref())
        .filter(|a| a.at.elapsed() < fresh_for(a, members, timeout))
        .collect();
    // One vote per sentinel: an address that leads to a sentinel already
    // answering under another (a Service in front of them) counts once.
    fresh.sort_by_key(|a| std::cmp::Reverse(a.at));
    let mut voted = std::collections::HashSet::new();
    fresh.retain(|a| a.id.as_ref().is_none_or(|id| voted.insert(id.clone())));
    // A majority of the deployment's sentinels, as they count themselves:
    // Sentinel authorises a failover by a majority of the sentinels it
    // knows, whatever the client's address lists.
    let deployment = fresh
        .iter()
        .map(|a| a.sentinels)
        .max()
        .unwrap_or(0)
        .max(fresh.len())
        .max(1);
    let majority = deployment / 2 + 1;
    let announced = known.iter().any(|k| {
        k.announced
            .is_some_and(|since| since.elapsed() < FAILOVER_MAX)
    });
    // At the newest epoch, the primary most of them name (never the order
    // the answers came in: two naming P and one Q name P).
    let newest = fresh.iter().map(|a| a.epoch).max();
    let at_newest: Vec<&Answer> = fresh
        .iter()
        .copied()
        .filter(|a| Some(a.epoch) == newest)
        .collect();
    let naming = |p: &Address| at_newest.iter().filter(|a| a.primary == *p).count();
    let agreeing: Vec<&Answer> = match at_newest.iter().max_by_key(|a| naming(&a.primary)) {
        Some(best) => at_newest
            .iter()
            .copied()
            .filter(|a| a.primary == best.primary)
            .collect(),
        None => vec![],
    };
    let named = agreeing.len() >= majority;
    let primary = if named {
        agreeing.first().map(|n| n.primary.clone())
    } else {
        previous
    };
    // The replicas, as the majority that names the primary sees them.
    let mut standings: HashMap<&str, Standing> = HashMap::new();
    if named {
        for answer in &agreeing {
            for replica in &answer.replicas {
                let standing = sentinel_standing(replica, answer.rule);
                standings
                    .entry(&replica.address)
                    .and_modify(|s| *s = s.best(standing))
                    .or_insert(standing);
            }
        }
    }
    let mut promotable_at: Vec<String> = standings
        .iter()
        .filter(|(_, s)| **s == Standing::Promotable)
        .map(|(address, _)| address.to_string())
        .collect();
    promotable_at.sort();
    let promotable = promotable_at.len() as u32;
    let others = standings
        .values()
        .filter(|s| **s == Standing::Passed { may_ack: true })
        .count() as u32;
    let left_out = standings
        .values()
        .filter(|s| **s == Standing::LeftOut)
        .count() as u32;
    let unsettled = if !named {
        Some(format!(
            "{} of the deployment's {deployment} sentinels agree on the primary; {majority} needed",
            agreeing.len()
        ))
    } else if agreeing.iter().any(|a| a.failing_over) {
        Some("the sentinels are failing the primary over".to_string())
    } else if announced {
        Some("a sentinel announced a failover".to_string())
    } else {
        None
    };
    SentinelView {
        primary,
        settled: unsettled.is_none(),
        unsettled,
        promotable,
        others,
        left_out,
        promotable_at: promotable_at.into(),
        mixed: standings.values().any(|s| *s != Standing::Promotable),
    }
}

/// Follows one sentinel's announcements: subscribes on every
/// (re)connection, and reports each event about this service.
async fn follow(
    subscriber: SubscriberClient,
    mut connections: tokio::sync::broadcast::Receiver<fred::types::config::Server>,
    mut messages: tokio::sync::broadcast::Receiver<fred::types::Message>,
    index: usize,
    sentinels: std::sync::Weak<Sentinels>,
    connection_name: String,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut warned = false;
    let mut connected_before = false;
    loop {
        tokio::select! {
            connected = connections.recv() => match connected {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    // Named before it subscribes (a subscribed connection
                    // takes no other command).
                    let _ = subscriber.client_setname(&connection_name).await;
                    let channels: Vec<&str> = FAILOVER_EVENTS.iter().chain(CHANGES.iter()).copied().collect();
                    match subscriber.subscribe(channels).await {
                        // What it announced while not subscribed is missed:
                        // every sentinel is asked now instead.
                        Ok(()) => match sentinels.upgrade() {
                            Some(s) => {
                                // A reconnection: the sentinel was away
                                // (restarted) and is back.
                                if std::mem::replace(&mut connected_before, true) {
                                    s.heard_again(index);
                                }
                                s.refresh();
                            }
                            None => return,
                        },
                        Err(e) => {
                            if !std::mem::replace(&mut warned, true) {
                                tracing::warn!(error = %e, "cannot follow a sentinel's announcements; the polled view alone tells failovers");
                            }
                        }
                    }
                }
                Err(RecvError::Closed) => return,
            },
            message = messages.recv() => match message {
                Ok(message) => {
                    let Some(s) = sentinels.upgrade() else { return };
                    let text = message.value.as_string().unwrap_or_default();
                    if text.split_whitespace().any(|w| w == s.service) {
                        s.announced(index, &message.channel);
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    if let Some(s) = sentinels.upgrade() {
                        s.refresh();
                    }
                }
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

/// Other changes that make the view worth asking again.
const CHANGES: [&str; 8] = [
    "+sdown",
    "-sdown",
    "+odown",
    "-odown",
    "+slave",
    "+convert-to-slave",
    "+reboot",
    "+role-change",
];

/// A flat `[name, value, ...]` reply (or a RESP3 map) as a map.
fn field_map(reply: &Value) -> HashMap<String, String> {
    match reply {
        Value::Array(fields) => fields
            .chunks(2)
            .filter_map(|kv| Some((kv.first()?.as_string()?, kv.get(1)?.as_string()?)))
            .collect(),
        Value::Map(map) => map
            .clone()
            .inner()
            .into_iter()
            .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_string()?)))
            .collect(),
        _ => HashMap::new(),
    }
}

/// Reads `SENTINEL REPLICAS`.
fn replica_list(reply: &Value) -> Vec<SentinelReplica> {
    let Value::Array(replicas) = reply else {
        return vec![];
    };
    replicas
        .iter()
        .filter_map(|r| {
            let f = field_map(r);
            let number = |name: &str| f.get(name).and_then(|v| v.parse::<i64>().ok());
            let address = match (f.get("ip"), f.get("port")) {
                (Some(ip), Some(port)) => format!("{ip}:{port}"),
                _ => f.get("name")?.clone(),
            };
            Some(SentinelReplica {
                address,
                flags: f
                    .get("flags")
                    .map(|flags| flags.split(',').map(str::to_string).collect())
                    .unwrap_or_default(),
                last_ok_ping_reply_ms: number("last-ok-ping-reply").unwrap_or(0).max(0) as u64,
                priority: number("slave-priority").unwrap_or(100).max(0) as u64,
                master_link_down_ms: number("master-link-down-time").unwrap_or(0),
            })
        })
        .collect()
}

/// Reads `SENTINEL SENTINELS`: each other sentinel's address.
fn peer_list(reply: &Value) -> Vec<Address> {
    let Value::Array(peers) = reply else {
        return vec![];
    };
    peers
        .iter()
        .filter_map(|p| {
            let f = field_map(p);
            Some(Address {
                host: f.get("ip")?.clone(),
                port: f.get("port")?.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(primary: u16, epoch: u64, failing_over: bool, replicas: &[(&str, u64)]) -> Answer {
        Answer {
            primary: Address {
                host: "127.0.0.1".into(),
                port: primary,
            },
            epoch,
            id: None,
            sentinels: 3,
            peers: vec![],
            failing_over,
            rule: SentinelPrimary {
                down_after_ms: 30_000,
                s_down_ms: None,
            },
            replicas: replicas
                .iter()
                .map(|(address, ping)| SentinelReplica {
                    address: address.to_string(),
                    flags: vec!["slave".into()],
                    last_ok_ping_reply_ms: *ping,
                    priority: 100,
                    master_link_down_ms: 0,
                })
                .collect(),
            at: Instant::now(),
        }
    }

    fn known(answer: Option<Answer>) -> Known {
        Known {
            answer,
            ..Known::default()
        }
    }

    const T: Duration = Duration::from_secs(3);

    #[test]
    fn a_majority_names_the_primary_and_a_minority_changes_nothing() {
        let r = [("127.0.0.1:7001", 100), ("127.0.0.1:7002", 100)];
        // One of three silent (frozen): the two others settle it.
        let view = judge(
            &[
                known(Some(answer(7000, 1, false, &r))),
                known(None),
                known(Some(answer(7000, 1, false, &r))),
            ],
            None,
            T,
        );
        assert_eq!(view.primary.as_ref().map(|a| a.port), Some(7000));
        assert!(view.settled, "{view:?}");
        assert_eq!((view.promotable, view.others), (2, 0));
        // One behind (an older epoch, the old primary): ignored.
        let view = judge(
            &[
                known(Some(answer(7000, 1, false, &r))),
                known(Some(answer(7001, 2, false, &r))),
                known(Some(answer(7001, 2, false, &r))),
            ],
            None,
            T,
        );
        assert_eq!(view.primary.as_ref().map(|a| a.port), Some(7001));
        assert!(view.settled);
        // One ahead, alone: not settled, and the primary stays where it was.
        let previous = Some(Address {
            host: "127.0.0.1".into(),
            port: 7000,
        });
        let view = judge(
            &[
                known(Some(answer(7000, 1, false, &r))),
                known(Some(answer(7001, 2, false, &r))),
                known(None),
            ],
            previous,
            T,
        );
        assert_eq!(view.primary.as_ref().map(|a| a.port), Some(7000));
        assert!(!view.settled);
        // A majority failing over: not settled.
        let view = judge(
            &[
                known(Some(answer(7000, 1, true, &r))),
                known(Some(answer(7000, 1, false, &r))),
                known(None),
            ],
            None,
            T,
        );
        assert!(!view.settled);
    }

    #[test]
    fn an_answer_stops_voting_after_its_down_after_or_a_failed_poll() {
        let r = [("127.0.0.1:7001", 100), ("127.0.0.1:7002", 100)];
        let short = |age_ms: u64| {
            let mut a = answer(7000, 1, false, &r);
            a.rule.down_after_ms = 1_000;
            a.at = Instant::now() - Duration::from_millis(age_ms);
            a
        };
        let fresh = judge(
            &[known(Some(short(0))), known(Some(short(0))), known(None)],
            None,
            T,
        );
        assert!(fresh.settled, "{fresh:?}");
        // Two answers older than three quarters of down-after: one vote of
        // three left (the client is cut off from the other two).
        let aged = judge(
            &[
                known(Some(short(0))),
                known(Some(short(800))),
                known(Some(short(800))),
            ],
            None,
            T,
        );
        assert!(!aged.settled, "{aged:?}");
        // A sentinel whose last poll failed does not vote with what it said
        // before.
        let mut failed = known(Some(short(0)));
        failed.failing = Some(("timed out".into(), Instant::now()));
        let view = judge(&[known(Some(short(0))), failed, known(None)], None, T);
        assert!(!view.settled, "{view:?}");
        // The tick keeps a majority fresh between two polls of each.
        let three = [known(Some(short(0))), known(Some(short(0))), known(None)];
        assert_eq!(poll_tick(&three), Duration::from_micros(187_500));
        let slow = [known(Some(answer(7000, 1, false, &r)))];
        assert_eq!(poll_tick(&slow), POLL_TICK);
    }

    /// The poll schedule, run on a simulated clock: three sentinels with a
    /// `down-after` of 1 s, replies in 20 ms, and from 1 s on one of them
    /// frozen (its polls time out after 1 s, then it is left alone, doubling).
    /// At every millisecond a majority's answers still vote.
    #[test]
    fn a_frozen_sentinel_leaves_a_majority_of_fresh_answers_at_every_instant() {
        const RTT: u64 = 20;
        const FROZEN: usize = 2;
        let r = [("127.0.0.1:7001", 100)];
        let base = Instant::now();
        let at = |ms: u64| base + Duration::from_millis(ms);
        let answered = |ms: u64| {
            let mut a = answer(7000, 1, false, &r);
            a.rule.down_after_ms = 1_000;
            a.at = at(ms);
            a
        };
        let lasts = vote_lasts(1_000);
        let mut known: Vec<Known> = (0..3).map(|_| known(Some(answered(0)))).collect();
        // Per sentinel: when its poll in flight was asked, and ends.
        let mut in_flight: Vec<Option<(u64, u64)>> = vec![None; 3];
        let mut next_tick = 0;
        let mut polls = [0; 3];
        for now in 0..30_000u64 {
            for (i, poll) in in_flight.iter_mut().enumerate() {
                let Some((asked, ends)) = *poll else { continue };
                if ends != now {
                    continue;
                }
                *poll = None;
                let k = &mut known[i];
                k.polling = false;
                if i == FROZEN && asked >= 1_000 {
                    k.backoff = (k.backoff * 2).clamp(Duration::from_millis(500), MAX_BACKOFF);
                    k.failing = Some(("timed out".into(), at(now) + k.backoff));
                } else {
                    k.answer = Some(answered(asked));
                    k.failing = None;
                }
            }
            if now == next_tick {
                next_tick += poll_tick(&known).as_millis() as u64;
                if let Some(i) = next_to_poll(&known, at(now)) {
                    known[i].polling = true;
                    polls[i] += 1;
                    let hangs = i == FROZEN && now >= 1_000;
                    in_flight[i] = Some((now, now + if hangs { 1_000 } else { RTT }));
                }
            }
            let voting = known
                .iter()
                .filter(|k| k.failing.is_none())
                .filter_map(|k| k.answer.as_ref())
                .filter(|a| a.at + lasts > at(now))
                .count();
            assert!(voting >= 2, "{voting} of 3 answers vote at +{now} ms");
        }
        // The frozen one is still tried, backing off; the others carry it.
        assert!(
            polls[FROZEN] >= 4 && polls[0] > 40 && polls[1] > 40,
            "{polls:?}"
        );
    }

    #[test]
    fn the_majority_is_of_the_deployment_and_one_vote_per_sentinel() {
        let r = [("127.0.0.1:7001", 100)];
        // The address lists one sentinel of three: its word alone is not a
        // majority of the deployment (it was of the address list).
        let view = judge(&[known(Some(answer(7000, 1, false, &r)))], None, T);
        assert!(view.primary.is_none() && !view.settled, "{view:?}");
        assert_eq!(
            view.unsettled.as_deref(),
            Some("1 of the deployment's 3 sentinels agree on the primary; 2 needed")
        );
        // Two addresses of one sentinel (a Service, and the sentinel it
        // leads to) vote once.
        let with_id = |id: &str| Answer {
            id: Some(id.into()),
            ..answer(7000, 1, false, &r)
        };
        let view = judge(
            &[known(Some(with_id("a"))), known(Some(with_id("a")))],
            None,
            T,
        );
        assert!(!view.settled, "{view:?}");
        let view = judge(
            &[
                known(Some(with_id("a"))),
                known(Some(with_id("a"))),
                known(Some(with_id("b"))),
            ],
            None,
            T,
        );
        assert!(view.settled, "{view:?}");
        // Sentinels that count more of themselves raise the bar.
        let five = Answer {
            sentinels: 5,
            ..answer(7000, 1, false, &r)
        };
        let view = judge(
            &[known(Some(five.clone())), known(Some(five.clone()))],
            None,
            T,
        );
        assert!(!view.settled, "2 of 5: {view:?}");
    }

    #[test]
    fn a_tie_at_the_newest_epoch_goes_to_the_most_named_primary() {
        let r = [("127.0.0.1:7001", 100)];
        // Whatever the order of their answers.
        for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
            let answers = [
                answer(7000, 4, false, &r),
                answer(7000, 4, false, &r),
                answer(7002, 4, false, &r),
            ];
            let known: Vec<Known> = order
                .iter()
                .map(|&i| known(Some(answers[i].clone())))
                .collect();
            let view = judge(&known, None, T);
            assert_eq!(
                view.primary.as_ref().map(|a| a.port),
                Some(7000),
                "{order:?}"
            );
            assert!(view.settled, "{order:?}: {view:?}");
        }
    }

    #[test]
    fn sentinels_are_read_from_sentinel_replies() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                "name".into(),
                "abc".into(),
                "ip".into(),
                "127.0.0.1".into(),
                "port".into(),
                "26380".into(),
            ]),
            Value::Array(vec!["ip".into(), "10.0.0.1".into()]),
        ]);
        assert_eq!(
            peer_list(&reply),
            [Address {
                host: "127.0.0.1".into(),
                port: 26380
            }]
        );
        assert!(peer_list(&Value::Null).is_empty());
    }

    #[test]
    fn a_replica_counts_at_the_best_the_majority_says() {
        // Sentinel A has not heard from 7002 for 6 s; B heard 0.1 s ago.
        let two = |a: Answer| Answer { sentinels: 2, ..a };
        let a = answer(
            7000,
            1,
            false,
            &[("127.0.0.1:7001", 100), ("127.0.0.1:7002", 6_000)],
        );
        let b = answer(
            7000,
            1,
            false,
            &[("127.0.0.1:7001", 100), ("127.0.0.1:7002", 100)],
        );
        let view = judge(&[known(Some(two(a.clone()))), known(Some(two(b)))], None, T);
        assert_eq!(view.promotable, 2);
        // Both agree it is silent: it no longer counts.
        let view = judge(&[known(Some(two(a.clone()))), known(Some(two(a)))], None, T);
        assert_eq!(view.promotable, 1);
    }

    #[test]
    fn replicas_are_read_from_sentinel_replies() {
        let reply = Value::Array(vec![Value::Array(vec![
            "name".into(),
            "127.0.0.1:7001".into(),
            "ip".into(),
            "127.0.0.1".into(),
            "port".into(),
            "7001".into(),
            "flags".into(),
            "slave,disconnected".into(),
            "last-ok-ping-reply".into(),
            "5200".into(),
            "slave-priority".into(),
            "0".into(),
            "master-link-down-time".into(),
            "0".into(),
        ])]);
        assert_eq!(
            replica_list(&reply),
            [SentinelReplica {
                address: "127.0.0.1:7001".into(),
                flags: vec!["slave".into(), "disconnected".into()],
                last_ok_ping_reply_ms: 5200,
                priority: 0,
                master_link_down_ms: 0,
            }]
        );
        // A reply of another shape reads as no replica, never a panic.
        assert!(replica_list(&Value::Integer(3)).is_empty());
        assert!(replica_list(&Value::Array(vec![Value::Null])).is_empty());
    }
}
