#!/usr/bin/env bash
# Checks every Envoy bootstrap config under envoy/ with `envoy --mode validate`.
#
# Validation loads the filter, so the wasm and the native module must be built first
# (cargo build -p keyflight-filter-wasm --target wasm32-wasip1 --release; make native), and runs from the
# repository root, where the configs' relative wasm path resolves. Files under envoy/ that
# are not Envoy bootstraps (Istio and Kubernetes manifests: no `static_resources:`) are
# skipped and listed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

wasm="target/wasm32-wasip1/release/keyflight_filter_wasm.wasm"
[[ -f "$wasm" ]] || {
    echo "$wasm not found: cargo build -p keyflight-filter-wasm --target wasm32-wasip1 --release (make test does)" >&2
    exit 1
}
native_dir="${KEYFLIGHT_NATIVE_DIR:-$root/target/release}"
[[ -f "$native_dir/libkeyflight_filter_native.so" ]] || {
    echo "$native_dir/libkeyflight_filter_native.so not found: cargo build -p keyflight-filter-native --release (make native)" >&2
    exit 1
}
# envoy/native-demo.yaml names its dynamic module; Envoy looks it up here.
export ENVOY_DYNAMIC_MODULES_SEARCH_PATH="$native_dir"
envoy="${KEYFLIGHT_ENVOY:-$("$root/scripts/envoy.sh")}"

failed=0
checked=0
for config in envoy/*.yaml; do
    [[ -e "$config" ]] || continue
    if ! grep -q '^static_resources:' "$config"; then
        echo "skip   $config (not an Envoy bootstrap)"
        continue
    fi
    checked=$((checked + 1))
    if output="$("$envoy" --mode validate -c "$config" --disable-hot-restart 2>&1)"; then
        echo "ok     $config"
    else
        echo "FAIL   $config"
        grep -E '\]\[(error|critical)\]' <<<"$output" | sed 's/^/       /' >&2 || printf '%s\n' "$output" >&2
        failed=$((failed + 1))
    fi
done
if ((checked == 0)); then
    echo "no Envoy bootstrap configs found under envoy/" >&2
    exit 1
fi
((failed == 0))
