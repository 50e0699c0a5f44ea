#!/usr/bin/env bash
# Runs the test suite in the project's virtual environment (created if needed).
#   bash scripts/test.sh          default suite: TensorFlow backend, and the
#                                 backend-agnostic tests again under JAX
#   bash scripts/test.sh slow     the tests marked `slow` (long trainings, clusters)
#   bash scripts/test.sh -- ARGS  extra pytest options for the default suite
#                                 (e.g. -k vocabulary); to run one file, call
#                                 .venv/bin/python -m pytest FILE instead (a
#                                 path here is added to every pass)
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
    # Two processes share CI's two cores. The first runs the TensorFlow pass;
    # the second runs the backend-agnostic tests under JAX, then the
    # TensorFlow files in SECOND_TF. Those files (about 2.5 minutes) move the
    # second process's end next to the first's: alone, the JAX pass ended
    # about five minutes before the TensorFlow pass, leaving a core idle.
    # Every test still runs once per backend it belongs to. The second
    # process's log is printed after the first pass.
    AGNOSTIC=()
    for d in tests/layers tests/models tests/decoding; do
      [ -d "$d" ] && AGNOSTIC+=("$d")
    done
    SECOND_TF=()
    IGNORE=()
    for f in tests/training/test_weight_averaging.py tests/training/test_distributed.py; do
      if [ -f "$f" ]; then SECOND_TF+=("$f"); IGNORE+=("--ignore=$f"); fi
    done
    SECOND_LOG="$(mktemp)"
    BASETEMP="$(mktemp -d)"   # one pytest temp root per pass: they run concurrently
    (
      set +e
      rc=0
      if [ ${#AGNOSTIC[@]} -gt 0 ]; then
        echo "== pytest (KERAS_BACKEND=jax): ${AGNOSTIC[*]}"
        ( KERAS_BACKEND=jax run_pytest -m "not slow and not tensorflow_only" --durations=20 \
          --basetemp="$BASETEMP/jax" "${AGNOSTIC[@]}" "$@" ) || rc=$?
      fi
      if [ ${#SECOND_TF[@]} -gt 0 ]; then
        echo "== pytest (KERAS_BACKEND=tensorflow): ${SECOND_TF[*]}"
        ( KERAS_BACKEND=tensorflow run_pytest -m "not slow" --durations=5 \
          --basetemp="$BASETEMP/tf2" "${SECOND_TF[@]}" "$@" )
        tf_rc=$?
        [ $rc -ne 0 ] || rc=$tf_rc
      fi
      exit $rc
    ) > "$SECOND_LOG" 2>&1 &
    SECOND_PID=$!
    echo "== pytest (KERAS_BACKEND=tensorflow): tests, but ${SECOND_TF[*]:-nothing}"
    set +e
    ( KERAS_BACKEND=tensorflow run_pytest -m "not slow" --durations=20 --basetemp="$BASETEMP/tf" \
      "${IGNORE[@]}" tests "$@" )
    TF_RC=$?
    wait "$SECOND_PID"
    SECOND_RC=$?
    set -e
    cat "$SECOND_LOG"
    rm -rf "$SECOND_LOG" "$BASETEMP"
    if [ $TF_RC -ne 0 ]; then exit $TF_RC; fi
    if [ $SECOND_RC -ne 0 ]; then exit $SECOND_RC; fi
    ;;
  slow)
    KERAS_BACKEND=tensorflow run_pytest -m slow tests "$@"
    ;;
  *)
    echo "usage: bash scripts/test.sh [default|slow] [-- pytest args]" >&2
    exit 2
    ;;
esac
