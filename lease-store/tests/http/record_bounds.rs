//! Server-side bounds on what a token holder may store and send
//! (`docs/configuration.md#limits`): retention no longer than the policies allow, records no
//! larger than `--max-record-bytes`, and request bodies in flight within a budget, overall
//! and per caller, so a burst of large finalizes is shed before it is buffered.

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{Server, TOKEN, fresh_digest, start_server};

/// Ten years, the longest retention a filter policy may ask for.
const TEN_YEARS_S: u64 = 10 * 365 * 86_400;

#[tokio::test]
async fn a_retention_past_the_policies_maximum_is_refused() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let claim = |retention_s: u64| json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 1000, "retention_s": retention_s });
    let ten_years = api
        .post(
            &format!("/v1/claims/{}", fresh_digest("ten-years")),
            Some(TOKEN),
            &claim(TEN_YEARS_S),
        )
        .await;
    assert_eq!(ten_years.outcome(), "won", "{}", ten_years.text);
    let longer = api
        .post(
            &format!("/v1/claims/{}", fresh_digest("longer")),
            Some(TOKEN),
            &claim(TEN_YEARS_S + 1),
        )
        .await;
    let detail = longer.assert_problem(400, "bad_request");
    assert!(detail.contains("retention_s"), "{detail}");

    let capped = start_server(&["--max-retention", "1h", "--default-retention", "1h"]).await;
    let over = capped
        .api
        .post(
            &format!("/v1/claims/{}", fresh_digest("over")),
            Some(TOKEN),
            &claim(3601),
        )
        .await;
    let detail = over.assert_problem(400, "bad_request");
    assert!(detail.contains("retention_s"), "{detail}");
}

#[tokio::test]
async fn a_record_past_the_maximum_size_is_refused() {
    let server = start_server(&["--max-record-bytes", "1000"]).await;
    let api = &server.api;
    let (scope, _fingerprint, claim_id) = api.win("big-record").await;
    let body = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 1001]);
    let answer = api
        .try_finalize(
            &scope,
            &claim_id,
            &json!({ "status": 200, "headers": [], "body_b64": body }),
        )
        .await;
    let detail = answer.assert_problem(413, "payload_too_large");
    assert!(detail.contains("--max-record-bytes"), "{detail}");
    // The record is still pending: a smaller finalize of the same claim lands.
    api.finalize(&scope, &claim_id).await;
}

/// How a finalize head says its body is framed.
enum Framing {
    /// `content-length`: this many bytes.
    Length(usize),
    /// `transfer-encoding: chunked`: a length the store cannot know up front.
    Chunked,
}

/// Opens a connection from `from` (any 127/8 address) and sends a finalize head framed by
/// `framing`, without the body: the store must decide before the body arrives.
async fn finalize_head(store: SocketAddr, from: [u8; 4], framing: Framing) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("bind a loopback source address");
    let mut stream = socket.connect(store).await.unwrap();
    let framing = match framing {
        Framing::Length(length) => format!("content-length: {length}"),
        Framing::Chunked => "transfer-encoding: chunked".to_owned(),
    };
    let head = format!(
        "POST /v1/claims/{}/finalize HTTP/1.1\r\nhost: store\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n{framing}\r\n\r\n",
        fresh_digest("finalize-head")
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// The store's listening address.
fn address_of(server: &Server) -> SocketAddr {
    server
        .api
        .base
        .trim_start_matches("http://")
        .parse()
        .unwrap()
}

/// The status line of the store's answer, if one arrives within `wait`.
async fn answer_within(stream: &mut TcpStream, wait: Duration) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(wait, stream.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Ok(_) => Some(String::new()),
        Err(_) => None,
    }
}

#[tokio::test]
async fn large_finalizes_past_the_body_budget_are_shed_before_they_are_read() {
    const MIB: usize = 1024 * 1024;
    let server = start_server(&[
        "--max-body-bytes",
        &(2 * MIB).to_string(),
        "--max-body-bytes-in-flight",
        &(4 * MIB).to_string(),
        "--max-body-bytes-in-flight-per-caller",
        &(2 * MIB).to_string(),
    ])
    .await;
    let store = address_of(&server);

    // One caller's budget holds one 1.5 MiB body; its second one is shed at once.
    let mut first = finalize_head(store, [127, 0, 0, 1], Framing::Length(3 * MIB / 2)).await;
    assert_eq!(
        answer_within(&mut first, Duration::from_millis(500)).await,
        None,
        "a finalize within the budget is read, not shed"
    );
    let mut held = vec![first];
    let mut shed = finalize_head(store, [127, 0, 0, 1], Framing::Length(3 * MIB / 2)).await;
    let answer = answer_within(&mut shed, Duration::from_secs(5))
        .await
        .expect("a finalize past the caller's budget must be answered at once");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after"), "{answer}");
    assert!(answer.contains("budget"), "{answer}");

    // Another caller still has its own share of the overall budget…
    let mut other = finalize_head(store, [127, 0, 0, 2], Framing::Length(3 * MIB / 2)).await;
    assert_eq!(
        answer_within(&mut other, Duration::from_millis(500)).await,
        None,
        "a second caller's finalize is read, not shed"
    );
    held.push(other);
    // …until the overall budget is spent.
    let mut third = finalize_head(store, [127, 0, 0, 3], Framing::Length(3 * MIB / 2)).await;
    let answer = answer_within(&mut third, Duration::from_secs(5))
        .await
        .expect("a finalize past the overall budget must be answered at once");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");

    assert_eq!(
        server
            .api
            .counter("keyflight_store_shed_total{reason=\"body_budget\"}")
            .await,
        2
    );
    drop(held);
}

/// A call without a body (the filter's `GET /v1/epoch`) reserves nothing. It used to count
/// as a body of unknown length (`--max-body-bytes`), so two epoch questions in flight spent
/// a caller's budget and its claims were shed meanwhile (503 at once, nothing logged: seen
/// as a flaky end-to-end test right after a stack's Envoy workers all asked the epoch).
#[tokio::test]
async fn a_call_without_a_body_reserves_nothing_of_the_budget() {
    const MIB: usize = 1024 * 1024;
    let server = start_server(&[
        "--max-body-bytes",
        &MIB.to_string(),
        "--max-body-bytes-in-flight-per-caller",
        &MIB.to_string(),
    ])
    .await;
    let store = address_of(&server);

    // A chunked finalize head: its length is unknown, so it holds the caller's whole budget.
    let mut held = finalize_head(store, [127, 0, 0, 1], Framing::Chunked).await;
    assert_eq!(
        answer_within(&mut held, Duration::from_millis(500)).await,
        None,
        "the chunked finalize is being read, not shed"
    );

    let epoch = server.api.get("/v1/epoch", Some(TOKEN)).await;
    assert_eq!(
        epoch.status, 200,
        "a bodiless call from the same caller: {epoch:?}"
    );
    drop(held);
}
