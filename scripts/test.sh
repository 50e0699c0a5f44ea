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
    # The TensorFlow pass and the JAX pass run at the same time (CI has two
    # cores and each pass mostly keeps one busy); the JAX log is printed
    # after the TensorFlow pass.
    AGNOSTIC=()
    for d in tests/layers tests/models tests/decoding; do
      [ -d "$d" ] && AGNOSTIC+=("$d")
    done
    JAX_LOG="$(mktemp)"
    BASETEMP="$(mktemp -d)"   # one pytest temp root per pass: they run concurrently
    JAX_PID=""
    if [ ${#AGNOSTIC[@]} -gt 0 ]; then
      ( KERAS_BACKEND=jax run_pytest -m "not slow and not tensorflow_only" --durations=20 \
        --basetemp="$BASETEMP/jax" "${AGNOSTIC[@]}" "$@" ) \
        > "$JAX_LOG" 2>&1 &
      JAX_PID=$!
    fi
    echo "== pytest (KERAS_BACKEND=tensorflow)"
    set +e
    ( KERAS_BACKEND=tensorflow run_pytest -m "not slow" --durations=20 --basetemp="$BASETEMP/tf" tests "$@" )
    TF_RC=$?
    JAX_RC=0
    if [ -n "$JAX_PID" ]; then
      wait "$JAX_PID"
      JAX_RC=$?
    fi
    set -e
    echo "== pytest (KERAS_BACKEND=jax): ${AGNOSTIC[*]:-no backend-agnostic test folder yet}"
    cat "$JAX_LOG"
    rm -rf "$JAX_LOG" "$BASETEMP"
    if [ $TF_RC -ne 0 ]; then exit $TF_RC; fi
    if [ $JAX_RC -ne 0 ]; then exit $JAX_RC; fi
    ;;
  slow)
    KERAS_BACKEND=tensorflow run_pytest -m slow tests "$@"
    ;;
  *)
    echo "usage: bash scripts/test.sh [default|slow] [-- pytest args]" >&2
    exit 2
    ;;
esac
