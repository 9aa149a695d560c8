//! The crate's error type.

use std::time::Duration;

/// Errors returned by this crate.
///
/// A rejected call ([`Error::InvalidArgument`], [`Error::WrongType`],
/// [`Error::NotHeld`]) has changed nothing on Redis.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock is not held by this owner: Redisson's `IllegalMonitorStateException`.
    /// Returned when unlocking a lock that someone else holds, that expired, or
    /// that was already fully released.
    #[error("attempt to unlock lock `{name}`, not locked by owner `{field}`")]
    NotHeld {
        /// Lock name.
        name: String,
        /// Owner field that tried to unlock (`<client-id>:<owner-id>`).
        field: String,
    },
    /// The guard's lock was lost (a renewal found it gone, or its lease ran out
    /// before a renewal was confirmed), so releasing it sent nothing to Redis.
    #[error("lock `{name}` was lost before it was released (lease expired or deleted)")]
    LockLost {
        /// Lock name.
        name: String,
    },
    /// The key exists but holds another type of value than the object uses
    /// (a string where a lock hash belongs, a hash where a semaphore's
    /// counter belongs). The key was left untouched.
    #[error("key `{name}` is not a {expected} (WRONGTYPE)")]
    WrongType {
        /// The offending key.
        name: String,
        /// What the object expected there: `lock`, `semaphore`, ...
        expected: &'static str,
    },
    /// A bad argument: empty or malformed name, zero or out-of-range duration.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Invalid configuration or URL.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// No reply from Redis within the configured timeout.
    #[error("no reply from Redis within {0:?}")]
    Timeout(Duration),
    /// The connection to Redis failed or is down.
    #[error("Redis connection error: {0}")]
    Connection(String),
    /// Redis refused the credentials.
    #[error("Redis authentication failed: {0}")]
    Auth(String),
    /// Redis answered with an error.
    #[error("Redis error: {0}")]
    Redis(String),
    /// A script was sent but its reply was lost, and reading the state
    /// afterwards did not succeed either, so whether it ran is unknown. An
    /// acquire in this state expires on its own within one lease.
    #[error("outcome of `{operation}` on `{name}` is unknown: {cause}")]
    OutcomeUnknown {
        /// What was sent (acquire, unlock, ...).
        operation: &'static str,
        /// Lock name.
        name: String,
        /// Why it could not be resolved.
        cause: String,
    },
    /// Too few replicas confirmed a lock write within `slavesSyncTimeout`
    /// (Redisson's `NoSyncedSlavesException`), on every attempt. An acquire
    /// was undone before this is returned; an unlock or force-unlock did
    /// happen on the primary but may be lost if it fails over now.
    #[error(
        "lock `{name}`: {operation} reached {acked} of {connected} replicas; {required} required"
    )]
    ReplicasNotSynced {
        /// What was sent (acquire, unlock, force_unlock).
        operation: &'static str,
        /// Lock name.
        name: String,
        /// Replicas that confirmed on the last attempt.
        acked: i64,
        /// Replicas connected to the primary.
        connected: i64,
        /// What the quorum asked for (`>= 1`, `all`, or a number).
        required: String,
    },
    /// The client was shut down.
    #[error("the client is shut down")]
    Shutdown,
}

/// fred's error when a command met a redirect it was not allowed to follow.
const REDIRECTED: &str = "Too many redirections";

/// Shorthand for `Result<T, redisson_lock::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Maps a fred error into this crate's error. `timeout` is the command
    /// timeout in force, reported by [`Error::Timeout`].
    pub(crate) fn from_redis(err: &fred::error::Error, timeout: Duration) -> Error {
        use fred::error::ErrorKind;
        let details = err.details().to_string();
        match err.kind() {
            ErrorKind::Timeout => Error::Timeout(timeout),
            // A MOVED/ASK refused under `max_redirections = 0`: the node did not
            // run the command (see `was_redirected`).
            ErrorKind::Routing if details.starts_with(REDIRECTED) => Error::Connection(details),
            // Routing: fred found no connection to send it on (the server is down).
            ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Backpressure | ErrorKind::Routing => {
                Error::Connection(details)
            }
            ErrorKind::Auth => Error::Auth(details),
            ErrorKind::Url | ErrorKind::Config => Error::Config(details),
            // fred 10 reports "no connection to write to" as Unknown with this
            // text (router/commands.rs); it is a connection failure.
            _ if details.starts_with("Failed to route command") => Error::Connection(details),
            // With one attempt allowed, fred gives up on a re-send after a
            // lost connection: the command may have run.
            _ if details.starts_with("Too many failed write attempts") => {
                Error::Connection(format!("{details} (connection lost)"))
            }
            _ if details.contains("NOAUTH") || details.contains("WRONGPASS") => {
                Error::Auth(details)
            }
            _ => Error::Redis(details),
        }
    }

    /// Names the server in a connection failure and trims fred's debug text
    /// (`Os { code: 111, kind: ConnectionRefused, message: "..." }`) to its message.
    pub(crate) fn connecting_to(self, address: &str) -> Error {
        match self {
            Error::Connection(details) => {
                if let Some((_, rest)) = details.split_once("InvalidCertificate(") {
                    let reason = rest.split(')').next().unwrap_or(rest);
                    return Error::Connection(format!(
                        "cannot connect to {address}: TLS certificate rejected ({reason}); \
                         is tlsCaFile set to the server's CA?"
                    ));
                }
                let message = details
                    .split_once("message: \"")
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map_or(details.as_str(), |(msg, _)| msg);
                Error::Connection(format!("cannot connect to {address}: {message}"))
            }
            Error::Timeout(limit) => Error::Connection(format!(
                "cannot connect to {address}: no answer within {limit:?}"
            )),
            other => other,
        }
    }

    /// True when a command may or may not have reached Redis: its outcome must
    /// be resolved by reading the state before anything else is decided.
    pub(crate) fn outcome_unknown(&self) -> bool {
        matches!(self, Error::Timeout(_) | Error::Connection(_))
    }

    /// True when the server answered `MOVED` or `ASK` and fred, allowed no
    /// redirection (scripts are sent that way), gave up: the node refused
    /// the command, so it did not run.
    pub(crate) fn was_redirected(&self) -> bool {
        matches!(self, Error::Connection(msg) if msg.starts_with(REDIRECTED))
    }

    /// True for a `WRONGTYPE` reply.
    pub(crate) fn is_wrong_type(&self) -> bool {
        matches!(self, Error::Redis(msg) if msg.contains("WRONGTYPE"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::{Error as FredError, ErrorKind};

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
}
