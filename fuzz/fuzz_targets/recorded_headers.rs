//! The recorded-header rule (F8), differentially: whatever the rule accepts,
//! the HTTP stack accepts as a header name and value too, holds no CR, LF or
//! NUL, and survives the filter's allowlist unchanged; the filter never keeps
//! a header the rule refuses.
#![no_main]

use std::collections::BTreeSet;

use keyflight_filter::recorded_headers::keep_headers;
use keyflight_protocol::headers::{check, is_field_value, is_token};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|headers: Vec<(String, Vec<u8>)>| {
    for (name, value) in &headers {
        let Ok(value) = std::str::from_utf8(value) else {
            continue;
        };
        if is_token(name) {
            assert!(
                http::HeaderName::from_bytes(name.as_bytes()).is_ok(),
                "{name:?}"
            );
        }
        if is_field_value(value) {
            assert!(
                http::HeaderValue::from_bytes(value.as_bytes()).is_ok(),
                "{value:?}"
            );
            assert!(!value.contains(['\r', '\n', '\0']), "{value:?}");
        }
        if check(name, value).is_ok() {
            assert!(!name.contains([':', ' ', '\r', '\n']), "{name:?}");
        }
    }
    let allow: BTreeSet<String> = headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    let kept = keep_headers(
        headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        &allow,
    );
    for (name, value) in &kept {
        assert_eq!(check(name, value), Ok(()), "kept {name:?}: {value:?}");
    }
});
