//! The engine every lock object runs on, one per client, the way tokio's
//! `Mutex`, `RwLock` and `Semaphore` all sit on one `batch_semaphore`.
//!
//! A public object ([`crate::RLock`], [`crate::RFairLock`], the read and
//! write locks of [`crate::RReadWriteLock`]) is a thin handle on a
//! [`raw::RawLock`]: this engine, a [`kind::LockKind`] that describes the
//! object (its scripts, keys, channel, wake-ups, renewal), and a name. The
//! engine does the rest, the same way for every kind:
//!
//! | module | job |
//! |---|---|
//! | `raw` | `RawLock` (what objects wrap) and `Held` (what guards wrap) |
//! | `queries` | what objects read about a lock: held, by whom, how often, TTL |
//! | `wait` | the waiting loop: attempt, join the channel, sleep until a wake-up, TTL, deadline or shutdown |
//! | `attempt` | one acquire attempt of a prepared `kind::Call`: what the script did, whether to keep it, recording it |
//! | `resolve` | what Redis holds when the client is not sure: lost replies read back, holds given back |
//! | `release` | one release with the hold's slot: the unlock, then the books |
//! | `unlock` | the kind's unlock (or undo) sent once, replayed through the unlock latch |
//! | `settle` | cancel safety: finishing what a caller abandoned; a waiter's give-up |
//! | `hub` | one subscription per channel per client, waking waiters per the kind's policy |
//! | `watchdog` | one timer renewing every held lock, in batches per renewal and slot |
//! | `hold`, `lease` | what this client holds, lease deadlines, the lost signal |
//! | `script`, `replica_sync` | sending a script once, and waiting for the replicas the deployment's view (`crate::topology`) says must confirm it |
//! | `unlock_latch` | batched deletion of settled unlock latches |
//! | `telemetry` | tracing spans and `metrics` figures, named in one place |
//! | `observe` | a lock's holders as a stream, woken by its channel without taking a waiter's wake-up |
//! | `registry` | this client's entry in the client registry (who it is), and reading others' |
//! | `lifecycle`, `reentry`, `connection` | shutdown, scoped re-entry (of futures, and of the blocking API's closures), building the connections |

pub(crate) mod attempt;
pub(crate) mod coalesce;
pub(crate) mod connection;
pub(crate) mod hold;
pub(crate) mod hub;
pub(crate) mod kind;
pub(crate) mod lease;
pub(crate) mod lifecycle;
pub(crate) mod loan;
pub(crate) mod object;
pub(crate) mod observe;
pub(crate) mod operations;
pub(crate) mod queries;
pub(crate) mod raw;
pub(crate) mod reentry;
pub(crate) mod registry;
pub(crate) mod release;
pub(crate) mod replica_sync;
pub(crate) mod request;
pub(crate) mod resolve;
pub(crate) mod safety;
pub(crate) mod script;
pub(crate) mod settle;
pub(crate) mod telemetry;
pub(crate) mod unlock;
pub(crate) mod unlock_latch;
pub(crate) mod wait;
pub(crate) mod watchdog;

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::Value;
use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::naming;
use coalesce::{Lane, Route, Way};
use hold::Holds;
use hub::Hub;
use lifecycle::Lifecycle;
use replica_sync::ReplicaSync;
use safety::Synced;
use script::{ScriptCall, WaitFor};
use unlock_latch::LatchSweeper;
use watchdog::WatchdogStats;

/// The client's wall clock in ms since the Unix epoch: the clock Redisson's
/// scripts compare deadlines with (it passes `System.currentTimeMillis()`).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A fred command's reply, awaited through a box.
///
/// fred's command futures nest many futures deep, and rustc lays out every
/// future inside a spawned one in the crate that spawns it: with fred's
/// futures inline at the bottom of ours, `tokio::spawn(async move {
/// lock.lock().await })` went past rustc's default recursion limit in a
/// fresh build ("queries overflow the depth limit"). Behind `dyn`, the layout
/// stops here. One allocation per command; tests/spawnable.rs keeps the
/// depth of every public future under half the default limit.
///
/// `call` makes the future once the box is there, so that it is built in
/// the box: fred's future for a command is 6.9 KB, and built beside the box
/// it was copied into it, twice per lock and unlock (issue 38).
pub(crate) fn boxed_reply<'a, T, F>(
    call: impl FnOnce() -> F,
) -> BoxFuture<'a, std::result::Result<T, fred::error::Error>>
where
    F: std::future::Future<Output = std::result::Result<T, fred::error::Error>> + Send + 'a,
{
    let boxed: Box<F> = Box::write(Box::new_uninit(), call());
    Box::into_pin(boxed)
}

