"""`packed_dropout`: under JAX, masks from four 16-bit fields of each
Threefry-2x32 hash, checked against a numpy transcription of the cipher
(Salmon et al. 2011, checked on Random123's known answers); Keras' own
dropout under other backends; every keras_hsum layer's dropouts bound."""

import copy

import keras
import numpy as np
import pytest
from layer_test_case import to_numpy

from keras_hsum.layers import GlobalTransformerLayer
from keras_hsum.layers import InterParagraphAttention
from keras_hsum.layers import MultiHeadPooling
from keras_hsum.layers import ParallelCrossAttention
from keras_hsum.layers import PHTDecoderLayer
from keras_hsum.layers import SiameseClassifierHead
from keras_hsum.layers import TransformerDecoder
from keras_hsum.layers import TransformerEncoder
from keras_hsum.layers.packed_dropout import keep_threshold
from keras_hsum.layers.packed_dropout import packed_bits
from keras_hsum.layers.packed_dropout import packed_dropout
from keras_hsum.layers.packed_dropout import use_packed_dropout

BACKEND = keras.backend.backend()
jax_only = pytest.mark.skipif(BACKEND != "jax", reason="the JAX path")

ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def threefry_2x32(key, x0, x1):
    """Threefry-2x32, 20 rounds, in numpy: uint32 arrays x0, x1 (the
    counter's two words) under key (k0, k1) → the two output words."""
    k0, k1 = np.uint32(key[0]), np.uint32(key[1])
    schedule = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
    x0 = np.asarray(x0, np.uint32) + schedule[0]
    x1 = np.asarray(x1, np.uint32) + schedule[1]
    for r in range(20):
        x0 = x0 + x1
        x1 = (x1 << np.uint32(ROTATIONS[r % 8])) | (x1 >> np.uint32(32 - ROTATIONS[r % 8]))
        x1 = x1 ^ x0
        if r % 4 == 3:
            i = (r + 1) // 4
            x0 = x0 + schedule[i % 3]
            x1 = x1 + schedule[(i + 1) % 3] + np.uint32(i)
    return x0, x1


