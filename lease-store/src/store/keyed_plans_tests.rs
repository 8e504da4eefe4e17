//! Every statement that finds its rows by scope reaches them through the primary key,
//! even once the statistics say almost no row is `pending`
//! (`docs/records.md#the-indexes`, `docs/postgres-facts.md#a-rare-state-and-the-state-index`),
//! and even when it was planned while the table was empty
//! (`docs/postgres-facts.md#plans-made-on-a-young-table`); the operators' list reads
//! only the rows it returns.
//!
//! Each statement is planned as a pooled connection runs it after its fifth execution:
//! generically, and then kept until the table's statistics change. The sessions are
//! the store's own ([`pg_config`]).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use keyflight_testkit::pg::PgCluster;
use tokio_postgres::types::Json;
use tokio_postgres::{Client, SimpleQueryMessage};
use uuid::Uuid;

use keyflight_store_core::routed::{
    CLAIM_BATCH, DELETE_EXPIRED, FINALIZE_BATCH, HOLD_ABANDONED, LIST, RunOn, all as routed,
    parameter_count,
};

use super::claim::HOLD_LAPSED_SQL;
use super::pg_config;

/// On a table between two vacuums ([`settle_between_vacuums`]).
#[tokio::test(flavor = "current_thread")]
async fn a_statement_by_scope_never_scans_the_state_index() {
    let cluster = PgCluster::start();
    let client = generic_session(&cluster).await;
    settle_between_vacuums(&client).await;
    let wrong = plans_naming(&client, "keyflight_records_state_idx").await;
    assert!(
        wrong.is_empty(),
        "statements by scope planned through the state index:\n{}",
        wrong.join("\n\n")
    );
}

/// Cleanup's statements pick their rows in a subquery through an index and change each
/// one found by its primary key, not by scanning the state index again.
#[tokio::test(flavor = "current_thread")]
async fn cleanup_reaches_the_rows_it_changes_by_the_primary_key() {
    let cluster = PgCluster::start();
    let client = generic_session(&cluster).await;
    settle_between_vacuums(&client).await;
    for (name, sql) in [
        ("hold_abandoned", HOLD_ABANDONED.sql),
        ("delete_expired", DELETE_EXPIRED.sql),
    ] {
        let plan = generic_plan(&client, sql).await;
        assert!(
            plan.lines()
                .any(|line| line.ends_with("using keyflight_records_pkey on keyflight_records")),
            "{name} changes rows it did not reach by the primary key:\n{plan}"
        );
    }
}

/// The table as a busy store leaves it between two vacuums: many settled rows, and in
/// the `(state, created_at)` index an entry for every `pending` version a settle
/// replaced; analyzed, so the statistics say almost no row is `pending`.
async fn settle_between_vacuums(client: &Client) {
    client
        .batch_execute(&format!(
            "ALTER TABLE keyflight_records SET (autovacuum_enabled = off);
             INSERT INTO keyflight_records
                 (scope, state, fingerprint, claim_id, fence, lease_expires_at,
                  created_at, retention, expires_at, updated_at)
             SELECT sha256(i::text::bytea), 'pending', sha256(i::text::bytea),
                    gen_random_uuid(), i, now() + interval '1 minute', now(),
                    interval '1 day', now() + interval '1 day', now()
               FROM generate_series(1, {SETTLED_ROWS}) AS i;
             UPDATE keyflight_records
                SET state = 'completed', lease_expires_at = NULL, response_status = 201,
                    response_headers = '[]', response_body = '\\x7b7d';
             ANALYZE keyflight_records;"
        ))
        .await
        .unwrap();
}

/// A new installation: the table analyzed while empty, so the planner knows it has no
/// pages, and every connection plans its statements then and keeps those plans.
#[tokio::test(flavor = "current_thread")]
async fn a_statement_by_scope_planned_on_an_empty_table_never_scans_it() {
    let cluster = PgCluster::start();
    let client = generic_session(&cluster).await;
    client
        .batch_execute("ANALYZE keyflight_records")
        .await
        .unwrap();
    let wrong = plans_naming(&client, "Seq Scan on keyflight_records").await;
    assert!(
        wrong.is_empty(),
        "statements by scope planned to scan the whole table:\n{}",
        wrong.join("\n\n")
    );
}

/// However large the table, a list of `limit` records reads at most `limit` rows of
/// each state.
#[tokio::test(flavor = "current_thread")]
async fn the_operators_list_reads_only_the_newest_of_each_state() {
    let cluster = PgCluster::start();
    let client = generic_session(&cluster).await;
    client
        .batch_execute(&format!(
            "INSERT INTO keyflight_records
                 (scope, state, fingerprint, claim_id, fence, lease_expires_at,
                  created_at, retention, expires_at, updated_at, response_status,
                  response_headers, response_body)
             SELECT sha256(i::text::bytea), 'completed', sha256(i::text::bytea),
                    gen_random_uuid(), i, NULL, now() - i * interval '1 ms',
                    interval '1 day', now() + interval '1 day', now(), 201, '[]', '\\x7b7d'
               FROM generate_series(1, {SETTLED_ROWS}) AS i;
             ANALYZE keyflight_records;"
        ))
        .await
        .unwrap();
    let limit = 10;
    for state in ["NULL", "'completed'"] {
        let read = rows_read(
            &client,
            LIST.sql,
            &format!("{state}, {limit}"),
            "keyflight_records",
        )
        .await;
        assert!(
            read <= 4 * limit,
            "a list of {limit} with state {state} read {read} rows"
        );
    }
}

