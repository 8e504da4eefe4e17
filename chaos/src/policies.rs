//! The chaos plugin's policies and what the judge needs to know of them: the demo's
//! `payments` policy with `lease_ms: 3000` (short enough that faults outlast leases) under
//! `uncertain: hold`, where a caller that gives up mid-request never justifies a second run;
//! a copy under `uncertain: retry` for [`plan::RETRY_PREFIX`], where the re-run after an
//! uncertain outcome is the documented at-least-once case; and, in a run whose upstream keeps
//! a ledger, a copy under `uncertain: reconcile` for [`plan::RECONCILE_PREFIX`], asking that
//! upstream (`docs/reconcile.md`).

use keyflight_testkit::envoy_config;
use serde_json::{Value, json};

use crate::history::{self, PolicyFacts};
use crate::plan;

/// The policy's lease: short enough that a fault outlasts it.
pub const LEASE_MS: u64 = 3000;
/// The chaos policies' renew interval: the longest the filter accepts for that lease and
/// its 1 s call timeout (`filter/src/config/policy.rs`), written out so the plan knows it.
pub const RENEW_INTERVAL_MS: u64 = 400;

/// The shipped plugin configuration with the chaos policies: the demo's `payments` policy
/// with `lease_ms: 3000` and `uncertain: hold` (see the module doc), preceded by a copy
/// named `payments-retry` for paths under [`plan::RETRY_PREFIX`] with `uncertain: retry`
/// and, with `reconcile`, one named `payments-reconcile` for paths under
/// [`plan::RECONCILE_PREFIX`] with `uncertain: reconcile`, asking the demo upstream with the
/// stack's reconcile token (first match wins), so the judge meets every setting's rows.
/// With `after_reply` all record after the reply.
pub fn plugin(after_reply: bool, reconcile: bool) -> Result<Value, String> {
    let mut plugin = envoy_config::shipped_plugin_config(&envoy_config::shipped_demo_yaml())
        .map_err(|e| e.to_string())?;
    let policies = plugin["policies"]
        .as_array_mut()
        .ok_or("the shipped plugin configuration has no policies")?;
    let hold = policies
        .first_mut()
        .and_then(Value::as_object_mut)
        .ok_or("the shipped plugin configuration has no policies[0]")?;
    hold.insert("lease_ms".into(), json!(LEASE_MS));
    hold.insert("renew_interval_ms".into(), json!(RENEW_INTERVAL_MS));
    hold.insert("uncertain".into(), json!("hold"));
    if after_reply {
        hold.insert("record".into(), json!("after_reply"));
    }
    let variant = |name: &str, uncertain: &str, prefix: &str| {
        let mut policy = hold.clone();
        policy.insert("name".into(), json!(name));
        policy.insert("uncertain".into(), json!(uncertain));
        policy.insert(
            "match".into(),
            json!({"methods": ["POST"], "path_prefix": prefix}),
        );
        policy
    };
    let retry = variant("payments-retry", "retry", plan::RETRY_PREFIX);
    let mut reconciled = variant("payments-reconcile", "reconcile", plan::RECONCILE_PREFIX);
    reconciled.insert(
        "reconcile".into(),
        json!({"cluster": "demo_upstream", "token_env": "KEYFLIGHT_RECONCILE_TOKEN"}),
    );
    if reconcile {
        policies.insert(0, Value::Object(reconciled));
    }
    policies.insert(0, Value::Object(retry));
    Ok(plugin)
}

/// What the judge needs to know of `plugin`'s policies (see [`plugin`]).
pub fn policy_facts(plugin: &Value) -> PolicyFacts {
    let named = |name: &str| {
        plugin["policies"]
            .as_array()
            .and_then(|policies| policies.iter().find(|policy| policy["name"] == name))
    };
    let hold = named("payments").unwrap_or(&Value::Null);
    PolicyFacts {
        failure_cooldown_ms: hold["failure_cooldown_ms"]
            .as_u64()
            .unwrap_or(PolicyFacts::default().failure_cooldown_ms),
        forget_statuses: hold["forget_statuses"].as_array().map_or_else(
            history::default_forget_statuses,
            |statuses| {
                statuses
                    .iter()
                    .filter_map(|s| s.as_u64().and_then(|s| u16::try_from(s).ok()))
                    .collect()
            },
        ),
        uncertain_retry_prefix: Some(plan::RETRY_PREFIX.to_owned()),
        reconcile_prefix: named("payments-reconcile").map(|_| plan::RECONCILE_PREFIX.to_owned()),
        edge_max_staleness_ms: plugin["edge_cache"]["max_staleness_ms"]
            .as_u64()
            .unwrap_or_else(history::default_max_staleness_ms),
        record_retry_budget_ms: hold["record_retry_budget_ms"]
            .as_u64()
            .unwrap_or_else(history::default_record_retry_budget_ms),
    }
}

#[cfg(test)]
mod tests {
    use keyflight_filter::config::Uncertain;

    use super::*;

    #[test]
    fn the_filter_loads_every_chaos_plugin_and_the_judge_reads_each_policy() {
        for (after_reply, reconcile) in [(false, false), (true, false), (false, true)] {
            let plugin = plugin(after_reply, reconcile).expect("the shipped demo's plugin");
            let text = serde_json::to_vec(&plugin).expect("JSON");
            if let Err(e) = keyflight_filter::parse_plugin_config(&text) {
                panic!("after_reply={after_reply} reconcile={reconcile}: {e}");
            }
            let facts = policy_facts(&plugin);
            assert_eq!(facts.uncertain("/payments?delay_ms=5"), Uncertain::Hold);
            assert_eq!(facts.uncertain("/payments/retry"), Uncertain::Retry);
            let reconciled = facts.uncertain("/payments/reconcile?status=503");
            match reconcile {
                true => assert_eq!(reconciled, Uncertain::Reconcile),
                false => assert_eq!(reconciled, Uncertain::Hold, "no such policy: hold's"),
            }
        }
    }
}
