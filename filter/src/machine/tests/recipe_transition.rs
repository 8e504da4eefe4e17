//! A policy that names its previous recipe claims, renews and settles under both scopes
//! (`docs/stream-machine.md#recipe-transitions`).

use keyflight_protocol::wire::ReleaseAs;
use keyflight_protocol::{Principal, PrincipalSource, RequestHead, Rules, ScopeMode, Target};

use super::*;
use crate::outbox::OutboxAction;

/// The request's scope under `mode`, as a proxy on that recipe computes it.
fn scope_under(mode: ScopeMode) -> Digest {
    let headers = keyed();
    let target = Target::from_headers(&headers).unwrap();
    let names: Vec<String> = crate::config::DEFAULT_FINGERPRINT_HEADERS
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    let rules = Rules {
        key_header: "idempotency-key",
        fingerprint_headers: &names,
    };
    let head = RequestHead::read(target, &headers, &rules).unwrap();
    let source = PrincipalSource::Header("x-user".into());
    let principal = Principal::Named {
        source: &source,
        name: "alice",
    };
    head.identify(principal, mode, b"").scope.unwrap()
}

fn transition() -> Rc<Config> {
    config_with(
        serde_json::json!({}),
        serde_json::json!({"scope": "service", "previous": {"scope": "route"}}),
    )
}

#[test]
fn the_claim_carries_the_previous_recipes_scope_and_the_same_fingerprint() {
    let mut s = Harness::new(transition());
    let StoreCall::Claim { scope, request } = s.drive_to_claim(br#"{"amount": 10}"#) else {
        panic!("a claim")
    };
    assert_eq!(scope, scope_under(ScopeMode::Service));
    let previous = request.previous.expect("the previous recipe's identity");
    assert_eq!(previous.scope, scope_under(ScopeMode::Route));
    assert_eq!(previous.fingerprint, request.fingerprint);

    // Without a previous recipe the claim is what it always was.
    let mut s = Harness::new(config());
    let StoreCall::Claim { request, .. } = s.drive_to_claim(br#"{"amount": 10}"#) else {
        panic!("a claim")
    };
    assert_eq!(request.previous, None);
}

#[test]
fn renews_and_every_settle_name_the_previous_scope() {
    let previous = Some(scope_under(ScopeMode::Route));
    // Finalize.
    let mut s = to_upstream(transition());
    let renew = s.worker.outbox().on_tick(NOW_MS + 10_000);
    let [OutboxAction::Dispatch { call, .. }] = renew.as_slice() else {
        panic!("{renew:?}")
    };
    let StoreCall::Renew { request, .. } = call else {
        panic!("{call:?}")
    };
    assert_eq!(request.previous_scope, previous);
    s.respond(200, false);
    let out = s.response_body(b"{\"ok\":true}");
    let StoreCall::Finalize { request, .. } = single_call(&out) else {
        panic!("{out:?}")
    };
    assert_eq!(request.previous_scope, previous);
    // Release.
    let mut s = to_upstream(transition());
    let out = s.respond(503, true);
    let StoreCall::Release { request, .. } = single_call(&out) else {
        panic!("{out:?}")
    };
    assert_eq!(
        (request.release_as, request.previous_scope),
        (ReleaseAs::Cooldown, previous)
    );
}

#[test]
fn a_previous_recipe_that_is_the_current_one_is_refused() {
    let doc = serde_json::json!({
        "lease_store": {"cluster": "ls", "token": "t"},
        "policies": [{"name": "p", "match": {"path_prefix": "/p"},
                      "scope": "route", "previous": {"scope": "route"}}]
    });
    let error = parse_plugin_config(doc.to_string().as_bytes()).unwrap_err();
    assert!(
        error.to_string().contains("policies[0].previous"),
        "{error}"
    );
}