/// The state one client shares with every lock object it hands out.
pub(crate) struct Engine {
    /// The client's id: the `<client-id>` of its lock fields.
    pub(crate) id: Arc<str>,
    pub(crate) config: Config,
    /// The command connection (queries, latch deletions).
    pub(crate) redis: Client,
    /// Connections for lock writes; a lock always uses the same one, so a read
    /// that resolves a lost reply is ordered after the write. Just `redis` on
    /// a single server; a pool on replicated deployments, where each write's
    /// WAIT occupies its connection until the replicas answer. Each with
    /// the queue that batches its scripts under load.
    writers: Vec<Arc<Lane>>,
    /// The watchdog's renewals: a connection of their own on replicated
    /// deployments (`writers[0]` on a single server, where nothing waits).
    /// Redis runs a connection's commands in order, so a renewal sent behind
    /// an acquisition's `WAIT` waited for it even when it needed none: with
    /// a replica asleep, a renewal the view no longer held back came back
    /// after its hold's deadline. Behind other renewals only, each `WAIT`
    /// ends before the earliest deadline it would move.
    renewer: Arc<Lane>,
    pub(crate) replica_sync: ReplicaSync,
    pub(crate) hub: Arc<Hub>,
    pub(crate) holds: Holds,
    /// Permits taken and not yet given back.
    pub(crate) loans: loan::Loans,
    pub(crate) latches: LatchSweeper,
    /// Multi-key commands must stay within one hash slot: a Redis Cluster, or
    /// a cluster behind a single proxy address (found by a probe at connect).
    pub(crate) slot_grouped: bool,
    /// `PUBLISH` or `SPUBLISH`, passed to the scripts.
    pub(crate) publish_command: &'static str,
    pub(crate) stats: watch::Sender<WatchdogStats>,
    pub(crate) lifecycle: Arc<Lifecycle>,
    /// This client's registry entry (`None`: the registry is off).
    pub(crate) registry: Option<registry::Entry>,
    /// The data connections' settings (on Sentinel, pointed at the primary
    /// the view names), for connections opened later (`extra_subscriber`).
    pub(crate) data: fred::types::config::Config,
}

impl Engine {
    /// [`Engine::publish_command`] as a script argument: static, so that
    /// neither making it nor fred's copy of it allocates (issue 38).
    pub(crate) fn publish_arg(&self) -> Value {
        Value::from_static_str(self.publish_command)
    }

