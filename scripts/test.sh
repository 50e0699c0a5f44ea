#!/usr/bin/env bash
# Runs the test suite in the project's virtual environment (created if needed).
#   bash scripts/test.sh          default suite: TensorFlow backend, and the
#                                 backend-agnostic tests again under JAX
#                                 (budget: 15 minutes on CI's 2 cores)
#   bash scripts/test.sh slow     the tests marked `slow` (long trainings,
#                                 memorisation, clusters) under TensorFlow,
#                                 and the backend-agnostic `slow` and
#                                 `jax_slow` tests under JAX
#   (.ci/run runs both: together they assert everything on every backend)
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

# The suite compiles many small XLA programs (JAX runs every search under
# jax.jit; TensorFlow's jit_compile tests and SavedModels too) and runs each
# on tiny tensors: the backend's optimisation passes cost far more than they
# save there. Level 0 cut a JAX decoding test from 35.6 to 27.7 s.
export XLA_FLAGS="--xla_backend_optimization_level=0${XLA_FLAGS:+ $XLA_FLAGS}"

# pytest exits 5 when it collects no test; a pass over an empty folder is fine.
run_pytest() {
  set +e
  python -m pytest "$@"
  local rc=$?
  set -e
  if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then exit $rc; fi
}

# Two processes share CI's two cores: the first runs the TensorFlow pass;
# the second runs the backend-agnostic folders under JAX, then the TensorFlow
# files and folders in second_tf (moved there to end the two processes
# together: the cluster-heavy training files, export, evaluation and the
# TensorFlow run of tests/layers). Every
# test runs once per backend it belongs to. The second process's log is
# printed after the first pass.
#   two_passes TF_MARKERS JAX_MARKERS [pytest args]
two_passes() {
  local tf_markers="$1" jax_markers="$2"
  shift 2
  local agnostic=() second_tf=() ignore=()
  for d in tests/layers tests/models tests/decoding; do
    [ -d "$d" ] && agnostic+=("$d")
  done
  for f in tests/training/test_weight_averaging.py tests/training/test_distributed.py \
           tests/training/test_jax_training.py tests/export tests/evaluation tests/layers; do
    if [ -e "$f" ]; then second_tf+=("$f"); ignore+=("--ignore=$f"); fi
  done
  local second_log basetemp second_pid tf_rc second_rc
  second_log="$(mktemp)"
  basetemp="$(mktemp -d)"   # one pytest temp root per pass: they run concurrently
  (
    set +e
    rc=0
    if [ ${#agnostic[@]} -gt 0 ]; then
      echo "== pytest (KERAS_BACKEND=jax, -m \"$jax_markers\"): ${agnostic[*]}"
      ( KERAS_BACKEND=jax run_pytest -m "$jax_markers" --durations=20 \
        --basetemp="$basetemp/jax" "${agnostic[@]}" "$@" ) || rc=$?
    fi
    if [ ${#second_tf[@]} -gt 0 ]; then
      echo "== pytest (KERAS_BACKEND=tensorflow, -m \"$tf_markers\"): ${second_tf[*]}"
      ( KERAS_BACKEND=tensorflow run_pytest -m "$tf_markers" --durations=5 \
        --basetemp="$basetemp/tf2" "${second_tf[@]}" "$@" )
      tf_rc=$?
      [ $rc -ne 0 ] || rc=$tf_rc
    fi
    exit $rc
  ) > "$second_log" 2>&1 &
  second_pid=$!
  echo "== pytest (KERAS_BACKEND=tensorflow, -m \"$tf_markers\"): tests, but ${second_tf[*]:-nothing}"
  set +e
  ( KERAS_BACKEND=tensorflow run_pytest -m "$tf_markers" --durations=20 \
    --basetemp="$basetemp/tf" "${ignore[@]}" tests "$@" )
  tf_rc=$?
  wait "$second_pid"
  second_rc=$?
  set -e
  cat "$second_log"
  rm -rf "$second_log" "$basetemp"
  if [ $tf_rc -ne 0 ]; then exit $tf_rc; fi
  if [ $second_rc -ne 0 ]; then exit $second_rc; fi
}

case "$MODE" in
  default)
    two_passes "not slow" "not slow and not jax_slow and not tensorflow_only" "$@"
    ;;
  slow)
    # The TensorFlow half runs every `slow` test; the JAX half runs the
    # backend-agnostic `slow` tests and those too slow for the default JAX pass.
    two_passes "slow" "(slow or jax_slow) and not tensorflow_only" "$@"
    ;;
  *)
    echo "usage: bash scripts/test.sh [default|slow] [-- pytest args]" >&2
    exit 2
    ;;
esac
