//! The mesh identity as the credential (`docs/configuration.md#caller-identity`): behind
//! its own sidecar (here: the test client on loopback, sending the XFCC header the sidecar
//! would add, from the sidecar's `127.0.0.6` where the store trusts only its default), the store lets in only allowlisted SPIFFE ids, and each workload reaches
//! only its own records.

#![allow(clippy::unwrap_used)]

use keyflight_lease_store::caller::record_scope;
use keyflight_protocol::Digest;
use keyflight_testkit::process::eventually;
use serde_json::json;

use crate::support::*;

pub const CHECKOUT: &str = "spiffe://cluster.local/ns/payments/sa/checkout";
pub const CART: &str = "spiffe://cluster.local/ns/shop/sa/cart";
const STRANGER: &str = "spiffe://cluster.local/ns/elsewhere/sa/intruder";

/// A store that trusts the XFCC of `trusted_peers` (the default without) and lets in
/// CHECKOUT and CART, with no bearer token.
async fn mesh_store_trusting(trusted_peers: Option<&str>) -> Server {
    let port = keyflight_testkit::process::free_port();
    let mut args = vec!["--trust-xfcc", "--workload", CHECKOUT, "--workload", CART];
    if let Some(peers) = trusted_peers {
        args.extend(["--xfcc-trusted-peers", peers]);
    }
    let mut command = serve_command(&cluster().url(), port, &args);
    command.env_remove("KEYFLIGHT_TOKEN");
    start_command(command, port).await
}

/// A client of `server` that connects from the inbound sidecar's address, `127.0.0.6`, which
/// the store trusts by default.
pub fn through_the_sidecar(server: &Server) -> Api {
    Api::bound(server.api.base.clone(), SIDECAR.into())
}

/// The address Istio's inbound sidecar connects from (`REDIRECT` mode).
const SIDECAR: [u8; 4] = [127, 0, 0, 6];

/// [`mesh_store_trusting`] `trusted_peers`.
async fn mesh_store(trusted_peers: &str) -> Server {
    mesh_store_trusting(Some(trusted_peers)).await
}

/// The XFCC value an Istio sidecar appends for a client certificate naming `id`.
fn xfcc(id: &str) -> String {
    format!("By=spiffe://cluster.local/ns/keyflight/sa/lease-store;Hash=3f2a;Subject=\"\";URI={id}")
}

/// POSTs `body` to `path` as the workload `id` (no bearer token).
pub async fn post_as(api: &Api, id: &str, path: &str, body: &serde_json::Value) -> Answer {
    let header = xfcc(id);
    api.send(reqwest::Method::POST, path, None, |r| {
        r.header("x-forwarded-client-cert", header).json(body)
    })
    .await
}

pub async fn claim_as(api: &Api, id: &str, scope: &str, fingerprint: &str, wait_ms: u64) -> Answer {
    post_as(
        api,
        id,
        &format!("/v1/claims/{scope}"),
        &json!({ "fingerprint": fingerprint, "lease_ms": 60_000, "wait_ms": wait_ms }),
    )
    .await
}

