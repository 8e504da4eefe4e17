use keyflight_protocol::wire::{ClaimResponse, WonHow};

use std::time::Duration;

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ReleaseRequest, framed};

use super::*;
use crate::config::LeaseStore;

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
        [
            br#"{"outcome":"completed","response":{"status":201,"headers":[],"body_b64":"AA=="}}"#
                .as_slice(),
            b"\n",
        ]
        .concat(),
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
