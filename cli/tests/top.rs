//! `top`, driven in tmux as a person would: keys in with send-keys, the
//! screen read back with capture-pane.

#[path = "../../tests/common/mod.rs"]
mod common;
mod support;

use std::time::Duration;

use common::*;
use support::{row, Top};

#[tokio::test]
async fn top_shows_contention_first_and_what_happens_and_quits_on_q() {
    let server = RedisServer::start().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let waiter = client(&server, Duration::from_secs(30)).await;
    let idle = holder.lock("top:idle").unwrap().lock().await.unwrap();
    let busy = holder.lock("top:busy").unwrap().lock().await.unwrap();
    let waiting = {
        let lock = waiter.lock("top:busy").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    await_subscribers(&server, "redisson_lock__channel:{top:busy}", 1).await;

    let top = Top::start(&server.url(), &["top:*"], 160, 40);
    let tmux = &top.tmux;
    let screen = tmux
        .until("both locks on screen", |s| {
            row(s, "top:busy").is_some() && row(s, "top:idle").is_some()
        })
        .await;
    let (busy_at, busy_row) = row(&screen, "top:busy").unwrap();
    let (idle_at, idle_row) = row(&screen, "top:idle").unwrap();
    assert!(busy_at < idle_at, "most contended first:\n{screen}");
    assert_eq!(&busy_row[1..3], ["lock", "1"], "{screen}");
    assert_eq!(&idle_row[1..3], ["lock", "-"], "{screen}");
    let short_id: String = holder.id().chars().take(8).collect();
    assert!(busy_row[3].starts_with(&short_id), "{screen}");
    assert!(
        screen.contains("redisson-lock top |") && screen.contains("q: quit"),
        "{screen}"
    );

    // A release, and a lock whose lease runs out unrenewed.
    idle.unlock().await.unwrap();
    tmux.until("the release", |s| s.contains("top:idle: released by"))
        .await;
    let _leased = holder
        .lock("top:leased")
        .unwrap()
        .lock_with_lease(Duration::from_secs(3))
        .await
        .unwrap();
    tmux.until("the leased lock", |s| row(s, "top:leased").is_some())
        .await;
    let screen = tmux
        .until("the lease runs out", |s| s.contains("top:leased: LOST by"))
        .await;
    assert!(screen.contains("lease ran out"), "{screen}");

    let code = top.quit().await;
    assert_eq!(code, "0");
    waiting.abort();
    busy.unlock().await.unwrap();
    holder.shutdown().await;
    waiter.shutdown().await;
}
