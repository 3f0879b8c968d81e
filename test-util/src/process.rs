//! A process of the real `stasis` binary, started by a test or bench,
//! waited for until it prints its ready line, and killed on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A started `stasis` process that has printed its ready line.
///
/// stdout and stderr are drained by threads so the process never blocks on
/// a full pipe; stderr (its log) is kept for [`Proc::log`] and echoed to
/// the caller's stderr, prefixed with `[tag]`, when asked to. Dropping a
/// `Proc` sends SIGKILL and reaps it.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    ready: String,
    log: Arc<Mutex<String>>,
}

impl Proc {
    /// Spawns `command` with piped stdout and stderr and waits for the
    /// stdout line starting with `ready_prefix` (`stasis ready`, `stasis
    /// worker ready`).
    ///
    /// # Errors
    /// The process's stderr, if it exits before printing the ready line.
    pub fn start(
        mut command: Command,
        ready_prefix: &str,
        tag: &str,
        echo: bool,
    ) -> Result<Proc, String> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) if line.starts_with(ready_prefix) => break line,
                Some(Ok(_)) => continue,
                _ => {
                    let out = child.wait_with_output().expect("wait for stasis");
                    return Err(String::from_utf8_lossy(&out.stderr).into_owned());
                }
            }
        };
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        let tag = tag.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("[{tag}] {line}");
                }
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        Ok(Proc { child, ready, log })
    }

    /// The ready line the process printed.
    #[must_use]
    pub fn ready_line(&self) -> &str {
        &self.ready
    }

    /// The address after `key` (`ingress=`, `admin=`, `listen=`) in the
    /// ready line; panics if there is none.
    #[must_use]
    pub fn addr(&self, key: &str) -> SocketAddr {
        self.ready
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in ready line {:?}", self.ready))
    }

    /// The process id (for `/proc/PID/...`).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process wrote to stderr so far (its log).
    #[must_use]
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sends SIGKILL and reaps the process (a no-op once it has exited).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM (graceful shutdown) and waits up to `timeout` for the
    /// exit; panics if the process is still running then.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for stasis") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "stasis {pid} did not stop within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
