#!/usr/bin/env bash
# Installs what `make bench` compares keyflight against beside Postgres: a durable Redis
# (Debian's redis-server; bench/README.md, "Baselines"). Idempotent: installs only what is
# missing; without root or apt-get it stops with one line saying how.
set -euo pipefail

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
exec "$(dirname "$0")/apt-install-missing.sh" "make bench's Redis baseline" "${missing[@]}"
