//! A request the database refuses answers a generic problem: the Postgres text (which names
//! tables, columns, constraints and values) goes to the store's log, never to the caller.

use keyflight_testkit::pg::PgCluster;
use serde_json::json;

use crate::support::{migrate, start_server_on};

#[tokio::test]
async fn postgres_error_text_goes_to_the_log_not_to_the_caller() {
    // A cluster of its own: the constraint below must not touch other tests' records.
    let cluster = PgCluster::start();
    migrate(&cluster.url());
    cluster.psql(
        "ALTER TABLE keyflight_records ADD CONSTRAINT no_status_287_for_this_test \
         CHECK (response_status IS DISTINCT FROM 287) NOT VALID",
    );
    let server = start_server_on(&cluster.url(), &["--batch-max", "1"]).await;
    let (scope, _, claim_id) = server.api.win("db-error").await;
    let answer = server
        .api
        .try_finalize(
            &scope,
            &claim_id,
            &json!({ "status": 287, "headers": [], "body_b64": "" }),
        )
        .await;
    let detail = answer.assert_problem(400, "bad_request");
    for leak in ["no_status_287", "keyflight_records", "constraint", "23514"] {
        assert!(
            !detail.contains(leak),
            "the detail leaks `{leak}`: {detail}"
        );
    }
    assert!(
        server.child.log().contains("no_status_287_for_this_test"),
        "the log keeps the database's text"
    );
}
