#!/usr/bin/env bash
# Starts the demo stack in the background: a throwaway Postgres, the lease-store, the demo
# upstream and Envoy with the keyflight filter (envoy/demo.yaml). Pids, logs and the
# rendered Envoy config go to .run/; `scripts/down.sh` stops it all.
#
# Environment (all optional): PG_BIN, KEYFLIGHT_PG_PORT (54329), KEYFLIGHT_LEASE_STORE_BIN,
# KEYFLIGHT_UPSTREAM_BIN, KEYFLIGHT_WASM, KEYFLIGHT_ENVOY (default: scripts/envoy.sh installs it),
# REPLICAS (1 or 2; 2 starts a second lease-store on :8481 on the same Postgres and runs
# envoy/two-replicas.yaml, which reaches both lease-stores, for both Envoys: :10000 and
# :10001, in front of the same upstream), HA (1: a replicated Postgres that fails over —
# etcd + two Patroni nodes in synchronous mode, run by target/release/keyflight-ha; the
# lease-stores get the multi-host URL; see lib.sh for ports).
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
[[ "$REPLICAS" == 1 || "$REPLICAS" == 2 ]] || die "REPLICAS must be 1 or 2 (got '$REPLICAS')"
[[ "$HA" == 0 || "$HA" == 1 ]] || die "HA must be 0 or 1 (got '$HA')"
if [[ "$HA" == 1 ]]; then
    "$root/scripts/ha-prereqs.sh"
    [[ -x "$HA_BIN" ]] || die "$HA_BIN not found: build it first (make up HA=1 builds it)"
fi

for name in postgres postgres-ha lease-store lease-store-2 demo-upstream envoy envoy-2; do
    if live_pid "$name" >/dev/null; then
        die "the stack is already running ($name, pid $(live_pid "$name")): scripts/down.sh first"
    fi
done
# Clear what a crashed earlier run may have left behind (stale pids, a stray Postgres).
"$root/scripts/down.sh"
mkdir -p "$run"

# On any failure, stop whatever already started, so a half-up stack never lingers.
trap 'say "start-up failed: stopping what was started"; "$root/scripts/down.sh" --keep-logs' ERR

if [[ "$HA" == 1 ]]; then
    # keyflight-ha keeps its data in a temp dir of its own and removes it when it stops.
    say "starting a replicated Postgres: etcd + two Patroni nodes on 127.0.0.1:$PG_PORT and :$((PG_PORT + 1))"
    # shellcheck disable=SC2086 # the port lists are two words each
    start_bg postgres-ha "$HA_BIN" --etcd-ports $HA_ETCD_PORTS \
        --postgres-ports "$PG_PORT" "$((PG_PORT + 1))" --rest-ports $HA_REST_PORTS \
        --database keyflight --url-file "$run/postgres-ha.url"
    WAIT_READY_SECONDS=180 wait_ready postgres-ha test -s "$run/postgres-ha.url"
else
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
fi

say "starting the lease-store on $LEASE_STORE_ADDR"
start_lease_store
if [[ "$REPLICAS" == 2 ]]; then
    say "starting the second lease-store on $LEASE_STORE2_ADDR (same Postgres)"
    start_lease_store lease-store-2 "$LEASE_STORE2_ADDR"
fi

say "starting the demo upstream on $UPSTREAM_ADDR"
DEMO_UPSTREAM_LISTEN="$UPSTREAM_ADDR" start_bg demo-upstream "$UPSTREAM_BIN"
wait_ready demo-upstream curl -fsS "http://$UPSTREAM_ADDR/stats"

# The shipped configs name the wasm relative to the repository root; point it at $WASM.
# With two replicas both Envoys run envoy/two-replicas.yaml, which lists both lease-stores;
# the first moves its listener and admin to the single-replica ports.
if [[ "$REPLICAS" == 2 ]]; then
    render_envoy_config envoy/two-replicas.yaml envoy.yaml \
        "${ENVOY2_ADDR##*:}" "${ENVOY_ADDR##*:}" "${ENVOY2_ADMIN_ADDR##*:}" "${ENVOY_ADMIN_ADDR##*:}"
else
    render_envoy_config envoy/demo.yaml envoy.yaml
fi
say "starting Envoy on $ENVOY_ADDR (admin $ENVOY_ADMIN_ADDR)"
start_envoy envoy envoy.yaml "$ENVOY_ADMIN_ADDR"
if [[ "$REPLICAS" == 2 ]]; then
    render_envoy_config envoy/two-replicas.yaml envoy-2.yaml
    say "starting the second Envoy on $ENVOY2_ADDR (admin $ENVOY2_ADMIN_ADDR)"
    start_envoy envoy-2 envoy-2.yaml "$ENVOY2_ADMIN_ADDR"
fi

trap - ERR
cat <<INFO
keyflight demo stack is up:
  Envoy (keyflight filter)  http://$ENVOY_ADDR     try: curl -i -X POST http://$ENVOY_ADDR/payments -H 'x-user: alice' -H 'idempotency-key: k1' -d '{"amount":100}'
  Envoy admin               http://$ENVOY_ADMIN_ADDR
  lease-store               http://$LEASE_STORE_ADDR   (/readyz, /metrics; filter token $FILTER_TOKEN, admin token $ADMIN_TOKEN)
  demo upstream             http://$UPSTREAM_ADDR    (/stats: how many payments really ran)
  Postgres                  $(database_url)
Logs and pids in $run/. Stop with scripts/down.sh (make down).
INFO
if [[ "$HA" == 1 ]]; then
    rest=($HA_REST_PORTS)
    cat <<INFO
Replicated Postgres (synchronous; Patroni REST on :${rest[0]} and :${rest[1]}, try: curl -s 127.0.0.1:${rest[0]}/cluster):
  make ha-kill-primary      kill the primary's node; Patroni promotes the standby (timings in $run/postgres-ha.log)
  make ha-restart-nodes     bring killed nodes back as standbys
INFO
fi
if [[ "$REPLICAS" == 2 ]]; then
    cat <<INFO
Second replica (same upstream, same Postgres):
  Envoy (keyflight filter)  http://$ENVOY2_ADDR    admin http://$ENVOY2_ADMIN_ADDR
  lease-store               http://$LEASE_STORE2_ADDR
INFO
fi
