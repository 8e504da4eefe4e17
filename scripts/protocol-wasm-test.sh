#!/usr/bin/env bash
# Runs the keyflight-protocol tests compiled to wasm32-unknown-unknown under
# Node, so the digests the edge filter computes are proven equal, bit for bit,
# to the host's (the shared vectors in protocol/testdata/vectors.json).
#
# Run from the repository root. Idempotent: the wasm target and the test
# runner are installed only when missing. The runner (wasm-bindgen-cli) must
# match the wasm-bindgen version in Cargo.lock exactly, so it is installed into
# .tools/ at that version rather than taken from PATH.
set -euo pipefail

if [[ ! -f Cargo.lock || ! -d protocol ]]; then
  echo "protocol-wasm-test: run this from the repository root" >&2
  exit 2
fi

command -v node >/dev/null || { echo "protocol-wasm-test: node is required" >&2; exit 2; }

rustup target add wasm32-unknown-unknown >/dev/null

# The version of the `wasm-bindgen` package recorded in Cargo.lock.
version=$(awk '
  $0 == "[[package]]" { name = "" }
  $1 == "name" && $3 == "\"wasm-bindgen\"" { name = "wasm-bindgen" }
  name == "wasm-bindgen" && $1 == "version" { gsub(/"/, "", $3); print $3; exit }
' Cargo.lock)
if [[ -z "$version" ]]; then
  echo "protocol-wasm-test: no wasm-bindgen entry in Cargo.lock" >&2
  exit 2
fi

root="$PWD/.tools"
runner="$root/bin/wasm-bindgen-test-runner"
installed=$("$runner" --version 2>/dev/null || true)
if [[ "$installed" != *" $version"* ]]; then
  echo "protocol-wasm-test: installing wasm-bindgen-cli $version into .tools/ (takes a few minutes)"
  # --locked reproduces the CLI's own tested dependency set. If the registry
  # index no longer offers one of those exact versions (a yanked crate), fall
  # back to a fresh resolution of the same CLI version.
  if ! cargo install --root "$root" wasm-bindgen-cli --version "$version" --locked; then
    echo "protocol-wasm-test: --locked install failed; retrying with a fresh resolution" >&2
    cargo install --root "$root" wasm-bindgen-cli --version "$version"
  fi
fi

CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER="$runner" \
  cargo test -p keyflight-protocol --target wasm32-unknown-unknown
