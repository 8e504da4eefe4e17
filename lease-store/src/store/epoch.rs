//! F9: the operator epoch edges check their replay cache against.
//!
//! One number, bumped by a trigger in the same transaction as every change
//! that makes a cached record wrong — an operator's erase, a resolve, a
//! completed record reclaimed past its retention (migration V4 says which
//! rows and why). Reading it is one primary-key lookup on a one-row table.

use super::{Store, StoreError};

pub(super) use keyflight_store_core::routed::EPOCH;

impl Store {
    /// The current operator epoch.
    pub async fn epoch(&self) -> Result<u64, StoreError> {
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(&EPOCH)).await?;
            let row = client.query_one(&statement, &[]).await?;
            let epoch: i64 = row.try_get("epoch")?;
            u64::try_from(epoch)
                .map_err(|_| StoreError::Unavailable("the operator epoch is negative".into()))
        })
        .await
    }
}
