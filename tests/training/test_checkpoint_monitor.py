"""`checkpoint_monitor`: which epoch's weights become `best.keras`.

The callback is checked on a small Keras model whose weights are set to
the epoch number before each epoch end, so that `best.keras` names the
epoch it holds; the reference is Python's own min/max over the logged
values (the first epoch of the best value on ties: only a strict
improvement replaces the checkpoint). One real run of the command line
checks that the trainer passes the config's monitor through: its
`best.json` names the epoch of the highest `val_accuracy` in its own
history.
"""

import json
import os

import keras
import numpy as np
import pytest

from keras_hsum.training.callbacks import CHECKPOINT_MONITORS
from keras_hsum.training.callbacks import EpochCheckpoint
from keras_hsum.training.checkpoints import epoch_checkpoint_name
from training_runs import history
from training_runs import new_run_folder
from training_runs import run
from training_runs import saved_weights
from training_runs import train_command
from training_runs import train_vocabulary
from training_runs import write_corpus

pytestmark = pytest.mark.tensorflow_only

# Minimum at epoch 2, maximum at epoch 3, a tie with the maximum at epoch 5.
VALUES = [0.3, 0.1, 0.6, 0.2, 0.6]


def _model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def _epochs(callback, model, values, first_epoch=0, other_logs=None):
    """Ends one epoch per value, the kernel set to the epoch's number."""
    callback.set_model(model)
    for index, value in enumerate(values):
        epoch = first_epoch + index
        model.layers[0].kernel.assign(np.full((2, 1), epoch + 1, dtype="float32"))
        logs = {"loss": 1.0, **(other_logs or {})}
        if value is not None:
            logs[callback.monitor] = value
        callback.on_epoch_end(epoch, logs)


def _best(folder):
    with open(os.path.join(folder, "best.json")) as file:
        best = json.load(file)
    kernel = [w for k, w in saved_weights(os.path.join(folder, "best.keras")).items()
              if k.endswith("vars/0")]
    assert len(kernel) == 1, kernel
    return best, int(kernel[0][0, 0])


@pytest.mark.parametrize("monitor", sorted(CHECKPOINT_MONITORS))
def test_best_checkpoint_is_the_best_epoch_of_the_monitor(monitor, tmp_path):
    pick = min if CHECKPOINT_MONITORS[monitor] == "min" else max
    expected_epoch = VALUES.index(pick(VALUES)) + 1
    callback = EpochCheckpoint(str(tmp_path), monitor=monitor)
    _epochs(callback, _model(), VALUES)

    best, kernel_epoch = _best(tmp_path)
    assert best["monitor"] == monitor
    assert best["epoch"] == expected_epoch == kernel_epoch
    assert best["value"] == pick(VALUES)
    # model.keras always holds the last epoch.
    last = saved_weights(os.path.join(tmp_path, "model.keras"))
    assert int(next(w for k, w in last.items() if k.endswith("vars/0"))[0, 0]) == len(VALUES)


def test_kept_epochs_hold_each_epochs_weights(tmp_path):
    kept, plain = tmp_path / "kept", tmp_path / "plain"
    _epochs(EpochCheckpoint(str(kept), monitor="val_loss", keep_epochs=True), _model(), VALUES)
    _epochs(EpochCheckpoint(str(plain), monitor="val_loss"), _model(), VALUES)
    for epoch in range(1, len(VALUES) + 1):
        path = kept / epoch_checkpoint_name(epoch)
        assert path.name == f"epoch-{epoch:03d}.keras"
        kernel = [w for k, w in saved_weights(str(path)).items() if k.endswith("vars/0")]
        assert int(kernel[0][0, 0]) == epoch
    assert sorted(os.listdir(kept / "epochs")) == [
        f"epoch-{epoch:03d}.keras" for epoch in range(1, len(VALUES) + 1)]
    # Off by default; either way best.keras is the monitor's choice.
    assert not os.path.exists(plain / "epochs")
    assert _best(kept) == _best(plain)


def test_a_resumed_run_keeps_the_best_of_both_parts(tmp_path):
    model = _model()
    _epochs(EpochCheckpoint(str(tmp_path), monitor="val_accuracy"), model, VALUES[:3])
    # A new callback (a resumed process) reads best.json: 0.5 does not beat
    # the first part's 0.6, 0.7 does.
    resumed = EpochCheckpoint(str(tmp_path), monitor="val_accuracy")
    _epochs(resumed, model, [0.5], first_epoch=3)
    assert _best(tmp_path)[0]["epoch"] == 3
    _epochs(resumed, model, [0.7], first_epoch=4)
    best, kernel_epoch = _best(tmp_path)
    assert (best["epoch"], kernel_epoch, best["value"]) == (5, 5, 0.7)


def test_a_folder_picked_by_another_monitor_is_refused(tmp_path):
    _epochs(EpochCheckpoint(str(tmp_path), monitor="val_loss"), _model(), VALUES[:2])
    with pytest.raises(ValueError, match="by val_loss; this run asks for val_accuracy"):
        EpochCheckpoint(str(tmp_path), monitor="val_accuracy")
    # A best.json written before the monitor was recorded was a loss's.
    path = os.path.join(tmp_path, "best.json")
    with open(path) as file:
        best = json.load(file)
    del best["monitor"]
    with open(path, "w") as file:
        json.dump(best, file)
    assert EpochCheckpoint(str(tmp_path), monitor="val_loss").best == pytest.approx(0.1)
    with pytest.raises(ValueError, match="val_loss"):
        EpochCheckpoint(str(tmp_path), monitor="val_accuracy")


