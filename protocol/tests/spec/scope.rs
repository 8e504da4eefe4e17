//! K3: the scope digest.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
use wasm_bindgen_test::wasm_bindgen_test as test;

use keyflight_protocol::key::parse_key;
use keyflight_protocol::{
    Digest, IdempotencyKey, Principal, PrincipalSource, ScopeInput, ScopeMode, Target, scope,
};

fn key(raw: &str) -> IdempotencyKey {
    parse_key(&[raw.as_bytes()])
        .expect("valid")
        .expect("present")
}

fn header_source() -> PrincipalSource {
    PrincipalSource::Header("x-user".into())
}

fn target(path_and_query: &str) -> Target {
    Target::new("POST", path_and_query, "orders.shop.svc", Some("https"))
}

/// The scope of `name` (read from header `x-user`) sending `key` to `target`.
fn scope_of(name: &str, target: &Target, key: &IdempotencyKey, mode: ScopeMode) -> Digest {
    let source = header_source();
    scope(&ScopeInput {
        principal: Principal::Named {
            source: &source,
            name,
        },
        target,
        key,
        mode,
    })
}

fn reference(k: &IdempotencyKey) -> Digest {
    scope_of(
        "spiffe://cluster.local/ns/shop/sa/web",
        &target("/v1/orders?dry=false"),
        k,
        ScopeMode::Route,
    )
}

#[test]
fn route_is_the_default_mode() {
    assert_eq!(ScopeMode::default(), ScopeMode::Route);
}

#[test]
fn same_input_same_scope() {
    let k = key("k-1");
    assert_eq!(reference(&k), reference(&k));
    // The quoted form is the same key, so the same scope.
    assert_eq!(reference(&k), reference(&key("\"k-1\"")));
}

#[test]
fn every_route_field_changes_the_scope() {
    let k = key("k-1");
    let web = "spiffe://cluster.local/ns/shop/sa/web";
    let t = target("/v1/orders?dry=false");
    let property = PrincipalSource::Property(vec!["source".into(), "principal".into()]);
    let jwt = PrincipalSource::jwt_claim("jwt_payload", "sub").expect("claim");
    let other_header = PrincipalSource::Header("x-actor".into());
    let named = |source: &PrincipalSource| {
        scope(&ScopeInput {
            principal: Principal::Named { source, name: web },
            target: &t,
            key: &k,
            mode: ScopeMode::Route,
        })
    };
    let variants = [
        scope_of(
            "spiffe://cluster.local/ns/shop/sa/batch",
            &t,
            &k,
            ScopeMode::Route,
        ),
        scope(&ScopeInput {
            principal: Principal::AnonymousShared,
            target: &t,
            key: &k,
            mode: ScopeMode::Route,
        }),
        named(&property),
        named(&jwt),
        named(&other_header),
        scope_of(
            web,
            &Target::new(
                "POST",
                "/v1/orders?dry=false",
                "billing.shop.svc",
                Some("https"),
            ),
            &k,
            ScopeMode::Route,
        ),
        scope_of(
            web,
            &Target::new(
                "PUT",
                "/v1/orders?dry=false",
                "orders.shop.svc",
                Some("https"),
            ),
            &k,
            ScopeMode::Route,
        ),
        scope_of(web, &target("/v1/orders?dry=true"), &k, ScopeMode::Route),
        scope_of(web, &target("/v1/orders"), &k, ScopeMode::Route),
        scope_of(web, &t, &key("k-2"), ScopeMode::Route),
        scope_of(web, &t, &k, ScopeMode::Service),
    ];
    let mut seen = vec![reference(&k)];
    for (i, s) in variants.iter().enumerate() {
        assert!(!seen.contains(s), "variant {i} collides");
        seen.push(*s);
    }
}

#[test]
fn a_jwt_subject_never_shares_a_workloads_scope() {
    // The same string from two kinds of source is two principals.
    let k = key("k-1");
    let t = target("/v1/orders");
    let id = "spiffe://cluster.local/ns/shop/sa/web";
    let peer =
        PrincipalSource::Property(vec!["connection".into(), "uri_san_peer_certificate".into()]);
    let sub = PrincipalSource::jwt_claim("jwt_payload", "sub").expect("claim");
    let of = |source: &PrincipalSource| {
        scope(&ScopeInput {
            principal: Principal::Named { source, name: id },
            target: &t,
            key: &k,
            mode: ScopeMode::Service,
        })
    };
    assert_ne!(of(&peer), of(&sub));
    // Two identity providers' subjects are two namespaces.
    let other_idp = PrincipalSource::jwt_claim("other_payload", "sub").expect("claim");
    assert_ne!(of(&sub), of(&other_idp));
}

