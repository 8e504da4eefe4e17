//! The mesh identity as the lease-store's credential, end to end
//! (`docs/configuration.md#caller-identity`): each filter Envoy calls the store over mutual
//! TLS with its workload certificate (a SPIFFE id as the URI SAN); an Envoy in front of the
//! store, as its inbound sidecar, verifies it and appends the id to
//! `x-forwarded-client-cert` (`APPEND_FORWARD`, as Istio does); the store, trusting only
//! that sidecar on loopback, keeps each workload's records apart and lets in only its
//! allowlist.

use keyflight_e2e::mtls::{self, TlsPost};
use keyflight_e2e::{Stack, StackOptions};
use keyflight_protocol::Digest;
use keyflight_testkit::pki::CertFiles;
use keyflight_testkit::stack::{Mesh, STORE_SPIFFE_ID};
use serde_json::json;

const CHECKOUT: &str = "spiffe://cluster.local/ns/payments/sa/checkout";
const REFUNDS: &str = "spiffe://cluster.local/ns/payments/sa/refunds";
const INTRUDER: &str = "spiffe://cluster.local/ns/elsewhere/sa/intruder";

/// Envoy 0 runs as CHECKOUT, Envoy 1 as REFUNDS, Envoy 2 as INTRUDER; the store lets in
/// the first two.
async fn mesh_stack() -> (Stack, Mesh) {
    let mesh = Mesh::new(&[CHECKOUT, REFUNDS, INTRUDER], &[CHECKOUT, REFUNDS]);
    let stack = Stack::start(StackOptions::default().mesh_identity(mesh.clone())).await;
    (stack, mesh)
}

#[tokio::test]
async fn two_workloads_sending_one_key_each_run_once_and_never_replay_the_other() {
    let (stack, _mesh) = mesh_stack().await;
    // Same path, key, principal and authority (the stack sends one shared `host`): the
    // same scope, named by two workloads.
    let send = |envoy| {
        stack
            .post_via(envoy, "/payments")
            .key("order-7")
            .json(&json!({"amount": 70}))
            .send()
    };
    let checkout = send(0).await;
    let refunds = send(1).await;
    assert_eq!(
        (checkout.status, refunds.status),
        (201, 201),
        "{checkout}\n{refunds}"
    );
    assert_eq!(
        refunds.header("idempotent-replayed"),
        None,
        "REFUNDS ran its own request, it did not replay CHECKOUT's: {refunds}"
    );
    assert_eq!(stack.upstream_executions().await, 2);

    let checkout_again = send(0).await;
    let refunds_again = send(1).await;
    checkout_again.assert_replayed();
    refunds_again.assert_replayed();
    assert_eq!(
        checkout_again.body, checkout.body,
        "CHECKOUT gets its own answer"
    );
    assert_eq!(
        refunds_again.body, refunds.body,
        "REFUNDS gets its own answer"
    );
    assert_ne!(checkout.body, refunds.body, "two executions, two answers");
    assert_eq!(stack.upstream_executions().await, 2, "each ran once");
    let metrics = stack.store_metrics().await;
    for workload in [CHECKOUT, REFUNDS] {
        assert!(
            metrics.get(&format!(
                "keyflight_store_caller_calls_total{{workload=\"{workload}\"}}"
            )) >= 2.0,
            "the store attributes calls to {workload}"
        );
    }
}

#[tokio::test]
async fn an_unlisted_workload_fails_closed_and_is_counted() {
    let (stack, _mesh) = mesh_stack().await;
    let refused = stack
        .post_via(2, "/payments")
        .key("order-8")
        .json(&json!({"amount": 80}))
        .send()
        .await;
    refused.assert_problem(503, "journal_unavailable");
    assert_eq!(stack.upstream_executions().await, 0, "never dispatched");
    assert_eq!(
        stack
            .filter_counter_at(2, "outcome.journal_unavailable")
            .await,
        1
    );
    assert!(
        stack
            .store_metrics()
            .await
            .get("keyflight_store_caller_refused_total{workload=\"other\",reason=\"not_allowed\"}")
            >= 1.0,
        "the store counts the refusal"
    );
}

/// A claim of `scope` sent straight to the store's sidecar with `client`'s certificate
/// (what a compromised workload can do), with extra `headers`; `None` when the
/// handshake fails.
async fn claim_at_sidecar(
    stack: &Stack,
    mesh: &Mesh,
    client: Option<&CertFiles>,
    scope: &Digest,
    headers: Vec<(&str, &str)>,
) -> Option<keyflight_e2e::Reply> {
    let port = stack.parts().sidecar_port().expect("a mesh stack");
    let ca = mesh.ca();
    let mut headers = headers;
    headers.push(("content-type", "application/json"));
    mtls::send(&TlsPost {
        url: format!("https://127.0.0.1:{port}/v1/claims/{}", scope.to_hex()),
        ca: &ca,
        client,
        headers,
        body: json!({"fingerprint": Digest::of(b"fp").to_hex(), "lease_ms": 60_000}).to_string(),
    })
    .await
}

#[tokio::test]
async fn a_forged_client_certificate_header_does_not_change_the_identity() {
    let (stack, mesh) = mesh_stack().await;
    let scope = Digest::of(b"forged-header-scope");
    let (checkout, refunds, intruder) = (
        mesh.workload_cert(0),
        mesh.workload_cert(1),
        mesh.workload_cert(2),
    );
    let won = claim_at_sidecar(&stack, &mesh, Some(&checkout), &scope, vec![])
        .await
        .expect("an answer over mTLS");
    assert_eq!(
        (won.status, won.json()["outcome"].clone()),
        (200, json!("won")),
        "{won}"
    );

    // REFUNDS claims the same scope, saying it is CHECKOUT: it reaches its own record (a
    // fresh win), not CHECKOUT's running one (`in_progress`).
    let forged = format!("By={STORE_SPIFFE_ID};URI={CHECKOUT}");
    let as_refunds = claim_at_sidecar(
        &stack,
        &mesh,
        Some(&refunds),
        &scope,
        vec![("x-forwarded-client-cert", &forged)],
    )
    .await
    .expect("an answer over mTLS");
    assert_eq!(
        (as_refunds.status, as_refunds.json()["outcome"].clone()),
        (200, json!("won")),
        "REFUNDS stays REFUNDS: {as_refunds}"
    );

    // The unlisted INTRUDER naming CHECKOUT is still the INTRUDER: refused.
    let as_intruder = claim_at_sidecar(
        &stack,
        &mesh,
        Some(&intruder),
        &scope,
        vec![("x-forwarded-client-cert", &forged)],
    )
    .await
    .expect("an answer over mTLS");
    as_intruder.assert_problem(403, "forbidden");
}

#[tokio::test]
async fn a_client_without_a_certificate_cannot_reach_the_store() {
    let (stack, mesh) = mesh_stack().await;
    let forged = format!("URI={CHECKOUT}");
    let anonymous = claim_at_sidecar(
        &stack,
        &mesh,
        None,
        &Digest::of(b"anonymous-scope"),
        vec![("x-forwarded-client-cert", &forged)],
    )
    .await;
    assert!(
        anonymous.is_none(),
        "the sidecar refuses the handshake without a client certificate: {anonymous:?}"
    );
    assert_eq!(stack.store_metrics().await.claims_total(), 0);
}
