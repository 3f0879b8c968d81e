//! The [`Policies`] part of [`SqliteDirectory`]: table `policies`, one
//! JSON [`NamespacePolicy`] per namespace that has one set, from schema
//! version 6.

use rusqlite::{OptionalExtension, params};
use stasis_contract::error::ApiError;
use stasis_contract::policy::{NamespacePolicy, Policies};
use stasis_contract::rollout::{decode, encode};

use super::{SqliteDirectory, db};

/// Schema version 6's table.
pub(super) const TABLES: &str = "CREATE TABLE IF NOT EXISTS policies (
         namespace TEXT PRIMARY KEY,
         record    TEXT NOT NULL
     );";

impl Policies for SqliteDirectory {
    fn put_policy(&self, namespace: &str, policy: &NamespacePolicy) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "INSERT INTO policies (namespace, record) VALUES (?1, ?2)
                 ON CONFLICT(namespace) DO UPDATE SET record = excluded.record",
                params![namespace, encode(policy)?],
            )
            .map_err(db)?;
        Ok(())
    }

    fn policy(&self, namespace: &str) -> Result<Option<NamespacePolicy>, ApiError> {
        let text: Option<String> = self
            .reader()
            .query_row(
                "SELECT record FROM policies WHERE namespace = ?1",
                [namespace],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        text.map(|t| decode(t.as_bytes())).transpose()
    }
}
