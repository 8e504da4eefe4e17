//! K2 with a verified identity: Envoy's `jwt_authn` checks the token against a local JWKS
//! and puts its claims in metadata; the plugin takes the actor (on-behalf-of) from the
//! `act.sub` claim and falls back to the subject. Two actors using one service token and one
//! key are two operations; a role change of the same actor keeps replaying (roles are never
//! part of the key); no token at all is 401 `principal_required`.
//!
//! The Envoy config is the shipped demo with `jwt_authn` inserted before the keyflight filter
//! ([`EnvoyEdit::JwtAuthn`] shows the exact YAML a deployment adds).

use keyflight_e2e::jwt::{ISSUER, Issuer};
use keyflight_e2e::{Reply, Stack, StackOptions};
use keyflight_testkit::envoy_variants::{EnvoyEdit, JWT_PAYLOAD_METADATA_KEY};
use serde_json::{Value, json};

/// The service whose token carries the calls.
const SERVICE: &str = "svc-checkout";

async fn start(issuer: &Issuer) -> Stack {
    let claim = |claim: &str| json!({"jwt_claim": {"metadata_key": JWT_PAYLOAD_METADATA_KEY, "claim": claim}});
    Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::JwtAuthn {
                issuer: ISSUER.into(),
                jwks: issuer.jwks(),
            })
            .plugin(|plugin| {
                plugin["identity"] = json!({
                    "actor": [claim("act.sub")],
                    "principal": [claim("sub")],
                });
            }),
    )
    .await
}

/// Posts as `claims` (a token), without the demo's `x-user` header.
async fn post_as(stack: &Stack, issuer: &Issuer, claims: &Value, body: &Value) -> Reply {
    stack
        .post("/payments")
        .anonymous()
        .header("authorization", &format!("Bearer {}", issuer.token(claims)))
        .key("order-42")
        .json(body)
        .send()
        .await
}

#[tokio::test]
async fn two_actors_behind_one_service_token_run_twice_and_a_role_change_replays() {
    let issuer = Issuer::default();
    let stack = start(&issuer).await;
    let body = json!({"amount": 42});
    let on_behalf_of = |actor: &str, roles: &[&str]| json!({"sub": SERVICE, "act": {"sub": actor}, "roles": roles});

    let ada = post_as(
        &stack,
        &issuer,
        &on_behalf_of("user-ada", &["buyer"]),
        &body,
    )
    .await;
    let bob = post_as(
        &stack,
        &issuer,
        &on_behalf_of("user-bob", &["buyer"]),
        &body,
    )
    .await;
    assert_eq!((ada.status, bob.status), (201, 201), "{ada}\n{bob}");
    assert_eq!(
        bob.header("idempotent-replayed"),
        None,
        "bob's request ran: {bob}"
    );
    assert_eq!(stack.upstream_executions().await, 2);

    let promoted = post_as(
        &stack,
        &issuer,
        &on_behalf_of("user-ada", &["buyer", "admin"]),
        &body,
    )
    .await;
    promoted.assert_replayed();
    assert_eq!(
        promoted.body, ada.body,
        "ada gets ada's payment whatever her roles"
    );

    // The service acting for itself (no `act`) is a third principal.
    let service = post_as(&stack, &issuer, &json!({"sub": SERVICE}), &body).await;
    assert_eq!(service.header("idempotent-replayed"), None, "{service}");
    assert_eq!(stack.upstream_executions().await, 3);
}

#[tokio::test]
async fn no_token_is_401_principal_required_and_a_forged_one_never_gets_through() {
    let issuer = Issuer::default();
    let stack = start(&issuer).await;
    let body = json!({"amount": 1});

    let anonymous = stack
        .post("/payments")
        .anonymous()
        .key("k")
        .json(&body)
        .send()
        .await;
    anonymous.assert_problem(401, "principal_required");

    // The demo's x-user header is no identity here.
    let spoofed = stack
        .post("/payments")
        .user("alice")
        .key("k")
        .json(&body)
        .send()
        .await;
    spoofed.assert_problem(401, "principal_required");

    let forger = Issuer::with_secret(b"a key the proxy never trusted");
    let forged = post_as(&stack, &forger, &json!({"sub": SERVICE}), &body).await;
    assert_eq!(
        forged.status, 401,
        "jwt_authn refuses a bad signature: {forged}"
    );
    assert_eq!(stack.upstream_executions().await, 0);
}
