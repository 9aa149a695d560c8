//! What the deployment itself says of a replica while an operation runs:
//! each sentinel's flags for it, or the primary's `CLUSTER NODES` line, and
//! the primary's replication state for it. Each change is an event of the
//! operation's timeline, so that a refusal or a signal can be set against
//! when the deployment stopped (or started again) counting the replica.

use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::common::topology::node_client;
use crate::deployment::Deployment;
use crate::resource::now_us;

const EVERY: Duration = Duration::from_millis(100);
const ASK: Duration = Duration::from_millis(500);

pub struct Observer {
    stop: watch::Sender<bool>,
    task: JoinHandle<Vec<(i64, String)>>,
}

/// Where to look, and for what.
enum Source {
    /// A sentinel's `SENTINEL REPLICAS`, the replica by its announced port.
    Sentinel { port: u16, replica: u16 },
    /// The primary's `CLUSTER NODES`, the replica by its port.
    ClusterNodes { primary: u16, replica: u16 },
    /// The primary's `INFO replication`, the replica by its announced port.
    Replication { primary: u16, replica: u16 },
}

impl Source {
    fn name(&self) -> String {
        match self {
            Source::Sentinel { port, replica } => format!("sentinel {port} on replica {replica}"),
            Source::ClusterNodes { primary, replica } => {
                format!("primary {primary}'s CLUSTER NODES on replica {replica}")
            }
            Source::Replication { primary, replica } => {
                format!("primary {primary}'s replication to {replica}")
            }
        }
    }

    fn port(&self) -> u16 {
        match self {
            Source::Sentinel { port, .. } => *port,
            Source::ClusterNodes { primary, .. } | Source::Replication { primary, .. } => *primary,
        }
    }

    /// What it says now, in a few words.
    async fn read(&self, client: &Client) -> Option<String> {
        let ask = |command: &'static str, args: Vec<&'static str>| {
            tokio::time::timeout(
                ASK,
                client.custom::<Value, _>(
                    CustomCommand::new_static(command, ClusterHash::Random, false),
                    args,
                ),
            )
        };
        match self {
            Source::Sentinel { replica, .. } => {
                let Ok(Ok(Value::Array(replicas))) =
                    ask("SENTINEL", vec!["REPLICAS", "mymaster"]).await
                else {
                    return None;
                };
                let port = replica.to_string();
                replicas.iter().find_map(|r| {
                    let Value::Array(fields) = r else { return None };
                    let get = |name: &str| {
                        fields
                            .chunks(2)
                            .find(|kv| kv[0].as_string().as_deref() == Some(name))
                            .and_then(|kv| kv[1].as_string())
                    };
                    (get("port")? == port).then(|| get("flags").unwrap_or_default())
                })
            }
            Source::ClusterNodes { replica, .. } => {
                let Ok(Ok(text)) = ask("CLUSTER", vec!["NODES"]).await else {
                    return None;
                };
                let text = text.as_string()?;
                let address = format!("127.0.0.1:{replica}@");
                text.lines().find(|l| l.contains(&address)).map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    format!("{} {}", f.get(2).unwrap_or(&"?"), f.get(7).unwrap_or(&"?"))
                })
            }
            Source::Replication { replica, .. } => {
                let Ok(Ok(info)) = ask("INFO", vec!["replication"]).await else {
                    return None;
                };
                let info = info.as_string()?;
                let port = format!("port={replica},");
                Some(
                    info.lines()
                        .find(|l| l.starts_with("slave") && l.contains(&port))
                        .and_then(|l| l.split(',').find_map(|kv| kv.strip_prefix("state=")))
                        .unwrap_or("not attached")
                        .to_string(),
                )
            }
        }
    }
}

impl Observer {
    /// Starts watching the replica on (real) port `replica` of the primary
    /// on `primary` (the port clients reach it on).
    pub async fn start(deployment: &Deployment, primary: u16, replica: u16) -> Self {
        let sources = match deployment {
            Deployment::Sentinel(s) => {
                let announced = s.proxy(replica).port;
                let mut sources: Vec<Source> = s
                    .sentinels
                    .iter()
                    .map(|n| Source::Sentinel {
                        port: n.port,
                        replica: announced,
                    })
                    .collect();
                sources.push(Source::Replication {
                    primary,
                    replica: announced,
                });
                sources
            }
            Deployment::Cluster(_) => vec![
                Source::ClusterNodes { primary, replica },
                Source::Replication { primary, replica },
            ],
        };
        let mut clients = vec![];
        for source in &sources {
            clients.push(node_client(source.port()).await);
        }
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut events = vec![];
            let mut last: Vec<Option<String>> = vec![None; sources.len()];
            loop {
                for (i, (source, client)) in sources.iter().zip(&clients).enumerate() {
                    let now = source.read(client).await;
                    if now.is_some() && now != last[i] {
                        let said = now.clone().unwrap_or_default();
                        events.push((now_us(), format!("{}: {said}", source.name())));
                        last[i] = now;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(EVERY) => {}
                    _ = stopped.wait_for(|s| *s) => break,
                }
            }
            for client in clients {
                let _ = client.quit().await;
            }
            events
        });
        Observer { stop, task }
    }

    pub async fn stop(self) -> Vec<(i64, String)> {
        let _ = self.stop.send(true);
        self.task.await.unwrap()
    }
}
