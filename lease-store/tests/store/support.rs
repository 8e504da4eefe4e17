//! Shared set-up for the store-level integration tests.
//!
//! Each test binary starts ONE Postgres cluster (on first use) and migrates
//! it once; every test then builds its own `Store` (pools are tied to the
//! test's runtime) and works on scopes unique to it, so tests run in
//! parallel without seeing each other's rows.

#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;
use std::time::Duration;

use keyflight_lease_store::store::{BatchSettings, Store, StoreSettings};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ClaimRequest, ClaimResponse, FinalizeRequest, ReleaseAs, ReleaseRequest, StoredResponse,
};
use keyflight_testkit::pg::PgCluster;
use uuid::Uuid;

/// The binary's cluster, migrated.
pub fn cluster() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = PgCluster::start();
        migrate_blocking(&cluster.url());
        cluster
    })
}

/// Runs the migrations from a thread with its own runtime (callers may be
/// inside another runtime).
pub fn migrate_blocking(url: &str) {
    let url = url.to_owned();
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(keyflight_lease_store::store::migrate(&url))
            .unwrap()
    })
    .join()
    .unwrap();
}

/// How long after its lease ran out a test store's cleanup keeps a `pending` row.
pub const SETTLE_HORIZON: Duration = Duration::from_secs(60);

/// Settings for a test store on `url`.
pub fn settings(url: &str) -> StoreSettings {
    StoreSettings {
        database_url: url.to_owned(),
        pool_size: 16,
        pool_idle_timeout: Duration::from_secs(60),
        default_retention: Duration::from_secs(3600),
        default_cooldown: Duration::from_millis(300),
        statement_timeout: Duration::from_secs(2),
        takeover_grace: Duration::ZERO,
        settle_horizon: SETTLE_HORIZON,
        batch: BatchSettings::default(),
        partitions: Vec::new(),
    }
}

/// A fresh store on the binary's cluster.
pub async fn store() -> Store {
    Store::connect(&settings(&cluster().url())).await.unwrap()
}

/// A scope no other test uses.
pub fn fresh_scope() -> Digest {
    Digest::of(Uuid::now_v7().as_bytes())
}

/// A fingerprint derived from a label (same label, same fingerprint).
pub fn fingerprint(label: &str) -> Digest {
    Digest::of(label.as_bytes())
}

/// A claim request with no wait and the default retention.
pub fn claim_req(fingerprint: Digest, lease_ms: u64) -> ClaimRequest {
    ClaimRequest {
        fingerprint,
        lease_ms,
        wait_ms: None,
        retention_s: None,
        previous: None,
        at_most_once: false,
    }
}

/// An answer with an `unknown` answer's fence dropped, for tests about the state alone.
pub fn fenceless(response: ClaimResponse) -> ClaimResponse {
    match response {
        ClaimResponse::Unknown { .. } => ClaimResponse::Unknown { fence: None },
        other => other,
    }
}

/// Claims and insists on winning; returns `(claim_id, fence, how)`.
pub async fn must_win(
    store: &Store,
    scope: &Digest,
    req: &ClaimRequest,
) -> (Uuid, i64, keyflight_protocol::wire::WonHow) {
    match store.claim(scope, req).await.unwrap().response {
        ClaimResponse::Won {
            claim_id,
            fence,
            how,
            ..
        } => (claim_id, fence, how),
        other => panic!("expected to win, got {other:?}"),
    }
}

/// A finalize request recording `200 {"ok":true}` with a content-type header.
pub fn finalize_ok(claim_id: Uuid) -> FinalizeRequest {
    FinalizeRequest {
        claim_id,
        response: sample_response(),
        replayable: true,
        previous_scope: None,
    }
}

/// The response `finalize_ok` records.
pub fn sample_response() -> StoredResponse {
    StoredResponse::new(
        201,
        vec![
            ("content-type".into(), "application/json".into()),
            ("location".into(), "/orders/7".into()),
        ],
        b"{\"ok\":true}\x00\xff",
    )
}