    pub(crate) fn ensure_open(&self) -> Result<()> {
        if self.lifecycle.is_closing() {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.config.timeout
    }

    /// How many write connections there are.
    pub(crate) fn writer_count(&self) -> usize {
        self.writers.len()
    }

    /// The connection that carries every write of lock `name`.
    pub(crate) fn writer(&self, name: &str) -> &Client {
        self.writer_of_slot(naming::slot(name))
    }

    /// Reads of lock `name`, on its writer so that they are ordered after
    /// its writes. Unlike a script, a read may safely be re-sent and follow
    /// a redirect, so it gets back what the writer's connection forbids.
    pub(crate) fn reader(&self, name: &str) -> fred::clients::WithOptions<Client> {
        let options = fred::types::config::Options {
            max_attempts: Some(3),
            max_redirections: Some(5),
            ..Default::default()
        };
        self.writer(name).with_options(&options)
    }

    fn writer_of_slot(&self, slot: u16) -> &Client {
        self.lane_of_slot(slot).client()
    }

    fn lane_of_slot(&self, slot: u16) -> &Arc<Lane> {
        &self.writers[usize::from(slot) % self.writers.len()]
    }

    /// Runs the lock script `build` makes once, on the writer of its first
    /// key, followed on a replicated deployment by the `WAIT` the
    /// deployment's view asks for (see `replica_sync`), and says what the
    /// replicas confirmed. `build` runs again only if the server does not
    /// have the script cached, or if the node refused it with a redirect
    /// (see [`Engine::resend_redirected`]).
    pub(crate) fn write<'a>(
        &'a self,
        build: impl Fn() -> ScriptCall + Sync + 'a,
    ) -> impl std::future::Future<Output = Result<(Value, Synced)>> + 'a {
        self.write_by(build, None, false)
    }

    /// A renewal: [`Engine::write`] on the renewal connection, its `WAIT`
    /// answered by `by` at the latest (a renewal must be judged before the
    /// deadline it would move passes).
    pub(crate) fn renew<'a>(
        &'a self,
        build: impl Fn() -> ScriptCall + Sync + 'a,
        by: Option<tokio::time::Instant>,
    ) -> impl std::future::Future<Output = Result<(Value, Synced)>> + 'a {
        self.write_by(build, by, true)
    }

    /// [`Engine::write`], or a renewal ([`Engine::renew`]).
    async fn write_by(
        &self,
        build: impl Fn() -> ScriptCall + Sync,
        by: Option<tokio::time::Instant>,
        renewal: bool,
    ) -> Result<(Value, Synced)> {
        let mut resends = 0;
        loop {
            let call = build();
            let slot = naming::slot(&call.keys[0]);
            let lane = match renewal {
                true => &self.renewer,
                false => self.lane_of_slot(slot),
            };
            let writer = lane.client();
            // Nothing is sent on a connection that still reaches an old primary.
            let plan = self.replica_sync.plan(writer, slot)?;
            let wait = plan.wait().map(|wait| WaitFor { by, ..wait });
            let sent = self.send(lane, slot, call, &build, wait).await;
            match sent {
                Err(e) if self.resend_redirected(&e, &mut resends) => {}
                Err(e) => return Err(e),
                Ok((reply, acked)) => {
                    let synced = self.replica_sync.judge(plan, acked, writer, slot);
                    return Ok((reply, synced));
                }
            }
        }
    }

    /// Runs a read whose error stays untyped (it only ever becomes part of
    /// another error, or a log line). See [`Engine::query`].
    pub(crate) fn read<'a, T: 'a>(
        &'a self,
        call: impl std::future::Future<Output = std::result::Result<T, fred::error::Error>> + Send + 'a,
    ) -> impl std::future::Future<Output = Result<T>> + 'a {
        self.query(call, |e| e)
    }

    /// Runs a read (safe to send again), its error passed through
    /// `wrong_type`, which names the object's type.
    ///
    /// Not an `async fn`: `call` is boxed before the future that awaits it
    /// exists, so fred's future is not inlined in it (see [`boxed_reply`]).
    pub(crate) fn query<'a, T: 'a>(
        &'a self,
        call: impl std::future::Future<Output = std::result::Result<T, fred::error::Error>> + Send + 'a,
        wrong_type: impl FnOnce(Error) -> Error + 'a,
    ) -> impl std::future::Future<Output = Result<T>> + 'a {
        let call = boxed_reply(|| call);
        async move {
            call.await
                .map_err(|e| wrong_type(Error::from_redis(&e, self.config.timeout)))
        }
    }

    /// Runs the script `build` makes once on the writer of its first key,
    /// without waiting for replicas: reads, and writes a replica loses no
    /// lock by missing.
    pub(crate) async fn run_unsynced(
        &self,
        build: impl Fn() -> ScriptCall + Sync,
    ) -> Result<Value> {
        let mut resends = 0;
        loop {
            let call = build();
            let slot = naming::slot(&call.keys[0]);
            match self
                .send(self.lane_of_slot(slot), slot, call, &build, None)
                .await
            {
                Err(e) if self.resend_redirected(&e, &mut resends) => {}
                done => return done.map(|(reply, _)| reply),
            }
        }
    }

    /// Sends `call` once on the writer of `slot`, followed by `wait`: on its
    /// own when nothing else of that connection awaits a reply, otherwise in
    /// the batch of this scheduler tick (one `WAIT` after the batch, and
    /// one `WAIT` in flight per connection); a script that walks data on
    /// its own, after the connection's previous one was answered (see
    /// [`coalesce`]), unless it walks only keys it may find absent
    /// ([`Script::walking_over`](script::Script::walking_over)). Returns
    /// the reply and the replicas that acknowledged.
    ///
    /// Not an `async fn`: the choice is made before a future exists, so the
    /// common path's future is [`Engine::send_by`]'s alone.
    fn send<'a>(
        &'a self,
        lane: &'a Arc<Lane>,
        slot: u16,
        call: ScriptCall,
        build: &'a (dyn Fn() -> ScriptCall + Sync),
        wait: Option<WaitFor>,
    ) -> impl std::future::Future<Output = coalesce::Reply> + Send + 'a {
        use futures::future::Either;
        let script = call.script;
        // A script that walks data waits for a place among the few of them
        // the connection may have in flight (see `coalesce`): Redis then
        // serves other clients between them. One that walks only some keys'
        // data takes a place if one is free, and when all are taken by
        // other locks' scripts goes out with the others, run only if it
        // finds that data absent; if it did not run, it waits for a place.
        // While a script of its own lock (its slot) is in flight, the lock
        // is most likely contended and the data there: it waits for its
        // place as any walking script, rather than spend a round trip.
        let walking = match (script.walks(), script.checked()) {
            (false, _) => {
                return Either::Left(self.send_by(lane, slot, call, build, wait, Way::Any, None))
            }
            (true, false) => None,
            (true, true) if lane.slot_busy(slot) => None,
            (true, true) => match lane.try_walking(slot) {
                Some(places) => Some(places),
                None => {
                    // Boxed: only walking scripts come here, and the
                    // callers of every other script would otherwise carry
                    // this path in their futures.
                    let checked: futures::future::BoxFuture<'a, coalesce::Reply> =
                        Box::pin(async move {
                            match self
                                .send_by(lane, slot, call, build, wait, Way::Checked, None)
                                .await
                            {
                                Err(e) if coalesce::was_not_run(&e) => {
                                    self.send_by(
                                        lane,
                                        slot,
                                        build(),
                                        build,
                                        wait,
                                        Way::Walking,
                                        None,
                                    )
                                    .await
                                }
                                done => done,
                            }
                        });
                    return Either::Right(checked);
                }
            },
        };
        Either::Left(self.send_by(lane, slot, call, build, wait, Way::Walking, walking))
    }

    /// [`Engine::send`]'s call: `Way::Walking` holds its places (`walking`,
    /// or waits for them) until the reply.
    #[allow(clippy::too_many_arguments)]
    async fn send_by<'a>(
        &'a self,
        lane: &'a Arc<Lane>,
        slot: u16,
        call: ScriptCall,
        build: &'a (dyn Fn() -> ScriptCall + Sync),
        wait: Option<WaitFor>,
        way: Way,
        walking: Option<coalesce::Walking<'a>>,
    ) -> coalesce::Reply {
        let _walking = match (way, walking) {
            (Way::Walking, None) => Some(lane.walking(slot).await),
            (_, places) => places,
        };
        lane.after_abandoned().await;
        // Its turn at the connection's one `WAIT`, taken after the abandoned
        // calls were answered: they may be queued behind that turn.
        let _turn = match way {
            Way::Walking => lane.wait_turn(wait, slot).await,
            Way::Any | Way::Checked => None,
        };
        let timeout = self.config.timeout;
        match lane.route(call, slot, wait, way) {
            Route::Alone(call, _in_flight) if way == Way::Checked => {
                // Boxed for the reason above.
                let checked: futures::future::BoxFuture<'_, coalesce::Reply> =
                    Box::pin(lane.run_checked(call, slot, wait));
                checked.await
            }
            Route::Alone(call, _in_flight) => {
                call.script
                    .run(lane.client(), timeout, slot, call, build, wait)
                    .await
            }
            Route::Queued(waiting) => waiting.reply().await,
        }
    }

    /// Returns once every script abandoned by its caller on the writer of
    /// lock `name` has been sent: a settlement reads after it.
    pub(crate) async fn after_abandoned(&self, name: &str) {
        self.lane_of_slot(naming::slot(name))
            .after_abandoned()
            .await;
    }

    /// Whether to send a script again after `e`: yes, up to `retry_attempts`
    /// times, when a node refused it with `MOVED` or `ASK`. It did not run
    /// there, so sending it to the slot's owner cannot apply it twice, and
    /// after a `MOVED` fred has re-read the slot map before giving up.
    fn resend_redirected(&self, e: &Error, resends: &mut u32) -> bool {
        let resend = e.was_redirected() && *resends < self.config.retry_attempts;
        *resends += u32::from(resend);
        resend
    }

    /// How long shutdown waits for operations in flight: an unlock's whole
    /// retry budget (its latch lifetime) plus one more command.
    pub(crate) fn settle_budget(&self) -> Duration {
        request::latch_ttl(self) + self.config.timeout
    }

    /// Shuts the engine down; see `RedissonClient::shutdown`.
    pub(crate) async fn shutdown(self: &Arc<Self>) {
        if !self.lifecycle.begin_closing() {
            return;
        }
        if !self.lifecycle.until_idle(self.settle_budget()).await {
            tracing::warn!("shutdown: operations still running after the settle budget; going on");
        }
        for loan in self.loans.all() {
            if let Err(e) = loan.settle().await {
                tracing::warn!(error = %e, "shutdown: giving back permits failed");
            }
        }
        for hold in self.holds.all() {
            let lock = raw::RawLock::new(self.clone(), hold.kind(), &hold.name);
            while hold.count() > 0 && !hold.is_retired() {
                let watchdog = hold.next_release_is_watchdog();
                if settle::release(&lock, &hold, watchdog).await.is_err() {
                    break;
                }
            }
            // Guards still around hold nothing any more.
            hold.lease.mark_gone();
        }
        // The latches of every unlock above, before their connection closes.
        self.latches.flush(self.config.timeout).await;
        registry::remove(self).await;
        self.lifecycle.stop();
        self.hub.quit().await;
        self.replica_sync.quit().await;
        let _ = self.redis.quit().await;
        for writer in self.writers.iter().chain([&self.renewer]) {
            let _ = writer.client().quit().await;
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.lifecycle.stop();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let mut clients = vec![self.redis.clone()];
            clients.extend(
                self.writers
                    .iter()
                    .chain([&self.renewer])
                    .map(|w| w.client().clone()),
            );
            runtime.spawn(async move {
                for client in clients {
                    let _ = client.quit().await;
                }
            });
        }
    }
}
