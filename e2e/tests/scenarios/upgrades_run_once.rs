//! A mixed-version mesh keeps the promise (`docs/operations.md#upgrades`): the previous
//! release's real `.wasm` and lease-store (built from git history,
//! `keyflight_testkit::previous_release`) run beside this tree's in one stack, and a keyed
//! retry that crosses the version boundary runs once in every direction — old proxy → new
//! proxy, new → old, and after a rollback: the same body replays, another body is a 409,
//! and a follower on the other version waits for the winner's answer.
//!
//! Protocol skew is covered by the same runs: an old proxy talks to new lease-stores (the
//! rollout order, store first), and `an_old_store_serves_the_new_filter` runs the new
//! filter against old lease-stores only (a store rolled back under new proxies).

use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::previous_release::previous_release;
use serde_json::json;

use crate::dead_winners_of_hold_policies_are_held::{
    LEASE_MS, a_killed_winner_is_held_not_run_again,
};

/// Envoy index of the proxy on the previous release in a mixed stack.
const OLD: usize = 0;
/// Envoy index of the proxy on this tree's release.
const NEW: usize = 1;

/// Two Envoys (0 on the previous release, 1 on this one) reaching two lease-stores of
/// this release: the mesh in the middle of a filter rollout, the store already rolled.
fn mixed_proxies() -> StackOptions {
    StackOptions::default()
        .two_replicas()
        .envoy_binaries(OLD, previous_release())
        .policy(|policy| {
            policy.insert("follower_wait_ms".into(), json!(20_000));
        })
        .inline_filter_token()
}

