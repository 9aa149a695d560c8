//! The client registry: one small hash per client,
//! `redisson_lock__client:<client-id>`, saying who the client is (host,
//! process, service, instance, version, start time, labels), so that a lock
//! holder's field `<client-id>:<owner>` can be named. Written at connect and
//! on every watchdog cycle with a TTL of the watchdog timeout, deleted at
//! shutdown; a crashed client's entry expires as its locks do. Redisson's
//! keys are untouched; a JVM service may write the same hash (docs/interop.md).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use fred::interfaces::{HashesInterface, KeysInterface};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::engine::script::{Script, ScriptCall};
use crate::engine::Engine;
use crate::error::Result;

/// `lua/registry/register.lua`: writes the entry and its TTL.
static REGISTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/registry/register.lua")));

/// A client's registry key.
pub(crate) fn key(client_id: &str) -> String {
    format!("redisson_lock__client:{client_id}")
}

/// Who a client is, as it registered itself (see [`crate::Registry`]). Read
/// by [`crate::RedissonClient::client_identity`] and shown by `inspect`,
/// `ls`, `status` and `top` beside each holder and waiter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ClientIdentity {
    /// The host's name.
    pub host: String,
    /// The process id on that host.
    pub pid: Option<u32>,
    /// The service's name.
    pub service: String,
    /// Which instance of the service, if it said.
    pub instance: Option<String>,
    /// The client library and its version (`redisson-lock 0.1.0`,
    /// `redisson 4.7.0`).
    pub version: String,
    /// `rust`, or `java` for a JVM service that registers itself.
    pub runtime: String,
    /// When the client connected, in ms since the Unix epoch.
    pub started_ms: Option<i64>,
    /// Free-form labels.
    pub labels: BTreeMap<String, String>,
}

impl ClientIdentity {
    /// This process's identity under `config`.
    fn of_this_process(config: &Config) -> ClientIdentity {
        let exe = std::env::current_exe().ok();
        let exe_name = exe
            .as_deref()
            .and_then(|p| p.file_stem())
            .map(|s| s.to_string_lossy().into_owned());
        ClientIdentity {
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            pid: Some(std::process::id()),
            service: config
                .registry
                .service
                .clone()
                .or(exe_name)
                .unwrap_or_else(|| "unknown".into()),
            instance: config.registry.instance.clone(),
            version: concat!("redisson-lock ", env!("CARGO_PKG_VERSION")).into(),
            runtime: "rust".into(),
            started_ms: Some(crate::engine::now_ms()),
            labels: config.registry.labels.clone(),
        }
    }

    /// The hash's fields: `host`, `pid`, `service`, `instance`, `version`,
    /// `runtime`, `started` (ms), and `label:<name>` per label.
    fn fields(&self) -> Vec<(String, String)> {
        let mut fields = vec![
            ("host".to_string(), self.host.clone()),
            ("service".into(), self.service.clone()),
            ("version".into(), self.version.clone()),
            ("runtime".into(), self.runtime.clone()),
        ];
        if let Some(pid) = self.pid {
            fields.push(("pid".into(), pid.to_string()));
        }
        if let Some(instance) = &self.instance {
            fields.push(("instance".into(), instance.clone()));
        }
        if let Some(started) = self.started_ms {
            fields.push(("started".into(), started.to_string()));
        }
        for (name, value) in &self.labels {
            fields.push((format!("label:{name}"), value.clone()));
        }
        fields
    }

    /// Reads an entry's fields; `None` when it has no `host` or `service`
    /// (not an entry).
    pub(crate) fn from_fields(fields: &BTreeMap<String, String>) -> Option<ClientIdentity> {
        Some(ClientIdentity {
            host: fields.get("host")?.clone(),
            pid: fields.get("pid").and_then(|p| p.parse().ok()),
            service: fields.get("service")?.clone(),
            instance: fields.get("instance").cloned(),
            version: fields.get("version").cloned().unwrap_or_default(),
            runtime: fields.get("runtime").cloned().unwrap_or_default(),
            started_ms: fields.get("started").and_then(|s| s.parse().ok()),
            labels: fields
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("label:")?.to_string(), v.clone())))
                .collect(),
        })
    }

    /// `service[/instance] on host (pid N)`: how tools name the client.
    pub fn describe(&self) -> String {
        let instance = self
            .instance
            .as_ref()
            .map(|i| format!("/{i}"))
            .unwrap_or_default();
        let pid = self.pid.map(|p| format!(" pid {p}")).unwrap_or_default();
        format!("{}{instance} on {}{pid}", self.service, self.host)
    }
}

