//! K2, K3 with RFC 8693 tokens: `sub` is the user, `act.sub` the party acting for them.
//! Under `identity.delegation: subject_and_actor` (the default) the principal is the pair, so
//! two users one service acts for, with one key and one body, run once each, and so does one
//! user through two services; each replays only its own answer. Under `delegation: actor` the
//! same requests are one principal, the service's: the second user gets the first one's answer.
//! (`docs/identity.md#the-delegated-principal`.)

use keyflight_e2e::jwt::{ISSUER, Issuer};
use keyflight_e2e::{Reply, Stack, StackOptions};
use keyflight_testkit::envoy_variants::{EnvoyEdit, JWT_PAYLOAD_METADATA_KEY};
use serde_json::{Value, json};

/// The backend-for-frontend that exchanges users' tokens.
const BFF: &str = "svc-checkout-bff";
/// Another party acting for users.
const SUPPORT: &str = "svc-support-desk";

/// A stack whose plugin reads `sub` and `act.sub`, with `delegation` when given.
async fn start(issuer: &Issuer, delegation: Option<&str>) -> Stack {
    let claim = |claim: &str| json!({"jwt_claim": {"metadata_key": JWT_PAYLOAD_METADATA_KEY, "claim": claim}});
    let mut identity = json!({"actor": [claim("act.sub")], "principal": [claim("sub")]});
    if let Some(delegation) = delegation {
        identity["delegation"] = delegation.into();
    }
    Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::JwtAuthn {
                issuer: ISSUER.into(),
                jwks: issuer.jwks(),
            })
            .plugin(move |plugin| plugin["identity"] = identity),
    )
    .await
}

/// The same keyed payment for `user`, through `actor`'s exchanged token.
async fn pay(stack: &Stack, issuer: &Issuer, user: &str, actor: &str) -> Reply {
    let claims: Value = json!({"sub": user, "act": {"sub": actor}});
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
async fn two_users_one_service_acts_for_run_once_each() {
    let issuer = Issuer::default();
    let stack = start(&issuer, Some("subject_and_actor")).await;

    let ada = pay(&stack, &issuer, "user-ada", BFF).await;
    let bob = pay(&stack, &issuer, "user-bob", BFF).await;
    assert_eq!((ada.status, bob.status), (201, 201), "{ada}\n{bob}");
    assert_eq!(bob.header("idempotent-replayed"), None, "bob's ran: {bob}");
    assert_eq!(stack.upstream_executions().await, 2);

    // The same user through another party is another principal too.
    let ada_by_support = pay(&stack, &issuer, "user-ada", SUPPORT).await;
    assert_eq!(ada_by_support.status, 201, "{ada_by_support}");
    assert_eq!(
        ada_by_support.header("idempotent-replayed"),
        None,
        "{ada_by_support}"
    );
    assert_eq!(stack.upstream_executions().await, 3);

    // Each retry replays its own answer, and runs nothing.
    for (user, actor, first) in [
        ("user-ada", BFF, &ada),
        ("user-bob", BFF, &bob),
        ("user-ada", SUPPORT, &ada_by_support),
    ] {
        let again = pay(&stack, &issuer, user, actor).await;
        again.assert_replayed();
        assert_eq!(again.body, first.body, "{user} through {actor}");
    }
    assert_eq!(stack.upstream_executions().await, 3);
}

#[tokio::test]
async fn under_the_actor_alone_they_collide() {
    let issuer = Issuer::default();
    let stack = start(&issuer, Some("actor")).await;

    let ada = pay(&stack, &issuer, "user-ada", BFF).await;
    let bob = pay(&stack, &issuer, "user-bob", BFF).await;
    assert_eq!(ada.status, 201, "{ada}");
    // What `delegation: subject_and_actor` prevents: bob is given ada's payment.
    bob.assert_replayed();
    assert_eq!(bob.body, ada.body);
    assert_eq!(stack.upstream_executions().await, 1);
}
