#!/usr/bin/env bash
# The run script's CPU runtime step: installs the CPU model servers the local backend uses
# without vLLM (scripts/cpu_runtimes.sh, into $SERVEDECK_RUNTIMES_DIR, default var/runtimes)
# unless SERVEDECK_CPU_RUNTIMES=0, and never stops the console from starting: vLLM, or an
# operator's own server (SERVEDECK_LOCAL_COMMAND), may serve instead.
# They are installed where vLLM is installed too: vLLM loads no CTranslate2 Whisper, and a
# replica that asks for no GPU runs on them.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${SERVEDECK_CPU_RUNTIMES:-1}" = 0 ]; then
  echo "CPU runtimes: skipped (SERVEDECK_CPU_RUNTIMES=0); install them later with $PWD/scripts/cpu_runtimes.sh"
  exit 0
fi
echo "CPU runtimes for models on this machine: transformers serve, infinity-emb, faster-whisper-server,"
echo "  vLLM's CPU build"
echo "  (scripts/cpu_runtimes.sh; SERVEDECK_CPU_RUNTIMES=0 skips this step). The first time this"
echo "  downloads a few GB and takes several minutes; once installed it takes seconds."
started=$SECONDS
if scripts/cpu_runtimes.sh 2>&1 | sed -u 's/^/  /'; then
  echo "CPU runtimes: ready ($((SECONDS - started)) s)."
else
  echo "CPU runtimes: not all installed (above: which, and the command that retries them)."
  echo "  The console starts anyway; a model that needs a missing runtime is refused with that command."
fi
exit 0
