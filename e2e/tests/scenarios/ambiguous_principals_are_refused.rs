//! K2: a principal source must name exactly one principal. A repeated principal header
//! (a client's `x-user` next to the one an authn filter added) is 400
//! `principal_ambiguous`, never its first value; so is a JWT claim that turns out to be a
//! number, a boolean or an object instead of a string (a number's bytes can look like
//! text: 2261634.5098039214 reads back from Envoy as "AAAAAAAA"). Nothing reaches the
//! upstream. A claim the configuration names that is registered as an object (RFC 8693
//! `act`) is refused when the plugin starts.

use keyflight_e2e::jwt::{ISSUER, Issuer};
use keyflight_e2e::stack::{EnvoyStart, start_envoy_alone};
use keyflight_e2e::{Reply, Stack, StackOptions};
use keyflight_testkit::envoy_variants::{EnvoyEdit, JWT_PAYLOAD_METADATA_KEY};
use serde_json::{Value, json};

/// A keyed payment carrying a token with `claims`, without the demo's `x-user` header.
async fn post_as(stack: &Stack, issuer: &Issuer, claims: Value) -> Reply {
    stack
        .post("/payments")
        .anonymous()
        .header(
            "authorization",
            &format!("Bearer {}", issuer.token(&claims)),
        )
        .key("k")
        .json(&json!({"amount": 1}))
        .send()
        .await
}

fn claim(claim: &str) -> Value {
    json!({"jwt_claim": {"metadata_key": JWT_PAYLOAD_METADATA_KEY, "claim": claim}})
}

#[tokio::test]
async fn a_repeated_principal_header_is_refused_never_its_first_value() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 1});

    let twice = stack
        .post("/payments")
        .header("x-user", "bob")
        .key("k")
        .json(&body)
        .send()
        .await;
    let problem = twice.assert_problem(400, "principal_ambiguous");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("x-user"),
        "{twice}"
    );
    assert_eq!(stack.upstream_executions().await, 0);

    // Without a key the request is not guarded, and the filter has nothing to decide.
    let unkeyed = stack
        .post("/payments")
        .header("x-user", "bob")
        .json(&body)
        .send()
        .await;
    assert_eq!(unkeyed.status, 201, "{unkeyed}");
}

#[tokio::test]
async fn a_jwt_claim_that_is_not_a_string_is_refused() {
    let issuer = Issuer::default();
    let stack = Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::JwtAuthn {
                issuer: ISSUER.into(),
                jwks: issuer.jwks(),
            })
            .plugin(|plugin| {
                plugin["identity"] =
                    json!({"actor": [claim("act.sub")], "principal": [claim("sub")]});
            }),
    )
    .await;

    for actor in [
        json!(2_261_634.509_803_921_4_f64),
        json!(true),
        json!({"sub": "ada"}),
        json!(["ada"]),
    ] {
        post_as(
            &stack,
            &issuer,
            json!({"sub": "svc", "act": {"sub": actor}}),
        )
        .await
        .assert_problem(400, "principal_ambiguous");
    }
    assert_eq!(stack.upstream_executions().await, 0);

    // A string actor works, and so does a token without one (the service itself).
    let ada = post_as(
        &stack,
        &issuer,
        json!({"sub": "svc", "act": {"sub": "ada"}}),
    )
    .await;
    let service = post_as(&stack, &issuer, json!({"sub": "svc"})).await;
    assert_eq!((ada.status, service.status), (201, 201), "{ada}\n{service}");
    assert_eq!(service.header("idempotent-replayed"), None, "{service}");
    assert_eq!(stack.upstream_executions().await, 2);
}

#[tokio::test]
async fn a_source_naming_an_object_claim_fails_plugin_start() {
    let mut plugin = StackOptions::default().plugin;
    plugin["identity"] = json!({"actor": [claim("act")], "principal": [claim("sub")]});
    match start_envoy_alone(&plugin).await {
        EnvoyStart::Exited { status, log } => {
            assert!(!status.success(), "log:\n{log}");
            let line = log
                .lines()
                .find(|line| line.contains("keyflight: invalid plugin configuration"))
                .unwrap_or_else(|| panic!("no configuration error logged; log:\n{log}"));
            assert!(
                line.contains("identity.actor[0].jwt_claim.claim")
                    && line.contains("JSON object or array"),
                "the refusal names the field and why: {line}"
            );
        }
        EnvoyStart::Ready { log } => {
            panic!("Envoy started with `claim: act`; log:\n{log}")
        }
    }
}
