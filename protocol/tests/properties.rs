//! Property tests for K1, K3, K4 and JCS (native only: proptest needs an OS
//! random source that wasm32-unknown-unknown lacks; the wasm build is held to
//! the same answers through the shared vectors in `spec/vectors.rs`).

// An integration test is test code: its helpers may state expectations with these too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![cfg(not(target_arch = "wasm32"))]

use keyflight_protocol::authority::Authority;
use keyflight_protocol::fingerprint::{BodyForm, body_digest, explain, fingerprint_digested};
use keyflight_protocol::json::canonicalize;
use keyflight_protocol::key::parse_key;
use keyflight_protocol::media_type::MediaType;
use keyflight_protocol::{
    Digest, FingerprintInput, Principal, RequestHead, Rules, ScopeMode, Target, fingerprint,
};
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
    let target = Target::new("POST", "/p", "h", Some("https"));
    fingerprint(&FingerprintInput {
        target: &target,
        media_type: &MediaType::parse(b"application/json"),
        body: body.as_bytes(),
        selected_headers: &[],
    })
}

/// A request target spelled from a small alphabet, so near-collisions
/// (respellings, reorderings) are frequent.
fn target_text() -> impl Strategy<Value = String> {
    "[/a.%2eEfF5~+=&?;Aa]{0,20}"
}

