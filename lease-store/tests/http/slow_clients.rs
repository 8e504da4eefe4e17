//! Slow and greedy clients against the real listener (`docs/configuration.md#limits`): a
//! stalled request head is closed by the header-read timeout, a stalled body by the request
//! timeout, connections past the cap are closed at once, and calls past the concurrency
//! limit are shed with 503 and `Retry-After` (a parked long-poll holds no slot).

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{TOKEN, fresh_digest, start_server};

/// The `host:port` of a server's API base URL.
fn addr(base: &str) -> &str {
    base.trim_start_matches("http://")
}

/// Reads until the peer closes; panics if it stays open past `limit`. Returns what was read.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the connection was still open after {limit:?}"
    );
    seen
}

/// Sends one `GET /healthz` on a kept-alive connection and reads its full answer.
async fn healthz_kept_alive(stream: &mut TcpStream) {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: store\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// A kept-alive connection the store accepted and served. The readiness check's own
/// connection may hold a slot until the store reads its close (seen under load: the first
/// connection of a capped store was closed at accept), so one closed at once is tried again.
async fn served_connection(base: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = TcpStream::connect(addr(base)).await.unwrap();
        let sent = stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: store\r\n\r\n")
            .await;
        let mut buf = [0u8; 1024];
        if let (Ok(()), Ok(n)) = (sent, stream.read(&mut buf).await)
            && buf[..n].starts_with(b"HTTP/1.1 200")
        {
            return stream;
        }
        assert!(
            Instant::now() < deadline,
            "no connection slot was free within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_stalled_request_head_is_closed_within_the_header_read_timeout() {
    let server = start_server(&["--header-read-timeout", "1s"]).await;
    let mut stream = TcpStream::connect(addr(&server.api.base)).await.unwrap();
    stream
        .write_all(b"POST /v1/claims/x HTTP/1.1\r\nhost: store\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    closed_within(&mut stream, Duration::from_secs(5)).await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed after {:?}, before the timeout",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_stalled_body_is_answered_within_the_request_timeout() {
    let server = start_server(&["--request-timeout", "1s"]).await;
    let mut stream = TcpStream::connect(addr(&server.api.base)).await.unwrap();
    let scope = fresh_digest("stalled-body");
    let head = format!(
        "POST /v1/claims/{scope}/finalize HTTP/1.1\r\nhost: store\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"claim_id\":"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = closed_within(&mut stream, Duration::from_secs(5)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("journal_unavailable"), "{answer}");
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once() {
    let server = start_server(&["--max-connections", "2", "--header-read-timeout", "30s"]).await;
    // Two kept-alive connections fill the cap (a served request proves each was accepted).
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(served_connection(&server.api.base).await);
    }
    let mut third = TcpStream::connect(addr(&server.api.base)).await.unwrap();
    // Writing may already fail: the store closed the connection when it accepted it.
    let _ = third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: store\r\n\r\n")
        .await;
    let answer = closed_within(&mut third, Duration::from_secs(5)).await;
    assert!(
        answer.is_empty(),
        "past the cap nothing is served: {answer:?}"
    );

    drop(held.pop());
    keyflight_testkit::process::eventually(
        "a freed connection slot is usable again",
        Duration::from_secs(10),
        || async {
            reqwest::get(format!("{}/healthz", server.api.base))
                .await
                .is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
    drop(held);
    // The store sees the held connections close on its own time: until it has, a new
    // connection (this read's) may still meet the cap and be reset at accept.
    keyflight_testkit::process::eventually(
        "the connection past the cap is counted as shed",
        Duration::from_secs(10),
        || async {
            server
                .api
                .try_counter("keyflight_store_shed_total{reason=\"connections\"}")
                .await
                .is_some_and(|shed| shed >= 1)
        },
    )
    .await;
}

#[tokio::test]
async fn calls_past_the_concurrency_limit_are_shed_but_parked_long_polls_hold_no_slot() {
    let server =
        start_server(&["--max-concurrent-requests", "1", "--request-timeout", "30s"]).await;
    let api = &server.api;

    // A parked long-poll gives its slot back: a claim still goes through beside it.
    let (scope, fingerprint, _claim_id) = api.win("parked").await;
    let follower = tokio::spawn({
        let api = api.clone();
        async move { api.claim(&scope, &fingerprint, 20_000).await }
    });
    api.wait_counter("keyflight_store_longpoll_waiting", 1)
        .await;
    let (_, _, _) = api.win("beside-the-parked").await;

    // A call stalled in its body holds the one slot; the next call is shed. The stalled
    // call and a probe may race for the slot: when the stalled one lost (it was answered),
    // stall another.
    let mut stalled = stall_a_finalize(&api.base).await;
    let mut shed = None;
    for _ in 0..100 {
        let answer = api
            .claim(&fresh_digest("shed"), &fresh_digest("fp"), 0)
            .await;
        if answer.status == 503 {
            shed = Some(answer);
            break;
        }
        let mut peek = [0u8; 1];
        if stalled.try_read(&mut peek).is_ok() {
            stalled = stall_a_finalize(&api.base).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shed = shed.expect("no call was shed while the only slot was held");
    let detail = shed.assert_problem(503, "journal_unavailable");
    assert!(detail.contains("concurrency"), "{detail}");
    assert!(shed.headers.contains_key("retry-after"));
    assert!(
        api.counter("keyflight_store_shed_total{reason=\"concurrency\"}")
            .await
            >= 1
    );
    assert!(!follower.is_finished(), "the long-poll is still parked");
    follower.abort();
    drop(stalled);
}

/// Opens a connection and sends a finalize whose body never completes.
async fn stall_a_finalize(base: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr(base)).await.unwrap();
    let head = format!(
        "POST /v1/claims/{}/finalize HTTP/1.1\r\nhost: store\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{",
        fresh_digest("holder")
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

#[tokio::test]
async fn a_long_poll_is_bounded_by_its_wait_not_the_request_timeout() {
    let server = start_server(&["--request-timeout", "1s"]).await;
    let api = &server.api;
    let (scope, fingerprint, _claim_id) = api.win("long-wait").await;
    let started = Instant::now();
    let answer = api.claim(&scope, &fingerprint, 2_500).await;
    assert_eq!(answer.outcome(), "in_progress", "{}", answer.text);
    assert!(started.elapsed() >= Duration::from_millis(2_400));
}

/// Why the shipped proxies close idle store connections first
/// (`proxies_close_idle_connections_first.rs`): the store ends an idle keep-alive connection.
#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_read_timeout() {
    let server = start_server(&["--header-read-timeout", "1s"]).await;
    let mut stream = TcpStream::connect(addr(&server.api.base)).await.unwrap();
    healthz_kept_alive(&mut stream).await;
    let answered = Instant::now();
    closed_within(&mut stream, Duration::from_secs(5)).await;
    assert!(
        answered.elapsed() >= Duration::from_millis(900),
        "closed after {:?}, before the timeout",
        answered.elapsed()
    );
}
