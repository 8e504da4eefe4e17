//! A change of recipe keeps the promise (`docs/operations.md#upgrades`,
//! `docs/records.md#claims-across-a-recipe-change`): two Envoys, one on the old recipe
//! (`scope: route`) and one on the new (`scope: service`) naming the old as its `previous`;
//! a keyed retry that crosses them runs once in both directions (same body replays, another
//! body is a 409, a follower on the other recipe waits). A rollback to the old recipe that
//! names the new one as previous finds what the new recipe alone recorded. A change of
//! principal sources crosses the same way (`identity.previous`), and all of it on a
//! partitioned store too. And a store of the previous release refuses the dual claim, so
//! the request fails closed.

use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::previous_release::previous_release;
use serde_json::{Value, json};

use crate::upgrades_run_once::a_retry_crossing;

/// The Envoy whose plugin configuration the test pushes (the changing recipe).
const CHANGING: usize = 0;
/// The Envoy that keeps the old recipe.
const OLD_RECIPE: usize = 1;

/// Pushes `scope` (and `previous.scope`, when given) to Envoy [`CHANGING`] and waits until
/// its old listener, with the old plugin configuration, has drained.
async fn push_recipe(stack: &mut Stack, scope: &str, previous: Option<&str>) {
    let changes_before = stack.envoy_stat("listener_manager.listener_modified").await;
    stack
        .reconfigure(|plugin| {
            let policy = &mut plugin["policies"][0];
            policy["scope"] = json!(scope);
            match previous {
                Some(previous) => policy["previous"] = json!({"scope": previous}),
                None => {
                    if let Some(policy) = policy.as_object_mut() {
                        policy.remove("previous");
                    }
                }
            }
        })
        .await;
    stack
        .eventually("the old listener drained and was removed", || async {
            stack.envoy_stat("listener_manager.listener_modified").await > changes_before
                && stack
                    .envoy_stat("listener_manager.total_listeners_draining")
                    .await
                    == 0
        })
        .await;
}

