//! `redisson-lock`: inspect and use Redisson locks from a shell.

mod audit;
mod counters;
mod doctor;
mod fit;
mod guardian;
mod ls;
mod run;
mod status;
mod top;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redisson_lock::{Config, RedissonClient};

/// Exit status when the lock was not acquired within --wait (EX_TEMPFAIL).
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when the lock was lost while the command ran.
pub const EXIT_LOST: u8 = 76;
/// Exit status of an error: the command could not do what was asked (bad
/// input, configuration, connection, a refusal by Redis). Clap's usage
/// errors exit 2 too.
pub const EXIT_ERROR: u8 = 2;
/// Exit status of `run` and `elect` when they fail themselves (bad input,
/// no connection, a refusal by Redis): the command never ran. 2 is the
/// most common status of a command of its own, so they keep 125 and up
/// for their own failures, as GNU `timeout`, `env`, `nice` and `chroot` do
/// (126 and 127: the command could not be run, or was not found).
pub const EXIT_RUN_ERROR: u8 = 125;

#[derive(Parser)]
#[command(
    name = "redisson-lock",
    version,
    about = "See, run under and clean up Redisson-compatible locks, semaphores and latches",
    after_help = "The password comes from --password-file, else the URL (or the Redisson file), \
                  else REDIS_PASSWORD (the file and the variable keep it out of `ps`); it is \
                  never printed.",
    after_long_help = "The password comes from --password-file, else the URL (or the Redisson \
                  file), else REDIS_PASSWORD (the file and the variable keep it out of `ps`); it \
                  is never printed. The user name likewise: --user, the URL or file, REDIS_USERNAME.

Examples:
  redisson-lock ls 'orders:*'                            every object, its holders and waiters
  redisson-lock inspect orders:42 --json                 everything about one object
  redisson-lock top                                      live view, most contended first
  redisson-lock doctor --fix                             clean up what crashes left behind
  redisson-lock audit                                    is this Redis safe for locks?
  redisson-lock run nightly-report -- ./report.sh        wait for the lock, run, release
  redisson-lock run --wait 0s nightly-report -- ./x.sh   skip (exit 75) if someone holds it
  redisson-lock run --semaphore 1 exports -- ./x.sh      one permit of a fleet-wide limit
  redisson-lock latch wait deploy-ready --wait 5m        wait for a count-down latch
  redisson-lock status orders:42 --json                  who holds it, for how long
  redisson-lock status orders:42 --exit-code             exit 0 free, 1 held (for scripts)
  redisson-lock watch orders:42                          print unlock messages as they come
  redisson-lock completions bash > /etc/bash_completion.d/redisson-lock

Exit status, in every subcommand:
  0         done
  1         what the command found: doctor harm, an audit failure, status --exit-code held,
            latch set / semaphore set-permits already set, force-unlock removed nothing
  2         an error: command line, configuration, argument, connection, a refusal by Redis
  75        run, elect, latch wait: not acquired (or still closed) within --wait
  76        run: the lock or lease was lost while the command ran
  126, 127  run: the command could not be run, or was not found
  128+N     run: stopped by signal N"
)]
struct Cli {
    /// Redis URL: redis://[user@]host:port[/db] (rediss:// for TLS), a
    /// cluster as redis-cluster://host:port?node=host:port&node=..., or
    /// sentinels as redis-sentinel://host:port?sentinelServiceName=NAME&node=...
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    url: String,
    /// Read the password from FILE (its first line) instead of the URL.
    #[arg(long, value_name = "FILE", global = true)]
    password_file: Option<std::path::PathBuf>,
    /// ACL user name (overrides one in the URL or the Redisson file).
    #[arg(long, value_name = "NAME", global = true)]
    user: Option<String>,
    /// Read the servers and lock settings from the Redisson YAML or JSON
    /// config file a Java service uses, instead of --url (REDIS_URL is then
    /// not read; --url beside it is an error). A --watchdog-timeout given on
    /// the command line wins over the file's lockWatchdogTimeout.
    #[arg(long, value_name = "FILE", global = true)]
    redisson_config: Option<std::path::PathBuf>,
    /// PEM file of the CA certificates to trust for a rediss:// server.
    #[arg(long, value_name = "FILE", global = true)]
    tls_ca_file: Option<std::path::PathBuf>,
    /// Lease of watchdog-renewed locks; use the JVM fleet's lockWatchdogTimeout.
    #[arg(long, value_parser = parse_duration, default_value = "30s", global = true)]
    watchdog_timeout: Duration,
    /// How long any one call to Redis may take, connecting included, before
    /// the command fails (exit 2); it bounds waiting for a reply, not
    /// --wait. Default: the client's (3 s a reply, 10 s a connection, or the
    /// Redisson file's timeout and connectTimeout).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", global = true)]
    timeout: Option<Duration>,
    /// Log this tool's and fred's events to stderr: -v info, -vv debug, -vvv
    /// trace (RUST_LOG, when set, wins).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
    /// Which of --url / --watchdog-timeout were given on the command line
    /// (not from REDIS_URL or the defaults): set after parsing.
    #[arg(skip)]
    given: Given,
}

