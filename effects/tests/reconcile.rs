//! Reconciliation against a real throwaway Postgres (`docs/effects.md#reconciliation`): the
//! ledger answers keyflight's question from what committed, waits for a run in flight, and
//! once it answered absent, no run at or below the fence asked about ever commits.

#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keyflight_effects::{
    Begun, Committed, Error, Operation, Reconciled, begin, commit, install, reconcile,
};
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

/// One run the way a handler does it, with the early check when `early` (else the check
/// comes last, in `commit`): its write, then the record.
async fn pay(client: &mut Client, operation: &Operation, early: bool) -> Result<Committed, Error> {
    let tx = client.transaction().await.unwrap();
    if early && let Begun::Earlier { fence, answer } = begin(&tx, operation, "pay A").await? {
        return Ok(Committed::Earlier { fence, answer });
    }
    tx.execute(
        "INSERT INTO payments (scope, fence) VALUES ($1, $2)",
        &[&operation.scope(), &operation.fence()],
    )
    .await
    .unwrap();
    commit(tx, operation, "pay A", &answer(operation.fence())).await
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

/// The floor on `scope`'s row.
async fn floor(client: &Client, scope: &str) -> Option<i64> {
    client
        .query_one(
            "SELECT fenced_through FROM keyflight_effects WHERE scope = $1",
            &[&scope],
        )
        .await
        .unwrap()
        .get(0)
}

async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits until backend `pid` waits on a lock (the question on a run's row).
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
async fn a_committed_run_is_answered_committed_with_its_answer() {
    let mut client = connect().await;
    let scope = fresh_scope();
    assert_eq!(
        pay(&mut client, &run(&scope, 4), true).await.unwrap(),
        Committed::Now
    );
    for asked in [4, 7] {
        assert_eq!(
            reconcile(&mut client, &run(&scope, asked)).await.unwrap(),
            Reconciled::Committed {
                fence: 4,
                answer: answer(4)
            },
            "asked about {asked}"
        );
    }
}

#[tokio::test]
async fn after_absent_a_late_run_at_that_fence_is_fenced_and_keeps_nothing() {
    let mut client = connect().await;
    let scope = fresh_scope();
    assert_eq!(
        reconcile(&mut client, &run(&scope, 3)).await.unwrap(),
        Reconciled::Absent
    );
    // The run keyflight asked about, arriving late with its check last, and an older one
    // with its check first.
    let late = pay(&mut client, &run(&scope, 3), false).await;
    assert!(
        matches!(late, Err(Error::Fenced { through: 3 })),
        "{late:?}"
    );
    let older = pay(&mut client, &run(&scope, 2), true).await;
    assert!(
        matches!(older, Err(Error::Fenced { through: 3 })),
        "{older:?}"
    );
    assert_eq!(payments(&client, &scope).await, [0_i64; 0]);
    assert_eq!(
        reconcile(&mut client, &run(&scope, 3)).await.unwrap(),
        Reconciled::Absent
    );
}

#[tokio::test]
async fn a_fenced_v1_call_is_refused() {
    let mut client = connect().await;
    let scope = fresh_scope();
    reconcile(&mut client, &run(&scope, 3)).await.unwrap();
    let refused = client
        .query(
            "SELECT * FROM keyflight_effect_commit($1, 3, $2)",
            &[&scope, &answer(3)],
        )
        .await;
    let message = refused
        .unwrap_err()
        .as_db_error()
        .unwrap()
        .message()
        .to_owned();
    assert!(message.contains("fenced out"), "{message}");
    // Above the floor, V1's call records as before.
    let recorded = client
        .query_one(
            "SELECT recorded FROM keyflight_effect_commit($1, 4, $2)",
            &[&scope, &answer(4)],
        )
        .await
        .unwrap();
    assert!(recorded.get::<_, bool>(0));
}

#[tokio::test]
async fn after_absent_a_higher_fence_runs_and_its_retry_gets_its_answer() {
    let mut client = connect().await;
    let scope = fresh_scope();
    assert_eq!(
        reconcile(&mut client, &run(&scope, 3)).await.unwrap(),
        Reconciled::Absent
    );
    assert_eq!(
        pay(&mut client, &run(&scope, 4), true).await.unwrap(),
        Committed::Now
    );
    let earlier = Committed::Earlier {
        fence: 4,
        answer: answer(4),
    };
    assert_eq!(
        pay(&mut client, &run(&scope, 4), true).await.unwrap(),
        earlier
    );
    // The fenced run, later still: the committed answer, and none of its writes.
    assert_eq!(
        pay(&mut client, &run(&scope, 3), false).await.unwrap(),
        earlier
    );
    assert_eq!(payments(&client, &scope).await, [4]);
    assert_eq!(
        reconcile(&mut client, &run(&scope, 4)).await.unwrap(),
        Reconciled::Committed {
            fence: 4,
            answer: answer(4)
        }
    );
}

#[tokio::test]
async fn a_higher_fence_without_its_early_check_takes_the_floor_over_too() {
    let mut client = connect().await;
    let scope = fresh_scope();
    reconcile(&mut client, &run(&scope, 3)).await.unwrap();
    assert_eq!(
        pay(&mut client, &run(&scope, 5), false).await.unwrap(),
        Committed::Now
    );
    assert_eq!(payments(&client, &scope).await, [5]);
}

/// A run at `held` begins (and, when `recorded`, also records its answer) and stays open;
/// keyflight's question about `asked` comes meanwhile and must wait for it. The run then
/// ends with `end_run` (`true`: COMMIT); returns what the question got.
async fn question_while_a_run_is_open(
    scope: &str,
    held: i64,
    asked: i64,
    end_run: bool,
) -> Reconciled {
    let mut first = connect().await;
    let tx = first.transaction().await.unwrap();
    assert_eq!(
        begin(&tx, &run(scope, held), "pay A").await.unwrap(),
        Begun::Run
    );

    let mut second = connect().await;
    let second_pid = backend_pid(&second).await;
    let operation = run(scope, asked);
    let question = tokio::spawn(async move { reconcile(&mut second, &operation).await });
    // Another session: a transaction reads pg_stat_activity once and keeps that snapshot.
    wait_until_blocked_on_a_lock(&connect().await, second_pid).await;
    assert!(!question.is_finished());

    if end_run {
        tx.execute(
            "INSERT INTO payments (scope, fence) VALUES ($1, $2)",
            &[&scope, &held],
        )
        .await
        .unwrap();
        let recorded = commit(tx, &run(scope, held), "pay A", &answer(held)).await;
        assert_eq!(recorded.unwrap(), Committed::Now);
    } else {
        tx.rollback().await.unwrap();
    }
    question.await.unwrap().unwrap()
}

#[tokio::test]
async fn a_question_waits_for_a_run_in_flight_that_commits() {
    let scope = fresh_scope();
    assert_eq!(
        question_while_a_run_is_open(&scope, 1, 1, true).await,
        Reconciled::Committed {
            fence: 1,
            answer: answer(1)
        }
    );
    assert_eq!(payments(&connect().await, &scope).await, [1]);
}

#[tokio::test]
async fn a_question_waits_for_a_run_in_flight_that_rolls_back_then_fences_it() {
    let scope = fresh_scope();
    assert_eq!(
        question_while_a_run_is_open(&scope, 1, 1, false).await,
        Reconciled::Absent
    );
    let mut client = connect().await;
    let again = pay(&mut client, &run(&scope, 1), true).await;
    assert!(
        matches!(again, Err(Error::Fenced { through: 1 })),
        "{again:?}"
    );
}

#[tokio::test]
async fn a_question_waits_for_a_run_that_took_the_floor_over() {
    let scope = fresh_scope();
    reconcile(&mut connect().await, &run(&scope, 1))
        .await
        .unwrap();
    // Fence 2 took the floor row over and is in flight: asked about, it is waited for.
    assert_eq!(
        question_while_a_run_is_open(&scope, 2, 2, false).await,
        Reconciled::Absent
    );
    assert_eq!(floor(&connect().await, &scope).await, Some(2));

    let scope = fresh_scope();
    reconcile(&mut connect().await, &run(&scope, 1))
        .await
        .unwrap();
    assert_eq!(
        question_while_a_run_is_open(&scope, 2, 2, true).await,
        Reconciled::Committed {
            fence: 2,
            answer: answer(2)
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_runs_racing_a_question_none_at_or_below_an_absent_fence_commits() {
    for _ in 0..5 {
        let scope = fresh_scope();
        let runs: Vec<_> = (1..=8)
            .map(|fence| {
                let operation = run(&scope, fence);
                tokio::spawn(
                    async move { pay(&mut connect().await, &operation, fence % 2 == 0).await },
                )
            })
            .collect();
        let question = reconcile(&mut connect().await, &run(&scope, 4))
            .await
            .unwrap();
        for run in runs {
            let outcome = run.await.unwrap();
            assert!(
                matches!(outcome, Ok(_) | Err(Error::Fenced { .. })),
                "{outcome:?}"
            );
        }
        let committed = payments(&connect().await, &scope).await;
        assert!(committed.len() <= 1, "{committed:?}");
        match question {
            Reconciled::Absent => assert!(committed.iter().all(|&f| f > 4), "{committed:?}"),
            Reconciled::Committed { fence, answer: a } => {
                assert_eq!((committed.as_slice(), a), (&[fence][..], answer(fence)));
            }
        }
    }
}

#[tokio::test]
async fn asking_twice_is_absent_twice_and_keeps_the_highest_floor() {
    let mut client = connect().await;
    let scope = fresh_scope();
    for asked in [5, 5, 3] {
        assert_eq!(
            reconcile(&mut client, &run(&scope, asked)).await.unwrap(),
            Reconciled::Absent,
            "asked about {asked}"
        );
    }
    assert_eq!(floor(&client, &scope).await, Some(5));
    let fenced = pay(&mut client, &run(&scope, 5), true).await;
    assert!(
        matches!(fenced, Err(Error::Fenced { through: 5 })),
        "{fenced:?}"
    );
    assert_eq!(
        pay(&mut client, &run(&scope, 6), true).await.unwrap(),
        Committed::Now
    );
}

#[tokio::test]
async fn a_run_that_committed_without_its_answer_is_refused_to_the_question_too() {
    let mut client = connect().await;
    let scope = fresh_scope();
    let tx = client.transaction().await.unwrap();
    begin(&tx, &run(&scope, 1), "pay A").await.unwrap();
    tx.commit().await.unwrap();
    let refused = reconcile(&mut client, &run(&scope, 1)).await;
    let Err(Error::Database(refused)) = refused else {
        panic!("{refused:?}")
    };
    assert!(
        refused
            .as_db_error()
            .is_some_and(|e| e.message().contains("committed without its answer")),
        "{refused:?}"
    );
}

/// The endpoint on the real ledger: the committed answer rendered, then absent for another
/// operation, each echoing the question.
#[cfg(feature = "axum")]
#[tokio::test]
async fn the_endpoint_answers_from_the_ledger() {
    use std::sync::Arc;

    use axum::body::Body;
    use keyflight_effects::reconcile::{DEFAULT_PATH, Endpoint, ServiceAnswer, route};
    use tower::ServiceExt as _;

    let mut client = connect().await;
    let paid = fresh_scope();
    pay(&mut client, &run(&paid, 4), true).await.unwrap();
    let client = Arc::new(tokio::sync::Mutex::new(client));
    let app: axum::Router = route(
        Endpoint::new(move |operation| {
            let client = client.clone();
            async move { reconcile(&mut *client.lock().await, &operation).await }
        })
        .token("t"),
    );
    let ask = |scope: String| {
        let app = app.clone();
        async move {
            let request = http::Request::post(DEFAULT_PATH)
                .header("authorization", "Bearer t")
                .header("idempotency-scope", scope)
                .header("idempotency-fence", "4")
                .body(Body::empty())
                .unwrap();
            let response = app.oneshot(request).await.unwrap();
            assert_eq!(response.status(), http::StatusCode::OK);
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .unwrap();
            serde_json::from_slice::<ServiceAnswer>(&body).unwrap()
        }
    };
    let ServiceAnswer::Committed {
        scope,
        fence,
        response,
    } = ask(paid.clone()).await
    else {
        panic!("not committed")
    };
    assert_eq!((scope.to_hex(), fence), (paid, 4));
    assert_eq!(
        (response.status, response.body),
        (201, br#"{"paid_by_fence":4}"#.to_vec())
    );
    let unpaid = fresh_scope();
    let ServiceAnswer::Absent { scope, fence } = ask(unpaid.clone()).await else {
        panic!("not absent")
    };
    assert_eq!((scope.to_hex(), fence), (unpaid, 4));
}
