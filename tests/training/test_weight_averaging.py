"""Weight averaging (`ema_momentum`): what is saved, validated and trained on.

The runs train the real entry point (`train()`) in a subprocess on 64 real
qmsum_goldspan examples (tiny flat config, dropout 0, 2 logical CPUs so
that one process can also run the mirrored strategy). The reference for
the saved weights is a numpy transcription of the average Keras documents
for `use_ema` (Polyak averaging with momentum m): after the first step the
average is the weights, after step k > 1 it is m·average + (1 − m)·w_k,
where w_k are the training weights recorded after step k.
"""

import importlib
import json
import os
import sys

import keras
import numpy as np
import pytest

from training_runs import COMMON_OVERRIDES
from training_runs import history
from training_runs import max_difference
from training_runs import new_run_folder
from training_runs import run
from training_runs import saved_weights
from training_runs import train_vocabulary
from training_runs import write_corpus

pytestmark = pytest.mark.tensorflow_only

RECIPE = "flat"
EPOCHS, STEPS_PER_EPOCH = 2, 4
MOMENTUM = 0.75
STOP_AT_STEP = 3  # inside the first epoch
# Mirrored over 2 CPUs differs from one device in summation order only; see
# test_distributed.py for why the tolerance is a few learning rates.
MIRRORED_TOLERANCE = 2e-3

# Trains each run of `runs` with `train()` and writes, per run, under its
# folder: steps.npz (the training weights after every step, by variable
# path without the model's name, for runs that record them), final.npz (the returned model's
# weights) and summary.json (the steps and, one device only, the loss of
# the returned model on the validation batches the trainer validated on).
_SCRIPT = r"""
import json, os, sys
corpus, runs = json.loads(sys.argv[1])
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
from keras_hsum import recipes
from keras_hsum.cli import parse_overrides
from keras_hsum.training import train
from keras_hsum.training.trainer import resolve_data


class Record(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = {}

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        for variable in self.model.trainable_variables:
            self.steps[f"{step}/{variable.path}"] = np.array(variable.numpy())


def by_path(model):
    # Without the model's own name, which a reloaded model may not share.
    return {v.path.removeprefix(model.name + "/"): v.numpy()
            for v in model.trainable_variables}


class StopAt(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            self.model.stop_training = True


recipe = recipes.get("flat")
for strategy, out, overrides, record, stop_at in runs:
    config = parse_overrides(recipes.config("flat", "tiny"), overrides)
    callbacks = [Record()] if record else []
    if stop_at:
        train(recipe, config, out=out, data=corpus, strategy=strategy,
              verbose=0, extra_callbacks=[StopAt(stop_at)])
    result = train(recipe, config, out=out, data=corpus, strategy=strategy,
                   verbose=0, extra_callbacks=callbacks)
    if record:
        prefix = result.model.name + "/"
        np.savez(os.path.join(out, "steps.npz"), **{
            key.replace("/" + prefix, "/", 1): value
            for key, value in callbacks[0].steps.items()})
    np.savez(os.path.join(out, "final.npz"), **by_path(result.model))
    loss = None
    if strategy == "default":  # Keras' evaluate under a MirroredStrategy
        # fails on boolean features (see keras_hsum.training.trainer).
        _, val_source = resolve_data(corpus, config.dataset)
        val = recipe.make_dataset(config, val_source, result.vocabulary,
                                  training=False, seed=config.seed,
                                  max_examples=config.max_val_examples)
        loss = result.model.evaluate(val.take(config.validation_steps),
                                     verbose=0, return_dict=True)["loss"]
    with open(os.path.join(out, "summary.json"), "w") as file:
        json.dump({"steps": result.steps, "val_loss": loss}, file)
"""


