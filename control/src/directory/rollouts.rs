//! The [`Rollouts`] part of [`SqliteDirectory`]: table `rollouts` (one
//! JSON [`RolloutRecord`] per template) and `rollout_outcomes` (one JSON
//! [`ActorOutcome`] per template and actor), from schema version 3.

use rusqlite::{OptionalExtension, params};
use stasis_contract::error::ApiError;
use stasis_contract::rollout::{ActorOutcome, RolloutRecord, Rollouts, decode, encode};

use super::{SqliteDirectory, db};

/// Schema version 3's tables.
pub(super) const TABLES: &str = "CREATE TABLE IF NOT EXISTS rollouts (
         template TEXT PRIMARY KEY,
         record   TEXT NOT NULL
     );
     CREATE TABLE IF NOT EXISTS rollout_outcomes (
         template TEXT NOT NULL,
         actor    TEXT NOT NULL,
         record   TEXT NOT NULL,
         PRIMARY KEY (template, actor)
     );";

impl Rollouts for SqliteDirectory {
    fn put_rollout(&self, record: &RolloutRecord) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "INSERT INTO rollouts (template, record) VALUES (?1, ?2)
                 ON CONFLICT(template) DO UPDATE SET record = excluded.record",
                params![record.template, encode(record)?],
            )
            .map_err(db)?;
        Ok(())
    }

    fn rollout(&self, template: &str) -> Result<Option<RolloutRecord>, ApiError> {
        let text: Option<String> = self
            .reader()
            .query_row(
                "SELECT record FROM rollouts WHERE template = ?1",
                [template],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        text.map(|t| decode(t.as_bytes())).transpose()
    }

    fn rollouts(&self) -> Result<Vec<RolloutRecord>, ApiError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare("SELECT record FROM rollouts ORDER BY template")
            .map_err(db)?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(db)?;
        rows.map(|t| decode(t.map_err(db)?.as_bytes())).collect()
    }

    fn put_rollout_outcome(&self, template: &str, outcome: &ActorOutcome) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "INSERT INTO rollout_outcomes (template, actor, record) VALUES (?1, ?2, ?3)
                 ON CONFLICT(template, actor) DO UPDATE SET record = excluded.record",
                params![template, outcome.actor, encode(outcome)?],
            )
            .map_err(db)?;
        Ok(())
    }

    fn rollout_outcomes(&self, template: &str) -> Result<Vec<ActorOutcome>, ApiError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare("SELECT record FROM rollout_outcomes WHERE template = ?1 ORDER BY actor")
            .map_err(db)?;
        let rows = stmt
            .query_map([template], |r| r.get::<_, String>(0))
            .map_err(db)?;
        rows.map(|t| decode(t.map_err(db)?.as_bytes())).collect()
    }

    fn clear_rollout_outcomes(&self, template: &str) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "DELETE FROM rollout_outcomes WHERE template = ?1",
                [template],
            )
            .map_err(db)?;
        Ok(())
    }
}