/// The fingerprint of a bodiless GET with `content_type`.
fn target_fingerprint(
    path: &str,
    content_type: Option<&[u8]>,
) -> keyflight_protocol::fingerprint::Explanation {
    let target = Target::new("GET", path, "h", Some("https"));
    let media_type = content_type.map_or(MediaType::Absent, MediaType::parse);
    explain(&FingerprintInput {
        target: &target,
        media_type: &media_type,
        body: b"",
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
    fn a_digested_json_body_frames_to_the_same_fingerprint(doc in json(), spelling in spelling()) {
        let body = render(&doc, &spelling);
        let target = Target::new("POST", "/p", "h", Some("https"));
        let media_type = MediaType::parse(b"application/json");
        let input = FingerprintInput {
            target: &target,
            media_type: &media_type,
            body: body.as_bytes(),
            selected_headers: &[("if-match", Some(b"\"v1\"".as_slice()))],
        };
        let digested = body_digest(&media_type, body.as_bytes());
        prop_assert!(digested.canonical, "{body}");
        prop_assert_eq!(fingerprint_digested(&input, digested), fingerprint(&input));
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
    fn target_normalization_is_idempotent(path in target_text()) {
        let first = Target::new("GET", &path, "h", None);
        let query: Vec<String> = first.query.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let again_text = if query.is_empty() {
            first.path.clone()
        } else {
            format!("{}?{}", first.path, query.join("&"))
        };
        let again = Target::new("GET", &again_text, "h", None);
        prop_assert_eq!(&again.path, &first.path);
        prop_assert_eq!(&again.query, &first.query);
        // Policies see the identity path itself among its readings, once.
        let readings = first.match_paths();
        prop_assert_eq!(&readings[0], &first.path);
        let mut unique = readings.clone();
        unique.sort();
        unique.dedup();
        prop_assert_eq!(unique.len(), readings.len());
    }

    #[test]
    fn authority_normalization_is_idempotent(
        authority in "[a-zA-Z.:\\[\\]0-9]{0,16}",
        scheme in prop::option::of(prop::sample::select(vec!["http", "https", "HTTPS", "ftp"])),
    ) {
        let once = Authority::new(&authority, scheme).normalized();
        prop_assert_eq!(Authority::new(&once, scheme).normalized(), once.clone());
        prop_assert_eq!(Authority::new(&authority.to_ascii_uppercase(), scheme).normalized(), once);
    }

    #[test]
    fn media_type_normalization_is_idempotent(value in "[a-zA-Z/+;= \t\"\\\\,-]{0,30}") {
        let once = MediaType::parse(value.as_bytes());
        if let MediaType::Parsed { .. } = once {
            let printed = once.to_string();
            prop_assert_eq!(MediaType::parse(printed.as_bytes()), once, "{}", printed);
        }
    }

    #[test]
    fn equal_fingerprints_mean_equal_normal_forms(
        a in target_text(),
        b in target_text(),
        ta in prop::option::of("[a-zA-Z/+;= \"-]{0,12}"),
        tb in prop::option::of("[a-zA-Z/+;= \"-]{0,12}"),
    ) {
        // The framing is injective: two requests share a fingerprint exactly
        // when every normalized part is equal.
        let ea = target_fingerprint(&a, ta.as_deref().map(str::as_bytes));
        let eb = target_fingerprint(&b, tb.as_deref().map(str::as_bytes));
        let same_parts = (&ea.normalized_path, &ea.sorted_query, &ea.media_type)
            == (&eb.normalized_path, &eb.sorted_query, &eb.media_type);
        prop_assert_eq!(ea.fingerprint == eb.fingerprint, same_parts, "{:?} {:?} vs {:?} {:?}", a, ta, b, tb);
    }

    #[test]
    fn no_input_panics(
        method in any::<String>(),
        path in any::<String>(),
        authority in any::<String>(),
        content_type in prop::option::of(prop_oneof![
            Just(b"application/json".to_vec()),
            prop::collection::vec(any::<u8>(), 0..40),
        ]),
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            "[\\[\\]{}\",:0-9eE.+ \\\\a-z-]{0,64}".prop_map(String::into_bytes),
        ],
        extra in prop::collection::vec((prop::sample::select(vec!["if-match", "idempotency-key", "content-type", "x-user"]), prop::collection::vec(any::<u8>(), 0..16)), 0..4),
        key_values in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..3),
    ) {
        let mut headers: Vec<(String, Vec<u8>)> = vec![
            (":method".into(), method.into_bytes()),
            (":path".into(), path.into_bytes()),
            (":authority".into(), authority.into_bytes()),
        ];
        if let Some(ct) = content_type {
            headers.push(("content-type".into(), ct));
        }
        headers.extend(extra.into_iter().map(|(n, v)| (n.to_owned(), v)));
        let names = ["if-match".to_owned()];
        let rules = Rules { key_header: "idempotency-key", fingerprint_headers: &names };
        if let Some(target) = Target::from_headers(&headers) {
            let _ = target.match_paths();
            if let Ok(head) = RequestHead::read(target, &headers, &rules) {
                let id = head.identify(Principal::AnonymousShared, ScopeMode::Route, &body);
                let e = &id.explanation;
                // What the edge's memo keeps of a body gives the same identity.
                let digested = body_digest(&head.media_type, &body);
                prop_assert_eq!(
                    head.identify_digested(Principal::AnonymousShared, ScopeMode::Route, digested),
                    (id.scope, e.fingerprint)
                );
                if let BodyForm::CanonicalJson(text) = &e.body_form {
                    prop_assert_eq!(e.body_digest, Digest::of(text.as_bytes()));
                } else {
                    prop_assert_eq!(e.body_digest, Digest::of(&body));
                }
            }
        }
        let source = keyflight_protocol::PrincipalSource::Header("x-user".into());
        let _ = keyflight_protocol::principal::name_from_headers(&source, "x-user", &headers);
        let _ = canonicalize(&body);
        let keys: Vec<&[u8]> = key_values.iter().map(Vec::as_slice).collect();
        let _ = parse_key(&keys);
    }
}

/// An owned principal the strategy below draws: `None` is `anonymous: shared`, one party
/// is a plain principal, two are a delegated one (subject, actor).
type DrawnPrincipal = Option<(DrawnParty, Option<DrawnParty>)>;
type DrawnParty = (keyflight_protocol::PrincipalSource, String);

/// Sources and names from tiny alphabets, so that near-collisions (the same name under
/// another source, a subject that equals an actor, names that look like framing markers)
/// come up often.
fn drawn_party() -> impl Strategy<Value = DrawnParty> {
    use keyflight_protocol::PrincipalSource;
    let source = prop_oneof![
        "[xy]{1,2}".prop_map(PrincipalSource::Header),
        prop::collection::vec("[xy]{1,2}", 1..3).prop_map(PrincipalSource::Property),
        ("[xy]{1,2}", prop::collection::vec("[xy]{1,2}", 1..3)).prop_map(
            |(metadata_key, claim)| {
                PrincipalSource::JwtClaim {
                    metadata_key,
                    claim,
                }
            }
        ),
    ];
    let name = prop_oneof![
        "[ab]{0,2}",
        Just("named".to_owned()),
        Just("delegated".to_owned())
    ];
    (source, name)
}

fn drawn_principal() -> impl Strategy<Value = DrawnPrincipal> {
    prop::option::of((drawn_party(), prop::option::of(drawn_party())))
}

fn as_principal(drawn: &DrawnPrincipal) -> Principal<'_> {
    use keyflight_protocol::Party;
    match drawn {
        None => Principal::AnonymousShared,
        Some(((source, name), None)) => Principal::Named { source, name },
        Some(((subject_source, subject), Some((actor_source, actor)))) => Principal::Delegated {
            subject: Party {
                source: subject_source,
                name: subject,
            },
            actor: Party {
                source: actor_source,
                name: actor,
            },
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// The scope frames the principal injectively: a delegated principal never shares a
    /// scope with a plain subject, a plain actor, the pair the other way round or another
    /// pair; plain and anonymous principals keep theirs (`docs/identity.md#the-scope`).
    #[test]
    fn principals_share_a_scope_only_when_equal(
        a in drawn_principal(),
        b in drawn_principal(),
        service in any::<bool>(),
    ) {
        let target = Target::new("POST", "/v1/orders", "orders.shop.svc", Some("https"));
        let key = parse_key(&[b"k-1".as_slice()]).unwrap().unwrap();
        let mode = if service { ScopeMode::Service } else { ScopeMode::Route };
        let of = |drawn: &DrawnPrincipal| {
            keyflight_protocol::scope(&keyflight_protocol::ScopeInput {
                principal: as_principal(drawn),
                target: &target,
                key: &key,
                mode,
            })
        };
        prop_assert_eq!(of(&a) == of(&b), a == b, "{:?} vs {:?}", a, b);
        // The parts of a delegated principal, alone or swapped, are other principals.
        // Each is compared with the pair that differs in the subject or the actor alone.
        if let (Some((subject, Some(actor))), Some((other, _))) = (&a, &b) {
            for part in [
                Some((subject.clone(), None)),
                Some((actor.clone(), None)),
                Some((actor.clone(), Some(subject.clone()))),
                Some((subject.clone(), Some(other.clone()))),
                Some((other.clone(), Some(actor.clone()))),
            ] {
                prop_assert_eq!(of(&a) == of(&part), a == part, "{:?} vs {:?}", a, part);
            }
        }
    }
}

proptest! {
    /// A framed `completed` answer reads back as the same answer, whatever bytes its
    /// body holds and whatever characters its headers do (a newline in one is escaped
    /// in the head, so it never ends the head early).
    #[test]
    fn a_framed_answer_reads_back_whole(
        status in 100u16..=599,
        headers in proptest::collection::vec((".{0,8}", ".{0,12}"), 0..4),
        body in proptest::collection::vec(any::<u8>(), 0..512),
        record_expires_in_ms in proptest::option::of(any::<u64>()),
    ) {
        use keyflight_protocol::wire::{ClaimAnswer, ClaimResponse, StoredResponse, framed};
        let answer = |body: &[u8]| ClaimAnswer {
            response: ClaimResponse::Completed {
                response: StoredResponse::new(status, headers.clone(), body),
            },
            record_expires_in_ms,
            claimed_after_ms: None,
        };
        let frame = framed::write(answer(&body)).unwrap();
        let (head, rest) = framed::split(&frame).unwrap();
        prop_assert_eq!(rest, &body[..]);
        let head: ClaimAnswer = serde_json::from_slice(head).unwrap();
        prop_assert_eq!(head, answer(b""));
    }
}