/// This client's entry, made once at connect.
pub(crate) struct Entry {
    key: String,
    args: Vec<fred::types::Value>,
    /// A refusal is logged once, not every cycle.
    warned: AtomicBool,
    /// A refresh is in flight.
    refreshing: AtomicBool,
}

impl Entry {
    /// The entry `config` asks for, if any.
    pub(crate) fn new(config: &Config, client_id: &str) -> Option<Entry> {
        if !config.registry.enabled {
            return None;
        }
        let ttl = config.lock_watchdog_timeout.as_millis() as i64;
        let mut args = vec![ttl.into()];
        for (field, value) in ClientIdentity::of_this_process(config).fields() {
            args.push(field.into());
            args.push(value.into());
        }
        Some(Entry {
            key: key(client_id),
            args,
            warned: AtomicBool::new(false),
            refreshing: AtomicBool::new(false),
        })
    }
}

/// Writes (or refreshes) this client's entry; a failure is logged, never
/// returned: the registry only names holders.
pub(crate) async fn register(engine: &Engine) {
    let Some(entry) = &engine.registry else {
        return;
    };
    let call = || ScriptCall {
        script: &REGISTER,
        keys: vec![entry.key.clone()],
        args: entry.args.clone(),
    };
    if let Err(e) = engine.run_unsynced(call).await {
        if !entry.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(key = %entry.key, error = %e, "the client registry entry was not written: holders of this client show as unregistered");
        }
    }
}

/// [`refresh`] in a task of its own, at most one at a time.
pub(crate) fn refresh_in_background(engine: &Arc<Engine>) {
    let Some(entry) = &engine.registry else {
        return;
    };
    if entry.refreshing.swap(true, Ordering::AcqRel) {
        return;
    }
    let engine = engine.clone();
    tokio::spawn(async move {
        refresh(&engine).await;
        if let Some(entry) = &engine.registry {
            entry.refreshing.store(false, Ordering::Release);
        }
    });
}

/// Keeps this client's entry alive (each watchdog cycle): a plain
/// `PEXPIRE`, safe to send again; the whole entry is written again only if
/// it is gone (a failover or an eviction lost it).
pub(crate) async fn refresh(engine: &Engine) {
    let Some(entry) = &engine.registry else {
        return;
    };
    let ttl = engine.config.lock_watchdog_timeout.as_millis() as i64;
    let alive = engine
        .read(
            engine
                .reader(&entry.key)
                .pexpire::<bool, _>(&entry.key, ttl, None),
        )
        .await;
    if !matches!(alive, Ok(true)) {
        register(engine).await;
    }
}

/// Deletes this client's entry (at shutdown).
pub(crate) async fn remove(engine: &Engine) {
    let Some(entry) = &engine.registry else {
        return;
    };
    let _ = engine
        .read(engine.reader(&entry.key).del::<i64, _>(&entry.key))
        .await;
}

/// The entry of client `client_id`, if it registered.
pub(crate) async fn identity(engine: &Engine, client_id: &str) -> Result<Option<ClientIdentity>> {
    let key = key(client_id);
    let fields: BTreeMap<String, String> = engine.read(engine.reader(&key).hgetall(&key)).await?;
    Ok(ClientIdentity::from_fields(&fields))
}

/// As [`identity`], for showing who holds a lock: an entry that cannot be
/// read (an ACL without `~redisson_lock__client:*`, a timeout) is `None`,
/// unknown, never an error: who holds a lock is shown without it, as
/// kubectl prints `<unknown>`. Logged once per process.
pub(crate) async fn identity_if_readable(
    engine: &Engine,
    client_id: &str,
) -> Option<Option<ClientIdentity>> {
    static WARNED: AtomicBool = AtomicBool::new(false);
    match identity(engine, client_id).await {
        Ok(found) => Some(found),
        Err(e) => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, "the client registry cannot be read (its keys are redisson_lock__client:*; see docs/acl.md): holders are shown without who they are");
            }
            None
        }
    }
}
