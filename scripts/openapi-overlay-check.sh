#!/usr/bin/env bash
# `keyflight openapi-overlay` under tools that are not keyflight's: the patched demo and
# petstore documents through openapi-spec-validator, the overlays through the Overlay 1.0
# JSON Schema and applied by jsonpath-ng (scripts/openapi-overlay-check.py, run by the
# ignored test in client/src/openapi_overlay/tests.rs). Installs the pinned
# validators from PyPI into .tools/venv-openapi first, once (a venv of their own, so
# their jsonschema never meets schemathesis' in .tools/venv).
set -euo pipefail

SPEC_VALIDATOR_VERSION="0.9.0"
JSONPATH_NG_VERSION="1.8.0"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.tools/venv-openapi"
python="$venv/bin/python"

installed() {
    "$python" - "$SPEC_VALIDATOR_VERSION" "$JSONPATH_NG_VERSION" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(not (version("openapi-spec-validator") == sys.argv[1] and version("jsonpath-ng") == sys.argv[2]))
PY
}

if ! installed; then
    if [[ ! -x "$venv/bin/pip" ]]; then
        mkdir -p "$root/.tools"
        python3 -m venv "$venv" || {
            echo "python3 cannot create a venv: apt-get install python3-venv" >&2
            exit 1
        }
    fi
    echo "installing openapi-spec-validator==$SPEC_VALIDATOR_VERSION jsonpath-ng==$JSONPATH_NG_VERSION into $venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "openapi-spec-validator==$SPEC_VALIDATOR_VERSION" "jsonpath-ng==$JSONPATH_NG_VERSION" >&2 || {
        echo "pip could not install the OpenAPI validators: check access to PyPI" >&2
        exit 1
    }
fi

cd "$root"
KEYFLIGHT_OPENAPI_CHECK="$python" cargo test -p keyflight-client --lib openapi_overlay \
    -- --include-ignored --nocapture
