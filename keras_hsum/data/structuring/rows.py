"""Sentences -> rows of at most T tokens, per family, and their placement.

The graph version of the row building of the Python builders
(`tests/reference_structure.py`, the reference):
- `"sentences"`: one sentence per row;
- `"sections"`: one section per row;
- `"snippets"`: consecutive sentences packed greedily up to T tokens,
  never across a document;
- `"paragraphs"`: the same packing within a paragraph (`pack="paragraph"`)
  or a section (`pack="section"`).
A sentence longer than T is split at token boundaries by the packing
families (a "forced split"). Rows are described flat over the batch (a
dict `rows`: `token_row`, `token_column` int32 [n] per sentence token,
`num_rows`, and per row `batch`, `document` int32 [R] and `text`
tf.string [R]); `place_values` then writes them into [B,P,T].
"""

import collections

import tensorflow as tf

from keras_hsum.data.structuring.segments import group_rows
from keras_hsum.data.structuring.segments import length_rows

# Where each row goes: example `batch[r]`, slot `slot[r]` (int32 [R]),
# where `kept[r]` (bool [R]); B = num_batch, P = num_slots.
RowPlacement = collections.namedtuple(
    "RowPlacement", ["batch", "slot", "kept", "num_batch", "num_slots"]
)


def family_rows(family, sentences, max_tokens, tokenizer, pack="paragraph"):
    """The rows of a family with rows (all but `"flat"`).

    Args:
        family: `"paragraphs"`, `"sections"`, `"snippets"` or
            `"sentences"`.
        sentences: `tokens.sentence_table`'s dict.
        max_tokens: T.
        tokenizer: detokenizes the rows cut out of an over-long sentence.
        pack: `"paragraph"` or `"section"` (`"paragraphs"` only).

    Returns:
        The `rows` dict (see the module docstring).
    """
    if family == "sentences":
        return _sentence_rows(sentences)
    if family == "sections":
        return _section_rows(sentences)
    if family == "snippets":
        # A snippet may cross sections, never documents (`build_snippets`).
        groups = sentences["document_key"]
    elif pack == "paragraph":
        groups = sentences["paragraph"]
    else:
        groups = sentences["section_key"]
    return _packed_rows(sentences, groups, max_tokens, tokenizer)


def _sentence_rows(sentences):
    count = tf.shape(sentences["lengths"])[0]
    return dict(
        token_row=length_rows(sentences["lengths"]),
        token_column=tf.cast(
            tf.ragged.range(sentences["lengths"]).flat_values, tf.int32
        ),
        num_rows=count,
        batch=sentences["batch"],
        document=sentences["document"],
        text=sentences["text"],
    )


def _section_rows(sentences):
    row = group_rows(sentences["section_key"])
    num_rows = tf.maximum(tf.reduce_max(row) + 1, 0)
    first = tf.math.unsorted_segment_min(tf.range(tf.shape(row)[0]), row, num_rows)
    before = tf.cumsum(sentences["lengths"], exclusive=True)
    offset = before - tf.gather(before, tf.gather(first, row))
    token_sentence = length_rows(sentences["lengths"])
    column = tf.gather(offset, token_sentence) + tf.cast(
        tf.ragged.range(sentences["lengths"]).flat_values, tf.int32
    )
    return dict(
        token_row=tf.gather(row, token_sentence),
        token_column=column,
        num_rows=num_rows,
        batch=tf.gather(sentences["batch"], first),
        document=tf.gather(sentences["document"], first),
        text=tf.strings.reduce_join(
            tf.RaggedTensor.from_value_rowids(sentences["text"], row, nrows=num_rows),
            axis=1,
            separator=" ",
        ),
    )


