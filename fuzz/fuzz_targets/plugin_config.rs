//! Plugin-configuration parsing (F12): total on any bytes. Envoy hands the
//! filter whatever the operator wrote; a panic here would fail every worker's
//! VM instead of one clear log line naming the field. The seeds are the
//! shipped configurations, so the fuzzer mutates real ones.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|json: &[u8]| {
    if let Err(e) = keyflight_filter::parse_plugin_config(json) {
        assert!(!e.to_string().is_empty());
    }
});
