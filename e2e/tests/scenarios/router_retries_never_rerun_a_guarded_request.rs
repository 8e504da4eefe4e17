//! F15: Envoy's own retries never run a guarded request twice.
//!
//! A route `retry_policy` resends a request inside one stream, after keyflight's claim and
//! out of its sight: under `retry_on: reset,5xx`, an upstream that dies right after its
//! side effect (`?abort=NAME`: the execution counts, then the connection closes without an
//! answer) is simply called again, and the caller gets the second execution's 201. By
//! default (`router_retries: off`) the filter caps every guarded request it forwards at zero
//! retries, so the reset reaches keyflight as an uncertain outcome instead. With
//! `router_retries: route` the route's policy applies, and the shipped one retries only
//! failures where the request never reached the upstream (a refused connection).

use keyflight_e2e::{Reply, Stack, StackOptions};
use keyflight_testkit::envoy_variants::EnvoyEdit;
use keyflight_testkit::process::free_port;
use serde_json::json;

/// Retries Envoy's router made on the demo upstream's cluster.
const ROUTER_RETRIES: &str = "cluster.demo_upstream.upstream_rq_retry";

/// A route that resends on any reset or 5xx: the kind of policy that is not safe.
fn permissive_route() -> StackOptions {
    StackOptions::default()
        .envoy(EnvoyEdit::RouteRetryOn("reset,5xx".into()))
        .policy(|policy| {
            policy.insert("uncertain".into(), json!("hold"));
        })
}

/// Envoy answered itself (a reset before any response), not the upstream or keyflight.
fn assert_envoy_reset_answer(reply: &Reply) {
    assert_eq!(reply.status, 503, "{reply}");
    assert!(
        reply.text().contains("reset"),
        "Envoy's own reset answer: {reply}"
    );
}

#[tokio::test]
async fn a_permissive_route_does_not_resend_a_guarded_request_that_reset_after_its_effect() {
    let stack = Stack::start(permissive_route()).await;
    let body = json!({"amount": 10});

    // Control: without a key the request is not guarded, and the route's policy resends it.
    let unguarded = stack
        .post("/payments?abort=unguarded")
        .json(&body)
        .send()
        .await;
    assert_eq!(
        unguarded.status, 201,
        "the router's retry answered: {unguarded}"
    );
    assert_eq!(
        stack.upstream_executions().await,
        2,
        "an unguarded request ran twice: the route really retries resets"
    );
    let retries_before = stack.envoy_stat(ROUTER_RETRIES).await;
    assert_eq!(retries_before, 1, "one router retry so far");

    // Guarded: the same failure runs once; the caller gets Envoy's reset answer.
    let first = stack
        .post("/payments?abort=guarded")
        .key("charge-1")
        .json(&body)
        .send()
        .await;
    assert_envoy_reset_answer(&first);
    assert_eq!(
        stack.upstream_executions().await,
        3,
        "the guarded one ran once"
    );
    assert_eq!(
        stack.envoy_stat(ROUTER_RETRIES).await,
        retries_before,
        "the router did not retry the guarded request"
    );

    // The outcome is uncertain (the upstream acted, then reset): under `uncertain: hold`
    // every same-key retry gets 409 operation_unknown, and nothing runs again.
    for _ in 0..2 {
        let retry = stack
            .post("/payments?abort=guarded")
            .key("charge-1")
            .json(&body)
            .send()
            .await;
        retry.assert_problem(409, "operation_unknown");
    }
    assert_eq!(stack.upstream_executions().await, 3);
}

