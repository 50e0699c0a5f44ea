"""`attention_dropout` of the project's attention layers: None is `dropout`
(the layers as before), 0 drops no attention weight while the other
dropouts act, and ParallelCrossAttention's fused word attention
(`ops.dot_product_attention`) equals its written-out path."""

import keras
import numpy as np
import pytest
from layer_test_case import to_numpy

from keras_hsum.layers import GlobalTransformerLayer
from keras_hsum.layers import InterParagraphAttention
from keras_hsum.layers import MultiHeadPooling
from keras_hsum.layers import ParallelCrossAttention
from keras_hsum.layers import PHTDecoderLayer

B, S, P, T, D, H = 2, 3, 4, 5, 8, 2

# Under JAX each file's first layer call compiles every eager op (3.5-5 s of
# CPU, ~15 s for these files in all): the JAX pass runs them in the slow set;
# the default TensorFlow pass runs them (< 0.5 s each).
pytestmark = pytest.mark.jax_slow


def cross_attention_inputs(seed=0):
    """Example 0: paragraph 2 kept by `paragraph_mask` but without a real
    token, paragraph 3 padded; example 1: every paragraph padded."""
    rng = np.random.default_rng(seed)
    token_mask = rng.random((B, P, T)) < 0.7
    token_mask[:, :, 0] = True
    token_mask[0, 2] = False
    paragraph_mask = np.ones((B, P), bool)
    paragraph_mask[0, 3] = False
    paragraph_mask[1] = False
    token_mask[1] = False
    return {
        "query": rng.normal(size=(B, S, D)).astype("float32"),
        "word_memory": rng.normal(size=(B, P, T, D)).astype("float32"),
        "paragraph_memory": rng.normal(size=(B, P, D)).astype("float32"),
        "token_mask": token_mask,
        "paragraph_mask": paragraph_mask,
    }


def count_calls(monkeypatch, module):
    """Counts `ops.dot_product_attention` calls made through `module.ops`."""
    calls = []
    original = module.ops.dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module.ops, "dot_product_attention", counted)
    return calls


def test_fused_word_attention_equals_the_written_out_path(monkeypatch):
    from keras_hsum.layers import parallel_cross_attention

    inputs = cross_attention_inputs()
    layer = ParallelCrossAttention(
        hidden_dim=D, num_heads=H, bias_initializer="random_normal", dropout=0.3,
        attention_dropout=0.0,
    )
    layer(**inputs)
    calls = count_calls(monkeypatch, parallel_cross_attention)
    fused, fused_attention = to_numpy(layer(**inputs))
    assert len(calls) == 1
    # With `memory_cache` the word attention is written out (decoding path).
    cache = layer.project_memory(inputs["word_memory"], inputs["paragraph_memory"])
    explicit, attention = to_numpy(layer(**inputs, memory_cache=cache))
    assert len(calls) == 1
    np.testing.assert_allclose(fused, explicit, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(fused_attention, attention)
    assert np.all(np.isfinite(fused))


def test_cross_attention_rates_and_the_fused_path_in_training(monkeypatch):
    from keras_hsum.layers import parallel_cross_attention

    inputs = cross_attention_inputs(1)
    layer = ParallelCrossAttention(hidden_dim=D, num_heads=H, dropout=0.3,
                                   attention_dropout=0.0)
    layer(**inputs)
    assert layer.attention_weights_dropout.rate == 0.0
    assert layer.output_dropout.rate == 0.3
    calls = count_calls(monkeypatch, parallel_cross_attention)
    first, _ = to_numpy(layer(**inputs, training=True))
    second, _ = to_numpy(layer(**inputs, training=True))
    assert len(calls) == 2
    assert not np.allclose(first, second)  # the output dropout acts
    # With attention dropout the training call writes the weights out.
    dropping = ParallelCrossAttention(hidden_dim=D, num_heads=H, dropout=0.3)
    dropping(**inputs)  # not training: fused
    assert dropping.attention_weights_dropout.rate == 0.3
    assert len(calls) == 3
    dropping(**inputs, training=True)
    assert len(calls) == 3


def test_pht_decoder_layer_rates():
    layer = PHTDecoderLayer(hidden_dim=D, intermediate_dim=16, num_heads=H, dropout=0.3,
                            attention_dropout=0.0)
    assert layer.self_attention.dropout == 0.0
    assert layer.cross_attention.attention_weights_dropout.rate == 0.0
    for dropout in (layer.self_attention_dropout, layer.feedforward_dropout,
                    layer.cross_attention.output_dropout):
        assert dropout.rate == 0.3
    default = PHTDecoderLayer(hidden_dim=D, intermediate_dim=16, num_heads=H, dropout=0.3)
    assert default.self_attention.dropout == 0.3
    assert default.cross_attention.attention_weights_dropout.rate == 0.3


def test_pooling_without_attention_dropout_is_deterministic_in_ht_form():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(B, P, T, D)).astype("float32")
    mask = rng.random((B, P, T)) < 0.8
    # HT form: the pooling weights are its only dropout.
    pooling = MultiHeadPooling(num_heads=H, dropout=0.5, attention_dropout=0.0)
    inference = to_numpy(pooling(x, token_mask=mask))
    np.testing.assert_array_equal(to_numpy(pooling(x, token_mask=mask, training=True)),
                                  inference)
    dropping = MultiHeadPooling(num_heads=H, dropout=0.5)
    dropping(x, token_mask=mask)
    dropping.set_weights(pooling.get_weights())
    assert not np.allclose(to_numpy(dropping(x, token_mask=mask, training=True)), inference)
    # PHT form: the feed-forward dropout still acts.
    pht = MultiHeadPooling(num_heads=H, feedforward=True, intermediate_dim=16, dropout=0.5,
                           attention_dropout=0.0)
    assert pht.attention_weights_dropout.rate == 0.0 and pht.ffn_dropout.rate == 0.5
    first = to_numpy(pht(x, token_mask=mask, training=True))
    assert not np.allclose(first, to_numpy(pht(x, token_mask=mask)))


