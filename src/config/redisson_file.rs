//! Reading a JVM Redisson config file (YAML or JSON), so a Rust service can
//! use the very file its Java neighbour uses. Settings this crate has are
//! mapped onto [`Config`]; the others are reported back and logged, never
//! silently dropped; a setting with an invalid value is an error.
//!
//! As Redisson does, `${VAR}` and `${VAR:-default}` are replaced from the
//! environment before the file is parsed (Java system properties have no
//! Rust counterpart), so `database: ${REDIS_DB}` reads as a number.

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
    ///
    /// `${VAR}` and `${VAR:-default}` are replaced from the environment
    /// first, as Redisson replaces them (a variable that is not set and has
    /// no default is left as written).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a file that does not parse, a setting with an
    /// invalid value, or no server section.
    pub fn from_redisson_yaml(text: &str) -> Result<RedissonFile> {
        let text = resolve_env_params(text, |name| std::env::var(name).ok());
        let value: Value = serde_yaml_ng::from_str(&text)
            .map_err(|e| Error::Config(format!("Redisson YAML config: {e}")))?;
        read(value)
    }

    /// Reads a Redisson JSON config (same names as the YAML form, the same
    /// `${VAR}` replacement).
    ///
    /// # Errors
    ///
    /// As [`Config::from_redisson_yaml`].
    pub fn from_redisson_json(text: &str) -> Result<RedissonFile> {
        let text = resolve_env_params(text, |name| std::env::var(name).ok());
        let json: serde_json::Value = serde_json::from_str(&text)
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
    // Redisson would connect to the literal text; say which variable.
    if let Some(node) = nodes.iter().find(|n| n.contains("${")) {
        return Err(invalid(
            &format!("{section} address"),
            "an address",
            &Value::String(node.clone()),
        ));
    }
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

/// Redisson's `${NAME}` / `${NAME:-default}` replacement (its pattern
/// `\$\{([\w.]+(:-.+?)?)\}`): `NAME` of ASCII letters, digits, `_` and
/// `.`; a default of at least one character, up to the first `}` on the
/// same line. A name `lookup` does not know takes its default, or stays as
/// written. Like Java's `split(":-")`, a default that itself holds `:-` is
/// not applied.
fn resolve_env_params(text: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(after.len());
        let name = &after[..name_len];
        let tail = &after[name_len..];
        // (the default, the whole match's length after `${`)
        let matched = if name.is_empty() {
            None
        } else if tail.starts_with('}') {
            Some((None, name_len + 1))
        } else if let Some(default_and_more) = tail.strip_prefix(":-") {
            // At least one character, then the first `}`; `.` matches no
            // line break.
            let first = default_and_more
                .chars()
                .next()
                .filter(|c| *c != '\n' && *c != '\r');
            first.and_then(|c| {
                let from = c.len_utf8();
                let end = default_and_more[from..]
                    .find(['}', '\n', '\r'])
                    .map(|i| i + from)
                    .filter(|&i| default_and_more[i..].starts_with('}'))?;
                Some((Some(&default_and_more[..end]), name_len + 2 + end + 1))
            })
        } else {
            None
        };
        match matched {
            Some((default, len)) => {
                let written = &rest[at..at + 2 + len];
                let usable_default = default.filter(|d| {
                    let mut parts: Vec<&str> = d.split(":-").collect();
                    while parts.len() > 1 && parts.last() == Some(&"") {
                        parts.pop();
                    }
                    parts.len() == 1
                });
                match lookup(name) {
                    Some(value) => out.push_str(&value),
                    None => out.push_str(usable_default.unwrap_or(written)),
                }
                rest = &rest[at + 2 + len..];
            }
            None => {
                out.push_str("${");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn invalid(path: &str, expected: &str, value: &Value) -> Error {
    // A variable the environment did not set (Redisson leaves it as written).
    if let Some(text) = value.as_str() {
        if let Some(start) = text.find("${") {
            let name: String = text[start + 2..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                .collect();
            return Error::Config(format!(
                "Redisson config: {path} must be {expected}; it names the environment \
                 variable {name}, which is not set (set it, or give a default: \
                 ${{{name}:-value}})"
            ));
        }
    }
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

    #[test]
    fn variables_are_replaced_as_redisson_replaces_them() {
        let env = |name: &str| match name {
            "REDIS_HOST" => Some("10.0.0.7".to_string()),
            "redis.port" => Some("6380".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let r = |text: &str| resolve_env_params(text, env);
        assert_eq!(
            r("redis://${REDIS_HOST}:${redis.port}"),
            "redis://10.0.0.7:6380"
        );
        assert_eq!(r("${REDIS_DB:-3}"), "3");
        // Set beats the default; set to nothing is nothing.
        assert_eq!(r("${REDIS_HOST:-x}/${EMPTY:-y}"), "10.0.0.7/");
        // Not set, no default: as written.
        assert_eq!(r("a ${NOPE} b"), "a ${NOPE} b");
        // Not the pattern: as written.
        assert_eq!(r("${} ${A-B} $${REDIS_HOST}"), "${} ${A-B} $10.0.0.7");
        assert_eq!(r("${NOPE:-"), "${NOPE:-");
        // As Java's lazy `.+?`: an empty default takes what follows, up to
        // the next `}`.
        assert_eq!(r("${NOPE:-} and ${REDIS_HOST}"), "} and ${REDIS_HOST");
        // The default runs to the first `}`, on its line, at least one char.
        assert_eq!(r("${NOPE:-}}"), "}");
        assert_eq!(r("${NOPE:-a\nb}"), "${NOPE:-a\nb}");
        assert_eq!(r("${NOPE:-{x}}"), "{x}");
        // Java's split(":-"): such a default is not applied.
        assert_eq!(r("${NOPE:-a:-b}"), "${NOPE:-a:-b}");
        assert_eq!(r("héllo ${NOPE:-wörld} ✓"), "héllo wörld ✓");
    }

    #[test]
    fn a_variable_left_unset_is_named_in_the_error() {
        let err = Config::from_redisson_yaml(
            "singleServerConfig:\n  address: 'redis://a:1'\n  database: ${REDISSON_LOCK_TEST_UNSET_DB}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("REDISSON_LOCK_TEST_UNSET_DB, which is not set"),
            "{err}"
        );
        let err = Config::from_redisson_yaml(
            "singleServerConfig:\n  address: 'redis://${REDISSON_LOCK_TEST_UNSET_HOST}:6379'\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("REDISSON_LOCK_TEST_UNSET_HOST, which is not set"),
            "{err}"
        );
    }
}