#[tokio::test]
async fn a_second_workload_cannot_read_renew_or_settle_the_first_ones_records() {
    let server = mesh_store("127.0.0.0/8,::1/128").await;
    let api = &server.api;
    let (scope, fingerprint) = (fresh_digest("mesh"), fresh_digest("fp"));

    let won = claim_as(api, CHECKOUT, &scope, &fingerprint, 0).await;
    assert_eq!(won.outcome(), "won", "{}", won.text);
    let claim_id = won.json["claim_id"].as_str().unwrap().to_owned();

    // CART naming the same scope, even with CHECKOUT's claim id, reaches no record of CHECKOUT's.
    for call in ["renew", "finalize", "release"] {
        let body = match call {
            "renew" => json!({ "claim_id": claim_id, "lease_ms": 60_000 }),
            "finalize" => {
                json!({ "claim_id": claim_id, "response": sample_response(), "replayable": true })
            }
            _ => json!({ "claim_id": claim_id, "as": "cooldown" }),
        };
        post_as(api, CART, &format!("/v1/claims/{scope}/{call}"), &body)
            .await
            .assert_problem(409, "lease_lost");
    }
    // …and its long-poll does not wait on CHECKOUT's running request: it wins its own record.
    let other = claim_as(api, CART, &scope, &fingerprint, 5_000).await;
    assert_eq!(other.outcome(), "won", "{}", other.text);
    assert_eq!(
        api.counter("keyflight_store_events_total{event=\"follower_wait\"}")
            .await,
        0
    );

    // CHECKOUT's lease was untouched: it records its answer, and replays it to itself only.
    let recorded = json!({ "status": 201, "headers": [], "body_b64": "c2VjcmV0" });
    let path = format!("/v1/claims/{scope}/finalize");
    let answer = post_as(
        api,
        CHECKOUT,
        &path,
        &json!({ "claim_id": claim_id, "response": recorded, "replayable": true }),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let replay = claim_as(api, CHECKOUT, &scope, &fingerprint, 0).await;
    assert_eq!(replay.outcome(), "completed");
    assert_eq!(replay.json["response"], recorded);
    let cart_again = claim_as(api, CART, &scope, &fingerprint, 0).await;
    assert_eq!(
        cart_again.outcome(),
        "in_progress",
        "CART sees its own pending record, never CHECKOUT's answer: {}",
        cart_again.text
    );

    // The operator finds each record under its record scope.
    let digest = Digest::from_hex(&scope).unwrap();
    let stored = record_scope(CHECKOUT, &digest).to_hex();
    let shown = server
        .admin
        .get(&format!("/v1/records/{stored}"), Some(ADMIN))
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text);
    assert_eq!(shown.json["state"], "completed");
    assert_eq!(
        shown.json["workload"], CHECKOUT,
        "the record names its workload"
    );
    let listed = server.admin.get("/v1/records?limit=10", Some(ADMIN)).await;
    let workloads: Vec<&str> = listed.json["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|record| record["workload"].as_str())
        .collect();
    assert!(
        workloads.contains(&CHECKOUT) && workloads.contains(&CART),
        "the list names each record's workload: {}",
        listed.text
    );
    server
        .admin
        .get(&format!("/v1/records/{scope}"), Some(ADMIN))
        .await
        .assert_problem(404, "not_found");

    let calls = |id: &str| format!("keyflight_store_caller_calls_total{{workload=\"{id}\"}}");
    assert_eq!(api.counter(&calls(CHECKOUT)).await, 3);
    assert_eq!(api.counter(&calls(CART)).await, 5);
}

#[tokio::test]
async fn an_unlisted_workload_is_refused_and_counted_as_other() {
    let server = mesh_store("127.0.0.0/8,::1/128").await;
    let api = &server.api;
    let scope = fresh_digest("stranger");
    let answer = claim_as(api, STRANGER, &scope, &fresh_digest("fp"), 0).await;
    let detail = answer.assert_problem(403, "forbidden");
    assert!(detail.contains("allowlist"), "{detail}");
    let epoch = api
        .send(reqwest::Method::GET, "/v1/epoch", None, |r| {
            r.header("x-forwarded-client-cert", xfcc(STRANGER))
        })
        .await;
    epoch.assert_problem(403, "forbidden");
    assert_eq!(
        api.counter(
            "keyflight_store_caller_refused_total{workload=\"other\",reason=\"not_allowed\"}"
        )
        .await,
        2
    );
    let metrics = api.get("/metrics", None).await.text;
    assert!(
        !metrics.contains(STRANGER),
        "an unlisted id never becomes a label"
    );
    // Nothing was written for it: a listed workload's claim of the same scope wins fresh.
    let listed = claim_as(api, CHECKOUT, &scope, &fresh_digest("fp"), 0).await;
    assert_eq!(listed.outcome(), "won");
}

#[tokio::test]
async fn a_call_without_an_identity_or_a_forged_one_is_refused() {
    let server = mesh_store("127.0.0.0/8,::1/128").await;
    let api = &server.api;
    let path = format!("/v1/claims/{}", fresh_digest("no-identity"));
    let body = json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 1000 });
    // No XFCC (the connection to the sidecar was not mTLS), and the old bearer token is no
    // credential here.
    api.post(&path, Some(TOKEN), &body)
        .await
        .assert_problem(401, "unauthorized");
    // Two identities in the sidecar's element, or two header lines: ambiguous.
    let two_uris = format!("URI={CHECKOUT};URI={CART}");
    let repeated = [xfcc(CHECKOUT), xfcc(CART)];
    for build in [
        Box::new(move |r: reqwest::RequestBuilder| r.header("x-forwarded-client-cert", two_uris))
            as Box<dyn FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder>,
        Box::new(move |r: reqwest::RequestBuilder| {
            r.header("x-forwarded-client-cert", repeated[0].clone())
                .header("x-forwarded-client-cert", repeated[1].clone())
        }),
    ] {
        let body = body.clone();
        api.send(reqwest::Method::POST, &path, None, |r| build(r).json(&body))
            .await
            .assert_problem(401, "unauthorized");
    }
    // A client's own XFCC element comes first; the sidecar's (last) one is what counts.
    let forged_first = format!("URI={CHECKOUT},{}", xfcc(STRANGER));
    api.send(reqwest::Method::POST, &path, None, |r| {
        r.header("x-forwarded-client-cert", forged_first)
            .json(&body)
    })
    .await
    .assert_problem(403, "forbidden");
}

