//! `run`: hold a lock (of any kind) or semaphore permits for the lifetime of
//! a child process; release when it exits; stop it if the hold is lost.

use std::process::Stdio;
use std::time::Duration;

use redisson_lock::{
    Acquire, Error, ExpirablePermits, LockGuard, RPermitExpirableSemaphore, RedissonClient,
    SemaphorePermits,
};
use tokio::process::Command;
use tokio::signal::unix::{signal, SignalKind};

use crate::guardian::{self, Guardian};
use crate::{parse_duration, parse_wait, Cli, EXIT_LOST, EXIT_NOT_ACQUIRED};

#[derive(clap::Args)]
pub struct Args {
    /// The lock's or semaphore's name.
    name: String,
    /// Give up (exit 75, or --conflict-exit-code) if not acquired within this
    /// long: `10` or `10s`, `250ms` (0: one attempt; as `flock -w`).
    /// Default: wait as long as it takes.
    #[arg(short, long, value_parser = parse_wait)]
    wait: Option<Duration>,
    /// One attempt, no waiting: `--wait 0` (as `flock -n`).
    #[arg(short = 'n', long, conflicts_with = "wait")]
    nonblock: bool,
    /// Exit status when not acquired within --wait (as flock's
    /// --conflict-exit-code and -E).
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = EXIT_NOT_ACQUIRED)]
    conflict_exit_code: u8,
    /// A lock: hold for this lease instead of renewing with the watchdog
    /// (the lock then expires after it). An expirable semaphore's permits:
    /// each is leased for this long and renewed by the watchdog every third
    /// of it while the command runs, so the permits of a crashed run come
    /// back within it (default: --watchdog-timeout).
    #[arg(long, value_parser = parse_duration)]
    lease: Option<Duration>,
    /// After a loss, the command gets SIGTERM, then SIGKILL if it has not
    /// exited this long after (as `timeout -k`).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    kill_after: Duration,
    /// Keep the command in this process group (as `timeout --foreground`),
    /// so it can read from the terminal; signals then reach only the command
    /// itself, not what it started. By default it runs in a group of its
    /// own, and every signal goes to the whole group.
    #[arg(long)]
    foreground: bool,
    #[command(flatten)]
    registry: RegistryArgs,
    #[command(flatten)]
    kind: KindArgs,
    /// The command and its arguments. It runs with REDISSON_LOCK_NAME set,
    /// REDISSON_LOCK_TOKEN for --fenced, REDISSON_LOCK_PERMIT_IDS for
    /// --expirable-semaphore.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// How `run` names itself in the client registry (what `status`, `inspect`
/// and `ls` show of a holder).
#[derive(clap::Args, Default, Clone)]
pub struct RegistryArgs {
    /// A label for the registry entry, as KEY=VALUE (repeatable). The entry
    /// holds only the command's name (`command=pg_dump`), never its
    /// arguments, which anyone who can read the keyspace would see.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Write no registry entry at all: holders show as unregistered.
    #[arg(long)]
    no_register: bool,
}

/// `KEY=VALUE`.
fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

/// The command's name for the registry: its file name, without its
/// directory or arguments (which may hold a password: `pg_dump
/// postgres://user:secret@db/x`).
fn command_name(command: &[String]) -> String {
    let first = command.first().map(String::as_str).unwrap_or_default();
    std::path::Path::new(first)
        .file_name()
        .map_or_else(|| first.to_string(), |n| n.to_string_lossy().into_owned())
}

/// What `run` holds; a plain lock (Redisson's `getLock`) by default.
#[derive(clap::Args, Default)]
#[group(multiple = false)]
struct KindArgs {
    /// Redisson's fair lock (`getFairLock`): first come, first served.
    #[arg(long)]
    fair: bool,
    /// The read lock of a read-write lock (`getReadWriteLock(name).readLock()`).
    #[arg(long)]
    read: bool,
    /// The write lock of a read-write lock.
    #[arg(long)]
    write: bool,
    /// Redisson's fenced lock (`getFencedLock`); the token goes to the
    /// command as REDISSON_LOCK_TOKEN.
    #[arg(long)]
    fenced: bool,
    /// N permits of the semaphore NAME (`getSemaphore`): at most as many
    /// runs at once as it has permits. A run killed with SIGKILL keeps its
    /// permits; --expirable-semaphore does not.
    #[arg(long, value_name = "N")]
    semaphore: Option<u32>,
    /// N permits of the permit-expirable semaphore NAME
    /// (`getPermitExpirableSemaphore`), leased for --lease and kept alive
    /// while the command runs.
    #[arg(long, value_name = "N")]
    expirable_semaphore: Option<u32>,
}

