//! The library's inspection API (`client.inspect`, `client.scan_objects`)
//! against a real server: typed states, the reading client's own holds, and
//! bad input refused before anything is sent.

use redisson_lock_testkit as common;

use std::time::Duration;

use common::*;
use redisson_lock::inspect::{ObjectKind, ObjectState};
use redisson_lock::Error;

#[tokio::test]
async fn inspect_returns_typed_states_and_knows_its_own_holds() {
    let server = RedisServer::start().await;
    let client = client(&server, Duration::from_secs(30)).await;
    let other = client_for(&server).await;

    let mine = client.lock("mine").unwrap().lock().await.unwrap();
    let theirs = other.fenced_lock("theirs").unwrap().lock().await.unwrap();
    let info = client.inspect("mine").await.unwrap();
    assert_eq!(info.kind(), ObjectKind::Lock);
    let ObjectState::Lock(lock) = &info.state else {
        panic!("{info:?}")
    };
    assert!(lock.holders[0].this_client);
    assert_eq!(lock.holders[0].owner, mine.owner().to_string());
    assert!(info.ttl_ms.is_some() && !info.no_ttl);
    let info = client.inspect("theirs").await.unwrap();
    let ObjectState::FencedLock(fenced) = &info.state else {
        panic!("{info:?}")
    };
    assert!(!fenced.holders[0].this_client);
    assert_eq!(fenced.last_token, Some(theirs.token()));
    // JSON: the state's fields beside the name, tagged by kind.
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json["kind"], "fenced-lock");
    assert_eq!(json["last_token"], theirs.token());

    let listed = client.scan_objects("*", 10).await.unwrap();
    let names: Vec<(&str, ObjectKind)> = listed.iter().map(|o| (o.name.as_str(), o.kind)).collect();
    assert_eq!(
        names,
        [
            ("mine", ObjectKind::Lock),
            ("theirs", ObjectKind::FencedLock)
        ]
    );
    assert!(listed[0].holders[0].this_client);
    assert_eq!(listed[1].last_token, Some(theirs.token()));

    // Bad input is refused, typed.
    assert!(matches!(
        client.inspect("").await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.scan_objects("", 10).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.scan_objects("*", 0).await,
        Err(Error::InvalidArgument(_))
    ));

    mine.unlock().await.unwrap();
    theirs.unlock().await.unwrap();
    client.shutdown().await;
    assert!(matches!(client.inspect("mine").await, Err(Error::Shutdown)));
    other.shutdown().await;
}

async fn client_for(server: &RedisServer) -> redisson_lock::RedissonClient {
    client(server, Duration::from_secs(30)).await
}
