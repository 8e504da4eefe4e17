#!/usr/bin/env bash
# Installs PL/Proxy (Debian's postgresql-<major>-plproxy, for the major version of the
# Postgres in $PG_BIN) for the partitioned store (docs/distributed-sql.md): the router
# database's functions run each statement on the partition that owns its scope. Idempotent:
# installs only what is missing; without root or apt-get it stops with one line saying how.
set -euo pipefail

pg_bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
version=$("$pg_bin/postgres" --version 2>/dev/null) || {
    echo "cannot run $pg_bin/postgres --version: set PG_BIN to the Postgres server binaries" >&2
    exit 1
}
# "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)" → 15; "17beta1" → 17.
[[ $version =~ \(PostgreSQL\)\ ([0-9]+) ]] || {
    echo "cannot read the major version from \"$version\" ($pg_bin/postgres --version)" >&2
    exit 1
}
major=${BASH_REMATCH[1]}
share=$("$pg_bin/pg_config" --sharedir 2>/dev/null || echo "/usr/share/postgresql/$major")
missing=()
[[ -f "$share/extension/plproxy.control" ]] || missing+=("postgresql-$major-plproxy")
exec "$(dirname "$0")/apt-install-missing.sh" "the partitioned store (PL/Proxy)" "${missing[@]}"
