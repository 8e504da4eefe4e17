//! V8: a large recorded body is compressed with lz4 (where the server has it, as this
//! machine's does) and replays byte for byte.

use crate::support::*;
use keyflight_protocol::wire::{ClaimResponse, FinalizeRequest, StoredResponse};

#[tokio::test]
async fn a_large_body_is_stored_with_lz4_and_replays_byte_for_byte() {
    let store = store().await;
    let scope = fresh_scope();
    let request = claim_req(fingerprint("large body"), 10_000);
    let (claim_id, _, _) = must_win(&store, &scope, &request).await;
    // Compressible and far past the TOAST threshold (about 2 KB), as a large JSON answer is.
    let body: Vec<u8> = (0..20_000)
        .flat_map(|i| format!(r#"{{"line":{i},"note":"item {i}"}},"#).into_bytes())
        .collect();
    let response = StoredResponse::new(201, Vec::new(), &body);
    store
        .finalize(
            &scope,
            FinalizeRequest {
                claim_id,
                response: response.clone(),
                replayable: true,
                previous_scope: None,
            },
        )
        .await
        .unwrap();

    let db = raw_client(&cluster().url()).await;
    let row = db
        .query_one(
            "SELECT pg_column_compression(response_body) FROM keyflight_records WHERE scope = $1",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0).as_deref(), Some("lz4"));
    assert_eq!(
        store.claim(&scope, &request).await.unwrap().response,
        ClaimResponse::Completed { response }
    );
}
