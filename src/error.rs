//! The crate's error type.

use std::time::Duration;

/// Errors returned by this crate.
///
/// A rejected call ([`Error::InvalidArgument`], [`Error::WrongType`],
/// [`Error::NotHeld`], [`Error::AlreadyHeld`]) has changed nothing on Redis.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock is not held by this owner: Redisson's `IllegalMonitorStateException`.
    /// Returned when unlocking a lock that someone else holds, that expired, or
    /// that was already fully released.
    #[error("attempt to unlock lock `{name}`, not locked by owner `{field}`")]
    #[non_exhaustive]
    NotHeld {
        /// Lock name.
        name: String,
        /// Owner field that tried to unlock (`<client-id>:<owner-id>`).
        field: String,
    },
    /// The owner already holds this non-reentrant lock
    /// ([`crate::RNonReentrantLock`], [`crate::RNonReentrantFairLock`]): a
    /// re-entry (inside a guard's `scope`, or through the same explicit
    /// owner) is refused at once, as Redisson's `NON_REENTRANT_REACQUIRE`
    /// refusal (an `IllegalMonitorStateException` in Java). Nothing was
    /// changed: the hold count stays as it was.
    #[error("lock `{name}` is non-reentrant and already held by owner `{field}`")]
    #[non_exhaustive]
    AlreadyHeld {
        /// Lock name.
        name: String,
        /// Owner field that asked again (`<client-id>:<owner-id>`).
        field: String,
    },
    /// The guard's lock was lost (a renewal found it gone, or its lease ran out
    /// before a renewal was confirmed), so releasing it sent nothing to Redis.
    #[error("lock `{name}` was lost before it was released (lease expired or deleted)")]
    #[non_exhaustive]
    LockLost {
        /// Lock name.
        name: String,
    },
    /// The key exists but holds another type of value than the object uses
    /// (a string where a lock hash belongs, a hash where a semaphore's
    /// counter belongs). The key was left untouched.
    #[error("key `{name}` is not a {expected} (WRONGTYPE)")]
    #[non_exhaustive]
    WrongType {
        /// The offending key.
        name: String,
        /// What the object expected there: `lock`, `semaphore`, ...
        expected: &'static str,
    },
    /// A bad argument: empty or malformed name, zero or out-of-range duration.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A call of the [`crate::blocking`] API from a task of the blocking
    /// client's own runtime, which the call would wait for (a deadlock).
    /// Nothing was sent. Calls from any other thread, `spawn_blocking`'s
    /// included, are made.
    #[cfg(feature = "blocking")]
    #[error("a blocking redisson-lock call on the blocking client's own runtime: call it from another thread")]
    InsideAsyncRuntime,
    /// The [`crate::blocking`] client could not start its runtime, or a
    /// thread for a call made from inside another runtime (the system is out
    /// of threads or memory).
    #[cfg(feature = "blocking")]
    #[error("the blocking client {0}")]
    BlockingRuntime(String),
    /// Invalid configuration or URL.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// No reply from Redis within the configured timeout.
    #[error("no reply from Redis within {0:?}")]
    Timeout(Duration),
    /// The connection to Redis failed or is down.
    #[error("Redis connection error: {message}")]
    #[non_exhaustive]
    Connection {
        /// What failed.
        message: String,
        /// What the Redis client library reported, if it did: reached
        /// through [`std::error::Error::source`].
        source: Option<Cause>,
    },
    /// Redis refused the credentials.
    #[error("Redis authentication failed: {message}")]
    #[non_exhaustive]
    Auth {
        /// The server's refusal.
        message: String,
        /// What the Redis client library reported, if it did: reached
        /// through [`std::error::Error::source`].
        source: Option<Cause>,
    },
    /// Redis answered with an error, or with a reply the crate did not expect.
    #[error("Redis error: {message}")]
    #[non_exhaustive]
    Redis {
        /// The error reply (`ERR ...`, `WRONGTYPE ...`) or what was unexpected.
        message: String,
        /// What the Redis client library reported, if it did: reached
        /// through [`std::error::Error::source`].
        source: Option<Cause>,
    },
    /// A script was sent but its reply was lost, and reading the state
    /// afterwards did not succeed either, so whether it ran is unknown. An
    /// acquire in this state expires on its own within one lease.
    #[error("outcome of `{operation}` on `{name}` is unknown: {cause}")]
    #[non_exhaustive]
    OutcomeUnknown {
        /// What was sent (acquire, unlock, ...).
        operation: &'static str,
        /// Lock name.
        name: String,
        /// Why it could not be resolved.
        cause: String,
        /// The error that left the outcome unknown (a timeout, a lost
        /// connection), as this one's [`source`](std::error::Error::source).
        #[source]
        source: Option<Box<Error>>,
    },
    /// Too few of the replicas a failover could promote confirmed a lock
    /// write within `slavesSyncTimeout` (Redisson's
    /// `NoSyncedSlavesException`), or none could because a failover was
    /// under way (`unsettled`). An acquire was undone before this is
    /// returned; an unlock or force-unlock did happen on the primary but may
    /// be lost if it fails over now.
    #[error("lock `{name}`: {operation} {}", not_synced_text(*acked, *required, *promotable, unsettled.as_deref()))]
    #[non_exhaustive]
    ReplicasNotSynced {
        /// What was sent (acquire, unlock, force_unlock).
        operation: &'static str,
        /// Lock name.
        name: String,
        /// Promotable replicas that confirmed on the last attempt.
        acked: u32,
        /// Promotable replicas the quorum required.
        required: u32,
        /// Replicas a failover could promote, in the deployment's view.
        promotable: u32,
        /// Why no write could be confirmed at all, when so (a failover
        /// under way, the primary not agreed on yet).
        unsettled: Option<String>,
    },
    /// The deployment is failing over: after moving to the node the
    /// deployment names, the client still did not reach a primary. Nothing
    /// was sent; retrying once the failover is over is safe.
    #[error("no primary to write to ({0}); nothing was sent, retry once the failover is over")]
    NoPrimary(String),
    /// The client was shut down.
    #[error("the client is shut down")]
    Shutdown,
}

