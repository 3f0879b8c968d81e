//! Mutual TLS between the control plane and workers (`--internal-ca`,
//! `--internal-tls-cert`, `--internal-tls-key`) through the real binary,
//! with certificates from `stasis ca create/issue`: a `worker run --join
//! https://...` hosts an actor the ingress reaches; the worker's listener
//! refuses a client with no certificate or one from another CA and
//! answers one from the cluster's CA; the admin API's internal routes
//! need a client certificate from the CA, its other routes do not; a worker of another CA joins but
//! the control plane will not place an actor on it, naming TLS; a
//! certificate the CA did not issue is refused at start; a cluster
//! replica reaches its registered worker over mutual TLS; flags that do
//! not come together are refused by name; `ca create` never replaces a CA
//! and keeps its key private. Certificates carry a role: every worker
//! route answers only the control plane's (a worker's is refused with 403
//! and never acts; none, another CA's and an expired one fail the
//! handshake), and a process refuses to start with the other role's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use stasis_test_util::process::Proc;

use crate::support::{STASIS, Server, count, post};

/// `stasis ARGS`, which must succeed; its stdout.
fn stasis_ok(args: &[&str]) -> String {
    let out = STASIS.command().args(args).output().expect("run stasis");
    assert!(out.status.success(), "stasis {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8")
}

/// A CA in `dir` with a certificate for each of `names` (default hosts:
/// localhost and 127.0.0.1): `cp` and `client` with the control plane's
/// role, the others a worker's.
fn ca(dir: &Path, names: &[&str]) -> PathBuf {
    stasis_ok(&["ca", "create", "--dir", arg(dir)]);
    for name in names {
        let role = if matches!(*name, "cp" | "client") {
            "control"
        } else {
            "worker"
        };
        stasis_ok(&[
            "ca",
            "issue",
            "--dir",
            arg(dir),
            "--name",
            name,
            "--role",
            role,
        ]);
    }
    dir.join("ca.pem")
}

/// The three flags giving `dir`'s CA and its certificate `name`.
fn flags(dir: &Path, name: &str) -> Vec<String> {
    let path = |file: String| dir.join(file).to_str().expect("utf-8").to_owned();
    vec![
        "--internal-ca".into(),
        path("ca.pem".into()),
        "--internal-tls-cert".into(),
        path(format!("{name}.pem")),
        "--internal-tls-key".into(),
        path(format!("{name}-key.pem")),
    ]
}

/// A `worker run` named `name` joining `join`, with `extra` flags.
fn worker(join: &str, name: &str, data: &Path, extra: &[String]) -> Result<Proc, String> {
    let mut command = STASIS.worker(join, name, &data.join(name));
    command.args(extra).env("STASIS_LOG", "info");
    Proc::start(command, "stasis worker ready", name, false)
}

/// The CLI against the admin URL `admin`, trusting `ca` for https.
fn cli(admin: &str, ca: &Path, args: &[&str]) -> std::process::Output {
    STASIS
        .command()
        .args(args)
        .env("STASIS_ADMIN", admin)
        .env("STASIS_CA_CERT", ca)
        .output()
        .expect("run stasis")
}

