//! Test support: real redis-server processes on free ports, a fault-injecting
//! TCP proxy, and observers for channel messages and keyspace events.

pub mod bus;
pub mod firewall;
pub mod garbage;
pub mod java;
pub mod partition;
pub mod topology;

use std::net::TcpListener as StdListener;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::Message;
use redisson_lock::{Config, RedissonClient};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// A boxed future, for test helpers passed as callbacks.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Upper bound for anything a test awaits: a hang guard, not a speed check.
pub const HANG: Duration = Duration::from_secs(30);

/// Awaits `f`, failing the test if it hangs.
pub async fn within<T>(what: &str, f: impl std::future::IntoFuture<Output = T>) -> T {
    tokio::time::timeout(HANG, f.into_future())
        .await
        .unwrap_or_else(|_| panic!("{what}: still waiting after {HANG:?}"))
}

/// Keeps polling `pending` (which must not complete) until `reached` says the
/// state on Redis shows its effect, then returns with it still pending, so that
/// the caller can drop it mid-flight.
pub async fn drive_until<F, C>(
    what: &str,
    pending: &mut std::pin::Pin<&mut F>,
    mut reached: impl FnMut() -> C,
) where
    F: std::future::Future,
    C: std::future::Future<Output = bool>,
{
    within(what, async {
        loop {
            tokio::select! {
                biased;
                _ = pending.as_mut() => panic!("{what}: completed while replies are stalled"),
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
            if reached().await {
                return;
            }
        }
    })
    .await
}

/// libfaketime, which shifts the wall clock of the process it is preloaded
/// into (Debian package libfaketime; .ci/run installs it).
pub fn libfaketime() -> String {
    let arch = std::env::consts::ARCH;
    let path = format!("/usr/lib/{arch}-linux-gnu/faketime/libfaketime.so.1");
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} is needed to move a process's clock (Debian package libfaketime; \
         .ci/run installs it)"
    );
    path
}

/// A redis-server that runs under libfaketime: the one the tests use
/// (`REDIS_SERVER`), unless it is linked with jemalloc, whose start-up
/// clock reads libfaketime cannot serve (Debian's packages are): then
/// scripts/servers.sh's build of Redis 8 (libc malloc), from its registry.
pub fn clock_shiftable_server() -> String {
    let current = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let ldd = std::process::Command::new("sh")
        .args(["-c", &format!("ldd \"$(command -v '{current}')\"")])
        .output()
        .expect("ldd");
    if !String::from_utf8_lossy(&ldd.stdout).contains("jemalloc") {
        return current;
    }
    let cache = std::env::var("REDISSON_LOCK_SERVER_CACHE").unwrap_or_else(|_| {
        format!(
            "{}/.cache/redisson-lock/servers",
            std::env::var("HOME").unwrap()
        )
    });
    let registry = std::fs::read_to_string(format!("{cache}/servers.tsv"))
        .unwrap_or_else(|e| panic!("{cache}/servers.tsv ({e}): run scripts/servers.sh redis-8"));
    registry
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            (fields.first() == Some(&"redis-8")).then(|| fields[2].to_string())
        })
        .unwrap_or_else(|| {
            panic!("no redis-8 in {cache}/servers.tsv: run scripts/servers.sh redis-8")
        })
}

pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server started by the test, killed on drop. No persistence: a
/// restart loses every key, as a crash of a cache node would.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    /// Its own working directory: replication and cluster files stay out of
    /// the source tree.
    dir: topology::Scratch,
    /// A config file given before the flags (sentinels need one they can rewrite).
    config_file: Option<std::path::PathBuf>,
    extra: Vec<String>,
    /// Added to the process's environment (an `LD_PRELOAD`, say).
    env: Vec<(String, String)>,
}

impl RedisServer {
    pub async fn start() -> Self {
        init_tracing();
        Self::start_with(&[]).await
    }

    pub async fn start_with(extra: &[&str]) -> Self {
        Self::start_on_free_port(None, extra).await
    }

    /// Starts on a free port. Another process may take the port between
    /// the probe and the server's bind (tests open many connections, each
    /// on an ephemeral port), so a server that exits before it is ready is
    /// started again on another port, twice at most.
    pub async fn start_on_free_port(
        config_file: Option<std::path::PathBuf>,
        extra: &[&str],
    ) -> Self {
        Self::start_on_free_port_with_env(config_file, extra, &[]).await
    }

