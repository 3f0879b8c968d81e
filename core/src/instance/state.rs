//! The state hand-over calls of a live code upgrade
//! ([`stasis_host_api::exports::SAVE_STATE`] on the old version's
//! instance, [`stasis_host_api::exports::LOAD_STATE`] on a fresh instance
//! of the new one), under the CPU limit and request timeout of a request.

use stasis_host_api::exports::{LOAD_STATE, SAVE_STATE};

use super::{ActorInstance, CallError, classify};

impl ActorInstance {
    /// Whether the guest exports `stasis_save_state`.
    #[must_use]
    pub fn saves_state(&self) -> bool {
        self.hooks.save_state.is_some()
    }

    /// Asks the guest for its state as bytes (`stasis_save_state`).
    ///
    /// # Errors
    /// [`CallError::Host`] if the guest exports no `stasis_save_state`;
    /// a trap, the CPU limit or the timeout; [`CallError::BadResponse`]
    /// if the bytes it names are outside its linear memory. The call may
    /// have changed the instance's memory (the buffer it returned): the
    /// caller keeps its snapshot from before the call.
    pub async fn save_state(&mut self) -> Result<Vec<u8>, CallError> {
        let f = self
            .hooks
            .save_state
            .clone()
            .ok_or_else(|| CallError::Host(format!("the module exports no `{SAVE_STATE}`")))?;
        self.reset_cpu();
        let (timeout, cpu_limit) = (self.limits.request_timeout, self.limits.cpu_limit);
        let called = tokio::time::timeout(timeout, f.call_async(&mut self.store, ())).await;
        self.cow.check().map_err(CallError::MappedFileChanged)?;
        let packed = match called {
            Ok(r) => r.map_err(|e| self.with_stderr(classify(e, cpu_limit)))?,
            Err(_) => return Err(CallError::Timeout(timeout)),
        };
        let (ptr, len) = ((packed >> 32) as usize, (packed & 0xffff_ffff) as usize);
        let data = self.memory.data(&self.store);
        ptr.checked_add(len)
            .and_then(|end| data.get(ptr..end))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| {
                CallError::BadResponse(format!(
                    "`{SAVE_STATE}` returned {ptr}+{len}, outside linear memory"
                ))
            })
    }

    /// Gives the guest `state` (`stasis_load_state`), on a fresh instance.
    ///
    /// # Errors
    /// [`CallError::Host`] if the guest exports no `stasis_load_state` or
    /// the state is over 4 GiB; a trap, the CPU limit or the timeout;
    /// [`CallError::StateRefused`] when the guest refused the bytes (it
    /// returned non-zero): drop the instance either way.
    pub async fn load_state(&mut self, state: &[u8]) -> Result<(), CallError> {
        let f = self
            .hooks
            .load_state
            .clone()
            .ok_or_else(|| CallError::Host(format!("the module exports no `{LOAD_STATE}`")))?;
        let len = u32::try_from(state.len())
            .map_err(|_| CallError::Host("a state larger than 4 GiB".into()))?;
        let timeout = self.limits.request_timeout;
        let called = tokio::time::timeout(timeout, self.invoke(f, state, len)).await;
        self.cow.check().map_err(CallError::MappedFileChanged)?;
        let code = match called {
            Ok(r) => r.map_err(|e| self.with_stderr(e))?,
            Err(_) => return Err(CallError::Timeout(timeout)),
        };
        if code != 0 {
            let said = self.stderr.recent();
            let said = if said.is_empty() {
                String::new()
            } else {
                format!("; guest stderr: {}", said.join(" / "))
            };
            return Err(CallError::StateRefused(format!(
                "`{LOAD_STATE}` refused the state ({len} bytes): it returned {code}{said}"
            )));
        }
        Ok(())
    }
}
