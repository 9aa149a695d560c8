//! One plain connection to one node the view asks directly (a sentinel, a
//! cluster replica): the client's credentials and TLS, a timeout on every
//! command, and a name an operator can tell apart in `CLIENT LIST`.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientInterface, ClientLike};
use fred::types::config::{Config as FredConfig, ServerConfig};
use fred::types::Builder;

use crate::error::{Error, Result};

/// The settings of a connection to `host:port`, from the client's own.
pub(crate) fn config_for(base: &FredConfig, host: &str, port: u16) -> FredConfig {
    let mut config = base.clone();
    config.server = ServerConfig::new_centralized(host, port);
    config.database = None;
    config
}

/// Connects to `host:port`, each step and every later command within
/// `timeout`. The name is best effort: an ACL without `+client|setname`
/// must not refuse the connection.
pub(crate) async fn connect(
    base: &FredConfig,
    host: &str,
    port: u16,
    timeout: Duration,
    name: &str,
) -> Result<Client> {
    let mut config = config_for(base, host, port);
    config.fail_fast = true;
    let client = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = timeout;
            c.internal_command_timeout = timeout;
        })
        .with_performance_config(|p| p.default_command_timeout = timeout)
        .build()
        .map_err(|e| Error::Config(e.details().to_string()))?;
    if let Err(e) = client.init().await {
        let _ = client.quit().await;
        return Err(Error::from_redis(&e, timeout));
    }
    if let Err(e) = client.client_setname(name).await {
        tracing::debug!(node = %format!("{host}:{port}"), error = %e, "connection left unnamed");
    }
    Ok(client)
}
