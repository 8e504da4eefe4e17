#!/usr/bin/env bash
# Installs what the replicated-Postgres tests and `make up HA=1` need: Patroni and etcd, from
# Debian's packages (patroni, etcd-server). Idempotent: installs only what is missing; without
# root or apt-get it stops with one line saying how.
set -euo pipefail

missing=()
command -v patroni >/dev/null || missing+=(patroni)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v setpriv >/dev/null || missing+=(util-linux)
((${#missing[@]} == 0)) && exit 0

if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "patroni and etcd are needed (replicated-Postgres tests, make up HA=1): apt-get install -y patroni etcd-server" >&2
    exit 1
fi
echo "installing ${missing[*]} with apt-get (replicated-Postgres tests, make up HA=1)" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: update once, only if the first try fails.
if ! apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q "${missing[@]}" >/dev/null
fi
