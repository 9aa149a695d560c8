//! Reading a JVM Redisson config file (YAML or JSON), so a Rust service can
//! use the very file its Java neighbour uses. Settings this crate has are
//! mapped onto [`Config`]; the others are reported back and logged, never
//! silently dropped; a setting with an invalid value is an error.

use std::time::Duration;

use serde_yaml_ng::Value;

use crate::config::{Config, ShardedSubscriptionMode};
use crate::error::{Error, Result};

/// A Redisson config file read into a [`Config`] (feature `redisson-config`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedissonFile {
    /// The settings this crate uses.
    pub config: Config,
    /// Settings present in the file that this crate ignores (dotted paths,
    /// such as `singleServerConfig.connectionPoolSize`), sorted. Each was also
    /// logged as a warning.
    pub ignored: Vec<String>,
}

/// Server sections Redisson knows, and how they map to a fred URL.
const SERVER_SECTIONS: [&str; 5] = [
    "singleServerConfig",
    "clusterServersConfig",
    "sentinelServersConfig",
    "masterSlaveServersConfig",
    "replicatedServersConfig",
];

impl Config {
    /// Reads a Redisson YAML config (`singleServerConfig`, `clusterServersConfig`
    /// or `sentinelServersConfig`, plus `lockWatchdogTimeout`, ...).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redisson_lock::Config;
    ///
    /// let file = Config::from_redisson_yaml(r#"
    /// singleServerConfig:
    ///   address: "redis://10.0.0.5:6379"
    ///   password: "s3cret"
    ///   connectionPoolSize: 64
    /// lockWatchdogTimeout: 10000
    /// "#).unwrap();
    /// assert_eq!(file.config.address, "redis://10.0.0.5:6379");
    /// assert_eq!(file.config.lock_watchdog_timeout, Duration::from_secs(10));
    /// assert_eq!(file.ignored, vec!["singleServerConfig.connectionPoolSize"]);
    /// ```
    pub fn from_redisson_yaml(text: &str) -> Result<RedissonFile> {
        let value: Value = serde_yaml_ng::from_str(text)
            .map_err(|e| Error::Config(format!("Redisson YAML config: {e}")))?;
        read(value)
    }

    /// Reads a Redisson JSON config (same names as the YAML form).
    pub fn from_redisson_json(text: &str) -> Result<RedissonFile> {
        let json: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::Config(format!("Redisson JSON config: {e}")))?;
        let value = serde_yaml_ng::to_value(json)
            .map_err(|e| Error::Config(format!("Redisson JSON config: {e}")))?;
        read(value)
    }
}

