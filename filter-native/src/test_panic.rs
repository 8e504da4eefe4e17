//! The panics of a `test-panic` build, for the end-to-end scenarios of the panic barrier
//! (`filter-native/README.md#panics`). The shipped build has none of this.

use crate::abi::EnvoyFilter;
use crate::abi::FilterEnvoyPtr;
use crate::plugin::Plugin;

/// The request header that makes a hook panic, in a `test-panic` build only: in the
/// request-headers hook, or with the value `complete` when the stream completes.
const TEST_PANIC_HEADER: &str = "x-keyflight-test-panic";

/// Where a `test-panic` build panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestPanic {
    /// In the request-headers hook.
    RequestHeaders,
    /// In the stream-complete hook.
    StreamComplete,
}

/// Panics where the request's [`TEST_PANIC_HEADER`] asks to.
pub fn test_panic(envoy: FilterEnvoyPtr, here: TestPanic) {
    let asked = EnvoyFilter(envoy).header(crate::abi::HeaderType::Request, TEST_PANIC_HEADER);
    let at = match asked.as_deref() {
        None => return,
        Some(b"complete") => TestPanic::StreamComplete,
        Some(_) => TestPanic::RequestHeaders,
    };
    if at == here {
        #[expect(clippy::panic, reason = "the test-panic feature's whole point")]
        std::panic::panic_any("keyflight test panic");
    }
}

/// A policy named so makes making every stream panic, in a `test-panic` build only.
const TEST_PANIC_ON_NEW: &[u8] = b"\"test-panic-on-new\"";

/// A policy named so makes every tick of a worker's root driver panic, in a `test-panic`
/// build only.
const TEST_PANIC_ON_TICK: &[u8] = b"\"test-panic-on-tick\"";

/// Panics with `message` when the configuration names `policy` (a quoted JSON string).
fn test_panic_if_named(plugin: &Plugin, policy: &[u8], message: &'static str) {
    if plugin
        .json_bytes()
        .windows(policy.len())
        .any(|window| window == policy)
    {
        #[expect(clippy::panic, reason = "the test-panic feature's whole point")]
        std::panic::panic_any(message);
    }
}

/// Panics making a stream when the configuration names [`TEST_PANIC_ON_NEW`].
pub fn test_panic_on_new(plugin: &Plugin) {
    test_panic_if_named(
        plugin,
        TEST_PANIC_ON_NEW,
        "keyflight test panic making a stream",
    );
}

/// Panics ticking a worker's root driver when the configuration names
/// [`TEST_PANIC_ON_TICK`].
pub fn test_panic_on_tick(plugin: &Plugin) {
    test_panic_if_named(plugin, TEST_PANIC_ON_TICK, "keyflight test panic in a tick");
}
