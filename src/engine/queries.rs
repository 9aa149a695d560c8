//! What the lock objects read about a lock, for any kind: whether it is
//! held (in the kind's sense), by whom, how often, for how long. Plain reads,
//! beside the hold lifecycle: nothing here takes a hold's `ops` slot.

use std::collections::HashMap;
use std::time::Duration;

use fred::interfaces::{HashesInterface, KeysInterface};

use crate::engine::kind::{LockedWhen, Patience};
use crate::engine::raw::{Holder, RawLock, Ttl};
use crate::engine::resolve;
use crate::engine::script::{self, ScriptCall};
use crate::error::Result;
use crate::owner::OwnerId;

impl RawLock {
    /// Whether the lock's key exists (`EXISTS`).
    pub(crate) async fn exists(&self) -> Result<bool> {
        self.engine.ensure_open()?;
        let n: i64 = self.query(self.engine.redis.exists(&*self.name)).await?;
        Ok(n > 0)
    }

    /// Whether `owner` holds this kind of the lock (`HEXISTS`).
    pub(crate) async fn is_held_by(&self, owner: OwnerId) -> Result<bool> {
        self.engine.ensure_open()?;
        let field = self.field_of(owner);
        self.query(self.engine.redis.hexists(&*self.name, field))
            .await
    }

    /// How many times `owner` holds this kind of the lock (`HGET`).
    pub(crate) async fn hold_count_of(&self, owner: OwnerId) -> Result<u32> {
        self.engine.ensure_open()?;
        let field = self.field_of(owner);
        let call = self.call(&field, Duration::ZERO, Patience::Once);
        let count = resolve::hold_count(&call, &self.engine.redis)
            .await
            .map_err(|e| self.wrong_type(e))?;
        Ok(count.clamp(0, u32::MAX as i64) as u32)
    }

    /// Every field of the lock's hash (`HGETALL`).
    pub(crate) async fn fields(&self) -> Result<HashMap<String, String>> {
        self.engine.ensure_open()?;
        self.query(self.engine.redis.hgetall(&*self.name)).await
    }

    /// Whether the lock is held in its kind's sense.
    pub(crate) async fn is_locked(&self) -> Result<bool> {
        self.engine.ensure_open()?;
        match self.kind.locked_when() {
            LockedWhen::KeyExists => self.exists().await,
            LockedWhen::ModeIs(mode) => {
                let held: Option<String> = self
                    .query(self.engine.redis.hget(&*self.name, "mode"))
                    .await?;
                Ok(held.as_deref() == Some(mode))
            }
            LockedWhen::Script(check) => {
                let call = || ScriptCall {
                    script: check,
                    keys: vec![self.name.to_string()],
                    args: vec![],
                };
                let reply = self
                    .engine
                    .run_unsynced(call)
                    .await
                    .map_err(|e| self.wrong_type(e))?;
                Ok(script::as_i64(&reply) == Some(1))
            }
        }
    }

    /// The holders of this kind among the hash's fields, decoded from
    /// `<client-id>:<owner-id>`.
    pub(crate) async fn holders(&self) -> Result<Vec<Holder>> {
        let fields = self.fields().await?;
        let mut holders: Vec<Holder> = fields
            .iter()
            .filter_map(|(field, count)| {
                Holder::from_field(self.kind.holder(field)?, count, &self.engine.id)
            })
            .collect();
        holders.sort_by(|a, b| (&a.client_id, &a.owner).cmp(&(&b.client_id, &b.owner)));
        Ok(holders)
    }

    /// The lock's remaining time to live (`PTTL`).
    pub(crate) async fn remaining_ttl(&self) -> Result<Ttl> {
        self.engine.ensure_open()?;
        let ms: i64 = self.query(self.engine.redis.pttl(&*self.name)).await?;
        Ok(match ms {
            -2 => Ttl::Absent,
            -1 => Ttl::Persistent,
            ms => Ttl::Expires(Duration::from_millis(ms.max(0) as u64)),
        })
    }
}
