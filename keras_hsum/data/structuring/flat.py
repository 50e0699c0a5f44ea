"""The `"flat"` family, in the graph: ranked whole paragraphs in one sequence.

The graph version of `build_flat` (`tests/reference_structure.py`, its
reference): each example's paragraphs, ranked by tf-idf to the query or
title (or in reading order), are concatenated, separated by the
vocabulary's `<para>` piece when it has one, and cut at N tokens.
"""

import tensorflow as tf

from keras_hsum.data.structuring import ranking
from keras_hsum.data.structuring.segments import group_rows
from keras_hsum.data.structuring.segments import length_rows
from keras_hsum.data.structuring.segments import local_index
from keras_hsum.data.structuring.statistics import flat_statistics
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK


def flat_features(sentences, context, num_batch, *, max_tokens, rank, pad_id,
                  separator_id, nonword_pattern, statistics=False):
    """`build_flat` for every example: ranked paragraphs, cut at N.

    Args:
        sentences: `tokens.sentence_table`'s dict.
        context: tf.string [B], each example's query, else title.
        num_batch: B.
        max_tokens: N.
        rank: `"tfidf"` or `"order"`.
        pad_id: the vocabulary's pad id.
        separator_id: the `<para>` id, or None for no separator.
        nonword_pattern: `Patterns.nonword`.
        statistics: also return `statistics.flat_statistics`' counts.

    Returns:
        A dict: `tokens` int32 [B,N], `token_mask` bool [B,N] and
        `unit_texts` tf.string [B,None] (the paragraphs in the order used).
    """
    N = max_tokens
    row = group_rows(sentences["paragraph"])
    num_rows = tf.maximum(tf.reduce_max(row) + 1, 0)
    first = tf.math.unsorted_segment_min(tf.range(tf.shape(row)[0]), row, num_rows)
    batch = tf.gather(sentences["batch"], first)
    text = tf.strings.reduce_join(
        tf.RaggedTensor.from_value_rowids(sentences["text"], row, nrows=num_rows),
        axis=1,
        separator=" ",
    )
    length = tf.math.unsorted_segment_sum(sentences["lengths"], row, num_rows)
    if rank == "tfidf":
        order = ranking.rank(
            ranking.tfidf_scores(text, batch, context, num_batch, nonword_pattern),
            batch, num_batch,
        )
    else:
        order = local_index(batch, num_batch)
    step = length + (1 if separator_id is not None else 0)
    by_rank = tf.stack([batch, order], 1)
    width = tf.maximum(tf.reduce_max(order) + 1, 0)
    grid = tf.stack([num_batch, width])
    starts = tf.gather_nd(
        tf.cumsum(tf.scatter_nd(by_rank, step, grid), axis=1, exclusive=True),
        by_rank,
    )
    token_sentence = length_rows(sentences["ids"].row_lengths())
    before = tf.cumsum(sentences["lengths"], exclusive=True)
    within = before - tf.gather(before, tf.gather(first, row))
    token_paragraph = tf.gather(row, token_sentence)
    position = (
        tf.gather(starts, token_paragraph)
        + tf.gather(within, token_sentence)
        + tf.cast(tf.ragged.range(sentences["lengths"]).flat_values, tf.int32)
    )
    index = tf.stack([tf.gather(batch, token_paragraph), position], 1)
    values = sentences["ids"].flat_values
    num_content = tf.shape(values)[0]
    if separator_id is not None:
        has_separator = order > 0
        index = tf.concat(
            [index, tf.boolean_mask(tf.stack([batch, starts - 1], 1), has_separator)],
            0,
        )
        values = tf.concat(
            [
                values,
                tf.fill(
                    [tf.reduce_sum(tf.cast(has_separator, tf.int32))],
                    tf.constant(separator_id, tf.int32),
                ),
            ],
            0,
        )
    kept = index[:, 1] < N
    if statistics:
        counts = flat_statistics(index, kept, num_content, num_batch)
    index = tf.boolean_mask(index, kept)
    shape = tf.stack([num_batch, N])
    tokens = tf.tensor_scatter_nd_update(
        tf.fill(shape, tf.constant(pad_id, tf.int32)),
        index,
        tf.boolean_mask(values, kept),
    )
    token_mask = tf.scatter_nd(index, tf.ones([tf.shape(index)[0]], tf.bool), shape)
    texts = tf.tensor_scatter_nd_update(tf.fill(grid, ""), by_rank, text)
    features = {
        TOKENS: tf.ensure_shape(tokens, [None, N]),
        TOKEN_MASK: tf.ensure_shape(token_mask, [None, N]),
        "unit_texts": texts,
    }
    if statistics:
        features.update(counts)
    return features