#[tokio::test]
async fn a_trusted_caller_cannot_switch_router_retries_on_for_a_guarded_request() {
    // Envoy honours `x-envoy-retry-on` from callers it treats as internal (a mesh-internal
    // listener); the filter's zero-retry cap overrides any policy, whoever asked for it.
    let stack = Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::TrustLoopbackCallers)
            .policy(|policy| {
                policy.insert("uncertain".into(), json!("hold"));
            }),
    )
    .await;
    let body = json!({"amount": 11});
    let asking = |path: &str| {
        stack
            .post(path)
            .header("x-envoy-retry-on", "reset,5xx")
            .header("x-envoy-max-retries", "3")
            .json(&body)
    };

    // Control: unguarded, the caller's header makes the router resend.
    let unguarded = asking("/payments?abort=unguarded").send().await;
    assert_eq!(
        unguarded.status, 201,
        "the router's retry answered: {unguarded}"
    );
    assert_eq!(stack.upstream_executions().await, 2);
    assert_eq!(stack.envoy_stat(ROUTER_RETRIES).await, 1);

    let guarded = asking("/payments?abort=guarded")
        .key("charge-2")
        .send()
        .await;
    assert_envoy_reset_answer(&guarded);
    assert_eq!(
        stack.upstream_executions().await,
        3,
        "the guarded one ran once"
    );
    assert_eq!(stack.envoy_stat(ROUTER_RETRIES).await, 1);
}

#[tokio::test]
async fn without_router_retries_a_refused_connection_is_a_plain_retryable_failure() {
    // Half of the cluster refuses connections and nothing retries them: the caller gets
    // Envoy's 503, and keyflight knows the request never left (one attempt, refused), so
    // even under `uncertain: hold` it records a cooldown, never an unknown outcome.
    let stack = Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::DeadUpstreamEndpoint { port: free_port() })
            .policy(|policy| {
                policy.insert("uncertain".into(), json!("hold"));
                policy.insert("failure_cooldown_ms".into(), json!(60_000));
            }),
    )
    .await;
    let body = json!({"amount": 12});
    let mut refused = None;
    let mut answered = 0;
    for n in 0..10 {
        let key = format!("charge-refused-{n}");
        let reply = stack.post("/payments").key(&key).json(&body).send().await;
        match reply.status {
            201 => answered += 1,
            503 => {
                refused = Some(key);
                break;
            }
            _ => panic!("neither the upstream's answer nor a refused connection: {reply}"),
        }
    }
    let key = refused.expect("round robin sends some request to the endpoint that refuses");
    assert_eq!(stack.upstream_executions().await, answered);
    assert_eq!(stack.envoy_stat(ROUTER_RETRIES).await, 0);

    let retry = stack.post("/payments").key(&key).json(&body).send().await;
    retry.assert_problem(503, "retryable_cooldown");
    assert_eq!(stack.upstream_executions().await, answered);
}

#[tokio::test]
async fn router_retries_route_retries_refused_connections_and_never_a_reset() {
    // The shipped route retries connect-failure, refused-stream and reset-before-request.
    let stack = Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::DeadUpstreamEndpoint { port: free_port() })
            .policy(|policy| {
                policy.insert("router_retries".into(), json!("route"));
                policy.insert("uncertain".into(), json!("hold"));
            }),
    )
    .await;
    let body = json!({"amount": 13});

    // Every request that met the refusing endpoint was retried onto the live one: all
    // answered, each ran once.
    for n in 0..6 {
        let reply = stack
            .post("/payments")
            .key(&format!("charge-route-{n}"))
            .json(&body)
            .send()
            .await;
        assert_eq!(reply.status, 201, "{reply}");
    }
    assert_eq!(stack.upstream_executions().await, 6);
    let retries = stack.envoy_stat(ROUTER_RETRIES).await;
    assert!(
        retries >= 1,
        "the route retried refused connections ({retries})"
    );

    // A reset after the request reached the upstream is none of those conditions.
    let reset = stack
        .post("/payments?abort=route")
        .key("charge-route-reset")
        .json(&body)
        .send()
        .await;
    assert_envoy_reset_answer(&reset);
    assert_eq!(stack.upstream_executions().await, 7, "it ran once");
    let retry = stack
        .post("/payments?abort=route")
        .key("charge-route-reset")
        .json(&body)
        .send()
        .await;
    retry.assert_problem(409, "operation_unknown");
    assert_eq!(stack.upstream_executions().await, 7);
}
