//! Issue 29, item 5: the commands a client sends to learn its deployment
//! (`CLUSTER NODES`, `INFO`, `SENTINEL ...`), per client per second, counted
//! at the servers with `INFO commandstats`, redisson-lock and Redisson 4.7.0
//! in one run on the same deployments.
//!
//! On each deployment (a 3+3 cluster, then Sentinel with 3 sentinels), in
//! this order, each side alone connected while it is measured:
//!
//! 1. **background**: nobody connected (what the sentinels and replicas send
//!    on their own; taken out of every later window at its rate);
//! 2. **redisson-lock**: N `RedissonClient`s in this process; after a
//!    warm-up, **contended**: T tasks per client each lock a random one of
//!    64 names (watchdog lease), hold it briefly, unlock, for a fixed time;
//!    then **lagging**: the same while one replica of a primary does not
//!    replicate (issue 37, item 11: the traffic of writes that fall short);
//!    then **idle**: every task holds a lock of its own, nobody contends;
//!    then the clients shut down and a **quiet** window checks that nothing
//!    of theirs is left running;
//! 3. **Redisson**: the same with N Redisson clients in one JVM
//!    (`benches/java/DiscoveryLoad.java`), then a quiet window.
//!
//! Every node (data nodes and sentinels) is read before and after each
//! window (`commandstats.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use redisson_lock::RedissonClient;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use crate::commandstats::{self, Kind, Probe, Snapshot};
use crate::replicated::{Deployment, Node, Role};

pub const RUST: &str = "redisson-lock";
pub const JVM: &str = "Redisson 4.7.0 (JVM)";

/// The shape of the load.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Shape {
    pub clients: usize,
    pub tasks: usize,
    pub locks: usize,
    pub hold_ms: u64,
    pub warmup_s: u64,
    pub contended_s: u64,
    /// The contended load again, while a replica of one primary does not
    /// replicate (its writes fall short of it).
    pub lagging_s: u64,
    pub idle_s: u64,
    pub quiet_s: u64,
}

/// One measured window.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Window {
    /// `redisson-lock`, `Redisson 4.7.0 (JVM)`, or `none`.
    pub side: String,
    /// `background`, `contended`, `lagging`, `idle` or `quiet`.
    pub workload: String,
    /// Clients connected during the window.
    pub clients: usize,
    pub seconds: f64,
    pub acquisitions: u64,
    pub errors: u64,
    /// Errors by call (`lock`, `unlock`) and message, first 120 characters.
    pub error_kinds: BTreeMap<String, u64>,
    /// The 1-minute load average when the window ended (2 cores: other
    /// work on the machine shows here).
    pub load_average: f64,
    /// Calls per command over the window, summed over the nodes of each
    /// role (`primary`, `replica`, `sentinel`), the probe's own `INFO` out.
    pub raw: BTreeMap<String, BTreeMap<String, u64>>,
    /// Calls per command over every node, less the background's rate over
    /// this window's length (per role and command, never below 0).
    pub net: BTreeMap<String, f64>,
    /// Connections the nodes of each role accepted during the window.
    pub connections_received: BTreeMap<String, u64>,
    /// Connected clients at the end of the window, per role.
    pub connected_clients: BTreeMap<String, u64>,
    /// Commands the sentinels ran (`total_commands_processed`, the probe's
    /// own `INFO` out) that their proxies did not see: 0 when every client
    /// and sentinel went through them (a command in flight at a snapshot
    /// may move one either way).
    pub sentinel_commands_around_proxies: i64,
    pub discovery_per_client_per_sec: f64,
    pub wait_per_client_per_sec: f64,
    pub scripts_per_client_per_sec: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct DeploymentResult {
    pub deployment: String,
    pub nodes: Vec<Node>,
    /// Whether every data node still had its starting role at the end.
    pub roles_unchanged: bool,
    pub windows: Vec<Window>,
}

#[derive(Debug, serde::Serialize)]
pub struct Results {
    pub redis_version: String,
    pub shape: Shape,
    pub jvm: String,
    pub deployments: Vec<DeploymentResult>,
}

fn role_name(role: Role) -> String {
    match role {
        Role::Primary => "primary",
        Role::Replica => "replica",
        Role::Sentinel => "sentinel",
    }
    .to_string()
}

/// What one side did during a window, for its record.
#[derive(Default)]
struct Load {
    acquisitions: u64,
    errors: u64,
    kinds: BTreeMap<String, u64>,
}

