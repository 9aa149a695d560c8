//! `top`, driven in tmux as a person would: keys in with send-keys, the
//! screen read back with capture-pane.

use redisson_lock_testkit as common;
mod support;

use std::time::Duration;

use common::*;
use fred::prelude::*;
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
        // The footer is drawn last: a capture can catch a frame half drawn.
        .until("both locks on screen, the frame whole", |s| {
            row(s, "top:busy").is_some() && row(s, "top:idle").is_some() && s.contains("q: quit")
        })
        .await;
    let (busy_at, busy_row) = row(&screen, "top:busy").unwrap();
    let (idle_at, idle_row) = row(&screen, "top:idle").unwrap();
    assert!(busy_at < idle_at, "most contended first:\n{screen}");
    assert_eq!(&busy_row[1..3], ["lock", "1"], "{screen}");
    assert_eq!(&idle_row[1..3], ["lock", "-"], "{screen}");
    let short_id: String = holder.id().chars().take(8).collect();
    assert!(busy_row[3].starts_with(&short_id), "{screen}");
    assert!(screen.contains("redisson-lock top |"), "{screen}");

    // A release, and a lock whose lease runs out unrenewed.
    idle.unlock().await.unwrap();
    tmux.until("the release", |s| s.contains("top:idle: released by"))
        .await;
    let _leased = holder
        .lock("top:leased")
        .unwrap()
        .acquire()
        .lease(Duration::from_secs(3))
        .await
        .unwrap();
    // Its holder named as the client registry names it (this test binary
    // on this host).
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let named = format!("@{})", host.trim());
    tmux.until("the leased lock, its holder named", |s| {
        row(s, "top:leased").is_some()
            && s.lines()
                .any(|l| l.contains("top:leased: acquired by") && l.contains(&named))
    })
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

/// Whether `screen` shows `full` whole, or cut with `…` right after the
/// part it shows (never a silent cut, which would read as another value).
fn whole_or_marked(screen: &str, full: &str) -> bool {
    let chars: Vec<char> = full.chars().collect();
    (4..=chars.len()).rev().any(|n| {
        let prefix: String = chars[..n].iter().collect();
        screen
            .match_indices(&prefix)
            .any(|(at, _)| n == chars.len() || screen[at + prefix.len()..].starts_with('…'))
    }) && !silently_cut(screen, &chars)
}

/// Whether some line shows a proper prefix of `full` (4 characters or more)
/// that stops there, at a blank or the line's end, without a mark: a cut
/// that reads as another value.
fn silently_cut(screen: &str, full: &[char]) -> bool {
    screen.lines().any(|line| {
        (4..full.len()).any(|n| {
            let prefix: String = full[..n].iter().collect();
            line.match_indices(&prefix).any(|(at, _)| {
                let rest = &line[at + prefix.len()..];
                !rest.starts_with(full[n]) && (rest.is_empty() || rest.starts_with(' '))
            })
        })
    })
}