def pack(lengths, groups, max_tokens):
    """`_pack` of the reference over all sentences: greedy rows of <= T tokens.

    Args:
        lengths: int32 [S] (> 0) tokens per sentence.
        groups: [S] non-decreasing group of each sentence; rows never
            cross groups.
        max_tokens: T.

    Returns:
        `(row, column, forced)`, each [S]: the row of each sentence's first
        token, its column, and whether it was split at token boundaries
        (longer than T); a token j of sentence s lies at position
        column + j of row row, counted over rows of T. A forced sentence
        starts its own ceil(length / T) rows (column 0) and the next
        sentence starts a new row.

    The row starts are found by pointer jumping, in about log2(rows)
    steps over all sentences at once (not one step per sentence).
    """
    limit = tf.constant(max_tokens, tf.int32)
    count = tf.shape(lengths)[0]
    index = tf.range(count)
    forced = lengths > limit
    end = tf.cumsum(lengths)
    begin = end - lengths  # tokens before each sentence, strictly increasing
    # A row starting at sentence i (not forced) ends before the first later
    # sentence that starts a group or would take the row past T tokens (a
    # forced one always does); after a forced sentence the next one starts
    # a row. `following[i]` > i: the sentence that starts the next row.
    first = tf.concat(
        [tf.ones([tf.minimum(count, 1)], tf.bool), groups[1:] != groups[:-1]], 0
    )
    firsts = tf.concat([tf.cast(tf.where(first)[:, 0], tf.int32), [count]], 0)
    next_group = tf.gather(firsts, tf.cumsum(tf.cast(first, tf.int32)))
    overflow = tf.searchsorted(end, begin + limit, side="right", out_type=tf.int32)
    following = tf.where(forced, index + 1, tf.minimum(overflow, next_group))
    # The row starts are the chain 0, following[0], ... (S ends it). Pointer
    # jumping: after k steps `jump` goes 2^k links ahead and `start` marks
    # the chain's first 2^k sentences.
    jump = tf.concat([following, [count]], 0)
    start = tf.range(count + 1) < 1

    def link(start, jump):
        reached = tf.math.unsorted_segment_max(
            tf.cast(start, tf.int32), jump, count + 1
        )
        return start | (reached > 0), tf.gather(jump, jump)

    start, _ = tf.while_loop(lambda start, jump: jump[0] < count, link, (start, jump))
    start = start[:count]
    # Each sentence's row start is the last start at or before it.
    owner = tf.cumsum(tf.cast(start, tf.int32)) - 1
    rows_from = tf.boolean_mask(
        tf.where(forced, (lengths + limit - 1) // limit, 1), start
    )
    row = tf.gather(tf.cumsum(rows_from, exclusive=True), owner)
    column = begin - tf.gather(tf.boolean_mask(begin, start), owner)
    return row, column, forced


def _packed_rows(sentences, groups, max_tokens, tokenizer):
    limit = max_tokens
    lengths = sentences["lengths"]
    row, column, forced = pack(lengths, groups, max_tokens)
    # Per row, from the sentences (not their tokens): a row start (column
    # 0) begins one row, a forced one ceil(length / T) rows.
    starts = tf.cast(tf.where(column == 0)[:, 0], tf.int32)
    rows_from = tf.gather(tf.where(forced, (lengths + limit - 1) // limit, 1), starts)
    num_rows = tf.reduce_sum(rows_from)
    row_sentence = tf.gather(starts, length_rows(rows_from))
    row_forced = tf.gather(forced, row_sentence)
    token_sentence = length_rows(lengths)
    position = tf.gather(column, token_sentence) + tf.cast(
        tf.ragged.range(lengths).flat_values, tf.int32
    )
    token_row = tf.gather(row, token_sentence) + position // limit
    joined = tf.strings.reduce_join(
        tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(sentences["text"], ~forced),
            tf.boolean_mask(row, ~forced),
            nrows=num_rows,
        ),
        axis=1,
        separator=" ",
    )
    # A row cut out of an over-long sentence reads as its pieces:
    # detokenise those rows only.
    forced_rows = tf.where(row_forced)[:, 0]
    in_forced = tf.gather(row_forced, token_row)
    compact = tf.cumsum(tf.cast(row_forced, tf.int32)) - 1
    pieces = tokenizer.detokenize(
        tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(sentences["ids"].flat_values, in_forced),
            tf.gather(compact, tf.boolean_mask(token_row, in_forced)),
            nrows=tf.shape(forced_rows, out_type=tf.int32)[0],
        )
    )
    return dict(
        token_row=token_row,
        token_column=position % limit,
        num_rows=num_rows,
        batch=tf.gather(sentences["batch"], row_sentence),
        document=tf.gather(sentences["document"], row_sentence),
        text=tf.tensor_scatter_nd_update(joined, forced_rows[:, None], pieces),
    )


def _token_slots(rows, placement, max_tokens):
    """Where the placed tokens go: `(kept, index)`, bool [n] (the sentence
    tokens placed) and int32 [k] (their flat positions in [B*P*T])."""
    T = max_tokens
    token_row = rows["token_row"]
    column = rows["token_column"]
    kept = tf.gather(placement.kept, token_row) & (column < T)
    row_index = (placement.batch * placement.num_slots + placement.slot) * T
    index = tf.boolean_mask(tf.gather(row_index, token_row) + column, kept)
    return kept, index


def _scatter(slots, values, default, placement, max_tokens):
    kept, index = slots
    size = placement.num_batch * placement.num_slots * max_tokens
    flat = tf.tensor_scatter_nd_update(
        tf.fill(tf.reshape(size, [1]), tf.constant(default, values.dtype)),
        index[:, None],
        tf.boolean_mask(values, kept),
    )
    return tf.reshape(flat, tf.stack([placement.num_batch, placement.num_slots, max_tokens]))


def place_values(rows, values, default, placement, max_tokens):
    """A value per sentence token, placed where its row goes.

    Args:
        rows: the `rows` dict.
        values: [n], one per token of the sentences (flat, in order).
        default: the value elsewhere.
        placement: a `RowPlacement`.
        max_tokens: T; columns >= T are cut.

    Returns:
        [B,P,T] of `values`' dtype: row r's first T values at example
        `batch[r]`, row `slot[r]`, where `kept[r]`; `default` elsewhere.
    """
    slots = _token_slots(rows, placement, max_tokens)
    return _scatter(slots, values, default, placement, max_tokens)


def place_tokens(rows, sentences, pad_id, placement, max_tokens):
    """`tokens` int32 [B,P,T] (`pad_id` elsewhere) and `token_mask` bool
    [B,P,T] of the rows placed by `placement` (see `place_values`)."""
    slots = _token_slots(rows, placement, max_tokens)
    tokens = _scatter(slots, sentences["ids"].flat_values, pad_id, placement, max_tokens)
    token_mask = _scatter(
        slots, tf.ones_like(rows["token_row"], tf.bool), False, placement, max_tokens
    )
    return tokens, token_mask
