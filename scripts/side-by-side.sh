#!/usr/bin/env bash
# First-time POSTs side by side: keyflight as `make up` runs it (Envoy + filter, lease-store,
# Postgres, demo upstream) and a durable Redis-backed peer (ldclabs/idempotent-proxy's
# idempotent-proxy-server, built outside this repository) with Redis 7 under
# `appendfsync always`, plus the peer under `appendfsync everysec` as a reference.
#
# Two topologies, rounds interleaved (keyflight, peer, peer everysec):
# - unpinned: every process may run on every core;
# - pinned: each side's data tier on core 1 (keyflight: the lease-stores and every Postgres
#   process; the peer: redis-server), its proxies, the upstreams and wrk on core 0, the way
#   production runs the data tier apart from the proxies (bench/README.md, "Which half bounds
#   the rate"). The affinity is restored on exit.
#
# Per run: the rate, p50, the CPU per request of each process group (utime+stime from
# /proc/PID/stat; Postgres summed over the postmaster, its children and its reaped children),
# how many cores' worth of CPU the data tier and the rest spent, and each core's idle share over
# the run (idle+iowait from /proc/stat; other work on the machine fills idle cores too).
#
# Usage, from the project root with `make up` running (`make down` after):
#   scripts/side-by-side.sh PEER_BINARY [ROUNDS]   (ROUNDS defaults to 2; SECS=8 per run)
# Needs wrk, redis-server, jq and taskset, and a 2-core (or larger) machine.
set -euo pipefail

peer_bin=${1:?usage: scripts/side-by-side.sh PEER_BINARY [ROUNDS]}
rounds=${2:-2}
secs=${SECS:-8}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
stack="$root/.run/stack.json"
[[ -f $stack ]] || { echo "no $stack: run make up first" >&2; exit 1; }
for tool in wrk redis-server redis-cli jq taskset; do
    command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 1; }
done
(( $(nproc) >= 2 )) || { echo "needs 2 cores" >&2; exit 1; }

work=$(mktemp -d)
all_cores="0-$(( $(nproc) - 1 ))"
tck=$(getconf CLK_TCK)

adapter=$(jq -r '.adapter // "wasm"' "$stack")
kf_port=$(jq -r '.envoys[0].listener' "$stack")
envoys=$(jq -r '.envoys[].pid' "$stack")
stores=$(jq -r '.lease_stores[].pid' "$stack")
upstream=$(jq -r '.upstream.pid' "$stack")
pg_port=$(jq -r '.postgres.url' "$stack" | sed -E 's#.*:([0-9]+)/.*#\1#')
postmaster=$(ss -ltnpH "sport = :$pg_port" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)
[[ -n $postmaster ]] || { echo "no Postgres listening on :$pg_port" >&2; exit 1; }

cat >"$work/unique.lua" <<'LUA'
local tid = 0
function setup(thread) thread:set("id", tid); tid = tid + 1 end
function init(args) n = 0; math.randomseed(os.time() + id * 7919) end
request = function()
  n = n + 1
  local key = "u-" .. id .. "-" .. n .. "-" .. math.random(1000000000)
  return wrk.format("POST", nil, {["idempotency-key"]=key, ["x-user"]="bench", ["content-type"]="application/json"}, '{"amount":1}')
end
LUA

redis-server --port 16379 --appendonly yes --appendfsync always --dir "$work" --save "" \
    --daemonize yes --pidfile "$work/redis.pid" >/dev/null
