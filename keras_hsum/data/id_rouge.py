"""ROUGE-N on token ids, in the graph: n-gram counts, clipped overlaps,
precision / recall / F1, and the greedy extractive oracle.

The label extras (`keras_hsum.data.label_extras`) compute their training
labels with these ops inside `tf.data` (`dataset.map` with
`num_parallel_calls`, no `tf.py_function`), on the ids the structurer has
already produced, instead of re-tokenising row texts in Python with
rouge-score. The definitions are rouge-score's (clipped n-gram counts;
precision over the candidate's n-grams, recall over the reference's, F1
their harmonic mean, 0 when both are 0) with one change of token: a token
is a *ROUGE id* instead of a stemmed word.

ROUGE ids (`rouge_id_table`): each vocabulary id maps to one id per
lower-cased piece (the smallest id whose piece lower-cases to the same
text, word-start marker included), and pieces without an ASCII letter or
digit (punctuation, separators, control and byte pieces) are dropped, as
rouge-score's tokenizer lower-cases and drops everything but `[a-z0-9]`.
What remains different from rouge-score's words: sub-word pieces instead of
words, and no Porter stemming ("stocks" and "stock" are different unless
the vocabulary splits them so). `benchmarks/results/data_stages.md`
measures the effect on the labels.

An n-gram of ids is one int64 key, `sum_i id_i * base**(n - 1 - i)`, with
`base` the vocabulary size, so `base**n` must stay below 2**63 (n <= 4 for
a 32k vocabulary).

Shapes: a set of token sequences is an int `tf.RaggedTensor` [R, None]
(one row per sequence: the candidate rows of one example, or its
references); scores between P candidates and R references are [R, P].
"""

import collections
import re

import numpy as np
import tensorflow as tf

# Scores of candidates that cannot be chosen (finite, see STYLE.md).
_NOT_A_CANDIDATE = -1.0e9
_ASCII_ALNUM = re.compile(r"[a-z0-9]")


def rouge_id_table(vocabulary):
    """Each vocabulary id's ROUGE id: int64 [V], -1 for a dropped piece.

    Args:
        vocabulary: a `Vocabulary` or `PresetVocabulary` (`id_to_piece`,
            `vocabulary_size` and the special ids).

    Returns:
        numpy int64 [V]: for a piece with an ASCII letter or digit after
        lower-casing, the smallest id of the pieces that lower-case to the
        same text; -1 for pad, BOS, EOS, unknown, the separators
        (`<title>`, `<para>`, `<sent>`, `<doc>`), control and byte pieces
        (`<...>`) and pieces without a letter or digit.
    """
    from keras_hsum.data.structuring.tokens import skipped_ids

    size = int(vocabulary.vocabulary_size)
    dropped = set(skipped_ids(vocabulary)) | {
        i for i in (vocabulary.eos_id, getattr(vocabulary, "unk_id", None)) if i is not None
    }
    table = np.full((size,), -1, np.int64)
    first = {}
    for i in range(size):
        if i in dropped:
            continue
        try:
            piece = vocabulary.id_to_piece(i)
        except ValueError:  # an id without a piece (a preset's gap)
            continue
        if len(piece) > 2 and piece.startswith("<") and piece.endswith(">"):
            continue
        text = piece.lower()
        if _ASCII_ALNUM.search(text):
            table[i] = first.setdefault(text, i)
    return table


def rouge_ids(ids, table):
    """Maps ids to ROUGE ids and drops the pieces the table drops.

    Args:
        ids: int ragged [R, None] (or a dense [R, L] with `table` ids
            everywhere; pad ids are dropped by the table).
        table: int64 [V] from `rouge_id_table` (numpy or tensor).

    Returns:
        int64 ragged [R, None].
    """
    if not isinstance(ids, tf.RaggedTensor):
        ids = tf.convert_to_tensor(ids)
        return masked_rows(ids, tf.ones(tf.shape(ids), tf.bool), table)
    mapped = tf.gather(tf.convert_to_tensor(table, tf.int64), tf.cast(ids.flat_values, tf.int64))
    keep = mapped >= 0
    lengths = tf.math.unsorted_segment_sum(
        tf.cast(keep, tf.int64), ids.value_rowids(), ids.nrows()
    )
    return tf.RaggedTensor.from_row_lengths(
        tf.boolean_mask(mapped, keep), lengths, validate=False
    )


