//! The resource the critical sections guard: a redis-server of its own that
//! no fault touches. Every section enters and leaves through one script,
//! so the server orders them and stamps them with one clock, and each
//! lock's fencing tokens are checked to only grow.

use fred::prelude::*;

use crate::common::RedisServer;

/// `INCR` the lock's inside-counter (more than 1: someone else is inside),
/// check the token against the largest seen (kept as "token holder"), stamp
/// with `TIME` (µs). A token not above the largest seen returns the holder
/// that was handed the larger one: its acquisition was lost.
const ENTER: &str = r#"
local inside = redis.call('INCR', KEYS[1])
local token = tonumber(ARGV[1])
local newest, by = string.match(redis.call('GET', KEYS[2]) or '0 -', '(%d+) (%S+)')
local regressed = ''
if token <= tonumber(newest) then regressed = by else redis.call('SET', KEYS[2], token .. ' ' .. ARGV[2]) end
local t = redis.call('TIME')
return {inside, regressed, tonumber(t[1]) * 1000000 + tonumber(t[2])}
"#;

const EXIT: &str = r#"
redis.call('DECR', KEYS[1])
local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])
"#;

pub struct Resource {
    server: RedisServer,
    client: Client,
}

pub struct Entered {
    /// Sections inside, this one included.
    pub inside: i64,
    /// The token was not larger than every token seen on this lock: the
    /// holder handed the larger one.
    pub regressed_after: Option<String>,
    pub at_us: i64,
}

impl Resource {
    pub async fn start() -> Self {
        let server = RedisServer::start().await;
        let client = server.raw().await;
        Resource { server, client }
    }

    pub async fn enter(&self, lock: &str, holder: &str, token: i64) -> Entered {
        let (inside, regressed, at_us): (i64, String, i64) = self
            .client
            .eval(
                ENTER,
                vec![format!("inside:{lock}"), format!("token:{lock}")],
                vec![token.to_string(), holder.to_string()],
            )
            .await
            .expect("the resource server never fails");
        Entered {
            inside,
            regressed_after: (!regressed.is_empty()).then_some(regressed),
            at_us,
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Tells the JVM client to stop.
    pub async fn stop_jvm(&self) {
        let _: () = self
            .client
            .set("safety:stop", "1", None, None, false)
            .await
            .unwrap();
    }

    /// The JVM client's sections, from its log on the resource: `E holder
    /// lock token inside regressed-after us` (`-`: not regressed), then `X holder us`.
    pub async fn jvm_sections(&self) -> Vec<crate::workload::Section> {
        let log: Vec<String> = self.client.lrange("jsections", 0, -1).await.unwrap();
        let mut open: std::collections::HashMap<String, crate::workload::Section> =
            Default::default();
        let mut done = vec![];
        for line in log {
            let w: Vec<&str> = line.split(' ').collect();
            match w[0] {
                "E" => {
                    open.insert(
                        w[1].to_string(),
                        crate::workload::Section {
                            holder: w[1].to_string(),
                            lock: w[2].to_string(),
                            token: w[3].parse().unwrap(),
                            inside: w[4].parse().unwrap(),
                            regressed_after: (w[5] != "-").then(|| w[5].to_string()),
                            enter_us: w[6].parse().unwrap(),
                            exit_us: i64::MAX,
                            at_risk_at_entry: false,
                            at_risk_us: None,
                            lost_us: None,
                            safety: "jvm".into(),
                        },
                    );
                }
                _ => {
                    if let Some(mut section) = open.remove(w[1]) {
                        section.exit_us = w[2].parse().unwrap();
                        done.push(section);
                    }
                }
            }
        }
        done
    }

    pub async fn exit(&self, lock: &str) -> i64 {
        self.client
            .eval(EXIT, vec![format!("inside:{lock}")], Vec::<i64>::new())
            .await
            .expect("the resource server never fails")
    }
}

/// Wall-clock µs, the clock `TIME` reads on the same machine.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}
