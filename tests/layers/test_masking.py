"""compact_masked_softmax against a numpy transcription of the masked softmax
(float64): float32 scores to float32 rounding, bfloat16 scores to
bfloat16's, masked entries 0, fully masked slices 0 (no NaN, forward or
backward), and the same gradient as masked_softmax in float32."""

import keras
import numpy as np
import pytest

from keras_hsum.layers.masking import compact_masked_softmax
from keras_hsum.layers.masking import masked_softmax


def numpy_masked_softmax(scores, mask, axis=-1):
    scores = np.asarray(scores, "float64")
    mask = np.broadcast_to(mask, scores.shape)
    filled = np.where(mask, scores, -np.inf)
    peak = np.max(np.where(mask, scores, -1e300), axis=axis, keepdims=True)
    exps = np.where(mask, np.exp(filled - peak), 0.0)
    total = exps.sum(axis=axis, keepdims=True)
    return np.where(total > 0, exps / np.where(total > 0, total, 1.0), 0.0)


def scores_and_mask(seed=0, shape=(2, 3, 4, 7)):
    rng = np.random.default_rng(seed)
    scores = (3.0 * rng.standard_normal(shape)).astype("float32")
    mask = rng.random(shape) > 0.3
    mask[0, 1, 2] = False  # one fully masked row
    return scores, mask


def as_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(x, "float32")))


@pytest.mark.parametrize("axis", [-1, 2])
def test_float32_equals_numpy_masked_softmax(axis):
    scores, mask = scores_and_mask()
    got = compact_masked_softmax(scores, mask, axis=axis)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    np.testing.assert_allclose(as_numpy(got), numpy_masked_softmax(scores, mask, axis),
                               atol=1e-6)
    assert np.all(as_numpy(got)[~mask] == 0.0)


def test_broadcast_mask_and_no_mask():
    scores, _ = scores_and_mask(seed=1)
    mask = np.array([True, False, True, True, False, True, True])  # over the last axis
    np.testing.assert_allclose(as_numpy(compact_masked_softmax(scores, mask)),
                               numpy_masked_softmax(scores, mask), atol=1e-6)
    np.testing.assert_allclose(as_numpy(compact_masked_softmax(scores)),
                               numpy_masked_softmax(scores, np.ones(7, bool)), atol=1e-6)


def test_bfloat16_stays_bfloat16_within_its_rounding():
    scores, mask = scores_and_mask(seed=2, shape=(2, 3, 100))
    mask[1, 0] = False
    low = keras.ops.cast(scores, "bfloat16")
    got = compact_masked_softmax(low, mask)
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
    expected = numpy_masked_softmax(as_numpy(low), mask)
    # d = s − max s and exp(d) rounded to bfloat16: w·(2 + |d|)·2^-9 <= 2^-8.
    np.testing.assert_allclose(as_numpy(got), expected, rtol=0, atol=2 ** -8)
    assert np.abs(as_numpy(got) - expected).max() > 0  # it did run in bfloat16
    assert np.all(as_numpy(got)[1, 0] == 0.0)
    np.testing.assert_allclose(as_numpy(got).sum(-1)[mask.any(-1)], 1.0, atol=2e-2)


def test_gradient_equals_masked_softmax_gradient_and_is_finite():
    scores, mask = scores_and_mask(seed=3)
    cotangent = np.random.default_rng(4).standard_normal(scores.shape).astype("float32")
    if keras.backend.backend() == "jax":
        import jax

        def gradient(fn):
            return jax.grad(lambda s: (fn(s, mask) * cotangent).sum())(scores)
    elif keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        def gradient(fn):
            s = tf.Variable(scores)
            with tf.GradientTape() as tape:
                value = tf.reduce_sum(fn(s, mask) * cotangent)
            return tape.gradient(value, s)
    else:
        pytest.skip(f"no gradient helper for {keras.backend.backend()}")
    compact = as_numpy(gradient(compact_masked_softmax))
    assert np.isfinite(compact).all()
    assert np.all(compact[0, 1, 2] == 0.0)
    np.testing.assert_allclose(compact, as_numpy(gradient(masked_softmax)), atol=1e-6)