def masked_rows(ids, mask, table):
    """The ROUGE ids of the masked tokens of each row.

    Args:
        ids: int [R, L].
        mask: bool [R, L], True at the tokens to keep.
        table: int64 [V] from `rouge_id_table`.

    Returns:
        int64 ragged [R, None]: row r holds the ROUGE ids of the tokens of
        row r under the mask that the table keeps, in order.
    """
    mapped = tf.gather(tf.convert_to_tensor(table, tf.int64), tf.cast(ids, tf.int64))
    keep = mask & (mapped >= 0)
    return tf.RaggedTensor.from_row_lengths(
        tf.boolean_mask(mapped, keep),
        tf.reduce_sum(tf.cast(keep, tf.int64), axis=1),
        validate=False,
    )


def _check_order(n, base):
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"The n-gram order must be an int >= 1, received {n!r}.")
    if int(base) ** n >= 2**63 - 1:
        raise ValueError(
            f"{n}-grams of a vocabulary of {base} ids do not fit one int64 key "
            f"(base**n = {int(base) ** n} >= 2**63); use a smaller n."
        )


def ngram_keys(ids, n, base):
    """The n-grams of each sequence as int64 keys.

    Args:
        ids: int64 ragged [R, None], ids in [0, base).
        n: the order, an int >= 1.
        base: the number of distinct ids (the vocabulary size).

    Returns:
        int64 ragged [R, None]: row r holds max(len_r - n + 1, 0) keys, key i
        encoding ids[r, i : i + n].
    """
    _check_order(n, base)
    ids = tf.cast(ids, tf.int64)
    lengths = ids.row_lengths()
    counts = tf.maximum(lengths - (n - 1), 0)
    starts = ids.row_starts()
    # Flat position of the first id of every n-gram.
    rows = tf.repeat(tf.range(tf.shape(lengths, out_type=tf.int64)[0]), counts)
    first = tf.gather(starts, rows) + (
        tf.range(tf.reduce_sum(counts)) - tf.gather(tf.cumsum(counts, exclusive=True), rows)
    )
    flat = ids.flat_values
    keys = tf.zeros_like(first)
    for offset in range(n):
        keys = keys * int(base) + tf.gather(flat, first + offset)
    return tf.RaggedTensor.from_row_lengths(keys, counts, validate=False)


def _key_index(vocabulary_keys, keys):
    """(index int32, hit bool) of each key in the unique `vocabulary_keys`."""
    order = tf.argsort(vocabulary_keys)
    sorted_keys = tf.concat(
        [tf.gather(vocabulary_keys, order), tf.constant([np.iinfo(np.int64).max], tf.int64)], 0
    )
    position = tf.searchsorted(sorted_keys, keys, side="left", out_type=tf.int32)
    hit = tf.equal(tf.gather(sorted_keys, position), keys)
    index = tf.gather(
        tf.concat([order, tf.zeros([1], order.dtype)], 0), position
    )
    return tf.cast(index, tf.int32), hit


def _counts(keys, vocabulary_keys):
    """Counts of each row's keys over `vocabulary_keys` (U unique keys):
    int32 [R, U]; keys outside the vocabulary are not counted."""
    size = tf.shape(vocabulary_keys, out_type=tf.int32)[0]
    num_rows = tf.cast(keys.nrows(), tf.int32)
    index, hit = _key_index(vocabulary_keys, keys.flat_values)
    rows = tf.cast(keys.value_rowids(), tf.int32)
    segment = tf.where(hit, rows * size + index, num_rows * size)
    counts = tf.math.unsorted_segment_sum(
        tf.ones_like(segment), segment, num_rows * size + 1
    )
    return tf.reshape(counts[:-1], tf.stack([num_rows, size]))


class _Reference(collections.namedtuple("_Reference", ["keys", "counts", "totals"])):
    """The n-grams of R references: `keys` int64 [U] (unique over all of
    them), `counts` int32 [R, U], `totals` int32 [R] (n-grams per reference)."""


def _reference(references, n, base):
    keys = ngram_keys(references, n, base)
    unique, _ = tf.unique(keys.flat_values)
    return _Reference(unique, _counts(keys, unique), tf.cast(keys.row_lengths(), tf.int32))


def _clipped_overlap(candidate_counts, reference_counts):
    """[P, U] and [R, U] counts -> [R, P] clipped overlaps (int32)."""
    return tf.reduce_sum(
        tf.minimum(candidate_counts[tf.newaxis], reference_counts[:, tf.newaxis]), axis=-1
    )


