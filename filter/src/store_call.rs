//! The lease-store API v1 calls (`docs/records.md#the-api`) as data: what to
//! send, and how to read what came back.
//!
//! The state machine says *which* call to make ([`StoreCall`]); the drivers
//! wrap it in a [`Callout`] (method, path, headers, body, timeout) that the
//! host dispatches as it is. The host's report of the answer is read into an
//! [`Answer`] — status and body, nothing parsed — and the code that knows
//! which call is in flight parses it: [`parse_claim_answer`],
//! [`parse_ack_answer`], [`parse_epoch_answer`]. So every odd answer (no
//! headers, a 503, garbage JSON, a `lease_lost` problem) is a native unit test.

use std::time::Duration;

use keyflight_protocol::Digest;
use keyflight_protocol::ProblemCode;
use keyflight_protocol::wire::batch::{
    BatchedClaim, BatchedFinalize, BorrowedBatchAnswer, ClaimBatch, FinalizeBatch,
};
use keyflight_protocol::wire::reconcile::ReconciledRequest;
use keyflight_protocol::wire::{
    ClaimAnswer, ClaimRequest, ClaimResponse, EpochResponse, FinalizeRequest, ReleaseRequest,
    RenewRequest, framed,
};
use serde::Deserialize;

use crate::config::LeaseStore;

/// One call to the lease-store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreCall {
    /// `POST /v1/claims/{scope}`.
    Claim {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: ClaimRequest,
    },
    /// `POST /v1/claims/{scope}/renew`.
    Renew {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: RenewRequest,
    },
    /// `POST /v1/claims/{scope}/finalize`.
    Finalize {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: FinalizeRequest,
    },
    /// `POST /v1/claims/{scope}/release`.
    Release {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: ReleaseRequest,
    },
    /// `POST /v1/claims/{scope}/reconciled` (`docs/reconcile.md#what-the-store-records`).
    Reconciled {
        /// The scope digest.
        scope: Digest,
        /// The request body.
        request: ReconciledRequest,
    },
}

/// One kind of lease-store request the filter sends: its method and path
/// pattern (`docs/records.md#the-api`). Every callout takes both from here,
/// so [`StoreRoute::ALL`] is the filter's complete set of store calls: the
/// shipped Istio AuthorizationPolicies must admit exactly these
/// (`filter/tests/shipped_configs/store_calls.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreRoute {
    /// `POST /v1/claims/{scope}`.
    Claim,
    /// `POST /v1/claims/{scope}/renew`.
    Renew,
    /// `POST /v1/claims/{scope}/finalize`.
    Finalize,
    /// `POST /v1/claims/{scope}/release`.
    Release,
    /// `POST /v1/claims/{scope}/reconciled`: the service's answer about an `unknown`
    /// record, under `uncertain: reconcile`.
    Reconciled,
    /// `GET /v1/epoch`: the operator epoch the edge cache is checked against
    /// (F9). Asked by each worker's root context, about no scope.
    Epoch,
    /// `POST /v1/batch/claims`: claims a worker coalesced (`docs/records.md#batches`).
    ClaimBatch,
    /// `POST /v1/batch/finalizes`: finalizes a worker coalesced.
    FinalizeBatch,
}

impl StoreRoute {
    /// Every request the filter sends to the lease-store.
    pub const ALL: [StoreRoute; 8] = [
        StoreRoute::Claim,
        StoreRoute::Renew,
        StoreRoute::Finalize,
        StoreRoute::Release,
        StoreRoute::Reconciled,
        StoreRoute::Epoch,
        StoreRoute::ClaimBatch,
        StoreRoute::FinalizeBatch,
    ];

    /// What stands for the scope digest (hex) in [`StoreRoute::pattern`].
    pub const SCOPE: &str = "{scope}";

