//! L8: the OpenAPI document served at `/openapi.json`.
//!
//! Paths come from the `#[utoipa::path]` annotations on the handlers, schemas
//! from the protocol crate's wire types (its `openapi` feature), so the
//! document cannot drift from the code that serves it. The errors every `/v1`
//! call can answer (400, 401, 403, 413, 503) are added here once, centrally,
//! instead of being repeated on each handler; handlers list only the answers
//! that are specific to them (200, 404, 409).
//!
//! The document is exact about what the store accepts, so a client generated
//! from it (or schemathesis, which `make test` runs against it) never sends a
//! schema-valid request the store refuses: the wire types carry their ranges,
//! and `exact.rs` adds what derive attributes cannot say — every
//! `{scope}` is a digest, recorded headers follow the recorded-header rule
//! (built from `keyflight_protocol::headers`' own patterns), the erase
//! acknowledgment must be `true`, and a batch carries 1 to `MAX_BATCH_CALLS`
//! calls. (A batched claim that asks to wait is still schema-valid: the batch
//! answers 200 and that call 400.)

mod exact;

use std::sync::LazyLock;

use keyflight_protocol::problem::{Problem, ProblemCode};
use keyflight_protocol::wire::reconcile::ReconciledRequest;
use keyflight_protocol::wire::{
    ClaimAnswer, ClaimRequest, ClaimResponse, EpochResponse, FinalizeRequest, PreviousIdentity,
    RecordDetail, RecordList, RecordState, RecordSummary, ReleaseAs, ReleaseRequest, RenewRequest,
    RenewResponse, ResolveAs, ResolveRequest, StoredResponse, WonHow,
};
use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::api;

/// The API description (see the module docs).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "keyflight lease-store",
        description = "Claims, renews and finalizes idempotency leases (keyflight API v1). Errors are RFC 9457 problem details with a stable `code`. The records API (`/v1/records…`) is served on the admin listener (`--admin-listen`), not on the data plane's."
    ),
    paths(
        api::claims::claim,
        api::lease::renew,
        api::lease::finalize,
        api::lease::release,
        api::reconciled::reconciled,
        api::batch::claims,
        api::batch::finalizes,
        api::epoch::epoch,
        api::records::list,
        api::records::show,
        api::records::resolve,
        api::records::erase,
        api::health::healthz,
        api::health::readyz,
        api::health::metrics,
        api::health::openapi,
    ),
    components(schemas(
        ClaimRequest, PreviousIdentity, ClaimResponse, WonHow, StoredResponse, RenewRequest, RenewResponse, EpochResponse,
        FinalizeRequest, ReleaseRequest, ReleaseAs, RecordState, RecordSummary, RecordList,
        RecordDetail, ResolveRequest, ResolveAs, ReconciledRequest, Problem,
        ProblemCode,
    )),
    modifiers(&V1Conventions),
)]
pub struct ApiDoc;

// The batch answers as the document describes them. The store writes the wire type
// (`OwnedBatchAnswer`), whose bodies are each single route's JSON carried as is; these name
// what that JSON is, so a client generated from the document reads the bodies too.

/// What `POST /v1/batch/claims` answers: one answer per claim.
#[derive(ToSchema)]
pub struct ClaimBatchAnswer {
    /// One per claim, in the calls' order.
    pub answers: Vec<BatchedClaimAnswer>,
}

/// What `POST /v1/claims/{scope}` answers for one claim of a batch.
#[derive(ToSchema)]
pub struct BatchedClaimAnswer {
    /// The single route's HTTP status.
    pub status: u16,
    /// The single route's body: the claim's answer for a 200, a problem otherwise.
    pub body: ClaimBatchBody,
}

/// A batched claim's body.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum ClaimBatchBody {
    /// Status 200.
    Answer(ClaimAnswer),
    /// Any other status.
    Problem(Problem),
}

/// A `completed` claim answer as a frame, for a caller whose `Accept` names it
/// (`docs/records.md#the-recorded-body-as-bytes`): the JSON answer with `body_b64` empty,
/// a newline, then the recorded body's bytes.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct FramedClaimAnswer(pub String);

/// What `POST /v1/batch/finalizes` answers: one answer per finalize.
#[derive(ToSchema)]
pub struct FinalizeBatchAnswer {
    /// One per finalize, in the calls' order.
    pub answers: Vec<BatchedFinalizeAnswer>,
}

/// What `POST /v1/claims/{scope}/finalize` answers for one finalize of a batch.
#[derive(ToSchema)]
pub struct BatchedFinalizeAnswer {
    /// The single route's HTTP status.
    pub status: u16,
    /// `null` for a 200 (the single route's has no body), a problem otherwise.
    #[schema(required = true)]
    pub body: Option<Problem>,
}

