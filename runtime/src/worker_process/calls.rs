//! The calls a worker runs for the router, by the id in their
//! [`CALL_HEADER`](stasis_contract::proto::CALL_HEADER), so that an
//! `abandon` naming one (its client left) gives it up unless the guest
//! already runs it — and the call's own answer tells the router which, so
//! that `stasis_requests_abandoned_total` counts only requests that never
//! ran.

use std::collections::HashMap;
use std::sync::Mutex;

use stasis_contract::client_gone::ClientGone;

/// Abandon notices kept for calls not (yet) seen, past which those of
/// calls that never came are forgotten.
const MAX_NOTICES: usize = 4096;

/// The calls under way, each with the token its `abandon` cancels.
#[derive(Default)]
pub(super) struct Calls {
    by_id: Mutex<HashMap<String, ClientGone>>,
}

/// One call under way; forgotten when dropped.
pub(super) struct Call<'a> {
    calls: &'a Calls,
    id: Option<String>,
    gone: ClientGone,
}

impl Calls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ClientGone>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call named `id` (none: it cannot be abandoned by name) begins. If
    /// its `abandon` came first, its token is cancelled already.
    pub(super) fn enter(&self, id: Option<String>) -> Call<'_> {
        let gone = match &id {
            Some(id) => self.lock().entry(id.clone()).or_default().clone(),
            None => ClientGone::new(),
        };
        Call {
            calls: self,
            id,
            gone,
        }
    }

    /// The client of call `id` left: cancels its token. A notice for a call
    /// not seen yet (its request is still on its way) is kept for it.
    pub(super) fn abandon(&self, id: &str) {
        let mut calls = self.lock();
        if !calls.contains_key(id) && calls.len() >= MAX_NOTICES {
            // Cancelled tokens only matter to calls that hold them already.
            calls.retain(|_, gone| !gone.is_cancelled());
        }
        calls.entry(id.to_owned()).or_default().cancel();
    }
}

impl Call<'_> {
    /// Cancelled when the call's client left.
    pub(super) fn gone(&self) -> &ClientGone {
        &self.gone
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if let Some(id) = &self.id {
            self.calls.lock().remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abandon_reaches_its_call_whichever_comes_first() {
        let calls = Calls::default();
        let call = calls.enter(Some("a".into()));
        assert!(!call.gone().is_cancelled());
        calls.abandon("a");
        assert!(call.gone().is_cancelled());
        drop(call);
        calls.abandon("b");
        let late = calls.enter(Some("b".into()));
        assert!(late.gone().is_cancelled());
        drop(late);
        assert!(calls.lock().is_empty());
        let unnamed = calls.enter(None);
        assert!(!unnamed.gone().is_cancelled());
    }
}
