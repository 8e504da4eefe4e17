#!/usr/bin/env bash
# Installs Debian packages for the prerequisite scripts (ha-prereqs.sh, net-prereqs.sh):
# `apt-install-missing.sh "WHAT FOR" PACKAGE...` installs the packages given (the caller
# passes only the missing ones); without root or apt-get it stops with one line saying how.
set -euo pipefail

why=$1
shift
((${#@} == 0)) && exit 0

if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "needed for ${why}: apt-get install -y $*" >&2
    exit 1
fi
echo "installing $* with apt-get (${why})" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: update once, only if the first try fails.
if ! apt-get install -y -q "$@" >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q "$@" >/dev/null
fi
