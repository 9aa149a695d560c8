//! Real network partitions on one machine, as Jepsen makes them: every
//! server on a loopback address of its own (`127.a.b.n`, with `bind`,
//! `bind-source-addr` and the announce settings, so that everything it
//! sends to another server leaves from that address), and iptables dropping
//! the packets between two groups of addresses. A dropped packet is never
//! answered: a connection across the cut hangs until its own timeout, as
//! across a dead switch, where a proxy's closed socket would be refused at
//! once.
//!
//! The client under test connects from `127.0.0.1` (the kernel's source for
//! every loopback destination) to the servers' own addresses, so it is cut
//! with the group it is put in. The test itself observes every server on
//! `127.0.0.1:<port>` as well (each server also binds it): packets from
//! `127.0.0.1` to `127.0.0.1` match no rule, so the observer sees both
//! sides of a partition.
//!
//! iptables needs root (CAP_NET_ADMIN). Without it a partition test says so
//! and returns, unless `CI` is set: CI must run them.

use std::process::Command;

/// A block of loopback addresses for one deployment: `127.a.b.n`, with
/// `a` and `b` drawn at random so that two tests running at once do not
/// share (or cut) each other's addresses.
#[derive(Debug, Clone)]
pub struct Addresses {
    prefix: String,
}

impl Addresses {
    pub fn new() -> Self {
        use rand::Rng;
        let mut rng = rand::rng();
        Addresses {
            prefix: format!(
                "127.{}.{}",
                rng.random_range(1..=254u8),
                rng.random_range(0..=255u8)
            ),
        }
    }

    /// The `n`th address of the block (2 and up: the servers).
    pub fn host(&self, n: u8) -> String {
        format!("{}.{n}", self.prefix)
    }
}

impl Default for Addresses {
    fn default() -> Self {
        Self::new()
    }
}

/// The address every client of the test connects from.
pub const CLIENT: &str = "127.0.0.1";

/// A server's flags that put it on `host`: it listens there (and on
/// `127.0.0.1`, for the observer) and connects out from there (replication,
/// the cluster bus, a sentinel's links). Flags, not config lines: they come
/// after the test servers' own `--bind 127.0.0.1`, and the last one counts.
pub fn bind_flags(host: &str) -> Vec<String> {
    // Protected mode takes only 127.0.0.1 and ::1 for loopback: the
    // servers' links from their own addresses would be refused.
    [
        "--bind",
        host,
        CLIENT,
        "--bind-source-addr",
        host,
        "--protected-mode",
        "no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A data node's flags that put it on `host`, announced there.
pub fn data_node_flags(host: &str) -> Vec<String> {
    let mut flags = bind_flags(host);
    flags.extend(["--replica-announce-ip".to_string(), host.to_string()]);
    flags
}

/// A chain of iptables rules of this process, removed on drop.
pub struct Firewall {
    chain: String,
}

impl Firewall {
    /// The firewall, or why there is none (not root, no iptables). In CI a
    /// missing firewall is a failure, not a skip.
    pub fn open() -> Result<Firewall, String> {
        // One chain per firewall: the tests of one binary run at once.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let chain = format!("rl-cut-{}-{n}", std::process::id());
        let firewall = Firewall { chain };
        let made = iptables(&["-N", &firewall.chain])
            .and_then(|_| iptables(&["-I", "INPUT", "-j", &firewall.chain]));
        match made {
            Ok(()) => Ok(firewall),
            Err(why) => {
                let _ = iptables(&["-X", &firewall.chain]);
                Err(why)
            }
        }
    }

    /// The firewall for a test that needs one, or `None` after saying why
    /// the test does not run here (`CI` set: a panic instead).
    pub fn for_test(test: &str) -> Option<Firewall> {
        match Firewall::open() {
            Ok(f) => Some(f),
            Err(why) if std::env::var_os("CI").is_some() => {
                panic!(
                    "{test}: iptables is needed in CI ({why}): run as root with iptables installed"
                )
            }
            Err(why) => {
                eprintln!("skipped: {test} makes real partitions with iptables, which is not usable here ({why}); run as root with Debian's iptables to run it");
                None
            }
        }
    }

    /// Drops every packet between an address of `one` and an address of
    /// `other`, both ways.
    pub fn cut(&self, one: &[String], other: &[String]) {
        for a in one {
            for b in other {
                for (from, to) in [(a, b), (b, a)] {
                    iptables(&["-A", &self.chain, "-s", from, "-d", to, "-j", "DROP"])
                        .unwrap_or_else(|e| panic!("cut {from} -> {to}: {e}"));
                }
            }
        }
    }

    /// Drops the packets from an address of `from` to one of `to` only: a
    /// one-way cut (their replies, and what `to` starts, still pass).
    pub fn cut_one_way(&self, from: &[String], to: &[String]) {
        for a in from {
            for b in to {
                iptables(&["-A", &self.chain, "-s", a, "-d", b, "-j", "DROP"])
                    .unwrap_or_else(|e| panic!("cut {a} -> {b}: {e}"));
            }
        }
    }

    /// Removes every cut.
    pub fn heal(&self) {
        iptables(&["-F", &self.chain]).expect("flush the partition chain");
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        let _ = iptables(&["-D", "INPUT", "-j", &self.chain]);
        let _ = iptables(&["-F", &self.chain]);
        let _ = iptables(&["-X", &self.chain]);
    }
}

/// Runs `iptables -w <args>` (waiting for the xtables lock another test may
/// hold).
fn iptables(args: &[&str]) -> Result<(), String> {
    let out = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
