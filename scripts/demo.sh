#!/usr/bin/env bash
# The main job: sets up the virtual environment (if needed) and runs
# `keras-hsum demo` on the bundled real data. Extra arguments go to the demo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/ensure_venv.sh"
cd "$ROOT"
exec keras-hsum demo "$@"
