"""Paragraphs -> sentences, in the graph.

The graph version of `keras_hsum.data.sentences.split_sentences` (its
reference; the rules are in that module's docstring), rewritten for RE2,
which has no look-ahead: a paragraph is cut into whitespace-separated
chunks, and a sentence ends between two chunks when the first ends with
`.`/`!`/`?` (+ closing quotes or brackets), the second starts (after an
optional opening quote or bracket) with an upper-case letter or a digit,
and the abbreviation rules do not apply. Python's character predicates are
transcribed into RE2 classes (`character_classes`), so the two splitters
agree on every code point.
"""

import tensorflow as tf
import tensorflow_text as tf_text


def split_sentences(paragraphs, patterns):
    """`split_sentences` on every paragraph.

    Args:
        paragraphs: tf.string [n].
        patterns: the structuring `Patterns`.

    Returns:
        `(text, paragraph)`: tf.string [S] and the paragraph each sentence
        comes from, int32 [S], in reading order.
    """
    # The whitespace runs are kept as pieces of their own, so that a
    # sentence's text is the join of its pieces: one pass over the
    # paragraph (a substring of the paragraph per sentence would copy
    # the whole paragraph once per sentence, quadratic in its length).
    pieces = tf_text.regex_split(paragraphs, patterns.space, patterns.space)
    piece_values = pieces.flat_values
    is_chunk = ~tf.strings.regex_full_match(piece_values, patterns.space)
    values = tf.boolean_mask(piece_values, is_chunk)
    row = tf.boolean_mask(tf.cast(pieces.value_rowids(), tf.int32), is_chunk)
    count = tf.shape(values)[0]
    last = tf.concat([row[1:] != row[:-1], tf.ones([tf.minimum(count, 1)], tf.bool)], 0)
    # Only a chunk that ends with . ! or ? and is not its paragraph's
    # last can end a sentence (a tenth of the chunks or fewer in real
    # text): the next chunk's start and the abbreviation rules are
    # matched for those alone.
    ends = tf.where(~last & tf.strings.regex_full_match(values, patterns.ends))[:, 0]
    following = tf.gather(values, ends + 1)
    where = tf.boolean_mask(
        ends, tf.strings.regex_full_match(following, patterns.starts)
    )
    boundary = tf.scatter_nd(
        where[:, None],
        _ends_sentence(
            tf.gather(values, where), tf.gather(values, where + 1), patterns
        ),
        tf.shape(last, out_type=tf.int64),
    )
    first = tf.concat(
        [tf.ones([tf.minimum(count, 1)], tf.bool), boundary[:-1] | last[:-1]], 0
    )
    sentence = tf.cumsum(tf.cast(first, tf.int32)) - 1
    num_sentences = tf.maximum(tf.reduce_max(sentence) + 1, 0)
    paragraph = tf.math.segment_min(row, sentence)
    # A whitespace piece belongs to a sentence when the chunks on both
    # sides of it do; leading, trailing and between-sentence runs do not.
    before = tf.cumsum(tf.cast(is_chunk, tf.int32)) - 1  # last chunk so far
    padded_sentence = tf.concat([[-1], sentence, [-1]], 0)
    previous_sentence = tf.gather(padded_sentence, before + 1)
    next_sentence = tf.gather(
        padded_sentence, before + 1 + tf.cast(~is_chunk, tf.int32)
    )
    inside = is_chunk | (
        tf.equal(previous_sentence, next_sentence) & (previous_sentence >= 0)
    )
    text = tf.strings.reduce_join(
        tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(piece_values, inside),
            tf.boolean_mask(previous_sentence, inside),
            nrows=num_sentences,
        ),
        axis=1,
    )
    return text, paragraph


def _ends_sentence(chunks, following, patterns):
    """Whether a sentence ends after each chunk, by the abbreviation rules.

    Args:
        chunks: tf.string [m], chunks ending with terminal punctuation and
            followed by a chunk that may start a sentence.
        following: tf.string [m], the chunk after each.
        patterns: the structuring `Patterns`.

    Returns:
        bool [m]: the mark is `!`/`?`, or the word before a `.` is no
        abbreviation (a single capital initial; a listed abbreviation that
        is not an acronym; "no." before a digit).
    """
    next_digit = tf.strings.regex_full_match(following, patterns.starts_digit)
    head = tf.strings.regex_replace(chunks, patterns.head, r"\1")
    mark = tf.strings.regex_replace(chunks, patterns.head, r"\2")
    word = tf.strings.regex_replace(head, patterns.openers, "")
    single = tf.equal(tf.strings.length(word, unit="UTF8_CHAR"), 1)
    single_upper = tf.strings.regex_full_match(word, patterns.upper_char)
    acronym = tf.strings.regex_full_match(
        word, patterns.upper_word
    ) & ~tf.strings.regex_full_match(word, r"(?s).*\..*")
    numeral = tf.strings.regex_full_match(word, patterns.numeral)
    listed = tf.strings.regex_full_match(word, patterns.listed)
    abbreviation = tf.where(
        single,
        single_upper,
        ~acronym & tf.where(numeral, next_digit, listed),
    )
    return tf.not_equal(mark, ".") | ~abbreviation
