#!/usr/bin/env bash
# Set up and start ServeDeck on its embedded defaults: SQLite, the in-memory channel layer and
# the local backend, on http://127.0.0.1:8000 (HOST and PORT change that). It installs the CPU
# runtimes first (scripts/setup_cpu_runtimes.sh; SERVEDECK_CPU_RUNTIMES=0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
mkdir -p var
scripts/setup_cpu_runtimes.sh
# The embedded admin's password is generated once and kept beside the database.
if [ -z "${SERVEDECK_ADMIN_PASSWORD:-}" ]; then
  if [ ! -s var/admin-password ]; then
    (umask 077; .venv/bin/python -c "import secrets; print(secrets.token_urlsafe(12))" > var/admin-password)
  fi
  SERVEDECK_ADMIN_PASSWORD=$(cat var/admin-password)
fi
export SERVEDECK_ADMIN_PASSWORD
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py bootstrap
.venv/bin/python manage.py collectstatic --noinput -v0
echo
echo "ServeDeck is starting on http://$HOST:$PORT/"
echo "Log in as ${SERVEDECK_ADMIN_USER:-admin} with password $SERVEDECK_ADMIN_PASSWORD"
echo
# The reconciler keeps every model's status true. On the embedded defaults (no REDIS_URL) it
# runs inside the console's process, so its announcements reach the live pages over the
# in-memory channel layer; otherwise it runs as its own process, as in production. Which one is
# SERVEDECK_RECONCILER_IN_PROCESS as the console's settings read it: this command asks them,
# and exits at once when the console runs it.
.venv/bin/python manage.py reconcile --unless-in-process &
reconciler=$!
trap 'kill $reconciler 2>/dev/null; wait $reconciler 2>/dev/null' EXIT INT TERM
.venv/bin/python -m console.serve -b "$HOST" -p "$PORT" console.asgi:application