#[tokio::test]
async fn top_fits_its_columns_to_the_terminal_and_marks_every_cut() {
    let server = RedisServer::start().await;
    let raw = server.raw().await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let short_id: String = holder.id().chars().take(8).collect();
    // A Rust holder (owner ids have 19 digits), two Rust readers, a name
    // longer than any terminal gives it, and a detail of 31 characters.
    let plain = holder.lock("top:plain").unwrap().lock().await.unwrap();
    let rw = holder.read_write_lock("top:doc").unwrap();
    let (r1, r2) = (
        rw.read().lock().await.unwrap(),
        rw.read().lock().await.unwrap(),
    );
    let long_name = format!("top:{}", "long-name-".repeat(10));
    let long = holder.lock(&long_name).unwrap().lock().await.unwrap();
    let _: () = raw.set("top:slots", "1", None, None, false).await.unwrap();
    let _: () = raw
        .zadd(
            "{top:slots}:timeout",
            None,
            None,
            false,
            false,
            vec![
                (1.0, "00000000000000000000000000000001"),
                (4_102_444_800_000.0, "00000000000000000000000000000002"),
            ],
        )
        .await
        .unwrap();
    let holder_text = |owner: redisson_lock::OwnerId| format!("{short_id}:{owner}");
    let everything: Vec<String> = [&plain, &r1, &r2, &long]
        .map(|guard| holder_text(guard.owner()))
        .into_iter()
        .chain([
            long_name.clone(),
            "1 permit(s), 2 leased (1 ended)".to_string(),
            "read, 2 reader(s)".to_string(),
        ])
        .collect();

    let top = Top::start(&server.url(), &["top:*"], 120, 30);
    let screen = top
        .tmux
        .until("every object on screen", |s| {
            ["top:plain", "top:doc", "top:slots"]
                .iter()
                .all(|name| row(s, name).is_some())
                && s.contains("top:long-name")
        })
        .await;
    // 120 columns: the owner ids of the holders shown are whole, and every
    // cut is marked.
    for guard in [&plain, &long] {
        assert!(
            whole_or_marked(&screen, &holder_text(guard.owner())),
            "owner {} not whole at 120 columns:\n{screen}",
            guard.owner()
        );
        assert!(screen.contains(&format!(":{}", guard.owner())), "{screen}");
    }
    let (_, doc) = row(&screen, "top:doc").unwrap();
    let doc = doc.join(" ");
    assert!(
        doc.contains(&holder_text(r1.owner())) || doc.contains(&holder_text(r2.owner())),
        "{screen}"
    );
    assert!(
        !screen.contains(&long_name) && whole_or_marked(&screen, &long_name),
        "the long name is cut, and says so:\n{screen}"
    );
    for text in &everything {
        assert!(
            !silently_cut(&screen, &text.chars().collect::<Vec<_>>()),
            "`{text}` cut without a mark at 120 columns:\n{screen}"
        );
    }
    // Narrower: more is cut, and every cut still says so.
    assert!(top
        .tmux
        .command(&["resize-window", "-t", "top", "-x", "80", "-y", "30"])
        .status
        .success());
    let screen = top
        .tmux
        .until("redrawn at 80 columns", |s| {
            // The events panel's border closes at the new width.
            s.lines()
                .any(|l| l.starts_with('┌') && l.ends_with('┐') && l.chars().count() == 80)
        })
        .await;
    assert!(whole_or_marked(&screen, &long_name), "{screen}");
    for text in &everything {
        assert!(
            !silently_cut(&screen, &text.chars().collect::<Vec<_>>()),
            "`{text}` cut without a mark at 80 columns:\n{screen}"
        );
    }
    assert_eq!(top.quit().await, "0");
    for guard in [plain, r1, r2, long] {
        guard.unlock().await.unwrap();
    }
    holder.shutdown().await;
}

/// `top` under the documented read-only operator rule (docs/acl.md): the
/// holder shown, named from the client registry.
#[tokio::test]
async fn top_runs_under_the_read_only_operator_rule() {
    let mut flags = vec!["--user", "operator"];
    flags.extend(common::OPERATOR_ACL_RULE.split(' '));
    let server = RedisServer::start_with(&flags).await;
    let holder = client(&server, Duration::from_secs(30)).await;
    let url = format!("redis://operator:operator-pw@127.0.0.1:{}", server.port);
    let top = Top::start(&url, &["app:*"], 160, 40);
    top.tmux
        .until("the first frame", |s| s.contains("q: quit"))
        .await;
    let held = holder.lock("app:job").unwrap().lock().await.unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let named = format!("@{})", host.trim());
    top.tmux
        .until("the lock taken, its holder named", |s| {
            row(s, "app:job").is_some()
                && s.lines()
                    .any(|l| l.contains("app:job: acquired by") && l.contains(&named))
        })
        .await;
    assert_eq!(top.quit().await, "0");
    held.unlock().await.unwrap();
    holder.shutdown().await;
}
