import keras
import numpy as np
import pytest
from layer_test_case import run_layer_test
from layer_test_case import to_numpy

from keras_hsum.layers import TokenShift

B, P, T, D = 2, 3, 5, 4


def make_inputs(rng, rank=4):
    shape = (B, P, T, D) if rank == 4 else (B, T, D)
    x = rng.normal(size=shape).astype("float32")
    mask = np.ones(shape[:-1], bool)
    mask[1, ..., 3:] = False  # trailing padding
    mask[0, ..., 1] = False  # a hole inside a row
    return x, mask


def numpy_token_shift(x, kernel, mask=None):
    """y_t = x_t + x_(t-1) W, row by row, with masked predecessors 0."""
    x = x.astype("float64")
    masked = x if mask is None else x * mask[..., None]
    y = x.copy()
    for index in np.ndindex(x.shape[:-2]):
        for t in range(1, x.shape[-2]):
            y[index + (t,)] += masked[index + (t - 1,)] @ kernel.astype("float64")
    return y


def test_shared_layer_checks():
    x, mask = make_inputs(np.random.default_rng(0))
    run_layer_test(
        TokenShift,
        {"kernel_initializer": keras.initializers.GlorotUniform(seed=0)},
        {"inputs": x, "token_mask": mask},
        expected_output_shape=(B, P, T, D),
        expected_num_trainable_weights=1,
    )


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("with_mask", [False, True])
def test_matches_numpy_transcription(rank, with_mask):
    x, mask = make_inputs(np.random.default_rng(1), rank)
    layer = TokenShift(kernel_initializer="glorot_uniform")
    y = layer(x, token_mask=mask if with_mask else None)
    expected = numpy_token_shift(x, to_numpy(layer.kernel), mask if with_mask else None)
    np.testing.assert_allclose(to_numpy(y), expected, atol=1e-5)
    # Rows are shifted on their own: the first position of every row is
    # untouched, and so is every position whose predecessor is padding.
    np.testing.assert_array_equal(to_numpy(y)[..., 0, :], x[..., 0, :])
    if with_mask:
        np.testing.assert_array_equal(to_numpy(y)[0, ..., 2, :], x[0, ..., 2, :])


def test_starts_as_the_identity():
    """Zero-initialised W: a model gains the layer without changing outputs."""
    x, mask = make_inputs(np.random.default_rng(2))
    layer = TokenShift()
    np.testing.assert_array_equal(to_numpy(layer(x, token_mask=mask)), x)
    assert np.count_nonzero(to_numpy(layer.kernel)) == 0


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_the_kernel_learns_from_zero():
    """The zero kernel still gets a gradient: fitting y_t = x_t + x_(t-1)
    recovers W = I."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, T, D)).astype("float32")
    target = x.copy()
    target[:, 1:] += x[:, :-1]
    inputs = keras.Input((T, D))
    model = keras.Model(inputs, TokenShift()(inputs))
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    model.fit(x, target, epochs=150, batch_size=64, verbose=0)
    np.testing.assert_allclose(to_numpy(model.layers[-1].kernel), np.eye(D), atol=0.05)


def test_clear_errors():
    layer = TokenShift()
    with pytest.raises(ValueError, match=r"at least 3 axes, received shape \(2, 4\)"):
        layer(np.zeros((2, 4), "float32"))
    with pytest.raises(ValueError, match="token_mask"):
        TokenShift()(np.zeros((2, 5, 4), "float32"), token_mask=np.ones((2, 6), bool))