/// Adds the bearer scheme and the errors common to every `/v1` call.
struct V1Conventions;

/// Answers any `/v1` call can give, whatever the route.
const COMMON_V1_ERRORS: [(&str, &str); 5] = [
    (
        "400",
        "`bad_request`: malformed JSON, unknown field, bad digest or out-of-range value",
    ),
    ("401", "`unauthorized`: missing or wrong bearer token"),
    (
        "403",
        "`forbidden`: a valid token for the other endpoint family",
    ),
    (
        "413",
        "`payload_too_large`: the body exceeds the store's limit",
    ),
    (
        "503",
        "`journal_unavailable`: the database cannot be reached (with `Retry-After`)",
    ),
];

impl Modify for V1Conventions {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = doc.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
        for (path, item) in doc.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            let operations = [item.get.as_mut(), item.post.as_mut(), item.delete.as_mut()];
            for operation in operations.into_iter().flatten() {
                for (status, description) in COMMON_V1_ERRORS {
                    operation
                        .responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| problem_response(description).into());
                }
            }
        }
    }
}

fn problem_response(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            keyflight_protocol::problem::PROBLEM_CONTENT_TYPE,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build()
}

/// The document as served, built once.
pub fn document() -> Value {
    static DOC: LazyLock<Value> = LazyLock::new(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
        exact::exact_inputs(&mut doc);
        doc
    });
    DOC.clone()
}

#[cfg(test)]
mod tests {
    use keyflight_protocol::headers;
    use keyflight_protocol::wire::batch::MAX_BATCH_CALLS;
    use serde_json::{Value, json};

    use super::*;

    fn doc() -> Value {
        document()
    }

    #[test]
    fn every_route_is_documented() {
        let doc = doc();
        let paths = doc["paths"].as_object().expect("paths");
        for (path, method) in [
            ("/v1/claims/{scope}", "post"),
            ("/v1/claims/{scope}/renew", "post"),
            ("/v1/claims/{scope}/finalize", "post"),
            ("/v1/claims/{scope}/release", "post"),
            ("/v1/claims/{scope}/reconciled", "post"),
            ("/v1/batch/claims", "post"),
            ("/v1/batch/finalizes", "post"),
            ("/v1/epoch", "get"),
            ("/v1/records", "get"),
            ("/v1/records/{scope}", "get"),
            ("/v1/records/{scope}", "delete"),
            ("/v1/records/{scope}/resolve", "post"),
            ("/healthz", "get"),
            ("/readyz", "get"),
            ("/metrics", "get"),
            ("/openapi.json", "get"),
        ] {
            assert!(
                paths.get(path).and_then(|p| p.get(method)).is_some(),
                "{method} {path} missing from the OpenAPI document"
            );
        }
    }

    #[test]
    fn v1_calls_document_the_common_problem_answers() {
        let doc = doc();
        let responses = &doc["paths"]["/v1/claims/{scope}"]["post"]["responses"];
        for status in ["200", "400", "401", "403", "413", "503"] {
            assert!(responses.get(status).is_some(), "claim lacks {status}");
        }
        assert!(
            doc["paths"]["/healthz"]["get"]["responses"]
                .get("401")
                .is_none()
        );
    }

    #[test]
    fn the_claim_response_lists_every_outcome() {
        let text = serde_json::to_string(&doc()["components"]["schemas"]["ClaimResponse"])
            .expect("serializable");
        for outcome in [
            "won",
            "completed",
            "conflict",
            "in_progress",
            "cooldown",
            "not_replayable",
            "unknown",
        ] {
            assert!(
                text.contains(&format!("\"{outcome}\"")),
                "outcome {outcome} missing from ClaimResponse schema: {text}"
            );
        }
    }

    /// The claim's answer is `ClaimAnswer`: the outcome plus the fields beside it that the
    /// filter reads (a client generated from the document would otherwise drop them).
    #[test]
    fn the_claim_answer_documents_the_fields_beside_the_outcome() {
        let doc = doc();
        let answer = &doc["paths"]["/v1/claims/{scope}"]["post"]["responses"]["200"]["content"]["application/json"]
            ["schema"];
        assert_eq!(
            answer["$ref"], "#/components/schemas/ClaimAnswer",
            "{answer}"
        );
        let text = serde_json::to_string(&doc["components"]["schemas"]["ClaimAnswer"])
            .expect("serializable");
        for field in ["ClaimResponse", "record_expires_in_ms", "claimed_after_ms"] {
            assert!(
                text.contains(field),
                "{field} missing from ClaimAnswer: {text}"
            );
        }
    }

