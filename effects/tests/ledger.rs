//! The ledger against a real throwaway Postgres: a first run commits its writes with its
//! answer, every later run (any fence) gets that answer and keeps none of its writes, and
//! of runs that race, exactly one commits its effect.

#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keyflight_effects::{Begun, Committed, Error, Operation, begin, commit, install};
use keyflight_testkit::pg::PgCluster;
use serde_json::{Value, json};
use tokio_postgres::{Client, NoTls};

/// The binary's cluster, with the ledger and a table standing for a service's own writes.
fn cluster() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = PgCluster::start();
        cluster.psql("CREATE TABLE payments (scope text NOT NULL, fence bigint NOT NULL)");
        cluster
    })
}

async fn connect() -> Client {
    let (client, connection) = tokio_postgres::connect(&cluster().url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    install(&client).await.unwrap();
    client
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

/// One run of the operation: its write, then the ledger.
async fn pay(client: &mut Client, operation: &Operation) -> Committed {
    let tx = client.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO payments (scope, fence) VALUES ($1, $2)",
        &[&operation.scope(), &operation.fence()],
    )
    .await
    .unwrap();
    commit(tx, operation, "pay", &answer(operation.fence()))
        .await
        .unwrap()
}

async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// The fences whose payment row committed for `scope`.
async fn payments(client: &Client, scope: &str) -> Vec<i64> {
    client
        .query(
            "SELECT fence FROM payments WHERE scope = $1 ORDER BY fence",
            &[&scope],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn the_first_run_commits_its_writes_and_its_answer() {
    let mut client = connect().await;
    let scope = fresh_scope();
    assert_eq!(pay(&mut client, &run(&scope, 5)).await, Committed::Now);
    assert_eq!(payments(&client, &scope).await, [5]);
    let row = client
        .query_one(
            "SELECT fence, answer FROM keyflight_effects WHERE scope = $1",
            &[&scope],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 5);
    assert_eq!(row.get::<_, Value>(1), answer(5));
}

#[tokio::test]
async fn a_rerun_gets_the_first_answer_and_keeps_none_of_its_writes() {
    let mut client = connect().await;
    let scope = fresh_scope();
    pay(&mut client, &run(&scope, 5)).await;
    let earlier = Committed::Earlier {
        fence: 5,
        answer: answer(5),
    };
    // A re-run after the proxy died (a higher fence), a stale winner that was taken over
    // (a lower one), and the same run again: none overwrites, none keeps its write.
    for fence in [9, 3, 5] {
        assert_eq!(
            pay(&mut client, &run(&scope, fence)).await,
            earlier,
            "{fence}"
        );
    }
    assert_eq!(payments(&client, &scope).await, [5]);
}

#[tokio::test]
async fn a_run_that_rolled_back_left_nothing_behind() {
    let mut client = connect().await;
    let scope = fresh_scope();
    {
        let tx = client.transaction().await.unwrap();
        let rows = tx
            .query(
                "SELECT outcome FROM keyflight_effect_commit($1, 4, 'pay', '{}')",
                &[&scope],
            )
            .await
            .unwrap();
        assert_eq!(rows[0].get::<_, &str>(0), "recorded");
        tx.rollback().await.unwrap();
    }
    assert_eq!(pay(&mut client, &run(&scope, 6)).await, Committed::Now);
    assert_eq!(payments(&client, &scope).await, [6]);
}

/// Two runs of one operation in flight together (fences 1 and 2): the first has recorded
/// its answer but not committed; the second reaches the ledger and must wait for it. The
/// first then ends with `end_first` (`true`: COMMIT); returns what the second got.
async fn second_run_while_first_is_open(scope: &str, end_first: bool) -> Committed {
    let mut first = connect().await;
    let first_tx = first.transaction().await.unwrap();
    first_tx
        .execute(
            "INSERT INTO payments (scope, fence) VALUES ($1, 1)",
            &[&scope],
        )
        .await
        .unwrap();
    let recorded = first_tx
        .query_one(
            "SELECT outcome FROM keyflight_effect_commit($1, 1, 'pay', $2)",
            &[&scope, &answer(1)],
        )
        .await
        .unwrap();
    assert_eq!(recorded.get::<_, &str>(0), "recorded");

    let mut second = connect().await;
    let second_pid = backend_pid(&second).await;
    let operation = run(scope, 2);
    let second_run = tokio::spawn(async move { pay(&mut second, &operation).await });
    // Another session: a transaction reads pg_stat_activity once and keeps that snapshot.
    wait_until_blocked_on_a_lock(&connect().await, second_pid).await;
    assert!(!second_run.is_finished());

    if end_first {
        first_tx.commit().await.unwrap();
    } else {
        first_tx.rollback().await.unwrap();
    }
    second_run.await.unwrap()
}

/// Waits until backend `pid` waits on a lock (the second run on the first's row).
async fn wait_until_blocked_on_a_lock(client: &Client, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE pid = $1 AND wait_event_type = 'Lock'",
                &[&pid],
            )
            .await
            .unwrap()
            .get::<_, i64>(0);
        if waiting == 1 {
            return;
        }
        assert!(Instant::now() < deadline, "backend {pid} never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_run_waiting_on_one_that_commits_gets_its_answer() {
    let scope = fresh_scope();
    let second = second_run_while_first_is_open(&scope, true).await;
    assert_eq!(
        second,
        Committed::Earlier {
            fence: 1,
            answer: answer(1)
        }
    );
    assert_eq!(payments(&connect().await, &scope).await, [1]);
}

#[tokio::test]
async fn a_run_waiting_on_one_that_rolls_back_commits_its_own() {
    let scope = fresh_scope();
    let second = second_run_while_first_is_open(&scope, false).await;
    assert_eq!(second, Committed::Now);
    assert_eq!(payments(&connect().await, &scope).await, [2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_racing_runs_exactly_one_commits_its_effect() {
    let scope = fresh_scope();
    let runs: Vec<_> = (1..=8)
        .map(|fence| {
            let operation = run(&scope, fence);
            tokio::spawn(async move { pay(&mut connect().await, &operation).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for run in runs {
        outcomes.push(run.await.unwrap());
    }
    let committed = payments(&connect().await, &scope).await;
    let [winner] = committed.as_slice() else {
        panic!("{committed:?} committed")
    };
    for outcome in &outcomes {
        assert!(
            *outcome == Committed::Now
                || *outcome
                    == Committed::Earlier {
                        fence: *winner,
                        answer: answer(*winner)
                    },
            "{outcome:?}"
        );
    }
    let now = outcomes.iter().filter(|o| **o == Committed::Now).count();
    assert_eq!(now, 1, "{outcomes:?}");
}

#[tokio::test]
async fn the_table_refuses_what_keyflight_never_forwards() {
    let client = connect().await;
    for (scope, fence) in [("SHA256", 1_i64), (fresh_scope().as_str(), 0)] {
        let refused = client
            .query(
                "SELECT * FROM keyflight_effect_commit($1, $2, '{}')",
                &[&scope, &fence],
            )
            .await;
        assert!(refused.is_err(), "{scope} {fence}");
    }
    let no_fingerprint = client
        .query(
            "SELECT * FROM keyflight_effect_begin($1, 1, NULL)",
            &[&fresh_scope()],
        )
        .await;
    assert!(no_fingerprint.is_err());
}

/// One run of a payment the way a handler does it: the early check, the provider's call
/// (`provider` counts them: outside the database), its write, the record. The body is the
/// fingerprint.
async fn pay_with_provider(
    client: &mut Client,
    operation: &Operation,
    body: &str,
    provider: &AtomicU64,
) -> Result<Committed, Error> {
    let tx = client.transaction().await.unwrap();
    if let Begun::Earlier { fence, answer } = begin(&tx, operation, body).await? {
        return Ok(Committed::Earlier { fence, answer });
    }
    provider.fetch_add(1, Ordering::Relaxed);
    tx.execute(
        "INSERT INTO payments (scope, fence) VALUES ($1, $2)",
        &[&operation.scope(), &operation.fence()],
    )
    .await
    .unwrap();
    commit(tx, operation, body, &answer(operation.fence())).await
}

#[tokio::test]
async fn another_body_under_a_recorded_scope_is_a_conflict_not_the_first_answer() {
    let mut client = connect().await;
    let scope = fresh_scope();
    let provider = AtomicU64::new(0);
    pay_with_provider(&mut client, &run(&scope, 5), "pay A", &provider)
        .await
        .unwrap();
    // keyflight's record expired or was erased: the key comes again with another body.
    let other = pay_with_provider(&mut client, &run(&scope, 9), "pay B", &provider).await;
    assert!(
        matches!(other, Err(Error::Conflict { fence: 5 })),
        "payment B was told it happened: {other:?}"
    );
    assert_eq!(payments(&client, &scope).await, [5]);
    assert_eq!(provider.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn another_body_is_a_conflict_at_commit_too() {
    let mut client = connect().await;
    let scope = fresh_scope();
    pay(&mut client, &run(&scope, 5)).await;
    let tx = client.transaction().await.unwrap();
    let other = commit(tx, &run(&scope, 9), "pay B", &answer(9)).await;
    assert!(
        matches!(other, Err(Error::Conflict { fence: 5 })),
        "{other:?}"
    );
}

#[tokio::test]
async fn a_row_without_a_fingerprint_matches_any() {
    let mut client = connect().await;
    let scope = fresh_scope();
    // A row the V1 call wrote: its fingerprint is unknown.
    client
        .execute(
            "SELECT keyflight_effect_commit($1, 5, $2)",
            &[&scope, &answer(5)],
        )
        .await
        .unwrap();
    let provider = AtomicU64::new(0);
    let rerun = pay_with_provider(&mut client, &run(&scope, 9), "pay A", &provider).await;
    assert!(
        matches!(rerun, Ok(Committed::Earlier { fence: 5, .. })),
        "{rerun:?}"
    );
    assert_eq!(provider.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_rerun_learns_of_the_committed_answer_before_its_provider_call() {
    let mut client = connect().await;
    let scope = fresh_scope();
    let provider = AtomicU64::new(0);
    pay_with_provider(&mut client, &run(&scope, 5), "pay A", &provider)
        .await
        .unwrap();
    let rerun = pay_with_provider(&mut client, &run(&scope, 9), "pay A", &provider).await;
    assert!(matches!(rerun, Ok(Committed::Earlier { .. })), "{rerun:?}");
    assert_eq!(
        provider.load(Ordering::Relaxed),
        1,
        "the re-run called the provider"
    );
}

#[tokio::test]
async fn a_run_arriving_while_one_is_past_its_check_waits_and_never_calls_the_provider() {
    let scope = fresh_scope();
    let mut first = connect().await;
    let first_tx = first.transaction().await.unwrap();
    // The first run is past its check, in its call to the provider.
    assert_eq!(
        begin(&first_tx, &run(&scope, 1), "pay A").await.unwrap(),
        Begun::Run
    );

    let mut second = connect().await;
    let second_pid = backend_pid(&second).await;
    let provider = std::sync::Arc::new(AtomicU64::new(0));
    let second_run = tokio::spawn({
        let (scope, provider) = (scope.clone(), provider.clone());
        async move { pay_with_provider(&mut second, &run(&scope, 2), "pay A", &provider).await }
    });
    wait_until_blocked_on_a_lock(&connect().await, second_pid).await;
    assert!(!second_run.is_finished());

    first_tx
        .execute(
            "INSERT INTO payments (scope, fence) VALUES ($1, 1)",
            &[&scope],
        )
        .await
        .unwrap();
    let recorded = commit(first_tx, &run(&scope, 1), "pay A", &answer(1))
        .await
        .unwrap();
    assert_eq!(recorded, Committed::Now);
    let second = second_run.await.unwrap().unwrap();
    assert_eq!(
        second,
        Committed::Earlier {
            fence: 1,
            answer: answer(1)
        }
    );
    assert_eq!(provider.load(Ordering::Relaxed), 0);
    assert_eq!(payments(&connect().await, &scope).await, [1]);
}

#[tokio::test]
async fn a_begun_run_that_committed_without_its_answer_is_refused() {
    let mut client = connect().await;
    let scope = fresh_scope();
    let tx = client.transaction().await.unwrap();
    begin(&tx, &run(&scope, 1), "pay A").await.unwrap();
    // The handler ended its transaction itself, without `commit`: what it did is unknown.
    tx.commit().await.unwrap();
    let provider = AtomicU64::new(0);
    let rerun = pay_with_provider(&mut client, &run(&scope, 2), "pay A", &provider).await;
    let Err(Error::Database(refused)) = rerun else {
        panic!("{rerun:?}")
    };
    assert!(
        refused
            .as_db_error()
            .is_some_and(|e| e.message().contains("committed without its answer")),
        "{refused:?}"
    );
    assert_eq!(provider.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_ledger_v1_wrote_keeps_its_answers_after_the_upgrade() {
    cluster().psql("CREATE DATABASE upgraded");
    let url = format!(
        "{}/upgraded",
        cluster().url().strip_suffix("/postgres").unwrap()
    );
    let (mut client, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(connection);
    let scope = fresh_scope();
    // V1 alone, as a migration tool ran it, and an operation recorded under it.
    client
        .batch_execute(&format!(
            "BEGIN;\n{}\nCOMMIT;",
            include_str!("../migrations/V1__keyflight_effects.sql")
        ))
        .await
        .unwrap();
    client
        .batch_execute("CREATE TABLE payments (scope text NOT NULL, fence bigint NOT NULL)")
        .await
        .unwrap();
    client
        .execute(
            "SELECT keyflight_effect_commit($1, 5, $2)",
            &[&scope, &answer(5)],
        )
        .await
        .unwrap();

    install(&client).await.unwrap();
    install(&client).await.unwrap();
    let provider = AtomicU64::new(0);
    let rerun = pay_with_provider(&mut client, &run(&scope, 9), "pay A", &provider).await;
    assert_eq!(
        rerun.unwrap(),
        Committed::Earlier {
            fence: 5,
            answer: answer(5)
        }
    );
    let fresh = pay_with_provider(&mut client, &run(&fresh_scope(), 1), "pay A", &provider).await;
    assert_eq!(fresh.unwrap(), Committed::Now);
}