impl Load {
    fn failed(&mut self, call: &str, message: &str) {
        self.errors += 1;
        let message: String = message.chars().take(120).collect();
        *self.kinds.entry(format!("{call}: {message}")).or_default() += 1;
    }

    fn add(&mut self, other: Load) {
        self.acquisitions += other.acquisitions;
        self.errors += other.errors;
        for (kind, n) in other.kinds {
            *self.kinds.entry(kind).or_default() += n;
        }
    }
}

/// The 1-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

fn window(
    nodes: &[Node],
    (side, workload, clients): (&str, &str, usize),
    before: &Snapshot,
    after: &Snapshot,
    background: Option<&Window>,
    load: Load,
) -> Window {
    let seconds = (after.at - before.at).as_secs_f64();
    let mut raw: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut connections_received = BTreeMap::new();
    let mut connected_clients = BTreeMap::new();
    let mut around = 0i64;
    for (i, node) in nodes.iter().enumerate() {
        let (b, a) = (&before.nodes[i], &after.nodes[i]);
        if !a.own_counts {
            let processed = a.commands_processed as i64 - b.commands_processed as i64 - 1;
            let seen: i64 = commandstats::delta(b, a).values().map(|&n| n as i64).sum();
            around += processed - seen;
        }
        let role = role_name(node.role);
        let per_role = raw.entry(role.clone()).or_default();
        for (command, n) in commandstats::delta(&before.nodes[i], &after.nodes[i]) {
            *per_role.entry(command).or_default() += n;
        }
        *connections_received.entry(role.clone()).or_default() += after.nodes[i]
            .connections_received
            .saturating_sub(before.nodes[i].connections_received);
        *connected_clients.entry(role).or_default() += after.nodes[i].connected_clients;
    }
    let mut net: BTreeMap<String, f64> = BTreeMap::new();
    for (role, commands) in &raw {
        for (command, &n) in commands {
            let expected = background
                .and_then(|b| b.raw.get(role)?.get(command).map(|&c| c as f64 / b.seconds))
                .unwrap_or(0.0)
                * seconds;
            *net.entry(command.clone()).or_default() += (n as f64 - expected).max(0.0);
        }
    }
    let per_client_second = |k: Kind| {
        let total: f64 = net
            .iter()
            .filter(|(c, _)| commandstats::kind(c) == k)
            .map(|(_, n)| n)
            .sum();
        if clients == 0 {
            total / seconds
        } else {
            total / clients as f64 / seconds
        }
    };
    Window {
        side: side.to_string(),
        workload: workload.to_string(),
        clients,
        seconds,
        acquisitions: load.acquisitions,
        errors: load.errors,
        error_kinds: load.kinds,
        load_average: load_average(),
        discovery_per_client_per_sec: per_client_second(Kind::Discovery),
        wait_per_client_per_sec: per_client_second(Kind::Wait),
        scripts_per_client_per_sec: per_client_second(Kind::Script),
        raw,
        net,
        connections_received,
        connected_clients,
        sentinel_commands_around_proxies: around,
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<22} {:<10} {:>5.1} s  {:>7} acquisitions ({} errors)  discovery {:.3}/client/s  WAIT {:.2}  scripts {:.2}  new connections {:?}",
            self.side,
            self.workload,
            self.seconds,
            self.acquisitions,
            self.errors,
            self.discovery_per_client_per_sec,
            self.wait_per_client_per_sec,
            self.scripts_per_client_per_sec,
            self.connections_received
        )?;
        let discovery: Vec<String> = self
            .net
            .iter()
            .filter(|(c, n)| commandstats::kind(c) == Kind::Discovery && **n > 0.0)
            .map(|(c, n)| format!("{c} {n:.0}"))
            .collect();
        if !discovery.is_empty() {
            write!(f, "\n    discovery: {}", discovery.join(", "))?;
        }
        if self.sentinel_commands_around_proxies != 0 {
            write!(
                f,
                "\n    sentinel commands around the proxies: {}",
                self.sentinel_commands_around_proxies
            )?;
        }
        for (kind, n) in &self.error_kinds {
            write!(f, "\n    {n} x {kind}")?;
        }
        Ok(())
    }
}

/// Runs `load` between two snapshots of every node and makes its window
/// (`side`, `workload`, `clients`), printed as it is made.
async fn measured(
    deployment: &Deployment,
    probe: &mut Probe,
    background: &Window,
    label: (&str, &str, usize),
    load: impl std::future::Future<Output = Load>,
) -> Window {
    let before = probe.snapshot().await;
    let load = load.await;
    let after = probe.snapshot().await;
    let w = window(
        &deployment.nodes,
        label,
        &before,
        &after,
        Some(background),
        load,
    );
    eprintln!("{w}");
    w
}

