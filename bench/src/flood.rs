//! P10: one caller's replay flood against another caller's store cycles (issue 48).
//!
//! A greedy caller (connections from `127.0.0.2`: the lease-store tells callers apart by
//! peer address without a mesh identity, as one workload's sidecar from another's) replays a
//! record of the shipped policies' largest size in batches of [`MAX_BATCH_CALLS`], on
//! [`GREEDY_CONNECTIONS`] connections that read their answers and [`UNREAD_CONNECTIONS`] that
//! never do. Meanwhile the suite's store cycle (claim + finalize of a fresh scope, from
//! `127.0.0.1`) runs as in P1. Quiet and flooded rounds alternate; the row is the flooded
//! rounds' p99 ÷ the quiet rounds' (target: at most 2), and the lease-store's largest
//! resident set while flooded is reported beside the shipped deployment's memory limit.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, StatusCode};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::batch::{BatchedClaim, ClaimBatch, MAX_BATCH_CALLS};
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, FinalizeRequest, StoredResponse};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::error::BenchError;
use crate::http::{Connection, connect_from};
use crate::load::{self, Bounds, UniqueSource};
use crate::procfs;
use crate::report::Row;
use crate::rotation::Schedule;
use crate::stats::{self, Percentiles};
use crate::targets;
use crate::workload::{StoreCycle, Workload, post_store_call};

/// The greedy caller's address.
const GREEDY: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// Connections that replay and read.
const GREEDY_CONNECTIONS: usize = 16;
/// Connections that send a replay batch and never read its answer.
const UNREAD_CONNECTIONS: usize = 8;
/// The record replayed: the shipped policies' largest `max_cacheable_response_bytes`.
const RECORD_BYTES: usize = 512 * 1024;
/// The concurrency of the other caller's store cycles.
const CYCLES: usize = 4;
/// The memory limit of the shipped lease-store container (`deploy/k8s/deployment.yaml`).
const SHIPPED_LIMIT_MIB: f64 = 512.0;

/// The flood's rows: the other caller's cycle quiet (the baseline) and flooded (P10).
pub async fn rows(
    store: &str,
    token: &str,
    store_pid: u32,
    schedule: Schedule,
    unique: &Arc<UniqueSource>,
) -> Result<Vec<Row>, BenchError> {
    let authorization = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|e| BenchError::Input(format!("the filter token is not a header: {e}")))?;
    let batch = replay_batch(store, &authorization).await?;
    let cycle = Arc::new(Workload::StoreCycle(StoreCycle::new(
        store.to_owned(),
        token,
    )?));
    let bounds = Bounds {
        duration: schedule.round,
        max_requests: schedule.max_requests,
    };
    let (mut quiet, mut flooded) = (stats::histogram(), stats::histogram());
    let (mut quiet_ok, mut flooded_ok, mut quiet_errors, mut errors) = (0, 0, 0, 0);
    let mut first_error = None;
    let mut peak_rss_kib = 0;
    let (mut replayed, mut refused) = (0, 0);
    for _ in 0..schedule.rounds {
        let round = load::run(Arc::clone(&cycle), Arc::clone(unique), CYCLES, bounds, None).await?;
        quiet_ok += round.ok;
        quiet_errors += round.errors;
        let _ = quiet.add(round.histogram);

        let flood = Flood::start(store, &authorization, &batch).await?;
        let watch = tokio::spawn(peak_rss(store_pid, Arc::clone(&flood.running)));
        let round = load::run(Arc::clone(&cycle), Arc::clone(unique), CYCLES, bounds, None).await;
        let (round_replayed, round_refused) = flood.stop().await;
        peak_rss_kib = peak_rss_kib.max(watch.await.unwrap_or(0));
        let round = round?;
        flooded_ok += round.ok;
        errors += round.errors;
        first_error = first_error.or(round.first_error);
        let _ = flooded.add(round.histogram);
        if round_replayed + round_refused == 0 {
            return Err(BenchError::Answer(
                "the greedy caller's replays were never answered: no flood was measured".into(),
            ));
        }
        (replayed, refused) = (replayed + round_replayed, refused + round_refused);
    }
    let (quiet_latency, flooded_latency) = (Percentiles::of(&quiet), Percentiles::of(&flooded));
    let ratio = match (quiet_latency, flooded_latency) {
        (Some(q), Some(f)) if q.p99_ms > 0.0 => Some(f.p99_ms / q.p99_ms),
        _ => None,
    };
    let rps = |ok: u64| Some(ok as f64 / (schedule.round.as_secs_f64() * schedule.rounds as f64));
    let target = targets::p10();
    let scenario = "store cycle, another caller flooding replays";
    Ok(vec![
        Row {
            id: "base".into(),
            scenario: "store cycle, quiet (P10's baseline)".into(),
            concurrency: Some(CYCLES),
            rps: rps(quiet_ok),
            latency: quiet_latency,
            errors: quiet_errors,
            first_error: None,
            baseline: None,
            ratio: None,
            target: None,
            met: None,
            cpu_us_per_op: None,
        },
        Row {
            id: "P10".into(),
            scenario: format!(
                "{scenario} (in batches of {MAX_BATCH_CALLS}: {replayed} replays sent, {refused} \
                 turned away): p99 ÷ quiet p99; lease-store peak RSS {:.0} MiB (limit \
                 {SHIPPED_LIMIT_MIB:.0})",
                peak_rss_kib as f64 / 1024.0
            ),
            concurrency: Some(CYCLES),
            rps: rps(flooded_ok),
            latency: flooded_latency,
            errors,
            first_error,
            baseline: Some("store cycle, quiet".into()),
            ratio,
            target: Some(target),
            met: target.met(ratio, None),
            cpu_us_per_op: None,
        },
    ])
}

