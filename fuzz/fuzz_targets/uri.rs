//! Request-target normalization (K3, K4, F0): total on any target, and
//! normalizing is idempotent — the normalized form, written back out,
//! normalizes to itself. A rule that is not idempotent lets two spellings that
//! a server reads alike fingerprint apart, or (worse) two it reads differently
//! fingerprint alike. The readings policies match on are total too, and always
//! include the normalized path itself.
#![no_main]

use keyflight_protocol::Target;
use libfuzzer_sys::fuzz_target;

fn normalized(target: &str) -> (String, Vec<(String, String)>) {
    let t = Target::new("POST", target, "h", Some("https"));
    (t.path, t.query)
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
        (path.clone(), query),
        "normalizing {target:?} is not idempotent (written back as {again:?})"
    );
    let readings = Target::new("POST", target, "h", None).match_paths();
    assert_eq!(
        readings.first(),
        Some(&path),
        "the first reading is the path itself"
    );
});