    /// As `start_with`, with `env` added to the process's environment.
    pub async fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_on_free_port_with_env(None, extra, env).await
    }

    async fn start_on_free_port_with_env(
        config_file: Option<std::path::PathBuf>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        init_tracing();
        let mut server = RedisServer {
            port: free_port(),
            child: None,
            dir: topology::Scratch::new("server"),
            config_file,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        for _ in 0..2 {
            if server.try_spawn().await {
                return server;
            }
            server.port = free_port();
        }
        server.spawn().await;
        server
    }

    /// Starts on `port`, with an optional config file before the flags.
    pub async fn start_on(
        port: u16,
        config_file: Option<std::path::PathBuf>,
        extra: &[&str],
    ) -> Self {
        match Self::try_start_on(port, config_file, extra).await {
            Some(server) => server,
            None => panic!("redis-server exited before it was ready (port {port})"),
        }
    }

    /// As `start_on`; `None` if the server exited before it was ready (as
    /// it does when another process took the port), so that the caller
    /// can choose another port.
    pub async fn try_start_on(
        port: u16,
        config_file: Option<std::path::PathBuf>,
        extra: &[&str],
    ) -> Option<Self> {
        init_tracing();
        let mut server = RedisServer {
            port,
            child: None,
            dir: topology::Scratch::new("server"),
            config_file,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: vec![],
        };
        server.try_spawn().await.then_some(server)
    }

    /// The server's process id, for signals.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().and_then(|c| c.id()).expect("running") as i32
    }

    /// SIGSTOP: the process stops answering but keeps its sockets open, as a
    /// hung or partitioned node would.
    pub fn freeze(&self) {
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGSTOP) }, 0);
    }

    /// SIGCONT after `freeze`.
    pub fn thaw(&self) {
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGCONT) }, 0);
    }

    async fn spawn(&mut self) {
        if !self.try_spawn().await {
            panic!(
                "redis-server exited before it was ready (port {})",
                self.port
            );
        }
    }

    /// Starts the process; false if it exited before it was ready.
    async fn try_spawn(&mut self) -> bool {
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let mut cmd = Command::new(&binary);
        if let Some(file) = &self.config_file {
            cmd.arg(file);
        }
        cmd.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "notice",
            "--dir",
            self.dir.0.to_str().unwrap(),
        ])
        .args(&self.extra)
        .envs(self.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
        // A test process killed from outside (a timeout, Ctrl-C) takes its
        // servers with it instead of leaving them running.
        // SAFETY: prctl is async-signal-safe and touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary} (install redis-server): {e}"));
        // Ready when the server says so in its log.
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let expected = std::env::var("REDIS_SERVER_VERSION").ok();
        let ready = within("redis-server start", async {
            while let Some(line) = lines.next_line().await.unwrap() {
                // The startup banner ("Redis version=7.0.15, ...", "Valkey
                // version=8.1.1, ..."): a matrix row runs on the server it names.
                if let (Some(want), Some(found)) = (&expected, server_version(&line)) {
                    assert_eq!(
                        found, want,
                        "{binary} is version {found}, REDIS_SERVER_VERSION says {want}"
                    );
                }
                // A sentinel never says "Ready"; it is once it monitors its primary.
                if line.contains("Ready to accept connections") || line.contains("+monitor master")
                {
                    return true;
                }
            }
            false
        })
        .await;
        if !ready {
            return false;
        }
        // Keep draining the log so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.child = Some(child);
        true
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, as a crash.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }

    /// Starts again on the same port, with the same `--dir`: a node that
    /// ever full-synced as a replica loads that RDB file (see `wipe`).
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// SIGTERM, as an operator's orderly stop (a rolling restart), and waits
    /// for the process to exit.
    pub async fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id().expect("running") as i32;
            assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
            within("redis-server exits after SIGTERM", child.wait())
                .await
                .unwrap();
        }
    }

    /// Starts again on the same port with the same flags, after
    /// `terminate` or `kill`. Persistence is off, but a replica writes each
    /// full sync it receives to its RDB file, and loads that file when it
    /// starts (then resyncs from there, partially if its primary's backlog
    /// still covers it); a sentinel or cluster node keeps its identity in
    /// its config file. See `wipe` for a node with an empty disk.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "still running");
        self.spawn().await;
    }

    /// Removes the RDB file of a stopped server, so that it starts empty,
    /// as a node whose disk was replaced: a replica then needs a full sync.
    pub fn wipe(&self) {
        assert!(self.child.is_none(), "stop the server first");
        let flag = |name: &str| {
            self.extra
                .iter()
                .rposition(|f| f == name)
                .and_then(|i| self.extra.get(i + 1))
        };
        let dir = flag("--dir").map_or(self.dir.0.clone(), std::path::PathBuf::from);
        let file = flag("--dbfilename").map_or("dump.rdb", |f| f.as_str());
        match std::fs::remove_file(dir.join(file)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("removing {file} in {}: {e}", dir.display()),
        }
    }

    /// A plain fred client for inspecting state. Every command is bounded:
    /// fred without a reconnect policy keeps commands sent after the server
    /// closed the connection queued forever.
    pub async fn raw(&self) -> Client {
        let client =
            Builder::from_config(fred::types::config::Config::from_url(&self.url()).unwrap())
                .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
                .build()
                .unwrap();
        client.init().await.unwrap();
        client
    }
}

