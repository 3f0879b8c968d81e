//! The alarm actor (ABI 2): each firing of its alarm adds one.
//!
//! - `POST /?in_ms=N` sets the alarm N ms from now (replacing any) and
//!   answers 202 with the alarm's time (Unix ms);
//! - `GET /` answers `fired: K` (firings that ran to completion);
//! - `GET /alarm` answers `alarm: <Unix ms>` or `alarm: none`;
//! - `DELETE /` cancels the alarm and answers 200.
//!
//! **Trap switch** (for the retry test): `POST /?in_ms=N&fail_ms=F` makes
//! every firing that starts before the alarm's time plus F ms trap. The
//! switch is a time, not a count of firings, on purpose: a trap rolls the
//! actor back to its newest snapshot, so a count kept in the actor would be
//! rolled back with it and the handler would trap for ever. With the host's
//! retry backoff (0.5 s, then 1 s, 2 s, ...), `fail_ms=1200` traps the
//! firing at the alarm's time and the retry 0.5 s later, and the retry
//! 1.5 s after the time succeeds.
//!
//! A host-function error answers its status with the reason.

use std::time::{SystemTime, UNIX_EPOCH};

use stasis_guest_sdk::{Actor, HostError, Request, Response, export_actor, host};

#[derive(Default)]
struct Alarm {
    /// Firings that ran to completion.
    fired: u64,
    /// Firings that start before this Unix ms trap (0: none).
    fail_until_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn failed(what: &str, e: HostError) -> Response {
    let reason = host::last_error().unwrap_or_else(|| e.to_string());
    Response::text(e.status(), format!("{what} failed: {reason}\n"))
}

fn number(req: &Request, name: &str) -> Result<Option<u64>, Response> {
    match req.query(name) {
        None => Ok(None),
        Some(text) => text
            .parse()
            .map(Some)
            .map_err(|_| Response::text(400, format!("{name} must be a number of ms\n"))),
    }
}

impl Alarm {
    fn set(&mut self, req: &Request) -> Result<Response, Response> {
        let in_ms = number(req, "in_ms")?
            .ok_or_else(|| Response::text(400, "use POST /?in_ms=N[&fail_ms=F]\n"))?;
        let fail_ms = number(req, "fail_ms")?.unwrap_or(0);
        let at = now_ms().saturating_add(in_ms);
        host::set_alarm(at).map_err(|e| failed("set_alarm", e))?;
        self.fail_until_ms = if fail_ms > 0 { at.saturating_add(fail_ms) } else { 0 };
        Ok(Response::text(202, format!("alarm at {at}\n")))
    }
}

impl Actor for Alarm {
    fn handle(&mut self, req: Request) -> Response {
        match (req.method.as_str(), req.path()) {
            ("POST", "/") => self.set(&req).unwrap_or_else(|answer| answer),
            ("GET", "/") => Response::text(200, format!("fired: {}\n", self.fired)),
            ("GET", "/alarm") => match host::alarm() {
                Ok(Some(at)) => Response::text(200, format!("alarm: {at}\n")),
                Ok(None) => Response::text(200, "alarm: none\n"),
                Err(e) => failed("alarm", e),
            },
            ("DELETE", "/") => match host::cancel_alarm() {
                Ok(()) => Response::text(200, "alarm cancelled\n"),
                Err(e) => failed("cancel_alarm", e),
            },
            _ => Response::text(
                404,
                "use POST /?in_ms=N, GET /, GET /alarm or DELETE /\n",
            ),
        }
    }

    fn alarm(&mut self) {
        if now_ms() < self.fail_until_ms {
            panic!("alarm handler trapped on purpose (fail_ms)");
        }
        self.fired += 1;
    }
}

export_actor!(Alarm);