/// Both sides on both deployments.
pub async fn run(shape: Shape) -> Results {
    let classes = compile_jvm_load();
    let mut deployments = vec![];
    let mut redis_version = String::new();
    for cluster in [true, false] {
        let deployment = if cluster {
            Deployment::cluster().await
        } else {
            Deployment::sentinel().await
        };
        redis_version = deployment.version().await;
        eprintln!("{} (redis {redis_version})", deployment.name);
        deployments.push(on(&deployment, &shape, &classes).await);
    }
    Results {
        redis_version,
        jvm: format!(
            "{} Redisson clients in one JVM, sharing one Netty event loop group (2 threads per core) and one 16-thread executor; each with its own connections, pools and scans, the rest of its config the default",
            shape.clients
        ),
        shape,
        deployments,
    }
}

async fn on(deployment: &Deployment, shape: &Shape, classes: &std::path::Path) -> DeploymentResult {
    let nodes = &deployment.nodes;
    let probed: Vec<_> = nodes
        .iter()
        .map(|n| {
            let proxy = deployment
                .proxies
                .iter()
                .find(|p| Some(p.port) == n.proxy)
                .cloned();
            (n.port, proxy)
        })
        .collect();
    let mut probe = Probe::connect(&probed).await;
    let mut windows = vec![];
    let quiet = Duration::from_secs(shape.quiet_s);

    let before = probe.snapshot().await;
    tokio::time::sleep(quiet).await;
    let after = probe.snapshot().await;
    let background = window(
        nodes,
        ("none", "background", 0),
        &before,
        &after,
        None,
        Load::default(),
    );
    eprintln!("{background}");
    windows.push(background.clone());

    for side in [RUST, JVM] {
        let measured = if side == RUST {
            rust_side(deployment, &mut probe, &background, shape).await
        } else {
            jvm_side(deployment, &mut probe, &background, shape, classes).await
        };
        windows.extend(measured);
        let before = probe.snapshot().await;
        tokio::time::sleep(quiet).await;
        let after = probe.snapshot().await;
        let w = window(
            nodes,
            (side, "quiet", 0),
            &before,
            &after,
            Some(&background),
            Load::default(),
        );
        eprintln!("{w}");
        windows.push(w);
    }
    let now = deployment.roles_now().await;
    let roles_unchanged = now
        .iter()
        .zip(nodes)
        .all(|(a, b)| a.role == b.role && a.port == b.port);
    if !roles_unchanged {
        eprintln!("a node changed role during the run: {now:?}");
    }
    DeploymentResult {
        deployment: deployment.name.to_string(),
        nodes: nodes.clone(),
        roles_unchanged,
        windows,
    }
}

/// A small generator per task, so that each picks its own sequence of locks.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

async fn rust_side(
    deployment: &Deployment,
    probe: &mut Probe,
    background: &Window,
    shape: &Shape,
) -> Vec<Window> {
    let started = Instant::now();
    let clients: Vec<RedissonClient> = futures::stream::iter(0..shape.clients)
        .map(|_| async {
            RedissonClient::from_url(&deployment.url)
                .await
                .unwrap_or_else(|e| panic!("redisson-lock client on {}: {e}", deployment.url))
        })
        .buffer_unordered(10)
        .collect()
        .await;
    eprintln!(
        "{} redisson-lock clients connected in {:.1} s",
        clients.len(),
        started.elapsed().as_secs_f64()
    );
    let names: Arc<Vec<String>> = Arc::new(
        (0..shape.locks)
            .map(|i| format!("discovery:rust:{i}"))
            .collect(),
    );
    let hold = Duration::from_millis(shape.hold_ms);
    let warm = rust_contend(
        &clients,
        shape.tasks,
        &names,
        hold,
        Duration::from_secs(shape.warmup_s),
    )
    .await;
    eprintln!(
        "redisson-lock warm-up: {} acquisitions, {} errors",
        warm.acquisitions, warm.errors
    );
    let mut windows = vec![];
    let contend = |seconds: u64| {
        rust_contend(
            &clients,
            shape.tasks,
            &names,
            hold,
            Duration::from_secs(seconds),
        )
    };
    let label = |workload| (RUST, workload, clients.len());
    windows.push(
        measured(
            deployment,
            probe,
            background,
            label("contended"),
            contend(shape.contended_s),
        )
        .await,
    );
    let broken = deployment.break_a_replica().await;
    windows.push(
        measured(
            deployment,
            probe,
            background,
            label("lagging"),
            contend(shape.lagging_s),
        )
        .await,
    );
    deployment.mend(broken).await;

    // Idle: every task's lock of its own, held under the watchdog.
    let mut guards = vec![];
    let mut taking = vec![];
    for (c, client) in clients.iter().enumerate() {
        for t in 0..shape.tasks {
            let lock = client
                .lock(&format!("discovery:rust-idle:{c}:{t}"))
                .unwrap();
            taking.push(async move { lock.lock().await });
        }
    }
    for held in futures::future::join_all(taking).await {
        guards.push(held.expect("an idle lock"));
    }
    let before = probe.snapshot().await;
    tokio::time::sleep(Duration::from_secs(shape.idle_s)).await;
    let after = probe.snapshot().await;
    let w = window(
        &deployment.nodes,
        (RUST, "idle", clients.len()),
        &before,
        &after,
        Some(background),
        Load {
            acquisitions: guards.len() as u64,
            ..Load::default()
        },
    );
    eprintln!("{w}");
    windows.push(w);
    let released = futures::future::join_all(guards.into_iter().map(|g| g.unlock())).await;
    let failed = released.iter().filter(|r| r.is_err()).count();
    if failed > 0 {
        eprintln!("{failed} idle locks failed to unlock");
    }
    futures::future::join_all(clients.iter().map(|c| c.shutdown())).await;
    windows
}