/// The flags that let a test send `DEBUG` (`DEBUG SLEEP`, `DEBUG POPULATE`)
/// to the server under test: Redis 7 and Valkey refuse it unless
/// `enable-debug-command` says otherwise; Redis 6 has no such setting and
/// allows it.
pub fn debug_command_flags() -> Vec<&'static str> {
    match server_major() {
        0..=6 => vec![],
        _ => vec!["--enable-debug-command", "yes"],
    }
}

/// The major version of the server under test (`redis-server --version`;
/// Valkey's own numbering).
pub fn server_major() -> u32 {
    let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let out = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {binary} --version: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let major: u32 = text
        .split_once(" v=")
        .and_then(|(_, rest)| rest.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no version in `{text}`"));
    major
}

/// The version in a server's startup banner line, if it is that line.
fn server_version(line: &str) -> Option<&str> {
    let rest = line.split_once(" version=")?.1;
    Some(rest.split([',', ' ']).next().unwrap_or(rest))
}

/// Test settings: short watchdog and timeouts so fault tests stay fast.
pub fn config(url: &str, watchdog: Duration) -> Config {
    let mut c = Config::from_url(url);
    c.lock_watchdog_timeout = watchdog;
    c.timeout = Duration::from_secs(1);
    c.connect_timeout = Duration::from_secs(1);
    c.retry_delay = Duration::from_millis(100);
    c.reconnect_min_delay = Duration::from_millis(20);
    c.reconnect_max_delay = Duration::from_millis(200);
    c
}

/// A server, a proxy in front of it, and a client through the proxy whose
/// commands wait up to 10 s, as long as the proxy may hold replies back;
/// `tweak` adjusts the settings before the client connects.
pub async fn proxied(tweak: impl FnOnce(&mut Config)) -> (RedisServer, Proxy, RedissonClient) {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port).await;
    let mut settings = config(&proxy.url(), Duration::from_secs(30));
    settings.timeout = Duration::from_secs(10);
    tweak(&mut settings);
    let client = RedissonClient::connect(settings).await.unwrap();
    (server, proxy, client)
}

/// Log output for `RUST_LOG=redisson_lock=debug cargo test -- --nocapture`.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A fred client of the test's own for the deployment `client` talks to
/// (counters, markers): the crate keeps its connections to itself.
pub async fn fred_of(client: &RedissonClient) -> Client {
    let config = client.config().__fred_config().unwrap();
    let fred = fred::types::Builder::from_config(config).build().unwrap();
    fred.init().await.unwrap();
    fred
}

pub async fn client(server: &RedisServer, watchdog: Duration) -> RedissonClient {
    init_tracing();
    RedissonClient::connect(config(&server.url(), watchdog))
        .await
        .expect("connect")
}

/// Collects messages of the given channels and patterns.
pub struct Observer {
    // Held so the subscription lives as long as the observer.
    _client: SubscriberClient,
    rx: mpsc::UnboundedReceiver<Message>,
}

