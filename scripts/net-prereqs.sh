#!/usr/bin/env bash
# Installs what the network faults need (network namespaces cut by nftables: the partition
# tests and the chaos run's link faults): nft, from Debian's nftables package; `ip` and `tc`
# come with iproute2. Idempotent: installs only what is missing; without root or apt-get it
# stops with one line saying how. The faults themselves need root.
set -euo pipefail

missing=()
command -v nft >/dev/null || missing+=(nftables)
{ command -v ip >/dev/null && command -v tc >/dev/null; } || missing+=(iproute2)
exec "$(dirname "$0")/apt-install-missing.sh" "network faults" "${missing[@]}"