def reference_bits(seed, shape):
    """The module docstring's layout: row r's hash q (counter r·Q + q, high
    word 0) gives elements 4q .. 4q+3: low, high 16 bits of word 1, then 2."""
    rows, width = int(np.prod(shape[:-1])), shape[-1]
    hashes = -(-width // 4)
    counters = np.arange(rows * hashes, dtype=np.uint32)
    first, second = threefry_2x32(seed, np.zeros_like(counters), counters)
    fields = np.stack([first & 0xFFFF, first >> 16, second & 0xFFFF, second >> 16], -1)
    return fields.reshape(rows, hashes * 4)[:, :width].reshape(shape).astype(np.uint16)


def test_numpy_threefry_gives_random123_known_answers():
    with np.errstate(over="ignore"):
        for key, counter, expected in [
            ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
            ((0xFFFFFFFF,) * 2, (0xFFFFFFFF,) * 2, (0x1CB996FC, 0xBB002BE7)),
            ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
        ]:
            words = threefry_2x32(key, np.uint32([counter[0]]), np.uint32([counter[1]]))
            assert (int(words[0][0]), int(words[1][0])) == expected


def test_keep_threshold():
    assert keep_threshold(0.3) == 45875  # round(0.7 · 65536)
    assert keep_threshold(0.1) == 58982
    assert keep_threshold(1 - 1e-9) == 1
    assert abs(keep_threshold(0.37) / 2**16 - 0.63) <= 2**-17


@jax_only
@pytest.mark.parametrize("shape", [(3, 8), (2, 3, 7), (5,), (1, 2, 1)])
def test_packed_bits_equal_the_numpy_cipher(shape):
    seed = np.array([123456789, 42], np.uint32)
    with np.errstate(over="ignore"):
        expected = reference_bits(seed, shape)
    np.testing.assert_array_equal(np.asarray(packed_bits(seed, shape)), expected)


@jax_only
def test_packed_dropout_equals_the_numpy_mask_and_its_gradient():
    import jax
    import jax.numpy as jnp

    rate, shape = 0.3, (4, 6, 10)
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    seed = np.array([7, 9], np.uint32)
    with np.errstate(over="ignore"):
        kept = reference_bits(seed, shape) < keep_threshold(rate)
    scale = np.float32(2**16 / keep_threshold(rate))
    outputs = np.asarray(packed_dropout(jnp.asarray(x), rate, jnp.asarray(seed)))
    np.testing.assert_array_equal(outputs, np.where(kept, x * scale, 0))
    gradient = jax.grad(lambda v: jnp.sum(packed_dropout(v, rate, jnp.asarray(seed)) * 2.0))(x)
    np.testing.assert_array_equal(np.asarray(gradient), np.where(kept, 2 * scale, 0))
    again = np.asarray(packed_dropout(jnp.asarray(x), rate, jnp.asarray(seed)))
    np.testing.assert_array_equal(again, outputs)  # a key is a mask
    other = np.asarray(packed_dropout(jnp.asarray(x), rate, jnp.asarray(seed + 1)))
    assert not np.array_equal(other != 0, kept)


@jax_only
def test_packed_dropout_statistics():
    """Kept fraction within 5 standard deviations of t / 2¹⁶ over 10⁶
    elements; every field position of a hash (element index mod 4) kept as
    often; neighbours (one hash's fields) uncorrelated; the mean kept."""
    import jax.numpy as jnp

    rate, shape = 0.3, (1000, 1000)
    p = keep_threshold(rate) / 2**16
    outputs = np.asarray(packed_dropout(jnp.ones(shape), rate, jnp.asarray([3, 1], jnp.uint32)))
    kept = outputs != 0
    sigma = np.sqrt(p * (1 - p) / kept.size)
    assert abs(kept.mean() - p) < 5 * sigma
    for field in range(4):
        assert abs(kept[:, field::4].mean() - p) < 5 * 2 * sigma
    neighbours = np.corrcoef(kept[:, 0::2].ravel(), kept[:, 1::2].ravel())[0, 1]
    assert abs(neighbours) < 5 / np.sqrt(kept.size / 2)
    assert abs(outputs.mean() - 1.0) < 5 * sigma / p


def test_other_backends_and_cases_are_keras_dropout():
    x = np.random.default_rng(1).normal(size=(3, 9)).astype("float32")
    for rate in (0.0, 1.0) + ((0.4,) if BACKEND != "jax" else ()):
        expected = to_numpy(keras.random.dropout(x, rate, seed=5))
        np.testing.assert_array_equal(to_numpy(packed_dropout(x, rate, 5)), expected)


def test_a_bound_dropout_layer():
    x = np.ones((8, 64), "float32")
    keras.utils.set_random_seed(1)
    plain = keras.layers.Dropout(0.25, seed=11)
    bound = use_packed_dropout(keras.layers.Dropout(0.25, seed=11))
    assert use_packed_dropout(bound) is bound and "call" in vars(bound)
    np.testing.assert_array_equal(to_numpy(bound(x)), x)  # inference: identity
    seed = to_numpy(bound.seed_generator.state.value)
    outputs = to_numpy(bound(x, training=True))
    assert not np.array_equal(to_numpy(bound.seed_generator.state.value), seed)  # advanced
    if BACKEND == "jax":
        with np.errstate(over="ignore"):
            kept = reference_bits(seed.astype(np.uint32), x.shape) < keep_threshold(0.25)
        np.testing.assert_array_equal(
            outputs, np.where(kept, np.float32(2**16 / keep_threshold(0.25)), 0))
    else:  # Keras' own draw
        np.testing.assert_array_equal(outputs, to_numpy(plain(x, training=True)))
    copied = copy.deepcopy(bound)
    assert copied.call.__self__ is copied
    shaped = use_packed_dropout(keras.layers.Dropout(0.5, noise_shape=(8, 1), seed=3))
    rows = to_numpy(shaped(x, training=True))
    assert all(len(set(row)) == 1 for row in rows)  # Keras' noise_shape path
    assert to_numpy(use_packed_dropout(keras.layers.Dropout(0.0))(x, training=True)).min() == 1


def dropouts(layer):
    return [sub for sub in layer._flatten_layers(include_self=False, recursive=True)
            if isinstance(sub, keras.layers.Dropout)]


@pytest.mark.jax_slow  # under JAX 13 s of eager compiles; the TF pass runs it
def test_every_dropout_of_the_layers_is_bound():
    """After a call (Keras' attentions make theirs in `build`), every
    Dropout inside keras_hsum's layers draws packed masks."""
    B, P, T, S, D, H = 2, 2, 3, 4, 8, 2
    rng = np.random.default_rng(0)
    query = rng.normal(size=(B, S, D)).astype("float32")
    words = rng.normal(size=(B, P, T, D)).astype("float32")
    paragraphs = rng.normal(size=(B, P, D)).astype("float32")
    token_mask = np.ones((B, P, T), bool)
    layers = []

    def run(layer, *args, **kwargs):
        layer(*args, **kwargs)
        layers.append(layer)

    run(TransformerEncoder(16, H, dropout=0.1), query)
    run(TransformerDecoder(16, H, dropout=0.1, attention_dropout=0.2), query, query)
    run(ParallelCrossAttention(D, H, dropout=0.1), query, words, paragraphs)
    run(PHTDecoderLayer(D, 16, H, dropout=0.1), query, words, paragraphs)
    run(MultiHeadPooling(num_heads=H, dropout=0.1), words, token_mask=token_mask)
    run(InterParagraphAttention(num_heads=H, dropout=0.1), paragraphs.reshape(B, P, H, D // H))
    run(GlobalTransformerLayer(num_heads=H, intermediate_dim=16, dropout=0.1), words,
        token_mask=token_mask)
    run(SiameseClassifierHead(hidden_dim=8, dropout=0.1), query[:, 0], query[:, 1])
    for layer in layers:
        found = dropouts(layer)
        assert found, layer.name
        assert all("call" in vars(d) for d in found), (layer.name, [d.name for d in found])