DEMO_UPSTREAM_LISTEN=127.0.0.1:18081 "$root/target/release/demo-upstream" >"$work/up.log" 2>&1 &
upstream2=$!
: >"$work/.env" # the peer refuses to start without one; its settings come from the environment
(cd "$work" && SERVER_ADDR=127.0.0.1:18080 REDIS_URL=127.0.0.1:16379 POLL_INTERVAL=100 \
    URL_PAY=http://127.0.0.1:18081/payments exec "$peer_bin" >"$work/peer.log" 2>&1) &
peer=$!
for _ in $(seq 50); do
    [[ -s $work/redis.pid ]] && curl -s -o /dev/null -X POST -H 'idempotency-key: warm' \
        http://127.0.0.1:18080/URL_PAY && break
    sleep 0.2
done
redis=$(cat "$work/redis.pid")

pg_pids() { echo "$postmaster"; ps -o pid= --ppid "$postmaster"; }

set_affinity() { # CORES PID...
    local cores=$1; shift
    for pid in "$@"; do taskset -a -p -c "$cores" "$pid" >/dev/null 2>&1 || true; done
}

topology() { # unpinned|pinned
    if [[ $1 == pinned ]]; then
        # shellcheck disable=SC2046
        set_affinity 1 $stores $(pg_pids) "$redis"
        # shellcheck disable=SC2086
        set_affinity 0 $envoys "$upstream" "$peer" "$upstream2"
    else
        # shellcheck disable=SC2046,SC2086
        set_affinity "$all_cores" $stores $(pg_pids) "$redis" $envoys "$upstream" "$peer" "$upstream2"
    fi
}

cleanup() {
    topology unpinned
    kill "$peer" "$upstream2" 2>/dev/null || true
    redis-cli -p 16379 shutdown nosave >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

ticks() { # PID...: utime+stime of the processes (and, with +c, their reaped children)
    local sum=0 f
    for pid in "$@"; do
        [[ -r /proc/$pid/stat ]] || continue
        read -ra f <<<"$(sed 's/.*) //' "/proc/$pid/stat")"
        sum=$(( sum + f[11] + f[12] ))
    done
    echo "$sum"
}
pg_ticks() {
    local f
    read -ra f <<<"$(sed 's/.*) //' "/proc/$postmaster/stat")"
    # shellcheck disable=SC2046
    echo $(( $(ticks $(pg_pids)) + f[13] + f[14] ))
}
cores() { grep -E '^cpu[0-9]+ ' /proc/stat | awk '{t=0; for(i=2;i<=NF;i++) t+=$i; print $1, $5+$6, t}'; }

# group name -> how to read its ticks, per side
snapshot() { # side
    if [[ $1 == keyflight ]]; then
        # shellcheck disable=SC2086
        echo "proxy=$(ticks $envoys) store=$(ticks $stores) postgres=$(pg_ticks) upstream=$(ticks "$upstream")"
    else
        echo "proxy=$(ticks "$peer") redis=$(ticks "$redis") upstream=$(ticks "$upstream2")"
    fi
}

run() { # topology side conns round
    local topo=$1 side=$2 c=$3 r=$4 url pin=() before after c0 c1 out reqs
    url=http://127.0.0.1:18080/URL_PAY
    [[ $side == keyflight ]] && url=http://127.0.0.1:$kf_port/payments
    [[ $side == everysec ]] && redis-cli -p 16379 config set appendfsync everysec >/dev/null
    [[ $side == peer ]] && redis-cli -p 16379 config set appendfsync always >/dev/null
    [[ $topo == pinned ]] && pin=(taskset -c 0)
    before=$(snapshot "$side"); c0=$(cores)
    out=$( ("${pin[@]}" wrk -t2 -c"$c" -d"${secs}s" --latency -s "$work/unique.lua" "$url"; times) 2>&1)
    after=$(snapshot "$side"); c1=$(cores)
    reqs=$(awk '/requests in/{print $1}' <<<"$out")
    awk -v topo="$topo" -v side="$side" -v c="$c" -v r="$r" -v reqs="$reqs" -v tck="$tck" \
        -v before="$before" -v after="$after" -v c0="$c0" -v c1="$c1" '
        function secs(s,  m) { m = s; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", s); sub(/s$/, "", s); return m * 60 + s }
        /Requests\/sec/ { rps = $2 }
        /^ +50%/ { p50 = $2 }
        /Non-2xx/ { bad = $NF }
        /Socket errors/ { errs = $0; sub(/^ *Socket errors: */, "", errs); gsub(/,/, "", errs) }
        /^[0-9]+m[0-9.]+s [0-9]+m[0-9.]+s$/ { wrk_s = secs($1) + secs($2) } # the children line of times
        END {
            nb = split(before, b, " "); split(after, a, " ")
            line = sprintf("%-8s c=%-2s round=%s %-9s rps=%-8s p50=%-8s non2xx=%d  us/req:", topo, c, r, side, rps, p50, bad)
            tot = 0
            for (i = 1; i <= nb; i++) {
                split(b[i], kb, "="); split(a[i], ka, "=")
                us = (ka[2] - kb[2]) / tck * 1e6 / reqs; tot += us
                if (kb[1] ~ /^(store|postgres|redis)$/) data += us
                line = line sprintf(" %s=%.0f", kb[1], us)
            }
            w = wrk_s * 1e6 / reqs; tot += w
            line = line sprintf(" wrk=%.0f total=%.0f  cores busy: data tier=%.2f the rest=%.2f  idle:", w, tot, data * rps / 1e6, (tot - data) * rps / 1e6)
            n0 = split(c0, x, "\n"); split(c1, y, "\n")
            for (i = 1; i <= n0; i++) {
                split(x[i], p, " "); split(y[i], q, " ")
                line = line sprintf(" %s=%.0f%%", p[1], 100 * (q[2] - p[2]) / (q[3] - p[3]))
            }
            if (errs != "") line = line "  socket errors: " errs
            print line
        }' <<<"$out"
}

echo "# $(date -u '+%F %H:%M UTC'), keyflight's filter: the $adapter adapter, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); ${secs}s runs, wrk -t2"
topology unpinned
for side in keyflight peer; do run unpinned "$side" 16 warm-up >/dev/null; done
for r in $(seq "$rounds"); do
    for topo in unpinned pinned; do
        topology "$topo"
        for c in 16 64; do
            for side in keyflight peer everysec; do run "$topo" "$side" "$c" "$r"; done
        done
    done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