/// A store that predates recipe transitions refuses the claim (its request type denies
/// unknown fields): the request is refused, never passed unguarded, even under
/// `failure_mode: open`.
#[test]
fn a_store_that_refuses_the_dual_claim_fails_closed_whatever_the_failure_mode() {
    let config = config_with(
        serde_json::json!({}),
        serde_json::json!({"scope": "service", "previous": {"scope": "route"},
                           "failure_mode": "open"}),
    );
    let mut s = Harness::new(config);
    s.drive_to_claim(br#"{"amount": 10}"#);
    let out = s.answer(
        Some(400),
        br#"{"type":"about:blank","title":"unknown field `previous`"}"#,
    );
    assert_eq!(reply(&out).status, 503, "{out:?}");
    assert!(
        !out.contains(&Action::ResumeRequest),
        "never forwarded: {out:?}"
    );
    assert!(
        out.iter().any(|a| matches!(a, Action::Log { message, .. }
            if message.contains("previous recipe"))),
        "the log says why: {out:?}"
    );

    // Without a previous recipe, a 400 follows the failure mode as before.
    let mut s = Harness::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"failure_mode": "open"}),
    ));
    s.drive_to_claim(br#"{"amount": 10}"#);
    let out = s.answer(Some(400), b"{}");
    assert!(out.contains(&Action::ResumeRequest), "{out:?}");
}

/// `identity.previous`: a change of principal sources claims under the sources before it
/// too; a request those sources would refuse has no previous scope.
#[test]
fn a_change_of_principal_sources_claims_under_the_previous_sources_too() {
    let config = config_with(
        serde_json::json!({"identity": {
            "principal": [{"header": "x-subject"}],
            "previous": {"principal": [{"header": "x-user"}]}
        }}),
        serde_json::json!({}),
    );
    let mut s = Harness::new(Rc::clone(&config));
    let mut headers = keyed();
    headers.push(h("x-subject", "alice-subject"));
    let out = s.headers(headers, false);
    assert_eq!(out, vec![Action::PauseRequest]);
    let out = s.body(br#"{"amount": 10}"#);
    let Some(StoreCall::Claim {
        scope,
        request: claim,
    }) = calls(&out).first().map(|c| (*c).clone())
    else {
        panic!("{out:?}")
    };
    // The previous scope is the one a proxy reading x-user (alice) computes: the default
    // test config's route scope for alice.
    assert_eq!(
        claim.previous.map(|p| p.scope),
        Some(scope_under(ScopeMode::Route))
    );
    assert_ne!(scope, scope_under(ScopeMode::Route));

    // No x-user: a proxy on the previous sources refused it (401), so nothing to claim there.
    let mut s = Harness::new(config);
    let headers = request(
        "POST",
        "/payments",
        &[("idempotency-key", KEY), ("x-subject", "alice-subject")],
    );
    s.headers(headers, false);
    let out = s.body(br#"{"amount": 10}"#);
    let Some(StoreCall::Claim { request, .. }) = calls(&out).first().map(|c| (*c).clone()) else {
        panic!("{out:?}")
    };
    assert_eq!(request.previous, None);
}

/// The scope of `principal` for [`keyed`] under route scope.
fn scope_of(principal: Principal<'_>) -> Digest {
    let headers = keyed();
    let target = Target::from_headers(&headers).unwrap();
    let names: Vec<String> = crate::config::DEFAULT_FINGERPRINT_HEADERS
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    let rules = Rules {
        key_header: "idempotency-key",
        fingerprint_headers: &names,
    };
    let head = RequestHead::read(target, &headers, &rules).unwrap();
    head.identify(principal, ScopeMode::Route, b"")
        .scope
        .unwrap()
}

#[test]
fn leaving_the_delegated_principal_claims_the_pairs_old_scope_too() {
    let sources = serde_json::json!({
        "actor": [{"header": "x-actor"}], "principal": [{"header": "x-user"}]
    });
    let mut identity = sources.clone();
    identity["delegation"] = "actor".into();
    identity["previous"] = sources;
    let config = config_with(
        serde_json::json!({ "identity": identity }),
        serde_json::json!({}),
    );
    let mut s = Harness::new(config);
    let mut headers = keyed();
    headers.push(h("x-actor", "support-bot"));
    assert_eq!(s.headers(headers, false), vec![Action::PauseRequest]);
    let out = s.body(b"");
    let StoreCall::Claim { scope, request } = single_call(&out) else {
        panic!("{out:?}")
    };
    let user = PrincipalSource::Header("x-user".into());
    let actor = PrincipalSource::Header("x-actor".into());
    let bot = keyflight_protocol::Party {
        source: &actor,
        name: "support-bot",
    };
    assert_eq!(
        scope,
        scope_of(Principal::Named {
            source: bot.source,
            name: bot.name,
        })
    );
    // A proxy still on the default scoped the request by the user and the actor.
    assert_eq!(
        request.previous.map(|previous| previous.scope),
        Some(scope_of(Principal::Delegated {
            subject: keyflight_protocol::Party {
                source: &user,
                name: "alice",
            },
            actor: bot,
        }))
    );
}
