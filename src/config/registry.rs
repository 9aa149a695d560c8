//! [`Registry`]: what a client says about itself in the client registry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The client's entry in the registry: one small hash per client,
/// `redisson_lock__client:<client-id>`, beside the locks (Redisson's keys
/// are untouched), naming who holds a lock: host name, process id, service
/// and instance, crate version, start time and labels. Written at connect,
/// kept alive by the watchdog (TTL: the watchdog timeout), deleted at
/// shutdown. `ls`, `inspect`, `status` and `top` show it beside each holder
/// and waiter; [`crate::RedissonClient::client_identity`] reads it.
///
/// The entry is best effort: a server that refuses it (an ACL without the
/// key pattern) leaves the client working, unnamed, with one warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Registry {
    /// Whether to write the entry. Default true.
    pub enabled: bool,
    /// The service's name; default the executable's file name.
    pub service: Option<String>,
    /// Which instance of the service (a pod name, say); default none.
    pub instance: Option<String>,
    /// Free-form labels (`region`, `version`, ...), shown with the entry.
    pub labels: BTreeMap<String, String>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            enabled: true,
            service: None,
            instance: None,
            labels: BTreeMap::new(),
        }
    }
}
