#!/usr/bin/env bash
# Set up and run every test: the virtualenv, Debian's Chromium and axe-core for the browser tests,
# then pytest.
# Extra arguments go to pytest (for example: scripts/test.sh tests/jobs -x).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
if ! command -v chromium >/dev/null 2>&1; then
  echo "Installing Debian's chromium for the browser tests ..."
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
# axe-core for the every-page browser test, pinned by tests/browser/package-lock.json.
if [ ! -f tests/browser/node_modules/axe-core/axe.min.js ]; then
  echo "Installing axe-core for the browser tests ..."
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
status=0
.venv/bin/python -m pytest "$@" || status=$?
# pytest's 5 means no test was collected: that is a failure here, not a pass.
exit $status
