//! K2, K3: the source that named a principal is part of its scope. A workload reaching the
//! edge over mTLS as `spiffe://…/checkout` and a JWT whose `sub` is that very string are
//! two callers: the same key from each runs twice, and each replays only its own answer.

use keyflight_e2e::jwt::{ISSUER, Issuer};
use keyflight_testkit::envoy_variants::{EnvoyEdit, JWT_PAYLOAD_METADATA_KEY};
use std::path::Path;

use keyflight_e2e::mtls::{self, ClientCert, Pki, TlsPost};
use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

const CHECKOUT: &str = "spiffe://cluster.local/ns/shop/sa/checkout";

/// The keyed payment over mTLS as `client`, with a bearer token when given.
fn tls_post<'a>(
    url: &str,
    ca: &'a Path,
    client: &'a ClientCert,
    token: Option<&'a str>,
) -> TlsPost<'a> {
    let mut headers = vec![
        ("idempotency-key", "batch-7"),
        ("content-type", "application/json"),
    ];
    headers.extend(token.map(|t| ("authorization", t)));
    TlsPost {
        url: url.to_owned(),
        ca,
        client: Some(client),
        headers,
        body: json!({"amount": 70}).to_string(),
    }
}

#[tokio::test]
async fn a_jwt_subject_equal_to_a_spiffe_id_is_another_principal() {
    let pki = Pki::generate(&[CHECKOUT]);
    let issuer = Issuer::default();
    let stack = Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::DownstreamMtls {
                cert: pki.server_cert(),
                key: pki.server_key(),
                ca: pki.ca(),
            })
            .envoy(EnvoyEdit::JwtAuthn {
                issuer: ISSUER.into(),
                jwks: issuer.jwks(),
            })
            .plugin(|plugin| {
                plugin["identity"] = json!({"principal": [
                    {"jwt_claim": {"metadata_key": JWT_PAYLOAD_METADATA_KEY, "claim": "sub"}},
                    {"property": ["connection", "uri_san_peer_certificate"]},
                ]});
            }),
    )
    .await;
    let ca = pki.ca();
    let client = pki.client(0);
    let bearer = format!("Bearer {}", issuer.token(&json!({"sub": CHECKOUT})));
    let url = stack.https_url(0, "/payments");
    let post = |token| tls_post(&url, &ca, &client, token);

    let as_peer = mtls::send(&post(None)).await.expect("an answer");
    let as_subject = mtls::send(&post(Some(&bearer))).await.expect("an answer");
    let peer_again = mtls::send(&post(None)).await.expect("an answer");
    let subject_again = mtls::send(&post(Some(&bearer))).await.expect("an answer");

    assert_eq!(
        (as_peer.status, as_subject.status),
        (201, 201),
        "{as_peer}\n{as_subject}"
    );
    assert_eq!(
        as_subject.header("idempotent-replayed"),
        None,
        "the JWT subject ran on its own: {as_subject}"
    );
    assert_eq!(stack.upstream_executions().await, 2);
    peer_again.assert_replayed();
    assert_eq!(
        peer_again.body, as_peer.body,
        "the peer gets the peer's answer"
    );
    assert_eq!(
        subject_again.body, as_subject.body,
        "the subject gets its own"
    );
}
