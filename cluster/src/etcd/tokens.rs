//! The [`Tokens`] part of [`EtcdDirectory`]: each scoped admin token's
//! record at `<prefix>/tokens/<id>` (JSON). Writes go through the leader's
//! fence like every other directory write; reads are plain gets, so any
//! replica checks a token against what etcd holds now.

use etcd_client::TxnOp;

use super::directory::EtcdDirectory;
use super::values::failed;
use stasis_contract::error::ApiError;
use stasis_contract::rollout::encode;
use stasis_contract::tokens::{TokenRecord, Tokens};

impl EtcdDirectory {
    fn token_key(&self, id: &str) -> String {
        self.etcd.key(&format!("tokens/{id}"))
    }
}

impl Tokens for EtcdDirectory {
    fn put_token(&self, record: &TokenRecord) -> Result<(), ApiError> {
        let key = self.token_key(&record.id);
        self.put("a token write", key, encode(record)?)
    }

    fn token(&self, id: &str) -> Result<Option<TokenRecord>, ApiError> {
        self.get_decoded("a token read", self.token_key(id))
    }

    fn tokens(&self) -> Result<Vec<TokenRecord>, ApiError> {
        self.list_decoded("the token listing", self.etcd.key("tokens/"))
    }

    fn delete_token(&self, id: &str) -> Result<bool, ApiError> {
        let op = TxnOp::delete(self.token_key(id), None);
        let resp = self
            .fenced_txn("a token delete", Vec::new(), vec![op])?
            .ok_or_else(|| failed("deleting a token: the transaction failed"))?;
        Ok(resp
            .op_responses()
            .into_iter()
            .any(|r| matches!(r, etcd_client::TxnOpResponse::Delete(d) if d.deleted() > 0)))
    }
}
