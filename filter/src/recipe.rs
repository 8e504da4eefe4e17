//! A policy's previous recipe: the request's identity as the policy computed it before a
//! change (`docs/stream-machine.md#recipe-transitions`).
//!
//! While a policy names its previous recipe, every claim also carries the request's scope
//! under that recipe, and the store claims both scopes as one
//! (`docs/records.md#claims-across-a-recipe-change`): a proxy still on the old recipe, and
//! one rolled back to it, find the request under their own scope. The fingerprint does not
//! depend on anything a previous recipe can name yet, so it is the same under both.

use std::fmt;

use keyflight_protocol::scope::{self, ScopeInput, ScopeMode};
use keyflight_protocol::{Digest, Principal, RequestHead};

use crate::config::{Anonymous, Config, Delegation, Identity, Policy};

/// What a policy computed identities with before its last change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviousRecipe {
    /// The previous `scope` mode.
    pub scope: ScopeMode,
}

/// The request's scope under the previous recipe (`mode` and `principal` as a proxy on
/// it reads them; `None`: no principal it would accept, or no transition), when it differs
/// from `current`.
pub fn previous_scope(
    head: &RequestHead,
    current: Digest,
    mode: ScopeMode,
    principal: Option<Principal<'_>>,
) -> Option<Digest> {
    let key = head.key.as_ref()?;
    let previous = scope::scope(&ScopeInput {
        principal: principal?,
        target: &head.target,
        key,
        mode,
    });
    (previous != current).then_some(previous)
}

/// What a configuration change does to one policy's identities (`keyflight recipe-diff`,
/// `docs/operations.md#upgrades`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyChange {
    /// The policy's name (policies are matched by name).
    pub policy: String,
    /// What changes, in words; empty when nothing does.
    pub changes: Vec<String>,
    /// Whether the change is safe for keyed retries that cross it.
    pub verdict: Verdict,
}

/// Whether a keyed retry that crosses the change keeps its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing that enters the scope or the fingerprint changes.
    Unchanged,
    /// The scope changes and the new configuration names the old recipe as its previous one.
    Transition,
    /// A new policy, or one that goes away: no record changes identity.
    AddedOrRemoved,
    /// Identities change with no previous recipe that covers it: a retry crossing the
    /// change runs again (a new scope) or gets 409 (a new fingerprint).
    Unsafe,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Unchanged => "unchanged",
            Verdict::Transition => "safe: the previous recipe is named",
            Verdict::AddedOrRemoved => "no existing identity changes",
            Verdict::Unsafe => "UNSAFE: retries that cross the change run again or get 409",
        })
    }
}

/// What changing the plugin configuration from `old` to `new` does to each policy's
/// identities. Works in either direction: a rollback is `diff(new, old)`.
pub fn diff(old: &Config, new: &Config) -> Vec<PolicyChange> {
    let identity = IdentityChange {
        changes: identity_changes(&old.identity, &new.identity),
        covered: new
            .identity
            .previous
            .as_deref()
            .is_some_and(|previous| previous.same_sources(&old.identity)),
    };
    let mut out: Vec<PolicyChange> = new
        .policies
        .iter()
        .map(|policy| {
            match old
                .policies
                .iter()
                .find(|before| before.name == policy.name)
            {
                Some(before) => policy_change(before, policy, &identity),
                None => PolicyChange {
                    policy: policy.name.clone(),
                    changes: vec!["new policy".to_owned()],
                    verdict: Verdict::AddedOrRemoved,
                },
            }
        })
        .collect();
    out.extend(
        old.policies
            .iter()
            .filter(|before| !new.policies.iter().any(|p| p.name == before.name))
            .map(|before| PolicyChange {
                policy: before.name.clone(),
                changes: vec!["policy removed: its requests are no longer guarded by it".into()],
                verdict: Verdict::AddedOrRemoved,
            }),
    );
    out
}

/// Changes of the principal sources, which enter every policy's scope.
fn identity_changes(old: &Identity, new: &Identity) -> Vec<String> {
    let describe = |sources: &[std::rc::Rc<keyflight_protocol::PrincipalSource>]| {
        sources.iter().map(|s| s.describe()).collect::<Vec<_>>()
    };
    let mut changes = Vec::new();
    for (what, before, after) in [
        ("identity.actor", describe(&old.actor), describe(&new.actor)),
        (
            "identity.principal",
            describe(&old.principal),
            describe(&new.principal),
        ),
    ] {
        if before != after {
            changes.push(format!(
                "{what}: {before:?} -> {after:?} (the scope changes)"
            ));
        }
    }
    if old.delegation != new.delegation {
        changes.push(format!(
            "identity.delegation: {} -> {} (the scope changes for requests with both a subject \
             and an actor)",
            delegation_name(old.delegation),
            delegation_name(new.delegation)
        ));
    }
    if old.not_principals != new.not_principals {
        changes.push(format!(
            "identity.not_principals: {:?} -> {:?} (the scope changes for requests those names \
             reach)",
            old.not_principals, new.not_principals
        ));
    }
    changes
}

