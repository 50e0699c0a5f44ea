"""NoamSchedule against the formula, the CLI's `--set` parsing, and the run
folder's configuration check."""

import dataclasses
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
    from keras_hsum import recipes
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
    with pytest.raises(ValueError, match="--set epochs expects an int, received 'three'"):
        parse_overrides(config, ["epochs=three"])
    with pytest.raises(ValueError, match="--set dropout expects a number, received 'x'"):
        parse_overrides(config, ["dropout=x"])


def test_parse_overrides_tuple_fields():
    from keras_hsum import recipes
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

    from keras_hsum import recipes
    from keras_hsum.training.run_folder import check_or_write_config
    from keras_hsum.training.trainer import resolved_config

    for name in recipes.names():
        out = str(tmp_path / name / config_name)
        os.makedirs(out)
        config = recipes.config(name, config_name)
        resolved = resolved_config(name, config_name, config, "/data", "default")
        check_or_write_config(out, resolved)
        check_or_write_config(out, resolved)  # the same command again
    ht = recipes.config("ht", config_name)
    out = str(tmp_path / "ht" / config_name)
    other = dataclasses.replace(ht, graph_kind="similarity", graph_heads=(0,))
    with pytest.raises(ValueError, match=r"'config.graph_heads': \(\[\], \[0\]\)"):
        check_or_write_config(out, resolved_config("ht", config_name, other, "/data", "default"))


def test_train_references_all_gives_one_target_per_reference(tmp_path):
    """train_references="all": the training pipeline's targets are every
    reference of the real FewSum sample, tokenised; a bad line is skipped
    with a warning and an unknown value is refused."""
    from keras_hsum import recipes
    from keras_hsum.data import corpora
    from keras_hsum.data.reader import read_examples
    from keras_hsum.training.trainer import load_or_train_vocabulary
    from keras_hsum.training.trainer import training_source

    path = corpora.sample_path("fewsum_amazon", "train")
    examples = list(read_examples(path))[:4]
    assert training_source(path, "primary") == path
    with pytest.raises(ValueError, match=r"one of \['primary', 'all', 'leave_one_out', 'principal_sentence', 'gap_sentence'\], received 'every'"):
        training_source(path, "every")

    broken = tmp_path / "train.jsonl"
    with open(path, "rb") as source:
        import gzip

        lines = gzip.decompress(source.read()).decode().splitlines()[:4]
    broken.write_text("\n".join(lines[:2] + ["{not json"] + lines[2:]) + "\n")
    with pytest.warns(UserWarning, match="skipped 1 unreadable line"):
        pairs = training_source(str(broken), "all")
    assert [p.summary for p in pairs] == [r for e in examples for r in e.references]

    config = recipes.config("pht", "tiny").replace(
        batch_size=3, max_target_length=256, vocabulary_size=600
    )
    vocabulary = load_or_train_vocabulary(str(tmp_path / "run"), list(read_examples(path)), 600)
    dataset = recipes.get("pht").make_dataset(config, pairs, vocabulary, training=False)
    targets = [
        vocabulary.decode([t for t in row if t not in (0, 2, 3)])
        for (_, labels, _) in dataset.as_numpy_iterator()
        for row in labels.tolist()
    ]
    assert len(targets) == 12
    for example, got in zip(examples, [targets[i:i + 3] for i in range(0, 12, 3)]):
        # The three targets are the three references as the vocabulary
        # encodes them (a 600-piece vocabulary has no piece for some marks).
        assert got == [vocabulary.decode(vocabulary.encode(r)) for r in example.references]
        assert len(set(got)) == 3


