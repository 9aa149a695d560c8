//! The redis-server the benchmarks share (started here unless REDIS_URL is set).

use std::process::Stdio;

use fred::prelude::*;
use tokio::io::{AsyncBufReadExt, BufReader};

pub struct Server {
    pub url: String,
    _child: Option<tokio::process::Child>,
}

impl Server {
    /// The redis-server process this harness started (none with `REDIS_URL`).
    pub fn pid(&self) -> Option<u32> {
        self._child.as_ref().and_then(|c| c.id())
    }
}

impl Server {
    pub async fn start() -> Server {
        if let Ok(url) = std::env::var("REDIS_URL") {
            return Server { url, _child: None };
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = spawn_redis(port, &[]).await;
        Server {
            url: format!("redis://127.0.0.1:{port}"),
            _child: Some(child),
        }
    }

    /// The JVM Redisson peer (tests/interop/java), connected to this server,
    /// with stdin and stdout piped. The JVM's own warnings go to stderr.
    pub fn jvm_peer(&self) -> tokio::process::Child {
        jvm_peer(&self.url, false)
    }

    pub async fn raw(&self) -> Client {
        let client = Builder::from_config(Config::from_url(&self.url).unwrap())
            .build()
            .unwrap();
        client.init().await.unwrap();
        client
    }

    pub async fn info_field(&self, section: fred::types::InfoKind, field: &str) -> String {
        let info: String = self.raw().await.info(Some(section)).await.unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// Empties the server, so that keys one run leaves behind (the floor's
    /// unlock latches, expiring over 16 s) cost the next run nothing.
    pub async fn flush(&self) {
        let _: Value = self
            .raw()
            .await
            .custom(
                fred::types::CustomCommand::new_static(
                    "FLUSHALL",
                    fred::types::ClusterHash::Random,
                    false,
                ),
                Vec::<Value>::new(),
            )
            .await
            .unwrap();
    }

    pub async fn version(&self) -> String {
        self.info_field(fred::types::InfoKind::Server, "redis_version")
            .await
    }

    /// used_cpu_user + used_cpu_sys, in seconds.
    pub async fn cpu_seconds(&self) -> f64 {
        let user: f64 = self
            .info_field(fred::types::InfoKind::Cpu, "used_cpu_user")
            .await
            .parse()
            .unwrap();
        let sys: f64 = self
            .info_field(fred::types::InfoKind::Cpu, "used_cpu_sys")
            .await
            .parse()
            .unwrap();
        user + sys
    }
}

/// The JVM Redisson peer (tests/interop/java) on `url` (a comma-separated
/// node list with `cluster`), with stdin and stdout piped. The JVM's own
/// warnings go to stderr.
pub fn jvm_peer(url: &str, cluster: bool) -> tokio::process::Child {
    let jar = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/interop/java/target/interop-peer-4.7.0.jar"
    );
    let mut cmd = tokio::process::Command::new("java");
    cmd.args([
        "-XX:-UsePerfData",
        "-Xlog:all=warning:stderr",
        "-jar",
        jar,
        "--url",
        url,
    ]);
    if cluster {
        cmd.arg("--cluster");
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("java and the interop peer jar (bash .ci/run builds it) are needed")
}

/// A redis-server on `port` without persistence, plus `extra` flags; returns
/// once it accepts connections. Killed when the handle is dropped.
///
/// It runs in a session of its own, as a service would: Linux's autogroup
/// scheduler then gives it its own share of the CPU, instead of counting it
/// as one more thread of this process, whose worker threads it would
/// otherwise compete with (docs/benchmarks.md). Out of the terminal's
/// session, a Ctrl-C no longer reaches it, so it also asks to be killed when
/// the thread that started it ends (a runtime worker, which lives as long as
/// this process's runtime).
pub async fn spawn_redis(port: u16, extra: &[&std::ffi::OsStr]) -> tokio::process::Child {
    spawn_node(port, None, extra).await
}

/// As [`spawn_redis`], with a config file first on the command line (a
/// sentinel's, which it rewrites). The binary is `REDIS_SERVER`, else
/// `redis-server` on PATH; a sentinel is ready once it monitors its primary
/// (it never says "Ready").
pub async fn spawn_node(
    port: u16,
    config_file: Option<&std::path::Path>,
    extra: &[&std::ffi::OsStr],
) -> tokio::process::Child {
    let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let mut command = tokio::process::Command::new(&binary);
    if let Some(file) = config_file {
        command.arg(file);
    }
    command
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: between fork and exec the closure makes two system calls, both
    // async-signal-safe, and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {binary} (install redis-server): {e}"));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ready = false;
    while let Some(line) = lines.next_line().await.unwrap() {
        if line.contains("Ready to accept connections") || line.contains("+monitor master") {
            ready = true;
            break;
        }
    }
    assert!(
        ready,
        "redis-server on port {port} exited before it was ready"
    );
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}
