//! The cluster's primaries and which of their replicas a failover could
//! promote, from `CLUSTER NODES`.
//!
//! One node is asked every [`SCAN_PERIOD`] (the primaries in turn: as
//! often as Redisson scans a cluster), and a primary is asked again at once
//! when a write to it fell short of its replicas or the slot map changed,
//! at most once a second per node. A write asks nothing of its own.
//!
//! A primary asked again because a write fell short has its promotable
//! replicas asked how old their data is (`replica_age`, at most every
//! [`PROBE_GAP`] each): a replica whose replication is broken but whose bus
//! is fine stays unflagged, and once its data is older than the cluster
//! lets it be promoted with, its shard's writes stop waiting for it. A
//! replica whose link is down but not for that long yet is asked again the
//! moment it may be (not at the next write that falls short). One too old
//! is asked again every [`TOO_OLD_PERIOD`] on the connection kept for it,
//! and counts again once its link is back. The connection to a
//! replica is kept while it is in use (its settings read again every 30 s), and
//! closed once the replica is back from too old or [`PROBE_IDLE`] after
//! its last use.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::config::{Config as FredConfig, Options, Server};
use fred::types::{ClusterHash, CustomCommand};
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::topology::promotion::{cluster_standing, parse_cluster_nodes, ClusterNode, Standing};
use crate::topology::replica_age::{ReplicaProbe, Verdict};

/// How often one node is asked for the cluster's view (Redisson's
/// `scanInterval` on a cluster).
pub(crate) const SCAN_PERIOD: Duration = Duration::from_secs(5);

/// A node is asked again on demand at most this often.
const FORCED_GAP: Duration = Duration::from_secs(1);

/// A replica is asked its data age on demand at most this often.
const PROBE_GAP: Duration = Duration::from_secs(5);

/// How often a replica judged too old is asked again: once its link is
/// back it must count again before a write goes without it for long.
const TOO_OLD_PERIOD: Duration = Duration::from_secs(1);

/// A connection to a replica not used for this long is closed.
const PROBE_IDLE: Duration = Duration::from_secs(30);

/// What the cluster says of one primary's replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PrimaryReplicas {
    /// Replicas a failover could promote.
    pub(crate) promotable: u32,
    /// Replicas that cannot be promoted but may acknowledge a `WAIT`.
    pub(crate) others: u32,
    /// Replicas left out for now (`fail`): promotable again once back.
    pub(crate) left_out: u32,
    /// The promotable replicas' addresses.
    pub(crate) promotable_at: Arc<[String]>,
    /// A replica is listed that cannot be promoted now, whatever the
    /// reason: it may acknowledge a `WAIT` all the same (see
    /// [`crate::topology::Requirement::Replicas`]).
    pub(crate) mixed: bool,
}

/// Which primary serves which slots: ranges sorted by their first slot,
/// each with every address its primary is known by.
type SlotOwners = Vec<((u16, u16), Vec<String>)>;

#[derive(Default)]
struct State {
    /// Every primary serving slots, by each address it is known by.
    primaries: HashMap<String, PrimaryReplicas>,
    owners: SlotOwners,
    /// The last `CLUSTER NODES` read, judged again when a verdict changes.
    nodes: Vec<ClusterNode>,
    /// Replicas whose data is too old to win an election, by address.
    too_old: HashSet<String>,
    /// When each replica was last asked its data age on demand.
    probed: HashMap<String, Instant>,
    /// When the replicas judged too old are asked again.
    recheck: Option<Instant>,
    /// Replicas whose link is down, and when they may be too old: asked
    /// again then.
    ageing: HashMap<String, Instant>,
    /// Replicas being asked now.
    probing: HashSet<String>,
    /// When each node was last asked on demand.
    forced: HashMap<String, Instant>,
    /// When each client's slot map was last re-read, by fred client id.
    resynced: HashMap<String, Instant>,
    /// Nodes to ask on demand.
    wanted: Vec<Server>,
    /// Nodes asked for within [`FORCED_GAP`] of their last forced read,
    /// and when they may be asked.
    later: Vec<(Server, Instant)>,
    next: usize,
}

