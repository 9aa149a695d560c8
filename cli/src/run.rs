//! `run`: hold a lock for the lifetime of a child process, through the
//! library's `Lock::run` (acquire, run, always release; stop on loss).

use std::process::Stdio;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redisson_lock::Error;
use tokio::process::Command;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::broadcast;

use crate::{connect, parse_duration, parse_wait, Cli, EXIT_LOST, EXIT_NOT_ACQUIRED};

#[derive(clap::Args)]
pub struct Args {
    /// Lock name.
    name: String,
    /// Give up (exit 75, or --conflict-exit-code) if the lock is not acquired
    /// within this long (0s: one attempt). Default: wait as long as it takes.
    #[arg(long, value_parser = parse_wait)]
    wait: Option<Duration>,
    /// Exit status when the lock is not acquired within --wait (as flock's
    /// --conflict-exit-code).
    #[arg(long, value_name = "CODE", default_value_t = EXIT_NOT_ACQUIRED)]
    conflict_exit_code: u8,
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
    // One listener for SIGINT and SIGTERM: before the command runs they end
    // the wait; while it runs they are forwarded to it.
    let (signals, mut before_start) = broadcast::channel::<i32>(8);
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let listener = {
        let signals = signals.clone();
        tokio::spawn(async move {
            loop {
                let signal = tokio::select! {
                    _ = interrupt.recv() => libc::SIGINT,
                    _ = terminate.recv() => libc::SIGTERM,
                };
                let _ = signals.send(signal);
            }
        })
    };
    // The child's pid once it runs (0 before): the work future is dropped
    // when the lock is lost, and the child must still be stopped then.
    let pid = Arc::new(AtomicI32::new(0));
    let work = {
        let (pid, signals) = (pid.clone(), signals.clone());
        move |_lost| async move {
            let mut forwarded = signals.subscribe();
            let mut child = Command::new(&args.command[0])
                .args(&args.command[1..])
                .stdin(Stdio::inherit())
                .kill_on_drop(false)
                .spawn()
                .map_err(|e| format!("cannot run `{}`: {e}", args.command[0]))?;
            pid.store(child.id().map_or(0, |p| p as i32), Ordering::SeqCst);
            loop {
                tokio::select! {
                    status = child.wait() => return status.map_err(|e| e.to_string()),
                    Ok(signal) = forwarded.recv() => send_signal(pid.load(Ordering::SeqCst), signal),
                }
            }
        }
    };
    let acquire = lock.acquire();
    let acquire = match args.lease {
        Some(lease) => acquire.lease(lease),
        None => acquire,
    };
    let running = async {
        match args.wait {
            Some(wait) => acquire.wait(wait).run(work).await,
            None => acquire.run(work).await.map(Some),
        }
    };
    let outcome = tokio::select! {
        outcome = running => outcome,
        // A signal while still waiting for the lock (the child is not
        // started): stop waiting; dropping the acquire releases anything it took.
        Ok(signal) = async {
            loop {
                let signal = before_start.recv().await;
                if pid.load(Ordering::SeqCst) == 0 {
                    return signal;
                }
            }
        } => {
            listener.abort();
            client.shutdown().await;
            return Ok(128 + signal as u8);
        }
    };
    listener.abort();
    let code = match outcome {
        Ok(Some(status)) => Ok(exit_code(status?)),
        Ok(None) => {
            eprintln!(
                "redisson-lock: `{}` not acquired within {}",
                args.name,
                humantime::format_duration(args.wait.unwrap_or_default())
            );
            Ok(args.conflict_exit_code)
        }
        Err(Error::LockLost { .. }) => {
            eprintln!(
                "redisson-lock: lock `{}` was lost; stopping the command",
                args.name
            );
            stop_and_reap(pid.load(Ordering::SeqCst)).await;
            Ok(EXIT_LOST)
        }
        Err(e) => Err(e.to_string()),
    };
    client.shutdown().await;
    code
}

fn send_signal(pid: i32, signal: i32) {
    if pid > 0 {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// SIGTERM to the child whose handle was dropped with the work, then waits
/// for it to exit (it is still our child: waitpid reaps it).
async fn stop_and_reap(pid: i32) {
    if pid <= 0 {
        return;
    }
    send_signal(pid, libc::SIGTERM);
    let _ = tokio::task::spawn_blocking(move || {
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    })
    .await;
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
