//! K2 with mTLS: the listener requires a client certificate signed by the mesh CA and the
//! plugin takes the principal from the peer's URI SAN (the SPIFFE id under Istio,
//! `{"property": ["connection", "uri_san_peer_certificate"]}`). Two workloads sending one
//! key are two operations; a client without a certificate never gets a request through.

use keyflight_e2e::mtls::{self, Pki, TlsPost};
use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::envoy_variants::EnvoyEdit;
use serde_json::json;

const CHECKOUT: &str = "spiffe://cluster.local/ns/shop/sa/checkout";
const REFUNDS: &str = "spiffe://cluster.local/ns/shop/sa/refunds";

#[tokio::test]
async fn two_workload_identities_sending_one_key_run_twice_and_no_certificate_gets_nothing() {
    let pki = Pki::generate(&[CHECKOUT, REFUNDS]);
    let stack = Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::DownstreamMtls {
                cert: pki.server_cert(),
                key: pki.server_key(),
                ca: pki.ca(),
            })
            .plugin(|plugin| {
                plugin["identity"] = json!({
                    "principal": [{"property": ["connection", "uri_san_peer_certificate"]}]
                });
            }),
    )
    .await;
    let ca = pki.ca();
    let (checkout, refunds) = (pki.client(0), pki.client(1));
    let post = |client| TlsPost {
        url: stack.https_url(0, "/payments"),
        ca: &ca,
        client,
        headers: vec![
            ("idempotency-key", "batch-7"),
            ("content-type", "application/json"),
        ],
        body: json!({"amount": 70}).to_string(),
    };

    let first = mtls::send(&post(Some(&checkout)))
        .await
        .expect("an answer over mTLS");
    let other = mtls::send(&post(Some(&refunds)))
        .await
        .expect("an answer over mTLS");
    let again = mtls::send(&post(Some(&checkout)))
        .await
        .expect("an answer over mTLS");

    assert_eq!((first.status, other.status), (201, 201), "{first}\n{other}");
    assert_eq!(
        other.header("idempotent-replayed"),
        None,
        "another SAN ran: {other}"
    );
    again.assert_replayed();
    assert_eq!(again.body, first.body, "checkout gets checkout's payment");
    assert_eq!(stack.upstream_executions().await, 2);

    let anonymous = mtls::send(&post(None)).await;
    assert!(
        anonymous.is_none(),
        "the handshake fails without a client certificate: {anonymous:?}"
    );
    assert_eq!(stack.upstream_executions().await, 2);
}
