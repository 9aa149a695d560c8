//! The load every operation runs under:
//!
//! * **holders**: Rust watchdog locks taken at the start of each operation
//!   and held to its end (two on the default quorum, two on
//!   `ReplicaQuorum::All` on Sentinel), and one JVM Redisson hold; each
//!   holder is inside a critical section on the resource the whole time,
//!   and leaves it at once if told its lock is lost;
//! * **contenders**: Rust tasks and JVM Redisson threads taking three
//!   fenced locks in turn, each critical section entered and left on the
//!   resource;
//! * **a challenger**, another service instance (a client of its own):
//!   tries every held lock twice a second; if it gets one, it enters its
//!   critical section (an overlap with the holder);
//! * **probes**: every 250 ms a no-wait try of a lock nobody holds (a new
//!   name each time), by the crate (`try_lock`) and by Redisson
//!   (`tryLock(0)`): an acquisition refused, or an error, is a refusal.
//!
//! Every Rust hold's at-risk and lost signals are timed; a hold told lost
//! has its field read on the primary right after, so that a false signal
//! (the lock was still there) can be told from a true one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use parking_lot::Mutex;
use rand::Rng;
use redisson_lock::{
    Config, Error, FencedGuard, LostSignal, RFencedLock, RedissonClient, ReplicaQuorum, SafetyLevel,
};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::common::java::JavaPeer;
use crate::common::topology::node_client;
use crate::deployment::Deployment;
use crate::resource::{now_us, Resource};
use crate::workload::Section;
use crate::TAG;

/// The crate on its default quorum (Redisson's rule: one promotable
/// replica confirms).
pub const CRATE: &str = "crate";
/// The crate with every promotable replica confirming (Sentinel only: with
/// one replica per primary, the cluster's quorum is the same).
pub const CRATE_ALL: &str = "crate, quorum all";
pub const REDISSON: &str = "Redisson 4.7.0";

const CONTENDED_LOCKS: usize = 3;
const RUST_CONTENDERS: usize = 3;
const JVM_CONTENDERS: usize = 2;
const HOLDERS: usize = 2;
const PROBE_EVERY: Duration = Duration::from_millis(250);
const CHALLENGE_EVERY: Duration = Duration::from_millis(500);

/// One no-wait try of a free lock.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Probe {
    pub client: &'static str,
    pub at_us: i64,
    pub latency_us: i64,
    pub acquired: bool,
    /// Why not acquired.
    pub refusal: Option<String>,
    /// What confirmed it when acquired (the crate's `acked/promotable`):
    /// the crate's view of the replicas at that moment.
    pub safety: Option<String>,
}

/// Whether a hold was taken for a whole operation or by a contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Role {
    Holder,
    Contender,
}

/// The signals one Rust hold heard, and what the primary said of it after.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HoldRecord {
    pub client: &'static str,
    pub role: Role,
    pub holder: String,
    pub lock: String,
    pub field: String,
    pub enter_us: i64,
    pub exit_us: i64,
    /// Each time it was told its lock is at risk.
    pub at_risk_us: Vec<i64>,
    pub lost_us: Option<i64>,
    /// The hold's count on the primary when read (after it was told lost,
    /// or at the end of the operation): `Ok(None)` when the field was gone.
    pub count_after: Result<Option<u32>, String>,
    pub checked_us: i64,
}

/// What a run recorded.
#[derive(Default)]
pub struct Log {
    pub sections: Mutex<Vec<Section>>,
    /// Contenders' holds that heard a signal (holders are returned per
    /// operation).
    pub holds: Mutex<Vec<HoldRecord>>,
    pub probes: Mutex<Vec<Probe>>,
    /// Errors by where and kind.
    pub errors: Mutex<BTreeMap<String, u64>>,
    /// Rust contenders' sections so far.
    sections_done: watch::Sender<usize>,
    /// Acquiring probes so far, per client.
    acquired: watch::Sender<BTreeMap<&'static str, usize>>,
}

impl Log {
    fn error(&self, during: &str, e: &Error) {
        *self
            .errors
            .lock()
            .entry(format!("{during}: {}", kind(e)))
            .or_default() += 1;
    }

    fn probe(&self, probe: Probe) {
        if probe.acquired {
            self.acquired
                .send_modify(|n| *n.entry(probe.client).or_default() += 1);
        }
        self.probes.lock().push(probe);
    }
}

