//! Issue 48, item 1: one user's answer replayed to another. A claim also holds the request's
//! scope under `identity.previous`, and the store answers from either record, so the shipped
//! gateway example's actor-first previous recipe beside its `subject_and_actor` gave user B,
//! behind the same service with A's key and body, A's recorded answer. Such a previous recipe
//! now fails plugin start, and a configuration that reads both parties scopes by the pair
//! unless it says otherwise (`docs/identity.md#previous-recipes`).

use keyflight_e2e::jwt::{ISSUER, Issuer};
use keyflight_e2e::stack::{EnvoyStart, start_envoy_alone};
use keyflight_e2e::{Reply, Stack, StackOptions};
use keyflight_testkit::envoy_variants::{EnvoyEdit, JWT_PAYLOAD_METADATA_KEY};
use serde_json::{Value, json};

/// The backend-for-frontend that exchanges users' tokens.
const BFF: &str = "svc-checkout-bff";

fn claim(claim: &str) -> Value {
    json!({"jwt_claim": {"metadata_key": JWT_PAYLOAD_METADATA_KEY, "claim": claim}})
}

/// `act.sub` and `sub`, as the gateway example reads them, with no `delegation`.
fn sources() -> Value {
    json!({"actor": [claim("act.sub")], "principal": [claim("sub")]})
}

/// The same keyed payment for `user`, through the BFF's exchanged token.
async fn pay(stack: &Stack, issuer: &Issuer, user: &str) -> Reply {
    let claims = json!({"sub": user, "act": {"sub": BFF}});
    stack
        .post("/payments")
        .anonymous()
        .header(
            "authorization",
            &format!("Bearer {}", issuer.token(&claims)),
        )
        .key("order-42")
        .json(&json!({"amount": 42}))
        .send()
        .await
}

#[tokio::test]
async fn two_users_behind_one_service_with_one_key_and_body_run_once_each_by_default() {
    let issuer = Issuer::default();
    let stack = Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::JwtAuthn {
                issuer: ISSUER.into(),
                jwks: issuer.jwks(),
            })
            .plugin(|plugin| plugin["identity"] = sources()),
    )
    .await;

    let ada = pay(&stack, &issuer, "user-ada").await;
    let bob = pay(&stack, &issuer, "user-bob").await;
    assert_eq!((ada.status, bob.status), (201, 201), "{ada}\n{bob}");
    assert_eq!(bob.header("idempotent-replayed"), None, "bob's ran: {bob}");
    assert_ne!(bob.body, ada.body, "bob is never given ada's answer");
    assert_eq!(stack.upstream_executions().await, 2);
}

#[tokio::test]
async fn the_gateway_examples_old_actor_first_previous_recipe_fails_plugin_start() {
    let mut plugin = StackOptions::default().plugin;
    let mut identity = sources();
    identity["delegation"] = json!("subject_and_actor");
    identity["previous"] = sources();
    identity["previous"]["delegation"] = json!("actor");
    plugin["identity"] = identity;
    match start_envoy_alone(&plugin).await {
        EnvoyStart::Exited { status, log } => {
            assert!(!status.success(), "log:\n{log}");
            let line = log
                .lines()
                .find(|line| line.contains("keyflight: invalid plugin configuration"))
                .unwrap_or_else(|| panic!("no configuration error logged; log:\n{log}"));
            assert!(
                line.contains("identity.previous") && line.contains("broader"),
                "the refusal names the setting and why: {line}"
            );
        }
        EnvoyStart::Ready { log } => {
            panic!("Envoy started with an actor-first previous recipe; log:\n{log}")
        }
    }
}
