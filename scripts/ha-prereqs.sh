#!/usr/bin/env bash
# Installs what the replicated-Postgres tests and `make up HA=1` need: Patroni and etcd, from
# Debian's packages (patroni, etcd-server). Idempotent: installs only what is missing; without
# root or apt-get it stops with one line saying how.
set -euo pipefail

missing=()
command -v patroni >/dev/null || missing+=(patroni)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v setpriv >/dev/null || missing+=(util-linux)
exec "$(dirname "$0")/apt-install-missing.sh" "replicated-Postgres tests, make up HA=1" "${missing[@]}"
