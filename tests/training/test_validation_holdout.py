"""`validation_holdout`: the last training examples validate and pick the
checkpoint, and the data's validation split is never read."""

import gzip
import json
import os
import warnings

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow_only


def _write_folder(folder, train_lines, val_text):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "train.jsonl"), "w") as file:
        file.write("\n".join(train_lines) + "\n")
    with open(os.path.join(folder, "val.jsonl"), "w") as file:
        file.write(val_text)
    return str(folder)


def _real_lines(dataset, count):
    from keras_hsum.data.corpora import sample_path

    with gzip.open(sample_path(dataset, "train"), "rt") as file:
        return [line for line in file.read().splitlines() if line.strip()][:count]


def test_resolve_data_holds_out_the_last_training_examples(tmp_path):
    from keras_hsum.training import resolve_data

    lines = _real_lines("fewsum_amazon", 12)
    ids = [json.loads(line)["id"] for line in lines]
    folder = _write_folder(tmp_path / "data", lines, "{not json\n")

    # Without a hold-out the folder's own splits are used, as paths.
    train, val = resolve_data(folder, "unused")
    assert (train, val) == (os.path.join(folder, "train.jsonl"), os.path.join(folder, "val.jsonl"))
    # 0.25 of 12: the last 3 validate; the broken val.jsonl is not read.
    train, val = resolve_data(folder, "unused", holdout=0.25)
    assert [e.id for e in train] == ids[:9] and [e.id for e in val] == ids[9:]
    # A tiny fraction still holds out one example; a single file works too.
    train, val = resolve_data(os.path.join(folder, "train.jsonl"), "unused", holdout=0.01)
    assert [e.id for e in train] == ids[:11] and [e.id for e in val] == ids[11:]
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match=rf"fraction in \[0, 1\), received {bad}"):
            resolve_data(folder, "unused", holdout=bad)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_training_validates_on_the_holdout_without_reading_the_val_split(tmp_path):
    """A real training run whose val.jsonl is unreadable: with a hold-out it
    trains, its recorded validation loss is `evaluate` on the held-out
    examples' batches, and fit no longer warns that validation ran out of
    data (4 validation steps, one batch of 3 examples)."""
    from keras_hsum import recipes
    from keras_hsum.data.reader import read_examples
    from keras_hsum.training import train

    lines = _real_lines("qmsum_goldspan", 12)
    folder = _write_folder(tmp_path / "data", lines, "{not json\n")
    config = recipes.config("flat", "tiny").replace(
        vocabulary_size=600, epochs=1, steps_per_epoch=2, dropout=0.0,
        validation_holdout=0.25,
    )
    assert config.validation_steps == 4 and config.batch_size > 3
    recipe = recipes.get("flat")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(recipe, config, out=str(tmp_path / "run"), data=folder, verbose=0)
    assert not [w for w in caught if "ran out of data" in str(w.message)]

    held_out = list(read_examples(os.path.join(folder, "train.jsonl")))[9:]
    dataset = recipe.make_dataset(config, held_out, result.vocabulary, training=False)
    loss = result.model.evaluate(dataset, verbose=0, return_dict=True)["loss"]
    assert result.history["val_loss"][0] == pytest.approx(loss, rel=1e-5)
    assert np.isfinite(loss)
    with open(tmp_path / "run" / "config.json") as file:
        assert json.load(file)["config"]["validation_holdout"] == 0.25

    # Without the hold-out the same folder's val split is read: its one
    # line is unreadable (skipped with a warning), and the run is refused.
    with pytest.raises(ValueError, match=r"validation data yielded no example: '.*val\.jsonl'"):
        train(recipe, config.replace(validation_holdout=0.0), out=str(tmp_path / "other"),
              data=folder, verbose=0)
