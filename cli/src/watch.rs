//! `watch`: print an object's channel messages as they arrive, through the
//! library's `ChannelWatch` (a connection of its own that follows a
//! Sentinel failover and resubscribes after a reconnection).

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, SystemTime};

use redisson_lock::inspect::{ChannelWatch, Watched};
use tokio::signal::unix::{signal, SignalKind};

use crate::{connect_read_only, Cli};

#[derive(clap::Args)]
pub struct Args {
    /// The object's name.
    name: String,
    /// What it is, so its own channels are watched. `auto` reads its keys; an
    /// integer string that may be a semaphore or a latch is watched on both
    /// channels. A lock is also watched on its fair waiters' channels (each
    /// fair waiter listens on one of its own): by pattern with classic
    /// pub/sub; with sharded pub/sub, those of the waiters in line, read
    /// every second (`fair-lock`, or `auto` on a fair lock).
    #[arg(long, value_enum, default_value = "auto")]
    kind: Kind,
    /// Print one JSON object per message (`time`, `channel`, `message`,
    /// `meaning`) and per holder change (`time`, `event`: `acquired` or
    /// `released`, `holder`, `who`).
    #[arg(long)]
    json: bool,
}

/// The kinds, named as `inspect` and `ls` name them (the short names of
/// earlier versions are aliases).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Kind {
    Auto,
    Lock,
    #[value(alias = "fair")]
    FairLock,
    #[value(alias = "read-write")]
    ReadWriteLock,
    #[value(alias = "expirable-semaphore")]
    Semaphore,
    #[value(alias = "latch")]
    CountDownLatch,
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

/// A fair lock's waiters: each listens on `<lock channel>:<its field>`.
struct FairWaiters {
    lock: redisson_lock::RFairLock,
    /// `<lock channel>:`
    prefix: String,
    /// Sharded pub/sub: the waiters' channels subscribed so far.
    subscribed: HashSet<String>,
}

impl FairWaiters {
    fn meaning(&self, channel: &str, payload: &str) -> Option<String> {
        let field = channel.strip_prefix(&self.prefix)?;
        Some(match payload {
            "0" => format!("unlocked: {field}, first in line, is told"),
            _ => "unknown message".into(),
        })
    }

