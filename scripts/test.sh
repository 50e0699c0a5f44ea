#!/usr/bin/env bash
# Runs the test suite in the project's virtual environment (created if needed).
#   bash scripts/test.sh          default suite: TensorFlow backend, then the
#                                 backend-agnostic tests again under JAX
#   bash scripts/test.sh slow     the tests marked `slow` (long trainings, clusters)
#   bash scripts/test.sh -- ARGS  extra pytest arguments for the default suite
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/ensure_venv.sh"
cd "$ROOT"

MODE="${1:-default}"
[ "$MODE" = "--" ] && MODE=default
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift

# pytest exits 5 when it collects no test; a pass over an empty folder is fine.
run_pytest() {
  set +e
  python -m pytest "$@"
  local rc=$?
  set -e
  if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then exit $rc; fi
}

case "$MODE" in
  default)
    echo "== pytest (KERAS_BACKEND=tensorflow)"
    KERAS_BACKEND=tensorflow run_pytest -m "not slow" tests "$@"
    AGNOSTIC=()
    for d in tests/layers tests/models tests/decoding; do
      [ -d "$d" ] && AGNOSTIC+=("$d")
    done
    if [ ${#AGNOSTIC[@]} -gt 0 ]; then
      echo "== pytest (KERAS_BACKEND=jax): ${AGNOSTIC[*]}"
      KERAS_BACKEND=jax run_pytest -m "not slow and not tensorflow_only" "${AGNOSTIC[@]}" "$@"
    else
      echo "== pytest (KERAS_BACKEND=jax): no backend-agnostic test folder yet"
    fi
    ;;
  slow)
    KERAS_BACKEND=tensorflow run_pytest -m slow tests "$@"
    ;;
  *)
    echo "usage: bash scripts/test.sh [default|slow] [-- pytest args]" >&2
    exit 2
    ;;
esac