/// `elect`: `run` on the election's lock (Redisson's `getLock(NAME)`),
/// waiting as long as it takes (or `--wait`); a JVM service holding that
/// RLock leads.
#[derive(clap::Args)]
pub struct ElectArgs {
    /// The election's name: the key of its lock.
    name: String,
    /// Give up (exit 75, or --conflict-exit-code) if another still leads
    /// after this long: `10` or `10s` (0: one try). Default: campaign as
    /// long as it takes.
    #[arg(short, long, value_parser = parse_wait)]
    wait: Option<Duration>,
    /// Exit status when another still leads after --wait.
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = EXIT_NOT_ACQUIRED)]
    conflict_exit_code: u8,
    /// After the leadership is lost, the command gets SIGTERM, then SIGKILL
    /// if it has not exited this long after.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    kill_after: Duration,
    /// Keep the command in this process group (see `run --foreground`).
    #[arg(long)]
    foreground: bool,
    /// A fenced election (Redisson's `getFencedLock(NAME)`): each
    /// leadership's term, its fencing token, goes to the command as
    /// REDISSON_LOCK_TOKEN, above every earlier leader's.
    #[arg(long)]
    fenced: bool,
    #[command(flatten)]
    registry: RegistryArgs,
    /// The command the leader runs, with REDISSON_LOCK_NAME set (and
    /// REDISSON_LOCK_TOKEN with --fenced).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

impl From<&ElectArgs> for Args {
    fn from(elect: &ElectArgs) -> Args {
        Args {
            name: elect.name.clone(),
            wait: elect.wait,
            nonblock: false,
            conflict_exit_code: elect.conflict_exit_code,
            lease: None,
            kill_after: elect.kill_after,
            foreground: elect.foreground,
            registry: elect.registry.clone(),
            kind: KindArgs {
                fenced: elect.fenced,
                ..KindArgs::default()
            },
            command: elect.command.clone(),
        }
    }
}

impl Args {
    /// How long to wait for the lock (`None`: as long as it takes).
    fn patience(&self) -> Option<Duration> {
        match self.nonblock {
            true => Some(Duration::ZERO),
            false => self.wait,
        }
    }
}

/// What the run holds while the command runs.
enum Hold {
    Lock(LockGuard),
    Permits(SemaphorePermits),
    Leased(ExpirablePermits),
}

impl Hold {
    /// Resolves when the hold is lost: a lock's lost signal, or kept-alive
    /// permits' (a renewal found a lease ended). Never for plain permits.
    async fn lost(&self) {
        match self {
            Hold::Lock(guard) => guard.lost().await,
            Hold::Permits(_) => std::future::pending().await,
            Hold::Leased(permits) => permits.lost().await,
        }
    }

    /// After a stop: whether the hold is still there. A lock is asked (a
    /// stop longer than its lease lets it expire before the watchdog
    /// notices); permits have no lease of their own to lose meanwhile, and
    /// kept-alive ones report a loss through `lost`.
    async fn still_held(&self) -> bool {
        match self {
            Hold::Lock(guard) => !guard.is_lost() && guard.hold_count().await.is_ok_and(|n| n > 0),
            Hold::Permits(_) | Hold::Leased(_) => true,
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Hold::Lock(guard) => guard.unlock().await.map(drop),
            Hold::Permits(permits) => permits.release().await.map(drop),
            Hold::Leased(permits) => permits.release().await.map(drop),
        }
    }
}

/// The name of what is acquired, for messages.
fn what(args: &Args) -> String {
    let k = &args.kind;
    match (k.semaphore, k.expirable_semaphore) {
        (Some(n), _) | (_, Some(n)) => format!("{n} permit(s) of `{}`", args.name),
        _ => format!("`{}`", args.name),
    }
}

