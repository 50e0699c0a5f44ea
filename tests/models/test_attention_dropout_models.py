"""`attention_dropout` of the Transformer models and their recipe configs:
None is the models as before (every attention drops at `dropout`), 0 drops
no attention probability anywhere while every other dropout still acts, and
the field goes through get_config, `.keras` files and `--set`."""

import keras
import numpy as np
import pytest

from keras_hsum.models.flat_transformer import FlatTransformer
from keras_hsum.models.hierarchical_transformer import HierarchicalTransformer
from keras_hsum.models.parallel_hierarchical_transformer import (
    ParallelHierarchicalTransformer,
)
from model_test_case import to_numpy

V = 40
SIZES = dict(vocabulary_size=V, hidden_dim=8, num_heads=2, intermediate_dim=16,
             num_decoder_layers=1)
MODELS = {
    "pht": (ParallelHierarchicalTransformer, dict(num_encoder_layers=1)),
    "ht": (HierarchicalTransformer, dict(layer_schedule="LG")),
    "flat": (FlatTransformer, dict(num_encoder_layers=1)),
}


def make_inputs(seed=0, batch=2, paragraphs=2, length=3, target=4):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, V, (batch, paragraphs, length)).astype("int32")
    tokens[1, -1] = 0  # a padded paragraph
    decoder = rng.integers(4, V, (batch, target)).astype("int32")
    decoder[:, 0] = 2
    return {"tokens": tokens, "token_mask": tokens != 0,
            "paragraph_mask": (tokens != 0).any(-1), "decoder_tokens": decoder}


def build(name, seed=0, **options):
    cls, extra = MODELS[name]
    keras.utils.set_random_seed(seed)
    model = cls(**SIZES, **extra, dropout=0.3, name=name, **options)
    model(make_inputs(), training=False)
    return model


def dropout_rates(model):
    """`(attention rates, other rates)`: the attention-probability dropout of
    every attention sublayer (Keras MultiHeadAttention, the project's
    layers' "attention_dropout"), and the rate of every other Dropout."""
    layers = list(model._flatten_layers(include_self=False, recursive=True))
    inside_attention = {
        id(layer._dropout_layer)
        for layer in layers
        if isinstance(layer, keras.layers.MultiHeadAttention)
    }
    attention, other = [], []
    for layer in layers:
        if isinstance(layer, keras.layers.MultiHeadAttention):
            attention.append(layer.dropout)
        elif isinstance(layer, keras.layers.Dropout) and id(layer) not in inside_attention:
            (attention if layer.name == "attention_dropout" else other).append(layer.rate)
    return attention, other


# The model tests build and run whole models (15-20 s each on the shared
# machine under TensorFlow): slow set. The layers' own attention_dropout
# tests (tests/layers) run in the default suite.
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_default_is_the_model_without_the_option(name):
    cls, extra = MODELS[name]
    inputs = make_inputs(1)
    keras.utils.set_random_seed(3)
    before = cls(**SIZES, **extra, dropout=0.3, name=name)
    keras.utils.set_random_seed(3)
    default = cls(**SIZES, **extra, dropout=0.3, attention_dropout=None, name=name)
    keras.utils.set_random_seed(5)
    expected = to_numpy(before(inputs, training=True))
    keras.utils.set_random_seed(5)
    outputs = to_numpy(default(inputs, training=True))
    np.testing.assert_array_equal(outputs, expected)
    assert [v.path for v in default.weights] == [v.path for v in before.weights]
    for a, b in zip(default.get_weights(), before.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert default.get_config() == before.get_config()
    attention, other = dropout_rates(default)
    assert attention and set(attention) == {0.3} and set(other) == {0.3}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zero_attention_dropout_keeps_every_other_dropout(name):
    model = build(name, attention_dropout=0.0)
    attention, other = dropout_rates(model)
    # PHT: encoder, pooling, decoder self and cross; HT: local, pooling,
    # inter-paragraph, decoder self and cross; flat: encoder, decoder.
    assert len(attention) >= 2 and set(attention) == {0.0}
    assert other and set(other) == {0.3}
    inputs = make_inputs(2)
    first = to_numpy(model(inputs, training=True))
    second = to_numpy(model(inputs, training=True))
    assert not np.allclose(first, second)


@pytest.mark.slow
def test_keras_file_and_configs_without_the_field(tmp_path):
    model = build("pht", attention_dropout=0.0)
    inputs = make_inputs(3)
    expected = to_numpy(model(inputs))
    path = str(tmp_path / "pht.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    assert loaded.attention_dropout == 0.0
    assert set(dropout_rates(loaded)[0]) == {0.0}
    np.testing.assert_allclose(to_numpy(loaded(inputs)), expected, atol=1e-6)
    config = model.get_config()
    del config["attention_dropout"]  # a model saved before the option
    old = ParallelHierarchicalTransformer.from_config(config)
    old(inputs)
    assert old.attention_dropout is None
    assert set(dropout_rates(old)[0]) == {0.3}


MODEL_CLASSES = {
    "pht": "ParallelHierarchicalTransformer",
    "ht": "HierarchicalTransformer",
    "flat": "FlatTransformer",
    "extractive_abstractive": "ExtractiveAbstractive",
    "compressive_abstractive": "CompressiveAbstractive",
    "seal": "SEAL",
    "pht_predictor": "AttentionPredictor",
    "shte": "SHTE",
}


@pytest.mark.parametrize("recipe", sorted(MODEL_CLASSES))
def test_recipe_field_set_from_the_command_line_reaches_the_model(recipe):
    from keras_hsum import models
    from keras_hsum import recipes
    from keras_hsum.cli import parse_overrides
    from keras_hsum.recipes.base import model_arguments

    module = recipes.get(recipe)
    for name, config in module.CONFIGS.items():
        assert config.attention_dropout is None, name  # paper configs: = dropout
    config = parse_overrides(module.CONFIGS["tiny"], ["attention_dropout=0"])
    assert config.attention_dropout == 0
    model_class = getattr(models, MODEL_CLASSES[recipe])
    assert model_arguments(model_class, config)["attention_dropout"] == 0
    unset = parse_overrides(config, ["attention_dropout=none"])
    assert model_arguments(model_class, unset)["attention_dropout"] is None


def test_backbone_runs_refuse_the_field():
    from keras_hsum.recipes import pht

    with pytest.raises(ValueError, match="`attention_dropout` applies to the models trained"):
        pht.Config(backbone="bart_base_en", attention_dropout=0.0)


@pytest.mark.jax_slow  # under 1 s each under TensorFlow; the eager build under JAX is not
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_dropout_of_the_models_draws_packed_masks(name):
    """Every Dropout of a built model (its own, its layers', and those
    keras-hub and Keras' MultiHeadAttention make in `build`) has
    `keras_hsum.layers.packed_dropout`'s bound call."""
    model = build(name)
    found = [layer for layer in model._flatten_layers(include_self=False, recursive=True)
             if isinstance(layer, keras.layers.Dropout)]
    assert len(found) >= 5
    assert [d.path for d in found if "call" not in vars(d)] == []
