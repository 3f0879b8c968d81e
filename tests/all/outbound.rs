//! `fetch` and `--allow-outbound` through the real binary and the `fetch`
//! demo: an allowed name that resolves to loopback reaches nothing, while
//! a rule naming the IP reaches the same listener; `public` reaches no
//! loopback or private address; 3xx answers come back to the actor
//! unfollowed; malformed rules stop `serve` and `worker run` at start,
//! naming the rule. Only loopback listeners; no name but `localhost`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::{STASIS, Server, client, to_actor};

/// A loopback origin answering every request with `head` (status line and
/// headers) and `body`; counts the requests it has read.
pub(crate) async fn origin(head: &str, body: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let addr = serve_origin(head, body, move |_| {
        count.fetch_add(1, Ordering::SeqCst);
    })
    .await;
    (addr, seen)
}

/// [`origin`], keeping each request's head (lower-cased).
pub(crate) async fn recording_origin(
    head: &str,
    body: &'static str,
) -> (SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = heads.clone();
    let addr = serve_origin(head, body, move |request| {
        kept.lock()
            .expect("heads")
            .push(String::from_utf8_lossy(request).to_lowercase());
    })
    .await;
    (addr, heads)
}

/// The origin's accept loop: `seen` gets each request's head, then the
/// answer is `head`, a text body and `connection: close`.
async fn serve_origin(
    head: &str,
    body: &'static str,
    seen: impl Fn(&[u8]) + Send + Sync + 'static,
) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head: Arc<str> = head.into();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind origin");
    let addr = listener.local_addr().expect("origin address");
    let seen = Arc::new(seen);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = seen.clone();
            let head = head.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                seen(&request);
                let answer = format!(
                    "{head}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// `GET url` through the `fetch` demo actor `getter` (brackets escaped
/// for the query; the demo decodes them).
async fn fetch(server: &Server, url: &str) -> crate::support::Answer {
    let url = url.replace('[', "%5B").replace(']', "%5D");
    to_actor(
        &client(),
        server.ingress,
        "getter",
        "GET",
        &format!("/?url={url}"),
    )
    .await
}

fn serve_fetch(rules: &[String]) -> Server {
    let mut flags = vec!["--workers", "1"];
    for rule in rules {
        flags.extend(["--allow-outbound", rule.as_str()]);
    }
    let server = Server::start(&flags);
    server.push("fetch");
    server.create("getter", "fetch");
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_resolves_to_loopback_is_refused_and_the_ip_rule_reaches_it() {
    let (by_name, seen_by_name) = origin("HTTP/1.1 200 OK", "by name\n").await;
    let (by_ip, seen_by_ip) = origin("HTTP/1.1 200 OK", "by IP\n").await;
    let server = serve_fetch(&[format!("localhost:{}", by_name.port()), by_ip.to_string()]);
    // `localhost` is allowed by name but resolves to loopback.
    let answer = fetch(&server, &format!("http://localhost:{}/", by_name.port())).await;
    assert_eq!(answer.status, 502, "{answer:?}");
    assert!(
        answer.body.contains("localhost resolves to ")
            && answer.body.contains("a loopback address")
            && answer.body.contains("only a rule naming that IP allows it"),
        "{answer:?}"
    );
    assert_eq!(seen_by_name.load(Ordering::SeqCst), 0, "no connection made");
    // The same kind of listener, named by its IP literal, is reached.
    let answer = fetch(&server, &format!("http://{by_ip}/")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body, "by IP\n");
    assert_eq!(seen_by_ip.load(Ordering::SeqCst), 1);
    let text = server.metrics().await;
    assert!(
        text.contains(r#"stasis_fetches_total{outcome="refused"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"stasis_fetches_total{outcome="ok"} 1"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_reaches_no_loopback_or_private_address() {
    let (listener, seen) = origin("HTTP/1.1 200 OK", "private\n").await;
    let port = listener.port();
    let server = serve_fetch(&[format!("public:{port}")]);
    for (url, why) in [
        (
            format!("http://127.0.0.1:{port}/"),
            "127.0.0.1 is a loopback address",
        ),
        (
            format!("http://localhost:{port}/"),
            "localhost resolves to ",
        ),
        (format!("http://[::1]:{port}/"), "::1 is a loopback address"),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            "an IPv4-mapped address of 127.0.0.1",
        ),
        (format!("http://10.1.2.3:{port}/"), "a private address"),
        (format!("http://192.168.0.1:{port}/"), "a private address"),
        (
            format!("http://169.254.169.254:{port}/"),
            "a link-local address",
        ),
        (
            format!("http://[fd00::1]:{port}/"),
            "a unique-local address",
        ),
        (format!("http://0.0.0.0:{port}/"), "an unspecified address"),
    ] {
        let answer = fetch(&server, &url).await;
        assert_eq!(answer.status, 502, "{url}: {answer:?}");
        assert!(answer.body.contains(why), "{url}: {answer:?}");
    }
    // `public:PORT` allows that port only.
    let answer = fetch(&server, &format!("http://127.0.0.1:{}/", port - 1)).await;
    assert_eq!(answer.status, 502, "{answer:?}");
    assert!(
        answer.body.contains("not allowed by --allow-outbound"),
        "{answer:?}"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 0, "no connection made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_returned_to_the_actor_not_followed() {
    let (target, seen_target) = origin("HTTP/1.1 200 OK", "the target\n").await;
    let (redirecting, seen) = origin(
        &format!("HTTP/1.1 302 Found\r\nlocation: http://{target}/"),
        "moved\n",
    )
    .await;
    let server = serve_fetch(&[redirecting.to_string(), target.to_string()]);
    let answer = fetch(&server, &format!("http://{redirecting}/")).await;
    assert_eq!(answer.status, 302, "{answer:?}");
    assert_eq!(answer.body, "moved\n");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(seen_target.load(Ordering::SeqCst), 0, "never followed");
}

#[test]
fn bad_allow_outbound_rules_stop_serve_and_worker_run_naming_the_rule() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (n, (rule, why)) in [
        ("::1", "an IPv6 address goes in brackets, e.g. [::1]"),
        ("127.0.0.1:0", "port 0 is not a port"),
        ("api.example:70000", "port 70000 is over 65535"),
        ("a..b", "an empty label"),
        ("-a.example", "begins or ends with '-'"),
        ("http://127.0.0.1", "give HOST[:PORT] without a scheme"),
        ("api.example/v1", "a path is not allowed"),
        ("*", "use public"),
        ("a b", "' ' is not allowed"),
    ]
    .into_iter()
    .enumerate()
    {
        // `--allow-outbound=RULE`: a rule that begins with '-' is a value.
        let flag = format!("--allow-outbound={rule}");
        let refused = Server::start_in(&tmp.path().join(format!("d{n}")), &[&flag]);
        let stderr = refused.err().expect("serve refuses the rule");
        assert!(
            stderr.contains(&format!("--allow-outbound {rule:?}: ")) && stderr.contains(why),
            "{rule}: {stderr}"
        );
    }
    let out = STASIS
        .worker("http://127.0.0.1:1", "w", &tmp.path().join("w"))
        .args(["--allow-outbound", "::1"])
        .output()
        .expect("worker run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("[::1]"), "{stderr}");
    // The good forms start.
    let server = Server::start(&[
        "--allow-outbound",
        "[::1]:8080",
        "--allow-outbound",
        "[::1]",
        "--allow-outbound",
        "public",
        "--allow-outbound",
        "public:8443",
        "--allow-outbound",
        "*.example.com:8443",
    ]);
    drop(server);
}

/// Found by a new user: a fetch whose name does not resolve, or whose
/// connection is refused, said only "client error (Connect)". The answer
/// now names the cause (and an IPv6 address in brackets, as rules are
/// written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_that_cannot_connect_says_why() {
    // `.invalid` never resolves (RFC 6761); a closed port: one bound and
    // dropped.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("address").port();
    drop(closed);
    let server = serve_fetch(&[
        "nosuch.invalid:8080".to_owned(),
        format!("127.0.0.1:{port}"),
    ]);
    let unresolved = fetch(&server, "http://nosuch.invalid:8080/").await;
    assert_eq!(unresolved.status, 502, "{unresolved:?}");
    assert!(
        unresolved.body.contains("resolving nosuch.invalid"),
        "{unresolved:?}"
    );
    let refused = fetch(&server, &format!("http://127.0.0.1:{port}/")).await;
    assert_eq!(refused.status, 502, "{refused:?}");
    assert!(
        refused.body.to_lowercase().contains("refused"),
        "{refused:?}"
    );
    let v6 = fetch(&server, "http://[::1]:8080/").await;
    assert!(v6.body.contains("[::1]:8080"), "{v6:?}");
}
