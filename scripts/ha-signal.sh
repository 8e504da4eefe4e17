#!/usr/bin/env bash
# Sends signal $1 to the replicated Postgres of `make up HA=1` (keyflight-ha): USR1 kills the
# primary's node, USR2 brings killed nodes back. Its answer appears in .run/postgres-ha.log.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pid="$(live_pid postgres-ha)" || die "no replicated Postgres is running: make up HA=1 first"
lines_before="$(wc -l <"$run/postgres-ha.log")"
kill -"$1" "$pid"
# Show what it did once it has said something new (a failover takes several seconds).
for _ in $(seq 600); do
    if (($(wc -l <"$run/postgres-ha.log") > lines_before)); then
        tail -n +"$((lines_before + 1))" "$run/postgres-ha.log" | grep -v '^$' || true
        exit 0
    fi
    sleep 0.1
done
die "keyflight-ha said nothing within 60 s; see $run/postgres-ha.log"
