#!/usr/bin/env bash
# Run here, from the project's root, before a device call: downloads into .whl/ (git-ignored) the
# wheels the GPU machine lacks (it has JAX but no TensorFlow, Keras or keras-hub, and no network):
# Keras as installed here, keras-hub 0.32.0 and the small pure or binary packages they import,
# built for that machine's Python 3.12 on x86-64. Then one device call:
#   run  command "bash benchmarks/accelerator_device.sh"  carry [".whl"]  timeout_s 450
# (benchmarks/accelerator_device.sh installs them with --no-deps: keras-hub's declared
# tensorflow-text is never installed; keras_hsum and keras-hub import without it.)
set -euo pipefail
[ -d keras_hsum ] && [ -d recipes ] && [ -f benchmarks/accelerator.py ] || { echo "run from the project's root"; exit 1; }
python=${PYTHON:-.venv/bin/python}
keras_version=$("$python" -c 'import importlib.metadata as m; print(m.version("keras"))')
mkdir -p .whl
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl \
  "keras==$keras_version" keras-hub==0.32.0 namex==0.1.0 optree==0.20.0 tokenizers==0.23.3 \
  typing_extensions==4.16.0
ls -1 .whl
du -sh .whl
