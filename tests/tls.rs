//! TLS against real `redis-server`s listening on TLS only, with
//! certificates made at test time by `openssl`: a private CA, a CA the
//! client does not trust, client certificates (mutual TLS), and a password
//! over TLS. Commands and the waiters' pub/sub both go over TLS (the nodes'
//! plaintext ports are closed).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::logs::Logs;
use common::*;
use redquorum::local_servers::LocalServers;
use redquorum::{ConfigError, Error, NodeFailure, Redlock};
use tracing::Level;

/// The certificates of one test, in a temp dir removed on drop.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// A CA, a server certificate it signs for 127.0.0.1, a client
    /// certificate it signs, and a second CA that signs nothing of ours.
    fn new() -> Pki {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("redquorum-tls-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pki = Pki { dir };
        for ca in ["ca", "other-ca"] {
            pki.openssl(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.crt"),
                "-subj",
                &format!("/CN=redquorum test {ca}"),
            ]);
        }
        // Version 3 certificates (rustls refuses version 1): each with an
        // extension.
        std::fs::write(
            pki.dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        )
        .unwrap();
        std::fs::write(pki.dir.join("client.ext"), "extendedKeyUsage=clientAuth").unwrap();
        for name in ["server", "client"] {
            pki.openssl(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ]);
            let (csr, crt, ext) = (
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
            );
            pki.openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-out",
                &crt,
                "-extfile",
                &ext,
            ]);
        }
        pki
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("openssl must be installed (apt-get install -y openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).to_str().unwrap().to_owned()
    }

    fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(file)).unwrap()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` nodes that speak TLS only (the launcher's plaintext port is closed
/// once the node is up), with `extra` arguments, and `password` (if not
/// empty) required from then on; their `rediss://` URLs, with `auth`
/// (`:password@`, say) before the host.
fn tls_nodes(
    pki: &Pki,
    n: usize,
    extra: &[&str],
    password: &str,
    auth: &str,
) -> (Vec<LocalServers>, Vec<String>) {
    let mut nodes = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..n {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
            .to_string();
        let (cert, key, ca) = (
            pki.path("server.crt"),
            pki.path("server.key"),
            pki.path("ca.crt"),
        );
        let mut args = vec![
            "--tls-port",
            &port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
        ];
        args.extend(extra);
        let node = LocalServers::start_with_args(1, &args).expect("a TLS redis-server");
        // With a password: an ACL user `locker` that has it, for the lock
        // keys, their channels and every command; the default user gets it
        // too (`requirepass`).
        if !password.is_empty() {
            let pass = format!(">{password}");
            run(
                &node,
                0,
                &["ACL", "SETUSER", "locker", "on", &pass, "~*", "&*", "+@all"],
            );
        }
        // From now on TLS only (and with the password, if any).
        run(
            &node,
            0,
            &["CONFIG", "SET", "requirepass", password, "port", "0"],
        );
        urls.push(format!("rediss://{auth}127.0.0.1:{port}"));
        nodes.push(node);
    }
    (nodes, urls)
}

fn tls_builder(urls: &[String]) -> redquorum::Builder {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .retry_count(0)
}

/// Until the first connections are made (a TLS handshake takes a few round
/// trips), an attempt may time out waiting for them: try a few times.
async fn first_lock(redlock: &Redlock, resource: &str) -> Result<redquorum::Lock, Error> {
    redlock
        .lock(resource, Duration::from_secs(10))
        .retries(20)
        .await
}

