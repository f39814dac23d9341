#!/usr/bin/env bash
# Runs the whole suite. pytest exits 5 when no test ran; that is a failure here, never a success.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest --durations=40 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
fi
exit "$rc"
