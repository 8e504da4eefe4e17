//! The lease-store API v1 wire format (`docs/records.md#the-api`), pinned field by field.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
use wasm_bindgen_test::wasm_bindgen_test as test;

use keyflight_protocol::problem::{PROBLEM_CONTENT_TYPE, Problem};
use keyflight_protocol::wire::*;
use keyflight_protocol::{Digest, ProblemCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use uuid::Uuid;

const CLAIM_ID: &str = "0190f3c4-6c1e-7a3b-8f00-0123456789ab";
const HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn claim_id() -> Uuid {
    Uuid::parse_str(CLAIM_ID).expect("valid uuid")
}

fn digest() -> Digest {
    Digest::from_hex(HEX).expect("valid digest")
}

/// `value` serializes to exactly `expected` and parses back to itself.
fn pins<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: T, expected: Value) {
    assert_eq!(serde_json::to_value(&value).expect("serializes"), expected);
    let back: T = serde_json::from_value(expected).expect("deserializes");
    assert_eq!(back, value);
}

fn response() -> StoredResponse {
    StoredResponse::new(
        201,
        vec![("content-type".into(), "application/json".into())],
        b"{\"id\":7}",
    )
}

fn response_json() -> Value {
    json!({"status": 201, "headers": [["content-type", "application/json"]], "body_b64": "eyJpZCI6N30="})
}

#[test]
fn claim_request() {
    pins(
        ClaimRequest {
            fingerprint: digest(),
            lease_ms: 30_000,
            wait_ms: Some(5_000),
            retention_s: Some(86_400),
            previous: None,
            at_most_once: false,
        },
        json!({"fingerprint": HEX, "lease_ms": 30000, "wait_ms": 5000, "retention_s": 86400}),
    );
    pins(
        ClaimRequest {
            fingerprint: digest(),
            lease_ms: 30_000,
            wait_ms: None,
            retention_s: None,
            previous: None,
            at_most_once: true,
        },
        json!({"fingerprint": HEX, "lease_ms": 30000, "at_most_once": true}),
    );
    pins(
        ClaimRequest {
            fingerprint: digest(),
            lease_ms: 1,
            wait_ms: None,
            retention_s: None,
            previous: None,
            at_most_once: false,
        },
        json!({"fingerprint": HEX, "lease_ms": 1}),
    );
}

