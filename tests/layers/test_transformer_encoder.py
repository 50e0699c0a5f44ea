"""keras_hsum's TransformerEncoder: keras-hub's layer with its own attention
dropout. None is keras-hub's layer bit for bit; 0 keeps the residual
dropouts and sends the attention through `ops.dot_product_attention`."""

import keras
import keras_hub
import numpy as np
import pytest
from layer_test_case import to_numpy

from keras_hsum.layers.packed_dropout import use_packed_dropout
from keras_hsum.layers.transformer_encoder import TransformerEncoder

B, T, D, H, F = 3, 5, 8, 2, 16

# Under JAX each file's first layer call compiles every eager op (3.5-5 s of
# CPU, ~15 s for these files in all): the JAX pass runs them in the slow set;
# the default TensorFlow pass runs them (< 0.5 s each).
pytestmark = pytest.mark.jax_slow


def make_inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, T, D)).astype("float32")
    mask = np.ones((B, T), bool)
    mask[1, 3:] = False
    mask[2] = False  # a fully padded row (PHT's empty paragraphs)
    return x, mask


def built(make, seed):
    keras.utils.set_random_seed(seed)
    layer = make()
    layer.build((B, T, D))
    return layer


def count_dot_product_attention(monkeypatch):
    """Counts calls of `ops.dot_product_attention` from Keras'
    MultiHeadAttention (restored after the test by `monkeypatch`)."""
    from keras.src.layers.attention import multi_head_attention

    calls = []
    original = multi_head_attention.ops.dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(multi_head_attention.ops, "dot_product_attention", counted)
    return calls


def test_default_is_keras_hub_layer_bit_for_bit():
    x, mask = make_inputs()
    options = dict(dropout=0.3, name="block")
    hub = built(lambda: keras_hub.layers.TransformerEncoder(F, H, **options), 1)
    # the same masks: keras_hsum's dropouts draw packed bits under JAX (Keras'
    # own under TensorFlow, where this changes nothing)
    use_packed_dropout(hub)
    ours = built(lambda: TransformerEncoder(F, H, **options), 1)
    assert [v.path for v in ours.weights] == [v.path for v in hub.weights]
    for a, b in zip(ours.get_weights(), hub.get_weights()):
        np.testing.assert_array_equal(a, b)
    config = ours.get_config()
    assert config.pop("attention_dropout") is None
    assert config == hub.get_config()
    assert ours._self_attention_layer.dropout == 0.3
    keras.utils.set_random_seed(7)
    expected = to_numpy(hub(x, padding_mask=mask, training=True))
    keras.utils.set_random_seed(7)
    outputs = to_numpy(ours(x, padding_mask=mask, training=True))
    np.testing.assert_array_equal(outputs, expected)


def test_zero_attention_dropout_keeps_the_residual_dropouts(monkeypatch):
    x, mask = make_inputs(1)
    layer = built(lambda: TransformerEncoder(F, H, dropout=0.3, attention_dropout=0.0), 2)
    attention = layer._self_attention_layer
    assert attention.dropout == 0.0 and attention._dropout_layer.rate == 0.0
    assert layer._self_attention_dropout.rate == 0.3
    assert layer._feedforward_dropout.rate == 0.3
    calls = count_dot_product_attention(monkeypatch)
    first = to_numpy(layer(x, padding_mask=mask, training=True))
    second = to_numpy(layer(x, padding_mask=mask, training=True))
    assert len(calls) == 2  # the fused attention, in training too
    assert not np.allclose(first, second)  # the residual dropouts act
    # Without dropout: keras-hub's layer with the same weights.
    hub = built(lambda: keras_hub.layers.TransformerEncoder(F, H, dropout=0.3), 3)
    hub.set_weights(layer.get_weights())
    fused = to_numpy(layer(x, padding_mask=mask))
    explicit = to_numpy(hub(x, padding_mask=mask))
    np.testing.assert_allclose(fused[:2], explicit[:2], atol=1e-5)
    # A fully padded row: Keras' written-out softmax gives it zero weights,
    # `dot_product_attention` uniform ones; both finite, and no model reads
    # the states of a row without a single real token.
    assert np.all(np.isfinite(fused[2]))
    assert not np.allclose(fused[2], explicit[2])


def test_keras_hub_attention_dropout_is_not_fused(monkeypatch):
    x, mask = make_inputs(2)
    layer = built(lambda: TransformerEncoder(F, H, dropout=0.3), 4)
    calls = count_dot_product_attention(monkeypatch)
    layer(x, padding_mask=mask, training=True)
    assert calls == []


def test_config_and_keras_file_round_trip(tmp_path):
    x, mask = make_inputs(3)
    layer = TransformerEncoder(F, H, dropout=0.2, attention_dropout=0.0)
    inputs = keras.Input((T, D))
    padding = keras.Input((T,), dtype="bool")
    model = keras.Model([inputs, padding], layer(inputs, padding_mask=padding))
    expected = to_numpy(model([x, mask]))
    path = str(tmp_path / "encoder.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    restored = [lay for lay in loaded.layers if isinstance(lay, TransformerEncoder)][0]
    assert restored.get_config() == layer.get_config()
    assert restored._self_attention_layer.dropout == 0.0
    assert restored._feedforward_dropout.rate == 0.2
    np.testing.assert_allclose(to_numpy(loaded([x, mask])), expected, atol=1e-6)


def test_config_without_the_field_loads_with_the_layers_dropout():
    config = TransformerEncoder(F, H, dropout=0.2).get_config()
    del config["attention_dropout"]  # a config written before the option
    layer = TransformerEncoder.from_config(config)
    layer.build((B, T, D))
    assert layer.attention_dropout is None
    assert layer._self_attention_layer.dropout == 0.2


@pytest.mark.parametrize("rate", [1.0, -0.1, "0"])
def test_bad_attention_dropout_raises(rate):
    with pytest.raises(ValueError, match=r"`attention_dropout` must be a number in \[0, 1\)"):
        TransformerEncoder(F, H, attention_dropout=rate)


def test_attention_dropout_without_dropout_raises_and_with_it_trains():
    """attention_dropout > 0 with dropout 0 is refused at construction (the
    attention's dropout layer is built at rate 0, without a random
    generator); with dropout > 0 a training call drops attention weights:
    two calls differ."""
    from keras_hsum.layers.transformer_decoder import TransformerDecoder

    for layer_class in (TransformerEncoder, TransformerDecoder):
        with pytest.raises(ValueError, match=r"attention_dropout=0.1` needs `dropout` > 0"):
            layer_class(F, H, dropout=0, attention_dropout=0.1)
        layer_class(F, H, dropout=0, attention_dropout=0.0)  # allowed
    x, mask = make_inputs()
    layer = built(lambda: TransformerEncoder(F, H, dropout=0.1, attention_dropout=0.3), 0)
    first = to_numpy(layer(x, padding_mask=mask, training=True))
    second = to_numpy(layer(x, padding_mask=mask, training=True))
    assert np.isfinite(first).all() and not np.allclose(first, second)