/// The client's view of a cluster.
pub(crate) struct ClusterWatch {
    /// The client's command connection (routes by slot, follows redirects).
    redis: Client,
    /// The client's settings, for the connections to replicas.
    base: FredConfig,
    /// The name of those connections.
    probe_name: String,
    timeout: Duration,
    state: Mutex<State>,
    /// The connections to replicas, by address, and when each was last
    /// used: kept while the replica is too old, or while its primary's
    /// writes keep falling short (closed [`PROBE_IDLE`] after).
    probes: Mutex<HashMap<String, (ReplicaProbe, Instant)>>,
    wake: Notify,
}

impl ClusterWatch {
    pub(crate) fn new(
        redis: Client,
        base: FredConfig,
        timeout: Duration,
        client_id: &str,
    ) -> Arc<ClusterWatch> {
        Arc::new(ClusterWatch {
            redis,
            base,
            probe_name: format!("redisson-lock:{client_id}:replica-age"),
            timeout,
            state: Mutex::new(State::default()),
            probes: Mutex::new(HashMap::new()),
            wake: Notify::new(),
        })
    }

    /// Reads the view once (at connect), from any node.
    pub(crate) async fn scan_once(&self) -> Result<()> {
        let node = self.redis.cached_cluster_state().and_then(|s| {
            let mut primaries = s.unique_primary_nodes();
            primaries.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
            primaries.into_iter().next()
        });
        match node {
            Some(node) => self.ask(&node, false).await.map(drop),
            None => Err(Error::connection("the cluster's slot map is not known yet")),
        }
    }

    /// The replicas of the primary at `address` (`host:port`), if it is a
    /// primary the view knows.
    pub(crate) fn replicas_of(&self, address: &str) -> Option<PrimaryReplicas> {
        self.state.lock().primaries.get(address).cloned()
    }

    /// Whether the node at `address` serves `slot` in the last view; `None`
    /// when the view has no owner for it.
    pub(crate) fn serves(&self, slot: u16, address: &str) -> Option<bool> {
        let state = self.state.lock();
        let at = state
            .owners
            .partition_point(|((start, _), _)| *start <= slot);
        let ((_, end), names) = state.owners.get(at.checked_sub(1)?)?;
        (slot <= *end).then(|| names.iter().any(|n| n == address))
    }

    /// Asks `node` again soon (at most once a second per node).
    pub(crate) fn refresh(&self, node: Server) {
        let mut state = self.state.lock();
        let key = format!("{}:{}", node.host, node.port);
        if let Some(at) = state
            .forced
            .get(&key)
            .filter(|at| at.elapsed() < FORCED_GAP)
        {
            // Asked again once the gap is over, not forgotten: the write
            // that fell short just after a read may be the one that sees the
            // replica fail next, and a renewal judged by a view a second
            // behind lets its hold's deadline pass.
            let when = *at + FORCED_GAP;
            if !state.later.iter().any(|(n, _)| *n == node) {
                state.later.push((node, when));
                drop(state);
                self.wake.notify_one();
            }
            return;
        }
        state.forced.insert(key, Instant::now());
        if !state.wanted.contains(&node) {
            state.wanted.push(node);
        }
        drop(state);
        self.wake.notify_one();
    }

    /// `writer`'s slot map routes a slot to a node the view says does not
    /// serve it (a failover the view saw first): fred re-reads the map, at
    /// most once a second per client. Its slot-map change is a change of
    /// the view's connections, so waiters try again at once.
    pub(crate) fn map_behind(&self, writer: &Client) {
        let id = writer.id().to_string();
        {
            let mut state = self.state.lock();
            if state
                .resynced
                .get(&id)
                .is_some_and(|at| at.elapsed() < FORCED_GAP)
            {
                return;
            }
            state.resynced.insert(id, Instant::now());
        }
        let (writer, limit) = (writer.clone(), self.timeout);
        tokio::spawn(async move {
            if let Ok(Err(e)) = tokio::time::timeout(limit, writer.sync_cluster()).await {
                tracing::debug!(error = %e, "re-reading the slot map failed");
            }
        });
    }

    /// Asks every primary again soon (the slot map changed).
    pub(crate) fn refresh_all(&self) {
        if let Some(state) = self.redis.cached_cluster_state() {
            for node in state.unique_primary_nodes() {
                self.refresh(node);
            }
        }
    }

