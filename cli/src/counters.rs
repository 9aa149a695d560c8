//! `latch set|count-down|wait` and `semaphore set-permits|add-permits`.

use std::time::Duration;

use crate::{connect, parse_wait, Cli, EXIT_NOT_ACQUIRED};

#[derive(clap::Subcommand)]
pub enum Latch {
    /// Set a count-down latch's count (Redisson's trySetCount): only when it
    /// is not set; exit 1 when it already is.
    Set {
        /// Latch name.
        name: String,
        /// Count-downs before waiters go on.
        count: u64,
    },
    /// Count a latch down by one (Redisson's countDown); prints the count left.
    CountDown {
        /// Latch name.
        name: String,
    },
    /// Wait until a latch reaches zero (Redisson's await).
    Wait {
        /// Latch name.
        name: String,
        /// Give up after this long (`10` or `10s`, `250ms`): exit 75.
        #[arg(short, long, value_parser = parse_wait)]
        wait: Option<Duration>,
    },
}

#[derive(clap::Subcommand)]
pub enum Semaphore {
    /// Give a semaphore its permits: for a plain semaphore only when it has
    /// none set (trySetPermits; exit 1 when it has); for an expirable one
    /// the total, leased permits included (setPermits).
    SetPermits {
        /// Semaphore name.
        name: String,
        /// Permits.
        permits: u32,
        /// A permit-expirable semaphore (`getPermitExpirableSemaphore`).
        #[arg(long)]
        expirable: bool,
    },
    /// Add permits (negative: take them away); prints the permits available.
    AddPermits {
        /// Semaphore name.
        name: String,
        /// Permits to add, e.g. 3 or -2.
        #[arg(allow_hyphen_values = true)]
        permits: i32,
        /// A permit-expirable semaphore.
        #[arg(long)]
        expirable: bool,
    },
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub async fn latch(cli: &Cli, command: &Latch) -> Result<u8, String> {
    let client = connect(cli).await?;
    let outcome = async {
        match command {
            Latch::Set { name, count } => {
                let latch = client.count_down_latch(name).map_err(text)?;
                if latch.try_set_count(*count).await.map_err(text)? {
                    println!("{name}: count set to {count}");
                    Ok(0)
                } else {
                    let now = latch.count().await.map_err(text)?;
                    eprintln!(
                        "redisson-lock: latch `{name}` is already set (count {now}); wait for \
                         it to reach 0 or delete its key before setting it again"
                    );
                    Ok(1)
                }
            }
            Latch::CountDown { name } => {
                let latch = client.count_down_latch(name).map_err(text)?;
                let left = latch.count_down().await.map_err(text)?;
                println!("{name}: count {left}");
                Ok(0)
            }
            Latch::Wait { name, wait } => {
                let latch = client.count_down_latch(name).map_err(text)?;
                let opened = match wait {
                    Some(wait) => latch.wait_for(*wait).await.map_err(text)?,
                    None => latch.wait().await.map(|()| true).map_err(text)?,
                };
                if opened {
                    println!("{name}: open");
                    Ok(0)
                } else {
                    eprintln!(
                        "redisson-lock: latch `{name}` still closed after {}",
                        humantime::format_duration(wait.unwrap_or_default())
                    );
                    Ok(EXIT_NOT_ACQUIRED)
                }
            }
        }
    }
    .await;
    client.shutdown().await;
    outcome
}

pub async fn semaphore(cli: &Cli, command: &Semaphore) -> Result<u8, String> {
    let client = connect(cli).await?;
    let outcome = async {
        match command {
            Semaphore::SetPermits {
                name,
                permits,
                expirable: false,
            } => {
                let semaphore = client.semaphore(name).map_err(text)?;
                if semaphore.try_set_permits(*permits).await.map_err(text)? {
                    println!("{name}: {permits} permits");
                    Ok(0)
                } else {
                    let now = semaphore.available_permits().await.map_err(text)?;
                    eprintln!(
                        "redisson-lock: semaphore `{name}` already has its permits set ({now} \
                         available); change them with `redisson-lock semaphore add-permits \
                         {name} N`"
                    );
                    Ok(1)
                }
            }
            Semaphore::SetPermits {
                name,
                permits,
                expirable: true,
            } => {
                let semaphore = client.permit_expirable_semaphore(name).map_err(text)?;
                semaphore.set_permits(*permits).await.map_err(text)?;
                let available = semaphore.available_permits().await.map_err(text)?;
                println!("{name}: {permits} permits, {available} available");
                Ok(0)
            }
            Semaphore::AddPermits {
                name,
                permits,
                expirable,
            } => {
                let available = if *expirable {
                    let semaphore = client.permit_expirable_semaphore(name).map_err(text)?;
                    semaphore.add_permits(*permits).await.map_err(text)?
                } else {
                    let semaphore = client.semaphore(name).map_err(text)?;
                    semaphore.add_permits(*permits).await.map_err(text)?
                };
                println!("{name}: {available} permits available");
                Ok(0)
            }
        }
    }
    .await;
    client.shutdown().await;
    outcome
}
