"""Distributed training gives the weights of one device on the same global batch.

Every test trains the real entry point in subprocesses (a strategy's
devices and `TF_CONFIG` must be set before TensorFlow starts) on 64 real
qmsum_goldspan examples, tiny config, dropout 0, then compares the saved
weights with a one-device `model.fit` run of the same global batches. One
test trains with dropout and compares a stopped and resumed mirrored run
with an uninterrupted one instead.

Tolerances: the runs differ only in float32 summation order (a batch split
in two halves whose gradients are summed). Adam divides each gradient by
the root of its running square, which turns a rounding difference in an
almost-zero gradient into a difference of up to 2·lr in its weight; the
tolerance is therefore a few learning rates (the peak rate of these runs
is about 5e-3).
"""

import json
import os
import sys

import numpy as np
import pytest

from training_runs import COMMON_OVERRIDES
from training_runs import free_ports
from training_runs import max_difference
from training_runs import new_run_folder
from training_runs import run
from training_runs import saved_weights
from training_runs import train_vocabulary
from training_runs import write_corpus

pytestmark = pytest.mark.tensorflow_only

# The recipe the distributed runs train; both tests take it as a parameter.
RECIPE = "flat"
MULTI_WORKER_RECIPE = "pht"
EPOCHS, STEPS_PER_EPOCH = 2, 3
TOLERANCE = 2e-3

# Trains `recipe` with `train()` for each of `runs` ([strategy, out folder,
# weights file, overrides] and optionally the optimizer step to stop after)
# and writes the final weights of this process (the chief's and the other
# workers' alike) to `weights`.
_TRAIN_SCRIPT = r"""
import json, sys
logical_cpus, recipe_name, corpus, runs = json.loads(sys.argv[1])
import tensorflow as tf
if logical_cpus > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * logical_cpus)
import os
import keras
from keras_hsum import recipes
from keras_hsum.cli import parse_overrides
from keras_hsum.training import train
recipe = recipes.get(recipe_name)

class _StopAt(keras.callbacks.Callback):
    # Stops the run after optimizer step `step`, inside an epoch (what the
    # time budget does when a clock runs out).
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) >= self.step:
            self.model.stop_training = True

callbacks = []
if os.environ.get("STOP_WORKER_AT"):  # "index:step": that worker alone stops
    index, step = map(int, os.environ["STOP_WORKER_AT"].split(":"))
    if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == index:
        callbacks.append(_StopAt(step))

class _CountBatches(keras.callbacks.Callback):
    # The training steps this call ran (a resumed run skips the done ones).
    def __init__(self):
        super().__init__()
        self.count = 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1

for strategy, out, weights, overrides, *stop_after in runs:
    config = parse_overrides(recipes.config(recipe_name, "tiny"), overrides)
    stops = [_StopAt(step) for step in stop_after]
    counter = _CountBatches()
    result = train(recipe, config, out=out, data=corpus, strategy=strategy,
                   recipe_name=recipe_name, config_name="tiny", verbose=0,
                   extra_callbacks=callbacks + stops + [counter])
    result.model.save_weights(weights)
    print(json.dumps({"strategy": strategy, "steps": result.steps, "batches": counter.count,
                      "replicas": result.model.distribute_strategy.num_replicas_in_sync,
                      "history": result.history}))
"""


def _overrides():
    return list(COMMON_OVERRIDES) + [
        f"epochs={EPOCHS}", f"steps_per_epoch={STEPS_PER_EPOCH}",
    ]


