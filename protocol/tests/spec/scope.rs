//! K3: the scope digest.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
use wasm_bindgen_test::wasm_bindgen_test as test;

use keyflight_protocol::key::parse_key;
use keyflight_protocol::{Digest, IdempotencyKey, Principal, ScopeInput, ScopeMode, scope};

fn key(raw: &str) -> IdempotencyKey {
    parse_key(&[raw.as_bytes()])
        .expect("valid")
        .expect("present")
}

fn base<'a>(k: &'a IdempotencyKey) -> ScopeInput<'a> {
    ScopeInput {
        principal: Principal::Named("spiffe://cluster.local/ns/shop/sa/web"),
        authority: "orders.shop.svc",
        method: "POST",
        path_and_query: "/v1/orders?dry=false",
        key: k,
        mode: ScopeMode::Route,
    }
}

#[test]
fn route_is_the_default_mode() {
    assert_eq!(ScopeMode::default(), ScopeMode::Route);
}

#[test]
fn same_input_same_scope() {
    let k = key("k-1");
    assert_eq!(scope(&base(&k)), scope(&base(&k)));
    // The quoted form is the same key, so the same scope.
    let quoted = key("\"k-1\"");
    assert_eq!(scope(&base(&k)), scope(&base(&quoted)));
}

#[test]
fn every_route_field_changes_the_scope() {
    let k = key("k-1");
    let other_key = key("k-2");
    let reference = scope(&base(&k));
    let variants = [
        ScopeInput {
            principal: Principal::Named("spiffe://cluster.local/ns/shop/sa/batch"),
            ..base(&k)
        },
        ScopeInput {
            principal: Principal::AnonymousShared,
            ..base(&k)
        },
        ScopeInput {
            authority: "billing.shop.svc",
            ..base(&k)
        },
        ScopeInput {
            method: "PUT",
            ..base(&k)
        },
        ScopeInput {
            path_and_query: "/v1/orders?dry=true",
            ..base(&k)
        },
        ScopeInput {
            path_and_query: "/v1/orders",
            ..base(&k)
        },
        ScopeInput {
            key: &other_key,
            ..base(&k)
        },
        ScopeInput {
            mode: ScopeMode::Service,
            ..base(&k)
        },
    ];
    let mut seen = vec![reference];
    for variant in &variants {
        let s = scope(variant);
        assert!(!seen.contains(&s), "{variant:?} collides");
        seen.push(s);
    }
}

#[test]
fn respelling_the_target_keeps_the_scope() {
    // A retry that reorders its query or respells its path is the same
    // operation (K4 agrees): it must find the same record, not run again.
    let k = key("k-1");
    let reference = ScopeInput {
        path_and_query: "/v1/orders?a=1&b=%7e",
        ..base(&k)
    };
    for same in ["/v1/orders?b=~&a=1", "/v1/./x/../orders?a=1&b=%7E"] {
        assert_eq!(
            scope(&ScopeInput {
                path_and_query: same,
                ..reference
            }),
            scope(&reference),
            "{same}"
        );
    }
    for other in [
        "/v1/orders?a=1&b=~&b=~",
        "/v1/orders?a=1",
        "/v1/orders/?a=1&b=~",
        "/v1/Orders?a=1&b=~",
    ] {
        assert_ne!(
            scope(&ScopeInput {
                path_and_query: other,
                ..reference
            }),
            scope(&reference),
            "{other}"
        );
    }
}

#[test]
fn service_mode_ignores_method_and_path() {
    let k = key("k-1");
    let service = ScopeInput {
        mode: ScopeMode::Service,
        ..base(&k)
    };
    let elsewhere = ScopeInput {
        method: "DELETE",
        path_and_query: "/v1/refunds/7",
        ..service
    };
    assert_eq!(scope(&service), scope(&elsewhere));
    // …but not principal, authority or key.
    let other_principal = ScopeInput {
        principal: Principal::Named("bob"),
        ..service
    };
    let other_authority = ScopeInput {
        authority: "billing.shop.svc",
        ..service
    };
    assert_ne!(scope(&service), scope(&other_principal));
    assert_ne!(scope(&service), scope(&other_authority));
}

#[test]
fn actors_are_isolated() {
    // Same key, same route, two callers: two records, so one caller's response
    // can never be replayed to the other.
    let k = key("shared-looking-key");
    let alice = ScopeInput {
        principal: Principal::Named("alice"),
        ..base(&k)
    };
    let bob = ScopeInput {
        principal: Principal::Named("bob"),
        ..base(&k)
    };
    assert_ne!(scope(&alice), scope(&bob));
    // Shifting bytes between principal and authority cannot forge a scope.
    let left = ScopeInput {
        principal: Principal::Named("alice.orders"),
        authority: "shop.svc",
        ..base(&k)
    };
    let right = ScopeInput {
        principal: Principal::Named("alice"),
        authority: ".orders.shop.svc",
        ..base(&k)
    };
    assert_ne!(scope(&left), scope(&right));
}

#[test]
fn a_principal_named_like_the_anonymous_marker_is_not_anonymous() {
    let k = key("k-1");
    for name in ["anonymous", "", "named"] {
        let named = ScopeInput {
            principal: Principal::Named(name),
            ..base(&k)
        };
        let anonymous = ScopeInput {
            principal: Principal::AnonymousShared,
            ..base(&k)
        };
        assert_ne!(scope(&named), scope(&anonymous), "{name:?}");
    }
}

#[test]
fn scope_prints_as_wire_hex() {
    let k = key("k-1");
    let s = scope(&base(&k));
    let hex = s.to_hex();
    assert_eq!(hex.len(), 64);
    assert_eq!(Digest::from_hex(&hex), Ok(s));
    assert_eq!(s.to_string(), format!("sha256:{hex}"));
}
