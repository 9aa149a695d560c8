//! Taking and returning leased permits: the arguments of the
//! permit-expirable semaphore's acquire and release scripts, and how their
//! replies read.

use std::sync::LazyLock;
use std::time::Duration;

use fred::types::Value;

use super::lease::{deadline, NEVER};
use super::{ExpirablePermits, PermitId, RPermitExpirableSemaphore};
use crate::acquire::Keep;
use crate::engine::lease::lease_millis;
use crate::engine::loan::{LoanLease, Renew};
use crate::engine::script::{self, Latch, Script, ScriptCall};
use crate::error::{Error, Result};
use crate::naming;
use crate::sync::now_ms;
use crate::sync::pool::{permits_arg, Answer, Pool, Taken};

static TRY_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../lua/permit_expirable/try_acquire.lua"
    ))
});
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::walking(include_str!("../../../lua/permit_expirable/release.lua")));
/// What is asked for.
#[derive(Clone, Copy)]
pub(super) struct Terms {
    permits: u32,
    /// How long the permits stay taken.
    lease: Lease,
}

/// How long permits stay taken on Redis.
#[derive(Clone, Copy)]
enum Lease {
    Forever,
    Fixed(Duration),
    /// For this lease (`None`: the watchdog timeout, renewed by the
    /// watchdog), renewed every third of it until given back.
    KeptAlive(Option<Duration>),
}

impl Terms {
    pub(super) fn new(permits: u32, lease: Option<Duration>, keep: Keep) -> Result<Self> {
        permits_arg(permits)?;
        let lease = match (lease, keep) {
            (Some(lease), _) => {
                lease_millis(lease, "lease")?;
                Lease::Fixed(lease)
            }
            (None, Keep::Forever) => Lease::Forever,
            (None, Keep::KeptAlive) => Lease::KeptAlive(None),
            (None, Keep::KeptAliveFor(lease)) => {
                lease_millis(lease, "kept-alive lease")?;
                if lease < Duration::from_millis(3) {
                    return Err(Error::InvalidArgument(format!(
                        "a kept-alive lease is renewed every third of it: at least 3ms, got {lease:?}"
                    )));
                }
                Lease::KeptAlive(Some(lease))
            }
        };
        Ok(Terms { permits, lease })
    }
}

/// One acquire attempt with fresh ids (see [`Pool::take`]).
pub(super) async fn take(
    semaphore: RPermitExpirableSemaphore,
    terms: Terms,
) -> Result<Taken<ExpirablePermits>> {
    let pool = semaphore.pool.clone();
    let ids: Vec<PermitId> = (0..terms.permits).map(|_| PermitId::random()).collect();
    let watchdog = pool.engine().config.lock_watchdog_timeout;
    let (lease, loan_lease) = match terms.lease {
        Lease::KeptAlive(own) => {
            let expected = ids.len();
            let (semaphore, ids) = (semaphore.clone(), ids.clone());
            let renew: Renew = Box::new(move |lease| {
                let (semaphore, ids) = (semaphore.clone(), ids.clone());
                Box::pin(async move { semaphore.renew(&ids, lease).await })
            });
            let lasts = own.unwrap_or(watchdog);
            (
                Some(lasts),
                LoanLease::KeptAlive {
                    renew,
                    expected,
                    own,
                },
            )
        }
        Lease::Fixed(lease) => (Some(lease), LoanLease::Fixed(lease)),
        Lease::Forever => (None, LoanLease::Forever),
    };
    let deadline = deadline(lease)?;
    let keys = [
        pool.name().to_string(),
        semaphore.leases_key(),
        semaphore.channel(),
    ];
    let publish = pool.publish();
    let owned = ids.clone();
    let taken = semaphore
        .pool
        .take(
            |latch| {
                let head = vec![
                    i64::from(terms.permits).into(),
                    deadline.into(),
                    now_ms().into(),
                    NEVER.into(),
                    publish.clone(),
                    latch.ttl_ms.into(),
                ];
                with_ids(&TRY_ACQUIRE, &keys, head, &ids, latch)
            },
            answer,
            move || {
                let (pool, ids) = (pool.clone(), owned.clone());
                Box::pin(async move { release(&pool, &ids).await })
            },
            loan_lease,
        )
        .await?;
    Ok(taken.map(|lent| ExpirablePermits {
        semaphore,
        ids,
        lent,
    }))
}

/// Reads the acquire script's reply: `OK`, or none free with when the
/// earliest lease ends (`:<ms>`, wall clock), or none free and no lease
/// ends (nil).
fn answer(reply: &Value) -> Result<Answer> {
    let text = match reply {
        Value::Null => return Ok(Answer::Refused(None)),
        other => other.as_string().unwrap_or_default(),
    };
    if let Some(at) = text.strip_prefix(':') {
        let at = at
            .parse::<f64>()
            .map_err(|_| script::unexpected("acquire", reply))?;
        // The earliest lease's end frees a permit without any message. Any
        // number may come back: `as` saturates, and so does the subtraction.
        let left = (at as i64).saturating_sub(now_ms()).max(1) as u64;
        return Ok(Answer::Refused(Some(Duration::from_millis(left))));
    }
    if text != "OK" {
        return Err(script::unexpected("acquire", reply));
    }
    Ok(Answer::Granted)
}

/// Returns the permits `ids`; how many were still leased.
pub(super) async fn release(pool: &Pool, ids: &[PermitId]) -> Result<usize> {
    let name = pool.name().to_string();
    let keys = [
        name.clone(),
        pool.channel(),
        naming::permit_timeout_name(&name),
    ];
    let publish = pool.publish();
    let reply = pool
        .object
        .synced_request("release", |latch| {
            let head = vec![now_ms().into(), publish.clone(), latch.ttl_ms.into()];
            with_ids(&RELEASE, &keys, head, ids, latch)
        })
        .await?;
    script::as_i64(&reply)
        .map(|n| n.max(0) as usize)
        .ok_or_else(|| script::unexpected("release", &reply))
}

/// A call of `script` on `keys` and the request latch, with the arguments
/// `head` and then the permit ids.
fn with_ids(
    script: &'static Script,
    keys: &[String],
    head: Vec<Value>,
    ids: &[PermitId],
    latch: &Latch,
) -> ScriptCall {
    let mut args = head;
    args.extend(ids.iter().map(|id| id.to_value()));
    let mut keys = keys.to_vec();
    keys.push(latch.key.clone());
    ScriptCall { script, keys, args }
}
