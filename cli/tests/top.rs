//! `top`, driven in tmux as a person would: keys in with send-keys, the
//! screen read back with capture-pane.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::*;

/// A tmux server of this test's own, killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn command(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux is needed for the `top` test (Debian package tmux; .ci/run installs it)")
    }

    /// Starts `command` in a detached 160x40 session.
    fn start(command: &str) -> Tmux {
        let tmux = Tmux {
            socket: format!(
                "redisson-top-{}-{:x}",
                std::process::id(),
                rand::random::<u32>()
            ),
        };
        let out = tmux.command(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "160",
            "-y",
            "40",
            command,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.command(&["capture-pane", "-p", "-t", "top"]).stdout)
            .into_owned()
    }

    fn keys(&self, keys: &str) {
        assert!(self
            .command(&["send-keys", "-t", "top", keys])
            .status
            .success());
    }

    /// Waits until the screen shows what `check` looks for; returns it.
    async fn until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        within(what, async {
            loop {
                let screen = self.screen();
                if check(&screen) {
                    return screen;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command(&["kill-server"]);
    }
}

/// The screen line of the object `name`, split into its cells.
fn row<'a>(screen: &'a str, name: &str) -> Option<(usize, Vec<&'a str>)> {
    screen
        .lines()
        .enumerate()
        .find(|(_, l)| l.split_whitespace().next() == Some(name))
        .map(|(i, l)| (i, l.split_whitespace().collect()))
}

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

    let dir = common::topology::Scratch::new("top");
    let exit_file = dir.0.join("exit");
    let tmux = Tmux::start(&format!(
        "env REDIS_URL={} {} top 'top:*'; echo $? > {}",
        server.url(),
        env!("CARGO_BIN_EXE_redisson-lock"),
        exit_file.display()
    ));
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

    tmux.keys("q");
    within("top exits", async {
        while !exit_file.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The shell writes the file as the command ends; read it once complete.
    let code = within("exit code written", async {
        loop {
            let text = std::fs::read_to_string(&exit_file).unwrap();
            if text.ends_with('\n') {
                return text.trim().to_string();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(code, "0");
    waiting.abort();
    busy.unlock().await.unwrap();
    holder.shutdown().await;
    waiter.shutdown().await;
}
