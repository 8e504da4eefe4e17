//! Property tests for K1, K4 and JCS (native only: proptest needs an OS
//! random source that wasm32-unknown-unknown lacks; the wasm build is held to
//! the same answers through the shared vectors in `spec/vectors.rs`).
#![cfg(not(target_arch = "wasm32"))]

use keyflight_protocol::fingerprint::{BodyForm, explain};
use keyflight_protocol::json::canonicalize;
use keyflight_protocol::key::parse_key;
use keyflight_protocol::{Digest, FingerprintInput, fingerprint};
use proptest::prelude::*;

/// A JSON document whose every number a double holds exactly, so JCS keeps
/// its value and only its spelling may vary.
#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool(bool),
    /// `mantissa × 10^-scale`: at most 10 significant digits, always exact.
    Number {
        mantissa: i32,
        scale: u8,
    },
    String(String),
    Array(Vec<Json>),
    /// Members with distinct keys.
    Object(Vec<(String, Json)>),
}

fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        (any::<i32>(), 0u8..7).prop_map(|(mantissa, scale)| Json::Number { mantissa, scale }),
        any::<String>().prop_map(Json::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|members| Json::Object(members.into_iter().collect())),
        ]
    })
}

/// How a document is spelled: member order, whitespace, number notation.
#[derive(Debug, Clone)]
struct Spelling {
    reverse_members: bool,
    exponent_numbers: bool,
    whitespace: Vec<&'static str>,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    let ws = prop::sample::select(vec!["", " ", "\n", "\t", "\r\n  "]);
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(ws, 1..8),
    )
        .prop_map(|(reverse_members, exponent_numbers, whitespace)| Spelling {
            reverse_members,
            exponent_numbers,
            whitespace,
        })
}

/// The plain spelling: members in order, no whitespace, plain decimals.
fn plain() -> Spelling {
    Spelling {
        reverse_members: false,
        exponent_numbers: false,
        whitespace: vec![""],
    }
}

struct Writer<'a> {
    spelling: &'a Spelling,
    spaces_written: usize,
    out: String,
}

impl Writer<'_> {
    fn space(&mut self) {
        let ws = &self.spelling.whitespace;
        self.out.push_str(ws[self.spaces_written % ws.len()]);
        self.spaces_written += 1;
    }

    fn string(&mut self, text: &str) {
        self.out
            .push_str(&serde_json::to_string(text).expect("strings serialize"));
    }

    fn value(&mut self, value: &Json) {
        self.space();
        match value {
            Json::Null => self.out.push_str("null"),
            Json::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            Json::Number { mantissa, scale } => {
                let text = number_text(*mantissa, *scale, self.spelling.exponent_numbers);
                self.out.push_str(&text);
            }
            Json::String(text) => self.string(text),
            Json::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.value(item);
                }
                self.space();
                self.out.push(']');
            }
            Json::Object(members) => {
                self.out.push('{');
                let mut ordered: Vec<&(String, Json)> = members.iter().collect();
                if self.spelling.reverse_members {
                    ordered.reverse();
                }
                for (i, (key, member)) in ordered.into_iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.space();
                    self.string(key);
                    self.space();
                    self.out.push(':');
                    self.value(member);
                }
                self.space();
                self.out.push('}');
            }
        }
        self.space();
    }
}

fn render(value: &Json, spelling: &Spelling) -> String {
    let mut w = Writer {
        spelling,
        spaces_written: 0,
        out: String::new(),
    };
    w.value(value);
    w.out
}

