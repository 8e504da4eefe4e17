#!/usr/bin/env bash
# Installs what the network faults need (network namespaces cut by nftables: the partition
# tests and the chaos run's network faults): nft, from Debian's nftables package. `ip` and
# `tc` come with iproute2. Idempotent: installs only what is missing; without root or
# apt-get it stops with one line saying how.
set -euo pipefail

missing=()
command -v nft >/dev/null || missing+=(nftables)
command -v ip >/dev/null || missing+=(iproute2)
command -v tc >/dev/null || missing+=(iproute2)
((${#missing[@]} == 0)) && exit 0

if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "nft and ip are needed (network faults, run as root): apt-get install -y nftables iproute2" >&2
    exit 1
fi
echo "installing ${missing[*]} with apt-get (network faults)" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: update once, only if the first try fails.
if ! apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q "${missing[@]}" >/dev/null
fi
