//! A named object that is not a lock (a semaphore, a count-down latch): how
//! its handle talks to Redis through the engine. Its writes go out once, on
//! the connection that carries every write of that name, and those whose
//! effect cannot be read back are sent as replayable [`Request`]s.

use std::future::Future;
use std::sync::Arc;

use fred::clients::{Client, WithOptions};
use fred::types::Value;

use crate::engine::lifecycle::Busy;
use crate::engine::request::{Request, Sent, Target};
use crate::engine::safety::Synced;
use crate::engine::script::{Latch, Script, ScriptCall};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::naming;

/// An object's engine and name, and what it calls itself in errors.
#[derive(Clone)]
pub(crate) struct Object {
    pub(crate) engine: Arc<Engine>,
    pub(crate) name: Arc<str>,
    /// `semaphore`, `count-down latch`, ...: what `WrongType` says was expected.
    pub(crate) what: &'static str,
}

impl Object {
    pub(crate) fn new(engine: Arc<Engine>, name: &str, what: &'static str) -> Self {
        Object {
            engine,
            name: name.into(),
            what,
        }
    }

    /// Starts an operation: counted for shutdown, refused once it began.
    pub(crate) fn enter(&self) -> Result<Busy> {
        self.engine.lifecycle.enter()
    }

    /// A `WRONGTYPE` reply, as the object's typed error.
    pub(crate) fn wrong_type(&self, e: Error) -> Error {
        e.of_type(&self.name, self.what)
    }

    /// Runs a read (a query that may safely be re-sent).
    pub(crate) fn query<'a, T: 'a>(
        &'a self,
        call: impl Future<Output = std::result::Result<T, fred::error::Error>> + Send + 'a,
    ) -> impl Future<Output = Result<T>> + 'a {
        self.engine.query(call, |e| self.wrong_type(e))
    }

    /// The connection for reads of this object, after its writes.
    pub(crate) fn reader(&self) -> WithOptions<Client> {
        self.engine.reader(&self.name)
    }

    /// Runs a script once: for scripts that are harmless to run twice
    /// (reads that reclaim expired permits, setting a value).
    pub(crate) async fn run(&self, call: ScriptCall) -> Result<Value> {
        let (reply, _) = self
            .engine
            .write(|| call.clone())
            .await
            .map_err(|e| self.wrong_type(e))?;
        Ok(reply)
    }

    /// Sends a write as a replayable request (see [`Request::send`]); a reply
    /// the replicas did not confirm is replayed too, and its `synced` says
    /// whether the last one was.
    pub(crate) async fn request(
        &self,
        operation: &'static str,
        request: &Request,
        build: impl Fn(&Latch) -> ScriptCall + Sync,
    ) -> Result<Sent> {
        let target = Target {
            operation,
            name: &self.name,
            latch_key: naming::request_latch_name(&self.name, request.id()),
            confirm: crate::engine::request::Confirm::Replay,
        };
        request
            .send(&self.engine, target, build)
            .await
            .map_err(|e| self.wrong_type(e))
    }

    /// As [`Object::request`], for writes that must reach the replicas: a
    /// reply still short of them after the last replay is an error.
    pub(crate) async fn synced_request(
        &self,
        operation: &'static str,
        build: impl Fn(&Latch) -> ScriptCall + Sync,
    ) -> Result<Value> {
        let sent = self.request(operation, &Request::new(), build).await?;
        if let short @ Synced::Short { .. } = sent.synced {
            return Err(self
                .engine
                .replica_sync
                .not_synced(operation, &self.name, short));
        }
        Ok(sent.reply)
    }

    /// As [`Object::synced_request`], for a write whose script announces
    /// on `channel` (KEYS: the object's name, `channel`, the request latch;
    /// ARGV: `before`, the publish command, the latch's TTL, `after`), the
    /// shape every semaphore and latch write shares.
    pub(crate) async fn announcing(
        &self,
        operation: &'static str,
        script: &'static Script,
        channel: String,
        before: Vec<Value>,
        after: Vec<Value>,
    ) -> Result<Value> {
        let publish = self.engine.publish_command;
        self.synced_request(operation, |latch| {
            let mut args = Vec::with_capacity(before.len() + 2 + after.len());
            args.extend(before.iter().cloned());
            args.extend([Value::from_static_str(publish), latch.ttl_ms.into()]);
            args.extend(after.iter().cloned());
            ScriptCall {
                script,
                keys: vec![self.name.to_string(), channel.clone(), latch.key.clone()],
                args,
            }
        })
        .await
    }

    /// A script call on this object.
    pub(crate) fn call(
        &self,
        script: &'static Script,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> ScriptCall {
        ScriptCall { script, keys, args }
    }
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("what", &self.what)
            .field("name", &self.name)
            .finish()
    }
}