/// `mantissa × 10^-scale`, as a plain decimal (`-12.345`) or in exponent
/// notation (`-12345E-3`).
fn number_text(mantissa: i32, scale: u8, exponent: bool) -> String {
    if exponent {
        return format!("{mantissa}E-{scale}");
    }
    let digits = format!(
        "{:0>width$}",
        mantissa.unsigned_abs(),
        width = usize::from(scale) + 1
    );
    let (int, frac) = digits.split_at(digits.len() - usize::from(scale));
    let sign = if mantissa < 0 { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

/// The number of leaves (scalars) in a document.
fn leaves(value: &Json) -> usize {
    match value {
        Json::Array(items) => items.iter().map(leaves).sum(),
        Json::Object(members) => members.iter().map(|(_, m)| leaves(m)).sum(),
        _ => 1,
    }
}

/// Changes the `n`th leaf to a different value; returns false if there is none.
fn change_leaf(value: &mut Json, n: &mut usize) -> bool {
    match value {
        Json::Array(items) => items.iter_mut().any(|item| change_leaf(item, n)),
        Json::Object(members) => members.iter_mut().any(|(_, m)| change_leaf(m, n)),
        _ if *n > 0 => {
            *n -= 1;
            false
        }
        leaf => {
            *leaf = match leaf {
                Json::Null => Json::Bool(false),
                Json::Bool(b) => Json::Bool(!*b),
                Json::Number { mantissa, scale } => Json::Number {
                    mantissa: mantissa.wrapping_add(1),
                    scale: *scale,
                },
                Json::String(text) => Json::String(format!("{text}x")),
                Json::Array(_) | Json::Object(_) => return false,
            };
            true
        }
    }
}

fn json_fingerprint(body: &str) -> Digest {
    fingerprint(&FingerprintInput {
        method: "POST",
        path_and_query: "/p",
        content_type: Some("application/json"),
        body: body.as_bytes(),
        selected_headers: &[],
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn spelling_never_changes_the_fingerprint(doc in json(), spelling in spelling()) {
        let reference = render(&doc, &plain());
        let respelled = render(&doc, &spelling);
        let canonical = canonicalize(reference.as_bytes());
        prop_assert!(canonical.is_ok(), "{reference}: {canonical:?}");
        prop_assert_eq!(canonicalize(respelled.as_bytes()), canonical);
        prop_assert_eq!(json_fingerprint(&respelled), json_fingerprint(&reference));
    }

    #[test]
    fn canonical_text_is_a_fixed_point(doc in json(), spelling in spelling()) {
        let canonical = canonicalize(render(&doc, &spelling).as_bytes()).expect("exact JSON");
        prop_assert_eq!(canonicalize(canonical.as_bytes()), Ok(canonical.clone()));
    }

    #[test]
    fn changing_any_leaf_changes_the_fingerprint(
        doc in json(),
        spelling in spelling(),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut changed = doc.clone();
        let mut n = pick.index(leaves(&doc).max(1));
        prop_assume!(change_leaf(&mut changed, &mut n));
        prop_assert_ne!(json_fingerprint(&render(&changed, &spelling)), json_fingerprint(&render(&doc, &plain())));
    }

    #[test]
    fn integers_beyond_2_pow_53_never_collide(n in (1u64 << 53)..u64::MAX) {
        let a = json_fingerprint(&format!("{{\"amount\":{n}}}"));
        let b = json_fingerprint(&format!("{{\"amount\":{}}}", n + 1));
        prop_assert_ne!(a, b);
    }

    #[test]
    fn path_normalization_is_idempotent(path in "[/a-c.%0-9A-Fa-f~+=&?-]{0,24}") {
        let first = explain(&FingerprintInput {
            method: "GET", path_and_query: &path, content_type: None, body: b"", selected_headers: &[],
        });
        let query: Vec<String> = first.sorted_query.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let again_target = if query.is_empty() {
            first.normalized_path.clone()
        } else {
            format!("{}?{}", first.normalized_path, query.join("&"))
        };
        let again = explain(&FingerprintInput { path_and_query: &again_target, ..FingerprintInput {
            method: "GET", path_and_query: "", content_type: None, body: b"", selected_headers: &[],
        }});
        prop_assert_eq!(&again.normalized_path, &first.normalized_path);
        prop_assert_eq!(&again.sorted_query, &first.sorted_query);
    }

    #[test]
    fn no_input_panics(
        method in any::<String>(),
        path in any::<String>(),
        content_type in prop::option::of(prop_oneof![Just("application/json".to_owned()), any::<String>()]),
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            "[\\[\\]{}\",:0-9eE.+ \\\\a-z-]{0,64}".prop_map(String::into_bytes),
        ],
        headers in prop::collection::vec((any::<String>(), prop::option::of(prop::collection::vec(any::<u8>(), 0..16))), 0..4),
        key_values in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..3),
    ) {
        let selected: Vec<(&str, Option<&[u8]>)> =
            headers.iter().map(|(n, v)| (n.as_str(), v.as_deref())).collect();
        let input = FingerprintInput {
            method: &method,
            path_and_query: &path,
            content_type: content_type.as_deref(),
            body: &body,
            selected_headers: &selected,
        };
        let e = explain(&input);
        prop_assert_eq!(e.fingerprint, fingerprint(&input));
        if let BodyForm::CanonicalJson(text) = &e.body_form {
            prop_assert_eq!(e.body_digest, Digest::of(text.as_bytes()));
        } else {
            prop_assert_eq!(e.body_digest, Digest::of(&body));
        }
        let _ = canonicalize(&body);
        let keys: Vec<&[u8]> = key_values.iter().map(Vec::as_slice).collect();
        let _ = parse_key(&keys);
    }
}