    /// The HTTP method.
    pub fn method(self) -> &'static str {
        match self {
            StoreRoute::Epoch => "GET",
            StoreRoute::Claim
            | StoreRoute::Renew
            | StoreRoute::Finalize
            | StoreRoute::Release
            | StoreRoute::Reconciled
            | StoreRoute::ClaimBatch
            | StoreRoute::FinalizeBatch => "POST",
        }
    }

    /// The path, with [`StoreRoute::SCOPE`] where the scope goes.
    pub fn pattern(self) -> &'static str {
        match self {
            StoreRoute::Claim => "/v1/claims/{scope}",
            StoreRoute::Renew => "/v1/claims/{scope}/renew",
            StoreRoute::Finalize => "/v1/claims/{scope}/finalize",
            StoreRoute::Release => "/v1/claims/{scope}/release",
            StoreRoute::Reconciled => "/v1/claims/{scope}/reconciled",
            StoreRoute::Epoch => "/v1/epoch",
            StoreRoute::ClaimBatch => "/v1/batch/claims",
            StoreRoute::FinalizeBatch => "/v1/batch/finalizes",
        }
    }

    /// The path of a request about `scope` (none for the epoch and the batches).
    fn path(self, scope: Option<Digest>) -> String {
        match scope {
            Some(scope) => self.pattern().replace(Self::SCOPE, &scope.to_hex()),
            None => self.pattern().to_owned(),
        }
    }
}

impl StoreCall {
    /// Which request this is.
    pub fn route(&self) -> StoreRoute {
        match self {
            StoreCall::Claim { .. } => StoreRoute::Claim,
            StoreCall::Renew { .. } => StoreRoute::Renew,
            StoreCall::Finalize { .. } => StoreRoute::Finalize,
            StoreCall::Release { .. } => StoreRoute::Release,
            StoreCall::Reconciled { .. } => StoreRoute::Reconciled,
        }
    }

    /// The request path.
    pub fn path(&self) -> String {
        self.route().path(Some(self.scope()))
    }

    /// The scope the call is about.
    pub fn scope(&self) -> Digest {
        match self {
            StoreCall::Claim { scope, .. }
            | StoreCall::Renew { scope, .. }
            | StoreCall::Finalize { scope, .. }
            | StoreCall::Release { scope, .. }
            | StoreCall::Reconciled { scope, .. } => *scope,
        }
    }

    /// The call's name, for log lines.
    pub fn name(&self) -> &'static str {
        match self {
            StoreCall::Claim { .. } => "claim",
            StoreCall::Renew { .. } => "renew",
            StoreCall::Finalize { .. } => "finalize",
            StoreCall::Release { .. } => "release",
            StoreCall::Reconciled { .. } => "reconciled",
        }
    }

    /// The JSON request body.
    pub fn body(&self) -> Vec<u8> {
        // Serializing these plain structs cannot fail; an empty body would be
        // refused by the store as malformed rather than crash the worker.
        match self {
            StoreCall::Claim { request, .. } => serde_json::to_vec(request),
            StoreCall::Renew { request, .. } => serde_json::to_vec(request),
            StoreCall::Finalize { request, .. } => serde_json::to_vec(request),
            StoreCall::Release { request, .. } => serde_json::to_vec(request),
            StoreCall::Reconciled { request, .. } => serde_json::to_vec(request),
        }
        .unwrap_or_default()
    }
}

/// A lease-store request as the host dispatches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callout {
    /// A call about a scope (`POST`).
    Call {
        /// The call.
        call: StoreCall,
        /// How long the host waits for its answer.
        timeout: Duration,
    },
    /// The operator epoch question (`GET /v1/epoch`).
    Epoch {
        /// How long the host waits for its answer.
        timeout: Duration,
    },
    /// Claims, or finalizes, of one kind, sent as one batch (`docs/records.md#batches`).
    Batch {
        /// The calls, all claims or all finalizes; a claim's `wait_ms` is not sent (a
        /// batch never long-polls).
        calls: Vec<StoreCall>,
        /// How long the host waits for its answer.
        timeout: Duration,
    },
}

impl Callout {
    /// Which request this is.
    pub fn route(&self) -> StoreRoute {
        match self {
            Callout::Call { call, .. } => call.route(),
            Callout::Epoch { .. } => StoreRoute::Epoch,
            Callout::Batch { calls, .. } => match calls.first() {
                Some(StoreCall::Finalize { .. }) => StoreRoute::FinalizeBatch,
                _ => StoreRoute::ClaimBatch,
            },
        }
    }