/// The text of [`Error::ReplicasNotSynced`].
fn not_synced_text(acked: u32, required: u32, promotable: u32, unsettled: Option<&str>) -> String {
    match unsettled {
        Some(why) => format!("not confirmed by replicas: {why}"),
        None => format!(
            "reached {acked} of the {promotable} replicas a failover could promote; {required} required"
        ),
    }
}

/// What the Redis client library (fred) reported under an [`Error`]: its
/// message, and the library's own error as this one's
/// [`source`](std::error::Error::source). Opaque, so that the library can
/// change without changing this crate's API.
#[derive(Debug, Clone)]
pub struct Cause(fred::error::Error);

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

// fred's texts the classification depends on; pinned by the tests below.
/// fred's error when a command met a redirect it was not allowed to follow.
const REDIRECTED: &str = "Too many redirections";
/// fred's error when it had no connection to write a command to.
/// Error codes of the server's refusals that pass: failovers, loads,
/// long scripts, memory and replica limits. The command did not run.
const TRANSIENT_CODES: [&str; 8] = [
    "READONLY",
    "LOADING",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "BUSY",
    "NOREPLICAS",
    "OOM",
];

const NO_ROUTE: &str = "Failed to route command";
/// fred's error when a command's only write attempt was lost with its connection.
const WRITE_ATTEMPTS: &str = "Too many failed write attempts";