/// Settings given on the command line, which win over the Redisson file.
#[derive(Default)]
struct Given {
    url: bool,
    watchdog_timeout: bool,
}

#[derive(Subcommand)]
enum Command {
    /// List every object whose name matches: kind, holders, TTL, waiters.
    Ls(ls::LsArgs),
    /// Show everything about one object: holders, line, hold keys, leases, channels.
    Inspect(ls::InspectArgs),
    /// Find what crashes and old clients left behind; --fix removes what nobody can be using.
    Doctor(doctor::DoctorArgs),
    /// Is this Redis safe for locks? Eviction, persistence, replicas, Sentinel, Cluster,
    /// ACL, the JVM fleet's watchdog, latency (exit 0 ok, 1 a failure, 2 unreachable).
    Audit(audit::AuditArgs),
    /// A live view of objects, most contended first (q quits).
    Top(top::TopArgs),
    /// Run a command while holding a lock or permits; release when it exits.
    Run(run::Args),
    /// Run a command while this process leads: campaign for the election NAME
    /// (the RLock NAME, so a JVM holder leads too), run, resign at exit; the
    /// command is stopped (exit 76) if the leadership is lost.
    Elect(run::ElectArgs),
    /// Set, count down or wait for a count-down latch.
    #[command(subcommand)]
    Latch(counters::Latch),
    /// Set or add a semaphore's permits.
    #[command(subcommand)]
    Semaphore(counters::Semaphore),
    /// Show who holds a lock and for how long.
    Status(status::StatusArgs),
    /// Delete a lock whoever holds it and wake its waiters (Redisson's forceUnlock).
    ForceUnlock(status::ForceUnlockArgs),
    /// Print every message on a lock's channel as it arrives.
    Watch(watch::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// The version of every `--json` document's shape (`"schema"` in each;
/// `audit --json` has its own): a field added leaves it, a field removed or
/// changed bumps it.
pub const JSON_SCHEMA: u32 = 1;

/// Prints `value`, an object, as one line of JSON with `"schema"` in it.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), String> {
    let mut document = serde_json::to_value(value).map_err(|e| e.to_string())?;
    if let Some(fields) = document.as_object_mut() {
        fields.insert("schema".into(), JSON_SCHEMA.into());
    }
    println!("{document}");
    Ok(())
}

/// A duration with units (`3s`, `250ms`, `1m 30s`), or a bare number of
/// seconds (`10`, `0.5`), as `flock -w` and `timeout` take them.
fn seconds_or_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return match Duration::try_from_secs_f64(seconds) {
            Ok(d) => Ok(d),
            Err(_) => Err(format!(
                "`{text}`: seconds must be a number from 0 up (or give units: 250ms, 3s, 1m)"
            )),
        };
    }
    humantime::parse_duration(text).map_err(|e| format!("`{text}`: {e} (or seconds: 10, 0.5)"))
}

/// Parses a wait such as `0s` or `0` (one attempt), `3s`, `10`, `250ms`.
pub fn parse_wait(text: &str) -> Result<Duration, String> {
    seconds_or_duration(text)
}

/// Parses `3s`, `250ms`, `1m 30s`, `10` (seconds); refuses zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = seconds_or_duration(text)?;
    if d.as_millis() == 0 {
        return Err(format!("`{text}`: must be at least 1ms"));
    }
    Ok(d)
}

/// The client settings: an explicit flag first, then the URL or the
/// Redisson file, then the environment (`REDIS_USERNAME`,
/// `REDIS_PASSWORD`); two flags that both name the servers are an error.
fn settings(cli: &Cli) -> Result<Config, String> {
    let mut config = match &cli.redisson_config {
        Some(path) => {
            if cli.given.url {
                return Err(format!(
                    "--url and --redisson-config both name the servers; give one (the file is {})",
                    path.display()
                ));
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let json = path.extension().is_some_and(|e| e == "json");
            let file = if json {
                Config::from_redisson_json(&text)
            } else {
                Config::from_redisson_yaml(&text)
            }
            .map_err(|e| format!("{}: {e}", path.display()))?;
            if !file.ignored.is_empty() {
                eprintln!(
                    "redisson-lock: {} settings not used here: {}",
                    path.display(),
                    file.ignored.join(", ")
                );
            }
            let mut config = file.config;
            if cli.given.watchdog_timeout {
                config.lock_watchdog_timeout = cli.watchdog_timeout;
            }
            config
        }
        None => {
            let mut config = Config::from_url(&cli.url);
            config.lock_watchdog_timeout = cli.watchdog_timeout;
            config
        }
    };
    if cli.tls_ca_file.is_some() {
        config.tls_ca_file = cli.tls_ca_file.clone();
    }
    if let Some(timeout) = cli.timeout {
        config.timeout = timeout;
        config.connect_timeout = timeout;
    }
    let (url_user, url_password) = userinfo(&config.address);
    if let Some(user) = &cli.user {
        config.username = Some(user.clone());
    } else if config.username.is_none() && !url_user {
        config.username = std::env::var("REDIS_USERNAME")
            .ok()
            .filter(|u| !u.is_empty());
    }
    if let Some(path) = &cli.password_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the password file {}: {e}", path.display()))?;
        config.password = Some(text.lines().next().unwrap_or_default().to_string());
    } else if config.password.is_none() && !url_password {
        config.password = std::env::var("REDIS_PASSWORD").ok();
    }
    Ok(config)
}

