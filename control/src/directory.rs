//! [`SqliteDirectory`]: the embedded [`Directory`] in one SQLite file,
//! `stasis.db` in the data dir.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Condvar, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use stasis_contract::directory::{ActorRead, ActorRow, Directory, TemplateRow};
use stasis_contract::error::ApiError;
use stasis_contract::labels::{LabelPatch, Labels};
use stasis_contract::settings::Durability;

mod namespace_settings;
mod rollouts;
mod tokens;

/// The schema version `stasis.db` is migrated to (`PRAGMA user_version`):
/// 0 is templates and actors (every data dir before alarms), 1 adds the
/// `alarms` table, 2 a template's `durability`, 3 the rollout tables
/// (`rollouts`), 4 an actor's `created_ms` (null for actors created
/// before), 5 the scoped admin tokens (`tokens`) and the namespaces'
/// quotas (`quotas`), 6 the namespaces' policies (`policies`), 7 an
/// actor's `labels` (a JSON object; null for none).
/// Opening migrates an older file in place; nothing in it changes.
const SCHEMA_VERSION: i64 = 7;

/// The embedded directory in one SQLite file. Every write is one
/// transaction, durable on return (WAL, `synchronous=FULL`). Actor
/// inserts are group-committed: the inserts that arrive while one commit
/// is in flight share the next transaction, so concurrent creates pay one
/// fsync between them instead of one each. Reads go through a second,
/// query-only connection: in WAL mode a reader sees every committed
/// transaction and never waits for a commit's fsync (SQLite, "Write-Ahead
/// Logging": readers do not block writers and a writer does not block
/// readers), so a create's template lookup does not queue behind the
/// group commit of earlier creates.
pub struct SqliteDirectory {
    conn: Mutex<Connection>,
    reader: Mutex<Connection>,
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
        migrate(&conn)?;
        let reader = Connection::open(path)?;
        reader.execute_batch("PRAGMA query_only = ON;")?;
        Ok(Self {
            conn: Mutex::new(conn),
            reader: Mutex::new(reader),
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
        let answers = {
            let mut insert = match tx.prepare_cached(
                "INSERT INTO actors (name, template, worker, epoch, created_ms, labels) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            ) {
                Ok(insert) => insert,
                Err(e) => return all(&e),
            };
            rows.iter()
                .map(|(_, row)| {
                    insert
                        .execute(params![
                            row.name,
                            row.template,
                            row.worker,
                            row.epoch as i64,
                            row.created_at_unix_ms.map(|ms| ms as i64),
                            labels_column(&row.labels)
                        ])
                        .map(|_| ())
                        .map_err(db)
                })
                .collect()
        };
        match tx.commit() {
            Ok(()) => answers,
            Err(e) => all(&e),
        }
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The query-only connection (see [`SqliteDirectory`]).
    fn reader(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Directory for SqliteDirectory {
    fn insert_template(&self, row: &TemplateRow) -> Result<(), ApiError> {
        let env = serde_json::to_string(&row.env).map_err(ApiError::internal)?;
        self.conn()
            .execute(
                "INSERT INTO templates (name, digest, bytes, env, durability)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    row.name,
                    row.digest,
                    row.bytes as i64,
                    env,
                    row.durability.map(Durability::name)
                ],
            )
            .map_err(db)?;
        Ok(())
    }

    fn template(&self, name: &str) -> Result<Option<TemplateRow>, ApiError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare_cached(
                "SELECT name, digest, bytes, env, durability FROM templates WHERE name = ?1",
            )
            .map_err(db)?;
        stmt.query_row([name], template_row).optional().map_err(db)
    }

    fn templates(&self) -> Result<Vec<TemplateRow>, ApiError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare("SELECT name, digest, bytes, env, durability FROM templates ORDER BY name")
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

    fn place_actor_as(
        &self,
        name: &str,
        worker: &str,
        epoch: u64,
        template: &str,
    ) -> Result<(), ApiError> {
        let changed = self
            .conn()
            .execute(
                "UPDATE actors SET worker = ?2, epoch = ?3, template = ?4
                 WHERE name = ?1 AND epoch < ?3",
                params![name, worker, epoch as i64, template],
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
        let conn = self.reader();
        let mut stmt = conn
            .prepare(
                "SELECT name, template, worker, epoch, created_ms, labels FROM actors ORDER BY name",
            )
            .map_err(db)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(ActorRow {
                    name: r.get(0)?,
                    template: r.get(1)?,
                    worker: r.get(2)?,
                    epoch: r.get::<_, i64>(3)? as u64,
                    created_at_unix_ms: r.get::<_, Option<i64>>(4)?.map(|ms| ms as u64),
                    labels: labels_of(r.get(5)?),
                })
            })
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }

    fn actor(&self, name: &str, _at_least: i64) -> Result<ActorRead, ApiError> {
        let conn = self.reader();
        let row = conn
            .query_row(
                "SELECT template, worker, epoch, created_ms, labels FROM actors WHERE name = ?1",
                [name],
                |r| {
                    Ok(ActorRow {
                        name: name.to_owned(),
                        template: r.get(0)?,
                        worker: r.get(1)?,
                        epoch: r.get::<_, i64>(2)? as u64,
                        created_at_unix_ms: r.get::<_, Option<i64>>(3)?.map(|ms| ms as u64),
                        labels: labels_of(r.get(4)?),
                    })
                },
            )
            .optional()
            .map_err(db)?;
        Ok(ActorRead {
            row,
            ..ActorRead::default()
        })
    }

    fn patch_labels(&self, name: &str, patch: &LabelPatch) -> Result<Labels, ApiError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db)?;
        let held: Option<Option<String>> = tx
            .query_row("SELECT labels FROM actors WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .optional()
            .map_err(db)?;
        let Some(held) = held else {
            return Err(ApiError::not_found(format!("no actor named {name:?}")));
        };
        let labels = patch.apply(&labels_of(held))?;
        tx.execute(
            "UPDATE actors SET labels = ?2 WHERE name = ?1",
            params![name, labels_column(&labels)],
        )
        .map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(labels)
    }