def test_a_monitor_the_validation_does_not_report_is_an_error(tmp_path):
    callback = EpochCheckpoint(str(tmp_path), monitor="val_accuracy")
    # An epoch without validation writes model.keras and no best checkpoint.
    _epochs(callback, _model(), [None])
    assert os.path.exists(os.path.join(tmp_path, "model.keras"))
    assert not os.path.exists(os.path.join(tmp_path, "best.json"))
    # Validation that ran without the monitored value is not silently skipped.
    with pytest.raises(ValueError, match=r"'val_accuracy' is not among .*\['val_loss'\]"):
        _epochs(callback, _model(), [None], other_logs={"val_loss": 2.0})
    with pytest.raises(ValueError, match="must be one of"):
        EpochCheckpoint(str(tmp_path), monitor="accuracy")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("monitor_corpus")
    data = write_corpus(str(folder / "data"))
    return data, train_vocabulary(data, str(folder / "vocabulary.model"))


@pytest.mark.slow  # 41 s under TensorFlow on CI's 2 cores: the slow set
def test_training_picks_the_epoch_of_highest_validation_accuracy(corpus, tmp_path):
    data, vocabulary = corpus
    out = new_run_folder(str(tmp_path / "run"), vocabulary)
    # A learning rate that lets the accuracy move over a few epochs (the
    # shared 20.0 is for weight comparisons).
    result = run(train_command("flat", data, out, epochs=4, steps_per_epoch=3,
                               overrides=("checkpoint_monitor=val_accuracy",
                                          "learning_rate=2.0",
                                          "keep_epoch_checkpoints=true")))
    assert result.returncode == 0, result.stderr[-3000:]
    entries = history(out)
    accuracies = [e["val_accuracy"] for e in entries]
    with open(os.path.join(out, "best.json")) as file:
        best = json.load(file)
    assert best["monitor"] == "val_accuracy"
    assert best["epoch"] == accuracies.index(max(accuracies)) + 1
    assert best["value"] == pytest.approx(max(accuracies), rel=1e-6)
    assert best["step"] == entries[best["epoch"] - 1]["step"]
    # keep_epoch_checkpoints: every epoch's weights; the best epoch's are
    # best.keras's and the last epoch's model.keras's.
    assert sorted(os.listdir(os.path.join(out, "epochs"))) == [
        f"epoch-{epoch:03d}.keras" for epoch in range(1, 5)]

    def same(a, b):
        a, b = saved_weights(os.path.join(out, a)), saved_weights(os.path.join(out, b))
        return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)

    assert same(epoch_checkpoint_name(best["epoch"]), "best.keras")
    assert same(epoch_checkpoint_name(4), "model.keras")
    assert not same(epoch_checkpoint_name(1), "model.keras")


@pytest.mark.slow  # 59 s under TensorFlow on CI's 2 cores: the slow set
def test_sequence_level_training_logs_rewards_and_keeps_the_best_reward(corpus, tmp_path):
    data, vocabulary = corpus
    out = new_run_folder(str(tmp_path / "run"), vocabulary)
    result = run(train_command("flat", data, out, epochs=3, steps_per_epoch=2,
                               overrides=("reinforce_weight=0.5", "reinforce_samples=2",
                                          "checkpoint_monitor=val_reward",
                                          "learning_rate=2.0")))
    assert result.returncode == 0, result.stderr[-3000:]
    entries = history(out)
    rewards = [e["val_reward"] for e in entries]
    # Mean ROUGE-1/2 F1 of the samples: in [0, 1], and above 0 on real
    # text (a sample shares some pieces with its reference).
    assert all(0.0 < e["reward"] < 1.0 and 0.0 < e["val_reward"] < 1.0 for e in entries)
    with open(os.path.join(out, "best.json")) as file:
        best = json.load(file)
    assert best["monitor"] == "val_reward"
    assert best["epoch"] == rewards.index(max(rewards)) + 1
    assert best["value"] == pytest.approx(max(rewards), rel=1e-6)


@pytest.mark.parametrize("overrides, strategy, message", [
    (("checkpoint_monitor=val_reward",), "default",
     "checkpoint_monitor='val_reward' is the held-out reward"),
])
def test_sequence_level_settings_that_cannot_work_are_refused(corpus, tmp_path, overrides,
                                                              strategy, message):
    data, vocabulary = corpus
    out = new_run_folder(str(tmp_path / "run"), vocabulary)
    result = run(train_command("flat", data, out, epochs=1, steps_per_epoch=1,
                               overrides=overrides, strategy=strategy))
    assert result.returncode != 0
    assert message in result.stderr, result.stderr[-2000:]
    assert not os.path.exists(os.path.join(out, "model.keras"))


@pytest.mark.parametrize("recipe_name", ["ranker", "pht_predictor"])
def test_val_accuracy_on_a_recipe_without_accuracy_is_refused_before_training(
        tmp_path, recipe_name):
    """The ranker reports a paragraph error and the attention predictor no
    metric: monitoring their accuracy used to fail after a whole epoch and
    leave a folder that refused the corrected setting."""
    from keras_hsum import recipes
    from keras_hsum.training import train

    recipe = recipes.get(recipe_name)
    config = recipes.config(recipe_name, "tiny").replace(checkpoint_monitor="val_accuracy")
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=rf"recipe '{recipe_name}' reports .*monitor val_loss"):
        train(recipe, config, out=str(out), data="no such folder", recipe_name=recipe_name)
    assert not out.exists()
