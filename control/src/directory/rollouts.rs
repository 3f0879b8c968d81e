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

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_contract::rollout::RolloutState;

    #[test]
    fn a_rollout_and_its_outcomes_are_kept_across_reopen_and_cleared_apart() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("stasis.db");
        let dir = SqliteDirectory::open(&path).expect("open");
        assert_eq!(dir.rollout("t").expect("read"), None);
        let mut record = RolloutRecord {
            template: "t".into(),
            to_version: 2,
            canaries: vec!["a".into()],
            max_failures: 3,
            eager: false,
            state: RolloutState::Running,
            rollback: false,
            started_unix_ms: 1,
            stop_reason: None,
        };
        dir.put_rollout(&record).expect("put");
        record.state = RolloutState::Stopped;
        record.stop_reason = Some("3 actors failed".into());
        dir.put_rollout(&record).expect("replace");
        let outcome = |actor: &str, error: Option<&str>| ActorOutcome {
            actor: actor.into(),
            from_version: 1,
            error: error.map(str::to_owned),
            rolled_back: false,
            rollback_error: None,
            gone: false,
        };
        dir.put_rollout_outcome("t", &outcome("b", Some("refused")))
            .expect("outcome");
        dir.put_rollout_outcome("t", &outcome("a", None))
            .expect("outcome");
        dir.put_rollout_outcome("u", &outcome("c", None))
            .expect("another template's");
        drop(dir);
        let dir = SqliteDirectory::open(&path).expect("reopen");
        assert_eq!(dir.rollout("t").expect("read"), Some(record.clone()));
        assert_eq!(dir.rollouts().expect("all"), vec![record]);
        assert_eq!(
            dir.rollout_outcomes("t").expect("outcomes"),
            vec![outcome("a", None), outcome("b", Some("refused"))]
        );
        dir.clear_rollout_outcomes("t").expect("clear");
        assert!(dir.rollout_outcomes("t").expect("outcomes").is_empty());
        assert_eq!(dir.rollout_outcomes("u").expect("kept").len(), 1);
    }
}
