#!/usr/bin/env bash
# make bench: builds what the benchmark runs (release builds: a debug lease-store or load
# generator would measure the compiler, not keyflight), then runs `keyflight-bench suite`,
# which starts its own stack, prints the table and writes target/bench/results.json. The
# native adapter (`make native`'s target/release/libkeyflight_filter_native.so) runs beside
# the Wasm filter.
#
# Extra arguments go to the suite, e.g. `scripts/bench.sh --note "shared machine"` or
# `scripts/bench.sh --rounds 3 --round-secs 5`. Not part of `make test`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
cargo="${CARGO:-cargo}"

envoy="$(scripts/envoy.sh)"
"$cargo" build -p keyflight-filter-wasm --target wasm32-wasip1 --release
"$cargo" build --release -p keyflight-lease-store -p keyflight-demo-upstream -p keyflight-bench \
    -p keyflight-filter-native

KEYFLIGHT_ENVOY="$envoy" \
    KEYFLIGHT_LEASE_STORE_BIN="$target/release/lease-store" \
    KEYFLIGHT_UPSTREAM_BIN="$target/release/demo-upstream" \
    KEYFLIGHT_WASM="$target/wasm32-wasip1/release/keyflight_filter_wasm.wasm" \
    KEYFLIGHT_NATIVE_DIR="$target/release" \
    "$target/release/keyflight-bench" suite --out "$target/bench/results.json" "$@"