/// An error's variant name, for counting.
pub fn kind(e: &Error) -> String {
    let text = format!("{e:?}");
    text.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("?")
        .to_string()
}

/// What confirmed an acquisition, for the section's record.
fn safety_name(level: SafetyLevel) -> String {
    match level {
        SafetyLevel::Replicas { acked, promotable } => format!("{acked}/{promotable}"),
        other => format!("{other:?}"),
    }
}

/// A refusal in a few words: the error's kind, and for replicas short of
/// the quorum what they reached.
fn refusal_of(e: &Error) -> String {
    match e {
        Error::ReplicasNotSynced {
            acked,
            promotable,
            unsettled: None,
            ..
        } => format!("ReplicasNotSynced {acked}/{promotable}"),
        Error::ReplicasNotSynced {
            unsettled: Some(_), ..
        } => "ReplicasNotSynced (unsettled)".into(),
        other => kind(other),
    }
}

/// The signals a hold heard.
#[derive(Debug, Clone, Default)]
struct Heard {
    at_risk_us: Vec<i64>,
    lost_us: Option<i64>,
}

impl Heard {
    fn lost(&mut self, at: i64) {
        self.lost_us.get_or_insert(at);
    }
}

/// Times every at-risk episode (until a confirmed renewal clears it) and
/// the lost signal.
fn listen(signal: LostSignal) -> (Arc<Mutex<Heard>>, JoinHandle<()>) {
    let heard: Arc<Mutex<Heard>> = Arc::default();
    let record = heard.clone();
    let task = tokio::spawn(async move {
        loop {
            signal.at_risk().await;
            if signal.is_lost() {
                record.lock().lost(now_us());
                return;
            }
            record.lock().at_risk_us.push(now_us());
            // No event says the risk is over: a confirmed renewal clears it.
            loop {
                tokio::select! {
                    _ = signal.lost() => {
                        record.lock().lost(now_us());
                        return;
                    }
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
                if !signal.is_at_risk() {
                    break;
                }
            }
        }
    });
    (heard, task)
}

/// The count of `field` in hash `name` on the primary `redis` reaches.
async fn count_on(redis: &Client, name: &str, field: &str) -> Result<Option<u32>, String> {
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        redis.hget::<Option<String>, _, _>(name, field),
    )
    .await;
    match read {
        Ok(Ok(count)) => Ok(count.and_then(|c| c.parse().ok())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 5 s".into()),
    }
}

/// As `count_on`, through the client's own command connection (on the
/// lock's primary).
async fn count_via(
    client: &RedissonClient,
    name: &str,
    field: &str,
) -> Result<Option<u32>, String> {
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        client.command(Some(name), "HGET", [name, field]),
    )
    .await;
    match read {
        Ok(Ok(reply)) => Ok(reply.as_i64().map(|c| c as u32)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 5 s".into()),
    }
}

pub fn settings(url: &str, watchdog: Duration, quorum: ReplicaQuorum) -> Config {
    // The crate's defaults, Redisson's: only the watchdog and the quorum set.
    let mut config = Config::from_url(url);
    config.lock_watchdog_timeout = watchdog;
    config.replica_quorum = quorum;
    config
}

pub struct Load {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Default quorum: holders and contenders, one service's tasks.
    any: RedissonClient,
    /// Default quorum: the challenger, another instance.
    challenger: RedissonClient,
    /// `ReplicaQuorum::All`: holders and a probe (Sentinel only).
    all: Option<RedissonClient>,
    prober: RedissonClient,
    peer: Arc<JavaPeer>,
    jvm_run: oneshot::Receiver<Result<String, String>>,
    resource: Arc<Resource>,
    pub log: Arc<Log>,
    /// The locks held now, for the challenger.
    targets: Arc<Mutex<Vec<String>>>,
    /// The probing clients.
    pub clients: Vec<&'static str>,
}

/// The holds of one operation.
pub struct Held {
    rust: Vec<RustHolder>,
    jvm: JvmHolder,
}

/// When a field was read on the primary, and its count there.
type FieldRead = (i64, Result<Option<u32>, String>);

struct RustHolder {
    client: &'static str,
    holder: String,
    name: String,
    field: String,
    token: i64,
    enter_us: i64,
    inside: i64,
    safety: String,
    release: oneshot::Sender<()>,
    /// Leaves the section when told lost or released; yields the guard,
    /// when it left and, when told lost, the field read right after.
    task: JoinHandle<(FencedGuard, i64, Option<FieldRead>)>,
    heard: Arc<Mutex<Heard>>,
    listener: JoinHandle<()>,
}

struct JvmHolder {
    holder: String,
    name: String,
    tid: u64,
    token: i64,
    enter_us: i64,
    inside: i64,
}

impl Load {
    pub async fn start(
        deployment: &Deployment,
        watchdog: Duration,
        resource: Arc<Resource>,
    ) -> Self {
        let url = deployment.url();
        let connect = |quorum| {
            let config = settings(&url, watchdog, quorum);
            async move { RedissonClient::connect(config).await.expect("connect") }
        };
        let any = connect(ReplicaQuorum::Any).await;
        let challenger = connect(ReplicaQuorum::Any).await;
        let prober = connect(ReplicaQuorum::Any).await;
        let all = match deployment {
            Deployment::Sentinel(_) => Some(connect(ReplicaQuorum::All).await),
            Deployment::Cluster(_) => None,
        };
        let peer = Arc::new(deployment.jvm_peer(watchdog).await);
        let jvm_run = peer
            .send(&format!(
                "safety {TAG} {CONTENDED_LOCKS} {JVM_CONTENDERS} {}",
                resource.url()
            ))
            .await;
        let (stop, _) = watch::channel(false);
        let log = Arc::new(Log::default());
        let targets: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut tasks = vec![];
        for t in 0..RUST_CONTENDERS {
            tasks.push(tokio::spawn(contend(
                any.clone(),
                format!("r{t}"),
                resource.clone(),
                log.clone(),
                stop.subscribe(),
            )));
        }
        tasks.push(tokio::spawn(challenge(
            challenger.clone(),
            targets.clone(),
            resource.clone(),
            log.clone(),
            stop.subscribe(),
        )));
        let mut clients = vec![CRATE];
        tasks.push(tokio::spawn(probe_rust(
            prober.clone(),
            CRATE,
            log.clone(),
            stop.subscribe(),
        )));
        if let Some(all) = &all {
            clients.push(CRATE_ALL);
            tasks.push(tokio::spawn(probe_rust(
                all.clone(),
                CRATE_ALL,
                log.clone(),
                stop.subscribe(),
            )));
        }
        clients.push(REDISSON);
        tasks.push(tokio::spawn(probe_jvm(
            peer.clone(),
            log.clone(),
            stop.subscribe(),
        )));
        Load {
            stop,
            tasks,
            any,
            challenger,
            all,
            prober,
            peer,
            jvm_run,
            resource,
            log,
            targets,
            clients,
        }
    }

    /// Waits until every probe has acquired twice more and the Rust
    /// contenders have finished three more sections: locks are served
    /// again, by every client.
    pub async fn recovered(&self, bound: Duration) {
        let mut acquired = self.log.acquired.subscribe();
        let before = acquired.borrow_and_update().clone();
        let mut sections = self.log.sections_done.subscribe();
        let done = *sections.borrow_and_update();
        let clients = self.clients.clone();
        let wait = async {
            acquired
                .wait_for(|now| {
                    clients.iter().all(|c| {
                        now.get(c).copied().unwrap_or(0) >= before.get(c).copied().unwrap_or(0) + 2
                    })
                })
                .await
                .unwrap();
            sections.wait_for(|n| *n >= done + 3).await.unwrap();
        };
        if tokio::time::timeout(bound, wait).await.is_err() {
            panic!(
                "locks are not served again by every client within {bound:?}: acquiring probes {:?} (were {before:?}), errors {:?}",
                self.log.acquired.borrow(),
                self.log.errors.lock()
            );
        }
    }

    /// Takes the holds of operation `index`: each holder enters its
    /// critical section and stays inside until `release`.
    pub async fn hold(&self, index: usize) -> Held {
        let mut rust = vec![];
        let mut sets = vec![(CRATE, "any", &self.any)];
        if let Some(all) = &self.all {
            sets.push((CRATE_ALL, "all", all));
        }
        for (client_name, slug, client) in sets {
            for i in 0..HOLDERS {
                let holder = format!("h{index}-{slug}-{i}");
                let name = format!("{TAG}:{holder}");
                let lock = client.fenced_lock(&name).unwrap();
                let guard = take(&lock, &name).await;
                rust.push(
                    self.enter_held(client_name, client.clone(), holder, name, guard)
                        .await,
                );
            }
        }
        let holder = format!("jh{index}");
        let name = format!("{TAG}:{holder}");
        let tid = 1000 + index as u64;
        let token: i64 = self
            .peer
            .ok(&format!("fencedLock {name} {tid} -1"))
            .await
            .parse()
            .expect("a fencing token");
        let entered = self.resource.enter(&name, &holder, token).await;
        let jvm = JvmHolder {
            holder,
            name,
            tid,
            token,
            enter_us: entered.at_us,
            inside: entered.inside,
        };
        let mut targets = self.targets.lock();
        targets.clear();
        targets.extend(rust.iter().map(|h| h.name.clone()));
        targets.push(jvm.name.clone());
        Held { rust, jvm }
    }

    async fn enter_held(
        &self,
        client: &'static str,
        redis: RedissonClient,
        holder: String,
        name: String,
        guard: FencedGuard,
    ) -> RustHolder {
        let (heard, listener) = listen(guard.lost_signal());
        let entered = self.resource.enter(&name, &holder, guard.token()).await;
        let (release, released) = oneshot::channel::<()>();
        let resource = self.resource.clone();
        let section = name.clone();
        let (field, token, safety) = (guard.field(), guard.token(), safety_name(guard.safety()));
        let task = tokio::spawn(async move {
            // A holder told its lock is lost stops at once.
            let lost = tokio::select! {
                _ = guard.lost() => true,
                _ = released => false,
            };
            let exit_us = resource.exit(&section).await;
            // Read right after the signal, as the judge expects: at the end
            // of the operation the key has expired since its renewals
            // stopped, which would make every lost signal look true.
            let read = match lost {
                true => {
                    let checked_us = now_us();
                    Some((
                        checked_us,
                        count_via(&redis, &section, &guard.field()).await,
                    ))
                }
                false => None,
            };
            (guard, exit_us, read)
        });
        RustHolder {
            client,
            holder,
            name,
            field,
            token,
            enter_us: entered.at_us,
            inside: entered.inside,
            safety,
            release,
            task,
            heard,
            listener,
        }
    }

    /// Ends the holds of an operation: reads each Rust hold's field on the
    /// primary (`primary`, the port clients reach it on), unless it was
    /// read when the hold was told lost, then releases everything. Returns
    /// what each Rust hold heard.
    pub async fn release(&self, held: Held, primary: u16) -> Vec<HoldRecord> {
        self.targets.lock().clear();
        let redis = node_client(primary).await;
        let mut records = vec![];
        for h in held.rust {
            let _ = h.release.send(());
            let (guard, exit_us, read) = h.task.await.unwrap();
            let (checked_us, count_after) = match read {
                Some(read) => read,
                None => (now_us(), count_on(&redis, &h.name, &h.field).await),
            };
            h.listener.abort();
            let heard = h.heard.lock().clone();
            if let Err(e) = guard.unlock().await {
                self.log.error(&format!("{} holder unlock", h.client), &e);
            }
            self.log.sections.lock().push(Section {
                lock: h.name.clone(),
                holder: h.holder.clone(),
                token: h.token,
                enter_us: h.enter_us,
                exit_us,
                inside: h.inside,
                regressed_after: None,
                at_risk_at_entry: false,
                at_risk_us: heard.at_risk_us.first().copied().or(heard.lost_us),
                lost_us: heard.lost_us,
                safety: h.safety,
            });
            records.push(HoldRecord {
                client: h.client,
                role: Role::Holder,
                holder: h.holder,
                lock: h.name,
                field: h.field,
                enter_us: h.enter_us,
                exit_us,
                at_risk_us: heard.at_risk_us,
                lost_us: heard.lost_us,
                count_after,
                checked_us,
            });
        }
        let _ = redis.quit().await;
        let j = held.jvm;
        let exit_us = self.resource.exit(&j.name).await;
        if let Err(e) = self
            .peer
            .call(&format!("fencedUnlock {} {}", j.name, j.tid))
            .await
        {
            *self
                .log
                .errors
                .lock()
                .entry(format!(
                    "{REDISSON} holder unlock: {}",
                    e.split(' ').next().unwrap_or("?")
                ))
                .or_default() += 1;
        }
        self.log.sections.lock().push(Section {
            lock: j.name,
            holder: j.holder,
            token: j.token,
            enter_us: j.enter_us,
            exit_us,
            inside: j.inside,
            regressed_after: None,
            at_risk_at_entry: false,
            at_risk_us: None,
            lost_us: None,
            safety: "jvm".into(),
        });
        records
    }

    /// Stops everything; the JVM contenders' sections join the log.
    pub async fn stop(self) -> Arc<Log> {
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.await.unwrap();
        }
        for client in [
            Some(self.any),
            Some(self.challenger),
            Some(self.prober),
            self.all,
        ]
        .into_iter()
        .flatten()
        {
            client.shutdown().await;
        }
        self.resource.stop_jvm().await;
        let done = crate::common::within("the JVM contenders stop", self.jvm_run)
            .await
            .expect("peer exited")
            .expect("the JVM contenders' run");
        let errors: u64 = done
            .split(' ')
            .nth(1)
            .and_then(|e| e.parse().ok())
            .unwrap_or(0);
        if errors > 0 {
            *self
                .log
                .errors
                .lock()
                .entry(format!("{REDISSON} contender: errors"))
                .or_default() += errors;
        }
        let jvm_sections = self.resource.jvm_sections().await;
        self.log.sections.lock().extend(jvm_sections);
        match Arc::try_unwrap(self.peer) {
            Ok(peer) => peer.quit().await,
            Err(_) => panic!("the JVM probe still runs"),
        }
        self.log
    }
}