#[tokio::test]
async fn xfcc_from_a_peer_that_is_not_the_sidecar_is_ignored() {
    // The test client connects from loopback; this store trusts only another address.
    let server = mesh_store("192.0.2.10/32").await;
    let answer = claim_as(
        &server.api,
        CHECKOUT,
        &fresh_digest("untrusted"),
        &fresh_digest("fp"),
        0,
    )
    .await;
    let detail = answer.assert_problem(401, "unauthorized");
    assert!(detail.contains("sidecar"), "{detail}");
    assert_eq!(
        server
            .api
            .counter(
                "keyflight_store_caller_refused_total{workload=\"other\",reason=\"untrusted_peer\"}"
            )
            .await,
        1
    );
}

#[tokio::test]
async fn by_default_only_the_inbound_sidecars_address_is_believed() {
    let server = mesh_store_trusting(None).await;
    // `kubectl port-forward`, or any process in the pod, connects from 127.0.0.1.
    let forwarded = claim_as(
        &server.api,
        CHECKOUT,
        &fresh_digest("port-forward"),
        &fresh_digest("fp"),
        0,
    )
    .await;
    let detail = forwarded.assert_problem(401, "unauthorized");
    assert!(detail.contains("sidecar"), "{detail}");
    // Istio's inbound sidecar (REDIRECT mode) connects from 127.0.0.6.
    let sidecar = through_the_sidecar(&server);
    let won = claim_as(
        &sidecar,
        CHECKOUT,
        &fresh_digest("sidecar"),
        &fresh_digest("fp"),
        0,
    )
    .await;
    assert_eq!(won.outcome(), "won", "{}", won.text);
}

#[tokio::test]
async fn trust_xfcc_needs_an_allowlist() {
    let port = keyflight_testkit::process::free_port();
    let mut command = serve_command(&cluster().url(), port, &["--trust-xfcc"]);
    command.env_remove("KEYFLIGHT_TOKEN");
    let output = command.output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--workload"), "{stderr}");
}

