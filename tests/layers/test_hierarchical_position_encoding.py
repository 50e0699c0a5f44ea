import math
import re

import numpy as np
import pytest
from layer_test_case import run_layer_test

from keras_hsum.layers.hierarchical_position_encoding import (
    HierarchicalPositionEncoding,
)


def numpy_sinusoid(positions, dim, max_wavelength=10000):
    """Vaswani et al.'s encoding: sin on even, cos on odd dimensions."""
    positions = np.asarray(positions, "float64")[..., None]
    i = np.arange(dim)
    rates = 1.0 / max_wavelength ** (2 * (i // 2) / dim)
    angles = positions * rates
    return np.where(i % 2 == 0, np.sin(angles), np.cos(angles))


def token_ids(rng, shape=(2, 3, 5), vocabulary=50):
    return rng.integers(1, vocabulary, size=shape).astype("int32")


def test_shared_layer_checks():
    rng = np.random.default_rng(0)
    run_layer_test(
        HierarchicalPositionEncoding,
        {"vocabulary_size": 50, "hidden_dim": 8},
        {"token_ids": token_ids(rng)},
        expected_output_shape=(2, 3, 5, 8),
        expected_num_trainable_weights=1,
        # Its input is token ids [B,P,T]: a longer T is another input, not
        # another width (positions are computed, not looked up).
        run_width_check=False,
    )


def test_matches_numpy_transcription_with_ranks():
    rng = np.random.default_rng(1)
    layer = HierarchicalPositionEncoding(vocabulary_size=50, hidden_dim=8)
    ids = token_ids(rng)
    ranks = np.array([[2, 0, 1], [0, 1, 2]], "int32")
    out = np.asarray(layer(ids, paragraph_ranks=ranks))
    table = np.asarray(layer.token_embedding.embeddings)
    expected = table[ids] * math.sqrt(8)
    para = numpy_sinusoid(ranks, 4)[:, :, None, :]
    tok = numpy_sinusoid(np.arange(5), 4)[None, None, :, :]
    expected = expected + np.concatenate(
        [np.broadcast_to(para, (2, 3, 5, 4)), np.broadcast_to(tok, (2, 3, 5, 4))], -1
    )
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_odd_width_and_wrong_rank_raise():
    with pytest.raises(ValueError, match="hidden_dim"):
        HierarchicalPositionEncoding(vocabulary_size=10, hidden_dim=7)
    layer = HierarchicalPositionEncoding(vocabulary_size=10, hidden_dim=8)
    with pytest.raises(ValueError, match=r"token_ids.*\[B,P,T\].*\(2, 5\)"):
        layer(np.ones((2, 5), "int32"))


def test_ranks_of_another_batch_or_paragraph_count_raise_after_build():
    """Checked on every call, not only at build: ranks [1,P] would be
    broadcast over the batch (every example placed like the first)."""
    layer = HierarchicalPositionEncoding(vocabulary_size=10, hidden_dim=8)
    ids = np.ones((2, 3, 5), "int32")
    ranks = np.array([[2, 0, 1], [0, 1, 2]], "int32")
    layer(ids, ranks)
    for bad in (ranks[:1], ranks[:, :2]):
        with pytest.raises(ValueError, match=r"`paragraph_ranks` must have shape \[B,P\] of "
                                             r"`token_ids` = \(2, 3\).*received shape "
                                             + re.escape(str(bad.shape))):
            layer(ids, bad)
