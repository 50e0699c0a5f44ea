"""Helpers for the training tests: a small real corpus, a shared vocabulary,
`keras-hsum train` in a subprocess, and the weights a run saved.

Every run trains the tiny config of a recipe on 64 real qmsum_goldspan
examples with dropout 0 (so that runs are comparable weight for weight), a
1,000-piece vocabulary trained once and copied into each run folder, and a
learning rate high enough that a few steps move the weights well beyond
the comparison tolerances.
"""

import gzip
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import zipfile

import h5py
import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The overrides every comparable run uses (`--set key=value`).
COMMON_OVERRIDES = (
    "dropout=0.0",
    "vocabulary_size=1000",
    "validation_steps=1",
    "learning_rate=20.0",
)


def write_corpus(folder, train_examples=64, val_examples=16):
    """`folder/train.jsonl` and `folder/val.jsonl`: the first real examples
    of the bundled qmsum_goldspan sample. Returns `folder`."""
    from keras_hsum.data.corpora import sample_path

    os.makedirs(folder, exist_ok=True)
    for split, count in (("train", train_examples), ("val", val_examples)):
        with gzip.open(sample_path("qmsum_goldspan", split), "rt") as file:
            lines = [line for line in file.read().splitlines() if line.strip()]
        with open(os.path.join(folder, f"{split}.jsonl"), "w") as file:
            file.write("\n".join(lines[:count]) + "\n")
    return str(folder)


def train_vocabulary(corpus, path):
    """A 1,000-piece vocabulary trained on `corpus/train.jsonl` → `path`."""
    from keras_hsum.data.reader import read_examples
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.data.vocabulary import corpus_sentences

    examples = list(read_examples(os.path.join(corpus, "train.jsonl")))
    Vocabulary.train(corpus_sentences(examples), vocabulary_size=1000).save(path)
    return str(path)


def new_run_folder(out, vocabulary):
    """Creates the run folder `out` holding a copy of `vocabulary` (the
    trainer reuses it instead of training its own)."""
    os.makedirs(out, exist_ok=True)
    with open(vocabulary, "rb") as source, open(
        os.path.join(out, "vocabulary.model"), "wb"
    ) as target:
        target.write(source.read())
    return str(out)


def environment(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO_ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def train_command(recipe, corpus, out, *, epochs, steps_per_epoch, overrides=(), strategy="default"):
    """The `keras-hsum train` argument list of a comparable run."""
    command = [
        sys.executable, "-m", "keras_hsum.cli", "train",
        "--recipe", recipe, "--config", "tiny", "--data", corpus, "--out", str(out),
        "--strategy", strategy, "--epochs", str(epochs),
        "--steps-per-epoch", str(steps_per_epoch), "--quiet",
    ]
    for assignment in tuple(COMMON_OVERRIDES) + tuple(overrides):
        command += ["--set", assignment]
    return command


def run(command, timeout=600, **env):
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout,
        cwd=REPO_ROOT, env=environment(**env),
    )


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _h5_weights(file):
    """`{path: array}` of the model weights in an open Keras weights file
    (the optimizer's variables excluded)."""
    weights = {}

    def visit(name, item):
        if isinstance(item, h5py.Dataset) and not name.startswith("optimizer/"):
            weights[name] = np.array(item)

    file.visititems(visit)
    return weights


def saved_weights(path):
    """The model weights of a `.keras` file or a `.weights.h5` backup."""
    if str(path).endswith(".keras"):
        with zipfile.ZipFile(path) as archive:
            data = io.BytesIO(archive.read("model.weights.h5"))
        with h5py.File(data, "r") as file:
            return _h5_weights(file)
    with h5py.File(path, "r") as file:
        return _h5_weights(file)


def optimizer_iterations(path):
    """The optimizer step count stored in a `.weights.h5` backup."""
    with h5py.File(path, "r") as file:
        return int(np.array(file["optimizer/vars/0"]))


def max_difference(a, b):
    """The largest absolute difference between two weight dicts (same keys)."""
    assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))[:5]
    return max(float(np.max(np.abs(a[k] - b[k]))) if a[k].size else 0.0 for k in a)


def history(out):
    with open(os.path.join(out, "history.json")) as file:
        return json.load(file)["epochs"]


def backup_step(out):
    """The optimizer step of the run's last backup (`out/backup/backup.json`),
    or None when it has none yet."""
    try:
        with open(os.path.join(out, "backup", "backup.json")) as file:
            return int(re.search(r'"step": (\d+)', file.read()).group(1))
    except (OSError, AttributeError):
        return None


def kill_inside_an_epoch(command, out, steps_per_epoch, timeout=400, env=None):
    """Starts `command` (with the extra environment variables `env`), kills
    it (SIGKILL) as soon as its backup holds a step inside an epoch (not a
    multiple of `steps_per_epoch`); returns that step."""
    import pytest

    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=environment(**(env or {})),
    )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            step = backup_step(out)
            if step is not None and step % steps_per_epoch:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
                return step
            if process.poll() is not None:
                pytest.fail(
                    "The run ended before it could be killed inside an epoch: "
                    + process.stderr.read()[-2000:]
                )
            time.sleep(0.02)
        pytest.fail("No mid-epoch backup appeared in time.")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
