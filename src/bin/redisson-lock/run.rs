//! `run`: hold a lock for the lifetime of a child process.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;
use tokio::signal::unix::{signal, SignalKind};

use crate::{connect, parse_duration, parse_wait, Cli, EXIT_LOST, EXIT_NOT_ACQUIRED};

#[derive(clap::Args)]
pub struct Args {
    /// Lock name.
    name: String,
    /// Give up (exit 75) if the lock is not acquired within this long (0s: one
    /// attempt). Default: wait as long as it takes.
    #[arg(long, value_parser = parse_wait)]
    wait: Option<Duration>,
    /// Hold for this lease instead of renewing with the watchdog (the lock then expires after it).
    #[arg(long, value_parser = parse_duration)]
    lease: Option<Duration>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

pub async fn run(cli: &Cli, args: &Args) -> Result<u8, String> {
    let client = connect(cli).await?;
    let lock = client.lock(&args.name).map_err(|e| e.to_string())?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;

    let acquire = async {
        match (args.wait, args.lease) {
            (None, None) => lock.lock().await.map(Some),
            (None, Some(lease)) => lock.lock_with_lease(lease).await.map(Some),
            (Some(wait), None) => lock.try_lock_for(wait).await,
            (Some(wait), Some(lease)) => lock.try_lock_for_with_lease(wait, lease).await,
        }
    };
    let guard = tokio::select! {
        acquired = acquire => acquired.map_err(|e| e.to_string())?,
        // Dropping the acquire releases anything it took.
        _ = interrupt.recv() => { client.shutdown().await; return Ok(130) }
        _ = terminate.recv() => { client.shutdown().await; return Ok(143) }
    };
    let Some(guard) = guard else {
        eprintln!(
            "redisson-lock: `{}` not acquired within {}",
            args.name,
            humantime::format_duration(args.wait.unwrap_or_default())
        );
        client.shutdown().await;
        return Ok(EXIT_NOT_ACQUIRED);
    };

    let mut child = Command::new(&args.command[0])
        .args(&args.command[1..])
        .stdin(Stdio::inherit())
        .kill_on_drop(false)
        .spawn()
        .map_err(|e| format!("cannot run `{}`: {e}", args.command[0]))?;
    let pid = child.id().map(|p| p as i32);
    let lost = guard.lost_signal();
    let mut lost_it = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(|e| e.to_string())?,
            _ = lost.lost(), if !lost_it => {
                lost_it = true;
                eprintln!("redisson-lock: lock `{}` was lost; stopping the command", args.name);
                send_signal(pid, libc::SIGTERM);
            }
            _ = interrupt.recv() => send_signal(pid, libc::SIGINT),
            _ = terminate.recv() => send_signal(pid, libc::SIGTERM),
        }
    };
    if !lost_it {
        if let Err(e) = guard.unlock().await {
            eprintln!("redisson-lock: releasing `{}`: {e}", args.name);
        }
    } else {
        drop(guard);
    }
    client.shutdown().await;
    if lost_it {
        return Ok(EXIT_LOST);
    }
    Ok(exit_code(status))
}

fn send_signal(pid: Option<i32>, signal: i32) {
    if let Some(pid) = pid {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// The child's exit status as ours; a signal death is 128 + signal, as in a shell.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
        _ => 1,
    }
}
