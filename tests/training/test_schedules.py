"""NoamSchedule against the formula, the CLI's `--set` parsing, and the run
folder's configuration check."""

import math
import os

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow_only


def _noam(step, hidden_dim, warmup_steps, factor):
    """Vaswani et al. (2017) §5.3, steps counted from 1 (numpy transcription)."""
    step = np.asarray(step, dtype=np.float64) + 1.0
    return factor * hidden_dim ** -0.5 * np.minimum(step ** -0.5, step * warmup_steps ** -1.5)


@pytest.mark.parametrize(
    "hidden_dim, warmup_steps, factor", [(256, 4000, 2.0), (64, 200, 1.0), (512, 1, 0.5)]
)
def test_noam_schedule_matches_the_formula(hidden_dim, warmup_steps, factor):
    from keras_hsum.training import NoamSchedule

    schedule = NoamSchedule(hidden_dim, warmup_steps=warmup_steps, factor=factor)
    steps = np.array([0, 1, 2, warmup_steps - 2, warmup_steps - 1, warmup_steps,
                      warmup_steps * 3, 100_000])
    steps = np.clip(steps, 0, None)
    got = np.array([float(schedule(int(s))) for s in steps])
    np.testing.assert_allclose(got, _noam(steps, hidden_dim, warmup_steps, factor), rtol=1e-5)
    # The peak is at the end of warm-up: factor·(D·warmup)^-0.5.
    peak = factor * (hidden_dim * warmup_steps) ** -0.5
    assert math.isclose(float(schedule(warmup_steps - 1)), peak, rel_tol=1e-5)
    assert float(schedule(warmup_steps * 3)) < peak


def test_noam_schedule_config_round_trip_and_bad_warmup():
    import keras

    from keras_hsum.training import NoamSchedule

    schedule = NoamSchedule(128, warmup_steps=50, factor=3.0)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert restored.get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="warmup_steps"):
        NoamSchedule(128, warmup_steps=0)


def test_parse_overrides_types_none_and_unknown_keys():
    import recipes
    from keras_hsum.cli import parse_overrides

    config = recipes.config("flat", "tiny")
    changed = parse_overrides(config, [
        "epochs=3", "dropout=0", "learning_rate=1e-3", "optimizer=adagrad",
        "clipnorm=none", "max_train_examples=12", "validation-steps=null",
        "dataset=qmsum_general",
    ])
    assert changed.epochs == 3 and type(changed.epochs) is int
    assert changed.dropout == 0.0 and type(changed.dropout) is float
    assert changed.learning_rate == 1e-3
    assert changed.optimizer == "adagrad"
    assert changed.clipnorm is None
    assert changed.max_train_examples == 12 and type(changed.max_train_examples) is int
    assert changed.validation_steps is None
    assert changed.dataset == "qmsum_general"
    assert config.epochs == recipes.config("flat", "tiny").epochs  # frozen, unchanged
    assert parse_overrides(config, None) == config
    # A str field that cannot be None keeps "none" as its value.
    shte = recipes.config("shte", "tiny")
    assert parse_overrides(shte, ["position_encoding=none"]).position_encoding == "none"
    with pytest.raises(ValueError, match=r"key one of .*'dropout'.*received 'dropot=0.1'"):
        parse_overrides(config, ["dropot=0.1"])
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides(config, ["epochs"])
    with pytest.raises(ValueError):
        parse_overrides(config, ["epochs=three"])


def test_parse_overrides_tuple_fields():
    import recipes
    from keras_hsum.cli import parse_overrides

    ht = recipes.config("ht", "tiny")
    assert ht.graph_heads == ()
    changed = parse_overrides(ht, ["graph_kind=similarity", "graph_heads=0, 2"])
    assert changed.graph_heads == (0, 2) and all(type(h) is int for h in changed.graph_heads)
    assert parse_overrides(ht, ["graph_heads=0"]).graph_heads == (0,)
    assert parse_overrides(changed, ["graph_kind=none", "graph_heads="]).graph_heads == ()


@pytest.mark.parametrize("config_name", ["tiny", "paper"])
def test_a_run_folder_accepts_its_own_config_back(tmp_path, config_name):
    """config.json has no tuples: the same config read back is the same run
    (a resumed HT run was refused with graph_heads ([], ())), and another
    value of a tuple field is still refused."""
    import dataclasses

    import recipes
    from keras_hsum.training.trainer import _check_or_write_config
    from keras_hsum.training.trainer import resolved_config

    for name in recipes.names():
        out = str(tmp_path / name / config_name)
        os.makedirs(out)
        config = recipes.config(name, config_name)
        resolved = resolved_config(name, config_name, config, "/data", "default")
        _check_or_write_config(out, resolved)
        _check_or_write_config(out, resolved)  # the same command again
    ht = recipes.config("ht", config_name)
    out = str(tmp_path / "ht" / config_name)
    other = dataclasses.replace(ht, graph_kind="similarity", graph_heads=(0,))
    with pytest.raises(ValueError, match=r"'config.graph_heads': \(\[\], \[0\]\)"):
        _check_or_write_config(out, resolved_config("ht", config_name, other, "/data", "default"))
