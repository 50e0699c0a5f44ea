"""Raw document strings -> paragraphs, in the graph.

The graph version of `keras_hsum.data.reader.example_from_text` (its
reference): each string of `documents` is one document; inside it, lines
are stripped, a blank line closes a paragraph, a line holding only `===`
starts a new section, a line holding only `---` starts a new document, a
line holding only backslashes and a marker is text with one backslash
fewer (`\\===` reads as `===`), and the lines of a paragraph are joined
with single spaces. Documents without text (e.g. the "" that pad a batch)
are skipped, so document numbers count only documents with text, as in
Python; sections without text are skipped too.
"""

import tensorflow as tf

from keras_hsum.data.reader import DOCUMENT_BREAK
from keras_hsum.data.reader import ESCAPED_MARKER
from keras_hsum.data.reader import SECTION_BREAK
from keras_hsum.data.structuring.segments import group_rows
from keras_hsum.data.structuring.segments import length_rows

# A whole line that is an escaped marker (the reader's ESCAPED_MARKER).
_UNESCAPE_PATTERN = f"^{ESCAPED_MARKER}$"


def clean(texts):
    """Invalid UTF-8 -> U+FFFD (never raises): tf.string of `texts`' shape.

    ICU's rules (`tf.strings.unicode_transcode`) may emit another number of
    U+FFFD than Python's `bytes.decode(errors="replace")` for one bad
    sequence; valid text is unchanged.
    """
    return tf.strings.unicode_transcode(
        texts,
        input_encoding="UTF-8",
        output_encoding="UTF-8",
        errors="replace",
        replacement_char=0xFFFD,
        replace_control_characters=False,
    )


def paragraphs(documents, strip_pattern, replace_invalid=True):
    """`example_from_text` on every document string.

    Args:
        documents: tf.string [B, D], one string per document ("" pads).
        strip_pattern: the RE2 pattern of leading or trailing whitespace
            (`Patterns.strip`).
        replace_invalid: replace invalid UTF-8 first (`clean`); False when
            the caller has done it or knows the text valid.

    Returns:
        `(text, batch, document, document_key, section_key)`: per
        paragraph, the joined text tf.string, the batch index, the
        document number within its example (documents without text not
        counted), and a document and a section number unique over the
        batch (non-decreasing; a new document also starts a new
        section); all [num_paragraphs].
    """
    num_documents = tf.shape(documents)[1]
    flat = tf.reshape(documents, [-1])
    if replace_invalid:
        flat = clean(flat)
    document_batch = tf.repeat(
        tf.range(tf.shape(documents)[0], dtype=tf.int32), num_documents
    )
    lines = tf.strings.split(flat, sep="\n")
    line_document = length_rows(lines.row_lengths())
    line_batch = tf.gather(document_batch, line_document)
    stripped = tf.strings.regex_replace(lines.flat_values, strip_pattern, "")
    is_first = tf.equal(
        tf.range(tf.shape(stripped)[0], dtype=tf.int64),
        tf.gather(lines.row_starts(), line_document),
    )
    separator = tf.equal(stripped, DOCUMENT_BREAK)
    section_break = tf.equal(stripped, SECTION_BREAK)
    content = tf.not_equal(stripped, "") & ~separator & ~section_break
    previous = tf.concat([[False], content[:-1]], 0) & ~is_first
    starts = content & ~previous
    document_key = tf.cumsum(tf.cast(is_first | separator, tf.int32)) - 1
    section_key = (
        tf.cumsum(tf.cast(is_first | separator | section_break, tf.int32)) - 1
    )
    paragraph = tf.cumsum(tf.cast(starts, tf.int32)) - 1
    num_paragraphs = tf.reduce_sum(tf.cast(starts, tf.int32))
    # An escaped marker is text, with its first backslash removed.
    text_lines = tf.strings.regex_replace(
        tf.boolean_mask(stripped, content), _UNESCAPE_PATTERN, r"\1"
    )
    joined = tf.RaggedTensor.from_value_rowids(
        text_lines,
        tf.boolean_mask(paragraph, content),
        nrows=num_paragraphs,
    )
    text = tf.strings.reduce_join(joined, axis=1, separator=" ")
    batch = tf.boolean_mask(line_batch, starts)
    key = tf.boolean_mask(document_key, starts)
    ordinal = group_rows(key)
    first = tf.math.unsorted_segment_min(ordinal, batch, tf.shape(documents)[0])
    document = ordinal - tf.gather(first, batch)
    return text, batch, document, key, tf.boolean_mask(section_key, starts)