    /// Asks `node` for `CLUSTER NODES` and takes its view. Returns whether
    /// anything changed; `forced` (a write to it fell short): and the
    /// replicas of it whose data age is to be asked.
    async fn ask(&self, node: &Server, forced: bool) -> Result<(bool, Vec<String>)> {
        let options = Options {
            cluster_node: Some(node.clone()),
            timeout: Some(self.timeout),
            max_attempts: Some(1),
            ..Options::default()
        };
        let text: String = self
            .redis
            .with_options(&options)
            .custom(
                CustomCommand::new_static("CLUSTER", ClusterHash::Random, false),
                vec!["NODES"],
            )
            .await
            .map_err(|e| Error::from_redis(&e, self.timeout))?;
        let nodes = parse_cluster_nodes(&text);
        let mut state = self.state.lock();
        // A verdict holds for a replica only: one promoted or gone since is
        // judged afresh if it is ever a replica again.
        let replicas: HashSet<&str> = nodes
            .iter()
            .filter(|n| n.primary_id.is_some())
            .map(|n| n.address.as_str())
            .collect();
        state.too_old.retain(|a| replicas.contains(a.as_str()));
        state.ageing.retain(|a, _| replicas.contains(a.as_str()));
        let (primaries, owners) = primaries_in(&nodes, &state.too_old);
        let changed = state.primaries != primaries || state.owners != owners;
        state.primaries = primaries;
        state.owners = owners;
        let mut to_probe = vec![];
        if forced {
            let asked = format!("{}:{}", node.host, node.port);
            let now = Instant::now();
            let primary = nodes.iter().find(|n| n.address == asked && n.is_primary());
            for replica in nodes.iter().filter(|n| {
                primary.is_some_and(|p| n.primary_id.as_deref() == Some(p.id.as_str()))
                    && cluster_standing(n) == Standing::Promotable
            }) {
                let due = state
                    .probed
                    .get(&replica.address)
                    .is_none_or(|at| at.elapsed() >= PROBE_GAP);
                if due && !state.too_old.contains(&replica.address) {
                    state.probed.insert(replica.address.clone(), now);
                    to_probe.push(replica.address.clone());
                }
            }
        }
        state.nodes = nodes;
        Ok((changed, to_probe))
    }

    /// Asks each replica at `addresses` how old its data is, at once, and
    /// judges the view again. Returns whether it changed. A replica's
    /// connection is kept while it is in use (see `take_verdicts`); one
    /// already being asked is left to that ask.
    async fn probe(&self, addresses: Vec<String>) -> bool {
        let addresses: Vec<String> = {
            let mut state = self.state.lock();
            addresses
                .into_iter()
                .filter(|a| state.probing.insert(a.clone()))
                .collect()
        };
        let asked = futures::future::join_all(addresses.into_iter().map(|address| async move {
            let kept = self.probes.lock().get(&address).map(|(p, _)| p.clone());
            let probe = match kept {
                Some(probe) => probe,
                None => {
                    match ReplicaProbe::connect(
                        &self.base,
                        &address,
                        self.timeout,
                        &self.probe_name,
                    )
                    .await
                    {
                        Ok(probe) => {
                            // Kept in the map while in use: closing the
                            // client closes it.
                            self.probes
                                .lock()
                                .insert(address.clone(), (probe.clone(), Instant::now()));
                            probe
                        }
                        Err(e) => return (address, Err(e)),
                    }
                }
            };
            (address, probe.judge().await)
        }))
        .await;
        let (changed, closing) = self.take_verdicts(asked);
        for probe in closing {
            Self::close_later(probe);
        }
        changed
    }

    /// Closes `probe` in the background (a hung replica's `QUIT` waits for
    /// the timeout).
    fn close_later(probe: ReplicaProbe) {
        tokio::spawn(probe.close());
    }