def _scores(overlap, candidate_totals, reference_totals):
    """(precision, recall, F1) float64, as rouge-score's `Score`."""
    overlap = tf.cast(overlap, tf.float64)
    precision = overlap / tf.cast(tf.maximum(candidate_totals, 1), tf.float64)
    recall = overlap / tf.cast(tf.maximum(reference_totals, 1), tf.float64)[..., tf.newaxis]
    total = precision + recall
    fmeasure = tf.math.divide_no_nan(2.0 * precision * recall, total)
    return precision, recall, fmeasure


class RougeScores(collections.namedtuple("RougeScores", ["precision", "recall", "fmeasure"])):
    """ROUGE-N of P candidates against R references: float64 [R, P] each."""


def rouge_n(candidates, references, n, base):
    """ROUGE-N of every candidate against every reference, on ids.

    Args:
        candidates: int64 ragged [P, None] (e.g. `rouge_ids` of the rows).
        references: int64 ragged [R, None].
        n: the n-gram order.
        base: the vocabulary size.

    Returns:
        `RougeScores` of float64 [R, P]: clipped overlap over the
        candidate's n-grams (precision), over the reference's (recall), and
        their harmonic mean (F1); 0 where a side has no n-gram.

    Example:
    >>> import tensorflow as tf
    >>> rows = tf.ragged.constant([[5, 6, 7], [7, 8]], tf.int64)  # P = 2
    >>> summary = tf.ragged.constant([[5, 6, 8]], tf.int64)  # R = 1
    >>> scores = rouge_n(rows, summary, n=1, base=10)
    >>> scores.recall.shape  # [R, P]
    TensorShape([1, 2])
    >>> np.round(scores.recall.numpy(), 4), np.round(scores.precision.numpy(), 4)
    (array([[0.6667, 0.3333]]), array([[0.6667, 0.5   ]]))
    """
    reference = _reference(references, n, base)
    keys = ngram_keys(candidates, n, base)
    overlap = _clipped_overlap(_counts(keys, reference.keys), reference.counts)
    return RougeScores(*_scores(overlap, tf.cast(keys.row_lengths(), tf.int32), reference.totals))


