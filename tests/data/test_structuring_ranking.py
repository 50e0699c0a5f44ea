"""Tests for keras_hsum.data.structuring.ranking: the graph's tf-idf terms,
scores and ranks against their definitions (RE2's split of ICU lower-cased
text; the Python `keras_hsum.data.ranking.tfidf_cosine`; a stable sort)."""

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from keras_hsum.data import ranking as python_ranking
from keras_hsum.data.structuring import ranking
from keras_hsum.data.structuring.character_classes import patterns

# ASCII, upper-case letters whose lower case is longer or context-dependent
# (Turkish dotted I, Greek sigma), combining marks, digits that are not
# ASCII, CJK, 4-byte code points, Unicode spaces, and the underscore (not a
# word character).
_PIECES = list("aZ09_ -.,'\t\n") + [
    "é", "É", "Σ", "ς", "İ", "ı", "数", "\u0301", "\U0001F600", "\U00010400",
    "\u00a0", "\u2028", "ǅ", "ﬃ", "K", "Ⅻ", "²", "٣",
]


def _random_texts(random, count):
    texts = []
    for _ in range(count):
        if random.random() < 0.25:  # raw bytes, mostly not valid UTF-8
            texts.append(bytes(random.integers(0, 256, random.integers(0, 24)).astype(np.uint8)))
        else:
            texts.append("".join(random.choice(_PIECES, random.integers(0, 30))).encode())
    return texts


def _regex_words(texts, pattern):
    words = tf_text.regex_split(tf.strings.lower(texts, encoding="utf-8"), pattern, "")
    return words.flat_values, words.value_rowids()


def test_lowered_words_equal_the_regex_split_of_icu_lower_cased_text():
    """On text ICU lower-cases to other lengths, invalid UTF-8, empty texts
    and no texts; and for a pattern of another form (the regex's path)."""
    random = np.random.default_rng(0)
    nonword = patterns().nonword
    # Texts are split independently: one batch holds all the random ones.
    batches = [[], [b""], [b"", b" ", b"x"], [b"\xc3", b"\xe2\x82", b"\xed\xa0\x80a"]]
    batches.append(_random_texts(random, 400))
    for pattern in (nonword, "[^a-z0-9]+"):
        words, expected = (
            tf.function(
                lambda texts, pattern=pattern, f=f: f(texts, pattern),
                input_signature=[tf.TensorSpec([None], tf.string)], autograph=False,
            )
            for f in (ranking.lowered_words, _regex_words)
        )
        # The texts given in parts (one empty) read as their concatenation.
        in_parts = tf.function(
            lambda a, b, pattern=pattern: ranking.lowered_words(
                [a, tf.constant([], tf.string), b], pattern
            ),
            input_signature=[tf.TensorSpec([None], tf.string)] * 2, autograph=False,
        )
        for texts in batches:
            half = len(texts) // 2
            texts = tf.constant(texts, tf.string, shape=[len(texts)])
            expected_words, expected_rows = expected(texts)
            for got_words, got_rows in (words(texts), in_parts(texts[:half], texts[half:])):
                np.testing.assert_array_equal(got_words.numpy(), expected_words)
                np.testing.assert_array_equal(got_rows.numpy(), expected_rows)
                assert got_rows.dtype == tf.int32


def test_tfidf_scores_and_ranks_equal_the_python_reference():
    """Every example's scores equal `tfidf_cosine` of its rows and query
    (to float32 rounding); ranks are a stable sort by decreasing score."""
    random = np.random.default_rng(1)
    vocabulary = ["Model", "model", "graph", "data", "the", "café", "Café", "x2",
                  "数据", "sum_mary", "ΟΔΟΣ", "οδος", "2019"]

    def text():
        return " ".join(random.choice(vocabulary, random.integers(0, 10)))

    examples = [
        (text(), [text() for _ in range(random.integers(1, 9))]) for _ in range(12)
    ]
    examples.append(("", ["graph data", ""]))  # no query word: every score 0
    texts = [t for _, rows in examples for t in rows]
    batch = np.repeat(np.arange(len(examples)), [len(rows) for _, rows in examples])
    scores = ranking.tfidf_scores(
        tf.constant(texts), tf.constant(batch, tf.int32),
        tf.constant([q for q, _ in examples]), len(examples), patterns().nonword,
    ).numpy()
    ranks = ranking.rank(
        tf.constant(scores), tf.constant(batch, tf.int32), len(examples)
    ).numpy()
    for b, (query, rows) in enumerate(examples):
        mine = batch == b
        np.testing.assert_allclose(
            scores[mine], python_ranking.tfidf_cosine(query, rows), rtol=1e-6, atol=1e-7
        )
        order = np.argsort(-scores[mine], kind="stable")
        np.testing.assert_array_equal(ranks[mine][order], np.arange(len(rows)))
    assert scores[batch == len(examples) - 1].tolist() == [0.0, 0.0]