def _overrides(*extra):
    return list(COMMON_OVERRIDES) + [
        f"epochs={EPOCHS}", f"steps_per_epoch={STEPS_PER_EPOCH}",
        "backup_every_steps=1", *extra,
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Four runs: plain; averaged (recording every step); averaged, stopped
    inside the first epoch and resumed; averaged under "mirrored"."""
    folder = tmp_path_factory.mktemp("averaging")
    data = write_corpus(folder / "data")
    vocabulary = train_vocabulary(data, folder / "vocabulary.model")
    averaged = f"ema_momentum={MOMENTUM}"
    specs = {
        "plain": ("default", _overrides(), False, 0),
        "averaged": ("default", _overrides(averaged), True, 0),
        "resumed": ("default", _overrides(averaged), False, STOP_AT_STEP),
        "mirrored": ("mirrored", _overrides(averaged), False, 0),
    }
    folders = {name: new_run_folder(folder / name, vocabulary) for name in specs}
    result = run([sys.executable, "-c", _SCRIPT, json.dumps(
        [data, [[s[0], folders[n], s[1], s[2], s[3]] for n, s in specs.items()]]
    )])
    assert result.returncode == 0, result.stderr[-3000:]
    return folders


def _summary(out):
    with open(os.path.join(out, "summary.json")) as file:
        return json.load(file)


def _numpy_averages(out):
    """{step: {variable path: numpy average after that step}}."""
    recorded = np.load(os.path.join(out, "steps.npz"))
    by_step = {}
    for key in recorded.files:
        step, path = key.split("/", 1)
        by_step.setdefault(int(step), {})[path] = recorded[key]
    averages, average = {}, None
    for step in sorted(by_step):
        weights = by_step[step]
        if average is None:
            average = dict(weights)
        else:
            average = {p: MOMENTUM * average[p] + (1 - MOMENTUM) * weights[p]
                       for p in weights}
        averages[step] = average
    return averages, by_step


def _saved_trainable(path, like):
    """The trainable weights of the model saved at `path`, by variable path
    without the model's name (the keys of `like`, which they must match)."""
    importlib.import_module("keras_hsum.models")  # registers the model classes
    model = keras.models.load_model(path, compile=False)
    weights = {v.path.removeprefix(model.name + "/"): np.array(v.numpy())
               for v in model.trainable_variables}
    assert sorted(weights) == sorted(like), sorted(set(weights) ^ set(like))[:5]
    return weights


@pytest.mark.slow  # 79 s under TensorFlow on CI's 2 cores: the slow set
def test_checkpoints_hold_the_numpy_average_of_the_training_weights(runs):
    out = runs["averaged"]
    averages, steps = _numpy_averages(out)
    last = EPOCHS * STEPS_PER_EPOCH
    assert sorted(steps) == list(range(1, last + 1))
    model_keras = _saved_trainable(os.path.join(out, "model.keras"), averages[last])
    assert max_difference(model_keras, averages[last]) < 1e-6
    # Averaging did something: the checkpoint is not the last weights.
    assert max_difference(model_keras, steps[last]) > 1e-3
    with open(os.path.join(out, "best.json")) as file:
        best_step = json.load(file)["step"]
    best = _saved_trainable(os.path.join(out, "best.keras"), averages[best_step])
    assert max_difference(best, averages[best_step]) < 1e-6
    # The returned model holds the averaged weights too.
    final = dict(np.load(os.path.join(out, "final.npz")))
    assert max_difference(final, averages[last]) < 1e-6


@pytest.mark.slow  # shares the `runs` trainings (80-93 s on CI's 2 cores): the slow set
def test_training_goes_on_from_the_training_weights(runs):
    # The averages never feed back into training: the backup (training
    # weights) of the averaged run is the plain run's, step for step.
    plain = saved_weights(os.path.join(runs["plain"], "backup", "backup.weights.h5"))
    averaged = saved_weights(os.path.join(runs["averaged"], "backup", "backup.weights.h5"))
    assert max_difference(plain, averaged) < 1e-6
    _, steps = _numpy_averages(runs["averaged"])
    plain_final = _saved_trainable(os.path.join(runs["plain"], "model.keras"),
                                   steps[EPOCHS * STEPS_PER_EPOCH])
    assert max_difference(plain_final, steps[EPOCHS * STEPS_PER_EPOCH]) < 1e-6


@pytest.mark.slow  # shares the `runs` trainings (80-93 s on CI's 2 cores): the slow set
def test_validation_loss_is_the_averaged_weights_loss(runs):
    out = runs["averaged"]
    # summary.json: the returned (averaged) model evaluated afresh on the
    # validation batches; the history's last val_loss was measured by fit.
    assert history(out)[-1]["val_loss"] == pytest.approx(
        _summary(out)["val_loss"], rel=1e-5)
    assert history(runs["plain"])[-1]["val_loss"] != pytest.approx(
        history(out)[-1]["val_loss"], rel=1e-3)


@pytest.mark.slow  # shares the `runs` trainings (80-93 s on CI's 2 cores): the slow set
def test_a_run_stopped_inside_an_epoch_resumes_to_the_same_averages(runs):
    # The resumed run calls fit twice (the rest of epoch 1, then epoch 2);
    # Keras' end-of-fit finalisation must not overwrite the training
    # weights in between.
    for name in ("backup/backup.weights.h5", "model.keras"):
        difference = max_difference(
            saved_weights(os.path.join(runs["resumed"], name)),
            saved_weights(os.path.join(runs["averaged"], name)),
        )
        assert difference < 1e-6, (name, difference)
    assert _summary(runs["resumed"])["steps"] == EPOCHS * STEPS_PER_EPOCH


@pytest.mark.slow  # shares the `runs` trainings (80-93 s on CI's 2 cores): the slow set
def test_mirrored_averages_match_one_device(runs):
    difference = max_difference(
        saved_weights(os.path.join(runs["mirrored"], "model.keras")),
        saved_weights(os.path.join(runs["averaged"], "model.keras")),
    )
    print(f"max |mirrored - default| of the averaged weights = {difference:.3g}")
    assert difference < MIRRORED_TOLERANCE
    assert history(runs["mirrored"])[-1]["val_loss"] == pytest.approx(
        history(runs["averaged"])[-1]["val_loss"], rel=1e-3)


def test_ema_momentum_outside_zero_one_is_refused():
    from keras_hsum import recipes
    from keras_hsum.training.model_setup import make_optimizer

    config = recipes.config(RECIPE, "tiny")
    for momentum in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="ema_momentum must lie strictly"):
            make_optimizer(config.replace(ema_momentum=momentum))
    assert make_optimizer(config.replace(ema_momentum=0.999)).use_ema
    assert not make_optimizer(config).use_ema
