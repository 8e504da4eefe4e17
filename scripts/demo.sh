#!/usr/bin/env bash
# A narrated walk through keyflight against the stack that `make up` started (the launcher,
# `keyflight-stack`; what runs where is in DIR/stack.json). Every step says what it does,
# shows what came back, and checks it: a failed check exits non-zero, so `make demo` doubles
# as a smoke test of the whole stack.
#   scripts/demo.sh [DIR]   DIR: the stack's directory (default .run)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/.run}"
stack="$root/target/release/keyflight-stack"

say() { printf '%s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
command -v jq >/dev/null || die "jq not found: apt-get install jq"
[[ -f "$dir/stack.json" ]] || die "the stack is not running: make up first"
[[ -x /usr/bin/chromium && -f "$root/.tools/browser/node_modules/playwright-core/package.json" ]] ||
    die "the console step needs Chromium and playwright-core: make console-browser-prereqs"
described() { jq -r "$1" "$dir/stack.json"; }
ENVOY_ADDR="127.0.0.1:$(described '.envoys[0].listener')"
UPSTREAM_ADDR="127.0.0.1:$(described '.upstream.port')"

edge="http://$ENVOY_ADDR"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
run_id="$(date +%s)-$$"
failures=0

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
note() { printf '   %s\n' "$*"; }
check() { # check DESCRIPTION EXPECTED ACTUAL
    if [[ "$2" == "$3" ]]; then
        printf '   \033[32mok\033[0m   %s\n' "$1"
    else
        printf '   \033[31mFAIL\033[0m %s: expected %s, got %s\n' "$1" "$2" "$3"
        failures=$((failures + 1))
    fi
}
executions() { curl -fsS "http://$UPSTREAM_ADDR/stats" | jq -r .executions; }

# pay OUT KEY BODY [PATH] [extra curl args...]: POST through Envoy as alice. Writes the
# headers to OUT.h and the body to OUT.b, and prints the status code.
pay() {
    local out="$1" key="$2" body="$3" path="${4:-/payments}"
    shift 4 || shift $#
    local key_args=()
    [[ -n "$key" ]] && key_args=(-H "idempotency-key: $key")
    curl -sS -o "$out.b" -D "$out.h" -w '%{http_code}' -X POST "$edge$path" \
        -H 'x-user: alice' -H 'content-type: application/json' "${key_args[@]}" "$@" \
        --data-binary "$body"
}
header() { grep -i "^$2:" "$1.h" | head -n1 | cut -d' ' -f2- | tr -d '\r'; }

step "1. A first payment with an Idempotency-Key runs once and answers 201"
key1="demo-$run_id-first"
before="$(executions)"
note "POST /payments  idempotency-key: $key1  body {\"amount\":100,\"currency\":\"EUR\"}"
status="$(pay "$work/first" "$key1" '{"amount":100,"currency":"EUR"}')"
note "-> $status $(cat "$work/first.b")"
check "status" 201 "$status"
check "upstream executions" $((before + 1)) "$(executions)"

step "2. 20 concurrent duplicates of a fresh key: the upstream runs once, all 20 get the same answer"
key2="demo-$run_id-burst"
before="$(executions)"
note "20 x POST /payments?delay_ms=500 with idempotency-key: $key2, sent at the same time"
for i in $(seq 20); do
    { pay "$work/burst$i" "$key2" '{"amount":250,"currency":"EUR"}' '/payments?delay_ms=500'; echo; } >"$work/burst$i.status" &
done
wait
check "upstream executions" $((before + 1)) "$(executions)"
check "distinct statuses" 201 "$(cat "$work"/burst*.status | sort -u | tr '\n' ' ' | sed 's/ $//')"
check "distinct bodies" 1 "$(for i in $(seq 20); do cat "$work/burst$i.b"; echo; done | sort -u | wc -l | tr -d ' ')"
note "one payment for all 20: $(jq -c '{payment_id, execution}' "$work/burst1.b")"

step "3. A retry of the first payment is replayed from the record: no new execution"
before="$(executions)"
status="$(pay "$work/replay" "$key1" '{"amount":100,"currency":"EUR"}')"
note "-> $status $(cat "$work/replay.b")"
check "status" 201 "$status"
check "same body as the first answer" "$(cat "$work/first.b")" "$(cat "$work/replay.b")"
check "idempotent-replayed header" true "$(header "$work/replay" idempotent-replayed)"
check "location header replayed" "$(header "$work/first" location)" "$(header "$work/replay" location)"
check "set-cookie on the first answer" yes "$([[ -n "$(header "$work/first" set-cookie)" ]] && echo yes || echo no)"
check "set-cookie never replayed" no "$([[ -n "$(header "$work/replay" set-cookie)" ]] && echo yes || echo no)"
check "upstream executions" "$before" "$(executions)"

step "4. The same key with a different body is a conflict (409), not a second payment"
before="$(executions)"
status="$(pay "$work/conflict" "$key1" '{"amount":999,"currency":"EUR"}')"
note "-> $status $(cat "$work/conflict.b")"
check "status" 409 "$status"
check "content-type" application/problem+json "$(header "$work/conflict" content-type)"
check "problem code" idempotency_conflict "$(jq -r .code "$work/conflict.b")"
check "upstream executions" "$before" "$(executions)"

step "5. Without a key the request is not guarded: every request runs"
before="$(executions)"
pay "$work/nokey1" "" '{"amount":5}' >/dev/null
pay "$work/nokey2" "" '{"amount":5}' >/dev/null
check "upstream executions after two unkeyed requests" $((before + 2)) "$(executions)"

step "6. An invalid key is refused (400) before anything runs"
before="$(executions)"
long_key="$(printf 'k%.0s' $(seq 300))"
status="$(pay "$work/invalid" "$long_key" '{"amount":5}')"
note "idempotency-key of 300 characters -> $status $(cat "$work/invalid.b")"
check "status" 400 "$status"
check "problem code" idempotency_key_invalid "$(jq -r .code "$work/invalid.b")"
check "upstream executions" "$before" "$(executions)"

step "7. An uncertain outcome waits for an operator, who decides it in the console (headless Chromium)"
key7="demo-$run_id-unknown"
path7="/payments?abort=demo-$run_id"
before="$(executions)"
note "POST $path7  idempotency-key: $key7"
note "(the upstream takes the payment, then drops the connection before answering)"
status="$(pay "$work/lost" "$key7" '{"amount":300,"currency":"EUR"}' "$path7")"
note "-> $status $(cat "$work/lost.b")"
check "status (Envoy's own answer: the connection was reset)" 503 "$status"
check "upstream executions" $((before + 1)) "$(executions)"
status="$(pay "$work/held" "$key7" '{"amount":300,"currency":"EUR"}' "$path7")"
note "a retry -> $status $(cat "$work/held.b")"
check "the retry is held: problem code" operation_unknown "$(jq -r .code "$work/held.b")"
scope="$(curl -fsS "http://$UPSTREAM_ADDR/executions?after=$before" |
    jq -r --arg key "$key7" 'select(.key == $key) | .scope')"