/// What changes in the principal sources, and whether `identity.previous` names the old ones.
struct IdentityChange {
    changes: Vec<String>,
    covered: bool,
}

fn policy_change(old: &Policy, new: &Policy, identity: &IdentityChange) -> PolicyChange {
    let mut changes = identity.changes.clone();
    let mut covered = identity.changes.is_empty() || identity.covered;
    if old.scope != new.scope {
        changes.push(format!(
            "scope: {} -> {}",
            mode_name(old.scope),
            mode_name(new.scope)
        ));
        covered = covered && new.previous == Some(PreviousRecipe { scope: old.scope });
    } else if new.previous.is_some() && new.previous != old.previous {
        changes.push(
            "previous names a recipe the old configuration did not use: it covers nothing"
                .to_owned(),
        );
    }
    if old.fingerprint_headers != new.fingerprint_headers {
        changes.push(format!(
            "fingerprint_headers: {:?} -> {:?} (the fingerprint changes; no previous recipe can \
             name it yet)",
            old.fingerprint_headers, new.fingerprint_headers
        ));
        covered = false;
    }
    if old.anonymous != new.anonymous && new.anonymous == Anonymous::Shared {
        changes.push("anonymous: reject -> shared (requests refused before now run)".to_owned());
    }
    let verdict = if changes.is_empty() {
        Verdict::Unchanged
    } else if !covered {
        Verdict::Unsafe
    } else if old.scope != new.scope || !identity.changes.is_empty() {
        Verdict::Transition
    } else {
        Verdict::Unchanged
    };
    PolicyChange {
        policy: new.name.clone(),
        changes,
        verdict,
    }
}

fn delegation_name(delegation: Delegation) -> &'static str {
    match delegation {
        Delegation::Actor => "actor",
        Delegation::SubjectAndActor => "subject_and_actor",
    }
}

fn mode_name(mode: ScopeMode) -> &'static str {
    match mode {
        ScopeMode::Route => "route",
        ScopeMode::Service => "service",
    }
}

#[cfg(test)]
mod tests {
    use keyflight_protocol::{PrincipalSource, Rules, Target};
    use proptest::prelude::*;

    use super::*;

    fn head(path: &str, key: &str) -> RequestHead {
        let headers: Vec<(String, Vec<u8>)> = [
            (":method", "POST"),
            (":path", path),
            (":authority", "api.example.com"),
            (":scheme", "https"),
            ("idempotency-key", key),
        ]
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
        .collect();
        let target = Target::from_headers(&headers).unwrap();
        let rules = Rules {
            key_header: "idempotency-key",
            fingerprint_headers: &[],
        };
        RequestHead::read(target, &headers, &rules).unwrap()
    }

