//! The operations every lock object calls on the engine: on a lock
//! ([`RawLock`]): acquire (the waiting loop, `wait`), a release without a
//! guard (`settle`), force unlock and delete; on a hold ([`Held`]): its
//! release, on `unlock` or on drop, and a new lease. The top of the
//! engine's hold lifecycle: it calls down into the stages, which never call
//! up into it.

use std::time::Duration;

use crate::engine::kind::Patience;
use crate::engine::raw::{Granted, Held, RawLock, Unlocked};
use crate::engine::request::Request;
use crate::engine::safety::Synced;
use crate::engine::script::{self, ScriptCall};
use crate::engine::{settle, unlock, wait};
use crate::error::{Error, Result};
use crate::owner::OwnerId;

/// `lua/engine/delete.lua`: deletes an object's keys.
static DELETE: std::sync::LazyLock<script::Script> =
    std::sync::LazyLock::new(|| script::Script::new(include_str!("../../lua/engine/delete.lua")));

impl RawLock {
    /// Acquires for the current (or a new) owner, waiting as long as it
    /// takes: only the lock, or an error, ends it.
    pub(crate) async fn acquire_forever(&self, lease: Option<Duration>) -> Result<Granted> {
        loop {
            // A wait without a limit comes back with the lock or an error;
            // were it ever to come back empty-handed, it would wait again.
            if let Some(granted) = self.acquire(lease, Patience::Forever).await? {
                return Ok(granted);
            }
        }
    }

    /// Acquires for the current (or a new) owner, waiting as `patience` says.
    pub(crate) async fn acquire(
        &self,
        lease: Option<Duration>,
        patience: Patience,
    ) -> Result<Option<Granted>> {
        if let Some(lease) = lease {
            crate::engine::lease::lease_millis(lease, "lease")?;
        }
        wait::acquire(self, lease, patience).await
    }

    /// Releases one hold of the current owner without a guard (Redisson's
    /// `unlock()`).
    pub(crate) async fn unlock(&self) -> Result<Unlocked> {
        self.engine.ensure_open()?;
        // Outside a scope nobody is the current owner: an unused owner's
        // unlock finds nothing to release, on Redis as here.
        let owner = self.acquiring_owner();
        match self.engine.holds.get(self.kind, &self.name, owner) {
            Some(hold) => {
                let watchdog = hold.next_release_is_watchdog();
                settle::release(self, &hold, watchdog).await
            }
            None => {
                let field = self.field_of(owner);
                let lease = self.engine.config.lock_watchdog_timeout;
                let call = self.call(&field, lease, Patience::Once);
                unlock::send_unlock(&call, &Request::new())
                    .await
                    .map(|(unlocked, _)| unlocked)
            }
        }
    }

    /// Deletes the lock whoever holds it and wakes its waiters; with
    /// `holder` (a client id and an owner), only while that holder is in it,
    /// checked inside the script.
    pub(crate) async fn force_unlock(&self, holder: Option<(&str, &str)>) -> Result<bool> {
        let only_while = holder
            .map(|(client, owner)| self.holder_field(client, owner))
            .transpose()?;
        self.engine.ensure_open()?;
        let call = || {
            self.kind
                .force_unlock(&self.engine, &self.name, only_while.as_deref())
        };
        let (reply, synced) = self
            .engine
            .write(call)
            .await
            .map_err(|e| self.wrong_type(e))?;
        self.deleted("force_unlock", script::as_i64(&reply) == Some(1), synced)
    }

    /// The hash field of another client's holder, as `status` and
    /// `inspect` show it: a client id and a numeric owner (a Java thread id
    /// or an owner id).
    fn holder_field(&self, client_id: &str, owner: &str) -> Result<String> {
        if client_id.is_empty() || client_id.contains(char::is_whitespace) {
            return Err(Error::InvalidArgument(format!(
                "a holder's client id is a non-empty word (as `status` shows it), got {client_id:?}"
            )));
        }
        let owner = owner.parse::<u64>().map_err(|_| {
            Error::InvalidArgument(format!(
                "a holder's owner is a number (a thread id or an owner id, as `status` shows it), got {owner:?}"
            ))
        })?;
        Ok(self.kind.field(client_id, OwnerId::read(owner)))
    }