/// The batch statements are the hot path's busiest, and with Postgres' default
/// `plan_cache_mode` (`auto`) a plan that sees the arrays' few elements always costs less
/// than the generic one, so every run would be planned again; the store's sessions plan
/// each statement once (`docs/postgres-facts.md#plans-made-on-a-young-table`).
#[tokio::test(flavor = "current_thread")]
async fn the_stores_sessions_plan_a_batch_statement_once() {
    let cluster = PgCluster::start();
    let client = generic_session(&cluster).await;
    let claim = client.prepare(CLAIM_BATCH.sql).await.unwrap();
    let finalize = client.prepare(FINALIZE_BATCH.sql).await.unwrap();
    for round in 0..RUNS_PAST_CUSTOM_PLANS {
        let scopes: Vec<Vec<u8>> = (0..2).map(|i| vec![round * 2 + i; 32]).collect();
        let claim_ids = [Uuid::now_v7(), Uuid::now_v7()];
        let won = client
            .query(
                &claim,
                &[
                    &scopes,
                    &scopes,
                    &claim_ids.as_slice(),
                    &[60_000_i64, 60_000].as_slice(),
                    &[86_400_000_i64, 86_400_000].as_slice(),
                    &[false, false].as_slice(),
                    &[Some("spiffe://w"), None].as_slice(),
                ],
            )
            .await
            .unwrap();
        assert_eq!(won.len(), 2);
        let no_headers: Vec<(String, String)> = Vec::new();
        let landed = client
            .query(
                &finalize,
                &[
                    &scopes,
                    &claim_ids.as_slice(),
                    &[201_i32, 201].as_slice(),
                    &[Json(&no_headers), Json(&no_headers)].as_slice(),
                    &[b"{}".as_slice(), b"{}".as_slice()].as_slice(),
                    &[true, true].as_slice(),
                ],
            )
            .await
            .unwrap();
        assert_eq!(landed.len(), 2);
    }
    let custom: Vec<(String, i64)> = client
        .query(
            "SELECT statement, custom_plans FROM pg_prepared_statements WHERE custom_plans > 0",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert!(
        custom.is_empty(),
        "statements planned again for their arguments: {custom:?}"
    );
}

/// More runs than the five custom plans `auto` makes before it compares them with the
/// generic one.
const RUNS_PAST_CUSTOM_PLANS: u8 = 10;

/// Rows settled since the last vacuum.
const SETTLED_ROWS: u32 = 20_000;

/// A migrated cluster, and a session on it set up as the store's are.
async fn generic_session(cluster: &PgCluster) -> Client {
    let url = cluster.url();
    super::migrate(&url).await.unwrap();
    let database = pg_config(&url, Duration::from_secs(5)).unwrap();
    let (client, connection) = database
        .config
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Each statement by scope (by name) whose generic plan names `what`, with the plan.
async fn plans_naming(client: &Client, what: &str) -> Vec<String> {
    let keyed = routed()
        .into_iter()
        .filter(|statement| matches!(statement.on, RunOn::Scope | RunOn::Split))
        .map(|statement| (statement.name, statement.sql))
        .chain([("hold_lapsed", HOLD_LAPSED_SQL)]);
    let mut naming = Vec::new();
    for (name, sql) in keyed {
        let plan = generic_plan(client, sql).await;
        if plan.contains(what) {
            naming.push(format!("{name}:\n{plan}"));
        }
    }
    naming
}

/// The generic plan of `sql`, without costs.
async fn generic_plan(client: &Client, sql: &str) -> String {
    let nulls = vec!["NULL"; parameter_count(sql)].join(", ");
    explain(client, "COSTS OFF", sql, &nulls).await.join("\n")
}

/// The lines of `EXPLAIN (options)` of `sql` prepared and executed with `arguments`.
async fn explain(client: &Client, options: &str, sql: &str, arguments: &str) -> Vec<String> {
    client
        .simple_query(&format!(
            "PREPARE explained AS {sql};
             EXPLAIN ({options}) EXECUTE explained({arguments});
             DEALLOCATE explained;"
        ))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect()
}

/// How many rows the generic plan of `sql` with `arguments` read from `table`, in all
/// its loops.
async fn rows_read(client: &Client, sql: &str, arguments: &str, table: &str) -> u32 {
    let plan = explain(client, "ANALYZE, COSTS OFF, TIMING OFF", sql, arguments).await;
    let on_table = format!(" on {table} ");
    let reading: Vec<&String> = plan
        .iter()
        .filter(|line| line.contains(&on_table))
        .collect();
    assert!(
        !reading.is_empty(),
        "no scan of {table}:\n{}",
        plan.join("\n")
    );
    reading
        .iter()
        .map(|line| actual(line, "rows=") * actual(line, "loops="))
        .sum()
}

/// The number after `key` in a plan line's `(actual …)` part.
fn actual(line: &str, key: &str) -> u32 {
    let after = line
        .rsplit_once(key)
        .map_or("", |(_, after)| after)
        .trim_start();
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}