fn read(root: Value) -> Result<RedissonFile> {
    let Value::Mapping(root) = root else {
        return Err(Error::Config(
            "Redisson config: expected a mapping at the top".into(),
        ));
    };
    let mut config = Config::default();
    let mut ignored = vec![];
    let mut server: Option<(String, serde_yaml_ng::Mapping)> = None;
    for (key, value) in root {
        let key = key_name(&key)?;
        match key.as_str() {
            k if SERVER_SECTIONS.contains(&k) => {
                if server.is_some() {
                    return Err(Error::Config(format!(
                        "Redisson config: more than one server section ({k} and {})",
                        server.as_ref().map_or("", |(name, _)| name.as_str())
                    )));
                }
                let Value::Mapping(section) = value else {
                    return Err(Error::Config(format!(
                        "Redisson config: {k} must be a mapping"
                    )));
                };
                server = Some((key, section));
            }
            "lockWatchdogTimeout" => config.lock_watchdog_timeout = millis(&key, &value)?,
            "lockWatchdogBatchSize" => {
                config.lock_watchdog_batch_size = count(&key, &value)? as usize
            }
            "checkLockSyncedSlaves" => config.check_lock_synced_slaves = boolean(&key, &value)?,
            "fairLockWaitTimeout" => config.fair_lock_wait_timeout = millis(&key, &value)?,
            _ => ignored.push(key),
        }
    }
    let Some((section, settings)) = server else {
        return Err(Error::Config(format!(
            "Redisson config: no server section (one of {})",
            SERVER_SECTIONS.join(", ")
        )));
    };
    let mut nodes: Vec<String> = vec![];
    let mut master_name = None;
    for (key, value) in settings {
        let key = key_name(&key)?;
        let path = format!("{section}.{key}");
        match key.as_str() {
            "address" | "masterAddress" => nodes.insert(0, string(&path, &value)?),
            "nodeAddresses" | "sentinelAddresses" | "slaveAddresses" => {
                if key == "slaveAddresses" {
                    ignored.push(path);
                } else {
                    nodes.extend(strings(&path, &value)?);
                }
            }
            "masterName" => master_name = Some(string(&path, &value)?),
            "username" => config.username = optional_string(&path, &value)?,
            "password" => config.password = optional_string(&path, &value)?,
            "database" => {
                let db = count(&path, &value)?;
                config.database = Some(
                    u8::try_from(db)
                        .map_err(|_| invalid(&path, "a database index 0-255", &value))?,
                );
            }
            "timeout" => config.timeout = millis(&path, &value)?,
            "connectTimeout" => config.connect_timeout = millis(&path, &value)?,
            "subscriptionTimeout" => config.subscription_timeout = millis(&path, &value)?,
            "slavesSyncTimeout" => config.slaves_sync_timeout = millis(&path, &value)?,
            "masterConnectionPoolSize" => {
                config.master_connection_pool_size = count(&path, &value)? as usize
            }
            "retryAttempts" => config.retry_attempts = count(&path, &value)? as u32,
            // Redisson < 3.48 has retryInterval (ms); later ones retryDelay,
            // which is a number only in the simple form.
            "retryInterval" => config.retry_delay = millis(&path, &value)?,
            "retryDelay" if matches!(value, Value::Number(_)) => {
                config.retry_delay = millis(&path, &value)?
            }
            "shardedSubscriptionMode" => {
                config.sharded_subscription_mode = match string(&path, &value)?.as_str() {
                    "AUTO" => ShardedSubscriptionMode::Auto,
                    "ON" => ShardedSubscriptionMode::On,
                    "OFF" => ShardedSubscriptionMode::Off,
                    _ => return Err(invalid(&path, "AUTO, ON or OFF", &value)),
                }
            }
            _ => ignored.push(path),
        }
    }
    config.address = address(&section, &nodes, master_name)?;
    ignored.sort();
    for setting in &ignored {
        tracing::warn!(setting = %setting, "Redisson setting not used by redisson-lock; ignored");
    }
    config.validate()?;
    Ok(RedissonFile { config, ignored })
}

/// The fred URL for a server section.
fn address(section: &str, nodes: &[String], master_name: Option<String>) -> Result<String> {
    let hosts: Vec<(String, &str)> = nodes
        .iter()
        .map(|node| {
            let (scheme, host) = node.split_once("://").unwrap_or(("redis", node));
            (host.trim_end_matches('/').to_string(), scheme)
        })
        .collect();
    let Some((first, scheme)) = hosts.first().cloned() else {
        return Err(Error::Config(format!(
            "Redisson config: {section} has no address"
        )));
    };
    let others = || {
        hosts[1..]
            .iter()
            .map(|(host, _)| format!("node={host}"))
            .collect::<Vec<_>>()
    };
    Ok(match section {
        "singleServerConfig" => format!("{scheme}://{first}"),
        "clusterServersConfig" => {
            let query = others().join("&");
            let sep = if query.is_empty() { "" } else { "?" };
            format!("{scheme}-cluster://{first}{sep}{query}")
        }
        "sentinelServersConfig" => {
            let name = master_name.ok_or_else(|| {
                Error::Config("Redisson config: sentinelServersConfig needs masterName".into())
            })?;
            let mut query = vec![format!("sentinelServiceName={name}")];
            query.extend(others());
            format!("{scheme}-sentinel://{first}?{}", query.join("&"))
        }
        other => {
            return Err(Error::Config(format!(
                "Redisson config: {other} is not supported yet; use singleServerConfig, \
                 clusterServersConfig or sentinelServersConfig"
            )))
        }
    })
}

fn key_name(key: &Value) -> Result<String> {
    match key {
        Value::String(s) => Ok(s.clone()),
        other => Err(Error::Config(format!(
            "Redisson config: unexpected key {other:?}"
        ))),
    }
}

fn invalid(path: &str, expected: &str, value: &Value) -> Error {
    // Never echo a secret, nor an address that may carry one.
    let lower = path.to_ascii_lowercase();
    if lower.contains("password") || lower.contains("address") {
        return Error::Config(format!("Redisson config: {path} must be {expected}"));
    }
    Error::Config(format!(
        "Redisson config: {path} must be {expected}, got {value:?}"
    ))
}

