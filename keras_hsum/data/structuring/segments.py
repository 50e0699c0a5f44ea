"""Bookkeeping of flat items grouped by example: numbering, positions, ids.

The structurer keeps a whole batch flat: every paragraph, sentence, row or
word of all B examples in one tensor, in example order, with the example
(`batch`) of each item beside it. These are the segment computations the
structuring modules share over such tensors.
"""

import tensorflow as tf


def group_rows(keys):
    """Row number of each item for runs of equal (sorted) keys.

    Args:
        keys: [n], non-decreasing.

    Returns:
        int32 [n]: 0 for the first run, 1 for the next, ...
    """
    size = tf.shape(keys)[0]
    changes = tf.concat(
        [tf.ones([tf.minimum(size, 1)], tf.bool), keys[1:] != keys[:-1]], 0
    )
    return tf.cumsum(tf.cast(changes, tf.int32)) - 1


def length_rows(lengths):
    """Row number of each item for consecutive rows of the given lengths.

    What `RaggedTensor.value_rowids()` gives, in O(n): TensorFlow's
    version repeats through a mask of [rows, longest row] (a batch of long
    meetings: 25,000 sentences by the longest one's tokens).

    Args:
        lengths: int [R] (>= 0) items per row.

    Returns:
        int32 [n], n = sum(lengths): 0 for the first row's items, ...
    """
    lengths = tf.cast(lengths, tf.int32)
    size = tf.reduce_sum(lengths)
    starts = tf.cumsum(lengths, exclusive=True)[1:]
    # One mark where each row after the first starts (a slot past the end
    # for empty rows at the end); an item's row counts the marks so far.
    marks = tf.math.unsorted_segment_sum(tf.ones_like(starts), starts, size + 1)
    return tf.cumsum(marks[:size])


def local_index(batch, num_batch):
    """Position of each item among the items of its batch element.

    Args:
        batch: int32 [n], non-decreasing batch index of each item.
        num_batch: B.

    Returns:
        int32 [n].
    """
    positions = tf.range(tf.shape(batch)[0], dtype=tf.int32)
    first = tf.math.unsorted_segment_min(positions, batch, num_batch)
    return positions - tf.gather(first, batch)


def pair_ids(keys, batch):
    """Ids of distinct (example, string) pairs, in order of first appearance.

    What `tf.unique` numbers `as_string(batch) + " " + keys` as, without a
    string per item: the distinct strings' ids, then the distinct
    (example, string id) pairs'.

    Args:
        keys: tf.string [n].
        batch: int [n], the example of each item.

    Returns:
        `(ids, size)`: int32 [n] and the number of distinct pairs (scalar).
    """
    strings, string = tf.unique(keys, out_idx=tf.int64)
    num_strings = tf.shape(strings, out_type=tf.int64)[0]
    pairs, ids = tf.unique(tf.cast(batch, tf.int64) * num_strings + string, out_idx=tf.int32)
    return ids, tf.shape(pairs)[0]


def per_example_terms(keys, batch, num_batch):
    """Ids of distinct strings within each example, from 0.

    Args:
        keys: tf.string [n], in non-decreasing `batch` order.
        batch: int32 [n].
        num_batch: B.

    Returns:
        `(local, size)`: int32 [n], the string's id among the distinct
        strings of its example (in order of first appearance), and V, one
        more than the largest id (at least 1).
    """
    term, _ = pair_ids(keys, batch)
    # tf.unique numbers strings by first appearance, so each example's
    # distinct strings have consecutive ids.
    first = tf.math.unsorted_segment_min(term, batch, num_batch)
    local = term - tf.gather(first, batch)
    return local, tf.reduce_max(tf.concat([local + 1, [1]], 0))