/// Whether a URL carries a user name and a password
/// (`scheme://user:password@host`).
fn userinfo(url: &str) -> (bool, bool) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    match authority.rsplit_once('@') {
        Some((info, _)) => match info.split_once(':') {
            Some((user, password)) => (!user.is_empty(), !password.is_empty()),
            None => (!info.is_empty(), false),
        },
        None => (false, false),
    }
}

async fn connect(cli: &Cli) -> Result<RedissonClient, String> {
    RedissonClient::connect(settings(cli)?)
        .await
        .map_err(|e| e.to_string())
}

/// A client for commands that only read (`ls`, `inspect`, `status`, `top`,
/// `doctor`, `watch`): it takes no lock, so it needs no replica check
/// (`WAIT` may be missing) and runs no connect-time audit (which publishes
/// on a probe channel).
async fn connect_read_only(cli: &Cli) -> Result<RedissonClient, String> {
    let mut config = settings(cli)?;
    config.check_lock_synced_slaves = false;
    config.connect_audit = false;
    // A read-only command writes nothing, not even its own registry entry.
    config.registry.enabled = false;
    RedissonClient::connect(config)
        .await
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    // Output piped into `head` and closed early ends the process quietly,
    // as for any Unix tool (Rust ignores SIGPIPE, so `println!` would panic).
    // SAFETY: setting a signal's disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let matches = match <Cli as clap::CommandFactory>::command().try_get_matches() {
        Ok(matches) => matches,
        // `run` and `elect` with bad input: their command never ran.
        Err(e) if e.use_stderr() && runs_a_command() => {
            let _ = e.print();
            return ExitCode::from(EXIT_RUN_ERROR);
        }
        Err(e) => e.exit(),
    };
    let mut cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let on_command_line = |id: &str| {
        matches!(
            matches.value_source(id),
            Some(clap::parser::ValueSource::CommandLine)
        )
    };
    cli.given = Given {
        url: on_command_line("url"),
        watchdog_timeout: on_command_line("watchdog_timeout"),
    };
    if let Command::Completions { shell } = cli.command {
        use clap::CommandFactory;
        let mut command = Cli::command();
        clap_complete::generate(shell, &mut command, "redisson-lock", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    }
    // Logs only when asked for: `-v`, or `RUST_LOG=redisson_lock=debug`.
    let filter = match (std::env::var("RUST_LOG"), cli.verbose) {
        (Ok(filter), _) => Some(filter),
        (_, 0) => None,
        (_, 1) => Some("redisson_lock=info,fred=info".to_string()),
        (_, 2) => Some("redisson_lock=debug,fred=debug".to_string()),
        _ => Some("redisson_lock=trace,fred=trace".to_string()),
    };
    if let Some(filter) = filter {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redisson-lock: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let outcome = runtime.block_on(async {
        match &cli.command {
            Command::Ls(args) => ls::ls(&cli, args).await,
            Command::Inspect(args) => ls::inspect(&cli, args).await,
            Command::Doctor(args) => doctor::doctor(&cli, args).await,
            Command::Audit(args) => audit::audit(&cli, args).await,
            Command::Top(args) => top::top(&cli, args).await,
            Command::Run(args) => run::run(&cli, args).await,
            Command::Elect(args) => run::run(&cli, &args.into()).await,
            Command::Latch(command) => counters::latch(&cli, command).await,
            Command::Semaphore(command) => counters::semaphore(&cli, command).await,
            Command::Status(args) => status::status(&cli, args).await,
            Command::ForceUnlock(args) => status::force_unlock(&cli, args).await,
            Command::Watch(args) => watch::watch(&cli, args).await,
            Command::Completions { .. } => unreachable!("handled before the runtime starts"),
        }
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("redisson-lock: {message}");
            match cli.command {
                Command::Run(_) | Command::Elect(_) => ExitCode::from(EXIT_RUN_ERROR),
                // Errors apart from findings, as grep keeps 1 for "no
                // match": 1 is what a command found (harm, a failure, held,
                // set).
                _ => ExitCode::from(EXIT_ERROR),
            }
        }
    }
}

/// Whether the command line names `run` or `elect` (before the command's
/// own arguments), for a usage error clap found before any subcommand was
/// parsed.
fn runs_a_command() -> bool {
    std::env::args()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "run" || a == "elect")
}