    fn delete_actor(&self, name: &str) -> Result<(), ApiError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db)?;
        tx.execute("DELETE FROM alarms WHERE actor = ?1", [name])
            .map_err(db)?;
        tx.execute("DELETE FROM actors WHERE name = ?1", [name])
            .map_err(db)?;
        tx.commit().map_err(db)
    }

    fn set_alarm(&self, name: &str, at_unix_ms: u64) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "INSERT INTO alarms (actor, at_unix_ms) VALUES (?1, ?2)
                 ON CONFLICT(actor) DO UPDATE SET at_unix_ms = excluded.at_unix_ms",
                params![name, sql_ms(at_unix_ms)],
            )
            .map_err(db)?;
        Ok(())
    }

    fn clear_alarm(&self, name: &str, only_at: Option<u64>) -> Result<bool, ApiError> {
        let n = match only_at {
            Some(at) => self.conn().execute(
                "DELETE FROM alarms WHERE actor = ?1 AND at_unix_ms = ?2",
                params![name, sql_ms(at)],
            ),
            None => self
                .conn()
                .execute("DELETE FROM alarms WHERE actor = ?1", [name]),
        }
        .map_err(db)?;
        Ok(n > 0)
    }

    fn alarm(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.reader()
            .query_row(
                "SELECT at_unix_ms FROM alarms WHERE actor = ?1",
                [name],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map(|at| at.map(|ms| u64::try_from(ms).unwrap_or(0)))
            .map_err(db)
    }

    fn alarms(&self) -> Result<Vec<(String, u64)>, ApiError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare("SELECT actor, at_unix_ms FROM alarms ORDER BY actor")
            .map_err(db)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get(0)?, u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0)))
            })
            .map_err(db)?;
        rows.collect::<Result<_, _>>().map_err(db)
    }
}

/// A Unix-ms time as SQLite's signed integer (times past `i64::MAX` are
/// kept at `i64::MAX`: they never come).
fn sql_ms(at_unix_ms: u64) -> i64 {
    i64::try_from(at_unix_ms).unwrap_or(i64::MAX)
}

/// Brings the schema from its `user_version` to [`SCHEMA_VERSION`], one
/// transaction per step. A newer file than this binary knows is refused.
fn migrate(conn: &Connection) -> anyhow::Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    anyhow::ensure!(
        version <= SCHEMA_VERSION,
        "stasis.db has schema version {version}, newer than this binary's {SCHEMA_VERSION}"
    );
    if version < 1 {
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE IF NOT EXISTS alarms (
                 actor      TEXT PRIMARY KEY,
                 at_unix_ms INTEGER NOT NULL
             );
             PRAGMA user_version = 1;
             COMMIT;",
        )?;
    }
    if version < 2 {
        conn.execute_batch(
            "BEGIN;
             ALTER TABLE templates ADD COLUMN durability TEXT;
             PRAGMA user_version = 2;
             COMMIT;",
        )?;
    }
    if version < 3 {
        conn.execute_batch(&format!(
            "BEGIN; {} PRAGMA user_version = 3; COMMIT;",
            rollouts::TABLES
        ))?;
    }
    if version < 4 {
        conn.execute_batch(
            "BEGIN;
             ALTER TABLE actors ADD COLUMN created_ms INTEGER;
             PRAGMA user_version = 4;
             COMMIT;",
        )?;
    }
    if version < 5 {
        conn.execute_batch(&format!(
            "BEGIN; {} {} PRAGMA user_version = 5; COMMIT;",
            tokens::TABLES,
            namespace_settings::QUOTAS
        ))?;
    }
    if version < 6 {
        conn.execute_batch(&format!(
            "BEGIN; {} PRAGMA user_version = 6; COMMIT;",
            namespace_settings::POLICIES
        ))?;
    }
    if version < 7 {
        conn.execute_batch(
            "BEGIN;
             ALTER TABLE actors ADD COLUMN labels TEXT;
             PRAGMA user_version = 7;
             COMMIT;",
        )?;
    }
    Ok(())
}

/// The `labels` column of an actor's row: null for none.
fn labels_column(labels: &Labels) -> Option<String> {
    (!labels.is_empty()).then(|| serde_json::to_string(labels).unwrap_or_default())
}

/// The labels a `labels` column holds (none if null or unreadable).
fn labels_of(column: Option<String>) -> Labels {
    column
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

fn template_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TemplateRow> {
    let env: String = r.get(3)?;
    let durability: Option<String> = r.get(4)?;
    Ok(TemplateRow {
        name: r.get(0)?,
        digest: r.get(1)?,
        bytes: r.get::<_, i64>(2)? as u64,
        env: serde_json::from_str(&env).unwrap_or_default(),
        durability: durability.and_then(|d| Durability::parse(&d).ok()),
    })
}

#[cfg(test)]
mod tests;
