#!/usr/bin/env bash
# Installs and starts what the test suite needs beyond Python packages:
# Debian's Chromium (browser tests) and a PostgreSQL server on loopback (queue tests).
# Writes .test-services.env with the variables the tests read. Where a service
# cannot be had (not root, no apt), its tests skip, unless WORKBENCH_REQUIRE_SERVICES=1
# (set by CI) turns that into a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
env_file=.test-services.env
: > "$env_file"

can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
apt_updated=0
apt_install() {
    if [ $apt_updated = 0 ]; then apt-get update -qq >/dev/null 2>&1 || true; apt_updated=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1
}

# --- Chromium -------------------------------------------------------------
if [ ! -x /usr/bin/chromium ] && can_apt; then
    echo "test-services: installing chromium"
    apt_install chromium || echo "test-services: chromium install failed"
fi
if [ -x /usr/bin/chromium ]; then
    echo "WORKBENCH_TEST_CHROMIUM=/usr/bin/chromium" >> "$env_file"
fi

# --- PostgreSQL -----------------------------------------------------------
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && can_apt; then
    echo "test-services: installing postgresql"
    apt_install postgresql || echo "test-services: postgresql install failed"
fi
if command -v pg_lsclusters >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    cluster=$(pg_lsclusters -h 2>/dev/null | head -n 1)
    if [ -n "$cluster" ]; then
        set -- $cluster
        pg_ctlcluster "$1" "$2" start 2>/dev/null || true
        port=$3
        for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p "$port" && break; sleep 0.5; done
        su postgres -c "psql -q -p $port" >/dev/null 2>&1 <<'SQL'
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'workbench') THEN
    CREATE ROLE workbench LOGIN PASSWORD 'workbench' CREATEDB;
  END IF;
END $$;
-- DROP DATABASE ... WITH (FORCE) of a test's own database must also end the autovacuum worker that
-- may have just started there (it has no role; only pg_signal_backend may end it)
GRANT pg_signal_backend TO workbench;
SQL
        # A fresh test database every run: tables or an alembic revision left by an earlier checkout
        # (another branch's migrations) must not decide whether this one's tests pass.
        su postgres -c "dropdb -p $port --if-exists --force workbench_test" >/dev/null 2>&1
        su postgres -c "createdb -p $port -O workbench workbench_test"
        if pg_isready -q -h 127.0.0.1 -p "$port"; then
            echo "WORKBENCH_TEST_PG_URL=postgresql+psycopg://workbench:workbench@127.0.0.1:$port/workbench_test" >> "$env_file"
        fi
    fi
fi
echo "test-services: $(tr '\n' ' ' < "$env_file")"
