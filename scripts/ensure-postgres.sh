#!/usr/bin/env bash
# Make sure the PostgreSQL server the tests use answers on 127.0.0.1:5432 (user postgres, trust
# auth, a `test` database). A server that already answers there is left exactly as it is.
# Otherwise, on Debian as root: install the `postgresql` package when it is missing, create the
# cluster when there is none, start it; a cluster created here trusts connections from
# 127.0.0.1 and ::1 and gets the `test` database. ENSURE_PG_PORT / ENSURE_PG_CLUSTER pick another
# port or cluster name (to try this script beside a running server).
set -euo pipefail
HOST=127.0.0.1
PORT="${ENSURE_PG_PORT:-5432}"
CLUSTER="${ENSURE_PG_CLUSTER:-main}"

say() { echo "ensure-postgres: $*" >&2; }
answers() {
    if command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -h "$HOST" -p "$PORT" 2>/dev/null
    else
        # No client tools yet: anything listening there is somebody's server; leave it alone.
        (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
    fi
}
wait_until_answers() {
    for _ in $(seq 1 "$1"); do
        if answers; then return 0; fi
        sleep 1
    done
    return 1
}

if answers; then exit 0; fi

created=""
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        say "PostgreSQL is neither answering on $HOST:$PORT nor installed; install it: sudo apt-get install postgresql"
        exit 1
    fi
    say "installing PostgreSQL (Debian package postgresql)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    created=yes  # the package's own cluster `main` is new: nobody configured it yet
fi

version="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
config="/etc/postgresql/$version/$CLUSTER"
if [ ! -d "$config" ]; then
    if [ "$(id -u)" != "0" ]; then
        say "no PostgreSQL cluster $version/$CLUSTER and not root to create one"
        exit 1
    fi
    say "creating cluster $version/$CLUSTER on port $PORT"
    pg_createcluster --port "$PORT" "$version" "$CLUSTER" >/dev/null
    created=yes
fi

if [ -n "$created" ]; then
    hba="$config/pg_hba.conf"
    if ! grep -q "stage-e: trust" "$hba"; then
        # The first matching line wins, so these go first: the tests connect as postgres, no password.
        { echo "# stage-e: trust local TCP connections (tests connect as postgres without a password)"
          echo "host all all 127.0.0.1/32 trust"
          echo "host all all ::1/128 trust"
          cat "$hba"; } >"$hba.new"
        chown --reference="$hba" "$hba.new"
        chmod --reference="$hba" "$hba.new"
        mv "$hba.new" "$hba"
    fi
fi

if pg_lsclusters -h "$version" "$CLUSTER" 2>/dev/null | grep -q online; then
    if [ -n "$created" ]; then pg_ctlcluster --skip-systemctl-redirect "$version" "$CLUSTER" reload; fi
else
    say "starting cluster $version/$CLUSTER"
    pg_ctlcluster --skip-systemctl-redirect "$version" "$CLUSTER" start || true
fi

if ! wait_until_answers 30; then
    say "PostgreSQL is not answering on $HOST:$PORT (cluster $version/$CLUSTER; see /var/log/postgresql/)"
    exit 1
fi
query() { psql -h "$HOST" -p "$PORT" -U postgres -d postgres -tAqc "$1"; }
if ! query "SELECT 1" >/dev/null 2>&1; then
    say "PostgreSQL answers on $HOST:$PORT but refuses user postgres without a password: add" \
        "'host all all 127.0.0.1/32 trust' to $config/pg_hba.conf and reload it"
    exit 1
fi
if [ "$(query "SELECT 1 FROM pg_database WHERE datname = 'test'")" != "1" ]; then
    say "creating database test"
    query "CREATE DATABASE test" >/dev/null
fi
