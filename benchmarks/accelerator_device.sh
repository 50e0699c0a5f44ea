#!/usr/bin/env bash
# benchmarks/accelerator.py on the lent GPU machine (JAX, no TensorFlow/Keras/keras-hub, no
# network), from the project's root, after `bash benchmarks/prepare_device.sh` here:
#   run  command "bash benchmarks/accelerator_device.sh"  carry [".whl"]  timeout_s 450
# Installs the wheels of .whl/ into /tmp/site (--no-deps), puts the checkout on PYTHONPATH
# (accelerator.py maps recipes/ to keras_hsum.recipes itself) and runs the benchmark with its
# own budget (ACCELERATOR_BUDGET, default 390 s: tasks that would not fit are skipped, a
# watchdog stops it at budget + 10 s) under `timeout` at ACCELERATOR_TIMEOUT (default 420 s).
# Writes $OUT/accelerator.json, .md and log.txt; fold them into the project's results with
#   .venv/bin/python benchmarks/accelerator.py --merge <files_at>/accelerator.json
# Options after the script name pass to accelerator.py (e.g. --smoke, --tasks ...).
# Here, to test it on the CPU: JAX_PLATFORMS=cpu OUT=/tmp/out bash benchmarks/accelerator_device.sh --smoke
set -uo pipefail
[ -f benchmarks/accelerator.py ] || { echo "run from the project's root"; exit 1; }
OUT=${OUT:-$PWD/accelerator_out}
mkdir -p "$OUT"
python=${PYTHON:-python3}
site=${SITE:-/tmp/site}
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1
if ! "$python" -c 'import keras, keras_hub' 2>/dev/null; then
    ls .whl/*.whl >/dev/null 2>&1 || { echo "no .whl/: run bash benchmarks/prepare_device.sh here and carry .whl"; exit 1; }
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .whl/*.whl || exit 1
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$PWD/.jax_cache}
{
    date -u +"start %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
    "$python" -c 'import jax, keras, keras_hub; print("jax", jax.__version__, jax.devices(), "keras", keras.__version__, "keras-hub", keras_hub.__version__)'
    timeout -k 5 "${ACCELERATOR_TIMEOUT:-420}" "$python" benchmarks/accelerator.py \
        --out "$OUT" --budget "${ACCELERATOR_BUDGET:-390}" "$@"
    echo "accelerator.py exit code $?"
    date -u +"end %Y-%m-%dT%H:%M:%SZ"
} 2>&1 | tee "$OUT/log.txt"
