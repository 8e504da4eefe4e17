//! The ledger inside an sqlx transaction (feature `sqlx`), against a real throwaway
//! Postgres: the early check answers a re-run and refuses another body, a run arriving
//! while another holds the operation waits for it and gets its answer, and reconcile answers
//! from what committed.

#![cfg(feature = "sqlx")]
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keyflight_effects::sqlx::{begin, commit, install, reconcile};
use keyflight_effects::{Begun, Committed, Error, Operation, Reconciled};
use keyflight_testkit::pg::PgCluster;
use serde_json::{Value, json};
use sqlx::{Connection as _, PgConnection};

/// The binary's cluster, with a table standing for a service's own writes.
fn cluster() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = PgCluster::start();
        cluster.psql("CREATE TABLE payments (scope text NOT NULL, fence bigint NOT NULL)");
        cluster
    })
}

async fn connect() -> PgConnection {
    let mut connection = PgConnection::connect(&cluster().url()).await.unwrap();
    install(&mut connection).await.unwrap();
    connection
}

/// A scope no other test uses.
fn fresh_scope() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos:032x}{:032x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn run(scope: &str, fence: i64) -> Operation {
    Operation::new(scope, &fence.to_string()).unwrap()
}

fn answer(fence: i64) -> Value {
    json!({"status": 201, "body": {"paid_by_fence": fence}})
}

/// One run the way a handler does it: the early check, the provider's call (counted in
/// `provider`), its write, the record. The body is the fingerprint.
async fn pay(
    connection: &mut PgConnection,
    operation: &Operation,
    body: &str,
    provider: &AtomicU64,
) -> Result<Committed, Error> {
    let mut tx = connection.begin().await.unwrap();
    if let Begun::Earlier { fence, answer } = begin(&mut tx, operation, body).await? {
        return Ok(Committed::Earlier { fence, answer });
    }
    provider.fetch_add(1, Ordering::Relaxed);
    sqlx::query("INSERT INTO payments (scope, fence) VALUES ($1, $2)")
        .bind(operation.scope())
        .bind(operation.fence())
        .execute(&mut *tx)
        .await
        .unwrap();
    commit(tx, operation, body, &answer(operation.fence())).await
}

/// The fences whose payment row committed for `scope`.
async fn payments(connection: &mut PgConnection, scope: &str) -> Vec<i64> {
    sqlx::query_scalar("SELECT fence FROM payments WHERE scope = $1 ORDER BY fence")
        .bind(scope)
        .fetch_all(connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_rerun_is_answered_early_and_another_body_is_a_conflict() {
    let mut connection = connect().await;
    let scope = fresh_scope();
    let provider = AtomicU64::new(0);
    let first = pay(&mut connection, &run(&scope, 5), "pay A", &provider).await;
    assert_eq!(first.unwrap(), Committed::Now);
    let rerun = pay(&mut connection, &run(&scope, 9), "pay A", &provider).await;
    assert_eq!(
        rerun.unwrap(),
        Committed::Earlier {
            fence: 5,
            answer: answer(5)
        }
    );
    let other = pay(&mut connection, &run(&scope, 11), "pay B", &provider).await;
    assert!(
        matches!(other, Err(Error::Conflict { fence: 5 })),
        "{other:?}"
    );
    assert_eq!(provider.load(Ordering::Relaxed), 1);
    assert_eq!(payments(&mut connection, &scope).await, [5]);
}

#[tokio::test]
async fn a_run_that_rolled_back_lets_the_next_one_run() {
    let mut connection = connect().await;
    let scope = fresh_scope();
    {
        let mut tx = connection.begin().await.unwrap();
        let begun = begin(&mut tx, &run(&scope, 1), "pay A").await.unwrap();
        assert_eq!(begun, Begun::Run);
        tx.rollback().await.unwrap();
    }
    let provider = AtomicU64::new(0);
    let next = pay(&mut connection, &run(&scope, 2), "pay A", &provider).await;
    assert_eq!(next.unwrap(), Committed::Now);
    assert_eq!(payments(&mut connection, &scope).await, [2]);
}

#[tokio::test]
async fn reconcile_answers_what_committed_and_fences_out_what_did_not() {
    let mut connection = connect().await;
    let provider = AtomicU64::new(0);
    let paid = fresh_scope();
    pay(&mut connection, &run(&paid, 5), "pay A", &provider)
        .await
        .unwrap();
    assert_eq!(
        reconcile(&mut connection, &run(&paid, 5)).await.unwrap(),
        Reconciled::Committed {
            fence: 5,
            answer: answer(5)
        }
    );
    let unpaid = fresh_scope();
    assert_eq!(
        reconcile(&mut connection, &run(&unpaid, 5)).await.unwrap(),
        Reconciled::Absent
    );
    let late = pay(&mut connection, &run(&unpaid, 5), "pay A", &provider).await;
    assert!(
        matches!(late, Err(Error::Fenced { through: 5 })),
        "{late:?}"
    );
    assert_eq!(payments(&mut connection, &unpaid).await, [0_i64; 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_arriving_while_one_holds_the_operation_waits_and_gets_its_answer() {
    let scope = fresh_scope();
    let mut first = connect().await;
    let mut first_tx = first.begin().await.unwrap();
    let begun = begin(&mut first_tx, &run(&scope, 1), "pay A")
        .await
        .unwrap();
    assert_eq!(begun, Begun::Run);

    let mut second = connect().await;
    let second_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut second)
        .await
        .unwrap();
    let provider = std::sync::Arc::new(AtomicU64::new(0));
    let second_run = tokio::spawn({
        let (scope, provider) = (scope.clone(), provider.clone());
        async move { pay(&mut second, &run(&scope, 2), "pay A", &provider).await }
    });
    wait_until_blocked_on_a_lock(&mut connect().await, second_pid).await;
    assert!(!second_run.is_finished());

    let recorded = commit(first_tx, &run(&scope, 1), "pay A", &answer(1)).await;
    assert_eq!(recorded.unwrap(), Committed::Now);
    assert_eq!(
        second_run.await.unwrap().unwrap(),
        Committed::Earlier {
            fence: 1,
            answer: answer(1)
        }
    );
    assert_eq!(provider.load(Ordering::Relaxed), 0);
}

/// Waits until backend `pid` waits on a lock (the second run on the first's row).
async fn wait_until_blocked_on_a_lock(connection: &mut PgConnection, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
        )
        .bind(pid)
        .fetch_one(&mut *connection)
        .await
        .unwrap();
        if waiting == 1 {
            return;
        }
        assert!(Instant::now() < deadline, "backend {pid} never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