    /// Records what the probes found and judges the view again. Returns
    /// whether it changed, and the connections no longer needed.
    fn take_verdicts(&self, asked: Vec<(String, Result<Verdict>)>) -> (bool, Vec<ReplicaProbe>) {
        let mut state = self.state.lock();
        let mut closing = vec![];
        let mut probes = self.probes.lock();
        for (address, verdict) in asked {
            state.probing.remove(&address);
            // Whether its connection is kept.
            let keep = match verdict {
                Ok(Verdict::TooOld) => {
                    state.ageing.remove(&address);
                    if state.too_old.insert(address.clone()) {
                        tracing::info!(replica = %address, "cluster: a replica's data is too old for it to be promoted; its primary's writes no longer wait for it");
                    }
                    true
                }
                // Back from too old: nothing left to watch. Otherwise its
                // primary's writes fall short: it may be asked again soon
                // (when it may be too old, if its link is down).
                Ok(Verdict::MayRun { too_old_in }) => {
                    match too_old_in {
                        Some(left) => {
                            state.ageing.insert(address.clone(), Instant::now() + left);
                        }
                        None => {
                            state.ageing.remove(&address);
                        }
                    }
                    match state.too_old.remove(&address) {
                        true => {
                            tracing::info!(replica = %address, "cluster: a replica's link is back; its primary's writes wait for it again");
                            false
                        }
                        false => true,
                    }
                }
                // Unknown: the verdict stands (a replica too old stays so
                // until its link is back, which a sync brings), and the
                // failing connection goes: the next recheck makes a new one
                // (the probe has no reconnect policy, so a kept one that was
                // killed, or whose replica restarted, failed for good and the
                // verdict never changed).
                Err(e) => {
                    tracing::debug!(replica = %address, error = %e, "asking a replica its data age failed; asked again on a new connection");
                    false
                }
            };
            match keep {
                true => {
                    if let Some((_, used)) = probes.get_mut(&address) {
                        *used = Instant::now();
                    }
                }
                false => closing.extend(probes.remove(&address).map(|(p, _)| p)),
            }
        }
        drop(probes);
        let (primaries, owners) = primaries_in(&state.nodes, &state.too_old);
        let changed = state.primaries != primaries || state.owners != owners;
        state.primaries = primaries;
        state.owners = owners;
        state.recheck = (!state.too_old.is_empty()).then(|| Instant::now() + TOO_OLD_PERIOD);
        (changed, closing)
    }

