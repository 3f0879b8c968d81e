//! `stasis dev FILE` (issue 48, item 5) through the real binary: it
//! pushes a script, creates its actor and prints the actor's log; each
//! save pushes a new version and rolls it out with the actor's state; a
//! version that does not compile, or whose `load` throws, is reported and
//! the running version goes on serving with its state.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::js::engine_built;
use crate::support::{STASIS, Server, client, to_actor};

/// A counter whose version and `load` behaviour are set by the text.
fn script(version: u32, load: &str) -> String {
    format!(
        r#"
let count = 0;
export default {{
  version: {version},
  async fetch(request) {{
    count += 1;
    console.log(`v{version} saw ${{count}}`);
    return new Response(`v{version} count ${{count}}`);
  }},
  save() {{ return {{ count }}; }},
  load(value) {{ {load} }},
}};
"#
    )
}

/// `stasis dev` running, its stdout read line by line on a thread.
struct Dev {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Dev {
    /// Reads lines until one holds `text` (60 s at most: a push compiles
    /// the engine the first time).
    fn wait_for(&mut self, text: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {text:?}; stdout so far: {:#?}", self.seen),
            }
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_pushes_each_save_and_keeps_the_actors_state() {
    if !engine_built() {
        return;
    }
    let server = Server::start(&["--workers", "1"]);
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("app.js");
    std::fs::write(&file, script(1, "count = value.count;")).expect("write v1");
    let mut child = STASIS
        .command()
        .args(["dev", file.to_str().expect("utf-8"), "--actor", "room"])
        .env("STASIS_ADMIN", server.admin_url())
        .env("STASIS_CACHE_DIR", tmp.path().join("cache"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("stasis dev");
    let stdout = child.stdout.take().expect("stdout");
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                return;
            }
        }
    });
    let mut dev = Dev {
        child,
        lines,
        seen: Vec::new(),
    };
    let started = dev.wait_for("watching");
    assert!(
        started.contains("template app version 1, actor room"),
        "{started}"
    );
    let c = client();
    let ask = async |expect: &str| {
        let answer = to_actor(&c, server.ingress, "room", "POST", "/").await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.body, expect);
    };
    for n in 1..=3 {
        ask(&format!("v1 count {n}")).await;
    }
    // The actor's log, followed.
    dev.wait_for("v1 saw 3");

    // A save: version 2 takes over with the count.
    std::fs::write(&file, script(2, "count = value.count;")).expect("write v2");
    dev.wait_for("version 2 serves 1 actor(s) with their state");
    ask("v2 count 4").await;
    dev.wait_for("v2 saw 4");

    // A script that does not compile never leaves the CLI.
    std::fs::write(&file, "export default { fetch( {").expect("write broken");
    let refused = dev.wait_for("goes on serving");
    assert!(refused.contains("version 2 goes on serving"), "{refused}");
    ask("v2 count 5").await;

    // A version whose load throws is pushed but not rolled out.
    std::fs::write(&file, script(3, r#"throw new Error("no thanks");"#)).expect("write v3");
    let failed = dev.wait_for("not rolled out");
    assert!(failed.contains("version 3 not rolled out"), "{failed}");
    dev.wait_for("no thanks");
    ask("v2 count 6").await;

    // Fixed: version 4 serves, the count kept through everything.
    std::fs::write(&file, script(4, "count = value.count;")).expect("write v4");
    dev.wait_for("version 4 serves 1 actor(s)");
    ask("v4 count 7").await;
}