/// Every client runs `tasks` loops (lock a random name, hold, unlock) until
/// `duration` has passed; a loop finishes the round it is in.
async fn rust_contend(
    clients: &[RedissonClient],
    tasks: usize,
    names: &Arc<Vec<String>>,
    hold: Duration,
    duration: Duration,
) -> Load {
    let deadline = Instant::now() + duration;
    let mut set = tokio::task::JoinSet::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..tasks {
            let (client, names) = (client.clone(), names.clone());
            set.spawn(async move {
                let mut random = XorShift(0x9E37_79B9_7F4A_7C15 ^ ((c as u64) << 20 | t as u64));
                let mut load = Load::default();
                while Instant::now() < deadline {
                    let name = &names[(random.next() % names.len() as u64) as usize];
                    let lock = client.lock(name).unwrap();
                    match lock.lock().await {
                        Ok(guard) => {
                            load.acquisitions += 1;
                            tokio::time::sleep(hold).await;
                            if let Err(e) = guard.unlock().await {
                                load.failed("unlock", &e.to_string());
                            }
                        }
                        Err(e) => {
                            load.failed("lock", &e.to_string());
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
                load
            });
        }
    }
    let mut total = Load::default();
    while let Some(done) = set.join_next().await {
        total.add(done.expect("a contending task panicked"));
    }
    total
}

const PEER_JAR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/interop/java/target/interop-peer-4.7.0.jar"
);

/// Compiles `benches/java/DiscoveryLoad.java` against the interop peer's jar
/// (which carries Redisson 4.7.0 and its dependencies) into
/// `target/discovery-load`.
fn compile_jvm_load() -> PathBuf {
    let out = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target/discovery-load"
    ));
    std::fs::create_dir_all(&out).unwrap();
    let status = std::process::Command::new("javac")
        .args(["-nowarn", "-d"])
        .arg(&out)
        .args(["-cp", PEER_JAR])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/java/DiscoveryLoad.java"
        ))
        .status()
        .expect("javac (a JDK) is needed for the JVM side");
    assert!(
        status.success(),
        "javac failed; is the interop peer jar built (bash .ci/run)?"
    );
    out
}

