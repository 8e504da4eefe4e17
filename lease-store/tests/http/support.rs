//! Shared set-up for the HTTP-level tests: the real `lease-store` binary
//! against a real Postgres.
//!
//! Each test binary starts ONE Postgres cluster on first use and migrates it
//! with `lease-store migrate` (so that subcommand is exercised too). Each test
//! starts its own `lease-store serve` process(es) on free ports, so counters
//! in `/metrics` belong to that test alone, and works on scopes unique to it.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use keyflight_protocol::Digest;
use keyflight_testkit::pg::{PgCluster, wait_for_lock_waits};
use keyflight_testkit::process::{ChildGuard, free_port, wait_http_ok};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// The filter's bearer token in these tests.
pub const TOKEN: &str = "filter-token-for-tests";
/// The admin token in these tests.
pub const ADMIN: &str = "admin-token-for-tests";

/// Path of the binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_lease-store");

/// The binary's shared, migrated cluster.
pub fn cluster() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = PgCluster::start();
        migrate(&cluster.url());
        cluster
    })
}

/// Runs `lease-store migrate` against `url`; panics with its output on failure.
pub fn migrate(url: &str) {
    let output = Command::new(BIN)
        .arg("migrate")
        .env("KEYFLIGHT_DATABASE_URL", url)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "lease-store migrate failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `lease-store <subcommand>` on `database_url`, with no inherited KEYFLIGHT_* settings.
pub fn bin_command(subcommand: &str, database_url: &str) -> Command {
    let mut command = Command::new(BIN);
    for (name, _) in std::env::vars() {
        if name.starts_with("KEYFLIGHT_") {
            command.env_remove(name);
        }
    }
    command
        .arg(subcommand)
        .env("KEYFLIGHT_DATABASE_URL", database_url);
    command
}

/// A `lease-store serve` command on `port` with the test tokens, no inherited KEYFLIGHT_*
/// settings, its admin listener on a free port of its own (`KEYFLIGHT_ADMIN_LISTEN`), and
/// cleartext to the test clusters allowed (they offer no TLS but the one in `tls.rs`).
pub fn serve_command(database_url: &str, port: u16, extra_args: &[&str]) -> Command {
    let mut command = bin_command("serve", database_url);
    command
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .args(extra_args)
        .env(
            "KEYFLIGHT_ADMIN_LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env("KEYFLIGHT_TOKEN", TOKEN)
        .env("KEYFLIGHT_ADMIN_TOKEN", ADMIN)
        .env("KEYFLIGHT_ALLOW_PLAINTEXT_DATABASE", "true")
        .env("RUST_LOG", "info");
    command
}

/// A running `lease-store serve` and a client for each of its listeners.
pub struct Server {
    /// The process (killed on drop).
    pub child: ChildGuard,
    /// Its data-plane API.
    pub api: Api,
    /// Its admin API (`/v1/records…`, on its own listener).
    pub admin: Api,
}

/// Starts `serve` on the binary's cluster and waits until `/readyz` answers 200.
pub async fn start_server(extra_args: &[&str]) -> Server {
    start_server_on(&cluster().url(), extra_args).await
}

/// Starts `serve` on `database_url` and waits until `/readyz` answers 200.
pub async fn start_server_on(database_url: &str, extra_args: &[&str]) -> Server {
    let port = free_port();
    start_command(serve_command(database_url, port, extra_args), port).await
}

/// Runs `command` (a [`serve_command`] for `port`) and waits until `/readyz` answers 200.
pub async fn start_command(command: Command, port: u16) -> Server {
    let admin_listen = command
        .get_envs()
        .find_map(|(name, value)| (name == "KEYFLIGHT_ADMIN_LISTEN").then_some(value?))
        .and_then(|value| value.to_str())
        .expect("a serve_command names its admin listener")
        .to_owned();
    let mut child = ChildGuard::spawn("lease-store", command);
    let base = format!("http://127.0.0.1:{port}");
    wait_http_ok(
        &format!("{base}/readyz"),
        Duration::from_secs(30),
        Some(&mut child),
    )
    .await;
    Server {
        child,
        api: Api::new(base),
        admin: Api::new(format!("http://{admin_listen}")),
    }
}

/// A digest no other test uses.
pub fn fresh_digest(label: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Digest::of(format!("{label}/{}/{nanos}/{n}", std::process::id()).as_bytes()).to_hex()
}

/// One HTTP answer, body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body as text.
    pub text: String,
    /// The body as JSON (`Null` when it is not JSON).
    pub json: Value,
}

impl Answer {
    /// Asserts a problem+json answer with `status` and `code`; returns its detail.
    pub fn assert_problem(&self, status: u16, code: &str) -> String {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        assert_eq!(
            self.headers
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/problem+json"),
            "problem answers are problem+json; body: {}",
            self.text
        );
        assert_eq!(self.json["code"], code, "body: {}", self.text);
        assert_eq!(self.json["status"], status, "body: {}", self.text);
        assert!(self.json["type"].is_string() && self.json["title"].is_string());
        self.json["detail"].as_str().unwrap().to_owned()
    }

    /// The `outcome` of a claim answer (asserting 200).
    pub fn outcome(&self) -> &str {
        assert_eq!(self.status, 200, "claim failed: {}", self.text);
        self.json["outcome"].as_str().unwrap()
    }
}

/// A small client for one server.
#[derive(Clone)]
pub struct Api {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    http: reqwest::Client,
}

impl Api {
    /// A client for `base`.
    pub fn new(base: String) -> Self {
        Api {
            base,
            http: reqwest::Client::new(),
        }
    }

    /// A client for `base` whose connections come from `local` (a loopback address such as
    /// the mesh sidecar's `127.0.0.6`).
    pub fn bound(base: String, local: std::net::IpAddr) -> Self {
        Api {
            base,
            http: reqwest::Client::builder()
                .local_address(local)
                .build()
                .unwrap(),
        }
    }

    /// Sends a request; `token` becomes the bearer token.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        build: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Answer {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = build(request).send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            text,
            json,
        }
    }

    /// POSTs a JSON body with `token`.
    pub async fn post(&self, path: &str, token: Option<&str>, body: &Value) -> Answer {
        self.send(reqwest::Method::POST, path, token, |r| r.json(body))
            .await
    }

    /// POSTs raw bytes as `application/json` with the filter token.
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> Answer {
        self.send(reqwest::Method::POST, path, Some(TOKEN), |r| {
            r.header("content-type", "application/json").body(body)
        })
        .await
    }

    /// GETs with `token`.
    pub async fn get(&self, path: &str, token: Option<&str>) -> Answer {
        self.send(reqwest::Method::GET, path, token, |r| r).await
    }

    /// Claims `scope` with the filter token.
    pub async fn claim(&self, scope: &str, fingerprint: &str, wait_ms: u64) -> Answer {
        self.post(
            &format!("/v1/claims/{scope}"),
            Some(TOKEN),
            &json!({ "fingerprint": fingerprint, "lease_ms": 60_000, "wait_ms": wait_ms }),
        )
        .await
    }

    /// Claims a fresh scope and asserts the claim was won; returns (scope, fingerprint, claim_id).
    pub async fn win(&self, label: &str) -> (String, String, String) {
        let scope = fresh_digest(label);
        let fingerprint = fresh_digest("fingerprint");
        let answer = self.claim(&scope, &fingerprint, 0).await;
        assert_eq!(answer.outcome(), "won", "{}", answer.text);
        let claim_id = answer.json["claim_id"].as_str().unwrap().to_owned();
        (scope, fingerprint, claim_id)
    }

    /// Releases `claim_id`'s lease on `scope` as `unknown`, as a lapsed at-most-once claim
    /// would be; asserts 200.
    pub async fn release_unknown(&self, scope: &str, claim_id: &str) {
        let released = self
            .post(
                &format!("/v1/claims/{scope}/release"),
                Some(TOKEN),
                &json!({ "claim_id": claim_id, "as": "unknown" }),
            )
            .await;
        assert_eq!(released.status, 200, "{}", released.text);
    }

    /// Finalizes with a small JSON response; asserts 200.
    pub async fn finalize(&self, scope: &str, claim_id: &str) -> Value {
        let response = sample_response();
        self.finalize_with(scope, claim_id, &response).await;
        response
    }

    /// Finalizes with `response` (a wire `StoredResponse` as JSON), replayable; asserts 200.
    pub async fn finalize_with(&self, scope: &str, claim_id: &str, response: &Value) {
        let answer = self.try_finalize(scope, claim_id, response).await;
        assert_eq!(answer.status, 200, "finalize failed: {}", answer.text);
    }

    /// Finalizes with `response`, replayable, and returns whatever the store answered.
    pub async fn try_finalize(&self, scope: &str, claim_id: &str, response: &Value) -> Answer {
        self.post(
            &format!("/v1/claims/{scope}/finalize"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "response": response, "replayable": true }),
        )
        .await
    }

    /// The value of a counter line in `/metrics` (0 when absent).
    pub async fn counter(&self, series: &str) -> u64 {
        let metrics = self.get("/metrics", None).await;
        assert_eq!(metrics.status, 200);
        series_value(&metrics.text, series)
    }

    /// [`Api::counter`], or `None` while the store resets the connection (at its
    /// connection cap).
    pub async fn try_counter(&self, series: &str) -> Option<u64> {
        let metrics = reqwest::get(format!("{}/metrics", self.base)).await.ok()?;
        Some(series_value(&metrics.text().await.ok()?, series))
    }

    /// Polls `/metrics` until `series` reaches `at_least` (paced; panics after 60 s: a
    /// liveness bound, wide enough for a 2-core machine busy with other builds).
    pub async fn wait_counter(&self, series: &str, at_least: u64) {
        keyflight_testkit::process::eventually(
            &format!("{series} >= {at_least}"),
            Duration::from_secs(60),
            || async { self.counter(series).await >= at_least },
        )
        .await;
    }
}

