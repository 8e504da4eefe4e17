//! Each workload's storage quota (`docs/records.md#storage-quota`): past it, a claim that
//! would add a record is refused with 507 `storage_quota`, while the workload's retries are
//! still answered from its records and another workload is not held back.

use serde_json::json;

use crate::mesh_identity::{claim_as, post_as, through_the_sidecar};
use crate::support::*;

/// Workloads of their own: the quota counts every record of a workload in the database the
/// tests share.
const GREEDY: &str = "spiffe://cluster.local/ns/quota/sa/greedy";
const MODEST: &str = "spiffe://cluster.local/ns/quota/sa/modest";

#[tokio::test]
async fn a_workload_at_its_storage_quota_adds_no_record_and_still_gets_its_replays() {
    let port = keyflight_testkit::process::free_port();
    let args = [
        "--trust-xfcc",
        "--workload",
        GREEDY,
        "--workload",
        MODEST,
        "--storage-quota-records",
        "2",
        "--storage-quota-interval",
        "100ms",
    ];
    let mut command = serve_command(&cluster().url(), port, &args);
    command.env_remove("KEYFLIGHT_TOKEN");
    let server = start_command(command, port).await;
    let api = &through_the_sidecar(&server);

    let (replayed, fingerprint) = (fresh_digest("quota-replayed"), fresh_digest("fp"));
    let won = claim_as(api, GREEDY, &replayed, &fingerprint, 0).await;
    assert_eq!(won.outcome(), "won", "{}", won.text);
    let finalized = post_as(
        api,
        GREEDY,
        &format!("/v1/claims/{replayed}/finalize"),
        &json!({ "claim_id": won.json["claim_id"], "response": sample_response(), "replayable": true }),
    )
    .await;
    assert_eq!(finalized.status, 200, "{}", finalized.text);
    let second = claim_as(api, GREEDY, &fresh_digest("quota-second"), &fingerprint, 0).await;
    assert_eq!(second.outcome(), "won", "{}", second.text);
    // The gate: the replica's measure has seen both records.
    let measured = format!("keyflight_store_workload_records{{workload=\"{GREEDY}\"}}");
    api.wait_counter(&measured, 2).await;

    let refused = claim_as(api, GREEDY, &fresh_digest("quota-third"), &fingerprint, 0).await;
    let detail = refused.assert_problem(507, "storage_quota");
    assert!(detail.contains("--storage-quota-records"), "{detail}");
    let batched = post_as(
        api,
        GREEDY,
        "/v1/batch/claims",
        &json!({ "calls": [{ "scope": fresh_digest("quota-batched"),
                             "request": { "fingerprint": fingerprint, "lease_ms": 60_000 } }] }),
    )
    .await;
    assert_eq!(batched.status, 200, "{}", batched.text);
    assert_eq!(
        batched.json["answers"][0]["status"], 507,
        "{}",
        batched.text
    );

    let replay = claim_as(api, GREEDY, &replayed, &fingerprint, 0).await;
    assert_eq!(
        replay.outcome(),
        "completed",
        "a retry is answered: {}",
        replay.text
    );
    let other = claim_as(api, MODEST, &fresh_digest("quota-modest"), &fingerprint, 0).await;
    assert_eq!(other.outcome(), "won", "another workload: {}", other.text);
    let counted = format!("keyflight_store_storage_quota_refused_total{{workload=\"{GREEDY}\"}}");
    assert_eq!(api.counter(&counted).await, 2);
}
