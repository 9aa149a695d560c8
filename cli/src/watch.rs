//! `watch`: print a lock's channel messages as they arrive.

use std::time::SystemTime;

use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::config::ReconnectPolicy;
use fred::types::Builder;
use tokio::signal::unix::{signal, SignalKind};

use crate::{connect_read_only, settings, Cli};

#[derive(clap::Args)]
pub struct Args {
    /// The object's name.
    name: String,
    /// What it is, so its own channel is watched. `auto` reads its keys; an
    /// integer string that may be a semaphore or a latch is watched on both
    /// channels. A fair lock's waiters each listen on a channel of their
    /// own, not watched here.
    #[arg(long, value_enum, default_value = "auto")]
    kind: Kind,
    /// Print one JSON object per message (`time`, `channel`, `message`, `meaning`).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Kind {
    Auto,
    Lock,
    ReadWrite,
    Semaphore,
    Latch,
}

/// What a message on one of the watched channels means.
#[derive(Clone, Copy)]
enum Meaning {
    Lock,
    ReadWrite,
    Semaphore,
    Latch,
}

impl Meaning {
    fn of(self, payload: &str) -> String {
        match (self, payload) {
            (Meaning::Lock | Meaning::ReadWrite, "0") => {
                "unlocked: one waiter per client wakes".into()
            }
            (Meaning::Lock | Meaning::ReadWrite, "1") => "wake all waiters".into(),
            // The count is the permits available after the release (after
            // a release of several expirable permits at once: how many).
            (Meaning::Semaphore, n) if n.parse::<i64>().is_ok() => {
                format!("permits released: {n} available, waiters try again")
            }
            (Meaning::Latch, "0") => "the count reached zero: the latch is open".into(),
            (Meaning::Latch, "1") => "a new count was set: the latch is closed".into(),
            _ => "unknown message".into(),
        }
    }
}

pub async fn watch(cli: &Cli, args: &Args) -> Result<u8, String> {
    // The client tells the object's kind, its channels and the pub/sub
    // flavour.
    let client = connect_read_only(cli).await?;
    let channels = channels(&client, args).await;
    let sharded = client.sharded_pubsub();
    client.shutdown().await;
    let channels = channels?;

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
    for (channel, _) in &channels {
        if sharded {
            subscriber.ssubscribe(channel).await
        } else {
            subscriber.subscribe(channel).await
        }
        .map_err(|e| e.to_string())?;
    }
    let names: Vec<&str> = channels.iter().map(|(c, _)| c.as_str()).collect();
    eprintln!("watching {} (Ctrl-C to stop)", names.join(" and "));
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            message = messages.recv() => match message {
                Ok(m) => {
                    let payload = m.value.as_string().unwrap_or_default();
                    let meaning = channels
                        .iter()
                        .find(|(c, _)| *c == *m.channel)
                        .map_or_else(|| "unknown message".to_string(), |(_, kind)| kind.of(&payload));
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

/// The channels of the object `args` names, each with how to read its
/// messages.
async fn channels(
    client: &redisson_lock::RedissonClient,
    args: &Args,
) -> Result<Vec<(String, Meaning)>, String> {
    use redisson_lock::inspect::ObjectKind;
    let text = |e: redisson_lock::Error| e.to_string();
    let name = &args.name;
    let kind = match args.kind {
        Kind::Auto => match client.inspect(name).await.map_err(text)?.kind() {
            ObjectKind::ReadWriteLock => vec![Kind::ReadWrite],
            ObjectKind::Semaphore | ObjectKind::ExpirableSemaphore => vec![Kind::Semaphore],
            ObjectKind::CountDownLatch => vec![Kind::Latch],
            ObjectKind::Counter => vec![Kind::Semaphore, Kind::Latch],
            _ => vec![Kind::Lock],
        },
        kind => vec![kind],
    };
    kind.into_iter()
        .map(|kind| {
            Ok(match kind {
                Kind::ReadWrite => (
                    client.read_write_lock(name).map_err(text)?.channel(),
                    Meaning::ReadWrite,
                ),
                Kind::Semaphore => (
                    client.semaphore(name).map_err(text)?.channel(),
                    Meaning::Semaphore,
                ),
                Kind::Latch => (
                    client.count_down_latch(name).map_err(text)?.channel(),
                    Meaning::Latch,
                ),
                Kind::Auto | Kind::Lock => {
                    (client.lock(name).map_err(text)?.channel(), Meaning::Lock)
                }
            })
        })
        .collect()
}
