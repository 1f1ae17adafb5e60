#!/usr/bin/env bash
# Make sure the PostgreSQL server the tests use (127.0.0.1:5432, user postgres) answers; start the
# machine's Debian cluster if it does not.
set -euo pipefail
ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if ready; then exit 0; fi
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    version="$(ls /etc/postgresql | sort -V | tail -n 1)"
    echo "ensure-postgres: starting cluster $version/main" >&2
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
fi
for _ in $(seq 1 30); do
    if ready; then exit 0; fi
    sleep 1
done
echo "ensure-postgres: PostgreSQL is not answering on 127.0.0.1:5432" >&2
exit 1