    /// Deletes `keys`, the lock's keys, whoever holds it and without a
    /// message (Redisson's `delete()`: one `DEL`, sent once here). Returns
    /// whether any of them existed.
    pub(crate) async fn delete(&self, keys: Vec<String>) -> Result<bool> {
        self.engine.ensure_open()?;
        let call = || ScriptCall {
            script: &DELETE,
            keys: keys.clone(),
            args: vec![],
        };
        let (reply, synced) = self.engine.write(call).await?;
        let deleted = script::as_i64(&reply).is_some_and(|n| n > 0);
        self.deleted("delete", deleted, synced)
    }

    /// What a forced delete reports: the local holds are dropped once the
    /// keys are gone, and a delete the replicas did not confirm is an error
    /// even so (it happened on the primary and may be undone by a failover).
    fn deleted(&self, operation: &'static str, deleted: bool, synced: Synced) -> Result<bool> {
        if deleted {
            self.mark_deleted();
        }
        if synced.is_short() {
            return Err(self
                .engine
                .replica_sync
                .not_synced(operation, &self.name, synced));
        }
        Ok(deleted)
    }

    /// The lock's hash is gone: every hold on it, of any kind, is lost.
    /// Holds still at zero may belong to an acquire in flight that runs
    /// after the delete and really takes the lock.
    fn mark_deleted(&self) {
        for hold in self.engine.holds.of_name(&self.name) {
            if hold.count() > 0 {
                hold.lease.mark_gone();
            }
        }
    }
}

impl Held {
    /// Sets the hold's lease (it is not renewed from then on), if the lock
    /// is still this owner's: the kind's renewal script for this one hold,
    /// to `lease`. Returns whether Redis still had it.
    ///
    /// It follows the watchdog's rules: it runs with the hold's `ops` slot
    /// (never beside a release or a renewal of the same hold), the deadline
    /// moves only when the replicas confirmed it (otherwise the hold is at
    /// risk, and its deadline is the earlier of the old one and the new
    /// lease's), and a renewal that finds the field gone marks the hold gone.
    pub(crate) async fn set_lease(&self, lease: Duration) -> Result<bool> {
        let lease_ms = crate::engine::lease::lease_millis(lease, "lease")?;
        let _busy = self.engine.lifecycle.enter()?;
        let _slot = self.hold.ops.acquire().await.map_err(|_| Error::Shutdown)?;
        if self.hold.count() == 0 || self.hold.is_retired() {
            return Ok(false);
        }
        // No longer the watchdog's, whatever comes back.
        self.hold.set_explicit_lease(lease);
        let renewal = self.hold.kind().renewal();
        let one = [(&*self.hold.name, self.field())];
        let (call, _) = renewal.batch(&one, lease_ms);
        let sent_at = tokio::time::Instant::now();
        // The key may now expire sooner than the deadline says.
        let before = self.hold.lease.shorten(sent_at, lease);
        let (reply, synced) = match self.engine.write(|| call.clone()).await {
            Ok(done) => done,
            // Nothing was sent: the key's TTL is what it was.
            Err(e @ Error::NoPrimary(_)) => {
                self.hold.lease.unshorten(before);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let held = match reply {
            fred::types::Value::Array(flags) => flags
                .first()
                .and_then(script::as_i64)
                .is_some_and(|flag| flag == 1),
            _ => false,
        };
        if !held {
            self.hold.found_gone();
        } else if synced.is_short() {
            self.hold.put_at_risk("renewal_unconfirmed");
        } else if synced.is_for_now() {
            self.hold.lease.extend(sent_at, lease);
            self.hold.put_at_risk("replica_left_out");
        } else {
            self.hold.lease.confirm(sent_at, lease);
        }
        Ok(held)
    }

    pub(crate) async fn unlock(mut self) -> Result<Unlocked> {
        self.released = true;
        settle::release(&self.lock(), &self.hold.clone(), self.watchdog).await
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.released || self.hold.is_retired() {
            // Released, or nothing left to release (the client's shutdown did).
            return;
        }
        let (lock, hold, watchdog) = (self.lock(), self.hold.clone(), self.watchdog);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                // Counted before the spawn, so a shutdown waits for it.
                let busy = lock.engine.lifecycle.track();
                runtime.spawn(async move {
                    match settle::release(&lock, &hold, watchdog).await {
                        Ok(_) | Err(Error::LockLost { .. } | Error::Shutdown) => {}
                        Err(e) => {
                            tracing::warn!(lock = %hold.name, error = %e, "background unlock of a dropped guard failed")
                        }
                    }
                    drop(busy);
                });
            }
            // No runtime to talk to Redis: stop renewing so the lease expires.
            Err(_) => crate::engine::settle::forget(&lock, &hold, watchdog),
        }
    }
}
