"""bidirectional_lstm_scan against Keras' own masked Bidirectional(LSTM) on
the same weights: outputs, final states, gradients w.r.t. the inputs and
every weight (right padding, a hole, a fully masked row, leading masked
steps), a backward direction reading another sequence, mixed precision."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_hsum.layers.bidirectional_lstm_scan import bidirectional_lstm_scan

BACKEND = keras.backend.backend()
UNITS = 5


def bidirectional(return_state=True, dtype=None, **options):
    keras.utils.set_random_seed(3)
    forward = keras.layers.LSTM(
        UNITS, return_sequences=True, return_state=return_state, dtype=dtype, **options)
    backward = keras.layers.LSTM(
        UNITS, return_sequences=True, return_state=return_state, go_backwards=True,
        dtype=dtype, **options)
    layer = keras.layers.Bidirectional(
        forward, backward_layer=backward, merge_mode=None, dtype=dtype)
    layer.build((None, 6, 4))
    # Non-zero biases so that a misplaced bias shows.
    for lstm in (layer.forward_layer, layer.backward_layer):
        lstm.cell.bias.assign(np.random.default_rng(7).normal(size=4 * UNITS))
    return layer


def sequences(seed=0):
    """[4,6,4] inputs and masks: right padding, a hole, all masked, leading masked."""
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(4, 6, 4)).astype("float32")
    mask = np.ones((4, 6), bool)
    mask[0, 4:] = False
    mask[1, 2] = False
    mask[2] = False
    mask[3, :2] = False
    return inputs, mask


def keras_reference(layer, inputs, mask, backward_inputs=None, backward_mask=None):
    """The same outputs from Keras' layers: `(forward, backward, states)`."""
    if backward_inputs is None:
        forward, backward, *states = layer(inputs, mask=mask)
        return forward, backward, tuple(states)
    forward, forward_h, forward_c = layer.forward_layer(inputs, mask=mask)
    backward, backward_h, backward_c = layer.backward_layer(backward_inputs, mask=backward_mask)
    # The backward LSTM's outputs come in reading order; Bidirectional flips them.
    return forward, ops.flip(backward, axis=1), (forward_h, forward_c, backward_h, backward_c)


def scalar(results, seed=1):
    """A fixed random linear function of every output (so each gets a gradient)."""
    forward, backward, states = results
    rng = np.random.default_rng(seed)
    total = 0.0
    for value in (forward, backward) + tuple(states):
        weights = rng.normal(size=tuple(value.shape)).astype("float32")
        total = total + ops.sum(ops.cast(value, "float32") * weights)
    return total


