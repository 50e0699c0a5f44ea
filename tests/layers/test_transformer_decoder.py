"""keras_hsum's TransformerDecoder: keras-hub's layer with its own attention
dropout (self- and cross-attention)."""

import keras
import keras_hub
import numpy as np
import pytest
from layer_test_case import to_numpy
from test_transformer_encoder import count_dot_product_attention

from keras_hsum.layers.packed_dropout import use_packed_dropout
from keras_hsum.layers.transformer_decoder import TransformerDecoder

B, S, M, D, H, F = 3, 4, 5, 8, 2, 16

# Under JAX each file's first layer call compiles every eager op (3.5-5 s of
# CPU, ~15 s for these files in all): the JAX pass runs them in the slow set;
# the default TensorFlow pass runs them (< 0.5 s each).
pytestmark = pytest.mark.jax_slow


def make_inputs(seed=0):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(B, S, D)).astype("float32")
    memory = rng.normal(size=(B, M, D)).astype("float32")
    memory_mask = np.ones((B, M), bool)
    memory_mask[1, 2:] = False
    memory_mask[2] = False  # an empty memory
    return y, memory, memory_mask


def built(make, seed):
    keras.utils.set_random_seed(seed)
    layer = make()
    layer.build((B, S, D), (B, M, D))
    return layer


def test_default_is_keras_hub_layer_bit_for_bit():
    y, memory, memory_mask = make_inputs()
    options = dict(dropout=0.3, name="block")
    hub = built(lambda: keras_hub.layers.TransformerDecoder(F, H, **options), 1)
    # the same masks: keras_hsum's dropouts draw packed bits under JAX (Keras'
    # own under TensorFlow, where this changes nothing)
    use_packed_dropout(hub)
    ours = built(lambda: TransformerDecoder(F, H, **options), 1)
    assert [v.path for v in ours.weights] == [v.path for v in hub.weights]
    for a, b in zip(ours.get_weights(), hub.get_weights()):
        np.testing.assert_array_equal(a, b)
    config = ours.get_config()
    assert config.pop("attention_dropout") is None
    assert config == hub.get_config()
    keras.utils.set_random_seed(7)
    expected = to_numpy(hub(y, memory, encoder_padding_mask=memory_mask, training=True))
    keras.utils.set_random_seed(7)
    outputs = to_numpy(ours(y, memory, encoder_padding_mask=memory_mask, training=True))
    np.testing.assert_array_equal(outputs, expected)


def test_zero_attention_dropout_keeps_the_residual_dropouts(monkeypatch):
    y, memory, memory_mask = make_inputs(1)
    layer = built(lambda: TransformerDecoder(F, H, dropout=0.3, attention_dropout=0.0), 2)
    for attention in (layer._self_attention_layer, layer._cross_attention_layer):
        assert attention.dropout == 0.0 and attention._dropout_layer.rate == 0.0
    for dropout in (layer._self_attention_dropout, layer._cross_attention_dropout,
                    layer._feedforward_dropout):
        assert dropout.rate == 0.3
    calls = count_dot_product_attention(monkeypatch)
    first = to_numpy(layer(y, memory, encoder_padding_mask=memory_mask, training=True))
    second = to_numpy(layer(y, memory, encoder_padding_mask=memory_mask, training=True))
    assert len(calls) == 4  # self- and cross-attention, twice
    assert not np.allclose(first, second)
    hub = built(lambda: keras_hub.layers.TransformerDecoder(F, H, dropout=0.3), 3)
    hub.set_weights(layer.get_weights())
    fused = to_numpy(layer(y, memory, encoder_padding_mask=memory_mask))
    explicit = to_numpy(hub(y, memory, encoder_padding_mask=memory_mask))
    np.testing.assert_allclose(fused[:2], explicit[:2], atol=1e-5)
    # An empty memory: zero cross-attention weights written out, uniform
    # ones fused (see test_transformer_encoder); finite either way.
    assert np.all(np.isfinite(fused[2]))


def test_from_config_builds_with_the_rate_and_old_configs_load():
    layer = built(lambda: TransformerDecoder(F, H, dropout=0.2, attention_dropout=0.0), 4)
    config = layer.get_config()  # with the build shapes: from_config builds
    restored = TransformerDecoder.from_config(config)
    assert restored.built
    assert restored._self_attention_layer.dropout == 0.0
    assert restored._cross_attention_layer.dropout == 0.0
    assert restored.get_config() == config
    del config["attention_dropout"]  # a config written before the option
    old = TransformerDecoder.from_config(config)
    assert old.attention_dropout is None
    assert old._cross_attention_layer.dropout == 0.2


def test_keras_file_round_trip(tmp_path):
    y, memory, memory_mask = make_inputs(3)
    layer = TransformerDecoder(F, H, dropout=0.2, attention_dropout=0.0)
    decoder_input = keras.Input((S, D))
    encoder_input = keras.Input((M, D))
    model = keras.Model([decoder_input, encoder_input], layer(decoder_input, encoder_input))
    expected = to_numpy(model([y, memory]))
    path = str(tmp_path / "decoder.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    restored = [lay for lay in loaded.layers if isinstance(lay, TransformerDecoder)][0]
    assert restored.attention_dropout == 0.0
    assert restored._cross_attention_layer.dropout == 0.0
    np.testing.assert_allclose(to_numpy(loaded([y, memory])), expected, atol=1e-6)
