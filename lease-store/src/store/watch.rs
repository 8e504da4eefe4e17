//! L4: what a long-poll follower asks of the record — mark it watched, then read it.
//!
//! A settle is announced (`NOTIFY keyflight_settled`) only for a record marked
//! `watched` (migration V3): NOTIFY serializes every notifying commit in the
//! database, and most records never have a follower. A follower therefore
//! marks the record before each read that may lead it to park, and the order
//! is what makes this safe. The follower has already subscribed in its own
//! process (`crate::longpoll`); then [`WATCH_SQL`] commits; then [`READ_SQL`]
//! reads. Either the mark lands first and any later settle notifies, or the
//! settle lands first, the mark matches no `pending` row, and the read (which
//! starts after the mark's commit) sees the settled record. A follower can
//! never read `pending` and then miss the settle.
//!
//! The two statements are pipelined on one connection: both are sent at
//! once, each in its own implicit transaction, and Postgres runs them in
//! order, so the pair costs one round trip. The mark writes only the first
//! time (`AND NOT watched`); after that it matches nothing and writes nothing.

use keyflight_protocol::Digest;

use super::claim::READ;
use super::{RecordSnapshot, Store, StoreError};

pub(super) use keyflight_store_core::routed::WATCH;

impl Store {
    /// Marks the record on `scope` watched (if it is `pending`), then reads it
    /// with the read-only statement ([`READ_SQL`]); `None` when there is no
    /// record. Claims nothing.
    pub async fn watch_and_read(
        &self,
        scope: &Digest,
    ) -> Result<Option<RecordSnapshot>, StoreError> {
        let scope = scope.0.as_slice();
        self.run(async |client| {
            let watch = client.prepare_cached(self.sql(&WATCH)).await?;
            let read = client.prepare_cached(self.sql(&READ)).await?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&scope];
            let (_marked, row) = futures_util::try_join!(
                client.execute(&watch, &params),
                client.query_opt(&read, &params),
            )?;
            row.as_ref().map(RecordSnapshot::from_row).transpose()
        })
        .await
    }
}