/// Acquires what `args` ask for; `None` when not acquired within --wait.
/// Also returns the environment the command gets.
async fn acquire(
    client: &RedissonClient,
    args: &Args,
) -> Result<Option<(Hold, Vec<(&'static str, String)>)>, Error> {
    let k = &args.kind;
    let mut env = vec![("REDISSON_LOCK_NAME", args.name.clone())];
    macro_rules! lock {
        ($lock:expr) => {{
            let lock = $lock;
            let acquire = lock.acquire();
            let acquire = match args.lease {
                Some(lease) => acquire.lease(lease),
                None => acquire,
            };
            match args.patience() {
                Some(wait) => acquire.wait(wait).await?,
                None => Some(acquire.await?),
            }
        }};
    }
    let hold = if k.fair {
        lock!(client.fair_lock(&args.name)?).map(Hold::Lock)
    } else if k.read {
        lock!(client.read_write_lock(&args.name)?.read()).map(Hold::Lock)
    } else if k.write {
        lock!(client.read_write_lock(&args.name)?.write()).map(Hold::Lock)
    } else if k.fenced {
        lock!(client.fenced_lock(&args.name)?).map(|guard| {
            env.push(("REDISSON_LOCK_TOKEN", guard.token().to_string()));
            Hold::Lock(guard.into_guard())
        })
    } else if let Some(n) = k.semaphore {
        let semaphore = client.semaphore(&args.name)?;
        warn_if_unset(client, &args.name, args.patience()).await;
        match args.patience() {
            Some(wait) if wait.is_zero() => semaphore.try_acquire(n).await?,
            Some(wait) => semaphore.try_acquire_for(n, wait).await?,
            None => Some(semaphore.acquire(n).await?),
        }
        .map(Hold::Permits)
    } else if let Some(n) = k.expirable_semaphore {
        // Kept alive: for --lease, renewed every third of it on a timer of
        // their own, or as a lock is (the watchdog timeout).
        let semaphore = client.permit_expirable_semaphore(&args.name)?;
        warn_if_unset(client, &args.name, args.patience()).await;
        fn kept<W>(
            acquire: Acquire<'_, RPermitExpirableSemaphore, W>,
            lease: Option<Duration>,
        ) -> Acquire<'_, RPermitExpirableSemaphore, W> {
            match lease {
                Some(lease) => acquire.kept_alive_for(lease),
                None => acquire.kept_alive(),
            }
        }
        let permits = match args.patience() {
            Some(wait) if wait.is_zero() => {
                kept(semaphore.acquire(n).no_wait(), args.lease).await?
            }
            Some(wait) => kept(semaphore.acquire(n).wait(wait), args.lease).await?,
            None => Some(kept(semaphore.acquire(n), args.lease).await?),
        };
        permits.map(|permits| {
            let ids: Vec<String> = permits.ids().iter().map(|id| id.to_string()).collect();
            env.push(("REDISSON_LOCK_PERMIT_IDS", ids.join(",")));
            Hold::Leased(permits)
        })
    } else {
        lock!(client.lock(&args.name)?).map(Hold::Lock)
    };
    Ok(hold.map(|hold| (hold, env)))
}

/// A semaphore without its key has no permits: say how to set them, since
/// a wait without limit would otherwise look like a hang.
async fn warn_if_unset(client: &RedissonClient, name: &str, wait: Option<Duration>) {
    if wait.is_some_and(|w| w.is_zero()) {
        return;
    }
    let exists = client.command(Some(name), "EXISTS", [name]).await;
    if exists.ok().and_then(|r| r.as_i64()) == Some(0) {
        eprintln!(
            "redisson-lock: semaphore `{name}` has no permits yet; waiting. Set them with \
             `redisson-lock semaphore set-permits {name} N`"
        );
    }
}

