#!/usr/bin/env bash
# `make images`: builds keyflight's two OCI images as image layouts under target/images/,
# without a container daemon, and checks them.
#
#   target/images/filter        the proxy-wasm filter as an Istio Wasm image: one layer that
#                               is the module (application/vnd.module.wasm.content.layer.v1+wasm),
#                               written by images/oci_wasm.py; target/images/filter.wasm.sha256
#                               holds the module digest an EnvoyFilter's `sha256` must carry.
#   target/images/lease-store   the lease-store: one static musl binary on an empty base
#                               (no shell, no libc), built with umoci; runs as 65532.
#
# Checks: `skopeo inspect --raw` resolves each tag, `skopeo copy` re-reads every blob (and
# verifies its digest), the Wasm layer is byte-identical to the module, and the lease-store
# binary in the unpacked root filesystem runs `--version` there (chrooted when root, so a
# missing dynamic library would show).
#
# Push: skopeo copy oci:target/images/filter:0.1.0 docker://REGISTRY/keyflight/filter:0.1.0
# The musl build is CPU-heavy (LTO): it runs under `nice`. Needs skopeo and umoci
# (apt-get install skopeo umoci; installed here when root).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
out="target/images"
musl_target="x86_64-unknown-linux-musl"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for tool in skopeo umoci; do
    command -v "$tool" >/dev/null 2>&1 && continue
    if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing $tool (Debian)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$tool" >/dev/null ||
            { echo "apt-get could not install $tool" >&2; exit 1; }
    else
        echo "$tool not found: apt-get install skopeo umoci" >&2
        exit 1
    fi
done
rustup target list --installed | grep -qx "$musl_target" || rustup target add "$musl_target"
mkdir -p "$out"

# --- the filter ----------------------------------------------------------------------------
# Built by `make wasm` (the `images` target depends on it), as for scripts/envoy-validate.sh.
wasm="target/wasm32-wasip1/release/keyflight_filter_wasm.wasm"
[[ -f "$wasm" ]] || {
    echo "$wasm not found: cargo build -p keyflight-filter-wasm --target wasm32-wasip1 --release (make images does)" >&2
    exit 1
}
module_sha="$(python3 images/oci_wasm.py "$wasm" "$out/filter" "$version")"
printf '%s\n' "$module_sha" >"$out/filter.wasm.sha256"

manifest="$(skopeo inspect --raw "oci:$out/filter:$version")"
python3 - "$manifest" "$module_sha" <<'EOF'
import json, sys
manifest, sha = json.loads(sys.argv[1]), sys.argv[2]
layers = manifest["layers"]
assert len(layers) == 1, "the Wasm image must have exactly one layer"
assert layers[0]["mediaType"] == "application/vnd.module.wasm.content.layer.v1+wasm", layers[0]["mediaType"]
assert layers[0]["digest"] == "sha256:" + sha, "the layer is not the module"
EOF
skopeo copy -q "oci:$out/filter:$version" "dir:$work/filter"
cmp -s "$work/filter/$module_sha" "$wasm" || { echo "FAIL   the copied Wasm layer differs from $wasm" >&2; exit 1; }
echo "ok     $out/filter:$version  (module sha256 $module_sha)"

# --- the lease-store -------------------------------------------------------------------------
nice -n 19 cargo build --release --target "$musl_target" -p keyflight-lease-store
binary="target/$musl_target/release/lease-store"

image="$out/lease-store"
rm -rf "$image"
umoci init --layout "$image"
umoci new --image "$image:$version"
umoci unpack --rootless --image "$image:$version" "$work/bundle" >/dev/null
install -D -m 0755 "$binary" "$work/bundle/rootfs/usr/local/bin/lease-store"
umoci repack --refresh-bundle --image "$image:$version" "$work/bundle" >/dev/null
umoci config --image "$image:$version" \
    --os linux --architecture amd64 \
    --config.user 65532:65532 \
    --config.entrypoint /usr/local/bin/lease-store \
    --config.cmd serve \
    --config.env PATH=/usr/local/bin \
    --config.env KEYFLIGHT_LISTEN=0.0.0.0:8480 \
    --config.exposedports 8480/tcp \
    --config.workingdir / \
    --config.label "org.opencontainers.image.title=keyflight lease-store" \
    --config.label "org.opencontainers.image.version=$version"
umoci gc --layout "$image"

skopeo inspect "oci:$image:$version" >"$work/inspect.json"
skopeo copy -q "oci:$image:$version" "dir:$work/lease-store-copy"
umoci unpack --rootless --image "$image:$version" "$work/check" >/dev/null
rootfs="$work/check/rootfs"
if [[ "$(id -u)" -eq 0 ]]; then
    reported="$(chroot "$rootfs" /usr/local/bin/lease-store --version)"
else
    reported="$("$rootfs/usr/local/bin/lease-store" --version)"
fi
[[ "$reported" == "lease-store $version" ]] ||
    { echo "FAIL   the image's lease-store says '$reported', expected 'lease-store $version'" >&2; exit 1; }
digest="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["Digest"])' "$work/inspect.json")"
echo "ok     $image:$version  (manifest $digest; runs: $reported)"