/// The value of `series` in a `/metrics` text; 0 while it has not been counted.
fn series_value(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// A follower long-polling on `follower_side` is woken, well before its 30 s budget, by a
/// finalize on `winner_side`: only the `NOTIFY`, heard on `follower_side`'s `LISTEN`
/// connection, explains that (L4).
pub async fn assert_long_poll_woken_across(follower_side: &Api, winner_side: &Api) {
    let scope = fresh_digest("cross-replica");
    let fingerprint = fresh_digest("fp");

    let won = winner_side.claim(&scope, &fingerprint, 0).await;
    assert_eq!(won.outcome(), "won", "{}", won.text);
    let claim_id = won.json["claim_id"].as_str().unwrap().to_owned();

    let follower = tokio::spawn({
        let api = follower_side.clone();
        let (scope, fingerprint) = (scope.clone(), fingerprint.clone());
        async move {
            let answer = api.claim(&scope, &fingerprint, 30_000).await;
            (answer, Instant::now())
        }
    });
    // The follower's replica counts `follower_wait` just before the follower starts waiting.
    follower_side
        .wait_counter("keyflight_store_events_total{event=\"follower_wait\"}", 1)
        .await;
    // …and /metrics shows it parked.
    follower_side
        .wait_counter("keyflight_store_longpoll_waiting", 1)
        .await;
    assert!(
        !follower.is_finished(),
        "the follower must still be waiting"
    );

    let finalized_at = Instant::now();
    let recorded = winner_side.finalize(&scope, &claim_id).await;
    let (answer, answered_at) = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .expect("the follower was never woken")
        .unwrap();
    let latency = answered_at.duration_since(finalized_at);
    println!("follower woke {latency:?} after the finalize on the other replica");
    assert_eq!(answer.outcome(), "completed");
    assert_eq!(answer.json["response"], recorded);
    assert!(
        latency < Duration::from_secs(2),
        "woken after {latency:?}: NOTIFY did not reach the other replica"
    );
    assert_eq!(
        follower_side
            .counter("keyflight_store_longpoll_waiting")
            .await,
        0,
        "no long-poll parked any more"
    );
}

/// A plain client on the database at `url`, its connection driven in the background.
pub async fn db_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A store's one claim worker (`--batch-workers 1`) held busy, so that the claims sent
/// meanwhile queue and run as one group-commit batch once it opens: the worker runs a claim
/// of a scope this gate's transaction is inserting, which waits for that row.
pub struct ClaimGate {
    db: tokio_postgres::Client,
    held: tokio::task::JoinHandle<Answer>,
}

impl ClaimGate {
    /// Holds the claim worker of `api`'s store, whose database is `database_url` and whose
    /// connections are named `app` (`application_name`; the store's default is
    /// `keyflight-lease-store`).
    pub async fn hold(api: &Api, database_url: &str, app: &str) -> ClaimGate {
        let db = db_client(database_url).await;
        let gated = fresh_digest("gate");
        db.batch_execute(&format!(
            "BEGIN; INSERT INTO keyflight_records
               (scope, state, fingerprint, claim_id, fence, lease_expires_at,
                created_at, retention, expires_at, updated_at)
             VALUES (decode('{gated}', 'hex'), 'pending', decode('{gated}', 'hex'),
                     gen_random_uuid(), nextval('keyflight_fence_seq'),
                     now() + interval '1 minute', now(), interval '1 hour',
                     now() + interval '1 hour', now())"
        ))
        .await
        .unwrap();
        let held = tokio::spawn({
            let api = api.clone();
            async move { api.claim(&gated, &fresh_digest("fp"), 0).await }
        });
        // A transaction's view of `pg_stat_activity` is frozen: watch from another connection.
        let watcher = db_client(database_url).await;
        wait_for_lock_waits(&watcher, app, 1).await;
        ClaimGate { db, held }
    }

    /// Rolls the gate's row back: the held claim wins its scope, and the worker takes
    /// whatever queued meanwhile.
    pub async fn open(self) {
        self.db.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(self.held.await.unwrap().outcome(), "won");
    }
}

/// The response the tests record.
pub fn sample_response() -> Value {
    json!({
        "status": 201,
        "headers": [["content-type", "application/json"], ["etag", "\"v1\""]],
        "body_b64": "eyJpZCI6NDJ9"
    })
}

/// A POST sent on a connection of its own, for a test to hang up while the server works on
/// it: a proxy that timed out or was killed mid-call.
pub struct OpenCall {
    stream: tokio::net::TcpStream,
    server_port: u16,
}

impl OpenCall {
    /// Sends `POST path` with `body` and the filter token to the server on `server_port`,
    /// without reading the answer.
    pub async fn post(server_port: u16, path: &str, body: &Value) -> OpenCall {
        use tokio::io::AsyncWriteExt;
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{server_port}\r\n\
             authorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server_port))
            .await
            .unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        OpenCall {
            stream,
            server_port,
        }
    }

    /// Closes the connection and returns once the server closed its end too. Only then has
    /// the server dropped the call's handler, so whatever it was waiting for finds no caller.
    pub async fn hang_up(self) {
        let client_port = self.stream.local_addr().unwrap().port();
        drop(self.stream);
        let server_port = self.server_port;
        keyflight_testkit::process::eventually(
            "the server closed the hung-up connection",
            Duration::from_secs(10),
            || async move { !tcp_connection_open(server_port, client_port) },
        )
        .await;
    }
}

/// Whether the kernel still has the server's end of the connection from `client_port` to
/// `server_port` (in `CLOSE_WAIT` once the client hung up, until the server closes it).
fn tcp_connection_open(server_port: u16, client_port: u16) -> bool {
    let port_of = |address: &str| {
        address
            .rsplit_once(':')
            .and_then(|(_, port)| u16::from_str_radix(port, 16).ok())
    };
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() > 2
                    && port_of(fields[1]) == Some(server_port)
                    && port_of(fields[2]) == Some(client_port)
            })
    })
}
