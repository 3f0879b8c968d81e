//! The [`NamespaceSettings`] part of [`EtcdDirectory`]: each namespace's
//! record of a setting at `<prefix>/<table>/<namespace>` (JSON; `quotas/`,
//! `policies/`). Writes go through the leader's fence; reads are plain
//! gets, so every replica reads what etcd holds.

use super::directory::EtcdDirectory;
use stasis_contract::error::ApiError;
use stasis_contract::namespace_settings::{NamespaceSettings, SettingTable};

impl EtcdDirectory {
    fn setting_key(&self, table: SettingTable, namespace: &str) -> String {
        self.etcd.key(&format!("{}/{namespace}", table.name))
    }
}

impl NamespaceSettings for EtcdDirectory {
    fn put_record(
        &self,
        table: SettingTable,
        namespace: &str,
        record: String,
    ) -> Result<(), ApiError> {
        self.put(table.write, self.setting_key(table, namespace), record)
    }

    fn record(&self, table: SettingTable, namespace: &str) -> Result<Option<String>, ApiError> {
        self.get_text(table.read, self.setting_key(table, namespace))
    }
}