def test_inter_paragraph_attention_and_global_layer_rates():
    rng = np.random.default_rng(3)
    heads = rng.normal(size=(B, P, H, 4)).astype("float32")
    mask = np.ones((B, P), bool)
    mask[1, 2:] = False
    attention = InterParagraphAttention(num_heads=H, dropout=0.5, attention_dropout=0.0)
    inference = to_numpy(attention(heads, paragraph_mask=mask))
    np.testing.assert_array_equal(
        to_numpy(attention(heads, paragraph_mask=mask, training=True)), inference
    )
    layer = GlobalTransformerLayer(num_heads=H, intermediate_dim=16, dropout=0.5,
                                   attention_dropout=0.0)
    assert layer.pooling.attention_weights_dropout.rate == 0.0
    assert layer.inter_paragraph_attention.attention_weights_dropout.rate == 0.0
    assert layer.feedforward_dropout.rate == 0.5
    default = GlobalTransformerLayer(num_heads=H, intermediate_dim=16, dropout=0.5)
    assert default.pooling.attention_weights_dropout.rate == 0.5
    assert default.inter_paragraph_attention.attention_weights_dropout.rate == 0.5


LAYERS = [
    (ParallelCrossAttention, dict(hidden_dim=D, num_heads=H)),
    (PHTDecoderLayer, dict(hidden_dim=D, intermediate_dim=16, num_heads=H)),
    (MultiHeadPooling, dict(num_heads=H)),
    (InterParagraphAttention, dict(num_heads=H)),
    (GlobalTransformerLayer, dict(num_heads=H, intermediate_dim=16)),
]


@pytest.mark.parametrize("cls,options", LAYERS, ids=[cls.__name__ for cls, _ in LAYERS])
def test_config_round_trip_and_configs_without_the_field(cls, options):
    layer = cls(dropout=0.2, attention_dropout=0.0, **options)
    config = layer.get_config()
    assert config["attention_dropout"] == 0.0
    assert cls.from_config(config).get_config() == config
    del config["attention_dropout"]  # a config written before the option
    old = cls.from_config(config)
    assert old.attention_dropout is None
    assert old.get_config() == cls(dropout=0.2, **options).get_config() | {
        "name": old.name
    }
    with pytest.raises(ValueError, match=r"`attention_dropout` must be a number in \[0, 1\)"):
        cls(attention_dropout=1.0, **options)


def test_keras_file_keeps_the_rate(tmp_path):
    inputs = cross_attention_inputs(4)
    layer = ParallelCrossAttention(hidden_dim=D, num_heads=H, dropout=0.2,
                                   attention_dropout=0.0)
    symbolic = {
        name: keras.Input(value.shape[1:], dtype=value.dtype.name, name=name)
        for name, value in inputs.items()
    }
    outputs, _ = layer(**symbolic)
    model = keras.Model(symbolic, outputs)
    expected = to_numpy(model(inputs))
    path = str(tmp_path / "cross.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    restored = [lay for lay in loaded.layers if isinstance(lay, ParallelCrossAttention)][0]
    assert restored.attention_weights_dropout.rate == 0.0
    assert restored.output_dropout.rate == 0.2
    np.testing.assert_allclose(to_numpy(loaded(inputs)), expected, atol=1e-6)
