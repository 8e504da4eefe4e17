//! The `Idempotency-Key` parser (K1): total on any header value, and what it
//! accepts is a key the rest of the system can carry as is.
#![no_main]

use keyflight_protocol::key::{KeyError, parse_key};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|value: &[u8]| {
    assert_eq!(parse_key(&[value, value]).err(), Some(KeyError::Repeated));
    let Ok(Some(key)) = parse_key(&[value]) else {
        return;
    };
    let text = key.as_str();
    assert!(!text.is_empty() && text.len() <= 255, "{text:?}");
    assert!(
        text.bytes()
            .all(|b| b == b' ' || (0x21..=0x7e).contains(&b)),
        "visible ASCII and inner spaces only: {text:?}"
    );
    assert!(!text.starts_with(' ') && !text.ends_with(' '), "{text:?}");
});
