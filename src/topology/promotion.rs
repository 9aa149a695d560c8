//! Which replicas a failover could promote: Sentinel's rule and the
//! cluster's, mirrored from their sources, as far as a client can see them.
//!
//! A lock write survives any failover if every replica that *can be
//! promoted* has it. Counting every replica the deployment lists is safe but
//! stops everyone when one replica dies (it stays listed until the
//! deployment calls it down, 30 s by default); counting the replicas
//! connected at that instant confirms nothing on a primary promoted a moment
//! ago. The promotion rule is the one that matters:
//!
//! * **Sentinel** (`sentinelSelectSlave`, the same in Redis 7.0 and 8.0 and
//!   Valkey 8.0 and 8.1) never promotes a replica that is `s_down` or
//!   `o_down`, that has not answered a ping for 5 s (`last-ok-ping-reply`),
//!   whose `slave-priority` is 0, or whose link to the primary has been down
//!   longer than ten times `down-after-milliseconds` (plus the time the
//!   primary has been down). Its other two conditions are left out on
//!   purpose: `disconnected` (a link the sentinel is making, as for every
//!   replica of a primary promoted a moment ago) and a stale `info-refresh`
//!   both clear within seconds, faster than a failover starts, so such a
//!   replica still counts.
//! * **The cluster** (`clusterHandleSlaveFailover`) promotes a replica that
//!   runs for election itself: it must be alive and reachable, not flagged
//!   `nofailover`, and its data no older than `cluster-replica-validity-factor`
//!   allows (a replica restarted empty is too old until it has synced, so
//!   it cannot take over with less than its primary had). Which replicas
//!   cannot run is read from what the cluster as a whole agreed, never from
//!   one node's opinion: the `fail` flag (a majority of primaries reported
//!   it), or `handshake` (not a member yet). `fail?`, `noaddr` and a bus
//!   link down only say that the node asked cannot reach it: the election
//!   never looks at them (a voter does not consult the candidate's `fail?`),
//!   so a node with one bad link would otherwise make a live replica's
//!   writes look safe without it.
//!
//! A replica that cannot be promoted but may still acknowledge a `WAIT` (a
//! priority-0 replica, a `nofailover` one) is counted apart: its
//! acknowledgement must not stand in for a promotable one's.
//!
//! A replica left out for a passing reason (silent, down, its link down for
//! long, `fail`) is counted apart too: it can be promoted again as soon as
//! it answers, before it has the writes made meanwhile (a replica whose
//! replication link broke while it was away answers pings all the same). A
//! write confirmed without it is confirmed only for now: its hold is at risk
//! until the replica acknowledges a later write, or is gone from the
//! deployment.

/// Sentinel's ping period: a replica silent for five of them is passed over.
const SENTINEL_PING_PERIOD_MS: u64 = 1000;
/// How many ping periods without a valid reply Sentinel tolerates.
const SENTINEL_PING_PERIODS: u64 = 5;
/// A replica's link to the primary may be down this many times
/// `down-after-milliseconds` (plus the primary's own down time) before
/// Sentinel passes it over.
const SENTINEL_LINK_DOWN_FACTOR: u64 = 10;

/// Whether a failover could promote a replica, and whether it may
/// acknowledge a `WAIT` on the primary all the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// A failover could promote it: it must have every confirmed write.
    Promotable,
    /// A failover could not promote it now, for a reason that passes (it is
    /// silent, down, its link down, `fail`); it could once it is back.
    LeftOut,
    /// It cannot be promoted; `may_ack` when it may still be replicating
    /// (its acknowledgement is then discounted).
    Passed { may_ack: bool },
}

impl Standing {
    /// The more promotable of two views of one replica (another sentinel
    /// may see it better).
    pub(crate) fn best(self, other: Standing) -> Standing {
        match (self, other) {
            (Standing::Promotable, _) | (_, Standing::Promotable) => Standing::Promotable,
            (Standing::LeftOut, _) | (_, Standing::LeftOut) => Standing::LeftOut,
            (Standing::Passed { may_ack: a }, Standing::Passed { may_ack: b }) => {
                Standing::Passed { may_ack: a || b }
            }
        }
    }
}

/// What one sentinel says of one replica (`SENTINEL REPLICAS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelReplica {
    /// `ip:port` as announced (the primary's `INFO` names it so too).
    pub(crate) address: String,
    pub(crate) flags: Vec<String>,
    /// Milliseconds since its last valid ping reply.
    pub(crate) last_ok_ping_reply_ms: u64,
    /// `slave-priority`; 0 is never promoted.
    pub(crate) priority: u64,
    /// Milliseconds its link to the primary has been down (0 while up).
    pub(crate) master_link_down_ms: i64,
}