def value_and_gradients(fn, layer, inputs):
    """`(results, d scalar / d inputs, [d scalar / d weight])` of `fn(inputs)`."""
    variables = layer.trainable_variables
    if BACKEND == "tensorflow":
        import tensorflow as tf

        inputs = tf.convert_to_tensor(inputs)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            results = fn(inputs)
            loss = scalar(results)
        grads = tape.gradient(loss, [inputs] + [v.value for v in variables])
    elif BACKEND == "jax":
        import jax

        def loss(inputs, values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                results = fn(inputs)
            return scalar(results), results

        (_, results), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(
            inputs, [v.value for v in variables])
        grads = [grads[0]] + list(grads[1])
    else:
        pytest.skip(f"no gradient helper for the {BACKEND} backend")
    numpy = lambda x: ops.convert_to_numpy(ops.cast(x, "float32"))  # noqa: E731
    forward, backward, states = results
    return (numpy(forward), numpy(backward), [numpy(s) for s in states]), [
        numpy(g) for g in grads]


def assert_equal_results(got, want, atol):
    (forward, backward, states), grads = got
    (forward_ref, backward_ref, states_ref), grads_ref = want
    np.testing.assert_allclose(forward, forward_ref, atol=atol)
    np.testing.assert_allclose(backward, backward_ref, atol=atol)
    for state, state_ref in zip(states, states_ref, strict=True):
        np.testing.assert_allclose(state, state_ref, atol=atol)
    for grad, grad_ref in zip(grads, grads_ref, strict=True):
        np.testing.assert_allclose(grad, grad_ref, atol=atol, rtol=atol)


# 1 s under TensorFlow; under JAX, XLA compiles two scans and their gradients.
@pytest.mark.jax_slow
def test_equals_keras_bidirectional_outputs_states_and_gradients():
    layer = bidirectional()
    inputs, mask = sequences()
    got = value_and_gradients(lambda x: bidirectional_lstm_scan(layer, x, mask), layer, inputs)
    want = value_and_gradients(lambda x: keras_reference(layer, x, mask), layer, inputs)
    assert_equal_results(got, want, atol=1e-5)
    forward, backward, states = got[0]
    # Masked steps output zeros; a fully masked row keeps the zero state.
    assert not forward[~mask].any() and not backward[~mask].any()
    assert not any(state[2].any() for state in states)
    # Every weight gets a gradient (the test could not pass with one unused).
    assert all(np.abs(grad).max() > 0 for grad in got[1])


@pytest.mark.jax_slow  # as above
def test_backward_direction_reading_another_sequence_equals_keras_layers():
    layer = bidirectional()
    inputs, mask = sequences()
    other, other_mask = sequences(seed=5)
    other_mask = other_mask[::-1].copy()

    def ours(x):
        return bidirectional_lstm_scan(layer, x, mask, backward_inputs=x[::-1] * 0.5 + other,
                                       backward_mask=other_mask)

    def theirs(x):
        return keras_reference(layer, x, mask, backward_inputs=x[::-1] * 0.5 + other,
                               backward_mask=other_mask)

    assert_equal_results(
        value_and_gradients(ours, layer, inputs), value_and_gradients(theirs, layer, inputs),
        atol=1e-5)


def test_right_padded_calls_run_the_keras_layer_where_it_takes_cudnn(monkeypatch):
    # Where Keras' LSTM would run cuDNN (TensorFlow with a GPU), a call whose
    # rows are right padded runs the layer itself; its results are the scan's.
    from keras_hsum.layers import bidirectional_lstm_scan as module

    layer = bidirectional()
    inputs, mask = sequences()
    mask = np.arange(6)[None, :] < np.array([[4], [6], [0], [2]])  # right padded
    scanned = bidirectional_lstm_scan(layer, inputs, mask, right_padded=True)
    calls = []
    original_call = type(layer).__call__
    monkeypatch.setattr(module, "_keras_takes_cudnn", lambda: True)
    monkeypatch.setattr(type(layer), "__call__",
                        lambda self, *a, **k: calls.append(1) or original_call(self, *a, **k))
    delegated = bidirectional_lstm_scan(layer, inputs, mask, right_padded=True)
    assert calls, "the Keras layer was not called"
    for got, want in zip(delegated[:2] + tuple(delegated[2]),
                         scanned[:2] + tuple(scanned[2]), strict=True):
        np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(want),
                                   atol=1e-5)
    # A call with another backward sequence, or not declared right padded,
    # stays on the scan.
    calls.clear()
    bidirectional_lstm_scan(layer, inputs, mask)
    bidirectional_lstm_scan(layer, inputs, mask, backward_inputs=inputs, right_padded=True)
    assert not calls


def test_mixed_bfloat16_gives_keras_outputs_in_bfloat16():
    layer = bidirectional(dtype="mixed_bfloat16")
    inputs, mask = sequences()
    compiled = jit if BACKEND == "jax" else (lambda fn: fn)
    forward, backward, states = compiled(lambda x: bidirectional_lstm_scan(layer, x, mask))(inputs)
    forward_ref, backward_ref, states_ref = compiled(lambda x: keras_reference(layer, x, mask))(
        inputs)
    assert keras.backend.standardize_dtype(forward.dtype) == "bfloat16"
    for value, reference in zip((forward, backward) + states,
                                (forward_ref, backward_ref) + states_ref, strict=True):
        assert keras.backend.standardize_dtype(value.dtype) == keras.backend.standardize_dtype(
            reference.dtype)
        np.testing.assert_allclose(
            ops.convert_to_numpy(ops.cast(value, "float32")),
            ops.convert_to_numpy(ops.cast(reference, "float32")), atol=3e-2)


def jit(fn):
    import jax

    return jax.jit(fn)


def test_unsupported_layers_are_refused_with_the_reason():
    inputs, mask = sequences()
    with pytest.raises(ValueError, match="no dropout"):
        bidirectional_lstm_scan(bidirectional(dropout=0.1), inputs, mask)
    # The loop's gradient is written for sigmoid gates and tanh.
    with pytest.raises(ValueError, match="activation='tanh'"):
        bidirectional_lstm_scan(bidirectional(activation="relu"), inputs, mask)
    gru = keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True), merge_mode=None)
    with pytest.raises(ValueError, match="keras.layers.LSTM"):
        bidirectional_lstm_scan(gru, inputs, mask)
    with pytest.raises(ValueError, match=r"\[B,T,E\]"):
        bidirectional_lstm_scan(bidirectional(), inputs[0], mask[0])


# cuDNN under JAX: `jax_cudnn_bidirectional` with `reference_lstm` (JAX's
# `jax.experimental.rnn.lstm_ref`, what JAX's own tests hold its cuDNN
# kernel to) in place of the kernel, which needs a GPU.

