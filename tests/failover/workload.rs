//! The workload: clients x tasks contending for a few fenced locks, each
//! critical section entered and left on the resource, each holder's at-risk
//! and lost signals timed; a probe that measures when locks can be taken
//! again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng;
use redisson_lock::{Config, Error, RedissonClient, ReplicaQuorum, SafetyLevel};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::common::java::JavaPeer;
use crate::resource::{now_us, Resource};

/// Every lock of the workload, and the probe's, shares one hash tag: on a
/// cluster they all live on the shard the faults hit.
pub const TAG: &str = "{safety}";

/// The replica-sync settings compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Quorum {
    /// `checkLockSyncedSlaves: false`.
    Off,
    /// `ReplicaQuorum::Any`, the default (Redisson's rule).
    Any,
    /// `ReplicaQuorum::All`.
    All,
}

impl Quorum {
    pub fn apply(self, config: &mut Config) {
        match self {
            Quorum::Off => config.check_lock_synced_slaves = false,
            Quorum::Any => config.replica_quorum = ReplicaQuorum::Any,
            Quorum::All => config.replica_quorum = ReplicaQuorum::All,
        }
    }
}

/// One critical section, as the resource and the holder saw it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Section {
    pub lock: String,
    pub holder: String,
    pub token: i64,
    /// Resource clock (µs).
    pub enter_us: i64,
    pub exit_us: i64,
    /// Sections inside when this one entered, itself included.
    pub inside: i64,
    /// The token was not above the largest seen: the holder handed that one.
    pub regressed_after: Option<String>,
    /// The guard was at risk already when the section entered.
    pub at_risk_at_entry: bool,
    /// When the holder heard its lock was at risk (or lost), and lost.
    pub at_risk_us: Option<i64>,
    pub lost_us: Option<i64>,
    pub safety: String,
}

/// What a run recorded.
#[derive(Default)]
pub struct Log {
    pub sections: Mutex<Vec<Section>>,
    /// How many Rust sections have completed so far.
    pub progress: watch::Sender<usize>,
    /// Errors by where and kind.
    pub errors: Mutex<BTreeMap<String, u64>>,
    /// Probe attempts: (µs, acquired).
    pub probes: Mutex<Vec<(i64, bool)>>,
}

impl Log {
    fn error(&self, during: &str, e: &Error) {
        let kind = format!("{e:?}");
        let kind = kind
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or("?");
        *self
            .errors
            .lock()
            .entry(format!("{during}: {kind}"))
            .or_default() += 1;
    }
}

/// The shape of a workload.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub clients: usize,
    pub tasks: usize,
    pub locks: usize,
    pub watchdog: Duration,
}

pub struct Workload {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    clients: Vec<RedissonClient>,
    /// A JVM Redisson client contending beside the Rust ones, and its run.
    jvm: Option<(
        JavaPeer,
        tokio::sync::oneshot::Receiver<Result<String, String>>,
    )>,
    resource: Arc<Resource>,
    pub log: Arc<Log>,
}

pub fn lock_name(i: usize) -> String {
    format!("{TAG}:lock-{i}")
}

pub fn settings(url: &str, quorum: Quorum, watchdog: Duration) -> Config {
    let mut config = crate::common::config(url, watchdog);
    config.retry_attempts = 3;
    config.slaves_sync_timeout = Duration::from_millis(500);
    quorum.apply(&mut config);
    config
}

impl Workload {
    /// Starts the Rust clients, the probe, and with `jvm` (a started peer)
    /// a JVM client with `shape.tasks` threads.
    pub async fn start(
        url: &str,
        quorum: Quorum,
        shape: Shape,
        resource: Arc<Resource>,
        jvm: Option<JavaPeer>,
    ) -> Self {
        let (stop, _) = watch::channel(false);
        let log = Arc::new(Log::default());
        let mut clients = vec![];
        let mut tasks = vec![];
        for c in 0..shape.clients {
            let client = RedissonClient::connect(settings(url, quorum, shape.watchdog))
                .await
                .expect("connect");
            for t in 0..shape.tasks {
                let holder = format!("r{c}-{t}");
                tasks.push(tokio::spawn(contend(
                    client.clone(),
                    holder,
                    shape.locks,
                    resource.clone(),
                    log.clone(),
                    stop.subscribe(),
                )));
            }
            clients.push(client);
        }
        let prober = RedissonClient::connect(settings(url, quorum, shape.watchdog))
            .await
            .expect("connect");
        tasks.push(tokio::spawn(probe(
            prober.clone(),
            log.clone(),
            stop.subscribe(),
        )));
        clients.push(prober);
        let jvm = match jvm {
            Some(peer) => {
                let run = peer
                    .send(&format!(
                        "safety {TAG} {} {} {}",
                        shape.locks,
                        shape.tasks,
                        resource.url()
                    ))
                    .await;
                Some((peer, run))
            }
            None => None,
        };
        Workload {
            stop,
            tasks,
            clients,
            jvm,
            resource,
            log,
        }
    }