/// A winner held through Envoy `from` and a follower through Envoy `to`: the follower
/// waits and gets the winner's answer. Then a keyed request answered through `from` and
/// retried through `to`: the same body replays and another body is a 409. The upstream
/// runs once per operation.
pub(crate) async fn a_retry_crossing(stack: &Stack, from: usize, to: usize, key: &str) {
    let executions_before = stack.upstream_executions().await;
    let body = json!({"amount": 100, "key": key});
    let held = format!("{key}-held");
    let path = format!("/payments?hold={held}");
    let winner = stack.post_via(from, &path).key(&held).json(&body).send();
    let follower = async {
        stack.wait_for_gate(&held, 1).await;
        let reply = stack.post_via(to, &path).key(&held).json(&body).send();
        // The follower is inside its proxy (held by the filter: the upstream still holds
        // only the winner) before the winner is let go.
        let conductor = async {
            stack
                .eventually("the follower is held by its proxy", || async {
                    stack
                        .envoy_stat_at(to, "http.edge.downstream_rq_active")
                        .await
                        >= 1
                })
                .await;
            assert_eq!(stack.gate_waiting(&held).await, 1, "only the winner ran");
            stack.open_gate(&held).await;
        };
        let (reply, ()) = tokio::join!(reply, conductor);
        reply
    };
    let (winner, follower) = tokio::join!(winner, follower);
    assert_eq!(winner.status, 201, "{winner}");
    follower.assert_replayed();
    assert_eq!(
        follower.body, winner.body,
        "the follower got the winner's answer"
    );
    assert_eq!(
        stack.upstream_executions().await,
        executions_before + 1,
        "the held operation ran once"
    );
    let first = stack
        .post_via(from, "/payments")
        .key(key)
        .json(&body)
        .send()
        .await;
    assert_eq!(first.status, 201, "{first}");

    let again = stack
        .post_via(to, "/payments")
        .key(key)
        .json(&body)
        .send()
        .await;
    again.assert_replayed();
    assert_eq!(again.body, first.body, "the replay is the recorded answer");
    let other = stack
        .post_via(to, "/payments")
        .key(key)
        .json(&json!({"amount": 999}))
        .send()
        .await;
    other.assert_problem(409, "idempotency_conflict");
    assert_eq!(
        stack.upstream_executions().await,
        executions_before + 2,
        "one execution for {key} across the two versions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_from_an_old_proxy_to_a_new_one_runs_once() {
    let stack = Stack::start(mixed_proxies()).await;
    a_retry_crossing(&stack, OLD, NEW, "old-to-new").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_from_a_new_proxy_to_an_old_one_runs_once() {
    let stack = Stack::start(mixed_proxies()).await;
    a_retry_crossing(&stack, NEW, OLD, "new-to-old").await;
}

/// A rollback: both proxies and both stores run this release, answers are recorded, then
/// the stores and one proxy go back to the previous release; retries of what the new
/// release recorded replay through the old proxy, and a crossing in both directions still
/// runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_after_a_rollback_runs_once() {
    let mut stack = Stack::start(
        StackOptions::default()
            .two_replicas()
            .policy(|policy| {
                policy.insert("follower_wait_ms".into(), json!(20_000));
                // The new proxy meets old stores after the rollback: they refuse a hold
                // policy's claims (`a_hold_policy_fails_closed_on_an_old_store`).
                policy.insert("uncertain".into(), json!("retry"));
            })
            .inline_filter_token(),
    )
    .await;
    let body = json!({"amount": 42});
    let before = stack
        .post_via(OLD, "/payments")
        .key("before-rollback")
        .json(&body)
        .send()
        .await;
    assert_eq!(before.status, 201, "{before}");

    let previous = previous_release();
    for store in 0..2 {
        stack
            .parts_mut()
            .replace_store(store, previous.clone())
            .await;
    }
    stack.parts_mut().replace_envoy(OLD, previous).await;

    for via in [OLD, NEW] {
        let again = stack
            .post_via(via, "/payments")
            .key("before-rollback")
            .json(&body)
            .send()
            .await;
        again.assert_replayed();
        assert_eq!(again.body, before.body);
    }
    assert_eq!(stack.upstream_executions().await, 1);
    a_retry_crossing(&stack, NEW, OLD, "after-rollback-new-to-old").await;
    a_retry_crossing(&stack, OLD, NEW, "after-rollback-old-to-new").await;
}

/// Protocol skew the other way round: the new filter against lease-stores of the previous
/// release. Their claim answers carry no `record_expires_in_ms`, so the new filter never
/// caches a replay they answer at the edge, and serves it from the store each time. (Its
/// own winners' answers it does cache: their lifetime is the policy's retention, known
/// without the store.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_old_store_serves_the_new_filter() {
    let previous = previous_release();
    let stack = Stack::start(
        StackOptions::default()
            .two_replicas()
            .store_binaries(0, previous.clone())
            .store_binaries(1, previous)
            .policy(|policy| {
                policy.insert("follower_wait_ms".into(), json!(20_000));
                // A hold policy's claims need a store of this release
                // (`a_hold_policy_fails_closed_on_an_old_store`).
                policy.insert("uncertain".into(), json!("retry"));
            }),
    )
    .await;
    a_retry_crossing(&stack, NEW, OLD, "new-filter-old-store").await;

    // Otherwise the check below would pass with the new proxy's cache not yet in use
    // (a worker uses it once it has heard the store's operator epoch).
    the_edge_cache_is_in_use(&stack, NEW).await;
    let body = json!({"amount": 7});
    let executions_before = stack.upstream_executions().await;
    let first = stack
        .post_via(OLD, "/payments")
        .key("won-through-the-old-proxy")
        .json(&body)
        .send()
        .await;
    assert_eq!(first.status, 201, "{first}");
    let hits_before = stack
        .filter_counter_at(NEW, "outcome.replay_edge_cache")
        .await;
    for _ in 0..4 {
        let replay = stack
            .post_via(NEW, "/payments")
            .key("won-through-the-old-proxy")
            .json(&body)
            .send()
            .await;
        replay.assert_replayed();
        assert_eq!(replay.body, first.body, "the replay is the recorded answer");
    }
    assert_eq!(
        stack
            .filter_counter_at(NEW, "outcome.replay_edge_cache")
            .await
            - hits_before,
        0,
        "a replay whose record's lifetime the store did not say is never cached"
    );
    assert_eq!(stack.upstream_executions().await, executions_before + 1);
}

