"""Training refuses what cannot train, before the run folder is used, and a
folder whose only run failed before its first step takes a corrected
command (instead of refusing it as "another configuration")."""

import dataclasses
import gzip
import json
import os

import pytest

pytestmark = pytest.mark.tensorflow_only


def _lines(count, blank_summaries=False):
    from keras_hsum.data.corpora import sample_path

    with gzip.open(sample_path("qmsum_goldspan", "train"), "rt") as file:
        lines = [line for line in file.read().splitlines() if line.strip()][:count]
    if blank_summaries:
        lines = [json.dumps(dict(json.loads(line), summary="", references=[]))
                 for line in lines]
    return lines


def _folder(path, train_lines, val_lines):
    os.makedirs(path, exist_ok=True)
    for split, lines in (("train", train_lines), ("val", val_lines)):
        with open(os.path.join(path, f"{split}.jsonl"), "w") as file:
            file.write("\n".join(lines) + "\n")
    return str(path)


def _config(**changes):
    from keras_hsum import recipes

    settings = dict(vocabulary_size=600, epochs=1, steps_per_epoch=2, dropout=0.0)
    return recipes.config("flat", "tiny").replace(**{**settings, **changes})


def test_no_training_pair_and_no_steps_are_errors(tmp_path):
    from keras_hsum import recipes
    from keras_hsum.training import train

    recipe = recipes.get("flat")
    unsummarized = _folder(tmp_path / "data", _lines(12, blank_summaries=True), _lines(4))
    with pytest.raises(ValueError, match=r"no example with both source text and a reference "
                                         r"summary \(12 read from .*train\.jsonl', 12 without"):
        train(recipe, _config(), out=str(tmp_path / "run"), data=unsummarized, verbose=0)
    assert not os.path.exists(tmp_path / "run" / "model.keras")
    data = _folder(tmp_path / "good", _lines(12), _lines(4))
    for changes, message in ((dict(epochs=0), "`epochs` must be an int >= 1, received 0"),
                             (dict(steps_per_epoch=-1), "`steps_per_epoch`")):
        with pytest.raises(ValueError, match=message):
            train(recipe, _config(**changes), out=str(tmp_path / "zero"), data=data, verbose=0)
    with pytest.raises(ValueError, match="`max_minutes` must be None or > 0"):
        train(recipe, _config(), out=str(tmp_path / "zero"), data=data, verbose=0,
              max_minutes=0)


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_a_folder_that_never_trained_takes_a_corrected_command(tmp_path):
    from keras_hsum import recipes
    from keras_hsum.training import train

    recipe = recipes.get("flat")
    data = _folder(tmp_path / "data", _lines(12), _lines(4))
    out = str(tmp_path / "run")
    # Fails when the model is built: config.json and the vocabulary are
    # already written, no step is.
    with pytest.raises(ValueError, match="hidden_dim"):
        train(recipe, _config(num_heads=3), out=out, data=data, verbose=0)
    assert os.path.exists(os.path.join(out, "config.json"))
    assert not os.path.exists(os.path.join(out, "model.keras"))
    result = train(recipe, _config(), out=out, data=data, verbose=0)
    assert result.steps == 2
    with open(os.path.join(out, "config.json")) as file:
        assert json.load(file)["config"]["num_heads"] == _config().num_heads
    # Once a step is written, another configuration is refused as before.
    with pytest.raises(ValueError, match="already holds a run with another configuration"):
        train(recipe, _config(num_heads=1), out=out, data=data, verbose=0)


def test_init_from_of_another_recipe_or_sizes_is_named(tmp_path):
    from keras_hsum.training.trainer import check_init_from

    source = tmp_path / "source"
    source.mkdir()
    config = _config()
    stored = {"recipe": "flat", "config": {**dataclasses.asdict(config),
                                           "hidden_dim": 32, "token_shift": True}}
    (source / "config.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match="is a 'flat' run; this is a 'pht' run"):
        check_init_from(str(source), "pht", config)
    with pytest.raises(ValueError, match=r"other model sizes .*\{'hidden_dim': \(32, "
                                         rf"{config.hidden_dim}\), 'token_shift': "
                                         r"\(True, False\)\}"):
        check_init_from(str(source), "flat", config)
    # Other training settings (dropout, learning rate, ...) may differ.
    stored["config"] = {**dataclasses.asdict(config), "dropout": 0.5}
    (source / "config.json").write_text(json.dumps(stored))
    check_init_from(str(source), "flat", config)