pub async fn run(cli: &Cli, args: &Args) -> Result<u8, String> {
    if let (Some(_), Some(_)) = (args.kind.semaphore, args.lease) {
        return Err(
            "a semaphore's permits have no lease: use --expirable-semaphore for permits \
             that come back after a crash"
                .into(),
        );
    }
    let mut config = crate::settings(cli)?;
    // Named in the registry by the command it runs, its name only:
    // `inspect` shows "redisson-lock on host pid N (command=pg_dump)".
    if args.registry.no_register {
        config.registry.enabled = false;
    }
    config
        .registry
        .labels
        .insert("command".into(), command_name(&args.command));
    config
        .registry
        .labels
        .extend(args.registry.labels.iter().cloned());
    let client = RedissonClient::connect(config)
        .await
        .map_err(|e| e.to_string())?;
    let mut signals = Signals::new().map_err(|e| e.to_string())?;
    // A signal while waiting ends the wait: dropping the acquire releases
    // anything it took. (A stop or continue while waiting changes nothing.)
    let acquiring = acquire(&client, args);
    tokio::pin!(acquiring);
    let acquired = loop {
        tokio::select! {
            acquired = &mut acquiring => break acquired,
            signal = signals.recv() => if ends_a_wait(signal) {
                return Ok(stop(&client, signal).await);
            } else if signal == libc::SIGTSTP {
                stop_self();
            },
        }
    };
    let (hold, env) = match acquired {
        Ok(Some(acquired)) => acquired,
        Ok(None) => {
            eprintln!(
                "redisson-lock: {} not acquired within {}",
                what(args),
                humantime::format_duration(args.patience().unwrap_or_default())
            );
            client.shutdown().await;
            return Ok(args.conflict_exit_code);
        }
        Err(e) => {
            client.shutdown().await;
            return Err(e.to_string());
        }
    };
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .envs(env)
        .stdin(Stdio::inherit())
        .kill_on_drop(false);
    if !args.foreground {
        command.process_group(0);
    }
    guardian::die_with_parent(&mut command);
    let guardian = match Guardian::arm(&mut command, !args.foreground) {
        Ok(guardian) => Some(guardian),
        Err(e) => {
            eprintln!("redisson-lock: cannot start the process that stops the command if run dies ({e}); it may outlive a killed run");
            None
        }
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            if let Some(guardian) = guardian {
                guardian.disarm();
            }
            let _ = hold.release().await;
            client.shutdown().await;
            // As a shell and timeout(1) report it: 127 not found, 126 found
            // but not runnable.
            eprintln!("redisson-lock: cannot run `{}`: {e}", args.command[0]);
            return Ok(match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                _ => 126,
            });
        }
    };
    // A negative pid signals the command's whole process group.
    let pid = child.id().map_or(0, |p| {
        if args.foreground {
            p as i32
        } else {
            -(p as i32)
        }
    });
    let outcome = {
        let lost = hold.lost();
        tokio::pin!(lost);
        loop {
            tokio::select! {
                status = child.wait() => break Ok(status),
                _ = &mut lost => break Err(()),
                signal = signals.recv() => match signal {
                    // Ctrl-Z: the command stops with run, not behind it.
                    libc::SIGTSTP => {
                        send_signal(pid, libc::SIGTSTP);
                        stop_self();
                    }
                    // Continued (`fg`, `bg`, `kill -CONT`): the command goes
                    // on only if the hold outlived the stop.
                    libc::SIGCONT => {
                        if hold.still_held().await {
                            send_signal(pid, libc::SIGCONT);
                        } else {
                            eprintln!("redisson-lock: {} was lost while stopped", what(args));
                            send_signal(pid, libc::SIGKILL);
                            break Err(());
                        }
                    }
                    other => send_signal(pid, other),
                },
            }
        }
    };
    let code = match outcome {
        Ok(status) => match (status, hold.release().await) {
            (Err(e), _) => Err(e.to_string()),
            (Ok(_), Err(Error::LockLost { .. })) => {
                eprintln!(
                    "redisson-lock: {} was lost while the command ran",
                    what(args)
                );
                Ok(EXIT_LOST)
            }
            (Ok(status), Err(e)) => {
                eprintln!("redisson-lock: releasing {} failed: {e}", what(args));
                Ok(exit_code(status))
            }
            (Ok(status), Ok(())) => Ok(exit_code(status)),
        },
        Err(()) => {
            eprintln!(
                "redisson-lock: {} was lost; stopping the command",
                what(args)
            );
            send_signal(pid, libc::SIGTERM);
            // A stopped command (Ctrl-Z) acts on it only once continued, as
            // timeout(1) does it.
            send_signal(pid, libc::SIGCONT);
            if tokio::time::timeout(args.kill_after, child.wait())
                .await
                .is_err()
            {
                eprintln!(
                    "redisson-lock: the command outlived --kill-after {}; killing it",
                    humantime::format_duration(args.kill_after)
                );
                send_signal(pid, libc::SIGKILL);
                let _ = child.wait().await;
            }
            let _ = hold.release().await;
            Ok(EXIT_LOST)
        }
    };
    if let Some(guardian) = guardian {
        guardian.disarm();
    }
    client.shutdown().await;
    code
}

/// The signals `run` passes to its command (and, while it waits, takes as
/// a reason to stop waiting): as `timeout(1)` does, and the stops and
/// continues a shell's job control sends to `run`'s group only.
struct Signals {
    streams: Vec<(i32, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        let streams = [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGTSTP,
            libc::SIGCONT,
        ]
        .into_iter()
        .map(|n| Ok((n, signal(SignalKind::from_raw(n))?)))
        .collect::<std::io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received.
    async fn recv(&mut self) -> i32 {
        let next = futures::future::select_all(
            self.streams
                .iter_mut()
                .map(|(n, s)| Box::pin(async move { s.recv().await.map(|_| *n) })),
        );
        // A stream ends only with the runtime.
        next.await.0.unwrap_or(libc::SIGTERM)
    }
}

/// Whether `signal` ends a wait for the lock (a stop or a continue does not).
fn ends_a_wait(signal: i32) -> bool {
    !matches!(signal, libc::SIGTSTP | libc::SIGCONT)
}

/// Stops `run` itself, as Ctrl-Z would have without a handler.
fn stop_self() {
    // SAFETY: raise(2) on our own process.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}

/// Stops waiting after a signal: 128 + signal, as a shell reports it.
async fn stop(client: &RedissonClient, signal: i32) -> u8 {
    client.shutdown().await;
    128 + signal as u8
}

/// Sends `signal` to the command (`pid` > 0) or its process group (`pid`
/// < 0, minus the group's id).
fn send_signal(pid: i32, signal: i32) {
    if pid != 0 {
        // SAFETY: plain kill(2) on our own child's pid or process group.
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
