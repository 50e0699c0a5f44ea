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
    _, term = tf.unique(
        tf.strings.as_string(batch) + " " + keys, out_idx=tf.int32
    )
    # tf.unique numbers strings by first appearance, so each example's
    # distinct strings have consecutive ids.
    first = tf.math.unsorted_segment_min(term, batch, num_batch)
    local = term - tf.gather(first, batch)
    return local, tf.reduce_max(tf.concat([local + 1, [1]], 0))
