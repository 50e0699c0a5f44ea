"""Paragraphs -> sentences, in the graph.

The graph version of `keras_hsum.data.sentences.split_sentences` (its
reference; the rules are in that module's docstring), rewritten for RE2,
which has no look-ahead. A paragraph reads as whitespace-separated
chunks, and a sentence ends between two chunks when the first ends with
`.`/`!`/`?` (+ closing quotes or brackets), the second starts (after an
optional opening quote or bracket) with an upper-case letter or a digit,
and the abbreviation rules do not apply. Python's character predicates
are transcribed into RE2 classes (`character_classes`), so the two
splitters agree on every code point.

Only the chunks that end with a terminal mark can end a sentence, so the
paragraph is not cut into chunks: one `regex_split` per paragraph cuts it
at the candidate boundaries alone, `Patterns.boundary` (the last mark of
such a chunk, its closers and the whitespace run after them), kept as
pieces of their own. A paragraph becomes text pieces (about a sentence
long) and delimiters, two pieces per sentence or so instead of two per
word. RE2 matches leftmost-first, so a delimiter holds one mark:
"Hello!!! World" reads "Hello!!", "! ", "World". For a delimiter followed
by a text piece of its paragraph:

- the chunk before the whitespace is the last word of the text piece
  before the delimiter, then the delimiter's mark part. The word is empty
  when that piece ends with whitespace or when no text piece comes
  before (the paragraph's start, another delimiter): in "Hello . World"
  the chunk is "." alone;
- the chunk after it starts the next text piece: its first two
  characters decide whether it may start a sentence (`Patterns.starts`);
- `_ends_sentence` applies the abbreviation rules to those two.

A sentence is the join of its pieces: a delimiter keeps its whitespace
inside a sentence and drops it at a boundary or at its paragraph's end;
the first and last piece of a paragraph lose their leading and trailing
whitespace (`str.strip`), and a paragraph of whitespace alone has no
sentence. Whitespace runs inside a sentence stay as they are. There is
no substring of a paragraph per sentence (which would copy the paragraph
once per sentence, quadratic in its length), and the string ops run on a
few pieces per sentence, not on every word.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from keras_hsum.data.structuring.segments import length_rows


def split_sentences(paragraphs, patterns):
    """`split_sentences` on every paragraph.

    Args:
        paragraphs: tf.string [n].
        patterns: the structuring `Patterns`.

    Returns:
        `(text, paragraph)`: tf.string [S] and the paragraph each sentence
        comes from, int32 [S], in reading order.
    """
    pieces = tf_text.regex_split(paragraphs, patterns.boundary, patterns.boundary)
    values = pieces.flat_values
    row = length_rows(pieces.row_lengths())
    count = tf.shape(values, out_type=tf.int64)[0]
    one = tf.ones([tf.minimum(count, 1)], tf.bool)
    is_delimiter = tf.strings.regex_full_match(values, patterns.boundary)
    is_text = ~is_delimiter
    first = tf.concat([one, tf.not_equal(row[1:], row[:-1])], 0)
    last = tf.concat([first[1:], one], 0)
    text_after = ~last & tf.concat([is_text[1:], ~one], 0)
    text_before = ~first & tf.concat([~one, is_text[:-1]], 0)
    # A delimiter with no text piece after it ends its paragraph or is
    # followed by another mark: no sentence starts there.
    candidates = tf.where(is_delimiter & text_after)[:, 0]
    following = tf.strings.substr(
        tf.gather(values, candidates + 1), 0, 2, unit="UTF8_CHAR"
    )
    starts = tf.strings.regex_full_match(following, patterns.starts)
    candidates = tf.boolean_mask(candidates, starts)
    following = tf.boolean_mask(following, starts)
    mark = tf.strings.regex_replace(
        tf.gather(values, candidates), patterns.trailing_space, ""
    )
    # The word before the mark: the end of the text piece before the
    # delimiter, when there is one.
    last_word = tf.where(
        tf.gather(text_before, candidates),
        tf.strings.regex_replace(
            tf.gather(values, tf.maximum(candidates - 1, 0)),
            patterns.before_last_word,
            "",
        ),
        "",
    )
    boundary = tf.scatter_nd(
        candidates[:, None],
        _ends_sentence(tf.strings.join([last_word, mark]), following, patterns),
        [count],
    )
    # Each piece, as its sentence holds it: the paragraph's edges
    # stripped, a delimiter's whitespace dropped where a sentence or the
    # paragraph ends.
    leading = tf.where(first)
    values = tf.tensor_scatter_nd_update(
        values,
        leading,
        tf.strings.regex_replace(
            tf.gather_nd(values, leading), patterns.leading_space, ""
        ),
    )
    trailing = tf.where(last | boundary)
    values = tf.tensor_scatter_nd_update(
        values,
        trailing,
        tf.strings.regex_replace(
            tf.gather_nd(values, trailing), patterns.trailing_space, ""
        ),
    )
    starts_sentence = first | tf.concat([~one, boundary[:-1]], 0)
    text = tf.strings.reduce_join(
        tf.RaggedTensor.from_row_starts(values, tf.where(starts_sentence)[:, 0]),
        axis=1,
    )
    # Only a paragraph of whitespace alone gives an empty sentence.
    kept = tf.not_equal(text, "")
    paragraph = tf.boolean_mask(row, starts_sentence)
    return tf.boolean_mask(text, kept), tf.boolean_mask(paragraph, kept)


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
