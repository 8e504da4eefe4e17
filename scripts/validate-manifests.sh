#!/usr/bin/env bash
# Checks everything keyflight ships for Kubernetes, Istio and Prometheus, without a cluster:
#
#   1. yamllint on every YAML file under envoy/ and deploy/ (config: deploy/yamllint.yaml);
#   2. core Kubernetes manifests (deploy/k8s, deploy/examples) against the official schemas of
#      Kubernetes $KUBERNETES_VERSION with kubernetes-validate, strictly; Istio resources
#      (envoy/istio) and the example CloudNativePG Cluster (deploy/cloudnative-pg) strictly
#      against their projects' own CRDs, CEL rules included (deploy/checks/crd_schema.py,
#      schemas in deploy/checks/schemas/istio/ and deploy/checks/schemas/cloudnative-pg/); Prometheus
#      Operator and Kustomize objects structurally (deploy/checks/manifests.py says what);
#   3. every EnvoyFilter patch loaded into real Envoy (`envoy --mode validate` on a minimal
#      bootstrap, the Wasm filter with the real .wasm so its plugin JSON is checked too:
#      deploy/checks/envoy_patches.py), and the checkers' own tests with broken manifests
#      (deploy/checks/test_*.py, the Envoy Gateway checker's included);
#   3b. the Envoy Gateway example (deploy/envoy-gateway): its cross-references, and the Envoy
#      config Envoy Gateway generates from it in real Envoy with the native module, which
#      checks the plugin JSON (deploy/checks/envoy_gateway.py; no Envoy Gateway CRD schema is
#      vendored, so its objects get structural checks in step 2);
#   4. the alert rules with `promtool check rules` and their unit tests with
#      `promtool test rules` (deploy/observability/tests/);
#   5. every metric the alerts and the Grafana dashboard query is emitted by the code
#      (deploy/checks/metric_names.py derives the names from the Rust sources).
# The plugin JSON inside the Istio manifests is also checked by the filter's own validator in
# `cargo test -p keyflight-filter --test shipped_configs`. Step 3 needs the filter built
# (cargo build -p keyflight-filter-wasm --target wasm32-wasip1 --release; `make` does), step 3b
# the native module (KEYFLIGHT_NATIVE_DIR, default target/debug).
#
# Idempotent and offline except for first-time installs: yamllint, kubernetes-validate and
# cel-python go into .tools/venv (pip), promtool comes from Debian's `prometheus` package.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

KUBERNETES_VERSION="${KUBERNETES_VERSION:-1.35.0}"
YAMLLINT_VERSION="1.38.0"
KUBERNETES_VALIDATE_VERSION="1.37.0"
CEL_PYTHON_VERSION="0.5.0"
venv="$root/.tools/venv"
wasm="target/wasm32-wasip1/release/keyflight_filter_wasm.wasm"

# --- tools --------------------------------------------------------------------------------
if [[ ! -x "$venv/bin/pip" ]]; then
    mkdir -p "$root/.tools"
    python3 -m venv "$venv" >&2 || {
        echo "python3 cannot create a venv: apt-get install python3-venv" >&2
        exit 1
    }
fi
if ! "$venv/bin/python" -c 'import yamllint, kubernetes_validate, celpy, re2' 2>/dev/null; then
    echo "installing yamllint, kubernetes-validate and cel-python into $venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "yamllint==$YAMLLINT_VERSION" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
        "cel-python==$CEL_PYTHON_VERSION" >&2 || {
        echo "pip could not install yamllint/kubernetes-validate/cel-python: check access to PyPI" >&2
        exit 1
    }
fi
[[ -f "$wasm" ]] || {
    echo "$wasm not found: cargo build -p keyflight-filter-wasm --target wasm32-wasip1 --release (make does)" >&2
    exit 1
}
envoy="${KEYFLIGHT_ENVOY:-$("$root/scripts/envoy.sh")}"
if ! command -v promtool >/dev/null 2>&1; then
    if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "promtool not found: install Debian's prometheus package (apt-get install prometheus) or put promtool on PATH" >&2
        exit 1
    fi
    echo "installing promtool (Debian package prometheus)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1; } || {
        echo "apt-get could not install prometheus (for promtool)" >&2
        exit 1
    }
