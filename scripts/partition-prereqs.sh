#!/usr/bin/env bash
# Installs PL/Proxy (Debian's postgresql-15-plproxy) for the partitioned store
# (docs/distributed-sql.md): the router database's functions run each statement on the
# partition that owns its scope. Idempotent: installs only what is missing; without root or
# apt-get it stops with one line saying how.
set -euo pipefail

pg_bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
share=$("$pg_bin/pg_config" --sharedir 2>/dev/null || echo /usr/share/postgresql/15)
missing=()
[[ -f "$share/extension/plproxy.control" ]] || missing+=(postgresql-15-plproxy)
exec "$(dirname "$0")/apt-install-missing.sh" "the partitioned store (PL/Proxy)" "${missing[@]}"
