//! Answers within a budget (`docs/configuration.md#limits`): a workload that replays a large
//! record many times and never reads the answers holds no more of the replica's memory than
//! the answer budget allows, keeps no more than its share of the concurrency cap, and is cut
//! off by the write timeout, while another workload's claims are served.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{Api, TOKEN, start_server};

/// The recorded body: about 1 MiB, a multiple of 3 so its base64 has no padding.
const RECORD_BYTES: usize = 349_525 * 3;
/// Claims of the record in one batch: its answer carries the record this many times.
const BATCH: usize = 16;
/// A batch answer's size, about: each claim's base64 body (4 bytes for 3).
const ANSWER_BYTES: u64 = (BATCH * RECORD_BYTES / 3 * 4) as u64;
/// The replica's answer budget, and one caller's share: one batch answer fits, two do not.
const ANSWER_BUDGET: u64 = 48 << 20;
const ANSWER_SHARE: u64 = 24 << 20;
/// Batches sent at once, and how many times; none of their answers is read.
const AT_ONCE: usize = 2;
const ROUNDS: usize = 16;

const BATCH_ANSWERED: &str =
    "keyflight_store_request_duration_seconds_count{route=\"/v1/batch/claims\"}";

/// The response recorded: a body of [`RECORD_BYTES`].
fn large_response() -> Value {
    json!({ "status": 200, "headers": [], "body_b64": "A".repeat(RECORD_BYTES / 3 * 4) })
}

/// Records [`large_response`] on a fresh scope; returns (scope, fingerprint) and a batch
/// that replays it [`BATCH`] times: an answer larger than what the kernel buffers.
async fn large_record(api: &Api) -> (String, String, Value) {
    let (scope, fingerprint, claim_id) = api.win("large-record").await;
    api.finalize_with(&scope, &claim_id, &large_response())
        .await;
    let replays = json!({ "calls": vec![
        json!({ "scope": scope, "request": { "fingerprint": fingerprint, "lease_ms": 60_000 } });
        BATCH
    ] });
    (scope, fingerprint, replays)
}

