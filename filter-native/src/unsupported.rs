//! What a configuration may not ask of this adapter yet (`filter-native/README.md#not-yet-equal`):
//! a policy whose guarantee rests on the record outbox or on lease renewals, which do not
//! run here. Such a configuration is refused at load, as an invalid one is, rather than
//! served with a weaker promise than it states: `record: after_reply` records only through
//! the outbox, and under `uncertain: retry` a request that outlives its unrenewed lease would
//! be taken over and run twice (under `hold`, `record` and `reconcile` a lapsed lease is held
//! `unknown` instead).

use keyflight_filter::config::{Config, RecordWhen, Uncertain};

/// Why this adapter cannot serve `config`, naming the policy and its setting.
pub fn unsupported(config: &Config) -> Option<String> {
    config.policies.iter().find_map(|policy| {
        let setting = match (policy.record, policy.uncertain) {
            (RecordWhen::AfterReply, _) => "record: after_reply (it records through the outbox)",
            (_, Uncertain::Retry) => {
                "uncertain: retry (without lease renewals a long request would be taken over)"
            }
            _ => return None,
        };
        Some(format!(
            "policy {:?} sets {setting}, which the native adapter does not run yet \
             (filter-native/README.md#not-yet-equal); use the Wasm filter for it",
            policy.name
        ))
    })
}

#[cfg(test)]
mod tests {
    use keyflight_filter::parse_plugin_config;

    use super::*;

    fn config(policy: &str) -> Config {
        let json = format!(
            r#"{{"lease_store": {{"cluster": "ls", "token": "t"}},
                "policies": [{{"name": "pay", "match": {{"path_prefix": "/pay"}}{policy}}}]}}"#
        );
        parse_plugin_config(json.as_bytes()).expect("a valid configuration")
    }

    #[test]
    fn the_default_policy_and_every_at_most_once_setting_are_served() {
        assert_eq!(unsupported(&config("")), None);
        for uncertain in ["hold", "record"] {
            let policy = format!(r#", "uncertain": "{uncertain}""#);
            assert_eq!(unsupported(&config(&policy)), None, "{uncertain}");
        }
    }

    #[test]
    fn what_rests_on_the_outbox_or_on_renewals_is_refused_by_name() {
        let after_reply = unsupported(&config(r#", "record": "after_reply""#));
        assert!(
            after_reply.is_some_and(|why| why.contains("\"pay\"") && why.contains("after_reply"))
        );
        let retry = unsupported(&config(r#", "uncertain": "retry""#));
        assert!(retry.is_some_and(|why| why.contains("uncertain: retry")));
    }
}
