//! `watch`: print a lock's channel messages as they arrive.

use std::time::SystemTime;

use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::config::ReconnectPolicy;
use fred::types::Builder;
use tokio::signal::unix::{signal, SignalKind};

use crate::{connect_read_only, settings, Cli};

#[derive(clap::Args)]
pub struct Args {
    /// Lock name.
    name: String,
    /// Print one JSON object per message (`time`, `channel`, `message`, `meaning`).
    #[arg(long)]
    json: bool,
}

pub async fn watch(cli: &Cli, args: &Args) -> Result<u8, String> {
    // The lock client tells the channel name and the pub/sub flavour.
    let client = connect_read_only(cli).await?;
    let lock = client.lock(&args.name).map_err(|e| e.to_string())?;
    let channel = lock.channel().to_string();
    let sharded = client.sharded_pubsub();
    client.shutdown().await;

    let config = settings(cli)?.__fred_config().map_err(|e| e.to_string())?;
    let subscriber = Builder::from_config(config)
        .with_performance_config(|p| p.broadcast_channel_capacity = 4096)
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
        .build_subscriber_client()
        .map_err(|e| e.to_string())?;
    subscriber.init().await.map_err(|e| e.to_string())?;
    // Resubscribe after a reconnect.
    let _resubscriber = subscriber.manage_subscriptions();
    let mut messages = subscriber.message_rx();
    if sharded {
        subscriber.ssubscribe(&channel).await
    } else {
        subscriber.subscribe(&channel).await
    }
    .map_err(|e| e.to_string())?;
    eprintln!("watching {channel} (Ctrl-C to stop)");
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            message = messages.recv() => match message {
                Ok(m) => {
                    let payload = m.value.as_string().unwrap_or_default();
                    let meaning = match payload.as_str() {
                        "0" => "unlocked: one waiter per client wakes",
                        "1" => "wake all waiters",
                        _ => "unknown message",
                    };
                    let time = humantime::format_rfc3339_millis(SystemTime::now());
                    if args.json {
                        let line = serde_json::json!({
                            "time": time.to_string(),
                            "channel": m.channel.to_string(),
                            "message": payload,
                            "meaning": meaning,
                        });
                        println!("{line}");
                    } else {
                        println!("{time} {} {payload} ({meaning})", m.channel);
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    eprintln!("redisson-lock: {n} messages dropped (too slow)");
                }
                Err(_) => return Err("connection closed".into()),
            },
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
        }
    }
    let _ = subscriber.quit().await;
    Ok(0)
}
