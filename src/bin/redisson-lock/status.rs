//! `status` and `force-unlock`.

use fred::interfaces::KeysInterface;
use redisson_lock::{Error, Ttl};
use serde::Serialize;

use crate::{connect, Cli};

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Lock name.
    name: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct ForceUnlockArgs {
    /// Lock name.
    name: String,
}

#[derive(Serialize)]
struct Status {
    name: String,
    /// "lock", "absent", or "other".
    kind: &'static str,
    /// The Redis type of the key.
    redis_type: String,
    holders: Vec<redisson_lock::Holder>,
    /// Remaining TTL in ms; null when absent or without TTL.
    ttl_ms: Option<u64>,
}

pub async fn status(cli: &Cli, args: &StatusArgs) -> Result<u8, String> {
    let client = connect(cli).await?;
    let lock = client.lock(&args.name).map_err(|e| e.to_string())?;
    let redis_type: String = client
        .redis()
        .r#type(&args.name)
        .await
        .map_err(|e| e.to_string())?;
    let mut status = Status {
        name: args.name.clone(),
        kind: match redis_type.as_str() {
            "none" => "absent",
            "hash" => "lock",
            _ => "other",
        },
        redis_type,
        holders: vec![],
        ttl_ms: None,
    };
    if status.kind == "lock" {
        status.holders = lock.holders().await.map_err(|e| e.to_string())?;
        if let Ttl::Expires(ttl) = lock.remaining_ttl().await.map_err(|e| e.to_string())? {
            status.ttl_ms = Some(ttl.as_millis() as u64);
        }
    }
    client.shutdown().await;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&status).map_err(|e| e.to_string())?
        );
        return Ok(0);
    }
    match status.kind {
        "absent" => println!("{}: free (no such key)", status.name),
        "other" => println!(
            "{}: not a lock: the key holds a {}",
            status.name, status.redis_type
        ),
        _ => {
            let ttl = status.ttl_ms.map_or("no TTL".to_string(), |ms| {
                format!(
                    "expires in {}",
                    humantime::format_duration(std::time::Duration::from_millis(ms))
                )
            });
            println!("{}: held, {ttl}", status.name);
            for h in &status.holders {
                println!(
                    "  client {} owner {} hold count {}",
                    h.client_id, h.owner, h.hold_count
                );
            }
        }
    }
    Ok(0)
}

pub async fn force_unlock(cli: &Cli, args: &ForceUnlockArgs) -> Result<u8, String> {
    let client = connect(cli).await?;
    let lock = client.lock(&args.name).map_err(|e| e.to_string())?;
    let outcome = lock.force_unlock().await;
    client.shutdown().await;
    match outcome {
        Ok(true) => println!("{}: lock removed; waiters notified", args.name),
        Ok(false) => println!("{}: no lock to remove", args.name),
        Err(e @ Error::WrongType { .. }) => return Err(e.to_string()),
        Err(e) => return Err(e.to_string()),
    }
    Ok(0)
}