def _train(logical_cpus, recipe, corpus, runs, **env):
    result = run(
        [sys.executable, "-c", _TRAIN_SCRIPT,
         json.dumps([logical_cpus, recipe, corpus, runs])], **env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("distributed")
    data = write_corpus(folder / "data")
    return data, train_vocabulary(data, folder / "vocabulary.model"), folder


@pytest.fixture(scope="module")
def one_device_and_mirrored(corpus):
    """`train()` with "default" and "mirrored" over 2 logical CPUs, in one
    process: `{strategy: (summary, final weights)}`."""
    data, vocabulary, folder = corpus
    runs = []
    for strategy in ("default", "mirrored"):
        out = new_run_folder(folder / f"{RECIPE}-{strategy}", vocabulary)
        runs.append([strategy, out, os.path.join(out, "final.weights.h5"),
                     _overrides() + ["checkpoint_monitor=val_accuracy"]])
    summaries = _train(2, RECIPE, data, runs)
    return {
        run_[0]: (summary, saved_weights(run_[2]), run_[1])
        for run_, summary in zip(runs, summaries)
    }


@pytest.mark.slow  # default-suite budget (docs/testing.md): its fixture trains twice (130 s on CI); test_mirrored_loop_clips_the_global_gradient keeps tf.distribute in the default suite
def test_mirrored_over_two_cpus_matches_one_device(one_device_and_mirrored):
    (single, single_weights, _) = one_device_and_mirrored["default"]
    (mirrored, mirrored_weights, _) = one_device_and_mirrored["mirrored"]
    assert single["replicas"] == 1 and mirrored["replicas"] == 2
    assert single["steps"] == mirrored["steps"] == EPOCHS * STEPS_PER_EPOCH
    difference = max_difference(single_weights, mirrored_weights)
    print(f"max |mirrored - default| = {difference:.3g}")
    assert difference < TOLERANCE
    # The loop logs what `fit` logs: the loss and the compiled metrics
    # (token accuracy), on the training steps and the validation batches.
    assert sorted(mirrored["history"]) == sorted(single["history"])
    for key in ("loss", "val_loss", "accuracy", "val_accuracy"):
        np.testing.assert_allclose(mirrored["history"][key], single["history"][key], rtol=1e-4,
                                   err_msg=key)


@pytest.mark.slow  # default-suite budget (docs/testing.md): shares the two-training fixture with the test above
def test_mirrored_keeps_the_best_accuracy_as_fit_does(one_device_and_mirrored):
    """checkpoint_monitor=val_accuracy (both runs): best.json names the
    epoch of the highest val_accuracy in the run's own history, the same
    epoch as the one-device run's."""
    best = {}
    for strategy in ("default", "mirrored"):
        summary, out = one_device_and_mirrored[strategy][0], one_device_and_mirrored[strategy][2]
        with open(os.path.join(out, "best.json")) as file:
            best[strategy] = json.load(file)
        accuracies = summary["history"]["val_accuracy"]
        assert best[strategy]["monitor"] == "val_accuracy"
        assert best[strategy]["epoch"] == accuracies.index(max(accuracies)) + 1
    assert best["mirrored"]["epoch"] == best["default"]["epoch"]


@pytest.mark.slow  # 49 s under TensorFlow on CI's 2 cores: the slow set
def test_mirrored_run_with_dropout_resumes_to_the_uninterrupted_weights(corpus):
    """Dropout 0.3 under the mirrored loop: a run stopped after step 4 (inside
    its second epoch) and run again ends with the weights of a run that was
    not stopped. The backup restores the dropout layers' seed states, so the
    resumed replicas draw the masks the uninterrupted ones draw (without
    them the weights end about 1e-2 apart)."""
    data, vocabulary, folder = corpus
    overrides = _overrides() + ["dropout=0.3", "backup_every_steps=1"]
    whole = new_run_folder(folder / "dropout-whole", vocabulary)
    stopped = new_run_folder(folder / "dropout-stopped", vocabulary)
    runs = [["mirrored", whole, os.path.join(whole, "final.weights.h5"), overrides],
            ["mirrored", stopped, os.path.join(stopped, "stopped.weights.h5"), overrides, 4],
            ["mirrored", stopped, os.path.join(stopped, "final.weights.h5"), overrides]]
    summaries = _train(2, RECIPE, data, runs)
    assert [s["steps"] for s in summaries] == [6, 4, 6]
    assert [s["batches"] for s in summaries] == [6, 4, 2]  # the third run resumed
    assert all(s["replicas"] == 2 for s in summaries)
    difference = max_difference(saved_weights(runs[2][2]), saved_weights(runs[0][2]))
    print(f"max |resumed - uninterrupted| = {difference:.3g}")
    assert difference < 1e-6


# Sequence-level training (REINFORCE) over one step: the replicas draw the
# samples one device draws for their rows, and divide their term by the
# replicas, so the step's loss and mean sample reward are the one-device
# ones. One step only: after it the weights differ by rounding (see the
# tolerances above), which may move a later draw across a token boundary.
_REINFORCE = ("reinforce_weight=0.99", "reinforce_samples=2", "epochs=1",
              "steps_per_epoch=1", "max_target_length=24", "checkpoint_monitor=val_reward")


# Two more trainings with sampling (about 60 s on 2 CPUs); the default suite
# keeps the mirrored teacher-forced run and the one-device sequence-level
# training (test_checkpoint_monitor.py).
# One clipped SGD step (SGD, unlike Adam, moves by the gradient's scale) of
# a Dense layer on a batch whose halves have very different gradient norms:
# the mirrored loop must clip the summed gradient by its global norm, as one
# device does, not each replica's half.
_CLIPPED_STEP_SCRIPT = r"""
import json
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
from keras_hsum.training.distributed import make_train_step

def build(strategy):
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.SGD(1.0, global_clipnorm=0.1),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.optimizer.build(model.trainable_variables)
    return model

rng = np.random.default_rng(0)
x = rng.normal(size=(4, 4)).astype("float32")
x[2:] *= 5.0
y = rng.integers(0, 3, 4).astype("int32")
one = build(tf.distribute.get_strategy())
before = [v.numpy() for v in one.trainable_variables]
one.train_on_batch(x, y)
mirrored = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
model = build(mirrored)
with mirrored.scope():
    step = make_train_step(model, mirrored)
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
step(iter(mirrored.experimental_distribute_dataset(data)))
print(json.dumps({
    "difference": max(float(np.abs(a.numpy() - b.numpy()).max())
                      for a, b in zip(one.trainable_variables, model.trainable_variables)),
    "update_norm": float(np.sqrt(sum(((a.numpy() - b) ** 2).sum()
                                     for a, b in zip(one.trainable_variables, before)))),
}))
"""


def test_mirrored_loop_clips_the_global_gradient_as_one_device_does():
    result = run([sys.executable, "-c", _CLIPPED_STEP_SCRIPT])
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    # The step was clipped (lr 1: the update's norm is the clip norm) ...
    assert measured["update_norm"] == pytest.approx(0.1, rel=1e-4)
    # ... and the mirrored step equals it (per-replica clipping: ~4e-2).
    assert measured["difference"] < 1e-6


@pytest.mark.slow
def test_mirrored_reinforce_matches_one_device(corpus):
    data, vocabulary, folder = corpus
    runs = []
    for strategy in ("default", "mirrored"):
        out = new_run_folder(folder / f"{RECIPE}-reinforce-{strategy}", vocabulary)
        runs.append([strategy, out, os.path.join(out, "final.weights.h5"),
                     list(COMMON_OVERRIDES) + list(_REINFORCE)])
    (single, mirrored) = _train(2, RECIPE, data, runs)
    assert single["replicas"] == 1 and mirrored["replicas"] == 2
    assert single["steps"] == mirrored["steps"] == 1
    for key in ("loss", "reward", "val_loss", "val_reward"):
        print(key, single["history"][key], mirrored["history"][key])
    np.testing.assert_allclose(mirrored["history"]["loss"], single["history"]["loss"], rtol=1e-4)
    np.testing.assert_allclose(mirrored["history"]["reward"], single["history"]["reward"],
                               rtol=1e-5)
    np.testing.assert_allclose(mirrored["history"]["val_loss"], single["history"]["val_loss"],
                               rtol=1e-4)
    np.testing.assert_allclose(mirrored["history"]["val_reward"],
                               single["history"]["val_reward"], rtol=1e-5)
    difference = max_difference(saved_weights(runs[0][2]), saved_weights(runs[1][2]))
    print(f"max |mirrored - default| = {difference:.3g}")
    assert difference < TOLERANCE
    # The mirrored loop keeps the best held-out reward as fit does.
    with open(os.path.join(runs[1][1], "best.json")) as file:
        best = json.load(file)
    assert best["monitor"] == "val_reward"
    assert best["value"] == pytest.approx(mirrored["history"]["val_reward"][0], rel=1e-6)


def _multi_worker(recipe, corpus, folder, workers=2, overrides=None, timeout=600, **env):
    data, vocabulary, _ = corpus
    overrides = _overrides() if overrides is None else list(overrides)
    out = new_run_folder(folder / f"{recipe}-multi_worker", vocabulary)
    ports = free_ports(workers)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    import subprocess

    from training_runs import environment

    processes = []
    for index in range(workers):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        weights = os.path.join(folder, f"{recipe}-worker{index}.weights.h5")
        runs = [["multi_worker", out, weights, overrides]]
        processes.append((weights, subprocess.Popen(
            [sys.executable, "-c", _TRAIN_SCRIPT, json.dumps([1, recipe, data, runs])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=environment(TF_CONFIG=tf_config, **env),
        )))
    results = []
    try:
        for weights, process in processes:
            stdout, stderr = process.communicate(timeout=timeout)
            assert process.returncode == 0, stderr[-3000:]
            summary = [json.loads(l) for l in stdout.splitlines() if l.startswith("{")][0]
            results.append((summary, saved_weights(weights)))
    finally:
        for _, process in processes:
            if process.poll() is None:
                process.kill()
    return out, results


@pytest.mark.slow  # two workers plus a one-process reference: minutes on 2 CPUs
def test_multi_worker_matches_one_device(corpus, request, tmp_path):
    out, workers = _multi_worker(MULTI_WORKER_RECIPE, corpus, tmp_path)
    (chief, chief_weights), (other, other_weights) = workers
    assert chief["replicas"] == other["replicas"] == 2
    assert chief["steps"] == other["steps"] == EPOCHS * STEPS_PER_EPOCH
    between_workers = max_difference(chief_weights, other_weights)
    print(f"max |worker0 - worker1| = {between_workers:.3g}")
    assert between_workers == 0.0
    # Only the chief wrote the run folder; its files hold the final weights.
    assert max_difference(saved_weights(os.path.join(out, "model.keras")), chief_weights) == 0.0
    assert max_difference(
        saved_weights(os.path.join(out, "backup", "backup.weights.h5")), chief_weights
    ) == 0.0
    with open(os.path.join(out, "history.json")) as file:
        epochs = json.load(file)["epochs"]
    assert [e["epoch"] for e in epochs] == list(range(1, EPOCHS + 1))
    assert [e["step"] for e in epochs] == [STEPS_PER_EPOCH * (i + 1) for i in range(EPOCHS)]
    assert all(np.isfinite(e["loss"]) and np.isfinite(e["val_loss"]) for e in epochs)
    if MULTI_WORKER_RECIPE == RECIPE:
        single, single_weights, _ = request.getfixturevalue("one_device_and_mirrored")["default"]
    else:
        data, vocabulary, _ = corpus
        reference = new_run_folder(tmp_path / f"{MULTI_WORKER_RECIPE}-default", vocabulary)
        weights = os.path.join(reference, "final.weights.h5")
        [single] = _train(1, MULTI_WORKER_RECIPE, data,
                          [["default", reference, weights, _overrides()]])
        single_weights = saved_weights(weights)
    difference = max_difference(single_weights, chief_weights)
    print(f"max |multi_worker - default| = {difference:.3g}")
    assert difference < TOLERANCE
    np.testing.assert_allclose(chief["history"]["loss"], single["history"]["loss"], rtol=1e-4)
    np.testing.assert_allclose(
        chief["history"]["val_loss"], single["history"]["val_loss"], rtol=1e-4
    )


@pytest.mark.slow  # two worker processes
def test_multi_worker_stops_together_when_one_worker_stops(corpus, tmp_path):
    """Each worker runs its own time budget; when one stops after step 2
    (here a callback on worker 1 only), both must stop there: every step is
    a collective, and a worker that went on alone would wait forever."""
    out, workers = _multi_worker(RECIPE, corpus, tmp_path, timeout=300, STOP_WORKER_AT="1:2")
    (chief, chief_weights), (other, other_weights) = workers
    assert chief["steps"] == other["steps"] == 2
    assert max_difference(chief_weights, other_weights) == 0.0
    with open(os.path.join(out, "history.json")) as file:
        epochs = json.load(file)["epochs"]
    assert [(e["epoch"], e["step"]) for e in epochs] == [(1, 2)]
    assert np.isfinite(epochs[0]["val_loss"])


@pytest.mark.slow  # two workers plus a one-process reference
def test_multi_worker_reinforce_matches_one_device(corpus, tmp_path):
    """Two workers of one replica each: each holds its slice of the global
    batch and draws that slice's samples (see the mirrored test)."""
    overrides = list(COMMON_OVERRIDES) + list(_REINFORCE)
    out, workers = _multi_worker(RECIPE, corpus, tmp_path, overrides=overrides)
    (chief, chief_weights), (other, other_weights) = workers
    assert chief["replicas"] == other["replicas"] == 2
    assert max_difference(chief_weights, other_weights) == 0.0
    data, vocabulary, _ = corpus
    reference = new_run_folder(tmp_path / f"{RECIPE}-reinforce-default", vocabulary)
    weights = os.path.join(reference, "final.weights.h5")
    [single] = _train(1, RECIPE, data, [["default", reference, weights, overrides]])
    for key in ("loss", "reward", "val_loss", "val_reward"):
        print(key, single["history"][key], chief["history"][key])
        np.testing.assert_allclose(chief["history"][key], single["history"][key], rtol=1e-4)
    difference = max_difference(saved_weights(weights), chief_weights)
    print(f"max |multi_worker - default| = {difference:.3g}")
    assert difference < TOLERANCE


def _shard_splits(corpus, folder, recipe, train_shards):
    """`folder/shards/{train,val}` written by `keras-hsum preprocess` from the
    corpus' JSONL splits with its vocabulary (train in `train_shards` files)."""
    from keras_hsum import cli

    data, vocabulary, _ = corpus
    for split, count in (("train", train_shards), ("val", 1)):
        assert cli.main([
            "preprocess", "--recipe", recipe, "--config", "tiny",
            "--data", os.path.join(data, f"{split}.jsonl"), "--vocab", vocabulary,
            "--out", str(folder / "shards" / split), "--split", split,
            "--num-shards", str(count),
        ]) == 0
    return str(folder / "shards")


@pytest.mark.slow  # preprocess, then two clusters of two workers
def test_multi_worker_reads_its_own_shards(corpus, tmp_path):
    """Under multi_worker, training from shard folders gives each worker its
    own shard files (distribute_datasets_from_function): one train shard
    for two workers is refused by both with the error that says so, where
    reading the whole pipeline on every worker would have trained; with two
    shards both workers train every step and end with the same weights."""
    _, vocabulary, _ = corpus
    one = (_shard_splits(corpus, tmp_path / "one", RECIPE, train_shards=1), vocabulary, None)
    with pytest.raises(AssertionError, match="has 1 shard.s. for 2 input pipelines"):
        _multi_worker(RECIPE, one, tmp_path / "one", timeout=300)
    two = (_shard_splits(corpus, tmp_path / "two", RECIPE, train_shards=2), vocabulary, None)
    out, workers = _multi_worker(RECIPE, two, tmp_path / "two", timeout=300)
    (chief, chief_weights), (other, other_weights) = workers
    assert chief["replicas"] == other["replicas"] == 2
    assert chief["steps"] == other["steps"] == EPOCHS * STEPS_PER_EPOCH
    assert max_difference(chief_weights, other_weights) == 0.0
    assert all(np.isfinite(chief["history"]["loss"]))
    assert all(np.isfinite(chief["history"]["val_loss"]))
