#!/usr/bin/env bash
# Checks everything keyflight ships for Kubernetes, Istio and Prometheus, without a cluster:
#
#   1. yamllint on every YAML file under envoy/ and deploy/ (config: deploy/yamllint.yaml);
#   2. core Kubernetes manifests (deploy/k8s, deploy/examples) against the official schemas of
#      Kubernetes $KUBERNETES_VERSION with kubernetes-validate, strictly; custom resources
#      (Istio, Prometheus Operator, Kustomize: no schema offline) structurally
#      (deploy/checks/manifests.py says exactly what);
#   3. the alert rules with `promtool check rules` and their unit tests with
#      `promtool test rules` (deploy/observability/tests/);
#   4. every metric the alerts and the Grafana dashboard query is emitted by the code
#      (deploy/checks/metric_names.py derives the names from the Rust sources).
# The plugin JSON inside the Istio manifests is checked by the filter's own validator in
# `cargo test -p keyflight-filter --test shipped_configs`.
#
# Idempotent and offline except for first-time installs: yamllint and kubernetes-validate
# go into .tools/venv (pip), promtool comes from Debian's `prometheus` package.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

KUBERNETES_VERSION="${KUBERNETES_VERSION:-1.35.0}"
YAMLLINT_VERSION="1.38.0"
KUBERNETES_VALIDATE_VERSION="1.37.0"
venv="$root/.tools/venv"

# --- tools --------------------------------------------------------------------------------
if [[ ! -x "$venv/bin/pip" ]]; then
    mkdir -p "$root/.tools"
    python3 -m venv "$venv" >&2 || {
        echo "python3 cannot create a venv: apt-get install python3-venv" >&2
        exit 1
    }
fi
if ! "$venv/bin/python" -c 'import yamllint, kubernetes_validate' 2>/dev/null; then
    echo "installing yamllint and kubernetes-validate into $venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "yamllint==$YAMLLINT_VERSION" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >&2 || {
        echo "pip could not install yamllint/kubernetes-validate: check access to PyPI" >&2
        exit 1
    }
fi
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
mapfile -t yaml_files < <(find envoy deploy -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
mapfile -t manifests < <(find envoy/istio deploy/k8s deploy/examples deploy/observability \
    -maxdepth 2 -type f -name '*.yaml' -not -path '*/tests/*' | sort)
rules="deploy/observability/prometheusrule.yaml"
dashboard="deploy/observability/grafana-dashboard.json"

# 1. yamllint
"$venv/bin/yamllint" --strict -c deploy/yamllint.yaml "${yaml_files[@]}"
echo "ok     yamllint: ${#yaml_files[@]} YAML files"

# 2. Kubernetes schemas and custom resources
"$venv/bin/python" deploy/checks/manifests.py "$KUBERNETES_VERSION" "${manifests[@]}"

# 3. Prometheus rules: the PrometheusRule's spec is a plain rule file.
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

# 4. Metric names against the code
"$venv/bin/python" -m json.tool "$dashboard" >/dev/null
"$venv/bin/python" deploy/checks/metric_names.py "$root" "$rules" "$dashboard"
