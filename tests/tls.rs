//! TLS: redis-server with `--tls-port` and certificates made by the test.

use redisson_lock_testkit as common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::topology::Scratch;
use common::{config, within, RedisServer};
use redisson_lock::{Error, RedissonClient, Unlocked};

/// A throwaway CA and a server certificate it signed for 127.0.0.1.
struct Certs {
    dir: Scratch,
}

impl Certs {
    fn generate() -> Self {
        let dir = Scratch::new("tls");
        let openssl = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(&dir.0)
                .output()
                .expect("TLS tests need the openssl command");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=redisson-lock test CA",
                ],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    "server.key",
                    "-out",
                    "server.csr",
                    "-subj",
                    "/CN=localhost",
                ],
            ]
            .concat(),
        );
        std::fs::write(
            dir.0.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ]);
        Certs { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.0.join(file)
    }

    /// A redis-server that speaks TLS only, on a free port (another, twice
    /// at most, if the port is taken before the server binds it).
    async fn server(&self) -> RedisServer {
        let s = |p: &Path| p.to_str().unwrap().to_string();
        let (cert, key, ca) = (
            s(&self.path("server.crt")),
            s(&self.path("server.key")),
            s(&self.path("ca.crt")),
        );
        for _ in 0..3 {
            let port = common::free_port();
            let flags = [
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                "no",
            ];
            if let Some(server) = RedisServer::try_start_on(port, None, &flags).await {
                return server;
            }
        }
        panic!("no TLS server started on any of 3 free ports");
    }
}

fn tls_config(server: &RedisServer, certs: &Certs) -> redisson_lock::Config {
    let mut c = config(
        &format!("rediss://127.0.0.1:{}", server.port),
        Duration::from_secs(1),
    );
    c.tls_ca_file = Some(certs.path("ca.crt"));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_renewals_and_wakeups_work_over_tls() {
    let certs = Certs::generate();
    let server = certs.server().await;
    let holder = RedissonClient::connect(tls_config(&server, &certs))
        .await
        .unwrap();
    let waiter = RedissonClient::connect(tls_config(&server, &certs))
        .await
        .unwrap();

    let guard = holder.lock("tls-lock").unwrap().lock().await.unwrap();
    let lock = waiter.lock("tls-lock").unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await });
    // Renewed over TLS for longer than the 1 s lease.
    let mut updates = holder.watchdog_updates();
    within("renewals", async {
        while updates.borrow_and_update().renewed < 4 {
            updates.changed().await.unwrap();
        }
    })
    .await;
    assert!(!guard.is_lost());
    assert!(!waiting.is_finished());
    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    let got = within("waiter woken over TLS", waiting)
        .await
        .unwrap()
        .unwrap();
    got.unlock().await.unwrap();
    holder.shutdown().await;
    waiter.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_or_plain_connections_are_refused_clearly() {
    let certs = Certs::generate();
    let server = certs.server().await;

    // The system roots do not include the test CA.
    let mut untrusted = tls_config(&server, &certs);
    untrusted.tls_ca_file = None;
    let err = RedissonClient::connect(untrusted).await.unwrap_err();
    assert!(matches!(err, Error::Connection { .. }), "{err:?}");
    assert!(err.to_string().contains(&server.port.to_string()), "{err}");
    assert!(
        err.to_string()
            .contains("TLS certificate rejected (UnknownIssuer)"),
        "{err}"
    );

    // A CA file on a plain address is a configuration mistake.
    let mut plain = tls_config(&server, &certs);
    plain.address = format!("redis://127.0.0.1:{}", server.port);
    let err = RedissonClient::connect(plain).await.unwrap_err();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("not a TLS address")),
        "{err:?}"
    );

    // So is a CA file that holds no certificate.
    let mut bad = tls_config(&server, &certs);
    bad.tls_ca_file = Some(certs.path("san.ext"));
    let err = RedissonClient::connect(bad).await.unwrap_err();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("no certificate")),
        "{err:?}"
    );
}