impl Observer {
    pub async fn new(server: &RedisServer, channels: &[&str], patterns: &[&str]) -> Self {
        let client =
            Builder::from_config(fred::types::config::Config::from_url(&server.url()).unwrap())
                .with_performance_config(|p| p.broadcast_channel_capacity = 100_000)
                .build_subscriber_client()
                .unwrap();
        client.init().await.unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut messages = client.message_rx();
        let mut key_events = client.keyspace_event_rx();
        // fred delivers `__keyevent@<db>__:<op>` messages on a stream of their
        // own; fold them back into (channel, key) pairs.
        tokio::spawn(async move {
            loop {
                let m = tokio::select! {
                    m = messages.recv() => match m { Ok(m) => m, Err(_) => return },
                    e = key_events.recv() => match e {
                        Ok(e) => Message {
                            channel: format!("__keyevent@{}__:{}", e.db, e.operation).into(),
                            value: e.key.as_str().unwrap_or_default().into(),
                            kind: fred::types::MessageKind::Message,
                            server: fred::types::config::Server::new("127.0.0.1", 0),
                        },
                        Err(_) => return,
                    },
                };
                if tx.send(m).is_err() {
                    return;
                }
            }
        });
        for c in channels {
            client.subscribe(*c).await.unwrap();
        }
        for p in patterns {
            client.psubscribe(*p).await.unwrap();
        }
        // Subscriptions are confirmed once the PING behind them is answered.
        let _: Value = client.ping(None).await.unwrap();
        Observer {
            _client: client,
            rx,
        }
    }

    /// The next message: (channel, payload).
    pub async fn next(&mut self) -> (String, String) {
        let m = within("pub/sub message", self.rx.recv()).await.unwrap();
        (
            m.channel.to_string(),
            m.value.as_string().unwrap_or_default(),
        )
    }

    /// Messages already received, without waiting.
    pub fn drain(&mut self) -> Vec<(String, String)> {
        let mut out = vec![];
        while let Ok(m) = self.rx.try_recv() {
            out.push((
                m.channel.to_string(),
                m.value.as_string().unwrap_or_default(),
            ));
        }
        out
    }

    /// Waits until a message matching `pred` arrives; returns those before it too.
    pub async fn until(
        &mut self,
        pred: impl Fn(&(String, String)) -> bool,
    ) -> Vec<(String, String)> {
        let mut seen = vec![];
        loop {
            let m = self.next().await;
            let hit = pred(&m);
            seen.push(m);
            if hit {
                return seen;
            }
        }
    }
}

/// A TCP proxy in front of a server, for faults between a client and Redis.
///
/// * `drop_next_reply()`: forward the next request, then close both sides
///   instead of forwarding its reply, as a network failure between a write
///   and its answer would. `drop_next_request()`: swallow the next request
///   and close, so it never reaches the server.
/// * `drop_reply_to(text)`: as `drop_next_reply`, for the next request that
///   contains `text` only (other clients of the server may use the proxy).
/// * `stall_replies()` / `resume_replies()`: hold back every reply (requests
///   still go through). `stall_replies_from(text)`: as `stall_replies`, from
///   the next request that contains `text` on (its reply the first held).
/// * `delay_next_reply(d)`: forward the next reply `d` late.
/// * `requests(text)`: how many times `text` was sent through it so far.
/// * Per connection, in accept order: `reset(i)` closes it (the client
///   reconnects through the proxy), `delay_next_reply_on(i, d)` delays its
///   next reply, `connections()` counts them.
pub struct Proxy {
    pub port: u16,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    drop_reply: AtomicBool,
    drop_request: AtomicBool,
    /// The next request containing this text has its reply dropped.
    drop_reply_to: parking_lot::Mutex<Option<String>>,
    dropped: parking_lot::Mutex<Vec<String>>,
    /// Replies are stalled from the next request containing this text on.
    stall_from: parking_lot::Mutex<Option<String>>,
    delay_next: parking_lot::Mutex<Option<Duration>>,
    stalled: tokio::sync::watch::Sender<bool>,
    /// One per accepted connection.
    connections: parking_lot::Mutex<Vec<Arc<Connection>>>,
    /// Every request forwarded, as text, in the order read.
    sent: parking_lot::Mutex<String>,
}