#[tokio::test]
async fn locks_and_wakes_waiters_over_tls_with_a_private_ca() {
    let pki = Pki::new();
    let (_nodes, urls) = tls_nodes(&pki, 3, &["--tls-auth-clients", "no"], "", "");
    let redlock = tls_builder(&urls)
        .tls_root_certificate(pki.read("ca.crt"))
        .build()
        .unwrap();
    let lock = first_lock(&redlock, "r").await.unwrap();
    // A waiter subscribes over TLS and is woken by the release.
    let waiter = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            let lock = redlock
                .lock("r", Duration::from_secs(10))
                .wait(Duration::from_secs(8))
                .retries(50)
                .await;
            (lock, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    lock.release().await.unwrap();
    let (next, got) = waiter.await.unwrap();
    assert!(
        got - released < Duration::from_secs(2),
        "{:?}",
        got - released
    );
    next.unwrap().release().await.unwrap();
    let debug = format!(
        "{:?}",
        Redlock::builder().tls_root_certificate(pki.read("ca.crt"))
    );
    assert!(!debug.contains("BEGIN CERTIFICATE"), "{debug}");
}

#[tokio::test]
async fn an_untrusted_certificate_fails_naming_the_node_and_the_cause() {
    let pki = Pki::new();
    let (_nodes, urls) = tls_nodes(&pki, 3, &["--tls-auth-clients", "no"], "", "");
    let redlock = tls_builder(&urls)
        .tls_root_certificate(pki.read("other-ca.crt"))
        .build()
        .unwrap();
    let err = redlock
        .lock("r", Duration::from_secs(10))
        .retries(3)
        .await
        .unwrap_err();
    let report = err.report().unwrap();
    let tls = count(report, |f| matches!(f, NodeFailure::Tls(_)));
    assert!(tls >= 2, "{err}");
    let text = err.to_string();
    let node = urls[0].trim_start_matches("rediss://");
    assert!(
        text.contains(node) || text.contains(urls[1].trim_start_matches("rediss://")),
        "{text}"
    );
    assert!(text.contains("certificate"), "{text}");
    assert!(text.contains("tls_root_certificate"), "{text}");
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = Pki::new();
    let (_nodes, urls) = tls_nodes(&pki, 3, &["--tls-auth-clients", "yes"], "", "");
    let without = tls_builder(&urls)
        .tls_root_certificate(pki.read("ca.crt"))
        .build()
        .unwrap();
    let err = without
        .lock("r", Duration::from_secs(10))
        .retries(3)
        .await
        .unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(report.agreed(), 0, "{err}");
    // The node's alert (a certificate required) is a TLS failure.
    assert!(
        count(report, |f| matches!(f, NodeFailure::Tls(_))) >= 2,
        "{err}"
    );
    let with = tls_builder(&urls)
        .tls_root_certificate(pki.read("ca.crt"))
        .tls_client_certificate(pki.read("client.crt"), pki.read("client.key"))
        .build()
        .unwrap();
    let debug = format!("{with:?}");
    assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    first_lock(&with, "r")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The managed-Redis shape: TLS, and an ACL user with its password in the
/// URL. A wrong password
/// is an `Auth` failure that says what to fix; the password shows nowhere —
/// not in errors, `Debug` output, or any log line down to TRACE.
#[tokio::test]
async fn a_password_over_tls_works_and_never_shows() {
    let pki = Pki::new();
    let secret = "tls-s3cret-Pw";
    let (nodes, urls) = tls_nodes(
        &pki,
        3,
        &["--tls-auth-clients", "no"],
        secret,
        &format!("locker:{secret}@"),
    );
    let logs = Logs::at(Level::TRACE);
    let _guard = tracing::subscriber::set_default(logs.clone());
    let redlock = tls_builder(&urls)
        .tls_root_certificate(pki.read("ca.crt"))
        .build()
        .unwrap();
    first_lock(&redlock, "r")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let wrong: Vec<String> = urls.iter().map(|u| u.replace(secret, "not-it")).collect();
    let refused = tls_builder(&wrong)
        .tls_root_certificate(pki.read("ca.crt"))
        .build()
        .unwrap();
    let err = refused
        .lock("r", Duration::from_secs(10))
        .retries(3)
        .await
        .unwrap_err();
    assert!(
        count(err.report().unwrap(), |f| matches!(f, NodeFailure::Auth(_))) >= 2,
        "{err}"
    );
    assert!(err.to_string().contains("password"), "{err}");
    drop(nodes);
    for text in [
        err.to_string(),
        format!("{err:?}"),
        format!("{redlock:?}"),
        format!("{refused:?}"),
        logs.lines().join("\n"),
    ] {
        assert!(!text.contains(secret) && !text.contains("not-it"), "{text}");
    }
    assert!(
        !logs.lines().is_empty(),
        "nothing was logged: the check saw nothing"
    );
}

/// A node killed while a request waits on it over TLS closes the stream
/// without a TLS goodbye: a connection failure (the command may have been
/// applied), not a certificate problem.
#[tokio::test]
async fn a_node_dying_mid_request_over_tls_is_a_connection_failure() {
    let pki = Pki::new();
    let (mut nodes, urls) = tls_nodes(&pki, 3, &["--tls-auth-clients", "no"], "", "");
    let redlock = tls_builder(&urls)
        .tls_root_certificate(pki.read("ca.crt"))
        .build()
        .unwrap();
    // Node 1 is held by someone else, so node 0's answer decides; node 0
    // holds writes back until it is killed. Its connection is the first:
    // an error there is the request's answer (on a connection made
    // earlier, the request would be sent once more on a new one, which
    // finds the node gone).
    run_tls(
        &pki,
        &urls[1],
        &["SET", "redquorum:r", "someone-else", "PX", "60000"],
    );
    run_tls(&pki, &urls[0], &["CLIENT", "PAUSE", "10000", "WRITE"]);
    let killer = {
        let pid = nodes[0].pid(0).unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            // SAFETY: SIGKILL to our own child, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        })
    };
    let err = redlock
        .lock("r", Duration::from_secs(10))
        .retries(0)
        .await
        .unwrap_err();
    killer.join().unwrap();
    nodes[0].kill(0);
    let report = err.report().unwrap();
    let node = urls[0].trim_start_matches("rediss://");
    let failure = report
        .failures()
        .iter()
        .find(|(name, _)| name == node)
        .map(|(_, f)| f.clone());
    assert!(
        matches!(failure, Some(NodeFailure::Connection(_))),
        "{node}: {failure:?} in {err}"
    );
}

/// One command to the TLS node at `url`, through redis-cli.
fn run_tls(pki: &Pki, url: &str, args: &[&str]) {
    let port = url.rsplit(':').next().unwrap();
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert", &pki.path("ca.crt"), "-p", port])
        .args(args)
        .output()
        .expect("redis-cli");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn unusable_certificates_and_keys_fail_at_build_without_showing_the_key() {
    let pki = Pki::new();
    let node = ["rediss://127.0.0.1:6380"];
    let invalid = |b: redquorum::Builder| match b.build() {
        Err(Error::Config(e @ ConfigError::InvalidCertificate { .. })) => e.to_string(),
        other => panic!("{other:?}"),
    };
    let empty = invalid(
        Redlock::builder()
            .nodes(node)
            .tls_root_certificate(Vec::new()),
    );
    assert!(
        empty.contains("tls_root_certificate") && empty.contains("no certificate"),
        "{empty}"
    );
    let garbage = invalid(
        Redlock::builder()
            .nodes(node)
            .tls_root_certificate(b"not a pem".to_vec()),
    );
    assert!(garbage.contains("tls_root_certificate"), "{garbage}");
    // A certificate where the key should be: no key, and nothing of it shown.
    let cert = pki.read("client.crt");
    let no_key = invalid(
        Redlock::builder()
            .nodes(node)
            .tls_client_certificate(cert.clone(), cert.clone()),
    );
    assert!(no_key.contains("no private key"), "{no_key}");
    let body = String::from_utf8(cert).unwrap();
    let line = body.lines().nth(1).unwrap();
    assert!(!no_key.contains(line), "{no_key}");
    // The real ones build.
    Redlock::builder()
        .nodes(node)
        .tls_root_certificate(pki.read("ca.crt"))
        .tls_client_certificate(pki.read("client.crt"), pki.read("client.key"))
        .build()
        .unwrap();
}

/// `#insecure`, redis-rs's way to skip the checks of a node's certificate,
/// is refused at build, with or without certificates given, saying how to
/// trust a private CA instead and without the URL's password. It used to
/// build, and then every request failed on every node as a "Redis error"
/// (this build of redis-rs cannot skip the checks).
#[test]
fn a_url_that_skips_certificate_checks_is_refused_at_build() {
    let pki = Pki::new();
    for url in [
        "rediss://:s3cret@127.0.0.1:6380/#insecure",
        "rediss://locker:s3cret@127.0.0.1:6380#insecure",
    ] {
        for builder in [
            Redlock::builder().node(url),
            Redlock::builder()
                .node(url)
                .tls_root_certificate(pki.read("ca.crt")),
        ] {
            let e = match builder.build() {
                Err(Error::Config(e @ ConfigError::InsecureTls { .. })) => e,
                Err(e) => panic!("{url}: {e}"),
                Ok(_) => panic!("{url}: built"),
            };
            let shown = e.to_string();
            assert!(shown.contains("tls_root_certificate"), "{shown}");
            assert!(shown.contains("127.0.0.1:6380"), "{shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(!format!("{e:?}").contains("s3cret"), "{e:?}");
        }
    }
}

#[test]
fn the_tls_scheme_is_recognised_in_any_case() {
    for url in ["rediss://127.0.0.1:6380", "REDISS://127.0.0.1:6380"] {
        Redlock::new([url]).unwrap();
    }
}