    /// The HTTP method.
    pub fn method(&self) -> &'static str {
        self.route().method()
    }

    /// The request path.
    pub fn path(&self) -> String {
        match self {
            Callout::Call { call, .. } => call.path(),
            Callout::Epoch { .. } | Callout::Batch { .. } => self.route().path(None),
        }
    }

    /// The request body (`None` for the epoch question).
    pub fn body(&self) -> Option<Vec<u8>> {
        match self {
            Callout::Call { call, .. } => Some(call.body()),
            Callout::Epoch { .. } => None,
            Callout::Batch { calls, .. } => Some(batch_body(calls)),
        }
    }

    /// The request headers. A callout needs `:method`, `:path` and
    /// `:authority` (`docs/envoy-facts.md#callouts`); the bearer token is the
    /// filter's (`docs/records.md#the-api`). A claim on its single route asks for a
    /// replay's body as raw bytes ([`framed`]); a store that predates frames answers JSON.
    pub fn headers(&self, store: &LeaseStore) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            (":method", self.method().to_owned()),
            (":path", self.path()),
            (":authority", store.authority.clone()),
            ("content-type", "application/json".to_owned()),
        ];
        if self.route() == StoreRoute::Claim {
            headers.push((
                "accept",
                format!("{}, application/json", framed::MEDIA_TYPE),
            ));
        }
        if let Some(token) = &store.token {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        headers
    }

    /// How long the host waits, never zero: a zero timeout would mean none
    /// at all (`docs/envoy-facts.md#callouts`).
    pub fn timeout(&self) -> Duration {
        let (Callout::Call { timeout, .. }
        | Callout::Epoch { timeout }
        | Callout::Batch { timeout, .. }) = self;
        (*timeout).max(Duration::from_millis(1))
    }
}

/// The JSON body of a batch of `calls`: the claims' (without `wait_ms`), or the
/// finalizes'; a call of another kind is not sent (the root batches one kind at a time).
fn batch_body(calls: &[StoreCall]) -> Vec<u8> {
    let claims: Vec<BatchedClaim> = calls
        .iter()
        .filter_map(|call| match call {
            StoreCall::Claim { scope, request } => Some(BatchedClaim {
                scope: *scope,
                request: ClaimRequest {
                    wait_ms: None,
                    ..request.clone()
                },
            }),
            _ => None,
        })
        .collect();
    let body = if claims.is_empty() {
        let calls = calls
            .iter()
            .filter_map(|call| match call {
                StoreCall::Finalize { scope, request } => Some(BatchedFinalize {
                    scope: *scope,
                    request: request.clone(),
                }),
                _ => None,
            })
            .collect();
        serde_json::to_vec(&FinalizeBatch { calls })
    } else {
        serde_json::to_vec(&ClaimBatch { calls: claims })
    };
    // As for a single call: an empty body is refused by the store, never a crash.
    body.unwrap_or_default()
}

/// Splits a batch's answer into the answer each of its `calls` calls would have had
/// alone. `Err` gives back the whole answer when it is not a readable batch answer of
/// `calls` entries: a failed call, a refusal, garbage — then no call has an answer of
/// its own, and each must be treated as if its own call had failed so.
pub fn split_batch_answer(answer: Answer, calls: usize) -> Result<Vec<Answer>, Answer> {
    let split = match &answer {
        Answer::Received {
            status: Some(200),
            body,
            framed: false,
        } => serde_json::from_slice::<BorrowedBatchAnswer<'_>>(body)
            .ok()
            .filter(|batch| batch.answers.len() == calls)
            .map(|batch| {
                batch
                    .answers
                    .into_iter()
                    .map(|one| Answer::Received {
                        status: Some(one.status),
                        body: one.body.get().as_bytes().to_vec(),
                        framed: false,
                    })
                    .collect()
            }),
        _ => None,
    };
    split.ok_or(answer)
}

/// What came back for a callout, as the host reported it, not yet parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The host refused to dispatch the call.
    NotSent,
    /// The host delivered an answer.
    Received {
        /// `:status`; `None` when the call failed without response headers
        /// (connection failure, reset, timeout) or the status is unreadable.
        status: Option<u16>,
        /// The response body.
        body: Vec<u8>,
        /// Its `Content-Type` names a frame ([`framed`]): a `completed` claim answer with
        /// the recorded body as raw bytes after its JSON.
        framed: bool,
    },
}