fn options() -> StackOptions {
    StackOptions::default()
        .two_replicas()
        .reconfigurable()
        .policy(|policy| {
            policy.insert("follower_wait_ms".into(), json!(20_000));
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_across_a_recipe_change_runs_once_in_both_directions() {
    a_retry_across_a_recipe_change_runs_once(options()).await;
}

/// The same on three Postgres partitions, where the two recipes' records of a request
/// usually live on two of them: the claim takes both in turn, or neither
/// (`docs/distributed-sql.md#claims-across-a-recipe-change`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_across_a_recipe_change_runs_once_on_a_partitioned_store() {
    a_retry_across_a_recipe_change_runs_once(options().partitioned(3)).await;
}

/// The rollout, the end of the transition and the rollback, on the stack `options` start.
async fn a_retry_across_a_recipe_change_runs_once(options: StackOptions) {
    let mut stack = Stack::start(options).await;
    let body = json!({"amount": 7});
    let before = stack
        .post_via(OLD_RECIPE, "/payments")
        .key("before-the-change")
        .json(&body)
        .send()
        .await;
    assert_eq!(before.status, 201, "{before}");

    // The rollout: Envoy 0 moves to service scope and names route as its previous recipe.
    push_recipe(&mut stack, "service", Some("route")).await;
    let again = stack
        .post_via(CHANGING, "/payments")
        .key("before-the-change")
        .json(&body)
        .send()
        .await;
    again.assert_replayed();
    assert_eq!(
        again.body, before.body,
        "recorded under the old recipe, found"
    );
    a_retry_crossing(&stack, OLD_RECIPE, CHANGING, "old-recipe-to-new").await;
    a_retry_crossing(&stack, CHANGING, OLD_RECIPE, "new-recipe-to-old").await;
    assert_eq!(stack.upstream_executions().await, 5);

    // The transition ends (every proxy on the new recipe, previous dropped), and a request
    // is recorded under the new recipe alone.
    push_recipe(&mut stack, "service", None).await;
    let new_only = stack
        .post_via(CHANGING, "/payments")
        .key("new-recipe-only")
        .json(&body)
        .send()
        .await;
    assert_eq!(new_only.status, 201, "{new_only}");

    // The rollback: back to route scope, naming service as the previous recipe.
    push_recipe(&mut stack, "route", Some("service")).await;
    let retried = stack
        .post_via(CHANGING, "/payments")
        .key("new-recipe-only")
        .json(&body)
        .send()
        .await;
    retried.assert_replayed();
    assert_eq!(retried.body, new_only.body);
    stack
        .post_via(CHANGING, "/payments")
        .key("new-recipe-only")
        .json(&json!({"amount": 999}))
        .send()
        .await
        .assert_problem(409, "idempotency_conflict");
    a_retry_crossing(&stack, CHANGING, OLD_RECIPE, "after-rollback").await;
    assert_eq!(
        stack.upstream_executions().await,
        8,
        "one execution per operation across the rollout and the rollback"
    );
}

/// Protocol skew: a store of the previous release does not know dual claims. Its request
/// types deny unknown fields, so it refuses the claim instead of claiming one scope, and
/// the new filter fails the request closed even under `failure_mode: open`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_old_store_refuses_a_dual_claim_and_the_request_fails_closed() {
    let previous = previous_release();
    let stack = Stack::start(
        StackOptions::default()
            .two_replicas()
            .store_binaries(0, previous.clone())
            .store_binaries(1, previous)
            .policy(|policy| {
                policy.insert("scope".into(), json!("service"));
                policy.insert("previous".into(), json!({"scope": "route"}));
                policy.insert("failure_mode".into(), json!("open"));
            }),
    )
    .await;
    let refused = stack
        .post_via(0, "/payments")
        .key("dual-to-old-store")
        .json(&json!({"amount": 1}))
        .send()
        .await;
    let problem: Value = refused.assert_problem(503, "journal_unavailable");
    assert!(problem.is_object());
    assert_eq!(stack.upstream_executions().await, 0, "never forwarded");
}

/// A change of principal sources (`identity.previous`): Envoy 0 moves from `x-user` to
/// `x-caller` and names `x-user` as its previous sources; Envoy 1 still reads `x-user`. A
/// client that sends both (the new authn filter next to the old one) is one caller to both
/// proxies: its keyed retries cross them and run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_across_a_change_of_principal_sources_runs_once() {
    let mut stack = Stack::start(options()).await;
    let changes_before = stack.envoy_stat("listener_manager.listener_modified").await;
    stack
        .reconfigure(|plugin| {
            plugin["identity"] = json!({
                "principal": [{"header": "x-caller"}],
                "previous": {"principal": [{"header": "x-user"}]}
            });
        })
        .await;
    stack
        .eventually("the old listener drained and was removed", || async {
            stack.envoy_stat("listener_manager.listener_modified").await > changes_before
                && stack
                    .envoy_stat("listener_manager.total_listeners_draining")
                    .await
                    == 0
        })
        .await;
    let body = json!({"amount": 3});
    for (first, then) in [(OLD_RECIPE, CHANGING), (CHANGING, OLD_RECIPE)] {
        let key = format!("sources-{first}-to-{then}");
        let send = |via: usize, body: &Value| {
            stack
                .post_via(via, "/payments")
                .key(&key)
                .header("x-caller", "caller-of-alice")
                .json(body)
                .send()
        };
        let answered = send(first, &body).await;
        assert_eq!(answered.status, 201, "{answered}");
        let again = send(then, &body).await;
        again.assert_replayed();
        assert_eq!(again.body, answered.body);
        send(then, &json!({"amount": 999}))
            .await
            .assert_problem(409, "idempotency_conflict");
    }
    assert_eq!(
        stack.upstream_executions().await,
        2,
        "one execution per key"
    );
}
