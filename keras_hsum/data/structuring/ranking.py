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

The terms are found without a regex pass per text (RE2 pays per match,
and a long document has one match per word): `lowered_words` classifies
the bytes of all texts joined, and falls back to `regex_split` where that
could differ (see there).
"""

import functools
import re

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


# The body of `Patterns.nonword` as `character_classes` writes it:
# `[^...]+` over `\\x{a}` and `\\x{a}-\\x{b}` code-point ranges.
_CLASS_RANGE = r"\\x\{([0-9a-f]+)\}(?:-\\x\{([0-9a-f]+)\})?"
_NEGATED_CLASS = re.compile(r"\[\^((?:\\x\{[0-9a-f]+\}(?:-\\x\{[0-9a-f]+\})?)*)\]\+")


@functools.lru_cache(maxsize=None)
def _word_bounds(nonword_pattern):
    """The word characters of `[^ranges]+`, as sorted code-point bounds.

    Returns:
        A tuple `(a0, b0 + 1, a1, b1 + 1, ...)` of the ranges `a-b` the
        pattern negates (a code point c is a word character when an odd
        number of bounds are <= c), or None when the pattern is not of
        that form.
    """
    match = _NEGATED_CLASS.fullmatch(nonword_pattern)
    if match is None:
        return None
    bounds = []
    for first, last in re.findall(_CLASS_RANGE, match.group(1)):
        bounds += [int(first, 16), int(last or first, 16) + 1]
    if any(b <= a for a, b in zip(bounds, bounds[1:])):
        return None
    return tuple(bounds)


def _regex_words(texts, nonword_pattern):
    """`lowered_words` by its definition (`regex_split` of ICU lower)."""
    words = tf_text.regex_split(
        tf.strings.lower(texts, encoding="utf-8"), nonword_pattern, ""
    )
    return words.flat_values, length_rows(words.row_lengths())


def lowered_words(texts, nonword_pattern):
    """The lower-cased words of each text, in order.

    What `regex_split(tf.strings.lower(texts, encoding="utf-8"),
    nonword_pattern)` gives, flat, without RE2 (which pays per match: one
    per word): the texts are joined with a space and lower-cased (byte by
    byte where a text is ASCII, for which ICU lower-casing is exactly that;
    ICU otherwise), and a word is a maximal run of the bytes of word
    characters (the code points outside `nonword_pattern`'s negated class;
    UTF-8 sequences decoded by arithmetic on their bytes). That is the
    regex's split wherever the lower-cased text is valid UTF-8 (RE2 matches
    no invalid byte) and ICU lower-cases the letters A-Z to a-z (any
    locale but Turkish and Azeri); otherwise, and for a pattern of another
    form, the regex computes the words.

    Args:
        texts: tf.string [R], or a list of tf.string vectors (their
            texts in order, without concatenating them).
        nonword_pattern: `Patterns.nonword` (`[^...]+` over code-point
            ranges).

    Returns:
        `(words, row)`: tf.string [W], each text's words in order, and
        int32 [W], the text of each word (non-decreasing).
    """
    parts = list(texts) if isinstance(texts, (list, tuple)) else [texts]
    bounds = _word_bounds(nonword_pattern)
    if bounds is None:
        return _regex_words(tf.concat(parts, 0), nonword_pattern)
    # All texts joined, each followed by a space (as is each part).
    part_texts = [tf.strings.reduce_join(part, separator=" ") for part in parts]
    raw = tf.strings.reduce_join(tf.stack(part_texts), separator=" ")
    part_starts = tf.cumsum(
        tf.stack([tf.strings.length(text) + 1 for text in part_texts]), exclusive=True
    )
    lengths = tf.concat([tf.strings.length(part) for part in parts], 0)
    starts = tf.concat(
        [
            tf.cumsum(tf.strings.length(part) + 1, exclusive=True) + part_starts[i]
            for i, part in enumerate(parts)
        ],
        0,
    )
    # The texts with a byte >= 128 are lower-cased by ICU, the rest of the
    # joined text byte by byte.
    high = tf.cast(tf.where(tf.io.decode_raw(raw, tf.uint8) >= 0x80)[:, 0], tf.int32)
    other = tf.cast(
        tf.where(
            tf.math.unsorted_segment_max(
                tf.ones_like(high),
                tf.searchsorted(starts, high, side="right") - 1,
                tf.shape(lengths)[0],
            )
            > 0
        ),
        tf.int32,
    )
    other_start = tf.gather_nd(starts, other)
    other_length = tf.gather_nd(lengths, other)
    unicode_lowered = tf.strings.lower(
        tf.strings.substr(raw, other_start, other_length), encoding="utf-8"
    )
    span_begin = tf.concat([[0], other_start + other_length], 0)
    span_end = tf.concat([other_start, tf.strings.length(raw)[None]], 0)
    spans = tf.strings.substr(tf.strings.lower(raw), span_begin, span_end - span_begin)
    joined = tf.strings.reduce_join(
        tf.concat(
            [tf.reshape(tf.stack([spans[:-1], unicode_lowered], 1), [-1]), spans[-1:]], 0
        )
    )
    growth = tf.scatter_nd(
        other, tf.strings.length(unicode_lowered) - other_length, tf.shape(lengths)
    )
    starts += tf.cumsum(growth, exclusive=True)
    data = tf.io.decode_raw(joined, tf.uint8)
    # ASCII bytes: a range test per ASCII range of word characters (uint8
    # arithmetic wraps, so bytes below a range and all bytes >= 128 fail).
    word = tf.zeros_like(data, tf.bool)
    for first, end in zip(bounds[::2], bounds[1::2]):
        if first < 0x80:
            word |= (data - first) < min(end, 0x80) - first
    # Other code points: each UTF-8 sequence's lead byte and continuation
    # bytes are classified by its code point.
    high = tf.cast(tf.where(data >= 0x80)[:, 0], tf.int32)
    byte = tf.cast(tf.gather(data, high), tf.int32)
    lead = byte >= 0xC0
    lead_at = tf.boolean_mask(high, lead)
    first_byte = tf.boolean_mask(byte, lead)
    size = (
        2 + tf.cast(first_byte >= 0xE0, tf.int32) + tf.cast(first_byte >= 0xF0, tf.int32)
    )
    code = tf.bitwise.right_shift(tf.constant(0x7F), size) & first_byte
    well_formed = (first_byte >= 0xC2) & (first_byte <= 0xF4)
    last = tf.shape(data)[0] - 1
    for k in (1, 2, 3):
        inside = k < size
        byte_k = tf.cast(tf.gather(data, tf.minimum(lead_at + k, last)), tf.int32)
        code = tf.where(inside, code * 64 + (byte_k & 0x3F), code)
        well_formed &= ~inside | (
            (lead_at + k <= last) & (byte_k >= 0x80) & (byte_k < 0xC0)
        )
    well_formed &= (
        tf.equal(size, 2)
        | (tf.equal(size, 3) & (code >= 0x800) & ((code < 0xD800) | (code > 0xDFFF)))
        | (tf.equal(size, 4) & (code >= 0x10000) & (code <= 0x10FFFF))
    )
    # Valid UTF-8: every lead byte well formed with its continuation
    # bytes, and no other continuation byte.
    valid = tf.reduce_all(well_formed) & tf.equal(
        tf.reduce_sum(size - 1), tf.shape(high)[0] - tf.shape(lead_at)[0]
    )
    letters = tf.constant("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    valid &= tf.equal(tf.strings.lower(letters, encoding="utf-8"), tf.strings.lower(letters))
    lead_word = tf.math.floormod(
        tf.searchsorted(tf.constant(bounds, tf.int32), code, side="right"), 2
    ) > 0
    # A continuation byte takes its lead byte's class (index 0: none seen).
    word = tf.tensor_scatter_nd_update(
        word,
        high[:, None],
        tf.gather(
            tf.concat([[False], lead_word], 0), tf.cumsum(tf.cast(lead, tf.int32))
        ),
    )

    def from_bytes():
        # Words start and end where the class changes; the separators are
        # not word characters, so no word crosses two texts.
        padded_word = tf.concat([[False], word, [False]], 0)
        edges = tf.cast(
            tf.where(tf.not_equal(padded_word[1:], padded_word[:-1]))[:, 0], tf.int32
        )
        begin, end = edges[0::2], edges[1::2]
        # Each text's words: from its first word (at or after its start).
        first_word = tf.searchsorted(begin, starts, side="left")
        counts = tf.concat([first_word[1:], tf.shape(begin)], 0) - first_word
        return tf.strings.substr(joined, begin, end - begin), length_rows(counts)

    return tf.cond(
        valid, from_bytes, lambda: _regex_words(tf.concat(parts, 0), nonword_pattern)
    )


def _row_terms(word_row, word_term, num_rows, num_terms):
    """The distinct (row, term) pairs, in order of first appearance.

    `tf.unique_with_counts` of row * V + term, on int32 keys where they
    fit (half the work of int64 keys), int64 otherwise.

    Args:
        word_row, word_term: int32 [n], each word's row and term.
        num_rows: R.
        num_terms: V.

    Returns:
        `(row, term, count)`, int32 [p] each: a pair's row, its term and
        how many of the row's words it is.
    """

    def distinct(dtype):
        width = tf.cast(num_terms, dtype)
        pairs, _, counts = tf.unique_with_counts(
            tf.cast(word_row, dtype) * width + tf.cast(word_term, dtype)
        )
        return (
            tf.cast(pairs // width, tf.int32),
            tf.cast(pairs % width, tf.int32),
            counts,
        )

    fits = tf.cast(num_rows, tf.int64) * tf.cast(num_terms, tf.int64) < 2**31
    return tf.cond(fits, lambda: distinct(tf.int32), lambda: distinct(tf.int64))


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
    # The rows' words, then the contexts'.
    words, text = lowered_words([texts, context], nonword_pattern)
    num_words = tf.searchsorted(text, num_rows[None])[0]
    word_row = text[:num_words]
    query_batch = text[num_words:] - num_rows
    # A term is a word of one example (ids by first appearance, words first).
    term, num_terms = pair_ids(
        words, tf.concat([tf.gather(batch, word_row), query_batch], 0)
    )
    row_term, query_term = term[:num_words], term[num_words:]
    pair_row, pair_term, counts = _row_terms(word_row, row_term, num_rows, num_terms)
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
