//! The durable directory: which templates and actors exist and where each
//! actor lives (worker and placement epoch). [`Directory`] is the seam a
//! clustered directory plugs into; [`SqliteDirectory`] is the embedded one
//! in `stasis.db`. Snapshots are files (see
//! [`stasis_core::snapshot_files`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Condvar, Mutex};

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
/// transaction, durable on return (WAL, `synchronous=FULL`). Actor
/// inserts are group-committed: the inserts that arrive while one commit
/// is in flight share the next transaction, so concurrent creates pay one
/// fsync between them instead of one each.
pub struct SqliteDirectory {
    conn: Mutex<Connection>,
    inserts: Mutex<Inserts>,
    committed: Condvar,
}

/// Actor inserts waiting for their group commit, and the answers of the
/// ones committed (each taken by its caller).
#[derive(Default)]
struct Inserts {
    /// Rows not committed yet, by ticket.
    queued: Vec<(u64, ActorRow)>,
    /// Answers of committed rows, by ticket.
    done: HashMap<u64, Result<(), ApiError>>,
    /// A caller is committing a batch now.
    committing: bool,
    /// The next ticket.
    next: u64,
}

fn db(e: rusqlite::Error) -> ApiError {
    db_ref(&e)
}

fn db_ref(e: &rusqlite::Error) -> ApiError {
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
            inserts: Mutex::default(),
            committed: Condvar::new(),
        })
    }

    /// Commits `rows` in one transaction; each row's answer, in order (a
    /// refused row, e.g. a name taken, does not stop the others).
    fn commit_inserts(&self, rows: &[(u64, ActorRow)]) -> Vec<Result<(), ApiError>> {
        let mut conn = self.conn();
        let all = |e: &rusqlite::Error| rows.iter().map(|_| Err(db_ref(e))).collect();
        let tx = match conn.transaction() {
            Ok(tx) => tx,
            Err(e) => return all(&e),
        };
        let answers = rows
            .iter()
            .map(|(_, row)| {
                tx.execute(
                    "INSERT INTO actors (name, template, worker, epoch) VALUES (?1, ?2, ?3, ?4)",
                    params![row.name, row.template, row.worker, row.epoch as i64],
                )
                .map(|_| ())
                .map_err(db)
            })
            .collect();
        match tx.commit() {
            Ok(()) => answers,
            Err(e) => all(&e),
        }
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

    /// Group-committed (see [`SqliteDirectory`]): the row is queued; a
    /// caller that finds no commit in flight commits everything queued in
    /// one transaction, the others wait for it, and a waiter whose row
    /// came after that batch commits the next one.
    fn insert_actor(&self, row: &ActorRow) -> Result<(), ApiError> {
        let lock = || self.inserts.lock().unwrap_or_else(|p| p.into_inner());
        let mut inserts = lock();
        let ticket = inserts.next;
        inserts.next += 1;
        inserts.queued.push((ticket, row.clone()));
        loop {
            if let Some(answer) = inserts.done.remove(&ticket) {
                return answer;
            }
            if inserts.committing {
                inserts = self
                    .committed
                    .wait(inserts)
                    .unwrap_or_else(|p| p.into_inner());
                continue;
            }
            inserts.committing = true;
            let batch = std::mem::take(&mut inserts.queued);
            drop(inserts);
            let answers = self.commit_inserts(&batch);
            inserts = lock();
            for ((ticket, _), answer) in batch.into_iter().zip(answers) {
                inserts.done.insert(ticket, answer);
            }
            inserts.committing = false;
            self.committed.notify_all();
        }
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
    fn concurrent_inserts_are_committed_together_and_refused_alone() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = SqliteDirectory::open(&tmp.path().join("stasis.db")).expect("open");
        dir.insert_template(&TemplateRow {
            name: "t".into(),
            digest: "00".into(),
            bytes: 0,
            env: Vec::new(),
        })
        .expect("template");
        let row = |name: String, template: &str| ActorRow {
            name,
            template: template.into(),
            worker: "w1".into(),
            epoch: 1,
        };
        // 8 threads × 50 inserts; every 10th of one thread names no
        // template (refused by the foreign key), and one name is taken twice.
        let refused = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..8)
                .map(|t| {
                    let dir = &dir;
                    scope.spawn(move || {
                        (0..50)
                            .filter(|i| {
                                let template = if t == 0 && i % 10 == 0 { "none" } else { "t" };
                                let name = if t == 1 && *i == 49 {
                                    "a-0-1".to_owned()
                                } else {
                                    format!("a-{t}-{i}")
                                };
                                dir.insert_actor(&row(name, template)).is_err()
                            })
                            .count()
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("thread"))
                .sum::<usize>()
        });
        assert_eq!(refused, 5 + 1);
        assert_eq!(dir.actors().expect("actors").len(), 8 * 50 - 6);
        let inserts = dir.inserts.lock().expect("inserts");
        assert!(inserts.queued.is_empty() && inserts.done.is_empty());
        assert!(!inserts.committing);
    }

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