/// Shorthand for `Result<T, redisson_lock::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Maps a fred error into this crate's error. `timeout` is the command
    /// timeout in force, reported by [`Error::Timeout`].
    pub(crate) fn from_redis(err: &fred::error::Error, timeout: Duration) -> Error {
        use fred::error::ErrorKind;
        let details = err.details().to_string();
        let source = Some(Cause(err.clone()));
        match err.kind() {
            ErrorKind::Timeout => Error::Timeout(timeout),
            // A MOVED/ASK refused under `max_redirections = 0` (see
            // `was_redirected`) and fred finding no connection to send on
            // (the server is down) are both Routing.
            ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Backpressure | ErrorKind::Routing => {
                Error::Connection {
                    message: details,
                    source,
                }
            }
            ErrorKind::Auth => Error::Auth {
                message: details,
                source,
            },
            ErrorKind::Url | ErrorKind::Config => Error::Config(details),
            // fred 10 reports "no connection to write to" as Unknown with this
            // text (router/commands.rs); it is a connection failure.
            _ if details.starts_with(NO_ROUTE) => Error::Connection {
                message: details,
                source,
            },
            // With one attempt allowed, fred gives up on a re-send after a
            // lost connection: the command may have run.
            _ if details.starts_with(WRITE_ATTEMPTS) => Error::Connection {
                message: format!("{details} (connection lost)"),
                source,
            },
            // The server's refusals, which fred passes on as Auth only for
            // AUTH itself (a HELLO or a command before it carries the text alone).
            _ if details.contains("NOAUTH") || details.contains("WRONGPASS") => Error::Auth {
                message: details,
                source,
            },
            _ => Error::Redis {
                message: details,
                source,
            },
        }
    }

    /// A connection failure the crate detected itself.
    pub(crate) fn connection(message: impl Into<String>) -> Error {
        Error::Connection {
            message: message.into(),
            source: None,
        }
    }

    /// A reply the crate did not expect, or a server error it rewrote.
    pub(crate) fn redis(message: impl Into<String>) -> Error {
        Error::Redis {
            message: message.into(),
            source: None,
        }
    }

    /// The error reply Redis sent, if this is one.
    pub(crate) fn reply(&self) -> Option<&str> {
        match self {
            Error::Redis { message, .. } => Some(message),
            _ => None,
        }
    }

    /// Names the server in a connection failure and trims fred's debug text
    /// (`Os { code: 111, kind: ConnectionRefused, message: "..." }`) to its message.
    pub(crate) fn connecting_to(self, address: &str) -> Error {
        match self {
            Error::Connection {
                message: details,
                source,
            } => {
                if let Some((_, rest)) = details.split_once("InvalidCertificate(") {
                    let reason = rest.split(')').next().unwrap_or(rest);
                    return Error::Connection {
                        message: format!(
                            "cannot connect to {address}: TLS certificate rejected ({reason}); \
                             is tlsCaFile set to the server's CA?"
                        ),
                        source,
                    };
                }
                let message = details
                    .split_once("message: \"")
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map_or(details.as_str(), |(msg, _)| msg);
                Error::Connection {
                    message: format!("cannot connect to {address}: {message}"),
                    source,
                }
            }
            Error::Timeout(limit) => Error::connection(format!(
                "cannot connect to {address}: no answer within {limit:?}"
            )),
            other => other,
        }
    }

    /// True when a command may or may not have reached Redis (no reply
    /// within the timeout, or the connection failed), or when the crate could
    /// not settle such an outcome ([`Error::OutcomeUnknown`]). The crate
    /// itself resolves these by reading the state before deciding anything;
    /// a caller that retries should do the same, or retry only operations
    /// that are safe to repeat.
    ///
    /// ```
    /// use std::time::Duration;
    /// let err = redisson_lock::Error::Timeout(Duration::from_secs(3));
    /// assert!(err.is_outcome_unknown() && err.is_transient());
    /// ```
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(
            self,
            Error::Timeout(_) | Error::Connection { .. } | Error::OutcomeUnknown { .. }
        )
    }

    /// True for failures that may pass if the same call is made again later:
    /// a timeout, a connection failure (Redis restarting, a failover), an
    /// unsettled outcome, too few replicas confirming, or no primary yet. False for refusals
    /// that will not change by retrying (bad arguments, wrong key type, not
    /// held, lost, bad credentials or configuration, shut down).
    ///
    /// A `lock()` that fails transiently has not taken the lock (an acquire
    /// whose outcome stayed unknown expires within one lease), so calling it
    /// again is safe.
    ///
    /// ```
    /// let err = redisson_lock::Error::InvalidArgument("lock name is empty".into());
    /// assert!(!err.is_transient());
    /// ```
    ///
    /// The server's own refusals during a failover or a load are transient
    /// too (the command did not run): `READONLY` (a demoted primary),
    /// `LOADING`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`, `BUSY` (a long
    /// script), `NOREPLICAS` (`min-replicas-to-write`) and `OOM`
    /// (`maxmemory`); see [`Error::code`].
    pub fn is_transient(&self) -> bool {
        self.is_outcome_unknown()
            || matches!(self, Error::ReplicasNotSynced { .. } | Error::NoPrimary(_))
            || self
                .code()
                .is_some_and(|code| TRANSIENT_CODES.contains(&code))
    }

    /// The error code of a reply Redis sent (`READONLY`, `WRONGTYPE`,
    /// `NOSCRIPT`, `ERR`, ...): its first word, as redis-rs's `code()`.
    /// Redis 6 wraps an error raised inside a script as `ERR Error running
    /// script ... -READONLY ...`; the code is then the inner one. `None` for
    /// any other error.
    ///
    /// ```no_run
    /// # async fn demo(lock: redisson_lock::RLock) {
    /// match lock.lock().await {
    ///     // A demoted primary refused the write: the failover is under way.
    ///     Err(e) if e.code() == Some("READONLY") => assert!(e.is_transient()),
    ///     Err(e) if e.code() == Some("NOPERM") => eprintln!("the ACL refused it: {e}"),
    ///     _ => {}
    /// }
    /// # }
    /// ```
    pub fn code(&self) -> Option<&str> {
        let Error::Redis { message, .. } = self else {
            return None;
        };
        let is_code =
            |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
        let first = message.split_whitespace().next()?;
        if first == "ERR" && message.starts_with("ERR Error running script") {
            if let Some(inner) = message
                .rsplit_once(": -")
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .filter(|w| is_code(w))
            {
                return Some(inner);
            }
        }
        is_code(first).then_some(first)
    }

    /// [`Error::is_outcome_unknown`] for a reply that never came: the crate's
    /// own settlement then reads the state (not for `OutcomeUnknown`, which
    /// already is the result of one).
    pub(crate) fn outcome_unknown(&self) -> bool {
        matches!(self, Error::Timeout(_) | Error::Connection { .. })
    }

    /// True when the server answered `MOVED` or `ASK` and fred, allowed no
    /// redirection (scripts are sent that way), gave up: the node refused
    /// the command, so it did not run.
    pub(crate) fn was_redirected(&self) -> bool {
        matches!(self, Error::Connection { message, .. } if message.starts_with(REDIRECTED))
    }

    /// A `WRONGTYPE` reply as [`Error::WrongType`] of `name`, which should
    /// have been a `expected`; any other error as it is.
    pub(crate) fn of_type(self, name: &str, expected: &'static str) -> Error {
        if self.is_wrong_type() {
            Error::WrongType {
                name: name.to_string(),
                expected,
            }
        } else {
            self
        }
    }

    /// True for a `WRONGTYPE` reply.
    pub(crate) fn is_wrong_type(&self) -> bool {
        // Redis 6 wraps a script's error (`ERR Error running script ...: WRONGTYPE`).
        self.reply().is_some_and(|msg| msg.contains("WRONGTYPE"))
    }

    /// True for `NOSCRIPT`: the server does not have the script cached, so
    /// it did not run, and sending its text instead cannot run it twice.
    pub(crate) fn is_noscript(&self) -> bool {
        matches!(self, Error::Redis { message, .. } if message.starts_with("NOSCRIPT"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::{Error as FredError, ErrorKind};

    /// An unknown outcome keeps what caused it as its source, so a caller
    /// (or an error reporter walking the chain) sees the timeout behind it.
    #[test]
    fn an_unknown_outcome_names_its_cause_as_its_source() {
        let timeout = Error::Timeout(Duration::from_secs(1));
        let unknown = Error::OutcomeUnknown {
            operation: "acquire",
            name: "orders:42".into(),
            cause: format!("{timeout}; then the read back failed"),
            source: Some(Box::new(timeout.clone())),
        };
        let source = std::error::Error::source(&unknown).expect("a source");
        assert_eq!(source.to_string(), timeout.to_string());
        assert!(unknown.is_outcome_unknown());
    }

    /// fred's texts this crate relies on, pinned: a redirect refused under
    /// `max_redirections = 0` may be re-sent, a lost connection may not.
    #[test]
    fn a_redirect_is_told_apart_from_a_lost_connection() {
        let timeout = Duration::from_secs(1);
        let redirected = Error::from_redis(
            &FredError::new(ErrorKind::Routing, "Too many redirections."),
            timeout,
        );
        assert!(redirected.was_redirected() && redirected.outcome_unknown());
        for lost in [
            FredError::new(ErrorKind::Unknown, "Too many failed write attempts."),
            FredError::new(ErrorKind::IO, "Connection closed."),
            FredError::new(ErrorKind::Unknown, "Failed to route command."),
        ] {
            let lost = Error::from_redis(&lost, timeout);
            assert!(lost.outcome_unknown() && !lost.was_redirected(), "{lost:?}");
        }
    }

    /// The other texts and kinds the classification reads, pinned, and the
    /// fred error kept as the source.
    #[test]
    fn fred_errors_are_classified_and_kept_as_the_source() {
        use std::error::Error as _;
        let timeout = Duration::from_secs(1);
        let cases = [
            (
                FredError::new(ErrorKind::Auth, "WRONGPASS invalid username-password pair"),
                "auth",
            ),
            (
                FredError::new(ErrorKind::Unknown, "NOAUTH Authentication required."),
                "auth",
            ),
            (
                FredError::new(ErrorKind::Unknown, "WRONGTYPE Operation against a key"),
                "wrongtype",
            ),
            (
                FredError::new(
                    ErrorKind::Unknown,
                    "ERR Error running script (call to f_1): @user_script:1: WRONGTYPE Operation",
                ),
                "wrongtype",
            ),
            (
                FredError::new(ErrorKind::Unknown, "NOSCRIPT No matching script."),
                "reply",
            ),
            (
                FredError::new(ErrorKind::IO, "Connection reset by peer"),
                "connection",
            ),
            (
                FredError::new(ErrorKind::Canceled, "Canceled."),
                "connection",
            ),
        ];
        for (fred, expected) in cases {
            let err = Error::from_redis(&fred, timeout);
            let kept = err
                .source()
                .and_then(|cause| cause.source())
                .and_then(|s| s.downcast_ref::<FredError>());
            assert_eq!(kept, Some(&fred), "{err:?}");
            let got = match &err {
                Error::Auth { .. } => "auth",
                Error::Redis { .. } if err.is_wrong_type() => "wrongtype",
                Error::Redis { .. } => "reply",
                Error::Connection { .. } => "connection",
                _ => "other",
            };
            assert_eq!(got, expected, "{err:?}");
            assert_eq!(err.is_transient(), expected == "connection", "{err:?}");
        }
        let timed_out = Error::from_redis(&FredError::new(ErrorKind::Timeout, "t"), timeout);
        assert!(matches!(timed_out, Error::Timeout(t) if t == timeout));
        assert!(timed_out.is_outcome_unknown() && timed_out.is_transient());
        assert!(Error::redis("x").source().is_none());
    }
}
