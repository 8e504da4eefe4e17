//! Settling an `unknown` record with what the service's ledger said
//! (`docs/reconcile.md#what-the-store-records`).
//!
//! Under `uncertain: reconcile` the filter that meets an `unknown` record asks the service
//! and reports its answer here. The change is an operator's resolve made by the reconciler:
//! the same two target states, the same audit row in the same statement, but applied only
//! while the record is still `unknown` at the fence and fingerprint the service was asked
//! about, so a late, repeated or misdirected report changes nothing.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::reconcile::ReconciledRequest;
use tokio_postgres::types::Json;

use super::records::response_digest;
use super::{Store, StoreError};

pub(super) use keyflight_store_core::routed::RECONCILED_ABSENT;
pub(super) use keyflight_store_core::routed::RECONCILED_COMMITTED;

impl Store {
    /// Settles `scope`'s `unknown` record as the service's ledger said, audited as `actor`.
    /// [`StoreError::NotUnknown`] when the record is no longer `unknown` at that fence with
    /// that fingerprint (another report, an operator, or a later claim came first).
    pub async fn reconciled(
        &self,
        scope: &Digest,
        report: &ReconciledRequest,
        actor: &str,
    ) -> Result<(), StoreError> {
        self.run(async |client| {
            let (fence, fingerprint) = (report.fence(), report.fingerprint());
            let key = (scope.0.as_slice(), fence, fingerprint.0.as_slice());
            let row = match report {
                ReconciledRequest::Committed { response, .. } => {
                    let statement = client
                        .prepare_cached(self.sql(&RECONCILED_COMMITTED))
                        .await?;
                    let digest = response_digest(response);
                    client
                        .query_one(
                            &statement,
                            &[
                                &key.0,
                                &key.1,
                                &key.2,
                                &i32::from(response.status),
                                &Json(&response.headers),
                                &response.body.as_slice(),
                                &actor,
                                &digest.0.as_slice(),
                            ],
                        )
                        .await?
                }
                ReconciledRequest::Absent { .. } => {
                    let statement = client.prepare_cached(self.sql(&RECONCILED_ABSENT)).await?;
                    client
                        .query_one(&statement, &[&key.0, &key.1, &key.2, &actor])
                        .await?
                }
            };
            let settled: i64 = row.try_get("settled")?;
            let state_before: Option<&str> = row.try_get("state_before")?;
            match (settled, state_before) {
                (0, None) => Err(StoreError::NotFound),
                (0, Some(_)) => Err(StoreError::NotUnknown),
                _ => Ok(()),
            }
        })
        .await
    }
}
