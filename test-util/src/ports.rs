//! Loopback ports for servers that a test starts as child processes (etcd,
//! s3s-fs) and that must bind a port chosen before they start, possibly
//! again after a restart.
//!
//! A port the kernel hands out for `bind(0)` comes from the ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`, 32768–60999 by default), the
//! same range every outgoing connection of every test takes its local port
//! from; a released one is soon reused, and a member restarted on it then
//! fails with "address already in use". [`reserved_port`] picks from below
//! that range instead, and never hands one port out twice in a process.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lowest port tried (below it are well-known and registered services).
const LOWEST_PORT: u16 = 20_000;

/// The first port of the kernel's ephemeral range (32768 when unreadable).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|start| *start > LOWEST_PORT + 1_000)
        .unwrap_or(32_768)
}

/// A loopback port outside the ephemeral range, free right now (bound,
/// then released) and not returned before by this process.
///
/// # Panics
/// When no such port is found in 10,000 tries.
#[must_use]
pub fn reserved_port() -> u16 {
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let handed_out = HANDED_OUT.get_or_init(Mutex::default);
    let span = u32::from(ephemeral_start() - LOWEST_PORT);
    // A per-process start point, so that parallel test processes spread out.
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let mut handed_out = handed_out.lock().unwrap_or_else(|e| e.into_inner());
    for step in 0..10_000u32 {
        let offset = seed.wrapping_add(step.wrapping_mul(7_919)) % span;
        let port = LOWEST_PORT + u16::try_from(offset).expect("span fits in u16");
        if handed_out.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free loopback port below the ephemeral range");
}
