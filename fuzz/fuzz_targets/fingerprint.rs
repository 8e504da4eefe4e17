//! The fingerprint's JCS (RFC 8785) path (K4): total on any JSON-typed body,
//! and a body digested as canonical JSON digests alike once canonicalized —
//! canonicalization is idempotent and changes no value. (Every other body is
//! digested as raw bytes, which cannot go wrong in an interesting way.)
#![no_main]

use keyflight_protocol::fingerprint::{BodyForm, FingerprintInput, explain};
use keyflight_protocol::json::canonicalize;
use libfuzzer_sys::fuzz_target;

fn explained(body: &[u8]) -> keyflight_protocol::fingerprint::Explanation {
    explain(&FingerprintInput {
        method: "POST",
        path_and_query: "/payments",
        content_type: Some("application/json"),
        body,
        selected_headers: &[("if-match", None)],
    })
}

fuzz_target!(|body: &[u8]| {
    let first = explained(body);
    let BodyForm::CanonicalJson(canonical) = &first.body_form else {
        return;
    };
    assert_eq!(
        canonicalize(canonical.as_bytes()).as_ref(),
        Ok(canonical),
        "JCS is idempotent"
    );
    assert_eq!(
        explained(canonical.as_bytes()).fingerprint,
        first.fingerprint,
        "a body and its canonical form fingerprint alike"
    );
});