    /// The claim's 200 names both of its media types: JSON, and the frame an edge asks for.
    #[test]
    fn the_claim_answer_documents_its_frame() {
        let doc = doc();
        let content = &doc["paths"]["/v1/claims/{scope}"]["post"]["responses"]["200"]["content"];
        let frame = &content[keyflight_protocol::wire::framed::MEDIA_TYPE]["schema"];
        let frame = match frame.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                &doc["components"]["schemas"][reference.trim_start_matches("#/components/schemas/")]
            }
            None => frame,
        };
        assert_eq!(
            (&frame["type"], &frame["format"]),
            (&json!("string"), &json!("binary")),
            "{content}"
        );
        assert!(content.get("application/json").is_some(), "{content}");
    }

    /// A batch takes 1 to 64 calls, and its answer's bodies are named: a claim's answer or a
    /// problem, a finalize's `null` or a problem.
    #[test]
    fn batches_document_their_size_and_each_answers_body() {
        let doc = doc();
        let schemas = &doc["components"]["schemas"];
        for (path, batch, answer) in [
            ("/v1/batch/claims", "ClaimBatch", "ClaimBatchAnswer"),
            (
                "/v1/batch/finalizes",
                "FinalizeBatch",
                "FinalizeBatchAnswer",
            ),
        ] {
            let post = &doc["paths"][path]["post"];
            assert_eq!(
                post["requestBody"]["content"]["application/json"]["schema"]["$ref"],
                format!("#/components/schemas/{batch}")
            );
            assert_eq!(
                post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
                format!("#/components/schemas/{answer}")
            );
            let calls = &schemas[batch]["properties"]["calls"];
            assert_eq!(calls["minItems"], 1, "{batch}");
            assert_eq!(calls["maxItems"], MAX_BATCH_CALLS, "{batch}");
        }
        let claim_body = serde_json::to_string(&schemas["ClaimBatchBody"]).expect("serializable");
        for schema in ["ClaimAnswer", "Problem"] {
            assert!(claim_body.contains(schema), "{claim_body}");
        }
        let finalize_answer =
            serde_json::to_string(&schemas["BatchedFinalizeAnswer"]).expect("serializable");
        for part in ["\"null\"", "Problem"] {
            assert!(finalize_answer.contains(part), "{finalize_answer}");
        }
    }

    #[test]
    fn published_ranges_are_the_ones_the_store_enforces() {
        use keyflight_protocol::wire::{
            MAX_COOLDOWN_MS, MAX_LEASE_MS, MAX_RETENTION_S, MAX_WAIT_MS, RECORDED_STATUS,
        };
        let doc = doc();
        let schemas = &doc["components"]["schemas"];
        let range = |schema: &str, field: &str| {
            let property = &schemas[schema]["properties"][field];
            (property["minimum"].as_u64(), property["maximum"].as_u64())
        };
        assert_eq!(
            range("ClaimRequest", "lease_ms"),
            (Some(1), Some(MAX_LEASE_MS))
        );
        assert_eq!(range("ClaimRequest", "wait_ms").1, Some(MAX_WAIT_MS));
        assert_eq!(
            range("ClaimRequest", "retention_s"),
            (Some(1), Some(MAX_RETENTION_S))
        );
        assert_eq!(
            range("RenewRequest", "lease_ms"),
            (Some(1), Some(MAX_LEASE_MS))
        );
        assert_eq!(
            range("ReleaseRequest", "cooldown_ms").1,
            Some(MAX_COOLDOWN_MS)
        );
        assert_eq!(
            range("StoredResponse", "status"),
            (
                Some(u64::from(*RECORDED_STATUS.start())),
                Some(u64::from(*RECORDED_STATUS.end()))
            )
        );
    }

    #[test]
    fn scopes_and_recorded_headers_are_described_exactly() {
        let doc = doc();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for operation in item.as_object().expect("operations").values() {
                for parameter in operation["parameters"].as_array().into_iter().flatten() {
                    if parameter["name"] == "scope" {
                        assert_eq!(
                            parameter["schema"]["$ref"], "#/components/schemas/Digest",
                            "{path}"
                        );
                    }
                }
            }
        }
        let header =
            &doc["components"]["schemas"]["StoredResponse"]["properties"]["headers"]["items"];
        assert_eq!(header["prefixItems"][0]["pattern"], headers::TOKEN_PATTERN);
        assert_eq!(
            header["prefixItems"][0]["not"]["pattern"],
            headers::never_stored_pattern()
        );
        assert_eq!(
            header["prefixItems"][1]["pattern"],
            headers::FIELD_VALUE_PATTERN
        );
        assert!(
            doc["paths"]["/v1/claims/{scope}"]["post"]["responses"]["200"]["links"]["Finalize"]
                .is_object()
        );
    }
}