#[derive(Default)]
struct Connection {
    reset: tokio::sync::Notify,
    /// Its next reply is dropped (`drop_reply_to`).
    drop_next: AtomicBool,
    delay_next: parking_lot::Mutex<Option<Duration>>,
}

impl Proxy {
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState::default());
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let connection = Arc::new(Connection::default());
                shared.connections.lock().push(connection.clone());
                let state = shared.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = pump(inbound, outbound, &state, &connection) => {}
                        // Dropping the streams closes both sides.
                        _ = connection.reset.notified() => {}
                    }
                });
            }
        });
        Proxy { port, state }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn drop_next_reply(&self) {
        self.state.drop_reply.store(true, Ordering::SeqCst);
    }

    /// Drops the reply to the next request containing `text` (then closes
    /// that connection), whichever connection sends it.
    pub fn drop_reply_to(&self, text: &str) {
        *self.state.drop_reply_to.lock() = Some(text.to_string());
    }

    pub fn drop_next_request(&self) {
        self.state.drop_request.store(true, Ordering::SeqCst);
    }

    /// Holds back every reply from the server (requests still go through)
    /// until `resume_replies`.
    pub fn stall_replies(&self) {
        self.state.stalled.send_replace(true);
    }

    pub fn resume_replies(&self) {
        self.state.stalled.send_replace(false);
    }

    /// Holds back every reply from the next request containing `text` on
    /// (that request's reply first), whichever connection sends it, until
    /// `resume_replies`.
    pub fn stall_replies_from(&self, text: &str) {
        *self.state.stall_from.lock() = Some(text.to_string());
    }

    /// Forwards the next reply `delay` after it arrives.
    pub fn delay_next_reply(&self, delay: Duration) {
        *self.state.delay_next.lock() = Some(delay);
    }

    /// The replies (or requests) swallowed so far, as text.
    pub fn dropped(&self) -> Vec<String> {
        self.state.dropped.lock().clone()
    }

    /// How many times `text` appears in what clients sent through the
    /// proxy so far (`"\r\nMYID\r\n"`: how many `MYID`s were sent).
    pub fn requests(&self, text: &str) -> usize {
        self.state.sent.lock().matches(text).count()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.connections.lock().len()
    }

    /// Closes the `i`-th accepted connection.
    pub fn reset(&self, i: usize) {
        self.state.connections.lock()[i].reset.notify_one();
    }

    /// Forwards the next reply on the `i`-th accepted connection `delay`
    /// after it arrives.
    pub fn delay_next_reply_on(&self, i: usize, delay: Duration) {
        *self.state.connections.lock()[i].delay_next.lock() = Some(delay);
    }
}

async fn pump(
    inbound: TcpStream,
    outbound: TcpStream,
    state: &ProxyState,
    connection: &Connection,
) {
    let (mut in_r, mut in_w) = inbound.into_split();
    let (mut out_r, mut out_w) = outbound.into_split();
    let requests = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match in_r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if state.drop_request.swap(false, Ordering::SeqCst) {
                        state
                            .dropped
                            .lock()
                            .push(String::from_utf8_lossy(&buf[..n]).into_owned());
                        // The server never sees it.
                        return;
                    }
                    {
                        let mut wanted = state.drop_reply_to.lock();
                        let text = String::from_utf8_lossy(&buf[..n]);
                        state.sent.lock().push_str(&text);
                        if wanted.as_deref().is_some_and(|w| text.contains(w)) {
                            *wanted = None;
                            connection.drop_next.store(true, Ordering::SeqCst);
                        }
                        // Stalled before the request goes on: its reply
                        // cannot come back before.
                        let mut from = state.stall_from.lock();
                        if from.as_deref().is_some_and(|w| text.contains(w)) {
                            *from = None;
                            state.stalled.send_replace(true);
                        }
                    }
                    if out_w.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let replies = async {
        let mut stall = state.stalled.subscribe();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match out_r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if stall.wait_for(|stalled| !stalled).await.is_err() {
                        return;
                    }
                    let delay = state.delay_next.lock().take();
                    let delay = delay.or_else(|| connection.delay_next.lock().take());
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    if state.drop_reply.swap(false, Ordering::SeqCst)
                        || connection.drop_next.swap(false, Ordering::SeqCst)
                    {
                        state
                            .dropped
                            .lock()
                            .push(String::from_utf8_lossy(&buf[..n]).into_owned());
                        // The server has executed the request; the client never hears.
                        return;
                    }
                    if in_w.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    // Whichever direction ends first closes the connection.
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
    }
}

