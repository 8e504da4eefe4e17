//! A policy's previous recipe: the request's identity as the policy computed it before a
//! change (`docs/stream-machine.md#recipe-transitions`).
//!
//! While a policy names its previous recipe, every claim also carries the request's scope
//! under that recipe, and the store claims both scopes as one
//! (`docs/records.md#claims-across-a-recipe-change`): a proxy still on the old recipe, and
//! one rolled back to it, find the request under their own scope. The fingerprint does not
//! depend on anything a previous recipe can name yet, so it is the same under both.

use keyflight_protocol::scope::{self, ScopeInput, ScopeMode};
use keyflight_protocol::{Digest, Principal, RequestHead};

/// What a policy computed identities with before its last change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviousRecipe {
    /// The previous `scope` mode.
    pub scope: ScopeMode,
}

/// The request's scope under `previous`, when it has a key.
pub fn previous_scope(
    head: &RequestHead,
    principal: Principal<'_>,
    previous: &PreviousRecipe,
) -> Option<Digest> {
    head.key.as_ref().map(|key| {
        scope::scope(&ScopeInput {
            principal,
            target: &head.target,
            key,
            mode: previous.scope,
        })
    })
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
            let previous = previous_scope(&head, principal, &PreviousRecipe { scope: before });
            prop_assert_eq!(previous, Some(scope_under(&head, principal, before)));
            prop_assert_ne!(previous, Some(scope_under(&head, principal, now)));
        }
    }
}
