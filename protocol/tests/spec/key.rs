//! K1: the `Idempotency-Key` header.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
use wasm_bindgen_test::wasm_bindgen_test as test;

use keyflight_protocol::key::{MAX_KEY_BYTES, parse_key};
use keyflight_protocol::{IdempotencyKey, KeyError};

fn one(value: &[u8]) -> Result<Option<IdempotencyKey>, KeyError> {
    parse_key(&[value])
}

fn key_str(value: &[u8]) -> String {
    one(value)
        .expect("valid")
        .expect("present")
        .as_str()
        .to_owned()
}

#[test]
fn absent_header_is_no_key() {
    assert_eq!(parse_key(&[]), Ok(None));
}

#[test]
fn a_plain_key_is_kept_as_sent() {
    assert_eq!(key_str(b"order-42"), "order-42");
    assert_eq!(
        key_str(b"8e03978e-40d5-43e8-bc93-6894a57f9324"),
        "8e03978e-40d5-43e8-bc93-6894a57f9324"
    );
}

#[test]
fn empty_and_empty_quoted_are_rejected() {
    assert_eq!(one(b""), Err(KeyError::Empty));
    assert_eq!(one(b"\"\""), Err(KeyError::Empty));
}

#[test]
fn control_characters_are_rejected() {
    for bad in [
        &b"a\x00b"[..],
        b"a\tb",
        b"a\nb",
        b"a\x7fb",
        b"\x1f",
        b"caf\xc3\xa9",
    ] {
        assert_eq!(one(bad), Err(KeyError::NotVisibleAscii), "{bad:?}");
    }
    assert_eq!(one(b"\"a\x01b\""), Err(KeyError::NotVisibleAscii));
}

#[test]
fn spaces_are_allowed_only_inside() {
    assert_eq!(key_str(b"a b  c"), "a b  c");
    for bad in [&b" abc"[..], b"abc ", b" ", b"\" abc\"", b"\"abc \""] {
        assert_eq!(one(bad), Err(KeyError::NotVisibleAscii), "{bad:?}");
    }
}

#[test]
fn length_limit_is_255_bytes() {
    let max = vec![b'k'; MAX_KEY_BYTES];
    assert_eq!(MAX_KEY_BYTES, 255);
    assert_eq!(key_str(&max).len(), 255);
    assert_eq!(one(&vec![b'k'; 256]), Err(KeyError::TooLong));
    // The limit applies after unquoting: 255 bytes inside quotes are fine.
    let mut quoted = vec![b'"'];
    quoted.extend_from_slice(&max);
    quoted.push(b'"');
    assert_eq!(key_str(&quoted).len(), 255);
}

#[test]
fn repeated_header_is_rejected_even_when_equal() {
    assert_eq!(parse_key(&[b"a", b"a"]), Err(KeyError::Repeated));
    assert_eq!(parse_key(&[b"a", b""]), Err(KeyError::Repeated));
}

#[test]
fn quoted_form_is_unquoted_and_unescaped() {
    assert_eq!(one(b"\"abc\""), one(b"abc"));
    assert_eq!(key_str(br#""a\"b""#), r#"a"b"#);
    assert_eq!(key_str(br#""a\\b""#), r"a\b");
    assert_eq!(key_str(br#""with space""#), "with space");
}

#[test]
fn malformed_quoted_strings_are_rejected() {
    for bad in [
        &br#"""#[..],
        br#""abc"#,
        br#""a"b""#,
        br#""a\b""#,
        br#""abc\""#,
        br#""\""#,
    ] {
        assert_eq!(
            one(bad),
            Err(KeyError::MalformedQuotedString),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn debug_output_hides_the_key() {
    let key = one(b"secret-key").expect("valid").expect("present");
    let shown = format!("{key:?}");
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("10 bytes"), "{shown}");
}
