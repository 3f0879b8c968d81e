//! The ingress over TLS (`--tls-cert`/`--tls-key`) through the real
//! binary, with a real rustls client trusting a test CA (made with
//! `openssl`): a wildcard certificate picked by SNI among two, HTTP/2 and
//! HTTP/1.1 by ALPN, a client stuck in its handshake holding up no one,
//! certificates reloaded when their files change, and bad flags refused
//! by name; the admin API over TLS (`--admin-tls-cert`) with the CLI and
//! a joining worker trusting its CA through `STASIS_CA_CERT`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use stasis_test_util::certs::TestCa;
use stasis_test_util::wait;

use crate::support::Server;

/// A TLS client trusting `ca` only, offering `alpn`.
fn connector(ca: &std::path::Path, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("read the CA") {
        roots
            .add(cert.expect("a CA certificate"))
            .expect("add the CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// What one TLS request to `host` at `addr` saw: the ALPN protocol, the
/// server's leaf certificate, the answer's status and body.
struct Seen {
    alpn: Option<Vec<u8>>,
    leaf: Vec<u8>,
    status: u16,
    body: String,
}

impl Seen {
    /// The counter's count in the body (`... count: N`).
    fn count(&self) -> &str {
        self.body.trim().rsplit(' ').next().unwrap_or_default()
    }
}

async fn request(
    connector: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
    host: &str,
    method: &str,
) -> Result<Seen, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let leaf = session
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let io = TokioIo::new(tls);
    let request = hyper::Request::builder()
        .method(method)
        .uri(format!("https://{host}/"))
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let response = if alpn.as_deref() == Some(b"h2") {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(request).await
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(request).await
    }
    .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Seen {
        alpn,
        leaf,
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ingress_serves_tls_by_sni_with_h2_reloads_and_is_not_held_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new(dir.path());
    let other = ca.issue("other", "other", "DNS:*.other.test");
    let actors = ca.issue("actors", "actors-1", "DNS:*.actors.example.test");
    let arg = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    // The certificate for the actors' names is the second: SNI picks it.
    let flags = [
        "--domain".to_owned(),
        "example.test".to_owned(),
        "--tls-cert".to_owned(),
        arg(&other.cert),
        "--tls-key".to_owned(),
        arg(&other.key),
        "--tls-cert".to_owned(),
        arg(&actors.cert),
        "--tls-key".to_owned(),
        arg(&actors.key),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start(&flags);
    server.push("counter");
    server.create("c1", "counter");

    let h2 = connector(&ca.cert, &[b"h2", b"http/1.1"]);
    let host = "c1.actors.example.test";
    let first = request(&h2, server.ingress, host, "POST")
        .await
        .expect("h2");
    assert_eq!(first.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!((first.status, first.count()), (200, "1"), "{}", first.body);
    let wanted = CertificateDer::from_pem_file(&actors.cert).expect("the actors' cert");
    assert_eq!(first.leaf, wanted.to_vec(), "SNI did not pick the wildcard");

    // HTTP/1.1 by ALPN, on the same state.
    let h1 = connector(&ca.cert, &[b"http/1.1"]);
    let second = request(&h1, server.ingress, host, "POST")
        .await
        .expect("h1");
    assert_eq!(second.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!((second.status, second.count()), (200, "2"));

    // A client that connects and never finishes its handshake holds up no
    // other connection.
    let mut stuck = tokio::net::TcpStream::connect(server.ingress)
        .await
        .expect("connect");
    tokio::io::AsyncWriteExt::write_all(&mut stuck, &[0x16, 0x03, 0x01])
        .await
        .expect("a partial record");
    let third = tokio::time::timeout(
        Duration::from_secs(5),
        request(&h2, server.ingress, host, "POST"),
    )
    .await
    .expect("a request while a handshake hangs")
    .expect("answered");
    assert_eq!(third.count(), "3");

    // A renewed certificate in place: new connections get it.
    let renewed = ca.issue("renewed", "actors-2", "DNS:*.actors.example.test");
    std::fs::copy(&renewed.key, &actors.key).expect("replace the key");
    std::fs::copy(&renewed.cert, &actors.cert).expect("replace the cert");
    let wanted = CertificateDer::from_pem_file(&renewed.cert).expect("renewed");
    wait::until_async(
        "the renewed certificate to be served",
        Duration::from_secs(10),
        async || {
            // A client of its own each time: a resumed session shows the
            // certificate of the session it resumes.
            let fresh = connector(&ca.cert, &[b"h2"]);
            let seen = request(&fresh, server.ingress, host, "GET")
                .await
                .expect("get");
            assert_eq!(seen.status, 200, "{}", seen.body);
            (seen.leaf == wanted.to_vec()).then_some(())
        },
    )
    .await;
    drop(stuck);
}

#[test]
fn tls_flags_that_do_not_pair_or_load_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new(dir.path());
    let leaf = ca.issue("leaf", "leaf", "DNS:localhost");
    let other = ca.issue("other", "other", "DNS:localhost");
    let data = dir.path().join("data");
    let arg = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    let fails = |extra: &[String]| {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        match Server::start_in(&data, &extra) {
            Ok(_) => panic!("serve started with {extra:?}"),
            Err(stderr) => stderr,
        }
    };
    let lone = fails(&["--tls-cert".into(), arg(&leaf.cert)]);
    assert!(lone.contains("come in pairs"), "{lone}");
    let missing = fails(&[
        "--tls-cert".into(),
        arg(&dir.path().join("nope.pem")),
        "--tls-key".into(),
        arg(&leaf.key),
    ]);
    assert!(missing.contains("nope.pem"), "{missing}");
    assert!(
        !missing.contains(&arg(dir.path())),
        "a server path: {missing}"
    );
    let mismatched = fails(&[
        "--tls-cert".into(),
        arg(&leaf.cert),
        "--tls-key".into(),
        arg(&other.key),
    ]);
    assert!(mismatched.contains("does not go with"), "{mismatched}");
}

/// `--admin-tls-cert/--admin-tls-key`: the admin API over TLS. The CLI at
/// an `https://` admin URL trusts it through `STASIS_CA_CERT` and is
/// refused, naming the certificate, without it; plain HTTP to the TLS
/// port gets no answer; a `worker run --join https://...` with the CA
/// joins and hosts an actor; the flags are refused in cluster mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_serves_tls_and_clients_trust_it_by_the_ca_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new(dir.path());
    let admin = ca.issue("admin", "admin", "IP:127.0.0.1,DNS:localhost");
    let arg = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    let (cert, key) = (arg(&admin.cert), arg(&admin.key));
    let server = Server::start(&[
        "--workers",
        "1",
        "--admin-tls-cert",
        &cert,
        "--admin-tls-key",
        &key,
    ]);
    let https = format!("https://127.0.0.1:{}", server.admin.port());
    let cli = |url: &str, ca_file: Option<&std::path::Path>, args: &[&str]| {
        let mut command = crate::support::STASIS.command();
        command
            .args(args)
            .env("STASIS_ADMIN", url)
            .env_remove("STASIS_CA_CERT");
        if let Some(ca_file) = ca_file {
            command.env("STASIS_CA_CERT", ca_file);
        }
        command.output().expect("run stasis")
    };
    let counter = crate::support::demo("counter");
    for args in [
        &[
            "template",
            "push",
            "counter",
            counter.to_str().expect("utf-8"),
        ][..],
        &["actor", "create", "c1", "--template", "counter"],
    ] {
        let out = cli(&https, Some(&ca.cert), args);
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let listed = cli(&https, Some(&ca.cert), &["actor", "list", "-o", "json"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("\"c1\""),
        "{listed:?}"
    );
    // Without the CA the certificate is not trusted, and the CLI says so.
    let untrusted = cli(&https, None, &["actor", "list"]);
    assert!(!untrusted.status.success());
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
    // Plain HTTP to the TLS port is no admin API.
    let plain = format!("http://127.0.0.1:{}", server.admin.port());
    assert!(!cli(&plain, None, &["actor", "list"]).status.success());
    // A bad CA file is named.
    let missing = dir.path().join("no-such-ca.pem");
    let bad = cli(&https, Some(&missing), &["actor", "list"]);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("STASIS_CA_CERT"),
        "{bad:?}"
    );
    // A remote worker joins over https with the CA and hosts an actor.
    let mut command = crate::support::STASIS.worker(&https, "w-tls", &dir.path().join("w-tls"));
    command.env("STASIS_CA_CERT", &ca.cert);
    let _worker = stasis_test_util::Proc::start(command, "stasis worker ready", "w-tls", false)
        .expect("the worker joins over https");
    let moved = cli(
        &https,
        Some(&ca.cert),
        &["actor", "migrate", "c1", "--to", "w-tls"],
    );
    assert!(moved.status.success(), "{moved:?}");
    let answer = crate::support::post(&server, "c1").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    // One machine only: refused with --etcd, naming the flag.
    let shared = format!("file://{}", dir.path().join("shared").display());
    let refused = crate::support::Server::start_in(
        &dir.path().join("cluster-data"),
        &[
            "--directory",
            "etcd://127.0.0.1:1",
            "--snapshot-store",
            &shared,
            "--admin-tls-cert",
            &cert,
            "--admin-tls-key",
            &key,
        ],
    );
    match refused {
        Ok(_) => panic!("serve took --admin-tls-cert with --etcd"),
        Err(stderr) => assert!(stderr.contains("--admin-tls-cert"), "{stderr}"),
    }
}