/// A claim across a recipe change (`docs/records.md#claims-across-a-recipe-change`) and the
/// settles that follow it name the previous recipe's scope.
#[test]
fn dual_claim_and_its_settles() {
    const OTHER: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    let other = Digest::from_hex(OTHER).expect("valid digest");
    pins(
        ClaimRequest {
            fingerprint: digest(),
            lease_ms: 1,
            wait_ms: None,
            retention_s: None,
            previous: Some(PreviousIdentity {
                scope: other,
                fingerprint: digest(),
            }),
            at_most_once: false,
        },
        json!({"fingerprint": HEX, "lease_ms": 1,
               "previous": {"scope": OTHER, "fingerprint": HEX}}),
    );
    pins(
        RenewRequest {
            claim_id: claim_id(),
            lease_ms: 10,
            previous_scope: Some(other),
        },
        json!({"claim_id": CLAIM_ID, "lease_ms": 10, "previous_scope": OTHER}),
    );
    pins(
        FinalizeRequest {
            claim_id: claim_id(),
            response: response(),
            replayable: true,
            previous_scope: Some(other),
        },
        json!({"claim_id": CLAIM_ID, "response": response_json(), "replayable": true,
               "previous_scope": OTHER}),
    );
    pins(
        ReleaseRequest {
            claim_id: claim_id(),
            release_as: ReleaseAs::Forget,
            cooldown_ms: None,
            previous_scope: Some(other),
        },
        json!({"claim_id": CLAIM_ID, "as": "forget", "previous_scope": OTHER}),
    );
    // The previous identity is whole or refused: a store never claims half of it.
    for bad in [
        json!({"fingerprint": HEX, "lease_ms": 1, "previous": {"scope": OTHER}}),
        json!({"fingerprint": HEX, "lease_ms": 1,
               "previous": {"scope": OTHER, "fingerprint": HEX, "extra": 1}}),
    ] {
        assert!(
            serde_json::from_value::<ClaimRequest>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn claim_request_rejects_bad_input() {
    let upper = HEX.to_uppercase();
    for bad in [
        json!({"fingerprint": upper, "lease_ms": 1}),
        json!({"fingerprint": &HEX[1..], "lease_ms": 1}),
        json!({"fingerprint": format!("sha256:{HEX}"), "lease_ms": 1}),
        json!({"fingerprint": HEX}),
        json!({"fingerprint": HEX, "lease_ms": -1}),
        json!({"fingerprint": HEX, "lease_ms": 1, "extra": true}),
    ] {
        assert!(
            serde_json::from_value::<ClaimRequest>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn claim_outcomes() {
    pins(
        ClaimResponse::Won {
            claim_id: claim_id(),
            fence: 42,
            how: WonHow::Claimed,
            lease_ms: 30_000,
        },
        json!({"outcome": "won", "claim_id": CLAIM_ID, "fence": 42, "how": "claimed", "lease_ms": 30000}),
    );
    pins(
        ClaimResponse::Won {
            claim_id: claim_id(),
            fence: 43,
            how: WonHow::RecoveredAbandoned,
            lease_ms: 5,
        },
        json!({"outcome": "won", "claim_id": CLAIM_ID, "fence": 43, "how": "recovered_abandoned", "lease_ms": 5}),
    );
    pins(
        ClaimResponse::Completed {
            response: response(),
        },
        json!({"outcome": "completed", "response": response_json()}),
    );
    pins(ClaimResponse::Conflict, json!({"outcome": "conflict"}));
    pins(
        ClaimResponse::InProgress { retry_after_s: 1 },
        json!({"outcome": "in_progress", "retry_after_s": 1}),
    );
    pins(
        ClaimResponse::Cooldown { retry_after_s: 2 },
        json!({"outcome": "cooldown", "retry_after_s": 2}),
    );
    pins(
        ClaimResponse::NotReplayable,
        json!({"outcome": "not_replayable"}),
    );
    pins(
        ClaimResponse::Unknown { fence: None },
        json!({"outcome": "unknown"}),
    );
    pins(
        ClaimResponse::Unknown { fence: Some(7) },
        json!({"outcome": "unknown", "fence": 7}),
    );
    assert!(serde_json::from_value::<ClaimResponse>(json!({"outcome": "lost"})).is_err());
}

#[test]
fn won_how_spellings_match_serde() {
    for how in [
        WonHow::Claimed,
        WonHow::RecoveredTtl,
        WonHow::RecoveredAbandoned,
    ] {
        assert_eq!(
            serde_json::to_value(how).expect("serializes"),
            json!(how.as_str())
        );
    }
}

#[test]
fn stored_response_body_round_trips() {
    pins(response(), response_json());
    assert_eq!(response().body, b"{\"id\":7}");
    let mut broken = response_json();
    broken["body_b64"] = json!("not base64!");
    let err = serde_json::from_value::<StoredResponse>(broken).expect_err("not base64");
    assert!(err.to_string().contains("not valid base64"), "{err}");
    assert!(
        !err.to_string().contains("not base64!"),
        "the error never echoes the body: {err}"
    );
    // Non-canonical padding bits would not re-encode to the same text.
    let mut sloppy = response_json();
    sloppy["body_b64"] = json!("eyJpZCI6N31=");
    assert!(serde_json::from_value::<StoredResponse>(sloppy).is_err());
    let empty = StoredResponse::new(204, vec![], b"");
    assert_eq!(
        serde_json::to_value(&empty).expect("serializes")["body_b64"],
        ""
    );
    assert_eq!(empty.encoded_body_len(), 0);
    assert_eq!(response().encoded_body_len(), "eyJpZCI6N30=".len());
}

#[test]
fn renew_finalize_release() {
    pins(
        RenewRequest {
            claim_id: claim_id(),
            lease_ms: 10,
            previous_scope: None,
        },
        json!({"claim_id": CLAIM_ID, "lease_ms": 10}),
    );
    pins(RenewResponse { lease_ms: 10 }, json!({"lease_ms": 10}));
    pins(
        FinalizeRequest {
            claim_id: claim_id(),
            response: response(),
            replayable: true,
            previous_scope: None,
        },
        json!({"claim_id": CLAIM_ID, "response": response_json(), "replayable": true}),
    );
    pins(
        ReleaseRequest {
            claim_id: claim_id(),
            release_as: ReleaseAs::Cooldown,
            cooldown_ms: Some(2000),
            previous_scope: None,
        },
        json!({"claim_id": CLAIM_ID, "as": "cooldown", "cooldown_ms": 2000}),
    );
    pins(
        ReleaseRequest {
            claim_id: claim_id(),
            release_as: ReleaseAs::Unknown,
            cooldown_ms: None,
            previous_scope: None,
        },
        json!({"claim_id": CLAIM_ID, "as": "unknown"}),
    );
    pins(
        ReleaseRequest {
            claim_id: claim_id(),
            release_as: ReleaseAs::Forget,
            cooldown_ms: None,
            previous_scope: None,
        },
        json!({"claim_id": CLAIM_ID, "as": "forget"}),
    );
}

#[test]
fn records() {
    let summary = RecordSummary {
        scope: digest(),
        state: RecordState::Completed,
        fingerprint: digest(),
        fence: 7,
        created_at: "2025-01-01T00:00:00Z".into(),
        lease_expires_at: None,
        expires_at: "2025-01-02T00:00:00Z".into(),
        replayable: true,
        status: Some(201),
        workload: None,
    };
    let summary_json = json!({
        "scope": HEX, "state": "completed", "fingerprint": HEX, "fence": 7,
        "created_at": "2025-01-01T00:00:00Z", "lease_expires_at": null,
        "expires_at": "2025-01-02T00:00:00Z", "replayable": true, "status": 201,
    });
    pins(
        RecordList {
            records: vec![summary.clone()],
        },
        json!({"records": [summary_json.clone()]}),
    );
    let mut made_by_a_workload = summary_json.clone();
    made_by_a_workload["workload"] = json!("spiffe://td/ns/shop/sa/checkout");
    pins(
        RecordSummary {
            workload: Some("spiffe://td/ns/shop/sa/checkout".into()),
            ..summary.clone()
        },
        made_by_a_workload,
    );
    let mut detail_json = summary_json;
    detail_json["response"] = response_json();
    pins(
        RecordDetail {
            summary,
            response: Some(response()),
        },
        detail_json,
    );
}

#[test]
fn record_state_spellings_match_serde() {
    for state in [
        RecordState::Pending,
        RecordState::Completed,
        RecordState::Failed,
        RecordState::Unknown,
    ] {
        assert_eq!(
            serde_json::to_value(state).expect("serializes"),
            json!(state.as_str())
        );
        assert_eq!(RecordState::parse(state.as_str()), Some(state));
    }
    assert_eq!(RecordState::parse("Pending"), None);
}

#[test]
fn resolve() {
    pins(
        ResolveRequest {
            resolve_as: ResolveAs::Completed,
            response: Some(response()),
            reason: "ticket 42".into(),
        },
        json!({"as": "completed", "response": response_json(), "reason": "ticket 42"}),
    );
    pins(
        ResolveRequest {
            resolve_as: ResolveAs::Failed,
            response: None,
            reason: "refunded".into(),
        },
        json!({"as": "failed", "reason": "refunded"}),
    );
    assert_eq!(ACK_REPLAY_RISK_HEADER, "keyflight-ack-replay-risk");
}

#[test]
fn problem_details() {
    pins(
        Problem::new(ProblemCode::LeaseLost, 409, "stolen"),
        json!({
            "type": "https://keyflight.dev/problems/lease_lost", "title": "Lease lost",
            "status": 409, "detail": "stolen", "code": "lease_lost",
        }),
    );
    assert_eq!(PROBLEM_CONTENT_TYPE, "application/problem+json");
}

#[test]
fn problem_code_spellings_match_serde() {
    let all = [
        (
            ProblemCode::IdempotencyKeyRequired,
            "idempotency_key_required",
        ),
        (
            ProblemCode::IdempotencyKeyInvalid,
            "idempotency_key_invalid",
        ),
        (ProblemCode::PrincipalRequired, "principal_required"),
        (ProblemCode::PrincipalAmbiguous, "principal_ambiguous"),
        (ProblemCode::PayloadTooLarge, "payload_too_large"),
        (ProblemCode::JournalUnavailable, "journal_unavailable"),
        (ProblemCode::IdempotencyConflict, "idempotency_conflict"),
        (ProblemCode::RequestInProgress, "request_in_progress"),
        (ProblemCode::RetryableCooldown, "retryable_cooldown"),
        (
            ProblemCode::ResponseNotReplayable,
            "response_not_replayable",
        ),
        (ProblemCode::OperationUnknown, "operation_unknown"),
        (ProblemCode::LeaseLost, "lease_lost"),
        (ProblemCode::Unauthorized, "unauthorized"),
        (ProblemCode::Forbidden, "forbidden"),
        (ProblemCode::BadRequest, "bad_request"),
        (ProblemCode::NotFound, "not_found"),
        (
            ProblemCode::ReplayRiskNotAcknowledged,
            "replay_risk_not_acknowledged",
        ),
        (ProblemCode::NotUnknown, "not_unknown"),
        (ProblemCode::MethodNotAllowed, "method_not_allowed"),
        (ProblemCode::StorageQuota, "storage_quota"),
    ];
    for (code, spelling) in all {
        assert_eq!(code.as_str(), spelling);
        assert_eq!(
            serde_json::to_value(code).expect("serializes"),
            json!(spelling)
        );
        assert!(!code.title().is_empty());
    }
}

/// A filter of the previous release reads `unknown` as a unit variant: the fence a store of
/// this release adds must not make that answer unreadable to it (`docs/reconcile.md#limits`).
#[test]
fn an_unknown_answer_with_its_fence_reads_as_before() {
    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(tag = "outcome", rename_all = "snake_case")]
    enum PreviousRelease {
        Conflict,
        Unknown,
    }
    let answer = serde_json::to_value(ClaimResponse::Unknown { fence: Some(7) }).unwrap();
    assert_eq!(
        serde_json::from_value::<PreviousRelease>(answer).unwrap(),
        PreviousRelease::Unknown
    );
}
