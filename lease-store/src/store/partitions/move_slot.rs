//! Moving a slot to another partition (`docs/distributed-sql.md#adding-a-partition`): park
//! it, let calls in flight end, copy its records, point it at the new partition, and delete
//! the copies left elsewhere. A parked slot fails closed, so no scope is ever claimable on
//! two partitions; run again after a failure, the move finishes.

use std::time::Duration;

use futures_util::{SinkExt, TryStreamExt};
use tokio_postgres::Client;

use super::install::{Partition, own_fences, slot_map};
use super::{CLUSTER, SLOTS};
use crate::store::StoreError;
use crate::store::migrate::owner_connection;

/// The rows of slot `$1`: the router's `keyflight_partition` of the scope, masked to the
/// slots as PL/Proxy masks it.
fn in_slot() -> String {
    format!(
        "(('x' || encode(substring(scope FROM 1 FOR 4), 'hex'))::bit(32)::integer & {}) = $1",
        SLOTS - 1
    )
}

/// What a move did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveReport {
    /// The slot.
    pub slot: usize,
    /// The partition it was on; `None` when a failed move left it parked.
    pub from: Option<usize>,
    /// The partition it is on now.
    pub to: usize,
    /// Records copied.
    pub copied: u64,
    /// Records deleted from partitions other than `to`.
    pub cleaned: u64,
}

impl std::fmt::Display for MoveReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = self
            .from
            .map_or("parked".to_owned(), |from| format!("partition {from}"));
        write!(
            f,
            "slot {} moved from {from} to partition {}: {} records copied, {} left-over copies deleted",
            self.slot, self.to, self.copied, self.cleaned
        )
    }
}

/// Moves `slot` to partition `to` of `partition_urls` (as `migrate` names them), waiting
/// `drain` after parking it for calls already routed to the old partition to end (the
/// stores' `statement_timeout` and a margin).
pub async fn move_slot(
    router_url: &str,
    partition_urls: &[String],
    slot: usize,
    to: usize,
    drain: Duration,
) -> Result<MoveReport, StoreError> {
    if slot >= SLOTS || to >= partition_urls.len() {
        return Err(StoreError::Invalid(format!(
            "slot must be below {SLOTS} and --to below {} (the partitions given)",
            partition_urls.len()
        )));
    }
    let partitions: Vec<Partition> = partition_urls
        .iter()
        .map(|url| Partition::parse(url))
        .collect::<Result<_, _>>()?;
    let connstrs: Vec<&str> = partitions.iter().map(|p| p.connstr.as_str()).collect();
    let (router, router_driver) = owner_connection(router_url).await?;
    let map = slot_map(&router, &connstrs).await?;
    let from = connstrs.iter().position(|c| *c == map[slot]);
    let mut clients = Vec::with_capacity(partition_urls.len());
    for url in partition_urls {
        clients.push(owner_connection(url).await?);
    }
    let mut copied = 0;
    if from != Some(to) {
        let parked = partitions[to].parked(slot);
        set_slot(&router, slot, &parked).await?;
        tokio::time::sleep(drain).await;
        // The records are on the old partition, or (a failed move resumed) on whichever
        // other partition still has them; none: an earlier run copied them already.
        let mut source = None;
        for (index, (client, _)) in clients.iter().enumerate() {
            if index != to && rows_in_slot(client, slot).await? > 0 {
                source = Some(index);
                break;
            }
        }
        if let Some(source) = source {
            copied = copy_slot(&clients[source].0, &clients[to].0, slot, to).await?;
        }
        set_slot(&router, slot, &partitions[to].connstr).await?;
    }
    let mut cleaned = 0;
    for (index, (client, _)) in clients.iter().enumerate() {
        if index != to {
            let slot_param = slot_param(slot);
            cleaned += client
                .execute(
                    &format!("DELETE FROM keyflight_records WHERE {}", in_slot()),
                    &[&slot_param],
                )
                .await?;
        }
    }
    drop(router);
    let _ = router_driver.await;
    for (client, driver) in clients {
        drop(client);
        let _ = driver.await;
    }
    Ok(MoveReport {
        slot,
        from,
        to,
        copied,
        cleaned,
    })
}

fn slot_param(slot: usize) -> i32 {
    i32::try_from(slot).unwrap_or(i32::MAX)
}

/// Points `slot` of the router's slot map at `connstr`. PL/Proxy reads the map again on the
/// next call of every session.
async fn set_slot(router: &Client, slot: usize, connstr: &str) -> Result<(), StoreError> {
    router
        .batch_execute(&format!(
            "ALTER SERVER {CLUSTER} OPTIONS (SET p{slot} {})",
            super::install::quote_literal(connstr)
        ))
        .await?;
    Ok(())
}

async fn rows_in_slot(client: &Client, slot: usize) -> Result<i64, StoreError> {
    let slot = slot_param(slot);
    Ok(client
        .query_one(
            &format!("SELECT count(*) FROM keyflight_records WHERE {}", in_slot()),
            &[&slot],
        )
        .await?
        .try_get(0)?)
}

/// Copies slot `slot`'s records from `source` to partition `to` (`target`) in one
/// transaction on the target, replacing what an interrupted copy left there, and moves the
/// target's fences above every copied one; how many records.
async fn copy_slot(
    source: &Client,
    target: &Client,
    slot: usize,
    to: usize,
) -> Result<u64, StoreError> {
    let slot_param = slot_param(slot);
    target.batch_execute("BEGIN").await?;
    let copied = async {
        target
            .execute(
                &format!("DELETE FROM keyflight_records WHERE {}", in_slot()),
                &[&slot_param],
            )
            .await?;
        let out = source
            .copy_out(&format!(
                "COPY (SELECT * FROM keyflight_records WHERE {}) TO STDOUT (FORMAT binary)",
                in_slot().replace("$1", &slot_param.to_string())
            ))
            .await?;
        let sink = target
            .copy_in("COPY keyflight_records FROM STDIN (FORMAT binary)")
            .await?;
        futures_util::pin_mut!(out);
        futures_util::pin_mut!(sink);
        while let Some(chunk) = out.try_next().await? {
            sink.send(chunk).await?;
        }
        let copied = sink.as_mut().finish().await?;
        let highest: Option<i64> = target
            .query_one(
                &format!(
                    "SELECT max(fence) FROM keyflight_records WHERE {}",
                    in_slot()
                ),
                &[&slot_param],
            )
            .await?
            .try_get(0)?;
        own_fences(target, to, highest.unwrap_or(0)).await?;
        Ok::<u64, StoreError>(copied)
    }
    .await;
    match copied {
        Ok(copied) => {
            target.batch_execute("COMMIT").await?;
            Ok(copied)
        }
        Err(e) => {
            let _ = target.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}