impl Answer {
    /// A 200 answer with `body`, as the lease-store sends one.
    pub fn ok(body: impl Into<Vec<u8>>) -> Answer {
        Answer::Received {
            status: Some(200),
            body: body.into(),
            framed: false,
        }
    }

    /// A 200 answer with a framed claim answer, as the lease-store sends a replay to a
    /// claim that asks for frames.
    pub fn framed(frame: impl Into<Vec<u8>>) -> Answer {
        Answer::Received {
            status: Some(200),
            body: frame.into(),
            framed: true,
        }
    }

    /// The status and body, or why there is no answer to read.
    fn http(&self) -> Result<(u16, &[u8]), CallError> {
        match self {
            Answer::NotSent => Err(CallError::Dispatch),
            Answer::Received { status: None, .. } => Err(CallError::NoAnswer),
            Answer::Received {
                status: Some(status),
                body,
                ..
            } => Ok((*status, body)),
        }
    }

    /// Whether the body is a frame.
    fn is_framed(&self) -> bool {
        matches!(self, Answer::Received { framed: true, .. })
    }
}

/// Why a call did not produce a usable answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The host refused to dispatch it (unknown cluster, bad headers).
    #[error("the call could not be dispatched")]
    Dispatch,
    /// No response: connection failure, reset or timeout.
    #[error("no answer (connection failure or timeout)")]
    NoAnswer,
    /// An HTTP status other than the expected one.
    #[error("answered with HTTP {0}")]
    Status(u16),
    /// `409 lease_lost`: another claim owns the record now (L2).
    #[error("the lease was lost to another claim")]
    LeaseLost,
    /// A 200 whose body is not the expected JSON.
    #[error("the answer could not be parsed")]
    Malformed,
    /// A claim's `completed` answer whose recorded response cannot be read
    /// (a body that is not base64, a status out of range, a damaged frame):
    /// the operation ran, so the request is refused, never forwarded, whatever
    /// the policy's `failure_mode`.
    #[error("the recorded response could not be read")]
    MalformedRecord,
}

#[derive(Deserialize)]
struct ProblemCodeOnly {
    code: ProblemCode,
}

#[derive(Deserialize)]
struct OutcomeOnly {
    outcome: String,
}

/// The fields of a claim answer beside its outcome (see [`ClaimAnswer`]), each read
/// on its own: an unreadable one is absent, never a reason to refuse the outcome.
#[derive(Deserialize)]
struct RecordExpiry {
    #[serde(default)]
    record_expires_in_ms: Option<u64>,
}

/// See [`RecordExpiry`].
#[derive(Deserialize)]
struct ClaimedAfter {
    #[serde(default)]
    claimed_after_ms: Option<u64>,
}

/// Reads a claim answer. A record's remaining retention that is absent or
/// unreadable is `None`: the replay is then not cached, never cached longer.
pub fn parse_claim_answer(answer: &Answer) -> Result<ClaimAnswer, CallError> {
    match answer.http()? {
        (200, frame) if answer.is_framed() => parse_framed_claim_answer(frame),
        (200, body) => parse_json_claim_answer(body),
        (other, _) => Err(CallError::Status(other)),
    }
}

/// Reads a claim answer's JSON.
fn parse_json_claim_answer(body: &[u8]) -> Result<ClaimAnswer, CallError> {
    let response = serde_json::from_slice(body).map_err(|_| {
        match serde_json::from_slice::<OutcomeOnly>(body) {
            Ok(answer) if answer.outcome == "completed" => CallError::MalformedRecord,
            _ => CallError::Malformed,
        }
    })?;
    let record_expires_in_ms = serde_json::from_slice::<RecordExpiry>(body)
        .ok()
        .and_then(|e| e.record_expires_in_ms);
    let claimed_after_ms = serde_json::from_slice::<ClaimedAfter>(body)
        .ok()
        .and_then(|c| c.claimed_after_ms);
    Ok(ClaimAnswer {
        response,
        record_expires_in_ms,
        claimed_after_ms,
    })
}