    /// Sharded pub/sub has no patterns: subscribe to the channel of each
    /// waiter in line now.
    async fn follow_queue(&mut self, watch: &ChannelWatch) -> Result<(), String> {
        let queue = self.lock.queue().await.map_err(|e| e.to_string())?;
        for field in queue {
            let channel = format!("{}{field}", self.prefix);
            if self.subscribed.insert(channel.clone()) {
                watch.subscribe(&channel).await.map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }
}

/// How often a lock's holders are read.
const HOLDER_READS: Duration = Duration::from_millis(250);

/// Who holds a lock, read after each message and four times a second: an
/// acquisition sends no message (only a release does), so who took it comes
/// from its holders, as `top` works it out.
struct Holders {
    /// The lock (a plain or fair lock: the holders are its hash's fields).
    lock: Option<redisson_lock::RLock>,
    /// A read-write lock: read by mode.
    rw: Option<redisson_lock::RReadWriteLock>,
    /// `client-id:owner` of each holder last read.
    seen: BTreeSet<String>,
    /// Read once: holders found then are `held`, not `acquired`.
    primed: bool,
    clients: crate::ls::Clients,
    /// Clients whose registry entry could not be read.
    unknown: BTreeSet<String>,
}

impl Holders {
    /// Reads the holders now and prints who appeared and who went.
    async fn read(
        &mut self,
        client: &redisson_lock::RedissonClient,
        json: bool,
    ) -> Result<(), String> {
        let text = |e: redisson_lock::Error| e.to_string();
        let mut now = vec![];
        if let Some(lock) = &self.lock {
            now.extend(lock.holders().await.map_err(text)?);
        }
        if let Some(rw) = &self.rw {
            now.extend(rw.read().holders().await.map_err(text)?);
            now.extend(rw.write().holders().await.map_err(text)?);
        }
        let present: BTreeSet<String> = now
            .iter()
            .map(|h| format!("{}:{}", h.client_id, h.owner))
            .collect();
        for h in &now {
            if !self.clients.contains_key(&h.client_id) && !self.unknown.contains(&h.client_id) {
                // Unreadable (an ACL without the registry's keys): unknown,
                // and not asked again.
                match client.client_identity(&h.client_id).await {
                    Ok(identity) => {
                        self.clients.insert(h.client_id.clone(), identity);
                    }
                    Err(_) => {
                        self.unknown.insert(h.client_id.clone());
                    }
                }
            }
        }
        let gone: Vec<&String> = self.seen.difference(&present).collect();
        let came: Vec<&String> = present.difference(&self.seen).collect();
        let events = gone.into_iter().map(|h| ("released", h)).chain(
            came.into_iter()
                .map(|h| (if self.primed { "acquired" } else { "held" }, h)),
        );
        for (event, holder) in events {
            let client_id = holder.rsplit_once(':').map_or(holder.as_str(), |(c, _)| c);
            let who = crate::ls::who(&self.clients, client_id);
            let time = humantime::format_rfc3339_millis(SystemTime::now());
            if json {
                crate::print_json(&serde_json::json!({
                    "time": time.to_string(),
                    "event": event,
                    "holder": holder,
                    "who": who,
                }))?;
            } else {
                println!("{time} {event} by {holder} ({who})");
            }
        }
        self.seen = present;
        self.primed = true;
        Ok(())
    }
}

/// `*`, `?`, `[`, `]` and `\` matched as themselves in a `PSUBSCRIBE` pattern.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub async fn watch(cli: &Cli, args: &Args) -> Result<u8, String> {
    // The client tells the object's kind, its channels and the pub/sub
    // flavour; the watch is a connection of its own beside it.
    let client = connect_read_only(cli).await?;
    let outcome = watch_with(&client, args).await;
    client.shutdown().await;
    outcome
}

async fn watch_with(client: &redisson_lock::RedissonClient, args: &Args) -> Result<u8, String> {
    let (channels, fair) = channels(client, args).await?;
    let text = |e: redisson_lock::Error| e.to_string();
    let mut holders = Holders {
        lock: None,
        rw: None,
        seen: BTreeSet::new(),
        primed: false,
        clients: Default::default(),
        unknown: BTreeSet::new(),
    };
    for (_, meaning) in &channels {
        match meaning {
            Meaning::Lock => holders.lock = Some(client.lock(&args.name).map_err(text)?),
            Meaning::ReadWrite => {
                holders.rw = Some(client.read_write_lock(&args.name).map_err(text)?)
            }
            Meaning::Semaphore | Meaning::Latch => {}
        }
    }
    let reads_holders = holders.lock.is_some() || holders.rw.is_some();
    let mut watch = client.watch_channels().await.map_err(|e| e.to_string())?;
    for (channel, _) in &channels {
        watch.subscribe(channel).await.map_err(|e| e.to_string())?;
    }
    let mut names: Vec<String> = channels.iter().map(|(c, _)| c.clone()).collect();
    let mut fair = match fair {
        Some(lock) => {
            let prefix = format!("{}:", redisson_lock::naming::channel_name(lock.name()));
            let mut waiters = FairWaiters {
                lock,
                prefix,
                subscribed: HashSet::new(),
            };
            if watch.is_sharded() {
                waiters.follow_queue(&watch).await?;
                names.push(format!("{}<waiter> (those in line)", waiters.prefix));
            } else {
                let pattern = format!("{}*", glob_escape(&waiters.prefix));
                watch
                    .subscribe_pattern(&pattern)
                    .await
                    .map_err(|e| e.to_string())?;
                names.push(format!("{}<waiter>", waiters.prefix));
            }
            Some(waiters)
        }
        None => None,
    };
    eprintln!("watching {} (Ctrl-C to stop)", names.join(" and "));
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut queue_reads = tokio::time::interval(Duration::from_secs(1));
    let mut holder_reads = tokio::time::interval(HOLDER_READS);
    holder_reads.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let follow_queue = fair.is_some() && watch.is_sharded();
    loop {
        tokio::select! {
            message = watch.next() => match message {
                Some(Watched::Message(m)) => {
                    let meaning = channels
                        .iter()
                        .find(|(c, _)| *c == m.channel)
                        .map(|(_, kind)| kind.of(&m.payload))
                        .or_else(|| fair.as_ref().and_then(|f| f.meaning(&m.channel, &m.payload)))
                        .unwrap_or_else(|| "unknown message".to_string());
                    let time = humantime::format_rfc3339_millis(SystemTime::now());
                    if args.json {
                        let line = serde_json::json!({
                            "time": time.to_string(),
                            "channel": m.channel,
                            "message": m.payload,
                            "meaning": meaning,
                        });
                        crate::print_json(&line)?;
                    } else {
                        println!("{time} {} {} ({meaning})", m.channel, m.payload);
                    }
                    if reads_holders {
                        // The release, at once, rather than at the next read.
                        holder_reads.reset_immediately();
                    }
                }
                Some(Watched::Missed(n)) => {
                    eprintln!("redisson-lock: {n} messages dropped (too slow)");
                }
                Some(_) => {}
                None => return Err("connection closed".into()),
            },
            _ = holder_reads.tick(), if reads_holders => {
                if let Err(e) = holders.read(client, args.json).await {
                    eprintln!("redisson-lock: reading the holders: {e}");
                }
            }
            _ = queue_reads.tick(), if follow_queue => {
                if let Some(waiters) = fair.as_mut() {
                    if let Err(e) = waiters.follow_queue(&watch).await {
                        eprintln!("redisson-lock: reading the fair queue: {e}");
                    }
                }
            }
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
        }
    }
    watch.close().await;
    Ok(0)
}

/// The channels of the object `args` names, each with how to read its
/// messages.
async fn channels(
    client: &redisson_lock::RedissonClient,
    args: &Args,
) -> Result<(Vec<(String, Meaning)>, Option<redisson_lock::RFairLock>), String> {
    use redisson_lock::inspect::ObjectKind;
    let text = |e: redisson_lock::Error| e.to_string();
    let name = &args.name;
    let kinds = match args.kind {
        Kind::Auto => match client.inspect(name).await.map_err(text)?.kind() {
            ObjectKind::ReadWriteLock => vec![Kind::ReadWriteLock],
            ObjectKind::Semaphore | ObjectKind::ExpirableSemaphore => vec![Kind::Semaphore],
            ObjectKind::CountDownLatch => vec![Kind::CountDownLatch],
            ObjectKind::Counter => vec![Kind::Semaphore, Kind::CountDownLatch],
            ObjectKind::FairLock => vec![Kind::FairLock],
            _ => vec![Kind::Lock],
        },
        kind => vec![kind],
    };
    let mut fair = None;
    let mut channels = vec![];
    for kind in kinds {
        channels.push(match kind {
            Kind::ReadWriteLock => (
                client.read_write_lock(name).map_err(text)?.channel(),
                Meaning::ReadWrite,
            ),
            Kind::Semaphore => (
                client.semaphore(name).map_err(text)?.channel(),
                Meaning::Semaphore,
            ),
            Kind::CountDownLatch => (
                client.count_down_latch(name).map_err(text)?.channel(),
                Meaning::Latch,
            ),
            Kind::Auto | Kind::Lock | Kind::FairLock => {
                // A lock not known to be fair may become one's name for
                // its waiters: with classic pub/sub a pattern costs nothing.
                if kind == Kind::FairLock || !client.sharded_pubsub() {
                    fair = Some(client.fair_lock(name).map_err(text)?);
                }
                (client.lock(name).map_err(text)?.channel(), Meaning::Lock)
            }
        });
    }
    Ok((channels, fair))
}
