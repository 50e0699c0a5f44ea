"""What structuring left out, counted per example in the graph.

With `TextStructurer(..., statistics=True)` the features also hold
`keras_hsum.data.TruncationReport`'s counts per example, int32 [B] each
(`STATISTICS`); `make_dataset` sums them into its `PipelineReport`.
"""

import tensorflow as tf

# The structurer's per-example truncation counts (`statistics=True`).
STATISTICS = ("input_tokens", "output_tokens", "dropped_units",
              "truncated_units", "forced_splits")


def input_statistics(sentences, num_batch, family, max_tokens):
    """`input_tokens` (the tokens of every sentence) and `forced_splits`
    (sentences longer than T split at token boundaries, by the packing
    families `"paragraphs"` and `"snippets"`): int32 [B] each.

    Args:
        sentences: `tokens.sentence_table`'s dict.
        num_batch: B.
        family: the structurer's family.
        max_tokens: T.
    """
    packed = family in ("paragraphs", "snippets")
    forced = tf.cast(sentences["lengths"] > max_tokens, tf.int32)
    return {
        "input_tokens": tf.math.unsorted_segment_sum(
            sentences["lengths"], sentences["batch"], num_batch
        ),
        "forced_splits": tf.math.unsorted_segment_sum(
            forced if packed else tf.zeros_like(forced),
            sentences["batch"],
            num_batch,
        ),
    }


def row_statistics(rows, token_mask, placement, max_tokens):
    """`output_tokens` (tokens in the output), `dropped_units` (rows beyond
    P) and `truncated_units` (kept rows cut at T) of a family with rows:
    int32 [B] each.

    Args:
        rows: the `rows` dict (`keras_hsum.data.structuring.rows`).
        token_mask: bool [B,P,T], the output's.
        placement: the rows' `RowPlacement`.
        max_tokens: T.
    """
    batch, kept, num_batch = placement.batch, placement.kept, placement.num_batch
    cut = tf.math.unsorted_segment_max(
        tf.cast(rows["token_column"] >= max_tokens, tf.int32), rows["token_row"],
        tf.shape(batch)[0],
    )
    return {
        "output_tokens": tf.reduce_sum(tf.cast(token_mask, tf.int32), [1, 2]),
        "dropped_units": tf.math.unsorted_segment_sum(
            tf.cast(~kept, tf.int32), batch, num_batch
        ),
        "truncated_units": tf.math.unsorted_segment_sum(
            tf.where(kept, cut, 0), batch, num_batch
        ),
    }


def flat_statistics(index, kept, num_content, num_batch):
    """`output_tokens` (kept tokens, without the `<para>` separators),
    `dropped_units` (0) and `truncated_units` (1 when the sequence was cut
    at N) of the `"flat"` family: int32 [B] each.

    Args:
        index: int32 [n, 2], (example, position) of every token and
            separator, the `num_content` tokens first.
        kept: bool [n], the position is < N.
        num_content: how many of the n are tokens.
        num_batch: B.
    """
    content = tf.concat(
        [tf.ones([num_content], tf.int32),
         tf.zeros([tf.shape(index)[0] - num_content], tf.int32)],
        0,
    )
    truncated = tf.math.unsorted_segment_max(
        tf.cast(~kept, tf.int32), index[:, 0], num_batch
    )
    return {
        "output_tokens": tf.math.unsorted_segment_sum(
            content * tf.cast(kept, tf.int32), index[:, 0], num_batch
        ),
        "dropped_units": tf.zeros([num_batch], tf.int32),
        "truncated_units": tf.maximum(truncated, 0),
    }