    /// The replicas judged too old, if it is time to ask them again, and
    /// those whose link is down that may be too old by now.
    fn recheck_due(&self) -> Vec<String> {
        let mut state = self.state.lock();
        let now = Instant::now();
        let mut due: Vec<String> = match state.recheck {
            Some(at) if at <= now => {
                state.recheck = None;
                state.too_old.iter().cloned().collect()
            }
            _ => vec![],
        };
        let aged: Vec<String> = state
            .ageing
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(a, _)| a.clone())
            .collect();
        for address in aged {
            state.ageing.remove(&address);
            if !due.contains(&address) {
                due.push(address);
            }
        }
        due
    }

    /// Closes the connections to replicas not used for [`PROBE_IDLE`]
    /// (those judged too old are in use every second).
    fn close_idle(&self) {
        let idle: Vec<ReplicaProbe> = {
            let mut probes = self.probes.lock();
            let gone: Vec<String> = probes
                .iter()
                .filter(|(_, (_, used))| used.elapsed() >= PROBE_IDLE)
                .map(|(a, _)| a.clone())
                .collect();
            gone.iter()
                .filter_map(|a| probes.remove(a).map(|(p, _)| p))
                .collect()
        };
        for probe in idle {
            Self::close_later(probe);
        }
    }

    /// Closes the connections to replicas.
    pub(crate) async fn close(&self) {
        let probes: Vec<ReplicaProbe> = self.probes.lock().drain().map(|(_, (p, _))| p).collect();
        for probe in probes {
            probe.close().await;
        }
    }

    /// The next primary to ask, in turn.
    fn next_node(&self) -> Option<Server> {
        let mut state = self.state.lock();
        let mut primaries = self.redis.cached_cluster_state()?.unique_primary_nodes();
        if primaries.is_empty() {
            return None;
        }
        primaries.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
        state.next = (state.next + 1) % primaries.len();
        Some(primaries.swap_remove(state.next))
    }

    /// Moves the nodes whose gap is over from `later` to `wanted`. Returns
    /// whether any node is wanted, and when the next of `later` (or the
    /// next check of the replicas too old) is due.
    fn promote_due(&self) -> (bool, Option<Instant>) {
        let mut state = self.state.lock();
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut state.later)
            .into_iter()
            .partition(|(_, at)| *at <= now);
        state.later = later;
        for (node, _) in due {
            state
                .forced
                .insert(format!("{}:{}", node.host, node.port), now);
            if !state.wanted.contains(&node) {
                state.wanted.push(node);
            }
        }
        let next = state
            .later
            .iter()
            .map(|(_, at)| *at)
            .chain(state.recheck)
            .chain(state.ageing.values().copied())
            .min();
        (!state.wanted.is_empty(), next)
    }

    /// Scans until the client stops: a node every [`SCAN_PERIOD`], and the
    /// nodes asked for as soon as they are. `changed` is called when the
    /// view changed.
    pub(crate) async fn run(self: Arc<Self>, changed: impl Fn()) {
        let mut due = Instant::now() + SCAN_PERIOD;
        // Replicas are asked beside the scans: one that hangs (asleep, its
        // host gone) holds no other read of the view up for its timeout.
        let mut probing = futures::stream::FuturesUnordered::new();
        loop {
            self.close_idle();
            let recheck = self.recheck_due();
            if !recheck.is_empty() {
                probing.push(self.clone().probe_owned(recheck));
            }
            let (wanted, later) = self.promote_due();
            if !wanted && Instant::now() < due {
                let until = later.map_or(due, |at| at.min(due));
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = self.wake.notified() => {}
                    Some(view_changed) = probing.next(), if !probing.is_empty() => {
                        if view_changed {
                            changed();
                        }
                    }
                }
                continue;
            }
            // Every node wanted now is asked at once, each under its own
            // timeout: a hung primary does not hold the others' reads up.
            let wanted: Vec<Server> = std::mem::take(&mut self.state.lock().wanted);
            let forced = !wanted.is_empty();
            let nodes = match forced {
                true => wanted,
                false => {
                    due = Instant::now() + SCAN_PERIOD;
                    self.next_node().into_iter().collect()
                }
            };
            // The replicas being asked go on meanwhile.
            let asks = futures::future::join_all(nodes.iter().map(|node| self.ask(node, forced)));
            tokio::pin!(asks);
            let asked = loop {
                tokio::select! {
                    asked = &mut asks => break asked,
                    Some(view_changed) = probing.next(), if !probing.is_empty() => {
                        if view_changed {
                            changed();
                        }
                    }
                }
            };
            let mut any = false;
            let mut to_probe = vec![];
            for (node, outcome) in nodes.iter().zip(asked) {
                match outcome {
                    Ok((changed, replicas)) => {
                        any |= changed;
                        to_probe.extend(replicas);
                    }
                    Err(e) => {
                        tracing::debug!(node = %node, error = %e, "cluster scan failed; the next one asks another node")
                    }
                }
            }
            if !to_probe.is_empty() {
                probing.push(self.clone().probe_owned(to_probe));
            }
            if any {
                changed();
            }
        }
    }

    /// [`ClusterWatch::probe`], as a future of its own.
    fn probe_owned(
        self: Arc<Self>,
        addresses: Vec<String>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
        Box::pin(async move { self.probe(addresses).await })
    }
}

