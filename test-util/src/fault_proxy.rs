//! A fault-injecting HTTP/1.1 proxy on loopback: [`FaultProxy`] sits
//! between a client (the object store client) and a server (`s3s-fs`),
//! forwards each request and its answer, and for the requests a rule
//! matches (method and a substring of the request target) injects a
//! [`Fault`]: the answer lost after the server applied the request, the
//! request dropped before it reached the server, or a body cut short.
//!
//! It parses HTTP only as far as it must: the request line, the headers
//! and the body's end (`Content-Length` or chunked). Every request is
//! forwarded with `Connection: close`, so one connection carries one
//! exchange and the answer is whatever the server sends until it closes.
//! Plain threads, one per connection (a test proxy sees few).

use std::fmt::Write as _;
use std::io::{BufReader, Read, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a rule does to a request it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward the request, wait for the server's whole answer, then
    /// close the client's connection without sending it: the request took
    /// effect, its answer is lost.
    LoseAnswer,
    /// Close the client's connection without forwarding the request:
    /// nothing took effect, no answer.
    DropRequest,
    /// Forward, then send the answer with its body cut to this many bytes
    /// (and `Content-Length` saying so): a short download that looks whole.
    ShortBody(usize),
}

/// One rule: `fault` for the next `times` requests with `method` whose
/// target contains `contains`.
#[derive(Debug, Clone)]
struct Rule {
    method: String,
    contains: String,
    fault: Fault,
    times: usize,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    /// Request lines of the requests a fault was applied to, in order.
    fired: Vec<String>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    upstream: SocketAddr,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fault for `method` `target`, counted, if a rule matches.
    fn take(&self, method: &str, target: &str) -> Option<Fault> {
        let mut state = self.lock();
        let at = state
            .rules
            .iter()
            .position(|r| r.method == method && target.contains(&r.contains))?;
        let rule = &mut state.rules[at];
        let fault = rule.fault;
        rule.times -= 1;
        if rule.times == 0 {
            state.rules.remove(at);
        }
        state.fired.push(format!("{method} {target}"));
        self.changed.notify_all();
        Some(fault)
    }
}

