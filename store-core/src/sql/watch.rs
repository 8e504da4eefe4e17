//! A long-poll follower marks the record it waits on (`store/watch.rs`).

/// `$1` scope. Marks a `pending` record so that its settle is announced.
///
/// The mark commits without waiting for its WAL flush (`synchronous_commit`
/// off for this one transaction, `set_config(…, true)`): it holds the row
/// lock until it commits, and a winner finalizing at that moment would
/// otherwise queue behind a whole WAL flush (with pgbench, a mark-and-unmark
/// pair ran 4,400–4,800/s durable and 9,600–10,900/s this way). Visibility
/// does not depend on the flush, so the order argument above holds; a mark
/// lost in a database crash is harmless, because the crash also drops every
/// LISTEN connection and a reconnected listener wakes all its waiters to
/// check (and mark) again.
/// `(state || '')` keeps the lookup on the primary key (`docs/records.md#the-indexes`).
pub const WATCH_SQL: &str = "
UPDATE keyflight_records
   SET watched = true
  FROM (SELECT set_config('synchronous_commit', 'off', true)) AS no_flush_wait
 WHERE scope = $1 AND (state || '') = 'pending' AND NOT watched";
