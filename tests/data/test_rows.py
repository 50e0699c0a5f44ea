"""Tests for keras_hsum.data.structuring.rows.pack: the greedy packing of
sentences into rows of at most T tokens, against the Python reference's
`_pack` (`tests/reference_structure.py`) run on each group separately."""

import types

import numpy as np
import pytest
import tensorflow as tf

import reference_structure as structure
from keras_hsum.data.structuring.rows import pack

def reference_layout(lengths, groups, limit):
    """Where the reference puts the tokens: `(tokens, row, column,
    forced_splits)`, the token of every place of every row in order (a
    token's id is its index among all the sentences' tokens), that
    place's row and column, and the number of split sentences. `_pack`
    runs on each group's sentences; rows are numbered over the groups in
    order."""
    ends = np.cumsum(lengths).tolist()
    sentences = [
        types.SimpleNamespace(ids=list(range(end - length, end)), text=str(s))
        for s, (length, end) in enumerate(zip(lengths, ends))
    ]
    report = types.SimpleNamespace(forced_splits=0)
    vocabulary = types.SimpleNamespace(decode=lambda piece: "")
    rows = []
    for start in range(len(lengths)):
        if start == 0 or groups[start] != groups[start - 1]:
            stop = start + 1
            while stop < len(lengths) and groups[stop] == groups[start]:
                stop += 1
            rows.extend(structure._pack(sentences[start:stop], limit, report, vocabulary))
    tokens = [token for ids, _ in rows for token in ids]
    row = np.repeat(np.arange(len(rows)), [len(ids) for ids, _ in rows])
    column = np.concatenate([np.arange(len(ids)) for ids, _ in rows] + [[]])
    return tokens, row, column, report.forced_splits


def assert_packed_as_the_reference(lengths, groups, limit, packed):
    row, column, forced = (np.asarray(x) for x in packed)
    lengths = np.asarray(lengths, np.int64)
    tokens, expected_row, expected_column, forced_splits = reference_layout(
        lengths.tolist(), list(groups), limit
    )
    assert row.shape == column.shape == forced.shape == (len(lengths),)
    np.testing.assert_array_equal(forced, lengths > limit)
    assert int(forced.sum()) == forced_splits
    # The reference keeps the reading order, token after token.
    assert tokens == list(range(int(lengths.sum())))
    sentence = np.repeat(np.arange(len(lengths)), lengths)
    within = np.arange(len(sentence)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    # Token j of sentence s lies at column + j of row `row`, over rows of T.
    position = column[sentence] + within
    np.testing.assert_array_equal(row[sentence] + position // limit, expected_row)
    np.testing.assert_array_equal(position % limit, expected_column)
    # So the returned place of a sentence is that of its first token.
    first = np.cumsum(lengths) - lengths
    np.testing.assert_array_equal(row, expected_row[first])
    np.testing.assert_array_equal(column, expected_column[first])


def test_pack_equals_the_reference_on_random_sentences():
    """300 random cases: lengths 1..3T (over-long ones are split), random
    runs of groups (from one group to a group per sentence), 0-300
    sentences, T in {1, 3, 8, 50}. One traced function per T; each call
    packs 15 cases one after the other, their groups apart (so each packs
    as on its own)."""
    spec = [tf.TensorSpec([None], tf.int32)] * 2
    random = np.random.default_rng(58)
    for limit in (1, 3, 8, 50):
        packer = tf.function(
            lambda l, g, limit=limit: pack(l, g, limit),
            input_signature=spec,
            autograph=False,
        )
        for _ in range(5):
            lengths, groups, after = [], [], 0
            for _ in range(15):
                count = int(random.integers(0, 301))
                change = random.random()  # chance that a sentence starts a group
                lengths.append(random.integers(1, 3 * limit + 1, count))
                groups.append(after + np.cumsum(random.random(count) < change))
                after += count + 1
            lengths = np.concatenate(lengths).astype(np.int32)
            groups = np.concatenate(groups).astype(np.int32)
            assert_packed_as_the_reference(lengths, groups, limit, packer(lengths, groups))


@pytest.mark.parametrize(
    "lengths, groups, limit",
    [
        ([], [], 8),  # no sentence: [0] outputs
        ([3, 2, 3, 1, 8, 8], [0] * 6, 8),  # exactly T after a partial row, then alone
        ([5, 20, 1, 2, 17, 16], [0] * 6, 8),  # forced ones after partial rows
        ([9, 10, 30], [0, 0, 0], 8),  # all forced
        ([1, 2, 1, 1, 3], [0, 0, 0, 0, 0], 1),  # T = 1
        ([2, 2, 2, 2], [0, 1, 2, 3], 8),  # a group per sentence
        ([2, 2, 2, 2], [4, 4, 9, 9], 8),  # groups by key, not by number
    ],
)
def test_pack_edge_cases(lengths, groups, limit):
    lengths = np.array(lengths, np.int32)
    groups = np.array(groups, np.int32)
    assert_packed_as_the_reference(
        lengths, groups, limit, pack(tf.constant(lengths), tf.constant(groups), limit)
    )


def test_pack_groups_of_strings():
    """Groups may be the sentences' document or section keys (strings)."""
    lengths = np.array([2, 3, 2, 4, 1], np.int32)
    keys = ["a", "a", "b", "b", "b"]
    packed = pack(tf.constant(lengths), tf.constant(keys), 5)
    assert_packed_as_the_reference(lengths, keys, 5, packed)
