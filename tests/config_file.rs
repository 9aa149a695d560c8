//! A Redisson config file, as a Java service would use it, drives a real client.
#![cfg(feature = "redisson-config")]

use redisson_lock_testkit as common;

use std::time::Duration;

use common::*;
use redisson_lock::{Config, Error, RedissonClient};

#[tokio::test]
async fn a_redisson_yaml_file_connects_with_its_credentials_and_settings() {
    let server = RedisServer::start_with(&["--requirepass", "p@ss:word/1"]).await;
    let yaml = format!(
        r#"
singleServerConfig:
  address: "redis://127.0.0.1:{port}"
  password: "p@ss:word/1"
  database: 3
  timeout: 2000
  connectionPoolSize: 64
  subscriptionConnectionPoolSize: 50
lockWatchdogTimeout: 3000
threads: 16
codec: !<org.redisson.codec.JsonJacksonCodec> {{}}
"#,
        port = server.port
    );
    let file = Config::from_redisson_yaml(&yaml).unwrap();
    assert_eq!(file.config.lock_watchdog_timeout, Duration::from_secs(3));
    assert_eq!(file.config.timeout, Duration::from_secs(2));
    assert_eq!(
        file.ignored,
        vec![
            "codec",
            "singleServerConfig.connectionPoolSize",
            "singleServerConfig.subscriptionConnectionPoolSize",
            "threads"
        ]
    );
    let client = RedissonClient::connect(file.config.clone()).await.unwrap();
    let guard = client.lock("from-file").unwrap().lock().await.unwrap();
    // Database 3, as the file says (the password needed no URL escaping).
    let mut inspect = fred::types::config::Config::from_url(&server.url()).unwrap();
    inspect.password = Some("p@ss:word/1".into());
    inspect.database = Some(3);
    let raw = fred::types::Builder::from_config(inspect).build().unwrap();
    fred::interfaces::ClientLike::init(&raw).await.unwrap();
    let exists: i64 = fred::interfaces::KeysInterface::exists(&raw, "from-file")
        .await
        .unwrap();
    assert_eq!(exists, 1);
    guard.unlock().await.unwrap();
    client.shutdown().await;

    let wrong = yaml.replace("password: \"p@ss:word/1\"", "password: \"nope\"");
    let err = RedissonClient::connect(Config::from_redisson_yaml(&wrong).unwrap().config)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
}