[[ -n "$scope" ]] || die "the upstream's execution log has no run of $key7"
admin_port="$(described '.lease_stores[0].admin')"
[[ "$admin_port" =~ ^[0-9]+$ ]] || die "stack.json names no admin port for lease-store 0: make down, then make up"
admin="127.0.0.1:$admin_port"
shots="$root/target/demo"
mkdir -p "$shots"
note "the record, $scope, is unknown: an operator opens http://$admin/console in a browser,"
note "signs in with their token, previews resolving it as completed with the provider's answer, confirms"
decided="$(KEYFLIGHT_PLAYWRIGHT_DIR="$root/.tools/browser" node "$root/scripts/demo-console.mjs" \
    "http://$admin" "$(described .tokens.admin)" "$scope" "$shots")" ||
    die "the console step failed (the browser script's output is above)"
note "reason kept in the audit: $(jq -r .reason <<<"$decided")"
status="$(pay "$work/decided" "$key7" '{"amount":300,"currency":"EUR"}' "$path7")"
note "the retry now -> $status $(cat "$work/decided.b")"
check "status: the operator's answer" "$(jq -r .authored.status <<<"$decided")" "$status"
check "body: the operator's answer" "$(jq -r .authored.body <<<"$decided")" "$(cat "$work/decided.b")"
check "idempotent-replayed header" true "$(header "$work/decided" idempotent-replayed)"
check "upstream executions (the payment ran once)" $((before + 1)) "$(executions)"
note "screenshots: $(jq -r '.screenshots | join(" and ")' <<<"$decided")"

step "8. With the lease-store down, guarded requests fail closed: 503, and the upstream is never called"
note "killing the lease-store: $("$stack" ctl --dir "$dir" kill lease-store 0)"
before="$(executions)"
status="$(pay "$work/down" "demo-$run_id-down" '{"amount":42}')"
note "-> $status retry-after: $(header "$work/down" retry-after)  $(cat "$work/down.b")"
check "status" 503 "$status"
check "problem code" journal_unavailable "$(jq -r .code "$work/down.b")"
check "retry-after present" yes "$([[ -n "$(header "$work/down" retry-after)" ]] && echo yes || echo no)"
check "upstream executions" "$before" "$(executions)"

note "restarting the lease-store so the stack is whole again: $("$stack" ctl --dir "$dir" start lease-store 0)"

if ((failures > 0)); then
    printf '\n\033[31m%d check(s) failed\033[0m (logs in %s)\n' "$failures" "$dir/logs"
    exit 1
fi
printf '\n\033[32mall checks passed\033[0m\n'
