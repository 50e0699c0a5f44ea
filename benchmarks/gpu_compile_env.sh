#!/usr/bin/env bash
# Makes .venv-gpu-compile (git-ignored) for benchmarks/gpu_compile.py: the
# project's JAX with its CUDA plugin (jax[cuda12]: XLA's GPU compiler and the
# CUDA libraries' wheels, about 5.6 GB; no GPU or driver needed), the Keras
# and keras-hub of .venv, and what keras-hub imports (not tensorflow-text:
# keras_hsum's layers, models and recipes import without TensorFlow).
#   bash benchmarks/gpu_compile_env.sh
#   .venv-gpu-compile/bin/python benchmarks/gpu_compile.py --target h100
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || { echo "run bash scripts/test.sh once first (it makes .venv)"; exit 1; }
version() { "$python" -c "import importlib.metadata as m; print(m.version('$1'))"; }
venv=.venv-gpu-compile
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "jax[cuda12]==$(version jax)" "keras==$(version keras)" \
  "numpy==$(version numpy)" tokenizers sentencepiece regex absl-py rich packaging \
  "protobuf==$(version protobuf)" requests pyyaml tqdm
"$venv/bin/python" -m pip install -q --no-deps "keras-hub==$(version keras-hub)" \
  "kagglehub==$(version kagglehub)" "kagglesdk==$(version kagglesdk)"
KERAS_BACKEND=jax "$venv/bin/python" -c "
import jax, keras, keras_hub
from jax.experimental import topologies
print('jax', jax.__version__, 'keras', keras.__version__, 'keras-hub', keras_hub.__version__)"
