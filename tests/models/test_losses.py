"""LabelSmoothedCrossEntropy against a numpy transcription of the smoothed
cross-entropy: the log-softmax, the smoothed target distribution
(1 − ε)·onehot(y) + ε/V written out in full, Keras' "sum_over_batch_size"
reduction with the target mask as sample weight."""

import keras
import numpy as np
import pytest

from keras_hsum.models import LabelSmoothedCrossEntropy


def numpy_loss(labels, logits, epsilon, weights=None):
    """Σ w·CE(smoothed target, softmax(z)) / (B·S), in float64."""
    z = logits.astype("float64")
    z = z - z.max(-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    vocabulary = logits.shape[-1]
    target = np.full(logits.shape, epsilon / vocabulary)
    np.put_along_axis(target, labels[..., None], 1.0 - epsilon + epsilon / vocabulary, -1)
    per_position = -(target * log_p).sum(-1)
    if weights is None:
        weights = np.ones(labels.shape)
    return (per_position * weights).sum() / labels.size, per_position


def numpy_gradient(labels, logits, epsilon, weights):
    """d loss / d logits = w·(softmax(z) − smoothed target) / (B·S)."""
    z = logits.astype("float64")
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    vocabulary = logits.shape[-1]
    target = np.full(logits.shape, epsilon / vocabulary)
    np.put_along_axis(target, labels[..., None], 1.0 - epsilon + epsilon / vocabulary, -1)
    return (p - target) * weights[..., None] / labels.size


def batch(seed=0, shape=(3, 5, 11), scale=4.0):
    rng = np.random.default_rng(seed)
    logits = (scale * rng.standard_normal(shape)).astype("float32")
    labels = rng.integers(0, shape[-1], shape[:-1]).astype("int32")
    weights = (rng.random(shape[:-1]) > 0.3).astype("float32")
    return labels, logits, weights


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5])
def test_loss_equals_numpy_smoothed_cross_entropy(epsilon):
    labels, logits, weights = batch()
    loss = LabelSmoothedCrossEntropy(epsilon)
    expected, per_position = numpy_loss(labels, logits, epsilon, weights)
    got = float(loss(labels, logits, sample_weight=weights))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    unreduced = LabelSmoothedCrossEntropy(epsilon, reduction=None)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(unreduced(labels, logits)), per_position, rtol=1e-5,
        atol=1e-5)


def test_masked_positions_do_not_count_and_large_logits_stay_finite():
    labels, logits, weights = batch(seed=1, scale=1.0)
    logits[0, 0] += 1.0e4  # one position whose logits are far from 0
    logits[1, 2, labels[1, 2]] = -1.0e4  # a label the model rules out, masked
    weights[1, 2] = 0.0
    got = float(LabelSmoothedCrossEntropy(0.1)(labels, logits, sample_weight=weights))
    expected, _ = numpy_loss(labels, logits, 0.1, weights)
    assert np.isfinite(got)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_log_probabilities_give_the_loss_of_their_logits():
    labels, logits, weights = batch(seed=2)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    loss = LabelSmoothedCrossEntropy(0.1)
    np.testing.assert_allclose(
        float(loss(labels, log_p, sample_weight=weights)),
        float(loss(labels, logits, sample_weight=weights)), rtol=1e-5)


def test_bfloat16_logits_are_reduced_in_float32():
    labels, logits, weights = batch(seed=3, shape=(2, 4, 3000))
    rounded = keras.ops.convert_to_numpy(
        keras.ops.cast(keras.ops.cast(logits, "bfloat16"), "float32"))
    got = LabelSmoothedCrossEntropy(0.1)(
        labels, keras.ops.cast(logits, "bfloat16"), sample_weight=weights)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    expected, _ = numpy_loss(labels, rounded, 0.1, weights)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_gradient_is_softmax_minus_smoothed_target(epsilon):
    labels, logits, weights = batch(seed=4)
    loss = LabelSmoothedCrossEntropy(epsilon)
    if keras.backend.backend() == "jax":
        import jax

        gradient = jax.grad(lambda z: loss(labels, z, sample_weight=weights))(logits)
    elif keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        z = tf.Variable(logits)
        with tf.GradientTape() as tape:
            value = loss(labels, z, sample_weight=weights)
        gradient = tape.gradient(value, z)
    else:
        pytest.skip(f"no gradient helper for {keras.backend.backend()}")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(gradient), numpy_gradient(labels, logits, epsilon, weights),
        rtol=1e-4, atol=1e-7)


def test_config_round_trip_and_range_error():
    loss = LabelSmoothedCrossEntropy(0.2)
    assert LabelSmoothedCrossEntropy.from_config(loss.get_config()).label_smoothing == 0.2
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        LabelSmoothedCrossEntropy(1.0)