/// Takes `lock` for a whole operation, waiting as long as it takes to be
/// served (the deployment has healed, but a refusal may linger).
async fn take(lock: &RFencedLock, name: &str) -> FencedGuard {
    crate::common::within(&format!("{name} taken"), async {
        loop {
            match lock.lock().await {
                Ok(guard) => return guard,
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{name}: {e}"),
            }
        }
    })
    .await
}

fn lock_name(i: usize) -> String {
    format!("{TAG}:lock-{i}")
}

/// A Rust contender: takes one of the contended locks at random (waiting up
/// to 1.5 s), holds it inside its critical section for 5-40 ms (one in four:
/// 0.3-2.5 s), leaves at once if told lost, and releases it.
async fn contend(
    client: RedissonClient,
    holder: String,
    resource: Arc<Resource>,
    log: Arc<Log>,
    stop: watch::Receiver<bool>,
) {
    let handles: Vec<_> = (0..CONTENDED_LOCKS)
        .map(|i| client.fenced_lock(&lock_name(i)).unwrap())
        .collect();
    while !*stop.borrow() {
        let i = rand::rng().random_range(0..CONTENDED_LOCKS);
        let guard = match handles[i].try_lock_for(Duration::from_millis(1500)).await {
            Ok(Some(guard)) => guard,
            Ok(None) => continue,
            Err(e) => {
                log.error("crate contender", &e);
                // Not a stand-in for an event: a client that failed backs off.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let name = lock_name(i);
        let (heard, listener) = listen(guard.lost_signal());
        let at_risk_at_entry = guard.is_at_risk();
        let entered = resource.enter(&name, &holder, guard.token()).await;
        let hold = if rand::rng().random_bool(0.25) {
            Duration::from_millis(rand::rng().random_range(300..2500))
        } else {
            Duration::from_millis(rand::rng().random_range(5..40))
        };
        tokio::select! {
            _ = tokio::time::sleep(hold) => {}
            _ = guard.lost() => heard.lock().lost(now_us()),
        }
        let exit_us = resource.exit(&name).await;
        listener.abort();
        let signals = heard.lock().clone();
        if signals.lost_us.is_some() || !signals.at_risk_us.is_empty() {
            let checked_us = now_us();
            let count_after = count_via(&client, &name, &guard.field()).await;
            log.holds.lock().push(HoldRecord {
                client: CRATE,
                role: Role::Contender,
                holder: holder.clone(),
                lock: name.clone(),
                field: guard.field(),
                enter_us: entered.at_us,
                exit_us,
                at_risk_us: signals.at_risk_us.clone(),
                lost_us: signals.lost_us,
                count_after,
                checked_us,
            });
        }
        log.sections.lock().push(Section {
            lock: name,
            holder: holder.clone(),
            token: guard.token(),
            enter_us: entered.at_us,
            exit_us,
            inside: entered.inside,
            regressed_after: entered.regressed_after,
            at_risk_at_entry,
            at_risk_us: signals.at_risk_us.first().copied().or(signals.lost_us),
            lost_us: signals.lost_us,
            safety: safety_name(guard.safety()),
        });
        log.sections_done.send_modify(|n| *n += 1);
        if let Err(e) = guard.unlock().await {
            log.error("crate contender unlock", &e);
        }
    }
}

/// Tries every held lock twice a second; one it gets, it enters.
async fn challenge(
    client: RedissonClient,
    targets: Arc<Mutex<Vec<String>>>,
    resource: Arc<Resource>,
    log: Arc<Log>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(CHALLENGE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let names = targets.lock().clone();
        for name in names {
            let guard = match client.fenced_lock(&name).unwrap().try_lock().await {
                Ok(Some(guard)) => guard,
                Ok(None) => continue,
                Err(e) => {
                    log.error("challenger", &e);
                    continue;
                }
            };
            let at_risk_at_entry = guard.is_at_risk();
            let entered = resource.enter(&name, "c", guard.token()).await;
            let exit_us = resource.exit(&name).await;
            log.sections.lock().push(Section {
                lock: name,
                holder: "c".into(),
                token: guard.token(),
                enter_us: entered.at_us,
                exit_us,
                inside: entered.inside,
                regressed_after: entered.regressed_after,
                at_risk_at_entry,
                at_risk_us: None,
                lost_us: None,
                safety: safety_name(guard.safety()),
            });
            if let Err(e) = guard.unlock().await {
                log.error("challenger unlock", &e);
            }
        }
    }
}

/// Every 250 ms: `try_lock()` of a lock nobody has held, then its release.
async fn probe_rust(
    client: RedissonClient,
    label: &'static str,
    log: Arc<Log>,
    mut stop: watch::Receiver<bool>,
) {
    let slug = label.replace([' ', ','], "");
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let lock = client.lock(&format!("{TAG}:probe-{slug}-{n}")).unwrap();
        let (at_us, started) = (now_us(), Instant::now());
        let outcome = lock.try_lock().await;
        let latency_us = started.elapsed().as_micros() as i64;
        let (acquired, refusal, safety) = match outcome {
            Ok(Some(guard)) => {
                let safety = safety_name(guard.safety());
                if let Err(e) = guard.unlock().await {
                    log.error(&format!("{label} probe unlock"), &e);
                }
                (true, None, Some(safety))
            }
            Ok(None) => (false, Some("held".to_string()), None),
            Err(e) => (false, Some(refusal_of(&e)), None),
        };
        log.probe(Probe {
            client: label,
            at_us,
            latency_us,
            acquired,
            refusal,
            safety,
        });
    }
}

/// Every 250 ms: Redisson's `tryLock(0, -1)` (no wait, watchdog lease) of a
/// lock nobody has held, then its release.
async fn probe_jvm(peer: Arc<JavaPeer>, log: Arc<Log>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let name = format!("{TAG}:probe-redisson-{n}");
        let (at_us, started) = (now_us(), Instant::now());
        let outcome = peer.call(&format!("tryLock {name} 1 0 -1")).await;
        let latency_us = started.elapsed().as_micros() as i64;
        let (acquired, refusal) = match outcome.as_deref() {
            Ok("true") => {
                if let Err(e) = peer.call(&format!("unlock {name} 1")).await {
                    *log.errors
                        .lock()
                        .entry(format!(
                            "{REDISSON} probe unlock: {}",
                            e.split(' ').next().unwrap_or("?")
                        ))
                        .or_default() += 1;
                }
                (true, None)
            }
            Ok(_) => (false, Some("held".to_string())),
            // `ERR <exception class> <message>`: the class names it.
            Err(e) => (false, Some(e.split(' ').next().unwrap_or("?").to_string())),
        };
        log.probe(Probe {
            client: REDISSON,
            at_us,
            latency_us,
            acquired,
            refusal,
            safety: None,
        });
    }
}
