#!/usr/bin/env bash
# Runs the lease-store under schemathesis against its own /openapi.json (a real lease-store
# on a throwaway Postgres; lease-store/tests/http/openapi_conformance.rs). Installs the pinned
# schemathesis from PyPI into .tools/venv first, once. Bounded: 100 examples per operation
# by default (under a minute); KEYFLIGHT_SCHEMATHESIS_EXAMPLES / _SEED override.
set -euo pipefail

SCHEMATHESIS_VERSION="4.32.5"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.tools/venv"
cli="$venv/bin/schemathesis"

if ! "$cli" --version 2>/dev/null | grep -qx "schemathesis, version $SCHEMATHESIS_VERSION"; then
    if [[ ! -x "$venv/bin/pip" ]]; then
        mkdir -p "$root/.tools"
        python3 -m venv "$venv" || {
            echo "python3 cannot create a venv: apt-get install python3-venv" >&2
            exit 1
        }
    fi
    echo "installing schemathesis==$SCHEMATHESIS_VERSION into $venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION" >&2 || {
        echo "pip could not install schemathesis==$SCHEMATHESIS_VERSION: check access to PyPI" >&2
        exit 1
    }
fi

cd "$root"
KEYFLIGHT_SCHEMATHESIS="$cli" cargo test -p keyflight-lease-store --test http openapi_conformance \
    -- --ignored --nocapture
