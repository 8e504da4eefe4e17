# Shared by up.sh, down.sh and demo.sh: where things are, and small helpers.
# Sourced, not run. Every path and port can be overridden from the environment.

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run="$root/.run"

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_PORT="${KEYFLIGHT_PG_PORT:-54329}"

# HA=1 runs Postgres replicated (etcd + two Patroni nodes, target/release/keyflight-ha): the
# nodes on $PG_PORT and $PG_PORT+1, Patroni's REST APIs and etcd on the ports below.
HA="${HA:-0}"
HA_BIN="${KEYFLIGHT_HA_BIN:-$root/target/release/keyflight-ha}"
HA_REST_PORTS="${KEYFLIGHT_HA_REST_PORTS:-8008 8009}"
HA_ETCD_PORTS="${KEYFLIGHT_HA_ETCD_PORTS:-2379 2380}"

# The ports below are the ones envoy/demo.yaml names; change them together.
LEASE_STORE_ADDR="127.0.0.1:8480"
UPSTREAM_ADDR="127.0.0.1:8081"
ENVOY_ADDR="127.0.0.1:10000"
ENVOY_ADMIN_ADDR="127.0.0.1:9901"

# REPLICAS=2 adds a second Envoy and a second lease-store on the same Postgres, in front of
# the same upstream: the ports envoy/two-replicas.yaml names (change them together). Both
# Envoys then run envoy/two-replicas.yaml (every Envoy reaches both lease-stores); the first
# with its listener and admin moved to the ports above.
REPLICAS="${REPLICAS:-1}"
LEASE_STORE2_ADDR="127.0.0.1:8481"
ENVOY2_ADDR="127.0.0.1:10001"
ENVOY2_ADMIN_ADDR="127.0.0.1:9902"

# The filter's token is also in envoy/demo.yaml (`lease_store.token`). Demo values only.
FILTER_TOKEN="${KEYFLIGHT_TOKEN:-demo-filter-token}"
ADMIN_TOKEN="${KEYFLIGHT_ADMIN_TOKEN:-demo-admin-token}"

# Binaries: the Makefile builds them; a release build wins over a debug one.
default_bin() {
    if [[ -x "$root/target/release/$1" ]]; then
        printf '%s\n' "$root/target/release/$1"
    else
        printf '%s\n' "$root/target/debug/$1"
    fi
}
LEASE_STORE_BIN="${KEYFLIGHT_LEASE_STORE_BIN:-$(default_bin lease-store)}"
UPSTREAM_BIN="${KEYFLIGHT_UPSTREAM_BIN:-$(default_bin demo-upstream)}"
WASM="${KEYFLIGHT_WASM:-$root/target/wasm32-wasip1/release/keyflight_filter_wasm.wasm}"

say() { printf '%s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# Runs a command as the postgres user when we are root (Postgres refuses to run as root).
as_postgres() {
    if [[ "$(id -u)" -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# The pid recorded for service $1, if that process is still alive.
live_pid() {
    local pidfile="$run/$1.pid" pid
    [[ -f "$pidfile" ]] || return 1
    pid="$(cat "$pidfile")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && printf '%s\n' "$pid"
}

# Starts service $1 in the background: the rest of the arguments are the command.
# Its output goes to .run/$1.log and its pid to .run/$1.pid.
start_bg() {
    local name="$1"
    shift
    "$@" >"$run/$name.log" 2>&1 &
    printf '%s\n' "$!" >"$run/$name.pid"
}

# Waits until `check` (the remaining arguments) succeeds, for up to $WAIT_READY_SECONDS
# (default 30) seconds. Fails early, with the service's log tail, when service $1 has exited.
wait_ready() {
    local name="$1"
    shift
    local limit="${WAIT_READY_SECONDS:-30}"
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        if [[ -f "$run/$name.pid" ]] && ! live_pid "$name" >/dev/null; then
            say "$name exited during start-up; last lines of $run/$name.log:"
            tail -n 30 "$run/$name.log" >&2 || true
            return 1
        fi
        if ((SECONDS >= deadline)); then
            say "$name not ready after $limit s; last lines of $run/$name.log:"
            tail -n 30 "$run/$name.log" >&2 || true
            return 1
        fi
        sleep 0.1
    done
}

# The lease-store's database URL: the one node, or (HA=1) both nodes with
# target_session_attrs=read-write, as keyflight-ha wrote it.
database_url() {
    if [[ -f "$run/postgres-ha.url" ]]; then
        cat "$run/postgres-ha.url"
    else
        printf '%s\n' "postgres://postgres@127.0.0.1:$PG_PORT/keyflight"
    fi
}

# Starts a lease-store: service name $1 (default lease-store) on address $2 (default
# $LEASE_STORE_ADDR). Every replica runs `serve --migrate`; start them one after the other,
# so the second finds the migrations in place.
start_lease_store() {
    local name="${1:-lease-store}" addr="${2:-$LEASE_STORE_ADDR}"
    KEYFLIGHT_DATABASE_URL="$(database_url)" \
        KEYFLIGHT_LISTEN="$addr" \
        KEYFLIGHT_TOKEN="$FILTER_TOKEN" \
        KEYFLIGHT_ADMIN_TOKEN="$ADMIN_TOKEN" \
        start_bg "$name" "$LEASE_STORE_BIN" serve --migrate
    wait_ready "$name" curl -fsS "http://$addr/readyz"
}

# Renders the shipped Envoy config $1 (relative to the repository root) to .run/$2 with the
# wasm path pointed at $WASM. Further arguments come in pairs FROM TO: the one
# `port_value: FROM` line becomes `port_value: TO` (each must occur exactly once).
render_envoy_config() {
    local shipped_config="$1" out="$2"
    shift 2
    local shipped="filename: target/wasm32-wasip1/release/keyflight_filter_wasm.wasm"
    grep -q "$shipped" "$root/$shipped_config" || die "$shipped_config no longer contains '$shipped'"
    local edits=(-e "s#$shipped#filename: $WASM#")
    while (($# >= 2)); do
        [[ "$(grep -c "port_value: $1 " "$root/$shipped_config")" == 1 ]] ||
            die "$shipped_config must name port $1 exactly once"
        edits+=(-e "s#port_value: $1 #port_value: $2 #")
        shift 2
    done
    sed "${edits[@]}" "$root/$shipped_config" >"$run/$out"
}

# Starts Envoy as service $1 with the rendered config .run/$2, ready when admin $3 is.
# --disable-hot-restart: no shared-memory region, so this Envoy never collides with another
# one on the machine (the e2e tests run their own).
start_envoy() {
    start_bg "$1" "$ENVOY" -c "$run/$2" --disable-hot-restart --concurrency 2
    wait_ready "$1" curl -fsS "http://$3/ready"
}
