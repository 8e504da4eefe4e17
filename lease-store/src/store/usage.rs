//! What each workload keeps in the database: its records and their response bytes, the
//! measure its storage quota is checked against (`docs/records.md#storage-quota`).
//!
//! One aggregate, run on a timer by every replica (`crate::quota`), never on the claim path:
//! a claim reads the last measure from memory. Counting on every claim would serialize each
//! workload's claims on one counter row; an index on the workload would cost every claim and
//! settle one more index write. The aggregate reads the whole table while it holds up to a
//! million rows (by the planner's estimate), and past that a block sample of about a million
//! rows, scaled up: an estimate whose error matters only near a quota, where a
//! workload holds many sampled rows.

use super::{Store, StoreError};

pub(super) use keyflight_store_core::routed::WORKLOAD_USAGE;

/// One workload's share of the database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Records, in any state.
    pub records: u64,
    /// Recorded response bytes.
    pub bytes: u64,
    /// Records in `unknown`, counted exactly: the operator's queue.
    pub unknown: u64,
}

impl Store {
    /// Every workload's records and bytes, measured now; `None` names the bearer share.
    pub async fn workload_usage(&self) -> Result<Vec<(Option<String>, Usage)>, StoreError> {
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(&WORKLOAD_USAGE)).await?;
            let rows = client.query(&statement, &[]).await?;
            let mut usage = Vec::with_capacity(rows.len());
            for row in rows {
                let records: i64 = row.try_get("records")?;
                let bytes: i64 = row.try_get("bytes")?;
                let unknown: i64 = row.try_get("unknown")?;
                usage.push((
                    row.try_get("workload")?,
                    Usage {
                        records: u64::try_from(records).unwrap_or(0),
                        bytes: u64::try_from(bytes).unwrap_or(0),
                        unknown: u64::try_from(unknown).unwrap_or(0),
                    },
                ));
            }
            Ok(usage)
        })
        .await
    }
}