/// What one sentinel says of the primary the rule is applied for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SentinelPrimary {
    pub(crate) down_after_ms: u64,
    /// How long this sentinel has seen the primary down (`s-down-time`).
    pub(crate) s_down_ms: Option<u64>,
}

/// Sentinel's rule for one replica, as one sentinel sees it.
pub(crate) fn sentinel_standing(replica: &SentinelReplica, primary: SentinelPrimary) -> Standing {
    let flagged = |f: &str| replica.flags.iter().any(|x| x == f);
    let link_limit = primary
        .down_after_ms
        .saturating_mul(SENTINEL_LINK_DOWN_FACTOR)
        .saturating_add(primary.s_down_ms.unwrap_or(0));
    // Down, silent, or its link to the primary down for long: it cannot
    // acknowledge, and is passed over until that passes.
    let away = flagged("s_down")
        || flagged("o_down")
        || replica.last_ok_ping_reply_ms > SENTINEL_PING_PERIOD_MS * SENTINEL_PING_PERIODS
        || (replica.master_link_down_ms > 0 && replica.master_link_down_ms as u64 > link_limit);
    match (replica.priority, away) {
        (0, away) => Standing::Passed { may_ack: !away },
        (_, true) => Standing::LeftOut,
        (_, false) => Standing::Promotable,
    }
}

/// One node of `CLUSTER NODES`, as the node asked sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterNode {
    pub(crate) id: String,
    /// `ip:port` (without the bus port).
    pub(crate) address: String,
    /// The hostname the node announces, if any.
    pub(crate) hostname: Option<String>,
    pub(crate) flags: Vec<String>,
    /// The id of the primary of a replica.
    pub(crate) primary_id: Option<String>,
    /// The node asked has a bus link to it.
    pub(crate) connected: bool,
    /// The slot ranges the node serves (inclusive; slots being imported or
    /// migrated, `[...]`, are not listed).
    pub(crate) slots: Vec<(u16, u16)>,
}

impl ClusterNode {
    pub(crate) fn flagged(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub(crate) fn is_primary(&self) -> bool {
        self.flagged("master")
    }

    /// The node serves at least one slot.
    pub(crate) fn has_slots(&self) -> bool {
        !self.slots.is_empty()
    }
}

/// The cluster's rule for one replica, from the flags the cluster agrees
/// on (not the asked node's own `fail?` or link).
pub(crate) fn cluster_standing(replica: &ClusterNode) -> Standing {
    if replica.flagged("handshake") {
        return Standing::Passed { may_ack: false };
    }
    match (replica.flagged("fail"), replica.flagged("nofailover")) {
        (failed, true) => Standing::Passed { may_ack: !failed },
        (true, false) => Standing::LeftOut,
        (false, false) => Standing::Promotable,
    }
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@cport[,hostname]> <flags>
/// <primary-id> <ping-sent> <pong-recv> <epoch> <link-state> <slot>...`.
/// Lines that do not have that shape are skipped.
pub(crate) fn parse_cluster_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let (endpoint, hostname) = match f[1].split_once(',') {
                Some((endpoint, host)) if !host.is_empty() => (endpoint, Some(host.to_string())),
                Some((endpoint, _)) => (endpoint, None),
                None => (f[1], None),
            };
            let address = endpoint.split('@').next().unwrap_or(endpoint).to_string();
            Some(ClusterNode {
                id: f[0].to_string(),
                address,
                hostname,
                flags: f[2].split(',').map(str::to_string).collect(),
                primary_id: (f[3] != "-").then(|| f[3].to_string()),
                connected: f[7] == "connected",
                slots: f[8..]
                    .iter()
                    .filter_map(|range| slot_range(range))
                    .collect(),
            })
        })
        .collect()
}

