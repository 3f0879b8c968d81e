//! The faulty actor, for limit and trap tests. Routes:
//!
//! * `POST /` adds one to a counter, `GET /` reads it: `count: <n>\n`;
//! * `POST /trap` adds one, then traps (`unreachable`);
//! * `POST /panic` adds one, then panics with the message
//!   `faulty panicked on purpose`;
//! * `POST /spin` loops forever;
//! * `POST /sleep?ms=N` writes `sleeping N ms` to stderr, sleeps N ms in
//!   WASI `poll_oneoff`, then answers;
//! * `POST /grow?mib=N` keeps N more MiB (touched); 507 with the reason if
//!   the allocation is refused;
//! * `GET /clock`: `monotonic=<ns> wall=<ns since epoch>\n`;
//! * `POST /print?text=T`: writes T and a newline to stdout and stderr;
//! * `POST /write?text=T`: writes T to stdout with no newline (flushed);
//! * `GET /constructors`: `constructors: <n>\n`, how often the module's
//!   static constructor ran (1 for the actor's whole life);
//! * `GET /random`: 16 bytes from WASI `random_get`, hex, and a newline
//!   (two forks of one actor answer different bytes).

use std::sync::atomic::{AtomicU64, Ordering};

use stasis_guest_sdk::{Actor, Request, Response, export_actor};

#[derive(Default)]
struct Faulty {
    count: u64,
    kept: Vec<Vec<u8>>,
}

#[link(wasm_import_module = "wasi_snapshot_preview1")]
unsafe extern "C" {
    fn clock_time_get(id: u32, precision: u64, out: *mut u64) -> u16;
    fn random_get(buf: *mut u8, len: usize) -> u16;
}

/// Bumped by the static constructor below.
static CONSTRUCTED: AtomicU64 = AtomicU64::new(0);

extern "C" fn construct() {
    CONSTRUCTED.fetch_add(1, Ordering::Relaxed);
}

/// A static constructor, as C/C++ code or the `ctor` crate would add one.
#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = construct;

fn monotonic_ns() -> u64 {
    let mut out = 0u64;
    // SAFETY: WASI clock id 1 is the monotonic clock; `out` is a valid u64.
    let errno = unsafe { clock_time_get(1, 1, &mut out) };
    if errno == 0 { out } else { 0 }
}

/// 16 bytes of host randomness, hex-encoded; `None` if WASI refused.
fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 16];
    // SAFETY: `bytes` is valid for writes of its length.
    let errno = unsafe { random_get(bytes.as_mut_ptr(), bytes.len()) };
    (errno == 0).then(|| bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Actor for Faulty {
    fn handle(&mut self, req: Request) -> Response {
        let n = |name: &str| req.query(name).and_then(|v| v.parse::<u64>().ok());
        match (req.method.as_str(), req.path()) {
            ("POST", "/") => {
                self.count += 1;
                Response::text(200, format!("count: {}\n", self.count))
            }
            ("GET", "/") => Response::text(200, format!("count: {}\n", self.count)),
            ("POST", "/trap") => {
                self.count += 1;
                core::arch::wasm32::unreachable()
            }
            ("POST", "/panic") => {
                self.count += 1;
                panic!("faulty panicked on purpose");
            }
            ("POST", "/spin") => {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            ("POST", "/sleep") => {
                let ms = n("ms").unwrap_or(1000);
                eprintln!("sleeping {ms} ms");
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Response::text(200, format!("slept {ms} ms\n"))
            }
            ("POST", "/grow") => {
                let bytes = n("mib").unwrap_or(1) as usize * (1 << 20);
                let mut block = Vec::new();
                match block.try_reserve_exact(bytes) {
                    Ok(()) => {
                        block.resize(bytes, 0xa5);
                        self.kept.push(block);
                        let total: usize = self.kept.iter().map(Vec::len).sum();
                        Response::text(200, format!("kept {total} bytes\n"))
                    }
                    Err(e) => Response::text(507, format!("grow refused: {e}\n")),
                }
            }
            ("GET", "/clock") => {
                let wall = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                Response::text(200, format!("monotonic={} wall={wall}\n", monotonic_ns()))
            }
            ("POST", "/print") => {
                let text = req.query("text").unwrap_or("");
                println!("{text}");
                eprintln!("{text}");
                Response::text(200, "printed\n")
            }
            ("POST", "/write") => {
                use std::io::Write as _;
                let text = req.query("text").unwrap_or("");
                let mut out = std::io::stdout();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
                Response::text(200, "written\n")
            }
            ("GET", "/constructors") => Response::text(
                200,
                format!("constructors: {}\n", CONSTRUCTED.load(Ordering::Relaxed)),
            ),
            ("GET", "/random") => match random_hex() {
                Some(hex) => Response::text(200, format!("{hex}\n")),
                None => Response::text(500, "random_get failed\n"),
            },
            (m, p) => Response::text(404, format!("no route {m} {p}\n")),
        }
    }
}

export_actor!(Faulty);