fn cli_ok(admin: &str, ca: &Path, args: &[&str]) -> String {
    let out = cli(admin, ca, args);
    assert!(out.status.success(), "stasis {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `worker list` shows `name` ready.
fn wait_ready(admin: &str, ca: &Path, name: &str) {
    let what = format!("{name} to be ready");
    stasis_test_util::wait::until_else(&what, Duration::from_secs(10), || {
        let list = cli_ok(admin, ca, &["worker", "list", "-o", "json"]);
        let list: serde_json::Value = serde_json::from_str(&list).expect("json");
        let ready = list
            .as_array()
            .into_iter()
            .flatten()
            .any(|w| w["name"] == name && w["state"] == "ready");
        if ready { Ok(()) } else { Err(list) }
    });
}

/// A raw TLS client trusting `ca`, presenting `identity` (certificate and
/// key files) if any.
fn connector(ca: &Path, identity: Option<(&Path, &Path)>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("read the CA") {
        roots.add(cert.expect("a CA certificate")).expect("add");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .expect("read the certificate")
                .collect::<Result<Vec<_>, _>>()
                .expect("certificates");
            let key = PrivateKeyDer::from_pem_file(key).expect("read the key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client certificate")
        }
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// `GET path` over TLS at `addr` (by IP): the answer's status and body,
/// or why there was none.
async fn get_over_tls(
    connector: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
    path: &str,
) -> Result<(u16, String), String> {
    call_over_tls(connector, addr, "GET", path).await
}

/// `METHOD path` (empty body) over TLS at `addr` (by IP): the answer's
/// status and body, or why there was none.
async fn call_over_tls(
    connector: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
    method: &str,
    path: &str,
) -> Result<(u16, String), String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::IpAddress(addr.ip().into());
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .map_err(|_| "no answer".to_owned())?
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_worker_serves_actors_over_mutual_tls_and_refuses_other_clients() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("ca");
    let ca_pem = ca(&certs, &["cp", "w1", "client"]);
    let cp = flags(&certs, "cp");
    let mut args: Vec<&str> = vec![
        "--workers",
        "0",
        "--admin-tls-cert",
        &cp[3],
        "--admin-tls-key",
        &cp[5],
    ];
    args.extend(cp.iter().map(String::as_str));
    let server = Server::start(&args);
    let admin = format!("https://127.0.0.1:{}", server.admin.port());
    // The worker trusts the control plane through the internal CA alone
    // (no STASIS_CA_CERT), and presents its own certificate.
    let w1 =
        worker(&admin, "w1", dir.path(), &flags(&certs, "w1")).expect("w1 joins over mutual TLS");
    wait_ready(&admin, &ca_pem, "w1");
    // Another worker's certificate does not join under a name it does not
    // bear (the control plane checks the name in it).
    let Err(stderr) = worker(&admin, "w2", dir.path(), &flags(&certs, "w1")) else {
        panic!("w2 joined with w1's certificate");
    };
    assert!(stderr.contains("is not worker w2's"), "{stderr}");
    let counter = crate::support::demo("counter");
    cli_ok(
        &admin,
        &ca_pem,
        &["template", "push", "counter", arg(&counter)],
    );
    cli_ok(
        &admin,
        &ca_pem,
        &["actor", "create", "c", "--template", "counter"],
    );
    // The only worker is the remote one: the actor runs there, reached
    // over mutual TLS.
    assert_eq!(count(&post(&server, "c").await), 1);
    assert_eq!(count(&post(&server, "c").await), 2);
    let got = cli_ok(&admin, &ca_pem, &["actor", "get", "c", "-o", "json"]);
    let got: serde_json::Value = serde_json::from_str(&got).expect("json");
    assert_eq!(got["worker"], "w1", "{got}");

    // The worker's listener speaks TLS only, to clients of the CA.
    let listen = w1.addr("listen=");
    let client = (certs.join("client.pem"), certs.join("client-key.pem"));
    let right = connector(&ca_pem, Some((&client.0, &client.1)));
    let actors = "/internal/v1/actors";
    let answer = get_over_tls(&right, listen, actors).await;
    assert_eq!(answer.map(|a| a.0), Ok(200));
    let anonymous = get_over_tls(&connector(&ca_pem, None), listen, actors).await;
    assert!(anonymous.is_err(), "no client certificate: {anonymous:?}");
    let other = dir.path().join("other");
    ca(&other, &["client"]);
    let (other_cert, other_key) = (other.join("client.pem"), other.join("client-key.pem"));
    let stranger = connector(&ca_pem, Some((&other_cert, &other_key)));
    let refused = get_over_tls(&stranger, listen, actors).await;
    assert!(refused.is_err(), "another CA's certificate: {refused:?}");

    // The admin listener asks for a client certificate and lets clients
    // without one in (the CLI above), but its internal routes serve only
    // a connection with a certificate from the internal CA.
    let workers = "/internal/v1/workers";
    let (status, body) = get_over_tls(&connector(&ca_pem, None), server.admin, workers)
        .await
        .expect("an answer");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("client certificate"), "{body}");
    let (status, body) = get_over_tls(&right, server.admin, workers)
        .await
        .expect("an answer");
    assert_ne!(status, 401, "{body}");
    let stranger_admin = get_over_tls(&stranger, server.admin, workers).await;
    assert!(stranger_admin.is_err(), "{stranger_admin:?}");
    // Plain HTTP gets no answer either.
    let plain = crate::support::raw(
        listen,
        "GET /internal/v1/actors HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(!plain.starts_with("HTTP/1.1 200"), "{plain}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_another_ca_gets_no_actor_and_the_error_names_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("ca");
    ca(&certs, &["cp", "w1"]);
    let other = dir.path().join("other");
    ca(&other, &["rogue"]);
    let cp = flags(&certs, "cp");
    let mut args: Vec<&str> = vec!["--workers", "0"];
    args.extend(cp.iter().map(String::as_str));
    // The admin API is plain HTTP here: the worker joins; only the
    // control plane's calls to it are over mutual TLS.
    let server = Server::start(&args);
    let admin = server.admin_url();
    let _rogue = worker(&admin, "rogue", dir.path(), &flags(&other, "rogue"))
        .expect("the worker of another CA starts and joins");
    server.wait_for_worker("rogue", "ready");
    server.push("counter");
    let out = server.cli(&["actor", "create", "c", "--template", "counter"]);
    assert!(
        !out.status.success(),
        "placed on a worker of another CA: {out:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("TLS"), "{stderr}");
    assert!(stderr.contains("rogue"), "{stderr}");

    // A worker with a certificate of the right CA issued for another name
    // cannot stand in for it: the control plane checks that the
    // certificate names the worker it reaches.
    let _impostor = worker(&admin, "w2", dir.path(), &flags(&certs, "w1"))
        .expect("the worker starts and joins");
    server.wait_for_worker("w2", "ready");
    // (rogue takes no new actor: the create can only go to w2.)
    server.cli_ok(&["worker", "drain", "rogue"]);
    let out = server.cli(&["actor", "create", "d", "--template", "counter"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "placed on an impostor: {out:?}");
    assert!(stderr.contains("is not w2's"), "{stderr}");

    // A certificate the worker's own --internal-ca did not issue is
    // refused at start, by file name.
    let mut mixed = flags(&certs, "w1");
    mixed[3] = other.join("rogue.pem").to_str().expect("utf-8").into();
    mixed[5] = other.join("rogue-key.pem").to_str().expect("utf-8").into();
    let Err(stderr) = worker(&admin, "mixed", dir.path(), &mixed) else {
        panic!("a worker started with a certificate its CA did not issue");
    };
    assert!(stderr.contains("rogue.pem"), "{stderr}");
    assert!(stderr.contains("internal CA"), "{stderr}");
    assert!(
        !stderr.contains(dir.path().to_str().expect("utf-8")),
        "{stderr}"
    );
}

#[test]
fn internal_tls_flags_come_together_and_files_are_named_by_name_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("ca");
    ca(&certs, &["cp"]);
    let all = flags(&certs, "cp");
    let serve = |extra: &[&str]| {
        Server::start_in(&dir.path().join("data"), extra)
            .err()
            .expect("serve refused")
    };
    let only_ca = serve(&all[..2].iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        only_ca.contains("--internal-tls-cert and --internal-tls-key missing"),
        "{only_ca}"
    );
    let missing = dir.path().join("secret-folder").join("nope.pem");
    let mut unreadable: Vec<&str> = all.iter().map(String::as_str).collect();
    unreadable[1] = arg(&missing);
    let unreadable = serve(&unreadable);
    assert!(unreadable.contains("nope.pem"), "{unreadable}");
    assert!(!unreadable.contains("secret-folder"), "{unreadable}");
    // The worker: the same rule, by its environment variables too.
    let mut command = STASIS.worker("http://127.0.0.1:1", "w", &dir.path().join("w"));
    command
        .env("STASIS_INTERNAL_TLS_CERT", &all[3])
        .env("STASIS_INTERNAL_TLS_KEY", &all[5]);
    let Err(stderr) = Proc::start(command, "stasis worker ready", "w", false) else {
        panic!("a worker started without --internal-ca");
    };
    assert!(stderr.contains("--internal-ca missing"), "{stderr}");

    // `ca create` never replaces a CA; its key and the issued keys are
    // private; `ca issue` puts every --host in the certificate.
    let again = STASIS
        .command()
        .args(["ca", "create", "--dir", arg(&certs)])
        .output()
        .expect("run stasis");
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already exists"),
        "{again:?}"
    );
    #[cfg(unix)]
    for key in ["ca-key.pem", "cp-key.pem"] {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(certs.join(key))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    stasis_ok(&[
        "ca",
        "issue",
        "--dir",
        arg(&certs),
        "--name",
        "w9",
        "--host",
        "10.1.2.3",
        "--host",
        "w9.internal.test",
    ]);
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(certs.join("w9.pem"))
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&text.stdout);
    for wanted in [
        "IP Address:10.1.2.3",
        "DNS:w9.internal.test",
        "DNS:w9",
        "TLS Web Server Authentication",
        "TLS Web Client Authentication",
        "stasis worker",
    ] {
        assert!(text.contains(wanted), "{wanted} not in {text}");
    }
    // Names that would overwrite a key file (the CA's, or another
    // certificate's), hosts that match no one and a validity past ten
    // years are refused, and nothing is written.
    for (args, said) in [
        (&["--name", "ca-key"][..], "-key"),
        (&["--name", "w9-key"], "-key"),
        (
            &["--name", "w8", "--host", "[::1]"],
            "neither an IP address",
        ),
        (
            &["--name", "w8", "--host", "10.0.0.1:80"],
            "neither an IP address",
        ),
        (&["--name", "w8", "--host", "*"], "neither an IP address"),
        (&["--name", "w8", "--host", ""], "neither an IP address"),
        (&["--name", "w8", "--days", "5000"], "5000"),
    ] {
        let out = STASIS
            .command()
            .args(["ca", "issue", "--dir", arg(&certs)])
            .args(args)
            .output()
            .expect("run stasis");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} issued");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    assert!(!certs.join("w8.pem").exists());
    let key = std::fs::read_to_string(certs.join("ca-key.pem")).expect("the CA key");
    assert!(key.contains("PRIVATE KEY"), "the CA key was replaced");
}

/// Cluster mode (etcd, a replica, a registered worker): every process
/// with the internal CA's flags (by their variables); the replica reaches
/// the worker over mutual TLS, and the worker's listener serves no plain
/// HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replica_reaches_its_registered_worker_over_mutual_tls() {
    use stasis_test_util::cluster::{Deployment, Setup};
    let _one = crate::replicas::ONE_CLUSTER.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("ca");
    // The replica's certificate has the control plane's role; the
    // worker's is issued with its name, which the replica checks in it.
    ca(&certs, &["cp", "w1"]);
    let mut setup = Setup::new(1, 1, 0);
    setup.lease_ttl = Some(crate::replicas::LEASE_TTL.to_owned());
    setup.echo = crate::replicas::echo();
    let file = |name: &str| certs.join(name).to_str().expect("utf-8").to_owned();
    setup.env = vec![
        ("STASIS_INTERNAL_CA".into(), file("ca.pem")),
        ("STASIS_INTERNAL_TLS_CERT".into(), file("cp.pem")),
        ("STASIS_INTERNAL_TLS_KEY".into(), file("cp-key.pem")),
    ];
    let mut d = Deployment::start(STASIS, setup);
    d.add_worker_with(
        "w1",
        &[
            ("STASIS_INTERNAL_TLS_CERT".into(), file("w1.pem")),
            ("STASIS_INTERNAL_TLS_KEY".into(), file("w1-key.pem")),
        ],
    );
    d.wait_for_workers(1);
    d.push_counter(0);
    d.cli_json(0, &["actor", "create", "t1", "--template", "counter"]);
    let c = crate::support::client();
    for expected in 1..=2 {
        let answer = crate::support::to_actor(&c, d.replica(0).ingress, "t1", "POST", "/").await;
        assert_eq!(count(&answer), expected);
    }
    assert_eq!(d.cli_json(0, &["actor", "get", "t1"])["worker"], "w1");
    let plain = crate::support::raw(
        d.worker("w1").listen,
        "GET /internal/v1/actors HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(!plain.starts_with("HTTP/1.1 200"), "{plain}");
}

/// The certificate `name.pem`/`name-key.pem` in `dir`, issued by its CA
/// with `role` (a `stasis ca issue --role` unit) and expired an hour ago.
fn expired(dir: &Path, name: &str, role: stasis_runtime::http::subject::CertRole) {
    use rcgen::{CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_pem = std::fs::read(dir.join("ca.pem")).expect("ca.pem");
    let ca_der = CertificateDer::from_pem_slice(&ca_pem).expect("the CA certificate");
    let ca_name = stasis_runtime::http::subject::common_name(&ca_der).expect("its name");
    let ca_key = std::fs::read_to_string(dir.join("ca-key.pem")).expect("ca-key.pem");
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    ca.is_ca = IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    let issuer = Issuer::new(ca, KeyPair::from_pem(&ca_key).expect("the CA key"));
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    params
        .distinguished_name
        .push(DnType::OrganizationalUnitName, role.unit());
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(2);
    params.not_after = now - time::Duration::hours(1);
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("sign");
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).expect("write");
    std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).expect("write");
}

/// Every route of a worker's API × every kind of client certificate: the
/// control plane's reaches the route (whatever it answers); a worker's of
/// the same CA (its own, or another worker's) is refused with 403 naming
/// the control plane, and a `DELETE` of an actor with it never acts; no
/// certificate, another CA's and an expired one fail the handshake. A
/// control plane with a worker's certificate, and a worker with the
/// control plane's, refuse to start, saying how to issue the right one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_route_takes_calls_from_the_control_plane_certificate_only() {
    use stasis_runtime::http::subject::CertRole;
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("ca");
    let ca_pem = ca(&certs, &["cp", "w1", "w2", "client"]);
    expired(&certs, "stale", CertRole::Control);
    let other = dir.path().join("other");
    ca(&other, &["client"]);
    let cp = flags(&certs, "cp");
    let mut args: Vec<&str> = vec!["--workers", "0"];
    args.extend(cp.iter().map(String::as_str));
    let server = Server::start(&args);
    let admin = server.admin_url();
    let w1 = worker(&admin, "w1", dir.path(), &flags(&certs, "w1")).expect("w1 joins");
    server.wait_for_worker("w1", "ready");
    server.push("counter");
    server.cli_ok(&["actor", "create", "c", "--template", "counter"]);
    assert_eq!(count(&post(&server, "c").await), 1);
    let listen = w1.addr("listen=");

    let identity = |dir: &Path, name: &str| {
        connector(
            &ca_pem,
            Some((
                &dir.join(format!("{name}.pem")),
                &dir.join(format!("{name}-key.pem")),
            )),
        )
    };
    let control = identity(&certs, "client");
    let workers = [identity(&certs, "w1"), identity(&certs, "w2")];
    let refused = [
        ("no certificate", connector(&ca_pem, None)),
        ("another CA's", identity(&other, "client")),
        ("an expired one", identity(&certs, "stale")),
    ];
    let mut routes = vec![
        ("GET", "/internal/v1/actors".to_owned()),
        ("GET", "/internal/v1/actors/c".to_owned()),
        ("DELETE", "/internal/v1/actors/ghost".to_owned()),
        ("GET", "/metrics".to_owned()),
    ];
    for op in stasis_runtime::contract::proto::Op::ALL {
        routes.push(("POST", format!("/internal/v1/actors/ghost/{}", op.as_str())));
    }
    for (method, path) in &routes {
        let (status, body) = call_over_tls(&control, listen, method, path)
            .await
            .unwrap_or_else(|e| panic!("{method} {path} as the control plane: {e}"));
        assert_ne!(status, 403, "{method} {path} as the control plane: {body}");
        for worker in &workers {
            let (status, body) = call_over_tls(worker, listen, method, path)
                .await
                .unwrap_or_else(|e| panic!("{method} {path} as a worker: {e}"));
            assert_eq!(status, 403, "{method} {path} as a worker: {body}");
            assert!(body.contains("only from the control plane"), "{body}");
        }
        for (what, client) in &refused {
            let answer = call_over_tls(client, listen, method, path).await;
            assert!(answer.is_err(), "{method} {path} with {what}: {answer:?}");
        }
    }
    // Another worker's certificate never acts: the actor is still there.
    let (status, _) = call_over_tls(&workers[1], listen, "DELETE", "/internal/v1/actors/c")
        .await
        .expect("an answer");
    assert_eq!(status, 403);
    assert_eq!(count(&post(&server, "c").await), 2);
    assert_eq!(server.cli_json(&["actor", "get", "c"])["state"], "running");

    // The wrong role refuses to start, saying how to issue the right one.
    let out = STASIS
        .command()
        .args(["serve", "--workers", "0", "--data-dir"])
        .arg(dir.path().join("wrong"))
        .args(flags(&certs, "w2"))
        .output()
        .expect("run stasis");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "serve started with a worker's certificate"
    );
    assert!(stderr.contains("--role control"), "{stderr}");
    let Err(stderr) = worker(&admin, "w3", dir.path(), &flags(&certs, "cp")) else {
        panic!("a worker started with the control plane's certificate");
    };
    assert!(stderr.contains("--role worker"), "{stderr}");
}
