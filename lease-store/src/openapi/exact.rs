//! What derive attributes cannot say, added to the derived document: the exact inputs the
//! handlers accept, and the links that chain a won claim to its winner's next calls (see
//! the module docs of [`super`]).

use keyflight_protocol::headers;
use keyflight_protocol::wire::ACK_REPLAY_RISK_HEADER;
use keyflight_protocol::wire::batch::MAX_BATCH_CALLS;
use serde_json::{Value, json};

/// OpenAPI links from a won claim to the calls its winner makes next, and
/// from a record to the operator's calls on it: they tell a client where
/// `claim_id` comes from, and let schemathesis chain real claims, finalizes
/// and resolves (its stateful phase) instead of only guessing claim ids.
fn add_links(doc: &mut Value) {
    let scope = json!({ "scope": "$request.path.scope" });
    let claim_id = "$response.body#/claim_id";
    doc["paths"]["/v1/claims/{scope}"]["post"]["responses"]["200"]["links"] = json!({
        "Renew": {
            "operationId": "renew",
            "parameters": scope,
            "requestBody": { "claim_id": claim_id, "lease_ms": 1000 },
        },
        "Finalize": {
            "operationId": "finalize",
            "parameters": scope,
            "requestBody": {
                "claim_id": claim_id,
                "replayable": true,
                "response": { "status": 201, "headers": [["content-type", "application/json"]], "body_b64": "e30=" },
            },
        },
        "ReleaseAsUnknown": {
            "operationId": "release",
            "parameters": scope,
            "requestBody": { "claim_id": claim_id, "as": "unknown" },
        },
        "Show": { "operationId": "show", "parameters": scope },
    });
    doc["paths"]["/v1/records/{scope}"]["get"]["responses"]["200"]["links"] = json!({
        "Resolve": { "operationId": "resolve", "parameters": scope },
        "Erase": {
            "operationId": "erase",
            "parameters": { "scope": "$request.path.scope", "header.keyflight-ack-replay-risk": "true" },
        },
    });
}

/// Narrows the derived schemas to exactly what the handlers accept (see the
/// module docs).
pub(super) fn exact_inputs(doc: &mut Value) {
    let header = json!({
        "type": "array",
        "description": "[name, value]: the name an RFC 9110 token that is never a credential, cookie or hop-by-hop header (compared case-insensitively), the value an RFC 9110 field-value",
        "prefixItems": [
            {
                "type": "string",
                "pattern": headers::TOKEN_PATTERN,
                "not": { "pattern": headers::never_stored_pattern() },
            },
            { "type": "string", "pattern": headers::FIELD_VALUE_PATTERN },
        ],
        "items": false,
        "minItems": 2,
        "maxItems": 2,
    });
    doc["components"]["schemas"]["StoredResponse"]["properties"]["headers"]["items"] = header;
    // Each outcome of a report takes only its own fields (`deny_unknown_fields`), which the
    // derive writes for structs but not for an internally tagged enum's variants.
    if let Some(outcomes) =
        doc["components"]["schemas"]["ReconciledRequest"]["oneOf"].as_array_mut()
    {
        for outcome in outcomes {
            outcome["additionalProperties"] = json!(false);
        }
    }
    for batch in ["ClaimBatch", "FinalizeBatch"] {
        let calls = &mut doc["components"]["schemas"][batch]["properties"]["calls"];
        calls["minItems"] = json!(1);
        calls["maxItems"] = json!(MAX_BATCH_CALLS);
    }
    add_links(doc);
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for operation in paths.values_mut().filter_map(Value::as_object_mut) {
        for parameters in operation
            .values_mut()
            .filter_map(|op| op.get_mut("parameters"))
            .filter_map(Value::as_array_mut)
        {
            for parameter in parameters.iter_mut() {
                match parameter["name"].as_str() {
                    Some("scope") => {
                        parameter["schema"] = json!({ "$ref": "#/components/schemas/Digest" });
                    }
                    Some(ACK_REPLAY_RISK_HEADER) => {
                        parameter["schema"] =
                            json!({ "type": "string", "pattern": "^[Tt][Rr][Uu][Ee]$" });
                    }
                    _ => {}
                }
            }
        }
    }
}