def greedy_oracle(sentences, references, base, orders=(1, 2), max_sentences=None):
    """The greedy extractive oracle on ids (`labels.greedy_oracle`'s rule).

    Adds, one at a time, the sentence that most increases the extract's
    score until none increases it (or `max_sentences` are chosen); ties go
    to the earliest sentence. The extract is the chosen sentences
    concatenated in document order, its n-grams counted as one sequence
    (bigrams cross sentence boundaries); its score is the sum over `orders`
    of ROUGE-n F1, averaged over the references.

    Args:
        sentences: int64 ragged [N, None], ids in [0, base).
        references: int64 ragged [R, None], R >= 1.
        base: the vocabulary size.
        orders: n-gram orders among (1, 2).
        max_sentences: the most sentences chosen (None: no limit).

    Returns:
        bool [N]: True at the chosen sentences.
    """
    orders = tuple(orders)
    if not orders or any(n not in (1, 2) for n in orders):
        raise ValueError(
            f"The in-graph greedy oracle scores orders among (1, 2), received {orders!r}."
        )
    for n in orders:
        _check_order(n, base)
    sentences = tf.cast(sentences, tf.int64)
    lengths = tf.cast(sentences.row_lengths(), tf.int32)
    num = tf.shape(lengths)[0]
    nonempty = lengths > 0
    # First and last id of each sentence (0 where it is empty).
    flat = tf.concat([sentences.flat_values, tf.zeros([1], tf.int64)], 0)
    starts = tf.cast(sentences.row_starts(), tf.int32)
    first = tf.where(nonempty, tf.gather(flat, starts), 0)
    last = tf.where(nonempty, tf.gather(flat, tf.maximum(starts + lengths - 1, 0)), 0)
    references_by_order = {n: _reference(references, n, base) for n in orders}
    inside = {
        n: _counts(ngram_keys(sentences, n, base), references_by_order[n].keys) for n in orders
    }
    reference_lengths = tf.cast(references.row_lengths(), tf.int32)
    limit = num if max_sentences is None else tf.minimum(num, int(max_sentences))
    positions = tf.range(num)

    def junctions(selected):
        """n=2 counts of the junction bigrams each candidate k adds and
        removes, over the reference keys: int32 [N, U]."""
        reference = references_by_order[2]
        size = tf.shape(reference.keys)[0]
        chosen = selected & nonempty
        before = tf.cumsum(tf.cast(chosen, tf.int32), exclusive=True)
        count = tf.reduce_sum(tf.cast(chosen, tf.int32))
        chosen_index = tf.concat([tf.cast(tf.where(chosen)[:, 0], tf.int32), [0]], 0)
        has_previous = before > 0
        has_next = before < count
        previous = tf.gather(chosen_index, tf.maximum(before - 1, 0))
        following = tf.gather(chosen_index, before)
        base64 = tf.constant(int(base), tf.int64)

        def added(keys, mask):
            index, hit = _key_index(reference.keys, keys)
            return tf.one_hot(index, size, dtype=tf.int32) * tf.cast(
                hit & mask, tf.int32
            )[:, tf.newaxis]

        left = tf.gather(last, previous) * base64 + first
        right = last * base64 + tf.gather(first, following)
        removed = tf.gather(last, previous) * base64 + tf.gather(first, following)
        return (
            added(left, has_previous)
            + added(right, has_next)
            - added(removed, has_previous & has_next)
        )

    def step_scores(selected, counts, num_tokens):
        totals = num_tokens + lengths
        score = tf.zeros(tf.stack([tf.shape(reference_lengths)[0], num]), tf.float64)
        candidate_counts = {}
        for n in orders:
            reference = references_by_order[n]
            new = counts[n][tf.newaxis] + inside[n]
            if n == 2:
                new += junctions(selected)
            candidate_counts[n] = new
            overlap = _clipped_overlap(new, reference.counts)
            _, _, f1 = _scores(
                overlap, tf.maximum(totals - (n - 1), 0), tf.maximum(reference_lengths - (n - 1), 0)
            )
            score += f1
        score = tf.reduce_mean(score, axis=0)
        return score, candidate_counts

    def body(step, selected, counts, num_tokens, current, done):
        score, candidate_counts = step_scores(selected, counts, num_tokens)
        open_ = ~selected & nonempty
        score = tf.where(open_, score, _NOT_A_CANDIDATE)
        best = tf.reduce_max(score)
        better = best > current
        k = tf.reduce_min(tf.where(tf.equal(score, best) & open_, positions, num))
        k = tf.minimum(k, num - 1)
        pick = better & tf.equal(positions, k)
        selected = selected | pick
        counts = {
            n: tf.where(better, candidate_counts[n][k], counts[n]) for n in orders
        }
        num_tokens = tf.where(better, num_tokens + lengths[k], num_tokens)
        current = tf.where(better, best, current)
        return step + 1, selected, counts, num_tokens, current, ~better

    def cond(step, selected, counts, num_tokens, current, done):
        return (~done) & (step < limit)

    initial = (
        tf.constant(0),
        tf.zeros([num], tf.bool),
        {n: tf.zeros(tf.shape(references_by_order[n].keys), tf.int32) for n in orders},
        tf.constant(0),
        tf.constant(0.0, tf.float64),
        tf.equal(num, 0),
    )
    _, selected, _, _, _, _ = tf.while_loop(cond, body, initial)
    return selected


# --------------------------------------------------------------------------
# Batched, on dense ids: many examples per call
# --------------------------------------------------------------------------


def _compact(ids, mask, table):
    """Dense ids [..., L] -> (ROUGE ids [..., L] with the kept tokens first,
    in order, and int32 [...] counts of kept tokens)."""
    mapped = tf.gather(tf.convert_to_tensor(table, tf.int64), tf.cast(ids, tf.int64))
    keep = mask & (mapped >= 0)
    order = tf.argsort(tf.cast(~keep, tf.int32), axis=-1, stable=True)
    return (
        tf.gather(mapped, order, batch_dims=len(ids.shape) - 1),
        tf.reduce_sum(tf.cast(keep, tf.int32), axis=-1),
    )


def _dense_keys(ids, lengths, n, base):
    """n-gram keys [..., L - n + 1] of compacted ids and their validity."""
    width = tf.shape(ids)[-1] - (n - 1)
    keys = tf.zeros_like(ids[..., : tf.maximum(width, 0)])
    for offset in range(n):
        keys = keys * int(base) + ids[..., offset : offset + tf.maximum(width, 0)]
    valid = tf.range(tf.maximum(width, 0)) < (lengths - (n - 1))[..., tf.newaxis]
    return keys, valid


