//! The journal floor: pgbench running the store's group-commit statements with K rows each.
//!
//! The statements are the store's own ([`CLAIM_BATCH_SQL`], [`FINALIZE_BATCH_SQL`] from
//! `keyflight-store-core`), each in its own implicit transaction as the store's batch
//! workers run them (`docs/group-commit.md#shape`): per script run, one claim commit and one
//! finalize commit for K requests, over TCP with prepared statements and the store's planner
//! settings, like the P1 baseline ([`crate::pgbench`]). Each `$n` array becomes K elements
//! computed from pgbench variables: K fresh scopes from one random base, their claim ids, and
//! the same lease, retention, status, headers and body the single-statement baseline binds.
//! Computing them costs Postgres a little the store's bound arrays do not: if anything, the
//! floor is measured high.

use keyflight_store_core::sql::batch::{CLAIM_BATCH_SQL, FINALIZE_BATCH_SQL};

use crate::error::BenchError;
use crate::pgbench::{recorded_body_hex, substitute, variables};

/// The batch sizes measured (rows per statement).
pub const BATCHES: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// K elements, the i-th (`i` from 0) from `element`.
fn per_row(k: usize, element: &str) -> String {
    format!(
        "ARRAY(SELECT {element} FROM generate_series(0, {}) AS i)",
        k - 1
    )
}

/// K copies of `element`.
fn each(k: usize, element: &str) -> String {
    format!("array_fill({element}, ARRAY[{k}])")
}

/// The pgbench script of batch size `k`: K claims in one statement, then their K
/// finalizes in one statement.
pub fn script(k: usize) -> Result<String, BenchError> {
    if k == 0 {
        return Err(BenchError::Input("a batch has at least one row".into()));
    }
    let scopes = per_row(k, "sha256(int8send(:scope::bigint + i))");
    let claim_ids = per_row(k, "md5(int8send(:scope::bigint + i))::uuid");
    let body_hex = recorded_body_hex();
    let claim: Vec<(usize, String)> = vec![
        (1, scopes.clone()),
        (2, each(k, "sha256(int8send(:fingerprint::bigint))")),
        (3, claim_ids.clone()),
        (4, each(k, ":lease_ms::bigint")),
        (5, each(k, ":retention_ms::bigint")),
        // The bench's policy is the demo's, `uncertain: hold`: at-most-once.
        (6, each(k, "true")),
        // No workload: the bench's filter presents the bearer token.
        (7, each(k, "NULL::text")),
    ];
    let finalize: Vec<(usize, String)> = vec![
        (1, scopes),
        (2, claim_ids),
        (3, each(k, ":status::integer")),
        (
            4,
            each(k, r#"'[["content-type","application/json"]]'::jsonb"#),
        ),
        (5, each(k, &format!("'\\x{body_hex}'::bytea"))),
        (6, each(k, "true")),
    ];
    let bind = |sql: &str, params: &[(usize, String)]| {
        let params: Vec<(usize, &str)> = params.iter().map(|(n, e)| (*n, e.as_str())).collect();
        substitute(sql, &params)
    };
    Ok(format!(
        "{}{};\n{};\n",
        variables(i64::MAX as u64 - k as u64),
        bind(CLAIM_BATCH_SQL, &claim)?.trim(),
        bind(FINALIZE_BATCH_SQL, &finalize)?.trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_is_the_stores_batch_sql_with_k_rows() {
        for k in BATCHES {
            let script = script(k).expect("the store's batch SQL has the expected parameters");
            assert!(!script.contains('$'), "no placeholder left:\n{script}");
            // Every line of the store's statements without a parameter is there verbatim.
            for sql in [CLAIM_BATCH_SQL, FINALIZE_BATCH_SQL] {
                for line in sql
                    .lines()
                    .filter(|l| !l.contains('$') && !l.trim().is_empty())
                {
                    assert!(script.contains(line), "`{line}` missing:\n{script}");
                }
            }
            // Two statements, each ending the command for pgbench.
            assert_eq!(script.matches(";\n").count(), 2, "{script}");
            assert_eq!(
                script.matches(&format!("ARRAY[{k}]")).count(),
                9,
                "five constant arrays in the claim, four in the finalize:\n{script}"
            );
            assert_eq!(
                script
                    .matches(&format!("generate_series(0, {})", k - 1))
                    .count(),
                4,
                "scopes and claim ids, in both statements:\n{script}"
            );
        }
        assert!(script(0).is_err());
    }
}
