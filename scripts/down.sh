#!/usr/bin/env bash
# Stops the demo stack started by up.sh (by the pids in .run/) and removes .run/ and the
# throwaway Postgres. Safe to run when nothing is running.
#   --keep-logs  stop everything but keep .run/ (up.sh uses it after a failed start)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

keep_logs=false
[[ "${1:-}" == "--keep-logs" ]] && keep_logs=true

# SIGTERM to pid $1, up to $2 tenths of a second to exit, then SIGKILL.
stop_pid() {
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq "$2"); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
}

# Envoy first, so no new traffic reaches the services behind it.
for name in envoy-2 envoy demo-upstream lease-store-2 lease-store; do
    if pid="$(live_pid "$name")"; then
        say "stopping $name (pid $pid)"
        stop_pid "$pid" 50
    fi
    rm -f "$run/$name.pid"
done

# The replicated Postgres (HA=1) stops its etcd and Patroni nodes on SIGTERM; give it time.
if pid="$(live_pid postgres-ha)"; then
    say "stopping the replicated Postgres (pid $pid)"
    stop_pid "$pid" 300
fi
rm -f "$run/postgres-ha.pid" "$run/postgres-ha.url"

if [[ -f "$run/pg.dir" ]]; then
    pgdir="$(cat "$run/pg.dir")"
    if [[ -f "$pgdir/data/postmaster.pid" ]]; then
        say "stopping Postgres ($pgdir)"
        as_postgres "$PG_BIN/pg_ctl" -D "$pgdir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    # Only ever remove what up.sh created.
    [[ "$pgdir" == /tmp/keyflight-pg.* ]] && rm -rf "$pgdir"
    rm -f "$run/pg.dir"
fi

if ! $keep_logs; then
    rm -rf "$run"
fi
