"""Tests for keras_hsum.data.structuring.segments."""

import numpy as np
import tensorflow as tf

from keras_hsum.data.structuring.segments import length_rows
from keras_hsum.data.structuring.segments import pair_ids


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


def test_pair_ids_number_pairs_by_first_appearance():
    """Against a Python dict numbering each (example, string) pair at its
    first appearance, examples in any order, strings shared across
    examples, one with a space (the old `as_string(batch) + " " + key`),
    and no items."""
    random = np.random.default_rng(1)
    words = ["a", "b", "a b", "1 a", "", "é", "B"]
    cases = [([], []), (["a"], [0]), (["a", "a", "a"], [2, 0, 2])]
    for _ in range(20):
        size = int(random.integers(1, 60))
        cases.append((
            [words[i] for i in random.integers(0, len(words), size)],
            random.integers(0, 4, size).tolist(),
        ))
    cases += [(keys, [b * 100_000 for b in batch]) for keys, batch in cases[3:8]]
    cases += [(keys, [b - 2 for b in batch]) for keys, batch in cases[3:8]]
    for keys, batch in cases:
        numbering = {}
        expected = [numbering.setdefault((b, k), len(numbering)) for k, b in zip(keys, batch)]
        ids, size = pair_ids(tf.constant(keys, tf.string), tf.constant(batch, tf.int32))
        np.testing.assert_array_equal(ids.numpy().reshape(-1), np.array(expected, np.int32))
        assert int(size) == len(numbering)
        assert ids.dtype == tf.int32