/// Records a large answer as the greedy caller and returns a batch replaying it.
async fn replay_batch(store: &str, authorization: &HeaderValue) -> Result<Bytes, BenchError> {
    let mut connection = Connection::open_from(store, GREEDY).await?;
    let scope = Digest::of(format!("flood-{}", uuid::Uuid::new_v4()).as_bytes());
    let claim = ClaimRequest {
        fingerprint: Digest::of(b"keyflight-bench-flood"),
        lease_ms: 60_000,
        wait_ms: None,
        retention_s: None,
        previous: None,
        at_most_once: true,
    };
    let answer = post_store_call(
        &mut connection,
        authorization,
        &format!("/v1/claims/{}", scope.to_hex()),
        &claim,
    )
    .await?;
    let Ok(ClaimResponse::Won { claim_id, .. }) = serde_json::from_slice(&answer.body) else {
        return Err(BenchError::Answer(format!(
            "the flood's record was not won: {}",
            String::from_utf8_lossy(&answer.body)
        )));
    };
    let finalize = FinalizeRequest {
        claim_id,
        response: StoredResponse::new(
            200,
            vec![("content-type".into(), "application/octet-stream".into())],
            &vec![b'r'; RECORD_BYTES],
        ),
        replayable: true,
        previous_scope: None,
    };
    let path = format!("/v1/claims/{}/finalize", scope.to_hex());
    let answer = post_store_call(&mut connection, authorization, &path, &finalize).await?;
    if answer.status != StatusCode::OK {
        return Err(BenchError::Answer(format!(
            "the flood's record was not finalized ({}): the store's --max-record-bytes must \
             hold the shipped policies' largest answer",
            answer.status
        )));
    }
    let batch = ClaimBatch {
        calls: (0..MAX_BATCH_CALLS)
            .map(|_| BatchedClaim {
                scope,
                request: claim.clone(),
            })
            .collect(),
    };
    serde_json::to_vec(&batch)
        .map(Bytes::from)
        .map_err(|e| BenchError::Input(format!("serialize the replay batch: {e}")))
}

/// The greedy caller at work.
struct Flood {
    running: Arc<AtomicBool>,
    answers: Arc<Answers>,
    readers: Vec<tokio::task::JoinHandle<()>>,
    unread: Vec<TcpStream>,
}

