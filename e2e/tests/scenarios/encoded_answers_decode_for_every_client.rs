//! F8: a replay decodes for whichever client asks again. A guarded request goes upstream
//! with `accept-encoding: identity`, so a well-behaved upstream records a plain answer that
//! every client can read, whatever the first client accepted. An upstream that gzips
//! anyway has its `content-encoding` recorded with the body: the replay carries the label
//! to clients that accept gzip, and a client that does not gets 409
//! `response_not_replayable` instead of bytes it cannot decode.
//!
//! The demo upstream's `gzip=when_asked` gzips only when the request names gzip;
//! `gzip=always` gzips whatever the request says.

use std::io::Read as _;

use keyflight_e2e::{Reply, Stack, StackOptions};
use serde_json::{Value, json};

/// The body as JSON, gunzipped first when the reply says gzip.
fn decoded(reply: &Reply) -> Value {
    let bytes = match reply.header("content-encoding") {
        Some("gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(reply.body.as_slice())
                .read_to_end(&mut out)
                .unwrap_or_else(|e| panic!("not gzip ({e}): {reply}"));
            out
        }
        None => reply.body.clone(),
        Some(other) => panic!("unexpected content-encoding {other}: {reply}"),
    };
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("not JSON after decoding ({e}): {reply}"))
}

async fn pay(stack: &Stack, path: &str, key: Option<&str>, accept: Option<&str>) -> Reply {
    let mut post = stack.post(path).json(&json!({"amount": 12}));
    if let Some(key) = key {
        post = post.key(key);
    }
    if let Some(accept) = accept {
        post = post.header("accept-encoding", accept);
    }
    post.send().await
}

#[tokio::test]
async fn a_well_behaved_upstream_answers_plain_and_every_replay_reads() {
    let stack = Stack::start(StackOptions::default()).await;
    let path = "/payments?gzip=when_asked";

    // Unguarded, the upstream really does gzip for a client that asks.
    let unguarded = pay(&stack, path, None, Some("gzip")).await;
    assert_eq!(
        unguarded.header("content-encoding"),
        Some("gzip"),
        "{unguarded}"
    );
    assert_eq!(decoded(&unguarded)["accept_encoding"], "gzip");

    let first = pay(&stack, path, Some("k"), Some("gzip, br")).await;
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(
        first.header("content-encoding"),
        None,
        "recorded plain: {first}"
    );
    let answer = decoded(&first);
    assert_eq!(
        answer["accept_encoding"], "identity",
        "the upstream was asked for identity"
    );

    for accept in [None, Some("gzip"), Some("br;q=1, gzip;q=0")] {
        let replay = pay(&stack, path, Some("k"), accept).await;
        replay.assert_replayed();
        assert_eq!(decoded(&replay), answer, "accept-encoding {accept:?}");
    }
    assert_eq!(stack.upstream_executions().await, 2);
}

#[tokio::test]
async fn an_upstream_that_gzips_anyway_replays_only_to_clients_that_decode_gzip() {
    let stack = Stack::start(StackOptions::default()).await;
    let path = "/payments?gzip=always";

    let first = pay(&stack, path, Some("k"), Some("gzip")).await;
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(first.header("content-encoding"), Some("gzip"), "{first}");
    let answer = decoded(&first);

    let replay = pay(&stack, path, Some("k"), Some("deflate, gzip")).await;
    replay.assert_replayed();
    assert_eq!(
        replay.header("content-encoding"),
        Some("gzip"),
        "the label is replayed: {replay}"
    );
    assert_eq!(decoded(&replay), answer);

    for accept in [None, Some("br"), Some("gzip;q=0")] {
        pay(&stack, path, Some("k"), accept)
            .await
            .assert_problem(409, "response_not_replayable");
    }
    assert_eq!(stack.upstream_executions().await, 1);
}
