//! L8: the OpenAPI document served at `/openapi.json`.
//!
//! Paths come from the `#[utoipa::path]` annotations on the handlers, schemas
//! from the protocol crate's wire types (its `openapi` feature), so the
//! document cannot drift from the code that serves it. The errors every `/v1`
//! call can answer (400, 401, 403, 413, 503) are added here once, centrally,
//! instead of being repeated on each handler; handlers list only the answers
//! that are specific to them (200, 404, 409).

use std::sync::LazyLock;

use keyflight_protocol::problem::{Problem, ProblemCode};
use keyflight_protocol::wire::{
    ClaimRequest, ClaimResponse, EpochResponse, FinalizeRequest, RecordDetail, RecordList,
    RecordState, RecordSummary, ReleaseAs, ReleaseRequest, RenewRequest, RenewResponse, ResolveAs,
    ResolveRequest, StoredResponse, WonHow,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::api;

/// The API description (see the module docs).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "keyflight lease-store",
        description = "Claims, renews and finalizes idempotency leases (keyflight API v1). Errors are RFC 9457 problem details with a stable `code`."
    ),
    paths(
        api::claims::claim,
        api::lease::renew,
        api::lease::finalize,
        api::lease::release,
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
        ClaimRequest, ClaimResponse, WonHow, StoredResponse, RenewRequest, RenewResponse, EpochResponse,
        FinalizeRequest, ReleaseRequest, ReleaseAs, RecordState, RecordSummary, RecordList,
        RecordDetail, ResolveRequest, ResolveAs, Problem, ProblemCode,
    )),
    modifiers(&V1Conventions),
)]
pub struct ApiDoc;

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
pub fn document() -> utoipa::openapi::OpenApi {
    static DOC: LazyLock<utoipa::openapi::OpenApi> = LazyLock::new(ApiDoc::openapi);
    DOC.clone()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn doc() -> Value {
        serde_json::to_value(document()).expect("serializable")
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
}
