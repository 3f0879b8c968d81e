//! The [`Tokens`] part of [`SqliteDirectory`]: table `tokens`, one JSON
//! [`TokenRecord`] per id, from schema version 5.

use rusqlite::{OptionalExtension, params};
use stasis_contract::error::ApiError;
use stasis_contract::rollout::{decode, encode};
use stasis_contract::tokens::{TokenRecord, Tokens};

use super::{SqliteDirectory, db};

/// Schema version 5's table.
pub(super) const TABLES: &str = "CREATE TABLE IF NOT EXISTS tokens (
         id     TEXT PRIMARY KEY,
         record TEXT NOT NULL
     );";

impl Tokens for SqliteDirectory {
    fn put_token(&self, record: &TokenRecord) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "INSERT INTO tokens (id, record) VALUES (?1, ?2)",
                params![record.id, encode(record)?],
            )
            .map_err(db)?;
        Ok(())
    }

    fn token(&self, id: &str) -> Result<Option<TokenRecord>, ApiError> {
        let text: Option<String> = self
            .reader()
            .query_row("SELECT record FROM tokens WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(db)?;
        text.map(|t| decode(t.as_bytes())).transpose()
    }

    fn tokens(&self) -> Result<Vec<TokenRecord>, ApiError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare("SELECT record FROM tokens ORDER BY id")
            .map_err(db)?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(db)?;
        rows.map(|t| decode(t.map_err(db)?.as_bytes())).collect()
    }

    fn delete_token(&self, id: &str) -> Result<bool, ApiError> {
        let removed = self
            .conn()
            .execute("DELETE FROM tokens WHERE id = ?1", [id])
            .map_err(db)?;
        Ok(removed > 0)
    }
}