def test_train_references_principal_sentence_pairs_and_empty_result():
    """train_references="principal_sentence": the training examples are
    `principal_sentence_examples` of the split (no human summary), and a
    split with no passage of 3 sentences is refused with the reason."""
    from keras_hsum.data import corpora
    from keras_hsum.data.labels import principal_sentence_examples
    from keras_hsum.data.reader import read_examples
    from keras_hsum.training.trainer import training_source

    path = corpora.sample_path("scitldr_a", "train")
    pairs = training_source(path, "principal_sentence")
    assert pairs == list(principal_sentence_examples(read_examples(path)))
    assert pairs and all(p.summary in p.documents[0].sentences() for p in pairs)
    gaps = training_source(path, "gap_sentence")
    assert gaps == list(principal_sentence_examples(read_examples(path), remove=True))
    assert [g.summary for g in gaps] == [p.summary for p in pairs]
    short = list(read_examples(corpora.sample_path("fewsum_amazon", "train")))[:2]
    short = [dataclasses.replace(e, documents=e.documents[:1]) for e in short]
    short = [dataclasses.replace(e, documents=(dataclasses.replace(
        e.documents[0], sections=(dataclasses.replace(
            e.documents[0].sections[0], paragraphs=(("One sentence.",),)),)),)) for e in short]
    with pytest.raises(ValueError, match="principal_sentence needs sections with passages"):
        training_source(short, "principal_sentence")
    with pytest.raises(ValueError, match="gap_sentence needs sections with passages"):
        training_source(short, "gap_sentence")


def test_a_run_started_before_a_new_config_field_resumes(tmp_path):
    """A stored config without a field added later (train_references) is the
    same run while the field keeps its default, another run otherwise."""
    import dataclasses
    import json

    from keras_hsum import recipes
    from keras_hsum.training.run_folder import check_or_write_config
    from keras_hsum.training.trainer import resolved_config

    config = recipes.config("pht", "tiny")
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    out = str(tmp_path)
    resolved = resolved_config("pht", "tiny", config, "/data", "default")
    old = json.loads(json.dumps(resolved))
    del old["config"]["train_references"]
    with open(os.path.join(out, "config.json"), "w") as file:
        json.dump(old, file)
    check_or_write_config(out, resolved, defaults=defaults)
    with open(os.path.join(out, "config.json"), "w") as file:
        json.dump(old, file)
    with pytest.raises(ValueError, match=r"'config.train_references': \(None, 'all'\)"):
        check_or_write_config(
            out,
            resolved_config("pht", "tiny", config.replace(train_references="all"),
                            "/data", "default"),
            defaults=defaults,
        )


def test_init_checkpoint_is_recorded_only_when_best_and_needs_init_from(tmp_path):
    """A run warm-started from the last weights writes the config it wrote
    before `--init-checkpoint` existed (so such folders resume), one from
    the best weights records the choice and is another run; `train` refuses
    the option without `--init-from`, or an unknown value, before it writes
    anything."""
    from keras_hsum import recipes
    from keras_hsum.training import train
    from keras_hsum.training.run_folder import check_or_write_config
    from keras_hsum.training.trainer import resolved_config

    config = recipes.config("flat", "tiny")
    last = resolved_config("flat", "tiny", config, "/data", "default", "/runs/a")
    assert "init_checkpoint" not in last
    assert "init_checkpoint" not in resolved_config(
        "flat", "tiny", config, "/data", "default", None, "best")
    best = resolved_config("flat", "tiny", config, "/data", "default", "/runs/a", "best")
    assert best["init_checkpoint"] == "best"
    out = str(tmp_path / "run")
    os.makedirs(out)
    check_or_write_config(out, last)
    check_or_write_config(out, last)
    with pytest.raises(ValueError, match=r"'init_checkpoint': \(None, 'best'\)"):
        check_or_write_config(out, best)

    recipe = recipes.get("flat")
    for options, message in (
        ({"init_checkpoint": "best"}, "--init-checkpoint best chooses the weights of --init-from"),
        ({"init_from": out, "init_checkpoint": "first"},
         r"--init-checkpoint must be one of \['best', 'last'\], 'epoch-N' .* received 'first'"),
    ):
        fresh = str(tmp_path / "fresh")
        with pytest.raises(ValueError, match=message):
            train(recipe, config, out=fresh, data="/nowhere", **options)
        assert not os.path.exists(fresh)
