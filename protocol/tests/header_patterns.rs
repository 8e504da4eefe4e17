//! The recorded-header rule's regular expressions (published in the
//! lease-store's OpenAPI document) say exactly what the rule's functions say.

// An integration test is test code: its helpers may state expectations with these too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![cfg(not(target_arch = "wasm32"))]

use keyflight_protocol::headers::{
    FIELD_VALUE_PATTERN, TOKEN_PATTERN, is_field_value, is_token, never_stored,
    never_stored_pattern,
};
use proptest::prelude::*;
use regex_lite::Regex;

fn token() -> Regex {
    Regex::new(TOKEN_PATTERN).unwrap()
}

fn field_value() -> Regex {
    Regex::new(FIELD_VALUE_PATTERN).unwrap()
}

fn never() -> Regex {
    Regex::new(&never_stored_pattern()).unwrap()
}

/// Strings built from the characters the rule cares about.
fn header_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('\t'),
            Just(' '),
            Just('\r'),
            Just('\n'),
            Just('\0'),
            Just('\u{7f}'),
            Just(':'),
            Just('-'),
            Just('"'),
            Just('\u{e9}'),
            Just('\u{1f600}'),
            proptest::char::range('\0', '\u{ff}'),
            proptest::char::range('a', 'z'),
        ],
        0..12,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// Names near the never-stored ones.
fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        header_text(),
        proptest::sample::select(vec![
            "set-cookie",
            "Set-Cookie",
            "set-cookie2",
            "cookie",
            "cookies",
            "x-cookie",
            "authorization",
            "x-token",
            "TOKEN",
            "x-Secret-y",
            "api-key",
            "api-key2",
            "key",
            "etag",
            "content-length",
            "content-lengths",
        ])
        .prop_map(str::to_owned),
    ]
}

proptest! {
    #[test]
    fn token_pattern_is_is_token(text in header_text()) {
        prop_assert_eq!(token().is_match(&text), is_token(&text), "{:?}", text);
    }

    #[test]
    fn field_value_pattern_is_is_field_value(text in header_text()) {
        prop_assert_eq!(field_value().is_match(&text), is_field_value(&text), "{:?}", text);
    }

    #[test]
    fn never_stored_pattern_is_never_stored(name in header_name()) {
        prop_assert_eq!(never().is_match(&name), never_stored(&name), "{:?}", name);
    }
}
