//! K4: the request fingerprint.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
use wasm_bindgen_test::wasm_bindgen_test as test;

use keyflight_protocol::fingerprint::{BodyForm, Explanation, RawReason, explain};
use keyflight_protocol::media_type::MediaType;
use keyflight_protocol::{Digest, FingerprintInput, Target};

const JSON: Option<&str> = Some("application/json");

/// A request to fingerprint, built up by the tests.
#[derive(Clone, Copy)]
struct Request<'a> {
    method: &'a str,
    path_and_query: &'a str,
    content_type: Option<&'a str>,
    body: &'a [u8],
    selected_headers: &'a [(&'a str, Option<&'a [u8]>)],
}

impl Request<'_> {
    fn explain(&self) -> Explanation {
        let target = Target::new(self.method, self.path_and_query, "h", Some("http"));
        let media_type = match self.content_type {
            Some(value) => MediaType::parse(value.as_bytes()),
            None => MediaType::Absent,
        };
        explain(&FingerprintInput {
            target: &target,
            media_type: &media_type,
            body: self.body,
            selected_headers: self.selected_headers,
        })
    }

    fn fingerprint(&self) -> Digest {
        self.explain().fingerprint
    }
}

fn request<'a>(
    path_and_query: &'a str,
    content_type: Option<&'a str>,
    body: &'a str,
) -> Request<'a> {
    Request {
        method: "POST",
        path_and_query,
        content_type,
        body: body.as_bytes(),
        selected_headers: &[],
    }
}

fn json_body(body: &str) -> Digest {
    request("/v1/payments", JSON, body).fingerprint()
}