/// A raw connection for checking rows directly.
pub async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Waits (polling the database's own clock) until the scope's lease or
/// cooldown has run out.
pub async fn wait_for_lease_expiry(client: &tokio_postgres::Client, scope: &Digest) {
    keyflight_testkit::process::eventually(
        "the lease or cooldown ran out",
        Duration::from_secs(30),
        || async {
            client
                .query_one(
                    "SELECT lease_expires_at < clock_timestamp() FROM keyflight_records WHERE scope = $1",
                    &[&scope.0.as_slice()],
                )
                .await
                .unwrap()
                .get::<_, bool>(0)
        },
    )
    .await;
}

/// The row's `(state, fence, claim_id)`.
pub async fn row_state(
    client: &tokio_postgres::Client,
    scope: &Digest,
) -> Option<(String, i64, Option<Uuid>)> {
    client
        .query_opt(
            "SELECT state, fence, claim_id FROM keyflight_records WHERE scope = $1",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
}

/// Moves a record past its retention by rewriting its timestamps, as if its
/// retention had run out (a claim cannot ask for a zero retention).
pub async fn age_past_retention(client: &tokio_postgres::Client, scope: &Digest) {
    let aged = client
        .execute(
            "UPDATE keyflight_records
                SET expires_at = clock_timestamp() - interval '1 second',
                    created_at = clock_timestamp() - interval '1 second' - retention
              WHERE scope = $1",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap();
    assert_eq!(aged, 1, "no record to age");
}

/// A store whose claims and finalizes each have ONE batch worker, so a test can
/// hold that worker in the database and queue calls behind it; its connections
/// carry their own `application_name` (returned), so the test can see them in
/// `pg_stat_activity` apart from other tests' stores.
pub async fn one_worker_store() -> (Store, String) {
    let app = format!("batch-test-{}", Uuid::now_v7().simple());
    let url = format!("{}?application_name={app}", cluster().url());
    let settings = StoreSettings {
        batch: BatchSettings {
            workers: 1,
            max_items: 64,
        },
        ..settings(&url)
    };
    (Store::connect(&settings).await.unwrap(), app)
}

/// Waits until `n` calls of `kind` are queued for the store's batch worker.
pub async fn wait_for_queued(
    store: &Store,
    kind: keyflight_lease_store::store::BatchKind,
    n: usize,
) {
    keyflight_testkit::process::eventually(
        &format!("{n} {kind:?} calls queued for a batch"),
        Duration::from_secs(20),
        || async { store.batch_queued(kind) == n },
    )
    .await;
}

/// An open transaction holding `scope`'s record locked (`FOR UPDATE`): a statement that
/// changes the record waits for it until it commits or rolls back.
pub async fn lock_record(scope: &Digest) -> tokio_postgres::Client {
    let db = raw_client(&cluster().url()).await;
    db.batch_execute("BEGIN").await.unwrap();
    db.execute(
        "SELECT 1 FROM keyflight_records WHERE scope = $1 FOR UPDATE",
        &[&scope.0.as_slice()],
    )
    .await
    .unwrap();
    db
}

/// Releases `claim_id`'s record on `scope` as a failure cooling down for `cooldown_ms`.
pub async fn release_as_cooldown(store: &Store, scope: &Digest, claim_id: Uuid, cooldown_ms: u64) {
    store
        .release(
            scope,
            &ReleaseRequest {
                claim_id,
                release_as: ReleaseAs::Cooldown,
                cooldown_ms: Some(cooldown_ms),
                previous_scope: None,
            },
        )
        .await
        .unwrap();
}

/// A pending row for `scope`, as a claim's insert writes it.
const INSERT_PENDING_ROW: &str = "INSERT INTO keyflight_records
     (scope, state, fingerprint, claim_id, fence, lease_expires_at,
      created_at, retention, expires_at, updated_at)
 VALUES ($1, 'pending', $1, gen_random_uuid(), nextval('keyflight_fence_seq'),
         now() + interval '1 minute', now(), interval '1 hour',
         now() + interval '1 hour', now())";

/// Inserts a live `pending` row on `scope` through `client` (inside whatever
/// transaction it has open: uncommitted, the row makes every claim of the scope wait).
pub async fn insert_pending_row(client: &tokio_postgres::Client, scope: &Digest) {
    client
        .execute(INSERT_PENDING_ROW, &[&scope.0.as_slice()])
        .await
        .unwrap();
}

/// [`insert_pending_row`] unless `scope` has a row already (then nothing).
pub async fn insert_pending_row_unless_present(
    client: &tokio_postgres::Client,
    scope: &Digest,
) -> Result<u64, tokio_postgres::Error> {
    let sql = format!("{INSERT_PENDING_ROW} ON CONFLICT (scope) DO NOTHING");
    client.execute(&sql, &[&scope.0.as_slice()]).await
}

/// `pg_stat_database.deadlocks` of the test database.
pub async fn deadlocks(db: &tokio_postgres::Client) -> i64 {
    db.query_one(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}
