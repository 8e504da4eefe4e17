#!/usr/bin/env bash
# Installs what the console's browser test and make demo's console step need
# (docs/console.md#the-browser-test):
# Debian's chromium, and playwright-core (pinned) from npm into .tools/browser, which the
# test's Node script imports. Idempotent: installs only what is missing; without root or
# apt-get it stops with one line saying how. playwright-core brings no browser of its own.
set -euo pipefail

PLAYWRIGHT_CORE=1.65.2
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/.tools/browser"

missing=()
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
"$(dirname "$0")/apt-install-missing.sh" "the console in a browser (make console-browser, make demo)" "${missing[@]}"

installed="$(node -p "require('$tools/node_modules/playwright-core/package.json').version" 2>/dev/null || true)"
if [[ "$installed" != "$PLAYWRIGHT_CORE" ]]; then
    command -v npm >/dev/null || { echo "npm is required for playwright-core: apt-get install npm" >&2; exit 1; }
    echo "installing playwright-core@$PLAYWRIGHT_CORE into $tools" >&2
    mkdir -p "$tools"
    npm install --prefix "$tools" --no-save --no-audit --no-fund --ignore-scripts \
        "playwright-core@$PLAYWRIGHT_CORE" >/dev/null
fi