fn count(path: &str, value: &Value) -> Result<u64> {
    value
        .as_u64()
        .ok_or_else(|| invalid(path, "a non-negative integer", value))
}

fn millis(path: &str, value: &Value) -> Result<Duration> {
    value
        .as_u64()
        .map(Duration::from_millis)
        .ok_or_else(|| invalid(path, "milliseconds as a non-negative integer", value))
}

fn boolean(path: &str, value: &Value) -> Result<bool> {
    value
        .as_bool()
        .ok_or_else(|| invalid(path, "true or false", value))
}

fn string(path: &str, value: &Value) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(invalid(path, "a string", other)),
    }
}

fn optional_string(path: &str, value: &Value) -> Result<Option<String>> {
    match value {
        Value::Null => Ok(None),
        other => string(path, other).map(Some),
    }
}

fn strings(path: &str, value: &Value) -> Result<Vec<String>> {
    match value {
        Value::Sequence(items) => items.iter().map(|item| string(path, item)).collect(),
        other => Err(invalid(path, "a list of addresses", other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_yaml_with_tags_and_unknown_settings() {
        let file = Config::from_redisson_yaml(
            r#"
clusterServersConfig:
  nodeAddresses:
  - "redis://10.0.0.1:7000"
  - "redis://10.0.0.2:7001"
  scanInterval: 1000
  password: null
  shardedSubscriptionMode: "OFF"
  retryInterval: 1500
codec: !<org.redisson.codec.Kryo5Codec> {}
lockWatchdogTimeout: 6000
lockWatchdogBatchSize: 50
checkLockSyncedSlaves: false
"#,
        )
        .unwrap();
        let c = &file.config;
        assert_eq!(
            c.address,
            "redis-cluster://10.0.0.1:7000?node=10.0.0.2:7001"
        );
        assert_eq!(c.password, None);
        assert_eq!(c.sharded_subscription_mode, ShardedSubscriptionMode::Off);
        assert_eq!(c.retry_delay, Duration::from_millis(1500));
        assert_eq!(c.lock_watchdog_timeout, Duration::from_secs(6));
        assert_eq!(c.lock_watchdog_batch_size, 50);
        assert!(!c.check_lock_synced_slaves);
        assert_eq!(
            file.ignored,
            vec!["clusterServersConfig.scanInterval", "codec"]
        );
    }

    #[test]
    fn a_sentinel_json() {
        let file = Config::from_redisson_json(
            r#"{"sentinelServersConfig": {"masterName": "mymaster", "database": 2,
                "sentinelAddresses": ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"]},
                "lockWatchdogTimeout": 30000}"#,
        )
        .unwrap();
        assert_eq!(
            file.config.address,
            "redis-sentinel://10.0.0.1:26379?sentinelServiceName=mymaster&node=10.0.0.2:26379"
        );
        assert_eq!(file.config.database, Some(2));
    }

    #[test]
    fn invalid_or_missing_settings_are_clear_errors() {
        let err = |text: &str| Config::from_redisson_yaml(text).unwrap_err().to_string();
        assert!(err("lockWatchdogTimeout: 5000").contains("no server section"));
        assert!(
            err("singleServerConfig: {address: 'redis://a:1'}\nlockWatchdogTimeout: abc")
                .contains("lockWatchdogTimeout must be milliseconds")
        );
        assert!(
            err("singleServerConfig: {address: 'redis://a:1', database: 999}")
                .contains("singleServerConfig.database must be a database index")
        );
        assert!(err("singleServerConfig: {address: 'redis://a:1'}\nclusterServersConfig: {nodeAddresses: []}")
            .contains("more than one server section"));
        assert!(
            err("sentinelServersConfig: {sentinelAddresses: ['redis://a:1']}")
                .contains("needs masterName")
        );
        assert!(
            err("singleServerConfig: {address: 'redis://a:1'}\nlockWatchdogTimeout: 1")
                .contains("lockWatchdogTimeout must be at least 30 ms")
        );
        assert!(err(": : :").contains("Redisson YAML config"));
        assert!(
            err("singleServerConfig: {address: 'redis://a:1'}\ncheckLockSyncedSlaves: 1")
                .contains("checkLockSyncedSlaves must be true or false")
        );
        assert!(format!(
            "{:?}",
            Config::from_redisson_yaml(
                "singleServerConfig: {address: 'redis://a:1', password: hunter2}"
            )
            .unwrap()
            .config
        )
        .contains("<redacted>"));
    }
}
