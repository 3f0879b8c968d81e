//! Templates: push (validate, compile, keep the module file, record it),
//! list, show, delete, and the module bytes remote workers fetch.

use super::ControlPlane;
use super::views::TemplateInfo;
use stasis_contract::directory::TemplateRow;
use stasis_contract::error::{ApiError, ErrorKind, check_label};
use stasis_contract::settings::Durability;
use stasis_contract::worker_api::HostSpec;
use stasis_core::module::ModuleError;

/// Largest module `template push` accepts, in bytes.
pub const MAX_TEMPLATE_BYTES: usize = 64 << 20;

impl ControlPlane {
    /// Template `name`'s row.
    ///
    /// # Errors
    /// 404 if unknown.
    pub(super) fn template_row(&self, name: &str) -> Result<TemplateRow, ApiError> {
        self.directory
            .template(name)?
            .ok_or_else(|| ApiError::not_found(format!("no template named {name:?}")))
    }

    /// What a worker needs to host an actor of `template` at `epoch`.
    pub(super) fn host_spec(template: &TemplateRow, epoch: u64) -> HostSpec {
        HostSpec {
            digest: template.digest.clone(),
            env: template.env.clone(),
            epoch,
            durability: template.durability,
        }
    }

    /// Registers `bytes` as template `name` with WASI environment `env`.
    /// Returns the template and whether it was new (`false`: the same name,
    /// bytes and env were already registered; nothing changed).
    ///
    /// # Errors
    /// 400 bad name, env or malformed wasm; 409 the name holds other bytes
    /// or env; 413 too large; 422 the module is refused (the message names
    /// the feature). Nothing is registered on error.
    pub async fn push_template(
        &self,
        name: &str,
        bytes: Vec<u8>,
        env: Vec<(String, String)>,
        durability: Option<Durability>,
    ) -> Result<(TemplateInfo, bool), ApiError> {
        check_label("template", name)?;
        if bytes.len() > MAX_TEMPLATE_BYTES {
            return Err(ApiError::new(
                ErrorKind::TooLarge,
                format!("module larger than the module size limit ({MAX_TEMPLATE_BYTES} bytes)"),
            ));
        }
        for (k, v) in &env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(ApiError::bad_request(format!(
                    "invalid environment variable name {k:?}"
                )));
            }
            if v.contains('\0') {
                return Err(ApiError::bad_request(format!(
                    "environment variable {k} holds a NUL byte"
                )));
            }
        }
        // The environment is a set of variables: order does not matter.
        let mut env = env;
        env.sort();
        let _guard = self.ops.write().await;
        let digest = hex::encode(stasis_core::module::digest(&bytes));
        if let Some(existing) = self.directory.template(name)? {
            if existing.digest == digest && existing.env == env && existing.durability == durability
            {
                return Ok((self.template_info(existing), false));
            }
            return Err(ApiError::conflict(format!(
                "template {name} exists with {}; delete it first or push under another name",
                if existing.digest != digest {
                    "other module bytes"
                } else if existing.env != env {
                    "another environment"
                } else if existing.durability.is_none() {
                    "no --durability of its own (it follows the server's)"
                } else {
                    "another --durability"
                }
            )));
        }
        // Cranelift takes tens of ms: keep it off the async workers' backs.
        let template =
            stasis_core::blocking::off_the_executor(|| self.templates.cache().load(&bytes))
                .map_err(|e| match e {
                    ModuleError::Malformed(_) | ModuleError::NotWasm(_) => {
                        ApiError::bad_request(e.to_string())
                    }
                    _ => ApiError::unprocessable(e.to_string()),
                })?;
        // A memory that starts above --max-memory could never be created.
        let max_memory = self.config.limits.max_memory;
        if let Some(memory) = template
            .info
            .memories
            .iter()
            .find(|m| m.initial_pages.saturating_mul(64 << 10) > max_memory)
        {
            return Err(ApiError::unprocessable(format!(
                "module refused: memory {} starts at {} pages of 64 KiB ({} bytes); \
                     --max-memory is {max_memory} bytes",
                memory.index,
                memory.initial_pages,
                memory.initial_pages.saturating_mul(64 << 10)
            )));
        }
        self.templates.keep(&digest, &bytes)?;
        if let Some(shared) = &self.shared {
            // Workers and other replicas fetch the module from the store.
            stasis_core::blocking::off_the_executor(|| shared.put_template(&digest, &bytes))
                .map_err(|e| {
                    tracing::error!("storing template {name}: {}", e.detail());
                    ApiError::internal(format!(
                        "storing template {name} in the snapshot store: {e}"
                    ))
                })?;
        }
        let row = TemplateRow {
            name: name.to_owned(),
            digest,
            bytes: bytes.len() as u64,
            env,
            durability,
        };
        self.directory.insert_template(&row)?;
        tracing::info!(template = name, digest = %row.digest, "template pushed");
        Ok((self.template_info(row), true))
    }

    fn template_info(&self, row: TemplateRow) -> TemplateInfo {
        let actors = self
            .placements()
            .values()
            .filter(|p| p.template == row.name)
            .count();
        TemplateInfo {
            name: row.name,
            digest: row.digest,
            bytes: row.bytes,
            env: row.env.into_iter().collect(),
            actors,
            durability: row
                .durability
                .unwrap_or(self.config.worker.actor.durability)
                .name()
                .to_owned(),
        }
    }

    /// All templates, by name.
    ///
    /// # Errors
    /// 500 on a directory failure.
    pub fn templates(&self) -> Result<Vec<TemplateInfo>, ApiError> {
        Ok(self
            .directory
            .templates()?
            .into_iter()
            .map(|t| self.template_info(t))
            .collect())
    }

    /// Template `name`.
    ///
    /// # Errors
    /// 404 if unknown.
    pub fn template(&self, name: &str) -> Result<TemplateInfo, ApiError> {
        Ok(self.template_info(self.template_row(name)?))
    }

    /// The module bytes of the template with `digest` (for remote workers).
    ///
    /// # Errors
    /// 404 if no template has that digest.
    pub fn template_bytes(&self, digest: &str) -> Result<Vec<u8>, ApiError> {
        if !self
            .directory
            .templates()?
            .iter()
            .any(|t| t.digest == digest)
        {
            return Err(ApiError::not_found(format!(
                "no template with digest {digest}"
            )));
        }
        self.templates.read(digest)
    }

    /// Deletes template `name`.
    ///
    /// # Errors
    /// 404 if unknown; 409 while actors use it.
    pub async fn delete_template(&self, name: &str) -> Result<(), ApiError> {
        let _guard = self.ops.write().await;
        let row = self.template_row(name)?;
        let mut users: Vec<String> = self
            .placements()
            .iter()
            .filter(|(_, p)| p.template == name)
            .map(|(a, _)| a.clone())
            .collect();
        if !users.is_empty() {
            users.sort();
            return Err(ApiError::conflict(format!(
                "template {name} is used by actor(s) {}; delete them first",
                users.join(", ")
            )));
        }
        self.directory.delete_template(name)?;
        if !self
            .directory
            .templates()?
            .iter()
            .any(|t| t.digest == row.digest)
        {
            let _ = std::fs::remove_file(self.templates.path(&row.digest));
        }
        Ok(())
    }
}
