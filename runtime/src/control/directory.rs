//! The durable directory: which templates and actors exist and where each
//! actor lives (worker and placement epoch). [`Directory`] is the seam a
//! clustered directory plugs into; [`SqliteDirectory`] is the embedded one
//! in `stasis.db`. Snapshots are files (see
//! [`stasis_core::snapshot_files`]).

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

/// The durable record of templates, actors and placements. Every write is
/// durable on return; errors are 500s naming the directory.
pub trait Directory: Send + Sync {
    /// Inserts a template.
    ///
    /// # Errors
    /// 500 on a storage failure (or a name already taken).
    fn insert_template(&self, row: &TemplateRow) -> Result<(), ApiError>;

    /// The template `name`, if registered.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn template(&self, name: &str) -> Result<Option<TemplateRow>, ApiError>;

    /// All templates, by name.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn templates(&self) -> Result<Vec<TemplateRow>, ApiError>;

    /// Deletes template `name`; false if it did not exist.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn delete_template(&self, name: &str) -> Result<bool, ApiError>;

    /// Inserts an actor with its first placement.
    ///
    /// # Errors
    /// 500 on a storage failure (or a name already taken).
    fn insert_actor(&self, row: &ActorRow) -> Result<(), ApiError>;

    /// Moves an actor to `worker` with `epoch` (the durable placement
    /// switch), as a compare-and-set: only if its recorded epoch is below
    /// `epoch`, so two decisions can never both take the same epoch.
    ///
    /// # Errors
    /// 409 if the actor is gone or was placed at `epoch` or later
    /// meanwhile (nothing changed); 500 on a storage failure.
    fn place_actor(&self, name: &str, worker: &str, epoch: u64) -> Result<(), ApiError>;

    /// All actors, by name.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn actors(&self) -> Result<Vec<ActorRow>, ApiError>;

    /// Deletes actor `name`.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn delete_actor(&self, name: &str) -> Result<(), ApiError>;
}

/// The embedded directory in one SQLite file. Every write is one
/// transaction, durable on return (WAL, `synchronous=FULL`).
pub struct SqliteDirectory {
    conn: Mutex<Connection>,
}

fn db(e: rusqlite::Error) -> ApiError {
    ApiError::internal(format!("directory: {e}"))
}

impl SqliteDirectory {
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
}

impl Directory for SqliteDirectory {
    fn insert_template(&self, row: &TemplateRow) -> Result<(), ApiError> {
        let env = serde_json::to_string(&row.env).map_err(ApiError::internal)?;
        self.conn()
            .execute(
                "INSERT INTO templates (name, digest, bytes, env) VALUES (?1, ?2, ?3, ?4)",
                params![row.name, row.digest, row.bytes as i64, env],
            )
            .map_err(db)?;
        Ok(())
    }

    fn template(&self, name: &str) -> Result<Option<TemplateRow>, ApiError> {
        self.conn()
            .query_row(
                "SELECT name, digest, bytes, env FROM templates WHERE name = ?1",
                [name],
                template_row,
            )
            .optional()
            .map_err(db)
    }

    fn templates(&self) -> Result<Vec<TemplateRow>, ApiError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT name, digest, bytes, env FROM templates ORDER BY name")
            .map_err(db)?;
        let rows = stmt.query_map([], template_row).map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn delete_template(&self, name: &str) -> Result<bool, ApiError> {
        let n = self
            .conn()
            .execute("DELETE FROM templates WHERE name = ?1", [name])
            .map_err(db)?;
        Ok(n > 0)
    }

    fn insert_actor(&self, row: &ActorRow) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "INSERT INTO actors (name, template, worker, epoch) VALUES (?1, ?2, ?3, ?4)",
                params![row.name, row.template, row.worker, row.epoch as i64],
            )
            .map_err(db)?;
        Ok(())
    }

    fn place_actor(&self, name: &str, worker: &str, epoch: u64) -> Result<(), ApiError> {
        let changed = self
            .conn()
            .execute(
                "UPDATE actors SET worker = ?2, epoch = ?3 WHERE name = ?1 AND epoch < ?3",
                params![name, worker, epoch as i64],
            )
            .map_err(db)?;
        if changed == 0 {
            return Err(ApiError::conflict(format!(
                "actor {name} was deleted or placed at epoch {epoch} or later meanwhile"
            )));
        }
        Ok(())
    }

    fn actors(&self) -> Result<Vec<ActorRow>, ApiError> {
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

    fn delete_actor(&self, name: &str) -> Result<(), ApiError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_switch_takes_each_epoch_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = SqliteDirectory::open(&tmp.path().join("stasis.db")).expect("open");
        dir.insert_template(&TemplateRow {
            name: "t".into(),
            digest: "00".into(),
            bytes: 0,
            env: Vec::new(),
        })
        .expect("template");
        dir.insert_actor(&ActorRow {
            name: "a".into(),
            template: "t".into(),
            worker: "w1".into(),
            epoch: 1,
        })
        .expect("insert");
        dir.place_actor("a", "w2", 2)
            .expect("first decision at epoch 2");
        let second = dir.place_actor("a", "w3", 2).expect_err("epoch 2 is taken");
        assert_eq!(second.status, 409);
        let stale = dir.place_actor("a", "w3", 1).expect_err("epoch 1 is older");
        assert_eq!(stale.status, 409);
        assert_eq!(
            dir.place_actor("gone", "w1", 5)
                .expect_err("no such actor")
                .status,
            409
        );
        let rows = dir.actors().expect("actors");
        assert_eq!((rows[0].worker.as_str(), rows[0].epoch), ("w2", 2));
    }
}