impl Flood {
    async fn start(
        store: &str,
        authorization: &HeaderValue,
        batch: &Bytes,
    ) -> Result<Flood, BenchError> {
        let running = Arc::new(AtomicBool::new(true));
        let answers = Arc::new(Answers::default());
        let mut unread = Vec::with_capacity(UNREAD_CONNECTIONS);
        for _ in 0..UNREAD_CONNECTIONS {
            let mut stream = connect_from(store, GREEDY).await?;
            let head = format!(
                "POST /v1/batch/claims HTTP/1.1\r\nhost: {store}\r\nauthorization: {}\r\n\
                 content-type: application/json\r\ncontent-length: {}\r\n\r\n",
                authorization.to_str().unwrap_or_default(),
                batch.len()
            );
            let sent = async {
                stream.write_all(head.as_bytes()).await?;
                stream.write_all(batch).await
            };
            sent.await.map_err(|e| BenchError::Http {
                target: store.to_owned(),
                detail: format!("send an unread replay batch: {e}"),
            })?;
            unread.push(stream);
        }
        let mut readers = Vec::with_capacity(GREEDY_CONNECTIONS);
        for _ in 0..GREEDY_CONNECTIONS {
            let (store, authorization, batch) =
                (store.to_owned(), authorization.clone(), batch.clone());
            let (running, answers) = (Arc::clone(&running), Arc::clone(&answers));
            readers.push(tokio::spawn(async move {
                let headers = [
                    (AUTHORIZATION, authorization),
                    (CONTENT_TYPE, HeaderValue::from_static("application/json")),
                ];
                while running.load(Ordering::Relaxed) {
                    // A refused or cut-off call is the flood meeting a limit: open anew.
                    let Ok(mut connection) = Connection::open_from(&store, GREEDY).await else {
                        continue;
                    };
                    while running.load(Ordering::Relaxed) {
                        let answer = connection
                            .send(Method::POST, "/v1/batch/claims", &headers, batch.clone())
                            .await;
                        let Ok(answer) = answer else { break };
                        let replayed = match answer.status {
                            StatusCode::OK => replays_in(&answer.body),
                            _ => 0,
                        };
                        answers.replayed.fetch_add(replayed, Ordering::Relaxed);
                        answers
                            .refused
                            .fetch_add(MAX_BATCH_CALLS as u64 - replayed, Ordering::Relaxed);
                    }
                }
            }));
        }
        Ok(Flood {
            running,
            answers,
            readers,
            unread,
        })
    }

    /// Stops the flood; returns how many replays were answered, and how many refused.
    async fn stop(self) -> (u64, u64) {
        self.running.store(false, Ordering::Relaxed);
        for reader in self.readers {
            let _ = reader.await;
        }
        drop(self.unread);
        (
            self.answers.replayed.load(Ordering::Relaxed),
            self.answers.refused.load(Ordering::Relaxed),
        )
    }
}

/// How the greedy caller's replays were answered, call by call.
#[derive(Default)]
struct Answers {
    /// Replays sent.
    replayed: AtomicU64,
    /// Replays a limit turned away: alone within a batch, or with their whole batch.
    refused: AtomicU64,
}

/// How many calls of a batch's answer (`body`) were answered 200.
fn replays_in(body: &[u8]) -> u64 {
    #[derive(serde::Deserialize)]
    struct Batch {
        answers: Vec<Call>,
    }
    #[derive(serde::Deserialize)]
    struct Call {
        status: u16,
    }
    serde_json::from_slice::<Batch>(body).map_or(0, |batch| {
        batch
            .answers
            .iter()
            .filter(|call| call.status == 200)
            .count() as u64
    })
}

/// The largest resident set of `pid` while `running`, in KiB, sampled every 10 ms.
async fn peak_rss(pid: u32, running: Arc<AtomicBool>) -> u64 {
    let mut peak = 0;
    while running.load(Ordering::Relaxed) {
        if let Some(memory) = procfs::memory(pid) {
            peak = peak.max(memory.rss_kib);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    peak
}
