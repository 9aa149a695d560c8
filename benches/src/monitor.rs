//! Where a hand-off's time goes, from the server's side (issue 15, item 3).
//!
//! `redis-cli MONITOR` stamps every command the server runs, the calls made
//! inside scripts included, with the wall clock the bench processes also
//! use. For hand-off k (release k−1 until acquisition k) that splits the
//! time in three:
//!
//! * **to publish**: the releasing task's stamp until the server runs the
//!   unlock's `PUBLISH` (the unlock's trip to the server);
//! * **publish to acquire**: until the server runs the next waiter's
//!   successful `HINCRBY … 1` (the message's trip to the waiter, its wake-up,
//!   and the acquire's trip to the server);
//! * **to the task**: until the waiter's task stamps its acquisition (the
//!   reply's trip back).
//!
//! MONITOR costs the server time for every command, so the hand-offs it sees
//! are somewhat slower than those of an unwatched run; the split is what
//! matters.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::task::JoinHandle;

use crate::server::Server;

/// A `redis-cli MONITOR` attached for one hand-off run.
#[derive(Default)]
pub struct Monitor {
    child: Option<tokio::process::Child>,
    reader: Option<JoinHandle<Vec<String>>>,
    /// One entry per hand-off: (total, to publish, publish to acquire, to the task), µs.
    pub splits: Vec<[i64; 4]>,
    /// Commands the server ran between the publish and the acquire of each
    /// hand-off, other than the acquire's own.
    pub between: Vec<Vec<String>>,
}

impl Monitor {
    /// Starts MONITOR and returns once the server has confirmed it.
    pub async fn attach(&mut self, server: &Server) {
        let port = server.url.rsplit(':').next().unwrap().to_string();
        let mut child = tokio::process::Command::new("redis-cli")
            .args(["-p", &port, "monitor"])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-cli (Debian's redis-tools)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ok = lines.next_line().await.unwrap().unwrap_or_default();
        assert_eq!(ok, "OK", "MONITOR refused");
        self.reader = Some(tokio::spawn(async move {
            let mut all = vec![];
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("\"monitor-end\"") {
                    break;
                }
                all.push(line);
            }
            all
        }));
        self.child = Some(child);
    }

    /// Stops MONITOR and splits each hand-off of this run.
    pub async fn detach(&mut self, server: &Server, released_at: u64, stamps: &[(u64, u64)]) {
        // A marker the reader stops at: everything before it has been read.
        let port = server.url.rsplit(':').next().unwrap().to_string();
        tokio::process::Command::new("redis-cli")
            .args(["-p", &port, "echo", "monitor-end"])
            .stdout(Stdio::null())
            .status()
            .await
            .unwrap();
        let lines = self.reader.take().unwrap().await.unwrap();
        let _ = self.child.take().unwrap().kill().await;
        let mut publishes = vec![];
        let mut acquires = vec![];
        for line in &lines {
            let Some((at, rest)) = line.split_once(' ') else {
                continue;
            };
            let Ok(at) = at.parse::<f64>() else { continue };
            let at = (at * 1e6).round() as i64;
            let words: Vec<&str> = rest.split('"').skip(1).step_by(2).collect();
            match words.first().map(|w| w.to_ascii_lowercase()).as_deref() {
                Some("publish") => publishes.push((at, line)),
                Some("hincrby") if words.get(3) == Some(&"1") => acquires.push(at),
                _ => {}
            }
        }
        let mut stamps = stamps.to_vec();
        stamps.sort_unstable();
        if publishes.len() < stamps.len() || acquires.len() < stamps.len() {
            eprintln!(
                "monitor: {} publishes and {} acquires for {} hand-offs; not split",
                publishes.len(),
                acquires.len(),
                stamps.len()
            );
            return;
        }
        let mut previous = released_at as i64;
        for (k, &(acq, rel)) in stamps.iter().enumerate() {
            let (published, _) = publishes[k];
            let acquired = acquires[k];
            let acq = acq as i64;
            self.splits.push([
                acq - previous,
                published - previous,
                acquired - published,
                acq - acquired,
            ]);
            self.between.push(
                lines
                    .iter()
                    .filter(|l| {
                        l.split_once(' ')
                            .and_then(|(t, _)| t.parse::<f64>().ok())
                            .map(|t| (t * 1e6).round() as i64)
                            .is_some_and(|t| t > published && t < acquired)
                    })
                    .map(|l| l.split_once(' ').unwrap().1.chars().take(90).collect())
                    .collect(),
            );
            previous = rel as i64;
        }
    }

    /// The split at the median hand-off and at the slowest 1%, and what the
    /// server ran during the slowest hand-offs' middle part.
    pub fn report(&self) -> String {
        if self.splits.is_empty() {
            return "no hand-offs split".into();
        }
        let mut order: Vec<usize> = (0..self.splits.len()).collect();
        order.sort_by_key(|&i| self.splits[i][0]);
        let n = order.len();
        let pick = |q: f64| order[((n - 1) as f64 * q).round() as usize];
        let mut out = String::from(
            "| hand-off | total µs | to publish | publish to acquire | to the task |\n|---|---|---|---|---|\n",
        );
        for (label, i) in [("p50", pick(0.5)), ("p90", pick(0.9)), ("p99", pick(0.99))] {
            let s = self.splits[i];
            out += &format!(
                "| {label} (#{i}) | {} | {} | {} | {} |\n",
                s[0], s[1], s[2], s[3]
            );
        }
        let slow: Vec<usize> = order
            .iter()
            .rev()
            .take(n.div_ceil(100).max(3))
            .copied()
            .collect();
        for &i in &slow {
            let s = self.splits[i];
            out += &format!(
                "\nslow #{i}: total {} = {} + {} + {}; the server ran meanwhile:\n",
                s[0], s[1], s[2], s[3]
            );
            for line in self.between[i].iter().take(12) {
                out += &format!("    {line}\n");
            }
        }
        let mean = |part: usize, idx: &[usize]| {
            idx.iter().map(|&i| self.splits[i][part]).sum::<i64>() / idx.len().max(1) as i64
        };
        let fast: Vec<usize> = order[..n / 2].to_vec();
        out += &format!(
            "\nmean of the fastest half: {} = {} + {} + {}; of the slowest 1%: {} = {} + {} + {}\n",
            mean(0, &fast),
            mean(1, &fast),
            mean(2, &fast),
            mean(3, &fast),
            mean(0, &slow),
            mean(1, &slow),
            mean(2, &slow),
            mean(3, &slow)
        );
        out
    }
}
