//! A process of the real `stasis` binary, started by a test or bench,
//! waited for until it prints its ready line, and killed on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
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
    /// The thread that drains stderr into `log`; it ends when the process
    /// (and with it the pipe) is gone.
    reader: Option<JoinHandle<()>>,
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
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("[{tag}] {line}");
                }
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        Ok(Proc {
            child,
            ready,
            log,
            reader: Some(reader),
        })
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

    /// Everything the process wrote to stderr so far (its log), as far as
    /// the draining thread has read it: a line the process just wrote may
    /// not be here yet while it runs (use [`Proc::wait_for_log`]); once
    /// [`Proc::kill`] or [`Proc::terminate`] returned, the log is whole.
    #[must_use]
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until the log contains `text`, up to `timeout`; panics with
    /// the log otherwise. The wait ends as soon as the draining thread has
    /// read the line, so it is the way to assert on a line of a process
    /// that is still running.
    pub fn wait_for_log(&self, text: &str, timeout: Duration) {
        let what = format!("stasis {} to log {text:?}", self.child.id());
        crate::wait::until_else(&what, timeout, || {
            let log = self.log();
            if log.contains(text) {
                Ok(())
            } else {
                Err(format!("the log:\n{log}"))
            }
        });
    }

    /// [`Proc::wait_for_log`] sleeping on tokio between two looks, so the
    /// test's other tasks run while it waits.
    pub async fn wait_for_log_async(&self, text: &str, timeout: Duration) {
        let what = format!("stasis {} to log {text:?}", self.child.id());
        crate::wait::until_else_async(&what, timeout, async || {
            let log = self.log();
            if log.contains(text) {
                Ok(())
            } else {
                Err(format!("the log:\n{log}"))
            }
        })
        .await;
    }

    /// Sends SIGKILL and reaps the process (a no-op once it has exited).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.finish_log();
    }

    /// Waits (5 s at most) for the draining thread to read the rest of the
    /// log of a process that has exited.
    fn finish_log(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        if let Some(reader) = self.reader.take() {
            while !reader.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if reader.is_finished() {
                let _ = reader.join();
            }
        }
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
                self.finish_log();
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
