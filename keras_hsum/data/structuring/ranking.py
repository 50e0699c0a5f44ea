"""Ranking the rows of each example, in the graph.

- tf-idf: the graph version of `keras_hsum.data.ranking.tfidf_cosine` (its
  reference): the cosine of each row to the query, else the title; terms
  are lower-cased `[^\\W_]+` words (ICU lower-casing,
  `tf.strings.lower(encoding="utf-8")`, where the reference has
  `str.lower`), smoothed idf ln((1 + N) / (1 + df)) + 1 over the N rows of
  one example, float64 arithmetic. The sums run in another order than
  numpy's, so a score can differ in the last float64 bit; after the cast
  to float32 this can only swap two rows whose scores tie to within one
  float32 ulp.
- learned: HT's `ParagraphRanker` of a ranker run
  (`keras_hsum.data.learned_ranking`) scores the first P_c rows of each
  example in reading order.
Rows are then ordered by score, best first, ties in reading order (a
stable sort); the first P are kept.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from keras_hsum.data.structuring.rows import place_tokens
from keras_hsum.data.structuring.segments import length_rows
from keras_hsum.data.structuring.segments import local_index
from keras_hsum.data.structuring.segments import pair_ids
from keras_hsum.features import CONTEXT_TOKENS
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK


def tfidf_scores(texts, batch, context, num_batch, nonword_pattern):
    """`ranking.tfidf_cosine` for every example at once.

    Args:
        texts: tf.string [R], the rows of all examples.
        batch: int32 [R], non-decreasing example of each row.
        context: tf.string [B], each example's query, else title.
        num_batch: B.
        nonword_pattern: `Patterns.nonword`.

    Returns:
        float32 [R]: each row's cosine to its example's context (0 when
        either has no word).
    """
    num_rows = tf.shape(texts)[0]
    words = tf_text.regex_split(
        tf.strings.lower(texts, encoding="utf-8"), nonword_pattern, ""
    )
    query = tf_text.regex_split(
        tf.strings.lower(context, encoding="utf-8"), nonword_pattern, ""
    )
    word_row = length_rows(words.row_lengths())
    query_batch = length_rows(query.row_lengths())
    # A term is a word of one example (ids by first appearance, words first).
    term, num_terms = pair_ids(
        tf.concat([words.flat_values, query.flat_values], 0),
        tf.concat([tf.gather(batch, word_row), query_batch], 0),
    )
    num_words = tf.shape(words.flat_values)[0]
    row_term, query_term = term[:num_words], term[num_words:]
    pairs, _, counts = tf.unique_with_counts(
        tf.cast(word_row, tf.int64) * tf.cast(num_terms, tf.int64)
        + tf.cast(row_term, tf.int64)
    )
    pair_row = tf.cast(pairs // tf.cast(num_terms, tf.int64), tf.int32)
    pair_term = tf.cast(pairs % tf.cast(num_terms, tf.int64), tf.int32)
    document_frequency = tf.math.unsorted_segment_sum(
        tf.ones_like(pair_term, tf.float64), pair_term, num_terms
    )
    rows_per_example = tf.cast(
        tf.math.bincount(batch, minlength=num_batch, maxlength=num_batch),
        tf.float64,
    )

    def idf(example, term_ids):
        n = tf.gather(rows_per_example, example)
        df = tf.gather(document_frequency, term_ids)
        return tf.math.log((1.0 + n) / (1.0 + df)) + 1.0

    weights = tf.cast(counts, tf.float64) * idf(tf.gather(batch, pair_row), pair_term)
    norms = tf.sqrt(
        tf.math.unsorted_segment_sum(weights * weights, pair_row, num_rows)
    )
    query_counts = tf.math.unsorted_segment_sum(
        tf.ones_like(query_term, tf.float64), query_term, num_terms
    )
    in_query = query_counts > 0
    term_batch = tf.where(
        in_query,
        tf.math.unsorted_segment_max(query_batch, query_term, num_terms),
        0,
    )
    query_weights = tf.where(
        in_query,
        query_counts * idf(term_batch, tf.range(num_terms)),
        tf.zeros_like(query_counts),
    )
    query_norms = tf.sqrt(
        tf.math.unsorted_segment_sum(
            query_weights * query_weights, term_batch, num_batch
        )
    )
    dots = tf.math.unsorted_segment_sum(
        weights * tf.gather(query_weights, pair_term), pair_row, num_rows
    )
    denominator = norms * tf.gather(query_norms, batch)
    scores = tf.where(
        denominator > 0,
        dots / tf.where(denominator > 0, denominator, 1.0),
        0.0,
    )
    return tf.cast(scores, tf.float32)


def rank(scores, batch, num_batch):
    """Rank of each row in its example (stable, best first).

    Args:
        scores: float32 [R], each below 2.
        batch: int32 [R], non-decreasing.
        num_batch: B.

    Returns:
        int32 [R]: 0 for the best row of its example; ties keep reading
        order.
    """
    local = local_index(batch, num_batch)
    padded = tf.RaggedTensor.from_value_rowids(
        -scores, batch, nrows=num_batch
    ).to_tensor(default_value=2.0)
    order = tf.argsort(padded, axis=1, stable=True)
    ranks = tf.argsort(order, axis=1, stable=True)
    return tf.gather_nd(ranks, tf.stack([batch, local], 1))


def learned_rank(ranker, context_tokens, rows, sentences, candidates, pad_id,
                 max_tokens, max_units):
    """The learned ranker's score and slot of every row.

    The candidates (`TextStructurer` makes every row one, as HT's ranker
    scores every paragraph), as tokens [B,R,T] (R: `candidates.num_slots`,
    static or not: the ranker scores each row on its own), go through the
    `ParagraphRanker` with the context; candidates are ranked by score
    (stable: ties in reading order), other rows get slot P (dropped).

    Args:
        ranker: the `ParagraphRanker`.
        context_tokens: int32 [B,C_r], the title/query ids cut to the
            ranker run's `context_length`.
        rows: the `rows` dict (`keras_hsum.data.structuring.rows`).
        sentences: `tokens.sentence_table`'s dict.
        candidates: a `RowPlacement` with each row's example, its reading
            order position as slot, whether it is a candidate as `kept`,
            and R slots (an int or a scalar tensor).
        pad_id: the vocabulary's pad id.
        max_tokens: T.
        max_units: P.

    Returns:
        `(scores float32 [R], slot int32 [R])`; 0 and P for non-candidates.
    """
    num_candidates = candidates.num_slots
    length = context_tokens.shape[1]
    tokens, token_mask = place_tokens(rows, sentences, pad_id, candidates, max_tokens)
    ranker_scores = ranker(
        {
            TOKENS: tf.ensure_shape(tokens, [None, None, max_tokens]),
            TOKEN_MASK: tf.ensure_shape(token_mask, [None, None, max_tokens]),
            PARAGRAPH_MASK: tf.reduce_any(token_mask, axis=-1),
            CONTEXT_TOKENS: tf.ensure_shape(context_tokens, [None, length]),
        },
        training=False,
    )
    row_scores = tf.gather_nd(
        tf.cast(ranker_scores, tf.float32),
        tf.stack([candidates.batch, tf.minimum(candidates.slot, num_candidates - 1)], 1),
    )
    # Scores are in (0,1): non-candidates (-1) sort after every candidate.
    is_candidate = candidates.kept
    slot = rank(
        tf.where(is_candidate, row_scores, -1.0), candidates.batch, candidates.num_batch
    )
    return (
        tf.where(is_candidate, row_scores, 0.0),
        tf.where(is_candidate, slot, max_units),
    )
