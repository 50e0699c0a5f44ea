#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment in .venv and installs
# keras_hsum with its pinned dependencies. Re-installs only when setup.py
# changed since the last install. Sourced by demo.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KERAS_HSUM_VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3}"
EXTRAS="${KERAS_HSUM_EXTRAS:-test,jax,bench,beam}"

if ! "$PYTHON_BIN" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "keras_hsum needs Python >= 3.11; $PYTHON_BIN is $("$PYTHON_BIN" --version 2>&1)." >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in $VENV"
  "$PYTHON_BIN" -m venv "$VENV"
fi
STAMP="$VENV/.keras_hsum_installed"
WANT="$(cat "$ROOT/setup.py" | sha256sum | cut -d' ' -f1) $EXTRAS"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "[setup] installing keras_hsum[$EXTRAS] and its pinned dependencies (first run: a few minutes)"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$EXTRAS]"
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