/// Runs one lock and unlock on `client`, and waits until the unlock's latch
/// is deleted, so that Redis has the scripts cached and no reply of this
/// client is still on its way: the next request the client sends is the
/// caller's. Turns keyspace events on to see the deletion.
pub async fn warm_up(server: &RedisServer, client: &RedissonClient) {
    let raw = server.raw().await;
    let _: Value = raw
        .custom(
            fred::types::CustomCommand::new_static(
                "CONFIG",
                fred::types::ClusterHash::Random,
                false,
            ),
            vec!["SET", "notify-keyspace-events", "Eg"],
        )
        .await
        .unwrap();
    let mut deletions = Observer::new(server, &["__keyevent@0__:del"], &[]).await;
    let warm = client.lock("warm-up").unwrap();
    warm.lock().await.unwrap().unlock().await.unwrap();
    deletions
        .until(|(_, key)| key.starts_with("redisson_unlock_latch:{warm-up}:"))
        .await;
    // The DEL's reply comes back before this one on the same connection.
    client
        .command(None, "PING", Vec::<&str>::new())
        .await
        .unwrap();
}

/// The watchdog cycles `client` has completed so far (see
/// `renewal_after_reconnect`).
pub fn watchdog_cycles(client: &RedissonClient) -> u64 {
    client.watchdog_updates().borrow().cycles
}

/// Waits for the watchdog cycle after `cycles` to end. The proxy closes a
/// connection whose reply it drops, and the client's reconnect brings the
/// renewal of every watchdog hold forward (to within half a second): until
/// that renewal's reply is in, it may be the next request on the
/// connection, and a reply the test drops next could be its, not the test's.
pub async fn renewal_after_reconnect(client: &RedissonClient, cycles: u64) {
    let mut updates = client.watchdog_updates();
    within(
        "the renewal a reconnect brings forward",
        updates.wait_for(|s| s.cycles > cycles),
    )
    .await
    .unwrap();
}

/// Waits until every unlock latch is deleted (they are deleted fire and
/// forget, in batches) and the deletion's reply has reached `client`, so
/// that the next reply `client` gets is for its next request.
pub async fn latches_settled(server: &RedisServer, client: &RedissonClient) {
    let raw = server.raw().await;
    topology::until("unlock latches deleted", || async {
        let latches: Vec<String> = raw
            .custom(
                fred::types::CustomCommand::new_static(
                    "KEYS",
                    fred::types::ClusterHash::Random,
                    false,
                ),
                vec!["redisson_unlock_latch:*"],
            )
            .await
            .unwrap();
        latches.is_empty()
    })
    .await;
    // The DEL's reply comes back before this one on the same connection.
    client
        .command(None, "PING", Vec::<&str>::new())
        .await
        .unwrap();
}