/// A started proxy; stopped on drop (connections under way finish).
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `upstream`.
    ///
    /// # Panics
    /// If it cannot listen.
    #[must_use]
    pub fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind the fault proxy");
        let addr = listener.local_addr().expect("fault proxy address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            upstream,
        });
        let accepting = shared.clone();
        let accept = std::thread::Builder::new()
            .name("fault-proxy".to_owned())
            .spawn(move || {
                for client in listener.incoming() {
                    if accepting.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let shared = accepting.clone();
                    std::thread::spawn(move || {
                        // A broken exchange is the client's or server's
                        // business: the proxy only stops forwarding it.
                        let _ = exchange(&shared, client);
                    });
                }
            })
            .expect("spawn the fault proxy");
        Self {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:<port>`: the endpoint clients should use.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The proxy's address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Applies `fault` to the next `times` requests with `method` (`PUT`,
    /// `POST`, `GET`, `HEAD`, ...) whose target (path and query) contains
    /// `contains`. Rules are tried in the order they were added.
    pub fn on(&self, method: &str, contains: &str, fault: Fault, times: usize) {
        if times == 0 {
            return;
        }
        self.shared.lock().rules.push(Rule {
            method: method.to_owned(),
            contains: contains.to_owned(),
            fault,
            times,
        });
    }

    /// Removes every rule not yet used up.
    pub fn clear(&self) {
        self.shared.lock().rules.clear();
    }

    /// The request lines (`METHOD target`) a fault was applied to so far.
    #[must_use]
    pub fn fired(&self) -> Vec<String> {
        self.shared.lock().fired.clone()
    }

    /// Waits until at least `count` faults were applied, at most
    /// `timeout`; whether they were.
    #[must_use]
    pub fn wait_fired(&self, count: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        while state.fired.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// One request and its answer on `client`'s connection.
fn exchange(shared: &Shared, client: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    let Some(head) = read_head(&mut reader)? else {
        return Ok(());
    };
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let mut words = request_line.split(' ');
    let method = words.next().unwrap_or_default().to_owned();
    let target = words.next().unwrap_or_default().to_owned();
    let mut forwarded = format!("{request_line}\r\n");
    let mut length = None;
    let mut chunked = false;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let name_lower = name.trim().to_ascii_lowercase();
        match name_lower.as_str() {
            "connection" | "keep-alive" => continue,
            "content-length" => length = value.trim().parse::<u64>().ok(),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
        forwarded.push_str(line);
        forwarded.push_str("\r\n");
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    let mut body = Vec::new();
    if chunked {
        read_chunked(&mut reader, &mut body)?;
    } else if let Some(len) = length {
        (&mut reader).take(len).read_to_end(&mut body)?;
    }
    let fault = shared.take(&method, &target);
    if fault == Some(Fault::DropRequest) {
        return client.shutdown(Shutdown::Both);
    }
    let mut server = TcpStream::connect(shared.upstream)?;
    server.write_all(forwarded.as_bytes())?;
    server.write_all(&body)?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer)?;
    match fault {
        Some(Fault::LoseAnswer) => client.shutdown(Shutdown::Both),
        Some(Fault::ShortBody(keep)) => {
            client.write_all(&cut_body(&answer, keep))?;
            client.shutdown(Shutdown::Both)
        }
        _ => {
            client.write_all(&answer)?;
            client.shutdown(Shutdown::Both)
        }
    }
}

/// The head of a request (up to the empty line, excluded), or `None` if
/// the connection closed first.
fn read_head(reader: &mut impl std::io::BufRead) -> std::io::Result<Option<String>> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        if line == "\r\n" || line == "\n" {
            return Ok(Some(head));
        }
        head.push_str(line.trim_end_matches(['\r', '\n']));
        head.push_str("\r\n");
    }
}

/// Copies a chunked body, framing and all, into `out`.
fn read_chunked(reader: &mut impl std::io::BufRead, out: &mut Vec<u8>) -> std::io::Result<()> {
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line)?;
        out.extend_from_slice(size_line.as_bytes());
        let size = size_line.split(';').next().unwrap_or_default().trim();
        let size = u64::from_str_radix(size, 16)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                    out.extend_from_slice(line.as_bytes());
                    return Ok(());
                }
                out.extend_from_slice(line.as_bytes());
            }
        }
        reader.take(size + 2).read_to_end(out)?;
    }
}

/// `answer` (a whole response, `Content-Length` framed) with its body cut
/// to `keep` bytes and its `Content-Length` saying so; unchanged if it has
/// no such framing.
fn cut_body(answer: &[u8], keep: usize) -> Vec<u8> {
    let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return answer.to_vec();
    };
    let head = String::from_utf8_lossy(&answer[..end]);
    let body = &answer[end + 4..];
    let body = &body[..keep.min(body.len())];
    let mut out = String::new();
    let mut framed = false;
    for line in head.split("\r\n") {
        if line.to_ascii_lowercase().starts_with("content-length:") {
            let _ = write!(out, "Content-Length: {}\r\n", body.len());
            framed = true;
        } else {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    if !framed {
        return answer.to_vec();
    }
    out.push_str("\r\n");
    let mut cut = out.into_bytes();
    cut.extend_from_slice(body);
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_body_rewrites_the_length() {
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nETag: x\r\n\r\n0123456789";
        let cut = cut_body(answer, 3);
        assert_eq!(
            cut,
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nETag: x\r\n\r\n012".to_vec()
        );
    }

    #[test]
    fn chunked_bodies_are_copied_whole() {
        let raw = b"4\r\nabcd\r\n0\r\n\r\nNEXT";
        let mut reader = BufReader::new(&raw[..]);
        let mut out = Vec::new();
        read_chunked(&mut reader, &mut out).unwrap();
        assert_eq!(out, b"4\r\nabcd\r\n0\r\n\r\n".to_vec());
    }
}
