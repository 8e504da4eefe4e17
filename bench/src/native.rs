//! N1–N3: the native adapter (`filter-native/`) beside the Wasm filter, in the same rounds.
//!
//! Issue 47 asks what the native adapter buys where the Wasm filter is most expensive:
//! Envoy's CPU per guarded first-time POST (N1, in [`crate::first_time`]'s rotation), a
//! replay from the edge cache against Envoy's own `direct_response` (N2, in
//! [`crate::replays`]'s), and the large body's first-time POST and store replay (N3, in
//! [`crate::large_body`]'s). Each native contender runs through its own Envoy, rendered from
//! `envoy/native-demo.yaml` on the stack's lease-store, so the two adapters differ in the
//! filter alone. Only Envoy's CPU is compared: the store, Postgres and the upstream do the
//! same work for both.

use crate::report::Row;
use crate::rotation::Measurement;
use crate::targets;

/// The selection ids of the native rows.
pub const IDS: [&str; 3] = ["n1", "n2", "n3"];

/// N1: the guarded first-time POST through the native adapter against the Wasm filter's.
pub fn first_time_rows(rows: &mut Vec<Row>, native: &Measurement, wasm: &Measurement) {
    rows.push(Row::measured(
        "—",
        "guarded first-time POST: native ÷ Wasm adapter",
        native,
        Some(wasm),
        None,
    ));
    rows.push(Row::cpu_compared(
        "N1",
        "Envoy CPU per guarded first-time POST: native ÷ Wasm adapter",
        native,
        native.group_cpu_us_per_op("envoy"),
        (wasm, wasm.group_cpu_us_per_op("envoy")),
        Some(targets::n1()),
    ));
}

/// N2: the native adapter's edge-cache replay against `direct_response`, and the floor the
/// module puts under it (the same route with the module loaded and no policy matching).
/// `cached` says whether most replays were edge-cache hits; when not, the row says so.
pub fn replay_rows(
    rows: &mut Vec<Row>,
    replay: &Measurement,
    floor: &Measurement,
    direct: &Measurement,
    cached: bool,
) {
    rows.push(Row::measured(
        "—",
        "direct_response with the native module loaded, no policy (native floor)",
        floor,
        Some(direct),
        None,
    ));
    let scenario = if cached {
        "replay served from the native adapter's edge cache"
    } else {
        "replay via the native adapter (most were not edge-cache hits)"
    };
    rows.push(Row::measured(
        "N2",
        scenario,
        replay,
        Some(direct),
        Some(targets::n2()),
    ));
}

/// N3: the large body through the native adapter against the Wasm filter, first-time POST
/// and replay via the store, in rate and in Envoy's CPU.
pub fn large_body_rows(
    rows: &mut Vec<Row>,
    (native_post, wasm_post): (&Measurement, &Measurement),
    (native_replay, wasm_replay): (&Measurement, &Measurement),
) {
    for (what, native, wasm) in [
        ("large guarded first-time POST", native_post, wasm_post),
        (
            "large record's replay via the store",
            native_replay,
            wasm_replay,
        ),
    ] {
        rows.push(Row::measured(
            "—",
            &format!("{what}: native ÷ Wasm adapter"),
            native,
            Some(wasm),
            None,
        ));
        rows.push(Row::cpu_compared(
            "N3",
            &format!("Envoy CPU per {what}: native ÷ Wasm adapter"),
            native,
            native.group_cpu_us_per_op("envoy"),
            (wasm, wasm.group_cpu_us_per_op("envoy")),
            None,
        ));
    }
}