    /// A receiver of the number of sections completed so far.
    pub fn progress(&self) -> watch::Receiver<usize> {
        self.log.progress.subscribe()
    }

    pub async fn stop(self) -> Arc<Log> {
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.await.unwrap();
        }
        for client in &self.clients {
            client.shutdown().await;
        }
        if let Some((peer, run)) = self.jvm {
            self.resource.stop_jvm().await;
            let done = crate::common::within("the JVM client stops", run)
                .await
                .expect("peer exited")
                .expect("the JVM client's run");
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
                    .entry("jvm: errors".into())
                    .or_default() += errors;
            }
            let jvm_sections = self.resource.jvm_sections().await;
            self.log.sections.lock().extend(jvm_sections);
            peer.quit().await;
        }
        self.log
    }
}

async fn contend(
    client: RedissonClient,
    holder: String,
    locks: usize,
    resource: Arc<Resource>,
    log: Arc<Log>,
    stop: watch::Receiver<bool>,
) {
    let handles: Vec<_> = (0..locks)
        .map(|i| client.fenced_lock(&lock_name(i)).unwrap())
        .collect();
    while !*stop.borrow() {
        let i = rand::rng().random_range(0..locks);
        let guard = match handles[i].try_lock_for(Duration::from_millis(1500)).await {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                *log.errors
                    .lock()
                    .entry("acquire: waited 1.5 s".into())
                    .or_default() += 1;
                continue;
            }
            Err(e) => {
                log.error("acquire", &e);
                // Not a stand-in for an event: a client that failed backs off.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let name = lock_name(i);
        let signal = guard.lost_signal();
        let heard = Arc::new(Mutex::new((None, None)));
        let watcher = tokio::spawn({
            let (signal, heard) = (signal.clone(), heard.clone());
            async move {
                signal.at_risk().await;
                heard.lock().0 = Some(now_us());
                signal.lost().await;
                heard.lock().1 = Some(now_us());
            }
        });
        let at_risk_at_entry = guard.is_at_risk();
        let entered = resource.enter(&name, &holder, guard.token()).await;
        // Most sections are short; one in four runs for up to most of a
        // lease, as a batch job or a slow call would.
        let hold = if rand::rng().random_bool(0.25) {
            Duration::from_millis(rand::rng().random_range(300..2500))
        } else {
            Duration::from_millis(rand::rng().random_range(5..40))
        };
        // A holder that is told its lock is lost stops at once.
        tokio::select! {
            _ = tokio::time::sleep(hold) => {}
            _ = signal.lost() => {}
        }
        let exit_us = resource.exit(&name).await;
        watcher.abort();
        let (at_risk_us, lost_us) = *heard.lock();
        log.sections.lock().push(Section {
            lock: name,
            holder: holder.clone(),
            token: guard.token(),
            enter_us: entered.at_us,
            exit_us,
            inside: entered.inside,
            regressed_after: entered.regressed_after,
            at_risk_at_entry,
            at_risk_us,
            lost_us,
            safety: safety_name(guard.safety()),
        });
        log.progress.send_modify(|n| *n += 1);
        if let Err(e) = guard.unlock().await {
            log.error("unlock", &e);
        }
    }
}

fn safety_name(level: SafetyLevel) -> String {
    match level {
        SafetyLevel::Replicas { acked, promotable } => format!("{acked}/{promotable}"),
        other => format!("{other:?}"),
    }
}

/// Every 50 ms, tries the probe lock for up to 200 ms.
async fn probe(client: RedissonClient, log: Arc<Log>, stop: watch::Receiver<bool>) {
    let lock = client.lock(&format!("{TAG}:probe")).unwrap();
    while !*stop.borrow() {
        let at = now_us();
        let acquired = match lock.try_lock_for(Duration::from_millis(200)).await {
            Ok(Some(guard)) => {
                if let Err(e) = guard.unlock().await {
                    log.error("probe unlock", &e);
                }
                true
            }
            Ok(None) => {
                *log.errors.lock().entry("probe: held".into()).or_default() += 1;
                false
            }
            Err(e) => {
                log.error("probe", &e);
                false
            }
        };
        log.probes.lock().push((at, acquired));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