/// INFO commandstats calls of one command (lowercase name), 0 if never called.
pub async fn command_calls(raw: &Client, command: &str) -> u64 {
    let info: String = raw
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Subscribers of a classic pub/sub channel (`PUBSUB NUMSUB`).
pub async fn numsub(raw: &Client, channel: &str) -> i64 {
    let reply: Vec<Value> = raw
        .custom(
            fred::types::CustomCommand::new_static(
                "PUBSUB",
                fred::types::ClusterHash::Random,
                false,
            ),
            vec!["NUMSUB", channel],
        )
        .await
        .unwrap();
    reply[1].as_i64().unwrap()
}

/// Waits until the channel has `n` subscribers. Redis has no event for this,
/// so it re-reads the count.
pub async fn await_subscribers(server: &RedisServer, channel: &str, n: i64) {
    let raw = server.raw().await;
    within("subscriber count", async {
        while numsub(&raw, channel).await != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// `tasks` tasks spread over `clients`, each running `sections` critical
/// sections on lock `name` and asserting that nobody else is inside. A
/// failed `lock()` (Redis unreachable during a failover) is retried after a
/// pause. Returns the count of finished sections as it grows, and the tasks,
/// each yielding how many `lock()` calls failed.
pub fn contenders(
    clients: &[RedissonClient],
    name: &str,
    tasks: usize,
    sections: u32,
) -> (
    tokio::sync::watch::Receiver<u32>,
    Vec<tokio::task::JoinHandle<u32>>,
) {
    use std::sync::atomic::AtomicU32;
    let inside = Arc::new(AtomicU32::new(0));
    let done = tokio::sync::watch::Sender::new(0u32);
    let progress = done.subscribe();
    let handles = (0..tasks)
        .map(|t| {
            let lock = clients[t % clients.len()].lock(name).unwrap();
            let (inside, done) = (inside.clone(), done.clone());
            tokio::spawn(async move {
                let (mut finished, mut errors) = (0, 0);
                while finished < sections {
                    match lock.lock().await {
                        Ok(guard) => {
                            assert_eq!(
                                inside.fetch_add(1, Ordering::SeqCst),
                                0,
                                "two holders at once"
                            );
                            for _ in 0..10 {
                                tokio::task::yield_now().await;
                            }
                            inside.fetch_sub(1, Ordering::SeqCst);
                            // During an outage the release may fail; the lease
                            // then expires and a waiter takes over.
                            let _ = guard.unlock().await;
                            finished += 1;
                            done.send_modify(|n| *n += 1);
                        }
                        Err(_) => {
                            errors += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                errors
            })
        })
        .collect();
    (progress, handles)
}

/// The Rust half of `contend`: the same non-atomic read-modify-write the JVM
/// peer does, inside the lock, with an INCR-based overlap detector.
pub async fn contend(
    client: &RedissonClient,
    rounds: usize,
    overlaps: &std::sync::atomic::AtomicUsize,
) {
    let lock = client.lock("counted").unwrap();
    let redis = fred_of(client).await;
    for _ in 0..rounds {
        let guard = lock.lock().await.unwrap();
        counted_section(&redis, overlaps).await;
        guard.unlock().await.unwrap();
    }
}

/// One contended critical section, as the JVM peer's `contend` commands run
/// it: a deliberately non-atomic increment of `counter`, with `inside`
/// counting who else is in (an overlap when it is not 1).
pub async fn counted_section(redis: &Client, overlaps: &std::sync::atomic::AtomicUsize) {
    let inside: i64 = redis.incr("inside").await.unwrap();
    if inside != 1 {
        overlaps.fetch_add(1, Ordering::SeqCst);
    }
    let value: Option<i64> = redis.get("counter").await.unwrap();
    let _: () = redis
        .set("counter", value.unwrap_or(0) + 1, None, None, false)
        .await
        .unwrap();
    let _: i64 = redis.decr("inside").await.unwrap();
}

/// The read-only operator rule of docs/acl.md and docs/operations.md (`ls`,
/// `inspect`, `status`, `top`, `watch`; password `operator-pw`), keys read
/// only everywhere (`%R~*`, Redis 7 on).
pub const OPERATOR_ACL_RULE: &str = "on >operator-pw resetkeys %R~* resetchannels &* -@all +scan +type +exists +get +hget +hgetall +pttl +llen +lrange +zcard +zcount +zrange +zscore +pubsub|numsub +pubsub|shardnumsub +subscribe +unsubscribe +psubscribe +punsubscribe +getrange +hscan +ping";

/// The ACL rule of docs/acl.md for locks named `app:*` (user on, password
/// `locker-pw`): what `tests/acl.rs` proves enough, and the audit checks.
pub const LOCK_ACL_RULE: &[&str] = &[
    "on",
    ">locker-pw",
    "resetkeys",
    "~app:*",
    "~redisson_unlock_latch:*",
    "~redisson_lock__channel:*",
    "~redisson_lock__client:*",
    "resetchannels",
    "&redisson_lock__channel:*",
    "-@all",
    "+evalsha",
    "+eval",
    "+exists",
    "+hexists",
    "+hget",
    "+hgetall",
    "+hset",
    "+hincrby",
    "+pexpire",
    "+pttl",
    "+get",
    "+set",
    "+del",
    "+type",
    "+publish",
    "+subscribe",
    "+unsubscribe",
    "+ping",
];
