#!/usr/bin/env bash
# The main job on embedded defaults (see scripts/demo.py for the steps).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python scripts/demo.py "$@"
