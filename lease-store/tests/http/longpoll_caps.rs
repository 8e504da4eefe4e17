//! Parked long-polls are capped per scope and overall (`docs/records.md#the-long-poll`):
//! past a cap a follower is answered `in_progress` at once, with its `retry_after_s`,
//! instead of parking; each refusal is counted.

use std::time::{Duration, Instant};

use crate::support::{Answer, Api, start_server};

/// Starts a follower long-polling (20 s) on `scope` with `fingerprint`.
fn follow(api: &Api, scope: &str, fingerprint: &str) -> tokio::task::JoinHandle<Answer> {
    let (api, scope, fingerprint) = (api.clone(), scope.to_owned(), fingerprint.to_owned());
    tokio::spawn(async move { api.claim(&scope, &fingerprint, 20_000).await })
}

/// A claim that must be answered `in_progress` at once rather than parked.
async fn answered_at_once(api: &Api, scope: &str, fingerprint: &str) {
    let started = Instant::now();
    let answer = api.claim(scope, fingerprint, 20_000).await;
    assert_eq!(answer.outcome(), "in_progress", "{}", answer.text);
    assert!(
        answer.json["retry_after_s"]
            .as_u64()
            .is_some_and(|s| s >= 1),
        "{}",
        answer.text
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "parked for {:?} past the cap",
        started.elapsed()
    );
}

#[tokio::test]
async fn long_polls_past_the_caps_are_answered_at_once() {
    let server = start_server(&["--max-waiters-per-scope", "2", "--max-waiters", "3"]).await;
    let api = &server.api;
    let (busy, busy_fp, busy_claim) = api.win("busy").await;
    let (other, other_fp, _) = api.win("other").await;
    let (third, third_fp, _) = api.win("third").await;

    let mut parked = vec![follow(api, &busy, &busy_fp), follow(api, &busy, &busy_fp)];
    api.wait_counter("keyflight_store_longpoll_waiting", 2)
        .await;
    answered_at_once(api, &busy, &busy_fp).await;
    assert_eq!(
        api.counter("keyflight_store_shed_total{reason=\"longpoll_scope\"}")
            .await,
        1
    );

    parked.push(follow(api, &other, &other_fp));
    api.wait_counter("keyflight_store_longpoll_waiting", 3)
        .await;
    answered_at_once(api, &third, &third_fp).await;
    assert_eq!(
        api.counter("keyflight_store_shed_total{reason=\"longpoll_total\"}")
            .await,
        1
    );

    // The parked ones are still parked; once they are answered, their places are free.
    assert!(parked.iter().all(|p| !p.is_finished()));
    api.finalize(&busy, &busy_claim).await;
    for p in parked.drain(..2) {
        assert_eq!(p.await.unwrap().outcome(), "completed");
    }
    let again = follow(api, &third, &third_fp);
    api.wait_counter("keyflight_store_longpoll_waiting", 2)
        .await;
    assert!(!again.is_finished());
    again.abort();
    for p in parked {
        p.abort();
    }
}
