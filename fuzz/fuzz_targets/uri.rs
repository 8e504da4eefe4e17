//! Path and query normalization (K4), seen through the fingerprint's
//! explanation: total on any target, and normalizing is idempotent — the
//! normalized form, written back out, normalizes to itself. A rule that is
//! not idempotent lets two spellings that a server reads alike fingerprint
//! apart, or (worse) two it reads differently fingerprint alike.
#![no_main]

use keyflight_protocol::fingerprint::{FingerprintInput, explain};
use libfuzzer_sys::fuzz_target;

fn normalized(target: &str) -> (String, Vec<(String, String)>) {
    let e = explain(&FingerprintInput {
        method: "POST",
        path_and_query: target,
        content_type: None,
        body: b"",
        selected_headers: &[],
    });
    (e.normalized_path, e.sorted_query)
}

fuzz_target!(|target: &str| {
    let (path, query) = normalized(target);
    let pairs: Vec<String> = query.iter().map(|(n, v)| format!("{n}={v}")).collect();
    let again = if pairs.is_empty() {
        path.clone()
    } else {
        format!("{path}?{}", pairs.join("&"))
    };
    assert_eq!(
        normalized(&again),
        (path, query),
        "normalizing {target:?} is not idempotent (written back as {again:?})"
    );
});
