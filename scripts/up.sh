#!/usr/bin/env bash
# Starts the demo stack in the background: a throwaway Postgres, the lease-store, the demo
# upstream and Envoy with the keyflight filter (envoy/demo.yaml). Pids, logs and the
# rendered Envoy config go to .run/; `scripts/down.sh` stops it all.
#
# Environment (all optional): PG_BIN, KEYFLIGHT_PG_PORT (54329), KEYFLIGHT_LEASE_STORE_BIN,
# KEYFLIGHT_UPSTREAM_BIN, KEYFLIGHT_WASM, KEYFLIGHT_ENVOY (default: scripts/envoy.sh installs it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ -x "$PG_BIN/initdb" && -x "$PG_BIN/pg_ctl" ]] ||
    die "Postgres 15 server binaries not found in $PG_BIN: apt-get install postgresql-15 (or set PG_BIN)"
command -v curl >/dev/null || die "curl not found: apt-get install curl"
for bin in "$LEASE_STORE_BIN" "$UPSTREAM_BIN"; do
    [[ -x "$bin" ]] || die "$bin not found: build it first (make up builds it)"
done
[[ -f "$WASM" ]] || die "$WASM not found: build it first (make up builds it)"
ENVOY="${KEYFLIGHT_ENVOY:-$("$root/scripts/envoy.sh")}"

for name in postgres lease-store demo-upstream envoy; do
    if live_pid "$name" >/dev/null; then
        die "the stack is already running ($name, pid $(live_pid "$name")): scripts/down.sh first"
    fi
done
# Clear what a crashed earlier run may have left behind (stale pids, a stray Postgres).
"$root/scripts/down.sh"
mkdir -p "$run"

# On any failure, stop whatever already started, so a half-up stack never lingers.
trap 'say "start-up failed: stopping what was started"; "$root/scripts/down.sh" --keep-logs' ERR

# Postgres lives in /tmp rather than .run/: the postgres user must be able to reach it,
# and a checkout under /root is not reachable by other users.
pgdir="$(mktemp -d /tmp/keyflight-pg.XXXXXX)"
printf '%s\n' "$pgdir" >"$run/pg.dir"
if [[ "$(id -u)" -eq 0 ]]; then
    chown postgres "$pgdir"
fi
say "starting Postgres on 127.0.0.1:$PG_PORT (data in $pgdir)"
as_postgres "$PG_BIN/initdb" -D "$pgdir/data" -U postgres --auth=trust --no-sync >"$run/postgres.log" 2>&1
as_postgres "$PG_BIN/pg_ctl" -D "$pgdir/data" -l "$pgdir/postgres.log" -w -t 30 \
    -o "-p $PG_PORT -k $pgdir -c listen_addresses=127.0.0.1" start >>"$run/postgres.log" 2>&1
wait_ready postgres "$PG_BIN/pg_isready" -h 127.0.0.1 -p "$PG_PORT"
as_postgres "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres keyflight

say "starting the lease-store on $LEASE_STORE_ADDR"
start_lease_store

say "starting the demo upstream on $UPSTREAM_ADDR"
DEMO_UPSTREAM_LISTEN="$UPSTREAM_ADDR" start_bg demo-upstream "$UPSTREAM_BIN"
wait_ready demo-upstream curl -fsS "http://$UPSTREAM_ADDR/stats"

# The shipped config names the wasm relative to the repository root; point it at $WASM.
shipped_wasm="filename: target/wasm32-wasip1/release/keyflight_filter.wasm"
grep -q "$shipped_wasm" "$root/envoy/demo.yaml" || die "envoy/demo.yaml no longer contains '$shipped_wasm'"
sed "s#$shipped_wasm#filename: $WASM#" "$root/envoy/demo.yaml" >"$run/envoy.yaml"
say "starting Envoy on $ENVOY_ADDR (admin $ENVOY_ADMIN_ADDR)"
# --disable-hot-restart: no shared-memory region, so this Envoy never collides with another
# one on the machine (the e2e tests run their own).
start_bg envoy "$ENVOY" -c "$run/envoy.yaml" --disable-hot-restart --concurrency 2
wait_ready envoy curl -fsS "http://$ENVOY_ADMIN_ADDR/ready"

trap - ERR
cat <<INFO
keyflight demo stack is up:
  Envoy (keyflight filter)  http://$ENVOY_ADDR     try: curl -i -X POST http://$ENVOY_ADDR/payments -H 'x-user: alice' -H 'idempotency-key: k1' -d '{"amount":100}'
  Envoy admin               http://$ENVOY_ADMIN_ADDR
  lease-store               http://$LEASE_STORE_ADDR   (/readyz, /metrics; filter token $FILTER_TOKEN, admin token $ADMIN_TOKEN)
  demo upstream             http://$UPSTREAM_ADDR    (/stats: how many payments really ran)
  Postgres                  postgres://postgres@127.0.0.1:$PG_PORT/keyflight
Logs and pids in $run/. Stop with scripts/down.sh (make down).
INFO