fi

# --- files --------------------------------------------------------------------------------
# deploy/checks/schemas holds Istio's and CloudNativePG's own CRDs, vendored verbatim: not ours to lint.
mapfile -t yaml_files < <(find envoy deploy -path deploy/checks/schemas -prune -o -type f \
    \( -name '*.yaml' -o -name '*.yml' \) -print | sort)
mapfile -t manifests < <(find envoy/istio deploy/k8s deploy/examples deploy/observability deploy/cloudnative-pg deploy/envoy-gateway \
    -maxdepth 2 -type f -name '*.yaml' -not -path '*/tests/*' | sort)
rules="deploy/observability/prometheusrule.yaml"
dashboard="deploy/observability/grafana-dashboard.json"

# 1. yamllint
"$venv/bin/yamllint" --strict -c deploy/yamllint.yaml "${yaml_files[@]}"
echo "ok     yamllint: ${#yaml_files[@]} YAML files"

# 2. Kubernetes schemas, Istio's CRDs and custom resources
"$venv/bin/python" deploy/checks/manifests.py "$KUBERNETES_VERSION" "${manifests[@]}"

# 3. EnvoyFilter patches in real Envoy, and the checkers refuse broken manifests
mapfile -t istio_manifests < <(find envoy/istio -type f -name '*.yaml' | sort)
"$venv/bin/python" deploy/checks/envoy_patches.py "$envoy" "$wasm" "${istio_manifests[@]}"
module="$(realpath -m "${KEYFLIGHT_NATIVE_DIR:-target/debug}")/libkeyflight_filter_native.so"
[[ -f "$module" ]] || {
    echo "$module not found: cargo build -p keyflight-filter-native (make validate-manifests does)" >&2
    exit 1
}
if ! output="$(cd deploy/checks && KEYFLIGHT_ENVOY="$envoy" KEYFLIGHT_WASM="$root/$wasm" \
    KEYFLIGHT_NATIVE_MODULE="$module" \
    "$venv/bin/python" -m unittest test_crd_schema test_envoy_patches test_envoy_gateway 2>&1)"; then
    printf '%s\n' "$output" >&2
    echo "FAIL   deploy/checks tests" >&2
    exit 1
fi
echo "ok     deploy/checks: $(grep -Eo 'Ran [0-9]+ tests' <<<"$output") refusing broken manifests"

# 3b. The Envoy Gateway example with the native module (`make native-test` builds it)
mapfile -t gateway_manifests < <(find deploy/envoy-gateway -type f -name '*.yaml' | sort)
(cd deploy/checks && "$venv/bin/python" envoy_gateway.py "$envoy" "$module" "${gateway_manifests[@]/#/$root/}")

# 4. Prometheus rules: the PrometheusRule's spec is a plain rule file.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" -c 'import sys, yaml; yaml.safe_dump(yaml.safe_load(open(sys.argv[1]))["spec"], open(sys.argv[2], "w"))' \
    "$rules" "$work/keyflight.rules.yml"
cp deploy/observability/tests/*.yml "$work/"
promtool check rules "$work/keyflight.rules.yml" >/dev/null
(cd "$work" && promtool test rules ./*.test.yml >/dev/null) || {
    (cd "$work" && promtool test rules ./*.test.yml) >&2 || true
    echo "FAIL   promtool test rules" >&2
    exit 1
}
echo "ok     promtool: $rules checks and passes its unit tests"

# 5. Metric names against the code
"$venv/bin/python" -m json.tool "$dashboard" >/dev/null
"$venv/bin/python" deploy/checks/metric_names.py "$root" "$rules" "$dashboard"
