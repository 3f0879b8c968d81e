//! The [`IngressAuths`] part of [`SqliteDirectory`]: table `ingress_auth`,
//! one mode name per namespace that has one set, from schema version 6.

use rusqlite::{OptionalExtension, params};
use stasis_contract::error::ApiError;
use stasis_contract::ingress_auth::{IngressAuth, IngressAuths};

use super::{SqliteDirectory, db};

/// Schema version 6's table.
pub(super) const TABLES: &str = "CREATE TABLE IF NOT EXISTS ingress_auth (
         namespace TEXT PRIMARY KEY,
         mode      TEXT NOT NULL
     );";

impl IngressAuths for SqliteDirectory {
    fn put_ingress_auth(&self, namespace: &str, mode: IngressAuth) -> Result<(), ApiError> {
        self.conn()
            .execute(
                "INSERT INTO ingress_auth (namespace, mode) VALUES (?1, ?2)
                 ON CONFLICT(namespace) DO UPDATE SET mode = excluded.mode",
                params![namespace, mode.name()],
            )
            .map_err(db)?;
        Ok(())
    }

    fn ingress_auth(&self, namespace: &str) -> Result<Option<IngressAuth>, ApiError> {
        let text: Option<String> = self
            .reader()
            .query_row(
                "SELECT mode FROM ingress_auth WHERE namespace = ?1",
                [namespace],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        text.map(|t| IngressAuth::parse(&t)).transpose()
    }
}