/// Every primary serving slots in `nodes`, by address (and announced
/// hostname), with its replicas judged by the cluster's rule (those in
/// `too_old` cannot run for election, nor acknowledge a write: their link
/// is down or silent); and the slots each serves.
fn primaries_in(
    nodes: &[ClusterNode],
    too_old: &HashSet<String>,
) -> (HashMap<String, PrimaryReplicas>, SlotOwners) {
    let mut primaries = HashMap::new();
    let mut owners = SlotOwners::new();
    for primary in nodes.iter().filter(|n| n.is_primary() && n.has_slots()) {
        let mut replicas = PrimaryReplicas::default();
        let mut promotable_at = vec![];
        for replica in nodes
            .iter()
            .filter(|n| n.primary_id.as_deref() == Some(primary.id.as_str()))
        {
            let standing = match cluster_standing(replica) {
                Standing::Promotable if too_old.contains(&replica.address) => {
                    Standing::Passed { may_ack: false }
                }
                standing => standing,
            };
            replicas.mixed |= standing != Standing::Promotable;
            match standing {
                Standing::Promotable => promotable_at.push(replica.address.clone()),
                Standing::LeftOut => replicas.left_out += 1,
                Standing::Passed { may_ack: true } => replicas.others += 1,
                Standing::Passed { may_ack: false } => {}
            }
        }
        promotable_at.sort();
        replicas.promotable = promotable_at.len() as u32;
        replicas.promotable_at = promotable_at.into();
        let mut names = vec![primary.address.clone()];
        if let Some(host) = &primary.hostname {
            let port = primary.address.rsplit(':').next().unwrap_or_default();
            names.push(format!("{host}:{port}"));
        }
        for name in &names {
            primaries.insert(name.clone(), replicas.clone());
        }
        owners.extend(primary.slots.iter().map(|range| (*range, names.clone())));
    }
    owners.sort();
    (primaries, owners)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_primary_counts_its_promotable_replicas() {
        let text = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-16383
c3 127.0.0.1:7002@17002 master - 0 0 3 connected
r1 127.0.0.1:7003@17003 slave a1 0 0 1 connected
r2 127.0.0.1:7004@17004 slave,fail a1 0 0 1 disconnected
r3 127.0.0.1:7005@17005 slave,nofailover b2 0 0 2 connected
r4 127.0.0.1:7006@17006 slave,fail? a1 0 0 1 disconnected
";
        let (primaries, _) = primaries_in(&parse_cluster_nodes(text), &HashSet::new());
        assert_eq!(primaries.len(), 2, "a primary without slots is not one");
        // r4: only the node asked has lost it; the cluster would promote it.
        assert_eq!(
            primaries["127.0.0.1:7000"],
            PrimaryReplicas {
                promotable: 2,
                others: 0,
                left_out: 1,
                promotable_at: ["127.0.0.1:7003".to_string(), "127.0.0.1:7006".to_string()].into(),
                mixed: true,
            }
        );
        assert_eq!(
            primaries["127.0.0.1:7001"],
            PrimaryReplicas {
                promotable: 0,
                others: 1,
                left_out: 0,
                promotable_at: [].into(),
                mixed: true,
            }
        );
    }

    #[test]
    fn a_slot_is_served_by_the_primary_whose_range_holds_it() {
        let watch = ClusterWatch::new(
            Client::new(fred::types::config::Config::default(), None, None, None),
            fred::types::config::Config::default(),
            Duration::from_secs(1),
            "test",
        );
        let text = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-100 200
b2 127.0.0.1:7001@17001,node-b master - 0 0 2 connected 101-199 201-16383
";
        let (primaries, owners) = primaries_in(&parse_cluster_nodes(text), &HashSet::new());
        *watch.state.lock() = State {
            primaries,
            owners,
            ..State::default()
        };
        assert_eq!(watch.serves(0, "127.0.0.1:7000"), Some(true));
        assert_eq!(watch.serves(100, "127.0.0.1:7000"), Some(true));
        assert_eq!(watch.serves(101, "127.0.0.1:7000"), Some(false));
        assert_eq!(watch.serves(150, "node-b:7001"), Some(true));
        assert_eq!(watch.serves(200, "127.0.0.1:7000"), Some(true));
        assert_eq!(watch.serves(16383, "127.0.0.1:7001"), Some(true));
        *watch.state.lock() = State::default();
        assert_eq!(watch.serves(5, "127.0.0.1:7000"), None);
    }

    /// `CLUSTER NODES` answered with anything at all (issue 30, item 2):
    /// lines not of its shape are skipped, never a panic.
    #[test]
    fn garbage_cluster_nodes_take_nothing() {
        for text in [
            "",
            "\n\n",
            "garbage",
            "a b c d e f g",
            "a b c d e f g h",
            "a , master - 0 0 1 connected",
            "a @ master - 0 0 1 connected 99999-0 5-3 -1 [42->-x] 0-",
            "a 127.0.0.1:7000@17000,, master,, - x y z connected 0-16383-1",
            "\u{feff}a \u{e9}:\u{e9} master - 0 0 1 connected \u{e9}",
        ] {
            let (primaries, owners) = primaries_in(&parse_cluster_nodes(text), &HashSet::new());
            assert!(
                owners.iter().all(|((start, end), _)| start <= end),
                "{text:?}"
            );
            let _ = primaries;
        }
        let (primaries, owners) = primaries_in(
            &parse_cluster_nodes("a :0@1 master - 0 0 1 connected 99999-0 5-3 x"),
            &HashSet::new(),
        );
        assert!(primaries.is_empty() && owners.is_empty());
    }
}