#[test]
fn respelling_the_target_keeps_the_scope() {
    // A retry that reorders its query or respells its target is the same
    // operation (K4 agrees): it must find the same record, not run again.
    let k = key("k-1");
    let name = "alice";
    let reference = scope_of(name, &target("/v1/orders?a=1&b=%7e"), &k, ScopeMode::Route);
    for same in ["/v1/orders?b=~&a=1", "/v1/%6Frders?a=1&b=%7E"] {
        assert_eq!(
            scope_of(name, &target(same), &k, ScopeMode::Route),
            reference,
            "{same}"
        );
    }
    for authority in ["ORDERS.shop.svc", "orders.shop.svc.", "orders.shop.svc:443"] {
        let respelled = Target::new("POST", "/v1/orders?a=1&b=~", authority, Some("https"));
        assert_eq!(
            scope_of(name, &respelled, &k, ScopeMode::Route),
            reference,
            "{authority}"
        );
    }
    for other in [
        "/v1/orders?a=1&b=~&b=~",
        "/v1/orders?a=1",
        "/v1/orders/?a=1&b=~",
        "/v1/Orders?a=1&b=~",
        "/v1//orders?a=1&b=~",
        "/v1/x/../orders?a=1&b=~",
    ] {
        assert_ne!(
            scope_of(name, &target(other), &k, ScopeMode::Route),
            reference,
            "{other}"
        );
    }
}

#[test]
fn repeated_parameters_in_another_order_are_another_route() {
    let k = key("k-1");
    let ann_bob = target("/notify?to=ann&to=bob");
    let bob_ann = target("/notify?to=bob&to=ann");
    assert_ne!(
        scope_of("alice", &ann_bob, &k, ScopeMode::Route),
        scope_of("alice", &bob_ann, &k, ScopeMode::Route)
    );
    // Under service scope they share a scope; the fingerprint tells them apart.
    assert_eq!(
        scope_of("alice", &ann_bob, &k, ScopeMode::Service),
        scope_of("alice", &bob_ann, &k, ScopeMode::Service)
    );
}

#[test]
fn service_mode_ignores_method_and_path() {
    let k = key("k-1");
    let here = target("/v1/orders");
    let elsewhere = Target::new("DELETE", "/v1/refunds/7", "orders.shop.svc", Some("https"));
    let service = scope_of("alice", &here, &k, ScopeMode::Service);
    assert_eq!(
        service,
        scope_of("alice", &elsewhere, &k, ScopeMode::Service)
    );
    // …but not principal, authority or key.
    assert_ne!(service, scope_of("bob", &here, &k, ScopeMode::Service));
    let billing = Target::new("POST", "/v1/orders", "billing.shop.svc", Some("https"));
    assert_ne!(service, scope_of("alice", &billing, &k, ScopeMode::Service));
}

#[test]
fn actors_are_isolated() {
    // Same key, same route, two callers: two records, so one caller's response
    // can never be replayed to the other.
    let k = key("shared-looking-key");
    let t = target("/v1/orders");
    assert_ne!(
        scope_of("alice", &t, &k, ScopeMode::Route),
        scope_of("bob", &t, &k, ScopeMode::Route)
    );
    // Shifting bytes between principal and authority cannot forge a scope.
    let left = Target::new("POST", "/v1/orders", "shop.svc", Some("https"));
    let right = Target::new("POST", "/v1/orders", ".orders.shop.svc", Some("https"));
    assert_ne!(
        scope_of("alice.orders", &left, &k, ScopeMode::Route),
        scope_of("alice", &right, &k, ScopeMode::Route)
    );
}

#[test]
fn a_principal_named_like_the_anonymous_marker_is_not_anonymous() {
    let k = key("k-1");
    let t = target("/v1/orders");
    let anonymous = scope(&ScopeInput {
        principal: Principal::AnonymousShared,
        target: &t,
        key: &k,
        mode: ScopeMode::Route,
    });
    for name in ["anonymous", "", "named"] {
        assert_ne!(
            scope_of(name, &t, &k, ScopeMode::Route),
            anonymous,
            "{name:?}"
        );
    }
}

#[test]
fn scope_prints_as_wire_hex() {
    let s = reference(&key("k-1"));
    let hex = s.to_hex();
    assert_eq!(hex.len(), 64);
    assert_eq!(Digest::from_hex(&hex), Ok(s));
    assert_eq!(s.to_string(), format!("sha256:{hex}"));
}