/// The JVM load process: its stdin, and its stdout's lines.
struct JvmLoad {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl JvmLoad {
    async fn start(deployment: &Deployment, clients: usize, classes: &std::path::Path) -> JvmLoad {
        let mut child = tokio::process::Command::new("java")
            .args(["-XX:-UsePerfData", "-Xlog:all=warning:stderr", "-cp"])
            .arg(format!("{PEER_JAR}:{}", classes.display()))
            .arg("DiscoveryLoad")
            .args(&deployment.jvm_args)
            .args(["--clients", &clients.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("java");
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = tokio::time::timeout(Duration::from_secs(600), lines.next_line())
            .await
            .expect("the JVM load did not start within 10 minutes")
            .unwrap()
            .unwrap_or_default();
        assert!(ready.starts_with("READY"), "the JVM load said {ready:?}");
        JvmLoad {
            child,
            stdin,
            lines,
        }
    }

    async fn call(&mut self, line: String, limit: Duration) -> String {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        let reply = tokio::time::timeout(limit, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the JVM load did not answer {line:?} within {limit:?}"))
            .unwrap()
            .unwrap_or_default();
        assert!(reply.starts_with("OK"), "{line:?}: {reply}");
        reply
    }

    async fn contend(&mut self, shape: &Shape, seconds: u64) -> Load {
        let reply = self
            .call(
                format!(
                    "contend discovery:jvm {} {} {} {}",
                    shape.locks,
                    shape.tasks,
                    seconds * 1000,
                    shape.hold_ms
                ),
                Duration::from_secs(seconds + 120),
            )
            .await;
        // `OK <acquisitions> <errors>`, then `<call: message>\t<count>` per kind, tab-separated.
        let mut fields = reply.split('\t');
        let head: Vec<&str> = fields.next().unwrap_or_default().split(' ').collect();
        let mut load = Load {
            acquisitions: head[1].parse().unwrap(),
            ..Load::default()
        };
        let errors: u64 = head[2].parse().unwrap();
        while let (Some(kind), Some(n)) = (fields.next(), fields.next()) {
            *load.kinds.entry(kind.to_string()).or_default() += n.parse::<u64>().unwrap();
        }
        load.errors = errors;
        load
    }
}

async fn jvm_side(
    deployment: &Deployment,
    probe: &mut Probe,
    background: &Window,
    shape: &Shape,
    classes: &std::path::Path,
) -> Vec<Window> {
    let started = Instant::now();
    let mut jvm = JvmLoad::start(deployment, shape.clients, classes).await;
    eprintln!(
        "{} Redisson clients connected in {:.1} s",
        shape.clients,
        started.elapsed().as_secs_f64()
    );
    let warm = jvm.contend(shape, shape.warmup_s).await;
    eprintln!(
        "Redisson warm-up: {} acquisitions, {} errors",
        warm.acquisitions, warm.errors
    );
    let mut windows = vec![];
    let label = |workload| (JVM, workload, shape.clients);
    let load = jvm.contend(shape, shape.contended_s);
    windows.push(measured(deployment, probe, background, label("contended"), load).await);
    let broken = deployment.break_a_replica().await;
    let load = jvm.contend(shape, shape.lagging_s);
    windows.push(measured(deployment, probe, background, label("lagging"), load).await);
    deployment.mend(broken).await;

    let held: u64 = jvm
        .call(
            format!("hold discovery:jvm-idle {}", shape.tasks),
            Duration::from_secs(180),
        )
        .await
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let before = probe.snapshot().await;
    tokio::time::sleep(Duration::from_secs(shape.idle_s)).await;
    let after = probe.snapshot().await;
    let w = window(
        &deployment.nodes,
        (JVM, "idle", shape.clients),
        &before,
        &after,
        Some(background),
        Load {
            acquisitions: held,
            ..Load::default()
        },
    );
    eprintln!("{w}");
    windows.push(w);
    jvm.call("release".into(), Duration::from_secs(180)).await;
    jvm.call("quit".into(), Duration::from_secs(60)).await;
    let _ = tokio::time::timeout(Duration::from_secs(30), jvm.child.wait()).await;
    windows
}

/// The summary: per deployment and workload, discovery commands per client
/// per second on each side and their ratio.
pub fn table(results: &Results) -> String {
    let mut out = String::from(
        "| deployment | workload | redisson-lock | Redisson 4.7.0 | ratio | WAIT (ours / theirs) | scripts (ours / theirs) |\n|---|---|---|---|---|---|---|\n",
    );
    for d in &results.deployments {
        for workload in ["contended", "lagging", "idle"] {
            let find = |side: &str| {
                d.windows
                    .iter()
                    .find(|w| w.side == side && w.workload == workload)
            };
            let (Some(ours), Some(theirs)) = (find(RUST), find(JVM)) else {
                continue;
            };
            out += &format!(
                "| {} | {workload} | {:.3} | {:.3} | {:.2}x | {:.1} / {:.1} | {:.1} / {:.1} |\n",
                d.deployment,
                ours.discovery_per_client_per_sec,
                theirs.discovery_per_client_per_sec,
                ours.discovery_per_client_per_sec / theirs.discovery_per_client_per_sec,
                ours.wait_per_client_per_sec,
                theirs.wait_per_client_per_sec,
                ours.scripts_per_client_per_sec,
                theirs.scripts_per_client_per_sec,
            );
        }
    }
    out
}
