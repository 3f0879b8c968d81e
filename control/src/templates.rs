//! Templates: push (validate, compile, keep the module file, record it),
//! list, show, delete, and the module bytes remote workers fetch.

use super::ControlPlane;
use super::views::{TemplateInfo, TemplateVersionInfo};
use stasis_contract::directory::{TemplateRow, row_version, version_row};
use stasis_contract::error::{ApiError, ErrorKind};
use stasis_contract::settings::Durability;
use stasis_contract::worker_api::HostSpec;
use stasis_core::module::ModuleError;

/// Largest module `template push` accepts, in bytes.
pub const MAX_TEMPLATE_BYTES: usize = 64 << 20;

/// Every version of template `name` in `directory`, oldest first (see
/// [`ControlPlane::versions_of`]).
fn versions_in(
    directory: &dyn stasis_contract::directory::Directory,
    name: &str,
) -> Result<Vec<TemplateRow>, ApiError> {
    let mut versions = Vec::new();
    while let Some(row) = directory.template(&version_row(name, versions.len() as u64 + 1))? {
        versions.push(row);
    }
    Ok(versions)
}

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

    /// Every version of template `name`, oldest first (none if unknown):
    /// the rows `NAME`, `NAME@2`, ... read until the first missing one.
    ///
    /// # Errors
    /// 500 on a directory failure.
    pub(super) fn versions_of(&self, name: &str) -> Result<Vec<TemplateRow>, ApiError> {
        versions_in(self.directory.as_ref(), name)
    }

    /// The newest version of template `name`, for a create (which holds
    /// the read side of `ops`): remembered from an earlier create, else
    /// read on a blocking thread (each version is a directory read; etcd's
    /// keep the runtime's threads out).
    ///
    /// # Errors
    /// 404 if unknown.
    pub(super) async fn newest_version(&self, name: &str) -> Result<TemplateRow, ApiError> {
        if let Some(row) = self.decider()?.lock_newest_templates().get(name) {
            return Ok(row.clone());
        }
        let (directory, template) = (self.directory.clone(), name.to_owned());
        let row = tokio::task::spawn_blocking(move || versions_in(directory.as_ref(), &template))
            .await
            .map_err(ApiError::internal)??
            .pop()
            .ok_or_else(|| ApiError::not_found(format!("no template named {name:?}")))?;
        self.decider()?
            .lock_newest_templates()
            .insert(name.to_owned(), row.clone());
        Ok(row)
    }

    /// What a worker needs to host an actor of `template` at `epoch`.
    pub(super) fn host_spec(template: &TemplateRow, epoch: u64) -> HostSpec {
        HostSpec {
            recover_journal: true,
            journal_listed_within_ms: None,
            digest: template.digest.clone(),
            env: template.env.clone(),
            epoch,
            durability: template.durability,
        }
    }

    /// [`ControlPlane::host_spec`] for an install whose snapshot is the
    /// actor's state as it is (a move or upgrade after its capture, a
    /// fork, a resume from a named snapshot): the worker recovers nothing
    /// from the journal segments in the store.
    pub(super) fn host_spec_as_is(template: &TemplateRow, epoch: u64) -> HostSpec {
        HostSpec {
            recover_journal: false,
            ..Self::host_spec(template, epoch)
        }
    }

    /// Registers `bytes` as template `name` with WASI environment `env`:
    /// version 1 of a new name, or the next version of an existing one
    /// whose newest version has other bytes, env or durability (actors stay
    /// on the version they run). Returns the template and whether it
    /// changed (`false`: the newest version has the same bytes, env and
    /// durability; nothing changed).
    ///
    /// # Errors
    /// 400 bad name, env or malformed wasm; 413 too large; 422 the module
    /// is refused (the message names the feature). Nothing is registered
    /// on error.
    pub async fn push_template(
        &self,
        name: &str,
        bytes: Vec<u8>,
        env: Vec<(String, String)>,
        durability: Option<Durability>,
    ) -> Result<(TemplateInfo, bool), ApiError> {
        stasis_contract::names::check_full_name("template", name)?;
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
        let decider = self.decider()?;
        let _guard = decider.ops.write().await;
        // Under the write side of `ops`: no create reads the cache now.
        decider.lock_newest_templates().clear();
        let digest = hex::encode(stasis_core::module::digest(&bytes));
        let versions = self.versions_of(name)?;
        if let Some(newest) = versions.last()
            && newest.digest == digest
            && newest.env == env
            && newest.durability == durability
        {
            return Ok((self.template_info(versions), false));
        }
        let version = versions.len() as u64 + 1;
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
            name: version_row(name, version),
            digest,
            bytes: bytes.len() as u64,
            env,
            durability,
        };
        self.directory.insert_template(&row)?;
        tracing::info!(template = name, version, digest = %row.digest, "template pushed");
        let mut versions = versions;
        versions.push(row);
        Ok((self.template_info(versions), true))
    }

    /// The view of a template from its `versions`, oldest first (at
    /// least one).
    fn template_info(&self, versions: Vec<TemplateRow>) -> TemplateInfo {
        let placements = self.placements();
        let level = |row: &TemplateRow| {
            row.durability
                .unwrap_or(self.config.worker.actor.durability)
                .name()
                .to_owned()
        };
        let listed: Vec<TemplateVersionInfo> = versions
            .iter()
            .map(|row| TemplateVersionInfo {
                version: row_version(&row.name).1,
                digest: row.digest.clone(),
                bytes: row.bytes,
                actors: placements
                    .values()
                    .filter(|p| p.template == row.name)
                    .count(),
                durability: level(row),
            })
            .collect();
        let newest = versions.last().cloned().unwrap_or_else(|| TemplateRow {
            name: String::new(),
            digest: String::new(),
            bytes: 0,
            env: Vec::new(),
            durability: None,
        });
        let (name, version) = row_version(&newest.name);
        TemplateInfo {
            name: name.to_owned(),
            version,
            durability: level(&newest),
            digest: newest.digest,
            bytes: newest.bytes,
            env: newest.env.into_iter().collect(),
            actors: listed.iter().map(|v| v.actors).sum(),
            versions: listed,
        }
    }

    /// All templates, by name.
    ///
    /// # Errors
    /// 500 on a directory failure.
    pub fn templates(&self) -> Result<Vec<TemplateInfo>, ApiError> {
        let mut by_name: std::collections::BTreeMap<String, Vec<TemplateRow>> =
            std::collections::BTreeMap::new();
        for row in self.directory.templates()? {
            by_name
                .entry(row_version(&row.name).0.to_owned())
                .or_default()
                .push(row);
        }
        Ok(by_name
            .into_values()
            .map(|mut versions| {
                versions.sort_by_key(|row| row_version(&row.name).1);
                self.template_info(versions)
            })
            .collect())
    }

    /// Template `name`.
    ///
    /// # Errors
    /// 404 if unknown.
    pub fn template(&self, name: &str) -> Result<TemplateInfo, ApiError> {
        let versions = self.versions_of(name)?;
        if versions.is_empty() {
            return Err(ApiError::not_found(format!("no template named {name:?}")));
        }
        Ok(self.template_info(versions))
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
        let decider = self.decider()?;
        let _guard = decider.ops.write().await;
        decider.lock_newest_templates().clear();
        let versions = self.versions_of(name)?;
        if versions.is_empty() {
            return Err(ApiError::not_found(format!("no template named {name:?}")));
        }
        let mut users: Vec<String> = self
            .placements()
            .iter()
            .filter(|(_, p)| row_version(&p.template).0 == name)
            .map(|(a, _)| a.clone())
            .collect();
        if !users.is_empty() {
            users.sort();
            return Err(ApiError::conflict(format!(
                "template {name} is used by actor(s) {}; delete them first",
                users.join(", ")
            )));
        }
        // Newest first: a delete cut short leaves the older versions, still
        // one template.
        for row in versions.iter().rev() {
            self.directory.delete_template(&row.name)?;
        }
        let left = self.directory.templates()?;
        for row in &versions {
            if !left.iter().any(|t| t.digest == row.digest) {
                let _ = std::fs::remove_file(self.templates.path(&row.digest));
            }
        }
        Ok(())
    }
}
