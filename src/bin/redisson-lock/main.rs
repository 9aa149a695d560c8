//! `redisson-lock`: inspect and use Redisson locks from a shell.

mod run;
mod status;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redisson_lock::{Config, RedissonClient};

/// Exit status when the lock was not acquired within --wait (EX_TEMPFAIL).
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when the lock was lost while the command ran.
pub const EXIT_LOST: u8 = 76;

#[derive(Parser)]
#[command(
    name = "redisson-lock",
    version,
    about = "Inspect and use Redisson-compatible Redis locks"
)]
struct Cli {
    /// Redis URL (TLS and credentials through the URL: rediss://user:pass@host:port).
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    url: String,
    /// Lease of watchdog-renewed locks; use the JVM fleet's lockWatchdogTimeout.
    #[arg(long, value_parser = parse_duration, default_value = "30s", global = true)]
    watchdog_timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command while holding the lock; release it when the command exits.
    Run(run::Args),
    /// Show who holds a lock and for how long.
    Status(status::StatusArgs),
    /// Delete a lock whoever holds it and wake its waiters (Redisson's forceUnlock).
    ForceUnlock(status::ForceUnlockArgs),
    /// Print every message on a lock's channel as it arrives.
    Watch(watch::Args),
}

/// Parses a wait such as `0s` (one attempt), `3s`, `250ms`.
pub fn parse_wait(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("`{text}`: {e}"))
}

/// Parses `3s`, `250ms`, `1m 30s`; refuses zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| format!("`{text}`: {e}"))?;
    if d.as_millis() == 0 {
        return Err(format!("`{text}`: must be at least 1ms"));
    }
    Ok(d)
}

async fn connect(cli: &Cli) -> redisson_lock::Result<RedissonClient> {
    let mut config = Config::from_url(&cli.url);
    config.lock_watchdog_timeout = cli.watchdog_timeout;
    RedissonClient::connect(config).await
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redisson-lock: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match &cli.command {
            Command::Run(args) => run::run(&cli, args).await,
            Command::Status(args) => status::status(&cli, args).await,
            Command::ForceUnlock(args) => status::force_unlock(&cli, args).await,
            Command::Watch(args) => watch::watch(&cli, args).await,
        }
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("redisson-lock: {message}");
            ExitCode::FAILURE
        }
    }
}
