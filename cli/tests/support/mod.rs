//! Running the `redisson-lock` binary from the CLI tests.
#![allow(dead_code)]

use std::process::Stdio;

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

/// Runs the CLI with `args` plus `--json`; it must succeed.
pub async fn json(url: &str, args: &[&str]) -> serde_json::Value {
    let out = run(url, &[args, &["--json"]].concat()).await;
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// The `ls --json` entry of `name`.
pub fn entry<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list.as_array()
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
