//! Running the `redisson-lock` binary from the CLI tests, and `top` in tmux.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::within;

/// The binary, talking to `url`, with its output captured.
pub fn cli(url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redisson-lock"));
    cmd.env("REDIS_URL", url)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub async fn output(mut cmd: Command) -> Output {
    let out = within("CLI exit", cmd.output()).await.unwrap();
    let o = Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    o
}

/// Runs the CLI with `args` and returns its output.
pub async fn run(url: &str, args: &[&str]) -> Output {
    let mut cmd = cli(url);
    cmd.args(args);
    output(cmd).await
}

/// Runs the CLI with `args` plus `--json`; it must succeed, and say its
/// schema.
pub async fn json(url: &str, args: &[&str]) -> serde_json::Value {
    let out = run(url, &[args, &["--json"]].concat()).await;
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    let document: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    assert_eq!(document["schema"], 1, "{args:?}: {document}");
    document
}

/// The `ls --json` entry of `name`.
pub fn entry<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {list}"))
}

/// Starts `run` with `args`; the shell `script` runs under it and must print
/// `ready` first. Returns the child and the rest of its output lines.
pub async fn start_run(
    url: &str,
    args: &[&str],
    script: &str,
) -> (
    Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let mut cmd = cli(url);
    cmd.arg("run")
        .args(args)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = within("command started", lines.next_line()).await.unwrap();
    assert_eq!(first.as_deref(), Some("ready"));
    (child, lines)
}

/// Lets a started run's command finish (it reads one line of stdin).
pub async fn finish(child: &mut Child) -> i32 {
    use tokio::io::AsyncWriteExt;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"go\n")
        .await
        .unwrap();
    within("run exits", child.wait())
        .await
        .unwrap()
        .code()
        .unwrap_or(-1)
}

/// A tmux server of this test's own, killed on drop.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn command(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux is needed for the `top` test (Debian package tmux; .ci/run installs it)")
    }

    /// Starts `command` in a detached 160x40 session.
    pub fn start(command: &str) -> Tmux {
        Self::start_sized(command, 160, 40)
    }

    /// Starts `command` in a detached session of `width` x `height` cells.
    pub fn start_sized(command: &str, width: u16, height: u16) -> Tmux {
        let (width, height) = (width.to_string(), height.to_string());
        let tmux = Tmux {
            socket: format!(
                "redisson-top-{}-{:x}",
                std::process::id(),
                rand::random::<u32>()
            ),
        };
        let out = tmux.command(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &width,
            "-y",
            &height,
            command,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.command(&["capture-pane", "-p", "-t", "top"]).stdout)
            .into_owned()
    }

    pub fn keys(&self, keys: &str) {
        assert!(self
            .command(&["send-keys", "-t", "top", keys])
            .status
            .success());
    }

    /// Waits until the screen shows what `check` looks for; returns it.
    pub async fn until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        within(what, async {
            loop {
                let screen = self.screen();
                if check(&screen) {
                    return screen;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command(&["kill-server"]);
    }
}

/// The screen line of the object `name`, split into its cells.
pub fn row<'a>(screen: &'a str, name: &str) -> Option<(usize, Vec<&'a str>)> {
    screen
        .lines()
        .enumerate()
        .find(|(_, l)| l.split_whitespace().next() == Some(name))
        .map(|(i, l)| (i, l.split_whitespace().collect()))
}

/// `redisson-lock top` running in a tmux session of its own.
pub struct Top {
    pub tmux: Tmux,
    exit_file: std::path::PathBuf,
    _dir: crate::common::topology::Scratch,
}

impl Top {
    /// Starts `top ARGS` against `url` in a `width` x `height` terminal.
    pub fn start(url: &str, args: &[&str], width: u16, height: u16) -> Top {
        let dir = crate::common::topology::Scratch::new("top");
        let exit_file = dir.0.join("exit");
        let args: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let tmux = Tmux::start_sized(
            &format!(
                "env REDIS_URL='{url}' {} top {}; echo $? > {}",
                env!("CARGO_BIN_EXE_redisson-lock"),
                args.join(" "),
                exit_file.display()
            ),
            width,
            height,
        );
        Top {
            tmux,
            exit_file,
            _dir: dir,
        }
    }

    /// Presses `q` and returns top's exit code, once it has exited.
    pub async fn quit(self) -> String {
        self.tmux.keys("q");
        // The shell writes the file as the command ends; read it once complete.
        within("top exits", async {
            loop {
                let text = std::fs::read_to_string(&self.exit_file).unwrap_or_default();
                if text.ends_with('\n') {
                    return text.trim().to_string();
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }
}