#[test]
fn json_key_order_and_whitespace_do_not_matter() {
    let compact = json_body(r#"{"amount":100,"currency":"EUR","meta":{"a":1,"b":[1,2]}}"#);
    let spaced = json_body(
        "{ \"meta\" : { \"b\" : [ 1 , 2 ] , \"a\" : 1 } ,\n\t\"currency\":\"EUR\", \"amount\": 100 }\n",
    );
    assert_eq!(compact, spaced);
}

#[test]
fn equal_numbers_spelled_differently_are_equal() {
    let reference = json_body(r#"{"amount":1}"#);
    for same in ["1.0", "1e0", "10e-1", "1.000", "0.1E1"] {
        assert_eq!(
            json_body(&format!(r#"{{"amount":{same}}}"#)),
            reference,
            "{same}"
        );
    }
    assert_eq!(json_body("[-0]"), json_body("[0]"));
    assert_eq!(json_body(r#"["\u20ac"]"#), json_body(r#"["€"]"#));
}

#[test]
fn any_value_change_changes_the_fingerprint() {
    let reference =
        json_body(r#"{"amount":100,"currency":"EUR","tags":["a","b"],"ok":true,"note":null}"#);
    for changed in [
        r#"{"amount":101,"currency":"EUR","tags":["a","b"],"ok":true,"note":null}"#,
        r#"{"amount":100,"currency":"USD","tags":["a","b"],"ok":true,"note":null}"#,
        r#"{"amount":100,"currency":"EUR","tags":["b","a"],"ok":true,"note":null}"#,
        r#"{"amount":100,"currency":"EUR","tags":["a","b"],"ok":false,"note":null}"#,
        r#"{"amount":100,"currency":"EUR","tags":["a","b"],"ok":true,"note":""}"#,
        r#"{"amount":100,"currency":"EUR","tags":["a","b"],"ok":true}"#,
        r#"{"amount":"100","currency":"EUR","tags":["a","b"],"ok":true,"note":null}"#,
        r#"{"Amount":100,"currency":"EUR","tags":["a","b"],"ok":true,"note":null}"#,
    ] {
        assert_ne!(json_body(changed), reference, "{changed}");
    }
}

#[test]
fn lossy_numbers_fall_back_to_raw_bytes() {
    let above = request("/p", JSON, r#"{"amount":9007199254740993}"#).explain();
    let below = request("/p", JSON, r#"{"amount":9007199254740992}"#).explain();
    assert_eq!(above.body_form, BodyForm::Raw(RawReason::LossyNumber));
    assert_eq!(
        above.body_digest,
        Digest::of(br#"{"amount":9007199254740993}"#)
    );
    // 2^53 itself is exact, so it is canonicalized…
    assert_eq!(
        below.body_form,
        BodyForm::CanonicalJson(r#"{"amount":9007199254740992}"#.to_owned())
    );
    // …and the two amounts never look equal.
    assert_ne!(above.fingerprint, below.fingerprint);

    let precise = request("/p", JSON, "[1.00000000000000000001]").explain();
    assert_eq!(precise.body_form, BodyForm::Raw(RawReason::LossyNumber));
    assert_ne!(
        precise.fingerprint,
        request("/p", JSON, "[1]").explain().fingerprint
    );
}

#[test]
fn a_lossy_number_anywhere_makes_the_whole_body_raw() {
    // Member reordering moves numbers around; the check still pairs them correctly.
    let exact = request("/p", JSON, r#"{"z":1.5,"a":[2,3e2],"m":{"k":-0.25}}"#).explain();
    assert!(
        matches!(exact.body_form, BodyForm::CanonicalJson(_)),
        "{:?}",
        exact.body_form
    );
    let lossy = request(
        "/p",
        JSON,
        r#"{"z":1.5,"a":[2,12345678901234567890],"m":{"k":-0.25}}"#,
    )
    .explain();
    assert_eq!(lossy.body_form, BodyForm::Raw(RawReason::LossyNumber));
}

#[test]
fn content_type_decides_whether_json_is_canonicalized() {
    let body = r#"{ "b":1, "a":2 }"#;
    let as_json = request("/p", JSON, body).explain();
    let as_utf8_json = request("/p", Some("Application/JSON; charset=UTF-8"), body).explain();
    let as_suffix = request("/p", Some("application/merge-patch+json"), body).explain();
    let as_text = request("/p", Some("text/plain"), body).explain();
    let untyped = request("/p", None, body).explain();
    assert_eq!(
        as_json.body_form,
        BodyForm::CanonicalJson(r#"{"a":2,"b":1}"#.to_owned())
    );
    assert_eq!(as_json.fingerprint, as_utf8_json.fingerprint);
    assert_eq!(as_json.body_form, as_suffix.body_form);
    assert_eq!(
        as_text.body_form,
        BodyForm::Raw(RawReason::NotJsonContentType)
    );
    assert_eq!(as_text.body_digest, Digest::of(body.as_bytes()));
    assert_eq!(untyped.body_form, as_text.body_form);
}

#[test]
fn the_media_type_and_its_parameters_are_part_of_the_fingerprint() {
    let body = r#"[{"op":"add","path":"/a","value":1}]"#;
    let types = [
        Some("application/json-patch+json"),
        Some("application/merge-patch+json"),
        Some("application/json"),
        Some("text/plain"),
        Some("text/plain; charset=iso-8859-1"),
        Some("multipart/form-data; boundary=a"),
        Some("multipart/form-data; boundary=b"),
        Some("application/json; charset=utf-16"),
        Some("application/json; charset = utf-8"),
        Some(""),
        None,
    ];
    let prints: Vec<Digest> = types
        .iter()
        .map(|t| request("/p", *t, body).fingerprint())
        .collect();
    for (i, a) in prints.iter().enumerate() {
        for (j, b) in prints.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "{:?} vs {:?}", types[i], types[j]);
        }
    }
}

#[test]
fn json_in_another_charset_is_digested_raw() {
    let body = r#"{ "b":1, "a":2 }"#;
    let e = request("/p", Some("application/json; charset=iso-8859-1"), body).explain();
    assert_eq!(e.body_form, BodyForm::Raw(RawReason::NotUtf8Charset));
    assert_eq!(e.body_digest, Digest::of(body.as_bytes()));
}

#[test]
fn raw_bytes_never_pass_for_canonical_json() {
    // The text body's bytes are exactly the JSON body's canonical form, so the
    // body digests agree; the body-form field still tells them apart.
    let canonical = r#"{"a":2,"b":1}"#;
    let as_json = request("/p", JSON, r#"{"b":1,"a":2}"#).explain();
    let as_text = request("/p", Some("text/plain"), canonical).explain();
    assert_eq!(as_json.body_digest, as_text.body_digest);
    assert_ne!(as_json.fingerprint, as_text.fingerprint);
}

#[test]
fn invalid_json_is_digested_raw() {
    for bad in [
        "{",
        "{\"a\":1}x",
        "[1,]",
        "{'a':1}",
        "NaN",
        "[\"\\ud800\"]",
        "\u{feff}{}",
        r#"{"a":1,"a":1}"#,
        r#"{"a":1,"\u0061":2}"#,
    ] {
        let e = request("/p", JSON, bad).explain();
        assert_eq!(e.body_form, BodyForm::Raw(RawReason::InvalidJson), "{bad}");
        assert_eq!(e.body_digest, Digest::of(bad.as_bytes()), "{bad}");
    }
    let not_utf8 = Request {
        body: b"[\"\xff\"]",
        ..request("/p", JSON, "")
    };
    assert_eq!(
        not_utf8.explain().body_form,
        BodyForm::Raw(RawReason::InvalidJson)
    );
}

#[test]
fn duplicate_keys_do_not_hide_a_different_amount() {
    // serde_json alone would keep the last member and make these equal.
    assert_ne!(
        json_body(r#"{"amount":1,"amount":2}"#),
        json_body(r#"{"amount":2}"#)
    );
}

#[test]
fn an_empty_body_is_raw_whatever_the_content_type() {
    let json = request("/p", JSON, "").explain();
    let text = request("/p", Some("text/plain"), "").explain();
    assert_eq!(json.body_form, BodyForm::Raw(RawReason::InvalidJson));
    assert_eq!(json.body_digest, Digest::of(b""));
    assert_eq!(json.body_digest, text.body_digest);
}

#[test]
fn too_deep_json_is_raw_not_a_crash() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(
        request("/p", JSON, &deep).explain().body_form,
        BodyForm::Raw(RawReason::InvalidJson)
    );
    let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
    assert!(matches!(
        request("/p", JSON, &ok).explain().body_form,
        BodyForm::CanonicalJson(_)
    ));
}

#[test]
fn query_order_does_not_matter_but_values_do() {
    let f = |pq| request(pq, None, "").fingerprint();
    assert_eq!(f("/p?b=2&a=1"), f("/p?a=1&b=2"));
    // Repeated names keep their order: frameworks read the first or the last.
    assert_ne!(f("/p?a=1&a=2"), f("/p?a=2&a=1"));
    assert_eq!(f("/p?a=1&b=0&a=2"), f("/p?b=0&a=1&a=2"));
    assert_ne!(f("/p?a=1&a=2"), f("/p?a=1"));
    assert_ne!(f("/p?a=1"), f("/p?a=2"));
    assert_ne!(f("/p?a=1&b=2"), f("/p?a=1b=2"));
    assert_ne!(f("/p?a=1&b=2"), f("/p?a=1%26b=2"));
    assert_ne!(f("/p?a+b=1"), f("/p?a%20b=1"));
    assert_eq!(f("/p?"), f("/p"));
    assert_ne!(f("/p?a"), f("/p"));
}

#[test]
fn percent_case_is_normalized_and_dot_and_empty_segments_are_kept() {
    let f = |pq| request(pq, None, "").fingerprint();
    assert_ne!(f("/v1/./orders/../payments"), f("/v1/payments"));
    assert_eq!(
        f("/v1/%2E/orders/%2e%2E/payments"),
        f("/v1/./orders/../payments")
    );
    assert_eq!(f("/v1/%7Euser"), f("/v1/~user"));
    assert_eq!(f("/v1/a%2fb"), f("/v1/a%2Fb"));
    assert_ne!(f("/v1/a%2Fb"), f("/v1/a/b"));
    assert_ne!(f("/v1//payments"), f("/v1/payments"));
    assert_eq!(f("/p?q=%7e%2f"), f("/p?q=~%2F"));
    let e = request("/a/b/../%63?z=%7a&y", None, "").explain();
    assert_eq!(e.normalized_path, "/a/b/../c");
    assert_eq!(
        e.sorted_query,
        vec![
            ("y".to_owned(), String::new()),
            ("z".to_owned(), "z".to_owned())
        ]
    );
}

#[test]
fn method_is_part_of_the_fingerprint() {
    let post = request("/p", None, "");
    let put = Request {
        method: "PUT",
        ..post
    };
    assert_ne!(post.fingerprint(), put.fingerprint());
}

#[test]
fn selected_headers_absent_empty_and_present_differ() {
    let with = |headers: &[(&str, Option<&[u8]>)]| {
        Request {
            selected_headers: headers,
            ..request("/p", None, "")
        }
        .fingerprint()
    };
    let absent = with(&[("if-match", None)]);
    let empty = with(&[("if-match", Some(b""))]);
    let present = with(&[("if-match", Some(b"\"v1\""))]);
    let other = with(&[("if-match", Some(b"\"v2\""))]);
    assert_ne!(absent, empty);
    assert_ne!(empty, present);
    assert_ne!(present, other);
    // Not configuring a header differs from configuring it and not receiving it.
    assert_ne!(with(&[]), absent);
    // Surrounding whitespace is not part of a field value; name case and the
    // configured order do not matter.
    assert_eq!(with(&[("if-match", Some(b" \t\"v1\" "))]), present);
    assert_eq!(with(&[("If-Match", Some(b"\"v1\""))]), present);
    let both = with(&[("if-match", Some(b"1")), ("x-approval-digest", Some(b"2"))]);
    assert_eq!(
        both,
        with(&[("x-approval-digest", Some(b"2")), ("if-match", Some(b"1"))])
    );
    // A value cannot move from one header to another.
    assert_ne!(
        both,
        with(&[("if-match", Some(b"2")), ("x-approval-digest", Some(b"1"))])
    );
}

#[test]
fn explanation_shows_every_step() {
    let headers: &[(&str, Option<&[u8]>)] =
        &[("x-approval-digest", Some(b" abc ")), ("if-match", None)];
    let input = Request {
        method: "POST",
        path_and_query: "/v1/%6Frders?b=2&a=1",
        content_type: Some("application/json; charset=UTF-8"),
        body: br#"{"b":true, "a":[1.0]}"#,
        selected_headers: headers,
    };
    let e = input.explain();
    assert_eq!(e.method, "POST");
    assert_eq!(e.normalized_path, "/v1/orders");
    assert_eq!(e.media_type.to_string(), "application/json");
    assert_eq!(
        e.sorted_query,
        vec![
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "2".to_owned())
        ]
    );
    assert_eq!(
        e.body_form,
        BodyForm::CanonicalJson(r#"{"a":[1],"b":true}"#.to_owned())
    );
    assert_eq!(e.body_digest, Digest::of(br#"{"a":[1],"b":true}"#));
    assert_eq!(
        e.headers,
        vec![
            ("if-match".to_owned(), None),
            ("x-approval-digest".to_owned(), Some("abc".to_owned()))
        ]
    );
    assert_eq!(e.fingerprint, input.fingerprint());
}
