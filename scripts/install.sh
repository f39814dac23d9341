#!/usr/bin/env bash
# Creates the project's virtual environment and installs the project, its extras and every bundled
# environment into it. Idempotent: re-running it only installs what changed.
set -euo pipefail
PYTHON=${1:-python3}
VENV=${2:-.venv}
cd "$(dirname "$0")/.."

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
PIP="$VENV/bin/pip"
# torch first, pinned, with pip: these machines carry the CPU build of 2.13.0 on disk, while an open
# range (or uv) would download a multi-GB CUDA build.
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  echo "==> installing torch 2.13.0 (CPU build)"
  "$PIP" install -q torch==2.13.0
fi
echo "==> installing verifiers[hub,train,train-logging,dev,compat,ta]"
"$PIP" install -q -e '.[hub,train,train-logging,dev,compat,ta]'
envs=()
for d in environments/*/; do
  [ -f "$d/pyproject.toml" ] && envs+=("-e" "$d")
done
if [ ${#envs[@]} -gt 0 ]; then
  echo "==> installing bundled environments"
  "$PIP" install -q "${envs[@]}"
fi
# vLLM lives in its own virtual environment ($VF_HOME, default ~/.cache/verifiers): it pins its own
# fastapi/transformers versions. Installed once; later runs only check it.
echo "==> vLLM (own venv under \${VF_HOME:-~/.cache/verifiers})"
"$VENV/bin/python" -m verifiers.serving.vllm
echo "==> environment ready: $VENV"
