//! The [`Quotas`] part of [`SqliteDirectory`]: table `quotas`, one JSON
//! [`Quota`] per namespace, from schema version 5.

use rusqlite::{OptionalExtension, params};
use stasis_contract::error::ApiError;
use stasis_contract::quota::{Quota, Quotas};
use stasis_contract::rollout::{decode, encode};

use super::{SqliteDirectory, db};

/// Schema version 5's table (with the tokens').
pub(super) const TABLES: &str = "CREATE TABLE IF NOT EXISTS quotas (
         namespace TEXT PRIMARY KEY,
         record    TEXT NOT NULL
     );";

impl Quotas for SqliteDirectory {
    fn put_quota(&self, namespace: &str, quota: &Quota) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "INSERT INTO quotas (namespace, record) VALUES (?1, ?2)
                 ON CONFLICT(namespace) DO UPDATE SET record = excluded.record",
                params![namespace, encode(quota)?],
            )
            .map_err(db)?;
        Ok(())
    }

    fn quota(&self, namespace: &str) -> Result<Option<Quota>, ApiError> {
        let text: Option<String> = self
            .reader()
            .query_row(
                "SELECT record FROM quotas WHERE namespace = ?1",
                [namespace],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        text.map(|t| decode(t.as_bytes())).transpose()
    }
}