    fn config(identity: &str, policy: &str) -> Config {
        let doc = format!(
            r#"{{"lease_store": {{"cluster": "ls", "token": "t"}},
                "identity": {identity},
                "policies": [{{"name": "payments", "match": {{"path_prefix": "/p"}} {policy}}}]}}"#
        );
        crate::config::parse_plugin_config(doc.as_bytes()).unwrap()
    }

    const USER: &str = r#"{"principal": [{"header": "x-user"}]}"#;

    fn verdict(old: &Config, new: &Config) -> Verdict {
        let changes = diff(old, new);
        assert_eq!(changes.len(), 1, "{changes:?}");
        changes[0].verdict
    }

    #[test]
    fn a_scope_change_is_safe_only_with_the_old_recipe_named() {
        let route = config(USER, "");
        let service = config(USER, r#", "scope": "service""#);
        let transition = config(
            USER,
            r#", "scope": "service", "previous": {"scope": "route"}"#,
        );
        let rollback = config(
            USER,
            r#", "scope": "route", "previous": {"scope": "service"}"#,
        );
        assert_eq!(verdict(&route, &route), Verdict::Unchanged);
        assert_eq!(verdict(&route, &service), Verdict::Unsafe);
        assert_eq!(verdict(&route, &transition), Verdict::Transition);
        // Rolling back to the bare old configuration leaves the new records behind.
        assert_eq!(verdict(&transition, &route), Verdict::Unsafe);
        assert_eq!(verdict(&transition, &rollback), Verdict::Transition);
        // Dropping `previous` after the transition changes no identity.
        assert_eq!(verdict(&transition, &service), Verdict::Unchanged);
    }

    #[test]
    fn principal_sources_and_fingerprint_headers_are_reported_unsafe() {
        let user = config(USER, "");
        let jwt = config(r#"{"principal": [{"header": "x-subject"}]}"#, "");
        let diffed = diff(&user, &jwt);
        assert_eq!(diffed[0].verdict, Verdict::Unsafe);
        assert!(
            diffed[0].changes[0].starts_with("identity.principal"),
            "{diffed:?}"
        );
        let named = config(
            r#"{"principal": [{"header": "x-subject"}],
                "previous": {"principal": [{"header": "x-user"}]}}"#,
            "",
        );
        assert_eq!(verdict(&user, &named), Verdict::Transition);
        assert_eq!(verdict(&named, &user), Verdict::Unsafe, "a bare rollback");
        let headers = config(USER, r#", "fingerprint_headers": ["if-match"]"#);
        assert_eq!(verdict(&user, &headers), Verdict::Unsafe);
    }

    #[test]
    fn the_delegated_principal_is_left_through_previous_never_reached_through_it() {
        const SOURCES: &str =
            r#""actor": [{"header": "x-actor"}], "principal": [{"header": "x-user"}]"#;
        let actor = config(&format!(r#"{{{SOURCES}, "delegation": "actor"}}"#), "");
        let delegated = config(&format!("{{{SOURCES}}}"), "");
        // The actor alone as the previous recipe would merge the users it acts for again
        // (refused at load): a retry crossing the switch may run once more.
        let diffed = diff(&actor, &delegated);
        assert_eq!(diffed[0].verdict, Verdict::Unsafe);
        assert_eq!(
            diffed[0].changes,
            vec![
                "identity.delegation: actor -> subject_and_actor (the scope changes for \
                 requests with both a subject and an actor)"
                    .to_owned()
            ]
        );
        // Back to the actor alone, the finer pair may be the previous recipe.
        let rollback = config(
            &format!(r#"{{{SOURCES}, "delegation": "actor", "previous": {{{SOURCES}}}}}"#),
            "",
        );
        assert_eq!(verdict(&delegated, &rollback), Verdict::Transition);
        assert_eq!(verdict(&rollback, &actor), Verdict::Unchanged);
    }

    #[test]
    fn added_and_removed_policies_are_listed() {
        let one = config(USER, "");
        let doc = r#"{"lease_store": {"cluster": "ls", "token": "t"},
            "identity": {"principal": [{"header": "x-user"}]},
            "policies": [{"name": "refunds", "match": {"path_prefix": "/r"}}]}"#;
        let other = crate::config::parse_plugin_config(doc.as_bytes()).unwrap();
        let verdicts: Vec<_> = diff(&one, &other)
            .into_iter()
            .map(|c| (c.policy, c.verdict))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                ("refunds".to_owned(), Verdict::AddedOrRemoved),
                ("payments".to_owned(), Verdict::AddedOrRemoved)
            ]
        );
    }

    fn scope_under(head: &RequestHead, principal: Principal<'_>, mode: ScopeMode) -> Digest {
        head.identify(principal, mode, b"{}").scope.unwrap()
    }

    proptest! {
        /// The previous scope is exactly the scope the old recipe's proxy computes, and a
        /// change of mode always gives another scope (so both records exist).
        #[test]
        fn the_previous_scope_is_the_old_recipes_scope(
            path in "/[a-z]{1,8}(\\?[a-z]=[0-9])?",
            key in "[A-Za-z0-9]{1,20}",
            user in "[a-z]{1,8}",
            service_before in any::<bool>(),
        ) {
            let head = head(&path, &key);
            let source = PrincipalSource::Header("x-user".into());
            let principal = Principal::Named { source: &source, name: &user };
            let (before, now) = if service_before {
                (ScopeMode::Service, ScopeMode::Route)
            } else {
                (ScopeMode::Route, ScopeMode::Service)
            };
            let current = scope_under(&head, principal, now);
            let previous = previous_scope(&head, current, before, Some(principal));
            prop_assert_eq!(previous, Some(scope_under(&head, principal, before)));
            prop_assert_ne!(previous, Some(current));
            // No change of recipe, no previous scope.
            prop_assert_eq!(previous_scope(&head, current, now, Some(principal)), None);
            prop_assert_eq!(previous_scope(&head, current, before, None), None);
        }
    }
}