/// Replaces the file whole, as a Kubernetes ConfigMap volume does (write, then rename).
fn install(path: &std::path::Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// Whether `id`'s epoch call is let in (200) rather than refused as not allowlisted.
async fn admitted(api: &Api, id: &str) -> bool {
    let answer = api
        .send(reqwest::Method::GET, "/v1/epoch", None, |r| {
            r.header("x-forwarded-client-cert", xfcc(id))
        })
        .await;
    match answer.status {
        200 => true,
        403 => false,
        other => panic!("epoch as {id}: {other} {}", answer.text),
    }
}

#[tokio::test]
async fn the_workloads_file_onboards_and_removes_workloads_without_a_restart() {
    let dir = std::env::temp_dir().join(format!(
        "keyflight-workloads-{}-{}",
        std::process::id(),
        keyflight_testkit::process::free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("workloads");
    install(&file, &format!("# onboarded workloads\n{CHECKOUT}\n"));
    let port = keyflight_testkit::process::free_port();
    let mut command = serve_command(&cluster().url(), port, &["--trust-xfcc"]);
    command
        .env_remove("KEYFLIGHT_TOKEN")
        .env("KEYFLIGHT_WORKLOADS_FILE", &file);
    let server = start_command(command, port).await;
    let api = &through_the_sidecar(&server);
    let within = std::time::Duration::from_secs(10);
    assert!(admitted(api, CHECKOUT).await);
    assert!(!admitted(api, CART).await);

    install(&file, &format!("{CHECKOUT}\n{CART}\n"));
    eventually("CART admitted once listed", within, || admitted(api, CART)).await;
    let scope = fresh_digest("onboarded");
    let won = claim_as(api, CART, &scope, &fresh_digest("fp"), 0).await;
    assert_eq!(won.outcome(), "won", "{}", won.text);

    install(&file, &format!("{CART}\n"));
    eventually("CHECKOUT refused once removed", within, || async {
        !admitted(api, CHECKOUT).await
    })
    .await;
    claim_as(api, CHECKOUT, &scope, &fresh_digest("fp"), 0)
        .await
        .assert_problem(403, "forbidden");

    // A broken edit keeps the previous list (CART in, CHECKOUT out), and says so. The file
    // is checked on calls that carry an identity, so the wait makes one each time.
    install(&file, &format!("{CART}\n{CHECKOUT};URI=spiffe://forged\n"));
    eventually("the broken file is noticed", within, || async {
        admitted(api, CART).await
            && server
                .child
                .log()
                .contains("keeping the previous allowlist")
    })
    .await;
    assert!(admitted(api, CART).await);
    assert!(!admitted(api, CHECKOUT).await);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Sends, from the sidecar's address, the head of a finalize by `id` declaring a
/// `length` byte body, and no body: the body budget decides before the body arrives.
async fn finalize_head_as(store: &str, id: &str, length: usize) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt as _;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((SIDECAR, 0).into()).unwrap();
    let mut stream = socket.connect(store.parse().unwrap()).await.unwrap();
    let head = format!(
        "POST /v1/claims/{}/finalize HTTP/1.1\r\nhost: store\r\nx-forwarded-client-cert: {}\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n",
        fresh_digest("budget"),
        xfcc(id)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Whether the store answered `stream` (and how) before `wait` ran out.
async fn answered(stream: &mut tokio::net::TcpStream, wait: std::time::Duration) -> Option<String> {
    use tokio::io::AsyncReadExt as _;
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(wait, stream.read(&mut buf)).await {
        Ok(Ok(n)) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => None,
    }
}

#[tokio::test]
async fn workloads_behind_the_one_sidecar_have_a_body_budget_each() {
    const MIB: usize = 1024 * 1024;
    let port = keyflight_testkit::process::free_port();
    let (max, total, per_caller) = (2 * MIB, 4 * MIB, 2 * MIB);
    let mut command = serve_command(
        &cluster().url(),
        port,
        &[
            "--trust-xfcc",
            "--workload",
            CHECKOUT,
            "--workload",
            CART,
            "--max-body-bytes",
            &max.to_string(),
            "--max-body-bytes-in-flight",
            &total.to_string(),
            "--max-body-bytes-in-flight-per-caller",
            &per_caller.to_string(),
        ],
    );
    command.env_remove("KEYFLIGHT_TOKEN");
    let server = start_command(command, port).await;
    let store = server.api.base.trim_start_matches("http://").to_owned();
    let short = std::time::Duration::from_millis(500);

    // Every call comes from the same (sidecar) address; CHECKOUT spends its own share…
    let mut held = finalize_head_as(&store, CHECKOUT, 3 * MIB / 2).await;
    assert_eq!(answered(&mut held, short).await, None, "read, not shed");
    let mut shed = finalize_head_as(&store, CHECKOUT, 3 * MIB / 2).await;
    let answer = answered(&mut shed, std::time::Duration::from_secs(5))
        .await
        .expect("past CHECKOUT's share: answered at once");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    // …and CART, from the same address, still has its own.
    let mut other = finalize_head_as(&store, CART, 3 * MIB / 2).await;
    assert_eq!(
        answered(&mut other, short).await,
        None,
        "CART's finalize is read: the share is the workload's, not the address's"
    );
    drop((held, other));
}

/// A dual claim across a recipe change (`docs/records.md#claims-across-a-recipe-change`)
/// names its previous scope in the body: that scope is the caller's too, so the proxy still
/// on the old recipe — the same workload — finds the record, and another workload naming the
/// same digest does not.
#[tokio::test]
async fn a_dual_claims_previous_scope_is_in_the_callers_namespace() {
    let server = mesh_store("127.0.0.0/8,::1/128").await;
    let api = &server.api;
    let (new_scope, old_scope) = (fresh_digest("new-recipe"), fresh_digest("old-recipe"));
    let (new_fp, old_fp) = (fresh_digest("new-fp"), fresh_digest("old-fp"));

    let won = post_as(
        api,
        CHECKOUT,
        &format!("/v1/claims/{new_scope}"),
        &json!({
            "fingerprint": new_fp, "lease_ms": 60_000, "wait_ms": 0,
            "previous": { "scope": old_scope, "fingerprint": old_fp },
        }),
    )
    .await;
    assert_eq!(won.outcome(), "won", "{}", won.text);

    // The same workload's proxy on the old recipe follows the dual claim.
    let old_proxy = claim_as(api, CHECKOUT, &old_scope, &old_fp, 0).await;
    assert_eq!(old_proxy.outcome(), "in_progress", "{}", old_proxy.text);

    // Another workload naming the old scope reaches a record of its own.
    let other = claim_as(api, CART, &old_scope, &old_fp, 0).await;
    assert_eq!(other.outcome(), "won", "{}", other.text);
}

#[tokio::test]
async fn a_workload_past_its_share_of_parked_long_polls_leaves_room_for_another() {
    let port = keyflight_testkit::process::free_port();
    let args = [
        "--trust-xfcc",
        "--workload",
        CHECKOUT,
        "--workload",
        CART,
        "--xfcc-trusted-peers",
        "127.0.0.0/8,::1/128",
        "--max-waiters",
        "4",
        "--max-waiters-per-scope",
        "4",
    ];
    let mut command = serve_command(&cluster().url(), port, &args);
    command.env_remove("KEYFLIGHT_TOKEN");
    let server = start_command(command, port).await;
    let api = &server.api;
    let (busy, busy_fp) = (fresh_digest("greedy"), fresh_digest("fp"));
    assert_eq!(
        claim_as(api, CHECKOUT, &busy, &busy_fp, 0).await.outcome(),
        "won"
    );
    // The other workload calls: it is owed a share from now on.
    let (own, own_fp) = (fresh_digest("modest"), fresh_digest("fp"));
    assert_eq!(claim_as(api, CART, &own, &own_fp, 0).await.outcome(), "won");

    let follow = |id: &'static str, scope: &str, fingerprint: &str| {
        let (api, scope, fingerprint) = (api.clone(), scope.to_owned(), fingerprint.to_owned());
        tokio::spawn(async move { claim_as(&api, id, &scope, &fingerprint, 20_000).await })
    };
    // CHECKOUT parks its share of two, then borrows while more than a quarter stays free.
    let mut parked: Vec<_> = (0..4).map(|_| follow(CHECKOUT, &busy, &busy_fp)).collect();
    api.wait_counter("keyflight_store_shed_total{reason=\"longpoll_share\"}", 1)
        .await;
    api.wait_counter("keyflight_store_longpoll_waiting", 3)
        .await;

    parked.push(follow(CART, &own, &own_fp));
    api.wait_counter("keyflight_store_longpoll_waiting", 4)
        .await;
    assert_eq!(
        api.counter("keyflight_store_shed_total{reason=\"longpoll_total\"}")
            .await,
        0,
        "the last place was left to the other workload"
    );
    for follower in parked {
        follower.abort();
    }
}
