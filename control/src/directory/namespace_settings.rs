//! The [`NamespaceSettings`] part of [`SqliteDirectory`]: one table per
//! setting, one JSON record per namespace (`quotas` from schema version
//! 5, `policies` from 6).

use rusqlite::{OptionalExtension, params};
use stasis_contract::error::ApiError;
use stasis_contract::namespace_settings::{NamespaceSettings, SettingTable};

use super::{SqliteDirectory, db};

/// Schema version 5's settings table (with the tokens').
pub(super) const QUOTAS: &str = "CREATE TABLE IF NOT EXISTS quotas (
         namespace TEXT PRIMARY KEY,
         record    TEXT NOT NULL
     );";

/// Schema version 6's table.
pub(super) const POLICIES: &str = "CREATE TABLE IF NOT EXISTS policies (
         namespace TEXT PRIMARY KEY,
         record    TEXT NOT NULL
     );";

impl NamespaceSettings for SqliteDirectory {
    fn put_record(
        &self,
        table: SettingTable,
        namespace: &str,
        record: String,
    ) -> Result<(), ApiError> {
        // The table's name is a setting type's constant, never input.
        self.conn()
            .execute(
                &format!(
                    "INSERT INTO {} (namespace, record) VALUES (?1, ?2)
                     ON CONFLICT(namespace) DO UPDATE SET record = excluded.record",
                    table.name
                ),
                params![namespace, record],
            )
            .map_err(db)?;
        Ok(())
    }

    fn record(&self, table: SettingTable, namespace: &str) -> Result<Option<String>, ApiError> {
        self.reader()
            .query_row(
                &format!("SELECT record FROM {} WHERE namespace = ?1", table.name),
                [namespace],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)
    }
}