/// The shipped policy holds (`uncertain: hold`), so the new filter's claims carry
/// `at_most_once`, which a store of the previous release does not know and refuses: with
/// the stores rolled back under new proxies, a hold policy's requests fail closed (503
/// `journal_unavailable`) and nothing runs, until the proxies are rolled back too
/// (`docs/operations.md#upgrades`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_policy_fails_closed_on_an_old_store() {
    let previous = previous_release();
    let stack = Stack::start(StackOptions::default().store_binaries(0, previous).policy(
        |policy| {
            assert_eq!(policy.get("uncertain"), Some(&json!("hold")), "as shipped");
        },
    ))
    .await;
    let refused = stack
        .post("/payments")
        .key("hold-on-an-old-store")
        .json(&json!({"amount": 8}))
        .send()
        .await;
    refused.assert_problem(503, "journal_unavailable");
    assert_eq!(stack.upstream_executions().await, 0, "nothing ran");
}

/// Waits until Envoy `via` serves a replay from its edge cache: a fresh key answered
/// through it, then replayed through it, until the replay is a hit.
async fn the_edge_cache_is_in_use(stack: &Stack, via: usize) {
    let mut attempt = 0;
    stack
        .eventually("the new proxy serves a replay from its edge cache", || {
            attempt += 1;
            let key = format!("edge-cache-in-use-{attempt}");
            async move {
                let body = json!({"amount": 1});
                let first = stack
                    .post_via(via, "/payments")
                    .key(&key)
                    .json(&body)
                    .send()
                    .await;
                assert_eq!(first.status, 201, "{first}");
                let hits_before = stack
                    .filter_counter_at(via, "outcome.replay_edge_cache")
                    .await;
                let replay = stack
                    .post_via(via, "/payments")
                    .key(&key)
                    .json(&body)
                    .send()
                    .await;
                replay.assert_replayed();
                stack
                    .filter_counter_at(via, "outcome.replay_edge_cache")
                    .await
                    > hits_before
            }
        })
        .await;
}

/// A `303` (POST-redirect-GET) is recorded by this release and forgotten by the previous
/// one (`docs/guarantee.md#every-answer-after-which-a-retry-runs-again`): answered through
/// a new proxy, its retry replays through an old one; answered through an old proxy, it
/// was never recorded, and its retry runs again wherever it lands — what the old release
/// promised, counted by the old proxy as `outcome.not_recorded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_303_is_replayed_across_versions_when_the_new_proxy_answered_it() {
    let stack = Stack::start(mixed_proxies()).await;
    let body = json!({"amount": 303});
    let path = "/payments?status=303";

    let first = stack
        .post_via(NEW, path)
        .key("see-other-new")
        .json(&body)
        .send()
        .await;
    assert_eq!(first.status, 303, "{first}");
    let again = stack
        .post_via(OLD, path)
        .key("see-other-new")
        .json(&body)
        .send()
        .await;
    again.assert_replayed();
    assert_eq!(stack.upstream_executions().await, 1);

    let first = stack
        .post_via(OLD, path)
        .key("see-other-old")
        .json(&body)
        .send()
        .await;
    assert_eq!(first.status, 303, "{first}");
    let again = stack
        .post_via(NEW, path)
        .key("see-other-old")
        .json(&body)
        .send()
        .await;
    assert_eq!(again.status, 303, "{again}");
    assert_eq!(again.header("idempotent-replayed"), None, "{again}");
    assert_eq!(stack.upstream_executions().await, 3);
    assert_eq!(
        stack.filter_counter_at(OLD, "outcome.not_recorded").await,
        1
    );
}

/// Under `uncertain: hold` a winner lost on a proxy of the previous release — whose claims
/// carry no `at_most_once` — is held `unknown` when its retry comes through a proxy of this
/// release, whose claim does (`docs/records.md#a-lapsed-at-most-once-lease`): the payment
/// ran once. The same story on one release is `dead_winners_of_hold_policies_are_held`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hold_policys_winner_lost_on_an_old_proxy_is_held_when_retried_through_a_new_one() {
    let stack = Stack::start(
        StackOptions::default()
            .two_replicas()
            .envoy_binaries(OLD, previous_release())
            .policy(|policy| {
                policy.insert("lease_ms".into(), json!(LEASE_MS));
                policy.insert("follower_wait_ms".into(), json!(0));
                policy.insert("uncertain".into(), json!("hold"));
            })
            .inline_filter_token(),
    )
    .await;
    let body = json!({"amount": 78});
    a_killed_winner_is_held_not_run_again(&stack, (OLD, NEW), "old-proxy-lost", &body).await;
}
