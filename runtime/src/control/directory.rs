//! The durable directory in `stasis.db` (SQLite): templates, actors and
//! their placement, workers. Snapshots are files (see
//! [`stasis_core::snapshot_files`]); the directory records who exists and
//! where each actor lives.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::ApiError;

/// A registered template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRow {
    /// Name (an RFC 1123 label).
    pub name: String,
    /// SHA-256 hex of the module bytes (`templates/<digest>.wasm`).
    pub digest: String,
    /// Size of the module in bytes.
    pub bytes: u64,
    /// WASI environment, in push order.
    pub env: Vec<(String, String)>,
}

/// A registered actor and its placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorRow {
    /// Name (an RFC 1123 label).
    pub name: String,
    /// Template name.
    pub template: String,
    /// Worker that owns it.
    pub worker: String,
    /// Placement epoch: 1 at creation, +1 per move.
    pub epoch: u64,
}

/// The SQLite directory. Every write is one transaction, durable on return
/// (WAL, `synchronous=FULL`).
pub struct Directory {
    conn: Mutex<Connection>,
}

fn db(e: rusqlite::Error) -> ApiError {
    ApiError::internal(format!("directory: {e}"))
}

impl Directory {
    /// Opens (creating) the directory at `path`.
    ///
    /// # Errors
    /// If SQLite cannot open or migrate the file.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let conn = Connection::open(path)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             PRAGMA foreign_keys = ON;
             CREATE TABLE IF NOT EXISTS templates (
                 name   TEXT PRIMARY KEY,
                 digest TEXT NOT NULL,
                 bytes  INTEGER NOT NULL,
                 env    TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS actors (
                 name     TEXT PRIMARY KEY,
                 template TEXT NOT NULL REFERENCES templates(name),
                 worker   TEXT NOT NULL,
                 epoch    INTEGER NOT NULL
             );",
        )?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Inserts a template.
    ///
    /// # Errors
    /// 500 on a SQLite failure.
    pub fn insert_template(&self, row: &TemplateRow) -> Result<(), ApiError> {
        let env = serde_json::to_string(&row.env).map_err(ApiError::internal)?;
        self.conn()
            .execute(
                "INSERT INTO templates (name, digest, bytes, env) VALUES (?1, ?2, ?3, ?4)",
                params![row.name, row.digest, row.bytes as i64, env],
            )
            .map_err(db)?;
        Ok(())
    }

    /// The template `name`.
    ///
    /// # Errors
    /// 500 on a SQLite failure.
    pub fn template(&self, name: &str) -> Result<Option<TemplateRow>, ApiError> {
        self.conn()
            .query_row(
                "SELECT name, digest, bytes, env FROM templates WHERE name = ?1",
                [name],
                template_row,
            )
            .optional()
            .map_err(db)
    }

    /// All templates, by name.
    ///
    /// # Errors
    /// 500 on a SQLite failure.
    pub fn templates(&self) -> Result<Vec<TemplateRow>, ApiError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT name, digest, bytes, env FROM templates ORDER BY name")
            .map_err(db)?;
        let rows = stmt.query_map([], template_row).map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    /// Deletes template `name`; false if it did not exist.
    ///
    /// # Errors
    /// 500 on a SQLite failure.
    pub fn delete_template(&self, name: &str) -> Result<bool, ApiError> {
        let n = self
            .conn()
            .execute("DELETE FROM templates WHERE name = ?1", [name])
            .map_err(db)?;
        Ok(n > 0)
    }

    /// Inserts an actor.
    ///
    /// # Errors
    /// 500 on a SQLite failure.
    pub fn insert_actor(&self, row: &ActorRow) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "INSERT INTO actors (name, template, worker, epoch) VALUES (?1, ?2, ?3, ?4)",
                params![row.name, row.template, row.worker, row.epoch as i64],
            )
            .map_err(db)?;
        Ok(())
    }

    /// Moves an actor to `worker` with `epoch` (durable placement switch).
    ///
    /// # Errors
    /// 500 on a SQLite failure.
    pub fn place_actor(&self, name: &str, worker: &str, epoch: u64) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "UPDATE actors SET worker = ?2, epoch = ?3 WHERE name = ?1",
                params![name, worker, epoch as i64],
            )
            .map_err(db)?;
        Ok(())
    }

    /// All actors, by name.
    ///
    /// # Errors
    /// 500 on a SQLite failure.
    pub fn actors(&self) -> Result<Vec<ActorRow>, ApiError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT name, template, worker, epoch FROM actors ORDER BY name")
            .map_err(db)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(ActorRow {
                    name: r.get(0)?,
                    template: r.get(1)?,
                    worker: r.get(2)?,
                    epoch: r.get::<_, i64>(3)? as u64,
                })
            })
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    /// Deletes actor `name`.
    ///
    /// # Errors
    /// 500 on a SQLite failure.
    pub fn delete_actor(&self, name: &str) -> Result<(), ApiError> {
        self.conn()
            .execute("DELETE FROM actors WHERE name = ?1", [name])
            .map_err(db)?;
        Ok(())
    }
}

fn template_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TemplateRow> {
    let env: String = r.get(3)?;
    Ok(TemplateRow {
        name: r.get(0)?,
        digest: r.get(1)?,
        bytes: r.get::<_, i64>(2)? as u64,
        env: serde_json::from_str(&env).unwrap_or_default(),
    })
}
