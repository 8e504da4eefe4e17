//! The operator actions, made as an operator makes them during load: through a
//! lease-store's admin API on its own listener, with the operator token
//! (`docs/records.md#operators`). Each acts on the newest record in the state it needs, so
//! the key's late callers meet the change: an erase takes `completed`, `pending` and
//! `unknown` records in turn (a settled record, a request still running, an outcome nobody
//! knows), a resolve an `unknown` one. A resolve as completed records an answer of its own
//! (`201`, a body naming the action), which every later replay of the key must then be; a
//! resolve as failed says the operation did not happen, so the next same-body request runs.

use keyflight_protocol::wire::{ACK_REPLAY_RISK_HEADER, StoredResponse};
use keyflight_testkit::stack::{ADMIN_TOKEN, Stack};
use serde_json::{Value, json};

use crate::history::{FaultKind, OperatorAction};

/// The status a resolve records.
const RESOLVED_STATUS: u16 = 201;

/// The states an erase takes in turn, by its step's position in the plan.
const ERASED_STATES: [&str; 3] = ["completed", "pending", "unknown"];

/// Makes the action `kind`, the plan's step at `position`, through lease-store `store`'s
/// admin API; `nth` names it.
pub async fn act(
    stack: &Stack,
    kind: FaultKind,
    position: usize,
    store: usize,
    nth: i64,
) -> OperatorAction {
    let base = format!(
        "http://{}:{}/v1/records",
        stack.store_ip(store),
        stack.store_admin_port(store)
    );
    let client = reqwest::Client::new();
    let state = match kind {
        FaultKind::OperatorResolve | FaultKind::OperatorResolveFailed => "unknown",
        _ => ERASED_STATES[position % ERASED_STATES.len()],
    };
    let mut action = OperatorAction {
        scope: None,
        answered: None,
        resolved: None,
        state: Some(state.to_owned()),
    };
    let listed = client
        .get(format!("{base}?state={state}&limit=1"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await;
    let newest = match listed {
        Ok(answer) => answer.json::<Value>().await.ok(),
        Err(_) => None,
    };
    let Some(scope) = newest
        .as_ref()
        .and_then(|list| list["records"][0]["scope"].as_str())
        .map(str::to_owned)
    else {
        return action;
    };
    let request = match kind {
        FaultKind::OperatorResolve => {
            let body = format!("{{\"resolved_by\":\"operator\",\"action\":{nth}}}");
            let response = StoredResponse::new(RESOLVED_STATUS, Vec::new(), body.as_bytes());
            action.resolved = Some((RESOLVED_STATUS, body));
            client.post(format!("{base}/{scope}/resolve")).json(&json!({
                "as": "completed",
                "response": response,
                "reason": format!("chaos operator action {nth}"),
            }))
        }
        FaultKind::OperatorResolveFailed => {
            client.post(format!("{base}/{scope}/resolve")).json(&json!({
                "as": "failed",
                "reason": format!("chaos operator action {nth}"),
            }))
        }
        _ => client
            .delete(format!("{base}/{scope}?reason=chaos-operator-action-{nth}"))
            .header(ACK_REPLAY_RISK_HEADER, "true"),
    };
    action.answered = request
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .ok()
        .map(|answer| answer.status().as_u16());
    action.scope = Some(scope);
    action
}