def batch_rouge_n(candidates, candidate_mask, references, reference_mask, n, table):
    """ROUGE-N of every candidate row against every reference of the same
    example, for a batch of examples at once.

    The same scores as `rouge_n` per example (ROUGE ids of the masked
    tokens, `rouge_id_table`), computed with a fixed number of ops for the
    whole batch: an n-gram key carries its example (example * base**n +
    key), the references' keys of all examples form one vocabulary, and a
    candidate's clipped overlap sums over its (row, key) pairs.

    Args:
        candidates: int [B, P, T] vocabulary ids (e.g. `tokens`).
        candidate_mask: bool [B, P, T] (e.g. `token_mask`).
        references: int [B, R, L] vocabulary ids.
        reference_mask: bool [B, R, L].
        n: the n-gram order.
        table: int64 [V] from `rouge_id_table`.

    Returns:
        `RougeScores` of float64 [B, R, P].
    """
    base = len(table)
    _check_order(n, base)
    candidates = tf.convert_to_tensor(candidates)
    references = tf.convert_to_tensor(references)
    batch = tf.shape(candidates, out_type=tf.int64)[0]
    if int(base) ** n * 2 >= 2**62:
        raise ValueError(f"batch_rouge_n keys need base**n < 2**61, received base {base}, n {n}.")
    stride = tf.constant(int(base) ** n, tf.int64)
    example = tf.range(batch)[:, tf.newaxis, tf.newaxis] * stride

    c_ids, c_lengths = _compact(candidates, tf.cast(candidate_mask, tf.bool), table)
    c_keys, c_valid = _dense_keys(c_ids, c_lengths, n, base)
    r_ids, r_lengths = _compact(references, tf.cast(reference_mask, tf.bool), table)
    r_keys, r_valid = _dense_keys(r_ids, r_lengths, n, base)
    c_keys += example
    r_keys += example
    num_rows = tf.shape(c_keys, out_type=tf.int64)[1]
    num_refs = tf.shape(r_keys, out_type=tf.int64)[1]

    # The references' keys of the whole batch: a vocabulary of U keys,
    # counted per reference slot r (a key belongs to one example).
    vocabulary, r_index = tf.unique(tf.boolean_mask(r_keys, r_valid), out_idx=tf.int64)
    size = tf.shape(vocabulary, out_type=tf.int64)[0]
    r_slot = tf.boolean_mask(
        tf.broadcast_to(tf.range(num_refs)[tf.newaxis, :, tf.newaxis], tf.shape(r_keys, tf.int64)),
        r_valid,
    )
    reference_counts = tf.reshape(
        tf.math.unsorted_segment_sum(
            tf.ones_like(r_index, tf.int32), r_index * num_refs + r_slot, size * num_refs
        ),
        tf.stack([size, num_refs]),
    )

    # Candidate (row, key) pairs whose key is in the vocabulary.
    index, hit = _key_index(vocabulary, tf.boolean_mask(c_keys, c_valid))
    row = tf.boolean_mask(
        tf.broadcast_to(
            (tf.range(batch)[:, tf.newaxis] * num_rows + tf.range(num_rows)[tf.newaxis])[
                ..., tf.newaxis
            ],
            tf.shape(c_keys, tf.int64),
        ),
        c_valid,
    )
    pair_row = tf.boolean_mask(row, hit)
    pair_key = tf.cast(tf.boolean_mask(index, hit), tf.int64)
    pairs, pair_index = tf.unique(pair_row * size + pair_key, out_idx=tf.int64)
    count = tf.math.unsorted_segment_sum(
        tf.ones_like(pair_index, tf.int32), pair_index, tf.shape(pairs, out_type=tf.int64)[0]
    )
    clipped = tf.minimum(count[:, tf.newaxis], tf.gather(reference_counts, pairs % size))
    overlap = tf.math.unsorted_segment_sum(clipped, pairs // size, batch * num_rows)
    overlap = tf.transpose(tf.reshape(overlap, tf.stack([batch, num_rows, num_refs])), [0, 2, 1])

    candidate_totals = tf.maximum(c_lengths - (n - 1), 0)  # [B, P]
    reference_totals = tf.maximum(r_lengths - (n - 1), 0)  # [B, R]
    overlap = tf.cast(overlap, tf.float64)
    precision = overlap / tf.cast(tf.maximum(candidate_totals, 1), tf.float64)[:, tf.newaxis]
    recall = overlap / tf.cast(tf.maximum(reference_totals, 1), tf.float64)[..., tf.newaxis]
    fmeasure = tf.math.divide_no_nan(2.0 * precision * recall, precision + recall)
    return RougeScores(precision, recall, fmeasure)
