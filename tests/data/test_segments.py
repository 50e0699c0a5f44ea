"""Tests for keras_hsum.data.structuring.segments."""

import numpy as np
import tensorflow as tf

from keras_hsum.data.structuring.segments import length_rows


def test_length_rows_equals_value_rowids():
    """Against `RaggedTensor.value_rowids` (and numpy's repeat), with empty
    rows first, inside and last, and no rows at all."""
    random = np.random.default_rng(0)
    cases = [[], [0], [0, 0], [3], [0, 2, 0, 0, 1, 0], [1, 1, 1]]
    cases += [random.integers(0, 5, random.integers(1, 40)).tolist() for _ in range(20)]
    for lengths in cases:
        lengths = np.array(lengths, np.int32)
        ragged = tf.RaggedTensor.from_row_lengths(tf.zeros([lengths.sum()]), lengths)
        rows = length_rows(tf.constant(lengths))
        np.testing.assert_array_equal(rows, ragged.value_rowids())
        np.testing.assert_array_equal(rows, np.repeat(np.arange(len(lengths)), lengths))
        assert rows.dtype == tf.int32
