"""Checkpoint names and checkpoint averaging (`keras_hsum.training.checkpoints`).

The averaged weights are checked against numpy's mean of the saved
weights; a non-float weight (here an int32 counter) must keep the last
file's value rather than be averaged. Names are checked against the
grammar the module documents.
"""

import os
import re

import keras
import numpy as np
import pytest

from keras_hsum.training.checkpoints import check_checkpoint_name
from keras_hsum.training.checkpoints import checkpoint_files
from keras_hsum.training.checkpoints import epoch_checkpoint_name
from keras_hsum.training.checkpoints import kept_epochs
from keras_hsum.training.checkpoints import load_averaged_weights
from keras_hsum.training.checkpoints import load_checkpoint_weights


class _Counted(keras.layers.Layer):
    """A dense layer with an int32 counter among its weights."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 3), initializer="glorot_uniform")
        self.count = self.add_weight(shape=(), dtype="int32", initializer="zeros",
                                     trainable=False)

    def call(self, inputs):
        return keras.ops.matmul(inputs, self.kernel)


def _model():
    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(2)(_Counted()(inputs))
    return keras.Model(inputs, outputs)


def _save_variants(folder, count):
    """Saves `count` weight files with random float weights and counter
    values 1..count; returns their paths and the saved values."""
    rng = np.random.default_rng(0)
    model = _model()
    paths, saved = [], []
    for index in range(count):
        values = []
        for weight in model.weights:
            if weight.dtype == "int32":
                value = np.asarray(index + 1, dtype="int32")
            else:
                value = rng.normal(size=weight.shape).astype(weight.dtype)
            weight.assign(value)
            values.append(value)
        path = os.path.join(folder, f"w{index}.weights.h5")
        model.save_weights(path)
        paths.append(path)
        saved.append(values)
    return paths, saved


def test_averaged_weights_are_the_mean_and_other_dtypes_keep_the_last(tmp_path):
    paths, saved = _save_variants(tmp_path, 3)
    model = _model()
    load_averaged_weights(model, paths)
    for index, weight in enumerate(model.weights):
        value = keras.ops.convert_to_numpy(weight)
        if weight.dtype == "int32":
            assert value == 3  # the last file's counter, not the mean 2
        else:
            expected = np.mean([values[index].astype(np.float64) for values in saved], axis=0)
            np.testing.assert_allclose(value, expected.astype(np.float32), rtol=0, atol=1e-7)
    # One file: exactly its weights.
    load_averaged_weights(model, paths[1:2])
    for weight, value in zip(model.weights, saved[1]):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(weight), value)
    with pytest.raises(ValueError, match="at least one weights file"):
        load_averaged_weights(model, [])


@pytest.mark.parametrize("name", ["last", "best", "epoch-1", "epoch-12", "epochs-1-1",
                                  "epochs-3-15"])
def test_checkpoint_names_accepted(name):
    check_checkpoint_name(name)


@pytest.mark.parametrize("name", ["first", "epoch-0", "epoch-x", "epoch2", "2", "epochs-0-3",
                                  "epochs-5-4", "epochs-1", "epochs-1-2-3", "epoch-1-2",
                                  "Best", ""])
def test_checkpoint_names_refused_with_the_grammar(name):
    with pytest.raises(ValueError, match=r"--init-checkpoint must be one of .*'epochs-A-B' "
                                         r".* received " + repr(name)):
        check_checkpoint_name(name, "--init-checkpoint")


@pytest.mark.parametrize("name", ["last+best", "epoch-9+epoch-13+epoch-15",
                                  "epochs-1-3+epoch-7", "epoch-2+epoch-2"])
def test_ensemble_names_for_export_only(name):
    check_checkpoint_name(name, ensemble=True)
    with pytest.raises(ValueError, match=r"--init-checkpoint names one set of weights; .* is "
                                         r"an ensemble of \d checkpoints"):
        check_checkpoint_name(name, "--init-checkpoint")


@pytest.mark.parametrize("name", ["last+", "+best", "epoch-1++epoch-2", "epoch-1+first",
                                  "epoch-0+epoch-1"])
def test_ensemble_names_refused_with_the_grammar(name):
    with pytest.raises(ValueError, match=r"joined by '\+' .* received " + re.escape(repr(name))
                                         + r" \(its part "):
        check_checkpoint_name(name, ensemble=True)


def test_checkpoint_files_of_a_run_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert checkpoint_files(run, "last") == ["model.keras"]
    assert checkpoint_files(run, "best") == ["best.keras"]
    with pytest.raises(ValueError, match="kept no epoch's weights"):
        checkpoint_files(run, "epochs-1-2")
    (run / "epochs").mkdir()
    for epoch in (1, 2, 3, 5):
        (run / epoch_checkpoint_name(epoch)).write_bytes(b"")
    (run / "epochs" / "incomplete-epoch-004.keras").write_bytes(b"")
    assert kept_epochs(run) == [1, 2, 3, 5]
    assert checkpoint_files(run, "epoch-5") == [epoch_checkpoint_name(5)]
    assert checkpoint_files(run, "epochs-1-3") == [epoch_checkpoint_name(e) for e in (1, 2, 3)]
    with pytest.raises(ValueError, match=r"no epochs/epoch-004.keras for --checkpoint "
                                         r"epochs-2-5; it kept epochs \[1, 2, 3, 5\]"):
        checkpoint_files(run, "epochs-2-5")
    # An ensemble: every member's files, in order.
    assert checkpoint_files(run, "epoch-5+epochs-1-2+last", ensemble=True) == [
        epoch_checkpoint_name(5), epoch_checkpoint_name(1), epoch_checkpoint_name(2),
        "model.keras"]
    with pytest.raises(ValueError, match=r"no epochs/epoch-004.keras .*kept epochs"):
        checkpoint_files(run, "epoch-1+epoch-4", ensemble=True)


def test_load_checkpoint_weights_reads_a_kept_range(tmp_path):
    paths, saved = _save_variants(tmp_path, 2)
    run = tmp_path / "run"
    (run / "epochs").mkdir(parents=True)
    models = []
    for path, epoch in zip(paths, (1, 2)):
        model = _model()
        model.load_weights(path)
        model.save(run / epoch_checkpoint_name(epoch))
        models.append(model)
    model = _model()
    load_checkpoint_weights(model, run, "epochs-1-2")
    kernel = [i for i, w in enumerate(model.weights) if w.dtype != "int32"][0]
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model.weights[kernel]),
        (saved[0][kernel] + saved[1][kernel]) / 2, rtol=0, atol=1e-7)
    with pytest.raises(ValueError, match="has no model.keras"):
        load_checkpoint_weights(model, run, "last")
