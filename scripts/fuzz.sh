#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ for SECONDS seconds each (default 5: the smoke run
# of `make test`; `make fuzz` passes FUZZ_SECONDS). FUZZ_TARGETS limits the run to some
# targets (space-separated). Installs cargo-fuzz into .tools/ first, once.
#
# cargo fuzz builds with `-Z` flags (sanitizers, coverage instrumentation), which only a
# nightly compiler accepts. This machine's one toolchain is stable, so the build runs with
# RUSTC_BOOTSTRAP=1, which lets the stable compiler accept them (the stable toolchain ships
# the AddressSanitizer runtime cargo fuzz links); nothing else is built that way.
#
# Each target starts from its committed seeds (fuzz/seeds/TARGET) and keeps what it finds
# in fuzz/corpus/TARGET (not committed). A crash stops the run and leaves its input in
# fuzz/artifacts/TARGET/; see fuzz/README.md for how to pin it as a unit test.
set -euo pipefail

CARGO_FUZZ_VERSION="0.13.2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
seconds="${1:-5}"
cargo_fuzz="$tools/bin/cargo-fuzz"

if ! "$cargo_fuzz" --version 2>/dev/null | grep -qx "cargo-fuzz $CARGO_FUZZ_VERSION"; then
    echo "installing cargo-fuzz $CARGO_FUZZ_VERSION into $tools" >&2
    cargo install --quiet --locked --root "$tools" cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

cd "$root/fuzz"
targets="${FUZZ_TARGETS:-$(RUSTC_BOOTSTRAP=1 "$cargo_fuzz" list)}"
RUSTC_BOOTSTRAP=1 "$cargo_fuzz" build
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for target in $targets; do
    mkdir -p "corpus/$target"
    if RUSTC_BOOTSTRAP=1 "$cargo_fuzz" run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
        echo "fuzz: $target: ${runs:-?} inputs in ${seconds}s, no failure" >&2
    else
        tail -n 60 "$log" >&2
        echo "fuzz: $target found a failing input: see fuzz/artifacts/$target/ and fuzz/README.md" >&2
        exit 1
    fi
done
