"""A discourse run with the extended vocabulary (`num_oov`), exported: the
served summary writes a copied out-of-vocabulary source word as text."""

import argparse
import dataclasses
import json

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow_only


@pytest.mark.slow  # ~30 s on 2 cores: builds, saves and exports a model
def test_exported_discourse_run_serves_a_copied_oov_word(tmp_path, vocabulary):
    import keras
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.export.cli import add_parsers
    from keras_hsum.export.exporter import load_saved_model

    keras.utils.set_random_seed(2)
    config = recipes.config("discourse", "tiny").replace(
        hidden_dim=16, embedding_dim=8, max_sections=2, max_section_length=16,
        max_target_length=5, num_oov=3,
    )
    options = recipes.get("discourse").structure_options(config)
    assert options["oov_words"] == 3
    structurer = TextStructurer(vocabulary.proto, **options)
    documents = tf.constant([["Schrödinger"], ["café café"]])
    features = structurer(documents)
    model = recipes.get("discourse").build_model(config, vocabulary.vocabulary_size)
    model({**features, "decoder_tokens": tf.zeros([2, 1], tf.int32)})
    # p_gen ≈ 0: the copy distribution decides, and every source piece
    # belongs to the OOV word.
    gate = model.pointer_generator.context_gate
    gate.bias.assign(np.full(gate.bias.shape, -20.0, "float32"))
    run = tmp_path / "discourse"
    run.mkdir()
    model.save(run / "model.keras")
    vocabulary.save(str(run / "vocabulary.model"))
    (run / "config.json").write_text(json.dumps({
        "recipe": "discourse", "config_name": "tiny", "config": dataclasses.asdict(config),
    }))
    root = argparse.ArgumentParser(prog="keras-hsum")
    add_parsers(root.add_subparsers(dest="command", required=True))
    out = tmp_path / "saved_models" / "discourse"
    args = root.parse_args([str(a) for a in (
        "export", "--run", run, "--out", out, "--beam-size", "2", "--serving-root", "")])
    assert args.handler(args) == 0
    _, loaded, _ = load_saved_model(out)
    result = loaded.signatures["serving_default"](documents=documents)
    V = vocabulary.vocabulary_size
    ids = result["summary_ids"].numpy()
    assert (ids[:, 0] == V).all(), ids
    summaries = [s.decode("utf-8") for s in result["summary"].numpy()]
    assert summaries[0].split()[0] == "Schrödinger" and summaries[1].split()[0] == "café", summaries
    tokens = result["summary_tokens"].numpy()
    assert tokens[0, 0].decode("utf-8") == "Schrödinger", tokens[0]


def test_discourse_recipe_ties_num_oov_to_the_structurer(vocabulary):
    """Training batches and the export structure examples alike: oov_words
    = num_oov when above 0, and no extension (the structure of runs trained
    before it) at the configs' num_oov = 0."""
    from keras_hsum import recipes
    from keras_hsum.recipes.base import example_structure

    recipe = recipes.get("discourse")
    for name in ("tiny", "paper"):
        config = recipes.config("discourse", name)
        assert config.num_oov == 0
        assert "oov_words" not in recipe.structure_options(config)
        assert example_structure(recipe, config, vocabulary, training=True).family_options == {}
    config = recipes.config("discourse", "tiny").replace(num_oov=7)
    assert recipe.structure_options(config)["oov_words"] == 7
    trained = example_structure(recipe, config, vocabulary, training=True)
    assert trained.family_options == {"oov_words": 7}
    assert recipe.build_model(config, vocabulary.vocabulary_size).num_oov == 7