/// `5461-10922` or `42`; `None` for a migration entry (`[42->-id]`) or
/// anything else.
fn slot_range(text: &str) -> Option<(u16, u16)> {
    let (start, end) = text.split_once('-').unwrap_or((text, text));
    let (start, end) = (start.parse().ok()?, end.parse().ok()?);
    (start <= end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(flags: &str, ping_ms: u64, priority: u64, link_down_ms: i64) -> SentinelReplica {
        SentinelReplica {
            address: "127.0.0.1:7001".into(),
            flags: flags.split(',').map(str::to_string).collect(),
            last_ok_ping_reply_ms: ping_ms,
            priority,
            master_link_down_ms: link_down_ms,
        }
    }

    const PRIMARY: SentinelPrimary = SentinelPrimary {
        down_after_ms: 30_000,
        s_down_ms: None,
    };

    #[test]
    fn sentinel_passes_over_what_it_would_not_promote() {
        let promotable = |r: &SentinelReplica| sentinel_standing(r, PRIMARY);
        assert_eq!(
            promotable(&replica("slave", 300, 100, 0)),
            Standing::Promotable
        );
        // A link being made (after a failover) still counts: it is up in a moment.
        assert_eq!(
            promotable(&replica("slave,disconnected", 1_200, 100, 0)),
            Standing::Promotable
        );
        // Silent for more than five ping periods: dead, or cut off, until
        // it answers again.
        assert_eq!(
            promotable(&replica("slave,disconnected", 5_001, 100, 0)),
            Standing::LeftOut
        );
        assert_eq!(
            promotable(&replica("slave,s_down", 100, 100, 0)),
            Standing::LeftOut
        );
        // Priority 0 and down: never promoted, and not acknowledging now.
        assert_eq!(
            promotable(&replica("slave,s_down", 100, 0, 0)),
            Standing::Passed { may_ack: false }
        );
        // Priority 0: never promoted, still replicating.
        assert_eq!(
            promotable(&replica("slave", 100, 0, 0)),
            Standing::Passed { may_ack: true }
        );
        // Its link to the primary down for longer than ten down-after periods.
        assert_eq!(
            promotable(&replica("slave", 100, 100, 300_001)),
            Standing::LeftOut
        );
        assert_eq!(
            promotable(&replica("slave", 100, 100, 300_000)),
            Standing::Promotable
        );
        // A never-connected replica reports -1 s, which Sentinel lets pass.
        assert_eq!(
            promotable(&replica("slave", 100, 100, -1000)),
            Standing::Promotable
        );
        // The primary's own down time extends the limit.
        let down = SentinelPrimary {
            down_after_ms: 30_000,
            s_down_ms: Some(20_000),
        };
        assert_eq!(
            sentinel_standing(&replica("slave", 100, 100, 310_000), down),
            Standing::Promotable
        );
    }

    #[test]
    fn the_best_view_of_a_replica_wins() {
        let passed = Standing::Passed { may_ack: false };
        let acking = Standing::Passed { may_ack: true };
        assert_eq!(passed.best(Standing::Promotable), Standing::Promotable);
        assert_eq!(
            Standing::LeftOut.best(Standing::Promotable),
            Standing::Promotable
        );
        assert_eq!(acking.best(Standing::LeftOut), Standing::LeftOut);
        assert_eq!(passed.best(acking), acking);
        assert_eq!(passed.best(passed), passed);
    }

    #[test]
    fn cluster_nodes_are_read_and_judged() {
        let text = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-b2]
b2 127.0.0.1:7001@17001,node-b master - 0 1700000000000 2 connected 5461-10922 16000
r1 127.0.0.1:7003@17003 slave a1 0 1700000000000 1 connected
r2 127.0.0.1:7004@17004 slave,fail a1 0 0 1 disconnected
r3 127.0.0.1:7005@17005 slave,nofailover b2 0 0 2 connected
r4 127.0.0.1:7006@17006 slave a1 0 0 1 disconnected
r5 127.0.0.1:7007@17007 slave,fail? a1 0 0 1 disconnected
r6 127.0.0.1:7008@17008 slave,noaddr b2 0 0 2 connected
r7 127.0.0.1:7009@17009 handshake - 0 0 0 connected
bad line
";
        let nodes = parse_cluster_nodes(text);
        assert_eq!(nodes.len(), 9);
        assert_eq!(nodes[1].address, "127.0.0.1:7001");
        assert_eq!(nodes[1].hostname.as_deref(), Some("node-b"));
        assert!(nodes[0].is_primary() && nodes[0].has_slots());
        assert_eq!(nodes[0].slots, [(0, 5460)], "a migration is not a range");
        assert_eq!(nodes[1].slots, [(5461, 10922), (16000, 16000)]);
        assert!(!nodes[2].has_slots());
        assert_eq!(nodes[2].primary_id.as_deref(), Some("a1"));
        let standing: Vec<Standing> = nodes[2..].iter().map(cluster_standing).collect();
        assert_eq!(
            standing,
            [
                Standing::Promotable,
                // `fail`, by the cluster: back in the count once it is not.
                Standing::LeftOut,
                Standing::Passed { may_ack: true },
                // The node asked lost its link to it, or flags it `fail?`:
                // its own opinion; the cluster would still promote it.
                Standing::Promotable,
                Standing::Promotable,
                Standing::Promotable,
                Standing::Passed { may_ack: false },
            ]
        );
    }
}