/// Reads a framed claim answer: a `completed` one whose head's `body_b64` is empty, the
/// body after it. The store frames nothing else, so any other frame is a record that
/// cannot be read: refused, never forwarded.
fn parse_framed_claim_answer(frame: &[u8]) -> Result<ClaimAnswer, CallError> {
    let (head, body) = framed::split(frame).ok_or(CallError::MalformedRecord)?;
    let mut answer = parse_json_claim_answer(head).map_err(|_| CallError::MalformedRecord)?;
    match &mut answer.response {
        ClaimResponse::Completed { response } if response.body.is_empty() => {
            response.body = body.to_vec();
            Ok(answer)
        }
        _ => Err(CallError::MalformedRecord),
    }
}

/// Reads a renew, finalize or release answer: 200 is success, `409
/// lease_lost` is [`CallError::LeaseLost`].
pub fn parse_ack_answer(answer: &Answer) -> Result<(), CallError> {
    match answer.http()? {
        (200, _) => Ok(()),
        (409, body) => match serde_json::from_slice::<ProblemCodeOnly>(body) {
            Ok(p) if p.code == ProblemCode::LeaseLost => Err(CallError::LeaseLost),
            _ => Err(CallError::Status(409)),
        },
        (other, _) => Err(CallError::Status(other)),
    }
}

/// Reads an epoch answer.
pub fn parse_epoch_answer(answer: &Answer) -> Result<u64, CallError> {
    match answer.http()? {
        (200, body) => serde_json::from_slice::<EpochResponse>(body)
            .map(|answer| answer.epoch)
            .map_err(|_| CallError::Malformed),
        (other, _) => Err(CallError::Status(other)),
    }
}

