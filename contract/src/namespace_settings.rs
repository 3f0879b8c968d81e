//! One kept table for every per-namespace setting (a quota, a policy, and
//! whatever comes next): a setting is a type ([`NamespaceSetting`]) that
//! names its table, kept as one JSON record per namespace; the directory
//! keeps records by table and namespace ([`NamespaceSettings`]: a table of
//! `stasis.db`, `<prefix>/<table>/<namespace>` in etcd). A new setting is
//! one type and one `CREATE TABLE`, not a trait with an implementation per
//! directory.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::rollout::{decode, encode};

/// Where a setting is kept, and how its reads and writes are named in
/// errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingTable {
    /// The table in `stasis.db` and the key space in etcd.
    pub name: &'static str,
    /// A read, in errors ("a quota read").
    pub read: &'static str,
    /// A write, in errors ("a quota write").
    pub write: &'static str,
}

/// A setting each namespace may have one of.
pub trait NamespaceSetting: Serialize + DeserializeOwned + Send + 'static {
    /// Where it is kept.
    const TABLE: SettingTable;
}

/// The namespace settings part of the directory: one JSON record per
/// table and namespace. Writes are durable on return and, in cluster
/// mode, fenced.
pub trait NamespaceSettings: Send + Sync {
    /// Sets `namespace`'s record in `table`, replacing any.
    ///
    /// # Errors
    /// 500 on a storage failure; 503 from a leader that no longer leads.
    fn put_record(
        &self,
        table: SettingTable,
        namespace: &str,
        record: String,
    ) -> Result<(), ApiError>;

    /// `namespace`'s record in `table`, if it has one.
    ///
    /// # Errors
    /// 500 on a storage failure.
    fn record(&self, table: SettingTable, namespace: &str) -> Result<Option<String>, ApiError>;
}

/// Typed access to a directory's namespace settings.
pub trait Settings: NamespaceSettings {
    /// Sets `namespace`'s `S`, replacing any.
    ///
    /// # Errors
    /// As [`NamespaceSettings::put_record`].
    fn put_setting<S: NamespaceSetting>(
        &self,
        namespace: &str,
        setting: &S,
    ) -> Result<(), ApiError> {
        self.put_record(S::TABLE, namespace, encode(setting)?)
    }

    /// `namespace`'s `S`, if it has one.
    ///
    /// # Errors
    /// As [`NamespaceSettings::record`], or 500 for a record that does not
    /// decode.
    fn setting<S: NamespaceSetting>(&self, namespace: &str) -> Result<Option<S>, ApiError> {
        self.record(S::TABLE, namespace)?
            .map(|text| decode(text.as_bytes()))
            .transpose()
    }
}

impl<T: NamespaceSettings + ?Sized> Settings for T {}
