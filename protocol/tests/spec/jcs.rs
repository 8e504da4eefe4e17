//! RFC 8785 (JCS) canonicalization and the K4 exactness rule.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
use wasm_bindgen_test::wasm_bindgen_test as test;

use keyflight_protocol::fingerprint::RawReason;
use keyflight_protocol::json::canonicalize;
use keyflight_protocol::media_type::MediaType;

fn is_json_content_type(value: &str) -> bool {
    MediaType::parse(value.as_bytes()).is_json()
}

fn jcs(json: &str) -> String {
    canonicalize(json.as_bytes()).unwrap_or_else(|reason| panic!("{json}: {reason:?}"))
}

#[test]
fn json_content_types() {
    for yes in [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        " application/json ",
        "application/problem+json",
        "application/vnd.api+json; ext=x",
        "APPLICATION/MERGE-PATCH+JSON",
    ] {
        assert!(is_json_content_type(yes), "{yes}");
    }
    for no in [
        "",
        "json",
        "text/json",
        "text/plain",
        "application/jsonl",
        "application/json-seq",
        "application/+json",
        "application/x-www-form-urlencoded",
        "application/octet-stream; note=application/json",
        "multipart/form-data",
    ] {
        assert!(!is_json_content_type(no), "{no}");
    }
}

#[test]
fn numbers_use_es6_formatting() {
    assert_eq!(
        jcs("[1e21, 1e20, 1e-7, 0.000001, -0, 1E30, 4.50, 2e-3]"),
        "[1e+21,100000000000000000000,1e-7,0.000001,0,1e+30,4.5,0.002]"
    );
    assert_eq!(jcs("[0.000000000000000000000000001]"), "[1e-27]");
    assert_eq!(jcs("[123456789012345680000]"), "[123456789012345680000]");
    assert_eq!(
        jcs("[333333333.3333333, -1.5e-300, 5e-324]"),
        "[333333333.3333333,-1.5e-300,5e-324]"
    );
    assert_eq!(
        jcs("[9007199254740992, -9007199254740992]"),
        "[9007199254740992,-9007199254740992]"
    );
}

#[test]
fn numbers_a_double_cannot_hold_are_lossy() {
    for lossy in [
        "[333333333.33333329]",
        "[9007199254740993]",
        "[-9007199254740993]",
        "[18446744073709551617]",
        "[1.00000000000000000001]",
        "[0.1000000000000000000001]",
        "[1e-400]",
        "{\"a\":[1,{\"b\":12345678901234567891}]}",
    ] {
        assert_eq!(
            canonicalize(lossy.as_bytes()),
            Err(RawReason::LossyNumber),
            "{lossy}"
        );
    }
}

#[test]
fn out_of_range_numbers_are_invalid() {
    assert_eq!(canonicalize(b"[1e400]"), Err(RawReason::InvalidJson));
}

#[test]
fn strings_are_escaped_minimally() {
    assert_eq!(jcs(r#"["\u20ac"]"#), "[\"€\"]");
    assert_eq!(
        jcs(r#"["\u000f\u001F\u0000"]"#),
        r#"["\u000f\u001f\u0000"]"#
    );
    assert_eq!(jcs(r#"["\b\f\n\r\t\"\\\/"]"#), r#"["\b\f\n\r\t\"\\/"]"#);
    assert_eq!(jcs(r#"["\u0008\u000A\u0022\u005C"]"#), r#"["\b\n\"\\"]"#);
    assert_eq!(jcs(r#"["\u007f\u00e9\ud83d\ude00"]"#), "[\"\u{7f}é😀\"]");
    assert_eq!(jcs(r#"["\u0041\u0027<>&"]"#), "[\"A'<>&\"]");
}

#[test]
fn keys_sort_by_utf16_code_units() {
    // UTF-8 byte order would put U+FB33 (EF AC B3) before U+1F600 (F0 9F 98 80);
    // UTF-16 puts the surrogate pair (D83D …) first.
    let json = r#"{"\ufb33":4,"\ud83d\ude00":3,"\u00e9":2,"z":1,"\r":0,"10":5,"1":6,"":7}"#;
    assert_eq!(
        jcs(json),
        "{\"\":7,\"\\r\":0,\"1\":6,\"10\":5,\"z\":1,\"\u{e9}\":2,\"\u{1f600}\":3,\"\u{fb33}\":4}"
    );
}

#[test]
fn nested_structures_are_canonical_at_every_level() {
    let json = r#"
        { "b" : [ { "d" : 1 , "c" : [ true , false , null ] } , [] , {} ] ,
          "a" : { "y" : null , "x" : { "n" : -0.0 , "m" : "" } } }"#;
    assert_eq!(
        jcs(json),
        r#"{"a":{"x":{"m":"","n":0},"y":null},"b":[{"c":[true,false,null],"d":1},[],{}]}"#
    );
}

#[test]
fn scalars_are_documents_too() {
    assert_eq!(jcs(" 1.0 "), "1");
    assert_eq!(jcs("\"x\""), "\"x\"");
    assert_eq!(jcs("null"), "null");
    assert_eq!(jcs("true"), "true");
}

#[test]
fn duplicate_keys_are_not_i_json() {
    for dup in [
        r#"{"a":1,"a":1}"#,
        r#"{"a":1,"b":2,"a":3}"#,
        r#"{"a":1,"\u0061":2}"#,
        r#"[{"x":{"k":1,"k":2}}]"#,
    ] {
        assert_eq!(
            canonicalize(dup.as_bytes()),
            Err(RawReason::InvalidJson),
            "{dup}"
        );
    }
    // The same key at different levels or in sibling objects is fine.
    assert_eq!(
        jcs(r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#),
        r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#
    );
}

#[test]
fn not_json_is_invalid() {
    for bad in [
        &b""[..],
        b" ",
        b"{",
        b"[1] [2]",
        b"[01]",
        b"[.5]",
        b"[+1]",
        b"[\"\xc3\"]",
        b"[\"\\ud800\"]",
        b"[Infinity]",
    ] {
        assert_eq!(
            canonicalize(bad),
            Err(RawReason::InvalidJson),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn digits_inside_strings_are_not_numbers() {
    // If the exactness check read numbers inside strings, these would misfire.
    assert_eq!(
        jcs(r#"{"9007199254740993":"1.00000000000000000001"}"#),
        r#"{"9007199254740993":"1.00000000000000000001"}"#
    );
    assert_eq!(jcs(r#"["\"1e400", 2.50]"#), r#"["\"1e400",2.5]"#);
}