/// Parses a `:status` header value.
pub fn parse_status(value: &[u8]) -> Option<u16> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use keyflight_protocol::wire::{ClaimResponse, WonHow};

    use super::*;

    fn at(status: Option<u16>, body: &[u8]) -> Answer {
        Answer::Received {
            status,
            body: body.to_vec(),
            framed: false,
        }
    }

    fn scope() -> Digest {
        Digest([0xab; 32])
    }

    #[test]
    fn paths_follow_api_v1() {
        let hex = "ab".repeat(32);
        let claim = StoreCall::Claim {
            scope: scope(),
            request: ClaimRequest {
                fingerprint: Digest([1; 32]),
                lease_ms: 30_000,
                wait_ms: Some(5000),
                retention_s: Some(86_400),
                previous: None,
                at_most_once: false,
            },
        };
        assert_eq!(claim.path(), format!("/v1/claims/{hex}"));
        let body: serde_json::Value = serde_json::from_slice(&claim.body()).unwrap();
        assert_eq!(body["fingerprint"], "01".repeat(32));
        assert_eq!(body["lease_ms"], 30_000);
        assert_eq!(body["wait_ms"], 5000);
        assert_eq!(body["retention_s"], 86_400);
        let release = StoreCall::Release {
            scope: scope(),
            request: ReleaseRequest {
                claim_id: uuid::Uuid::nil(),
                release_as: keyflight_protocol::wire::ReleaseAs::Cooldown,
                cooldown_ms: Some(2000),
                previous_scope: None,
            },
        };
        assert_eq!(release.path(), format!("/v1/claims/{hex}/release"));
        let body: serde_json::Value = serde_json::from_slice(&release.body()).unwrap();
        assert_eq!(body["as"], "cooldown");
        assert_eq!(body["cooldown_ms"], 2000);
    }

    #[test]
    fn claim_answers() {
        let won = br#"{"outcome":"won","claim_id":"00000000-0000-0000-0000-000000000000","fence":7,"how":"claimed","lease_ms":30000}"#;
        assert_eq!(
            parse_claim_answer(&at(Some(200), won)).map(|a| a.response),
            Ok(ClaimResponse::Won {
                claim_id: uuid::Uuid::nil(),
                fence: 7,
                how: WonHow::Claimed,
                lease_ms: 30_000
            })
        );
        assert_eq!(
            parse_claim_answer(&at(Some(200), br#"{"outcome":"conflict"}"#)).map(|a| a.response),
            Ok(ClaimResponse::Conflict)
        );
        assert_eq!(parse_claim_answer(&at(None, b"")), Err(CallError::NoAnswer));
        assert_eq!(
            parse_claim_answer(&at(Some(503), b"{}")),
            Err(CallError::Status(503))
        );
        assert_eq!(
            parse_claim_answer(&at(Some(200), b"not json")),
            Err(CallError::Malformed)
        );
        assert_eq!(
            parse_claim_answer(&at(Some(200), br#"{"outcome":"maybe"}"#)),
            Err(CallError::Malformed)
        );
        // A replay with its record's remaining retention, and one from a
        // store that does not send it (or sends something unreadable).
        let replay = |extra: &str| {
            let body = format!(
                r#"{{"outcome":"completed","response":{{"status":201,"headers":[],"body_b64":""}}{extra}}}"#
            );
            parse_claim_answer(&at(Some(200), body.as_bytes())).map(|a| a.record_expires_in_ms)
        };
        assert_eq!(replay(r#","record_expires_in_ms":1500"#), Ok(Some(1500)));
        assert_eq!(replay(""), Ok(None));
        assert_eq!(replay(r#","record_expires_in_ms":-1"#), Ok(None));
        for unreadable in [
            br#"{"outcome":"completed","response":{"status":200,"headers":[],"body_b64":"***"}}"#
                .as_slice(),
            br#"{"outcome":"completed","response":{"status":70000,"headers":[],"body_b64":""}}"#,
            br#"{"outcome":"completed"}"#,
        ] {
            assert_eq!(
                parse_claim_answer(&at(Some(200), unreadable)),
                Err(CallError::MalformedRecord)
            );
        }
    }

    /// A frame reads as the same replay its JSON would, body bytes as they came; a frame
    /// that is not a readable `completed` answer is a record that cannot be read.
    #[test]
    fn framed_claim_answers() {
        let head = br#"{"outcome":"completed","response":{"status":201,"headers":[["etag","\"1\""]],"body_b64":""},"record_expires_in_ms":900}"#;
        let body = b"\n\x00\xffraw";
        let frame = [head.as_slice(), b"\n", body].concat();
        let answer = parse_claim_answer(&Answer::framed(frame)).unwrap();
        assert_eq!(
            answer.response,
            ClaimResponse::Completed {
                response: keyflight_protocol::wire::StoredResponse::new(
                    201,
                    vec![("etag".into(), "\"1\"".into())],
                    body
                )
            }
        );
        assert_eq!(answer.record_expires_in_ms, Some(900));
        for damaged in [
            head.to_vec(),
            [br#"{"outcome":"completed","response":{"status":201,"headers":[],"body_b64":"AA=="}}"#.as_slice(), b"\n"].concat(),
            [br#"{"outcome":"conflict"}"#.as_slice(), b"\n"].concat(),
            [br#"{"outcome":"completed"}"#.as_slice(), b"\nbody"].concat(),
            b"\nbody".to_vec(),
        ] {
            assert_eq!(
                parse_claim_answer(&Answer::framed(damaged)),
                Err(CallError::MalformedRecord)
            );
        }
        // A frame is never read as a batch answer: the store frames single claims only.
        assert!(split_batch_answer(Answer::framed(br#"{"answers":[]}"#.to_vec()), 0).is_err());
    }

    #[test]
    fn ack_answers() {
        assert_eq!(parse_ack_answer(&at(Some(200), b"{}")), Ok(()));
        assert_eq!(
            parse_ack_answer(&at(
                Some(409),
                br#"{"type":"t","title":"t","status":409,"detail":"d","code":"lease_lost"}"#
            )),
            Err(CallError::LeaseLost)
        );
        assert_eq!(
            parse_ack_answer(&at(Some(409), b"?")),
            Err(CallError::Status(409))
        );
        assert_eq!(parse_ack_answer(&at(None, b"")), Err(CallError::NoAnswer));
        assert_eq!(
            parse_ack_answer(&at(Some(500), b"")),
            Err(CallError::Status(500))
        );
    }

    #[test]
    fn epoch_call_and_answers() {
        assert_eq!(parse_epoch_answer(&at(Some(200), br#"{"epoch":7}"#)), Ok(7));
        assert_eq!(
            parse_epoch_answer(&at(Some(200), br#"{"epoch":-1}"#)),
            Err(CallError::Malformed)
        );
        assert_eq!(
            parse_epoch_answer(&at(Some(404), b"")),
            Err(CallError::Status(404))
        );
        assert_eq!(parse_epoch_answer(&at(None, b"")), Err(CallError::NoAnswer));
    }

    #[test]
    fn a_call_the_host_refused_is_a_dispatch_error_whatever_was_asked() {
        assert_eq!(
            parse_claim_answer(&Answer::NotSent),
            Err(CallError::Dispatch)
        );
        assert_eq!(parse_ack_answer(&Answer::NotSent), Err(CallError::Dispatch));
        assert_eq!(
            parse_epoch_answer(&Answer::NotSent),
            Err(CallError::Dispatch)
        );
    }

    #[test]
    fn callouts_carry_what_the_host_needs() {
        let store = LeaseStore {
            cluster: "ls".into(),
            authority: "lease-store:8080".into(),
            token: Some("t0k".into()),
            token_env: crate::config::DEFAULT_TOKEN_ENV.into(),
            timeout: Duration::from_millis(1000),
            max_body_bytes: 1 << 20,
            coalesce_calls: true,
        };
        let epoch = Callout::Epoch {
            timeout: Duration::ZERO,
        };
        assert_eq!(
            epoch.headers(&store),
            vec![
                (":method", "GET".to_owned()),
                (":path", "/v1/epoch".to_owned()),
                (":authority", "lease-store:8080".to_owned()),
                ("content-type", "application/json".to_owned()),
                ("authorization", "Bearer t0k".to_owned()),
            ]
        );
        let mesh = LeaseStore {
            token: None,
            ..store.clone()
        };
        assert!(
            epoch
                .headers(&mesh)
                .iter()
                .all(|(name, _)| *name != "authorization"),
            "without a token, no authorization header"
        );
        assert_eq!(epoch.body(), None);
        assert_eq!(
            epoch.timeout(),
            Duration::from_millis(1),
            "a zero timeout would mean none at all"
        );
        let release = Callout::Call {
            call: StoreCall::Release {
                scope: scope(),
                request: ReleaseRequest {
                    claim_id: uuid::Uuid::nil(),
                    release_as: keyflight_protocol::wire::ReleaseAs::Forget,
                    cooldown_ms: None,
                    previous_scope: None,
                },
            },
            timeout: Duration::from_millis(250),
        };
        assert_eq!(release.method(), "POST");
        assert_eq!(
            release.path(),
            format!("/v1/claims/{}/release", "ab".repeat(32))
        );
        assert!(release.body().is_some_and(|b| !b.is_empty()));
        assert_eq!(release.timeout(), Duration::from_millis(250));
        assert!(
            release
                .headers(&store)
                .iter()
                .all(|(name, _)| *name != "accept"),
            "only a claim asks for frames"
        );
        let claim = Callout::Call {
            call: claim_call(),
            timeout: Duration::from_millis(250),
        };
        let accept = claim
            .headers(&store)
            .into_iter()
            .find(|(name, _)| *name == "accept")
            .map(|(_, value)| value);
        assert!(
            accept.as_deref().is_some_and(framed::accepted),
            "{accept:?}"
        );
        let batch = Callout::Batch {
            calls: vec![claim_call(), claim_call()],
            timeout: Duration::from_millis(250),
        };
        assert!(
            batch
                .headers(&store)
                .iter()
                .all(|(name, _)| *name != "accept"),
            "a batch answer carries JSON bodies only"
        );
    }

    fn claim_call() -> StoreCall {
        StoreCall::Claim {
            scope: scope(),
            request: ClaimRequest {
                fingerprint: Digest([1; 32]),
                lease_ms: 30_000,
                wait_ms: None,
                retention_s: None,
                previous: None,
                at_most_once: false,
            },
        }
    }

    #[test]
    fn status_header_parsing() {
        assert_eq!(parse_status(b"200"), Some(200));
        assert_eq!(parse_status(b"abc"), None);
        assert_eq!(parse_status(&[0xff]), None);
    }
}