def by_cudnn_layout(layer, mask):
    from keras_hsum.layers.bidirectional_lstm_scan import jax_cudnn_bidirectional
    from keras_hsum.layers.bidirectional_lstm_scan import reference_lstm

    return lambda x: jax_cudnn_bidirectional(layer, x, mask, reference_lstm)


RIGHT_PADDED = np.arange(6)[None, :] < np.array([[4], [6], [0], [2]])


@pytest.mark.skipif(BACKEND != "jax", reason="jax.experimental.rnn is JAX's")
def test_cudnn_layout_gives_keras_outputs_and_states():
    # Right padded with a full row and an empty one (cuDNN wants lengths >= 1).
    from jax.experimental import rnn

    layer = bidirectional()
    inputs, _ = sequences()
    weights = by_cudnn_weights(layer)
    assert weights.shape == (rnn.get_num_params_in_lstm(4, UNITS, 1, True),)
    got = jit(by_cudnn_layout(layer, RIGHT_PADDED))(inputs)
    want = keras_reference(layer, inputs, RIGHT_PADDED)
    for value, reference in zip(got[:2] + tuple(got[2]), want[:2] + tuple(want[2]), strict=True):
        np.testing.assert_allclose(ops.convert_to_numpy(value), ops.convert_to_numpy(reference),
                                   atol=1e-5)


def by_cudnn_weights(layer):
    from keras_hsum.layers.bidirectional_lstm_scan import cudnn_lstm_weights

    return ops.convert_to_numpy(cudnn_lstm_weights(layer))


@pytest.mark.jax_slow
@pytest.mark.skipif(BACKEND != "jax", reason="jax.experimental.rnn is JAX's")
def test_cudnn_layout_gradients_reach_every_weight_as_keras_layers_do():
    layer = bidirectional()
    inputs, _ = sequences()
    got = value_and_gradients(by_cudnn_layout(layer, RIGHT_PADDED), layer, inputs)
    want = value_and_gradients(lambda x: keras_reference(layer, x, RIGHT_PADDED), layer, inputs)
    assert_equal_results(got, want, atol=1e-5)


@pytest.mark.skipif(BACKEND != "jax", reason="jax.experimental.rnn is JAX's")
def test_cudnn_path_takes_the_scan_for_a_mask_with_holes():
    # sequences()'s mask has a hole and leading masked steps: a kernel run
    # over the first sum(mask) steps would differ from Keras there.
    layer = bidirectional()
    inputs, mask = sequences()
    got = jit(by_cudnn_layout(layer, mask))(inputs)
    want = keras_reference(layer, inputs, mask)
    for value, reference in zip(got[:2] + tuple(got[2]), want[:2] + tuple(want[2]), strict=True):
        np.testing.assert_allclose(ops.convert_to_numpy(value), ops.convert_to_numpy(reference),
                                   atol=1e-5)


@pytest.mark.skipif(BACKEND != "jax", reason="the JAX path")
def test_right_padded_calls_take_cudnn_only_on_a_gpu_and_unless_refused(monkeypatch):
    import jax

    from keras_hsum.layers import bidirectional_lstm_scan as module

    layer = bidirectional()
    inputs, _ = sequences()
    assert jax.default_backend() != "gpu" and not module._jax_takes_cudnn(layer)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    # A GPU whose JAX lacks the plugin's cuDNN RNN kernels (as this CPU
    # install does): the scan.
    assert not module._cudnn_rnn_available() and not module._jax_takes_cudnn(layer)
    monkeypatch.setattr(module, "_cudnn_rnn_available", lambda: True)
    assert module._jax_takes_cudnn(layer)
    calls = []
    monkeypatch.setattr(module, "jax_cudnn_bidirectional",
                        lambda *args: calls.append(args) or bidirectional_lstm_scan(*args[:3]))
    bidirectional_lstm_scan(layer, inputs, RIGHT_PADDED, right_padded=True)
    assert len(calls) == 1 and calls[0][3] is __import__("jax.experimental.rnn").experimental.rnn.lstm
    # Not declared right padded, another backward sequence, or a layer built
    # with use_cudnn=False: the scan.
    bidirectional_lstm_scan(layer, inputs, RIGHT_PADDED)
    bidirectional_lstm_scan(layer, inputs, RIGHT_PADDED, backward_inputs=inputs,
                            right_padded=True)
    assert len(calls) == 1
    refused = bidirectional(use_cudnn=False)
    assert not module._jax_takes_cudnn(refused)
    # A distribution over two devices: XLA cannot split the kernel's call.
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=["cpu:0", "cpu:1"]))
    try:
        assert not module._jax_takes_cudnn(layer)
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=["cpu:0"]))
        assert module._jax_takes_cudnn(layer)
    finally:
        keras.distribution.set_distribution(None)
