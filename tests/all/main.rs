//! The root crate's integration tests, one binary (as in wasmtime): the
//! real `stasis` binary driven over HTTP on loopback, and the demo actors
//! through the snapshot core in process.
//!
//! * `http`: serve, routing, pause/resume, restarts, bad input;
//! * `ingress`: malformed requests (ports, h2 `Host`, `Transfer-Encoding`)
//!   are 400 and never routed;
//! * `abandoned`: requests whose clients left are never executed;
//! * `cli`: the command line as a new user meets it (options before the
//!   verb, size units, failed starts, float noise, sorted lists, failed
//!   moves);
//! * `cluster`: remote worker processes, migration, drain, scale out/in;
//! * `reliability`: limits, runaway guests, crash recovery, retention,
//!   failed snapshots, idle pause, admin token, `--max-live`;
//! * `restart`: placement racing control-plane restarts, re-joins and
//!   concurrent drains;
//! * `retention`: `--keep-snapshots` and repairs: corrupt snapshots go
//!   first, every kept snapshot restores;
//! * `demos`: the demo actors survive capture and restore in a new engine;
//! * `incremental`: delta snapshots: a small change pauses as a small
//!   delta (`bytes_written`), chains restore after resume, move and
//!   restart, chains are bounded and retention keeps their bases;
//! * `fork`: `actor fork`: divergence, `--from-snapshot`, one shared
//!   snapshot inode, deletion of either side, host randomness, error
//!   codes, cluster mode;
//! * `errors`: error hygiene (limits named, no server paths, `Retry-After`
//!   only where a retry helps) and documented behaviours;
//! * `creates`: a new actor's snapshot 0 is a journal entry at level
//!   `request`: created actors survive `kill -9` right after their 201s,
//!   deleted ones stay deleted, and a fresh actor pauses, forks, resumes
//!   and moves at once;
//! * `durability`: the durability levels: at `request` (the default) an
//!   answered request survives a trap, `kill -9` under load and a torn
//!   journal tail, and is never applied twice;
//! * `documented`: behaviours the docs promise and nothing else tested
//!   (template env, `--rebalance-by memory`, `--max-concurrent-moves`, a
//!   worker told 410 by its heartbeat drops its actors and joins again);
//! * `replicas`: cluster mode on a real etcd and a real S3-compatible
//!   server: replicas, failover, fencing by lease, faults;
//! * `replicas_faults`: cluster mode broken as an attacker or an unlucky
//!   operator would (bad flags, a leader frozen mid-move, etcd's quorum
//!   frozen, two workers of one name, a large module through a follower);
//! * `alarms`: the ABI 2 alarm functions through the `alarm` demo: a
//!   paused actor woken, restarts, a migration, retries, cancel;
//! * `c_sdk`: the C guest SDK's counter answers as the Rust one, keeps its
//!   count across pause and restart, and answers malformed bytes with 400;
//! * `host_calls`: the ABI 2 host functions (call, send) through the
//!   `caller` demo, across processes, paused, and loops answered 508;
//! * `outbound`: `fetch` and `--allow-outbound`: names resolving to
//!   special addresses, IP rules, `public`, redirects, malformed rules;
//! * `hardening`: faults found by trying Stasis as new users and attackers
//!   would (static constructors, the bearer scheme, metric series, the
//!   guest clock);
//! * `logs`: `actor logs -f` follows an actor's lines, each once and in
//!   order, across pause, traps and `kill -9`; `--tail`, `--since`, cut
//!   lines, a partial last line, a deleted actor's log gone, a move
//!   between cluster workers; `actor events` lists the lifecycle;
//! * `mapped`: snapshot files truncated, overwritten in place or replaced
//!   under a copy-on-write mapping fail that actor (no snapshot written),
//!   never the process;
//! * `namespaces`: the same name in two namespaces is two actors, reached
//!   by host name or `stasis-actor: NS/NAME`; lists, templates and calls
//!   stay in their namespace; names that would reach elsewhere are refused;
//!   a namespaced token acts in its namespace only;
//! * `namespace_policy`: a namespace that requires a token at the
//!   ingress answers only its invokers (401/403 otherwise, never applied),
//!   keeps the credential from the guest, and stays closed without a token
//!   to check; calls and messages across namespaces only where the
//!   callee's namespace takes them;
//! * `mtls`: mutual TLS between the control plane and workers under a
//!   CA from `stasis ca`: a joined worker's actor, clients without the
//!   CA's certificate refused (worker listener, admin `/internal/`), a
//!   worker of another CA given no actor, cluster mode, flags that must
//!   come together.
//!
//! Tests run in parallel in this one process: every server gets its own
//! temporary data dir and kernel-picked loopback ports (see `support`), and
//! no test changes this process's environment.

mod support;

mod abandoned;
mod alarms;
mod c_sdk;
mod cli;
mod cluster;
mod console;
mod console_dashboard;
mod creates;
mod demos;
mod dev;
mod documented;
mod durability;
mod errors;
mod fencing;
mod fork;
mod full_disk;
mod hand_over;
mod hardening;
mod held;
mod host_calls;
mod http;
mod idempotency;
mod incremental;
mod ingress;
mod journal_replay;
mod js;
mod js_apis;
mod js_conformance;
mod js_crypto;
mod js_upgrade;
mod labels;
mod logs;
mod lost_answers;
mod mapped;
mod mtls;
mod namespace_policy;
mod namespaces;
mod on_demand;
mod outbound;
mod placements;
mod preload;
mod reliability;
mod replacement;
mod replicas;
mod replicas_faults;
mod restart;
mod retention;
mod rollout;
mod rust_sdk;
mod scaffold;
mod sockets;
mod store_deltas;
mod store_journal;
mod store_journal_faults;
mod structure;
mod timestamps;
mod tls;
mod tokens;
mod traces;
mod typescript;
mod upgrade;
mod upgrade_faults;
