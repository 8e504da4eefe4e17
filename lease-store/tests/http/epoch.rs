//! `GET /v1/epoch` over HTTP (F9): the filter's token reads it, and an
//! operator's erase moves it.

#![allow(clippy::unwrap_used)]

use crate::support::*;
use reqwest::Method;

#[tokio::test]
async fn the_filter_reads_the_epoch_and_an_erase_moves_it() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let admin = &server.admin;
    api.get("/v1/epoch", None)
        .await
        .assert_problem(401, "unauthorized");
    api.get("/v1/epoch", Some(ADMIN))
        .await
        .assert_problem(403, "forbidden");
    let before = api.get("/v1/epoch", Some(TOKEN)).await;
    assert_eq!(before.status, 200, "{}", before.text);
    let epoch = before.json["epoch"].as_u64().unwrap();

    let (scope, _, claim_id) = api.win("epoch").await;
    api.finalize(&scope, &claim_id).await;
    let erased = admin
        .send(
            Method::DELETE,
            &format!("/v1/records/{scope}?reason=epoch-test"),
            Some(ADMIN),
            |r| r.header("keyflight-ack-replay-risk", "true"),
        )
        .await;
    assert_eq!(erased.status, 200, "{}", erased.text);
    let after = api.get("/v1/epoch", Some(TOKEN)).await;
    assert_eq!(
        after.json["epoch"].as_u64(),
        Some(epoch + 1),
        "{}",
        after.text
    );
}