/// The port of a server's API base URL.
fn port(api: &Api) -> u16 {
    api.base.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// Sends `POST path` with `body` and the filter token on a connection of its own whose
/// receive buffer is small, and never reads the answer: the kernel takes little of it, so
/// what the store does not cut off it holds.
async fn never_read(port: u16, path: &str, body: &Value) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: store\r\nauthorization: Bearer {TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// A value of `/proc/<pid>/status` in bytes (`VmRSS`, `VmHWM`: the kernel gives kB).
fn memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

#[tokio::test]
async fn a_workload_that_never_reads_its_replays_stays_within_the_answer_budget() {
    let server = start_server(&[
        "--max-body-bytes",
        "4194304",
        "--max-concurrent-requests",
        "8",
        "--max-answer-bytes-in-flight",
        &ANSWER_BUDGET.to_string(),
        "--max-answer-bytes-in-flight-per-caller",
        &ANSWER_SHARE.to_string(),
        "--write-timeout",
        "300s",
    ])
    .await;
    let greedy = &server.api;
    // Another workload: another peer address, so another caller.
    let other = Api::bound(greedy.base.clone(), "127.0.0.3".parse().unwrap());
    let (_, _, replays) = large_record(greedy).await;
    let pid = server.child.pid();
    let before = memory(pid, "VmRSS");

    let mut unread = Vec::new();
    for round in 1..=ROUNDS {
        for _ in 0..AT_ONCE {
            unread.push(never_read(port(greedy), "/v1/batch/claims", &replays).await);
        }
        greedy
            .wait_counter(BATCH_ANSWERED, (round * AT_ONCE) as u64)
            .await;
        let (mine, _, claim_id) = other.win("another-workload").await;
        other.finalize(&mine, &claim_id).await;
    }

    // What the store may hold: the answer budget (each replay is weighed as it is read, so
    // nothing past it is built), the caller's share once more while its weighed replays
    // are written into one answer, and room for the allocator.
    let bound = ANSWER_BUDGET + ANSWER_SHARE + (32 << 20);
    let grew = memory(pid, "VmHWM").saturating_sub(before);
    assert!(
        grew <= bound,
        "the store grew by {} MiB under {} unread answers of {} MiB, past its bound of {} MiB",
        grew >> 20,
        unread.len(),
        ANSWER_BYTES >> 20,
        bound >> 20
    );
    let budget_shed = greedy
        .counter("keyflight_store_shed_total{reason=\"answer_budget\"}")
        .await;
    let rate_shed = greedy
        .counter("keyflight_store_shed_total{reason=\"answer_rate\"}")
        .await;
    assert!(
        budget_shed + rate_shed >= (ROUNDS * AT_ONCE - 1) as u64,
        "every answer past the greedy caller's share is shed"
    );
}

#[tokio::test]
async fn a_workload_replaying_fast_is_paced_to_its_share_only_while_another_is_active() {
    // 4 MiB a second for the answers of all callers: 2 MiB each for two.
    let share = 8u64 << 20;
    let server = start_server(&[
        "--max-body-bytes",
        "4194304",
        "--max-answer-bytes-in-flight-per-caller",
        &share.to_string(),
        "--max-answer-bytes-per-second",
        "4194304",
    ])
    .await;
    let greedy = &server.api;
    let (scope, fingerprint, _) = large_record(greedy).await;
    let replays = (share / (ANSWER_BYTES / BATCH as u64)) as usize + 4;

    for _ in 0..replays {
        let alone = greedy.claim(&scope, &fingerprint, 0).await;
        assert_eq!(alone.outcome(), "completed", "a caller alone is not paced");
    }

    // Another workload: another peer address, so another caller.
    let other = Api::bound(greedy.base.clone(), "127.0.0.3".parse().unwrap());
    let (mine, _, claim_id) = other.win("another-workload").await;
    let mut statuses = Vec::new();
    for _ in 0..replays {
        statuses.push(greedy.claim(&scope, &fingerprint, 0).await.status);
    }
    assert!(
        statuses.contains(&503),
        "past its bucket the replaying workload is refused while another is active: {statuses:?}"
    );
    assert_eq!(statuses[0], 200, "its bucket starts full");
    assert!(
        greedy
            .counter("keyflight_store_shed_total{reason=\"answer_rate\"}")
            .await
            >= 1
    );
    other.finalize(&mine, &claim_id).await;
}

#[tokio::test]
async fn a_batch_past_the_callers_share_answers_the_replays_that_fit_and_sheds_the_rest() {
    // The whole answer (two batches' worth of replays) is larger than the replica's whole
    // budget: weighed only once built, it would be built and then refused whole.
    let budget = ANSWER_BYTES + (1 << 20);
    let share = ANSWER_BYTES / 2;
    let server = start_server(&[
        "--max-body-bytes",
        "4194304",
        "--max-answer-bytes-in-flight",
        &budget.to_string(),
        "--max-answer-bytes-in-flight-per-caller",
        &share.to_string(),
    ])
    .await;
    let api = &server.api;
    let (_, _, mut replays) = large_record(api).await;
    let calls = replays["calls"].as_array().unwrap().clone();
    replays["calls"] = Value::Array([calls.clone(), calls].concat());

    let answer = api.post("/v1/batch/claims", Some(TOKEN), &replays).await;
    assert_eq!(
        answer.status, 200,
        "the batch is answered: {:.300}",
        answer.text
    );
    let answers = answer.json["answers"].as_array().unwrap();
    let replayed = answers
        .iter()
        .filter(|a| a["status"] == 200 && a["body"]["outcome"] == "completed")
        .count();
    let shed = answers
        .iter()
        .filter(|a| a["status"] == 503 && a["body"]["code"] == "journal_unavailable")
        .count();
    let one = ANSWER_BYTES / BATCH as u64;
    assert!(replayed >= 1, "the replays that fit the share are answered");
    assert!(
        replayed as u64 * one <= share + one,
        "no more than the caller's share is replayed at once: {replayed} replays"
    );
    assert_eq!(
        replayed + shed,
        2 * BATCH,
        "every other replay is shed, alone"
    );
    assert!(
        api.counter("keyflight_store_shed_total{reason=\"answer_budget\"}")
            .await
            >= shed as u64
    );
}

#[tokio::test]
async fn an_unread_answer_keeps_its_concurrency_slot_until_it_is_sent() {
    let server = start_server(&[
        "--max-body-bytes",
        "4194304",
        "--max-concurrent-requests",
        "1",
        "--max-answer-bytes-in-flight",
        &ANSWER_BUDGET.to_string(),
        "--max-answer-bytes-in-flight-per-caller",
        &ANSWER_SHARE.to_string(),
        "--write-timeout",
        "300s",
    ])
    .await;
    let api = &server.api;
    let (_, _, replays) = large_record(api).await;
    let (scope, fingerprint, _) = api.win("while-unread").await;
    let unread = never_read(port(api), "/v1/batch/claims", &replays).await;
    api.wait_counter(BATCH_ANSWERED, 1).await;

    let asked = std::time::Instant::now();
    let refused = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(refused.status, 503, "the unread answer's slot is taken");
    assert!(
        asked.elapsed() >= Duration::from_millis(100),
        "a call turned away is answered after the refusal pace, not at once"
    );
    refused.assert_problem(503, "journal_unavailable");
    assert!(refused.headers.contains_key("retry-after"));

    drop(unread);
    keyflight_testkit::process::eventually(
        "the slot comes back once the unread answer's connection is gone",
        Duration::from_secs(20),
        || async { api.claim(&scope, &fingerprint, 0).await.status == 200 },
    )
    .await;
}

#[tokio::test]
async fn a_reader_that_stops_reading_is_cut_off_after_the_write_timeout() {
    let server = start_server(&[
        "--max-body-bytes",
        "4194304",
        "--max-concurrent-requests",
        "1",
        "--max-answer-bytes-in-flight",
        &ANSWER_BUDGET.to_string(),
        "--max-answer-bytes-in-flight-per-caller",
        &ANSWER_SHARE.to_string(),
        "--write-timeout",
        "1s",
    ])
    .await;
    let api = &server.api;
    let (_, _, replays) = large_record(api).await;
    let _unread = never_read(port(api), "/v1/batch/claims", &replays).await;

    api.wait_counter("keyflight_store_shed_total{reason=\"write_timeout\"}", 1)
        .await;
    let (scope, fingerprint, _) = api.win("after-the-cut").await;
    let served = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(
        served.outcome(),
        "in_progress",
        "the cut-off answer's slot is free again"
    );
}

#[tokio::test]
async fn a_workload_past_its_share_of_the_concurrency_cap_leaves_room_for_another() {
    let server = start_server(&[
        "--max-body-bytes",
        "4194304",
        "--max-concurrent-requests",
        "4",
        "--max-answer-bytes-in-flight",
        &(256u64 << 20).to_string(),
        "--max-answer-bytes-in-flight-per-caller",
        &(256u64 << 20).to_string(),
        "--write-timeout",
        "300s",
    ])
    .await;
    let greedy = &server.api;
    // Another workload: another peer address, so another caller, active from its first call.
    let other = Api::bound(greedy.base.clone(), "127.0.0.3".parse().unwrap());
    let (scope, fingerprint, _) = other.win("the-other-workload").await;
    let (_, _, replays) = large_record(greedy).await;

    // Each unread answer keeps its slot: the greedy caller takes its share of two, then
    // borrows while more than a quarter of the cap is free.
    let mut unread = Vec::new();
    for n in 1..=3 {
        unread.push(never_read(port(greedy), "/v1/batch/claims", &replays).await);
        greedy.wait_counter(BATCH_ANSWERED, n).await;
    }
    let still_active = other.claim(&scope, &fingerprint, 0).await;
    assert_eq!(still_active.status, 200, "the other workload is served");
    unread.push(never_read(port(greedy), "/v1/batch/claims", &replays).await);
    greedy.wait_counter(BATCH_ANSWERED, 4).await;
    assert_eq!(
        greedy
            .counter("keyflight_store_shed_total{reason=\"caller_share\"}")
            .await,
        1,
        "the greedy caller's fourth call is past its share"
    );

    let served = other.claim(&scope, &fingerprint, 0).await;
    assert_eq!(
        served.status, 200,
        "the last slot is left to the other workload: {served:?}"
    );
    drop(unread);
}
