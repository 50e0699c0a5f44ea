"""HT's paragraph graphs over the kept rows, in the graph.

The graph versions of `keras_hsum.data.graphs.similarity_graph` and
`discourse_graph` (their reference; that module's docstring defines both),
built from the rows' texts, documents and reading-order positions. They
lower-case with ICU (tf-idf terms, discourse markers, the stop-word test of
entities), and their cosines are summed in another order than the
reference's float64 dot products: a cosine within one float32 ulp of
`threshold` may fall on the other side of it. On the bundled
qmsum_goldspan and fewsum validation examples every graph is equal
(`tests/data/test_structurer_graphs.py`).

Words are cut as `tf_text.regex_split(text, Patterns.nonword)` cuts them,
for less: a static RE2 replacement leaves ASCII spaces alone between them
(`_spaced`) and a whitespace split cuts at the spaces; for entities a
second replacement first keeps only the words that can be entities
(`_candidates`). The discourse markers are one full match of each row's
head.
"""

import functools

import tensorflow as tf

from keras_hsum.data.structuring.character_classes import character_classes
from keras_hsum.data.structuring.character_classes import escape
from keras_hsum.data.structuring.segments import per_example_terms
from keras_hsum.data.structuring.sentences import split_sentences
from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import PARAGRAPH_INDEX
from keras_hsum.features import PARAGRAPH_MASK

# The options of each paragraph graph (`keras_hsum.data.graphs`) that the
# structurer builds in the graph, with their defaults.
GRAPH_OPTIONS = {
    "similarity": {"threshold": 0.2},
    "discourse": {
        "adjacency_weight": 1.0,
        "marker_weight": 1.0,
        "entity_weight": 1.0,
        "directed": True,
        "markers": None,  # graphs.DISCOURSE_MARKERS
        "stop_words": None,  # graphs.STOP_WORDS
    },
}


def check_graph(kind, options):
    """Validates `graph_kind` / `graph_options`.

    Returns:
        `(kind, options with defaults)`, or `(None, None)` without a kind.

    Raises:
        ValueError: for an unknown kind or option, or a bad option value.
    """
    if kind is None:
        if options:
            raise ValueError(
                "`graph_options` are used only with `graph_kind` ('similarity' "
                f"or 'discourse'); received graph_options={options!r} without it."
            )
        return None, None
    if kind not in GRAPH_OPTIONS:
        raise ValueError(
            "`graph_kind` must be 'similarity' or 'discourse' (or absent), "
            f"received {kind!r}."
        )
    options = dict(options or {})
    unknown = sorted(set(options) - set(GRAPH_OPTIONS[kind]))
    if unknown:
        raise ValueError(
            f"Unknown graph_options {unknown} for graph_kind={kind!r}; it "
            f"accepts {sorted(GRAPH_OPTIONS[kind])} (a corpus-level tf-idf "
            "`model` is not built in the graph: idf is over the rows)."
        )
    from keras_hsum.data import graphs

    options = dict(GRAPH_OPTIONS[kind], **options)
    if kind == "similarity":
        graphs.check_threshold(options["threshold"])
    else:
        for name in ("adjacency_weight", "marker_weight", "entity_weight"):
            if not isinstance(options[name], (int, float)) or isinstance(
                options[name], bool
            ):
                raise ValueError(
                    f"`{name}` must be a number, received {options[name]!r}."
                )
        if not isinstance(options["directed"], bool):
            raise ValueError(
                f"`directed` must be True or False, received {options['directed']!r}."
            )
        for name, default in (
            ("markers", graphs.DISCOURSE_MARKERS),
            ("stop_words", graphs.STOP_WORDS),
        ):
            value = default if options[name] is None else options[name]
            if isinstance(value, str) or not all(isinstance(w, str) for w in value):
                raise ValueError(
                    f"`{name}` must be a collection of str, received {value!r}."
                )
            options[name] = tuple(sorted(set(value)))
    return kind, options


def paragraph_graph(features, kind, options, patterns):
    """HT's paragraph graph over the kept rows.

    Args:
        features: the structured features: `unit_texts` tf.string [B,P]
            ("" pads), `paragraph_mask` bool [B,P], `document_ids` and
            `paragraph_index` int32 [B,P].
        kind: `"similarity"` or `"discourse"`.
        options: `check_graph`'s options of that kind.
        patterns: the structuring `Patterns`.

    Returns:
        float32 [B,P,P] (static P), the raw edge weights; 0 for padding.
    """
    texts = features["unit_texts"]
    valid = features[PARAGRAPH_MASK]
    if kind == "similarity":
        return _similarity_graph(texts, valid, options)
    return _discourse_graph(
        texts, valid, features[DOCUMENT_IDS], features[PARAGRAPH_INDEX],
        options, patterns,
    )


def _similarity_graph(texts, valid, options):
    """`graphs.similarity_graph` of each example's kept rows.

    tf-idf vectors over the example's P' real rows (terms: lower-cased
    `[^\\W_]+` words; idf ln((1 + P') / (1 + df)) + 1; float64), L2
    normalised; G = X X^T, entries below `threshold` set to 0, the
    diagonal 1 for a row with words and 0 without.

    Args:
        texts: tf.string [B,P] ("" pads).
        valid: bool [B,P].

    Returns:
        float32 [B,P,P].
    """
    P = texts.shape[1]
    num_batch = tf.shape(texts)[0]
    # `ranking.lowered_words` gives the same words, for less on long ASCII
    # rows (discourse recipe: 0.12 ms/example) and for more on others
    # (2.4x on CJK-like rows; HT's paragraphs: the same).
    word_row, words = _split(
        _spaced(tf.strings.lower(tf.reshape(texts, [-1]), encoding="utf-8"))
    )
    word_batch = word_row // P
    local, size = per_example_terms(words, word_batch, num_batch)
    # Counts of whole numbers: any order of summing them is exact.
    counts = tf.reshape(
        tf.math.unsorted_segment_sum(
            tf.ones_like(local, tf.float64), word_row * size + local,
            num_batch * P * size,
        ),
        tf.stack([num_batch, P, size]),
    )
    rows = tf.reduce_sum(tf.cast(valid, tf.float64), axis=1)[:, None, None]
    document_frequency = tf.reduce_sum(
        tf.cast(counts > 0, tf.float64), axis=1, keepdims=True
    )
    weights = counts * (
        tf.math.log((1.0 + rows) / (1.0 + document_frequency)) + 1.0
    )
    norms = tf.sqrt(tf.reduce_sum(weights * weights, axis=2, keepdims=True))
    vectors = weights / tf.where(norms > 0, norms, 1.0)
    cosine = tf.cast(tf.matmul(vectors, vectors, transpose_b=True), tf.float32)
    has_words = norms[:, :, 0] > 0
    cosine = tf.linalg.set_diag(cosine, tf.cast(has_words, tf.float32))
    threshold = tf.constant(options["threshold"], tf.float32)
    return tf.where(cosine < threshold, 0.0, cosine)


def _discourse_graph(texts, valid, document, position, options, patterns):
    """`graphs.discourse_graph` of each example's kept rows.

    Rows i, j of one document at reading-order positions p and p + 1
    are adjacent (`adjacency_weight`, both ways); j opening with a
    marker (its first words, lower-cased, of its first 200 characters)
    adds `marker_weight` from i to j (both ways unless `directed`);
    each distinct entity two rows share adds `entity_weight` both ways.

    Args:
        texts: tf.string [B,P] ("" pads).
        valid: bool [B,P].
        document: int32 [B,P], the document of each row.
        position: int32 [B,P], its reading-order position.

    Returns:
        float32 [B,P,P], zero diagonal.
    """
    both = valid[:, :, None] & valid[:, None, :]
    # follows[b, i, j]: row j comes right after row i in one document.
    follows = (
        both
        & tf.equal(document[:, :, None], document[:, None, :])
        & tf.equal(position[:, None, :] - position[:, :, None], 1)
    )
    adjacent = follows | tf.transpose(follows, [0, 2, 1])
    opens = _opens_with_marker(texts, options["markers"])
    marked = follows & opens[:, None, :]
    if not options["directed"]:
        marked = marked | tf.transpose(marked, [0, 2, 1])
    graph = (
        tf.cast(adjacent, tf.float64) * options["adjacency_weight"]
        + tf.cast(marked, tf.float64) * options["marker_weight"]
        + _shared_entities(texts, options["stop_words"], patterns)
        * options["entity_weight"]
    )
    return tf.cast(graph, tf.float32)


def _opens_with_marker(texts, markers):
    """`graphs.opens_with_marker` on every row: bool [B,P].

    Each row's head (its first 200 characters, lower-cased) with its
    non-word runs made ASCII spaces (`_spaced`) is matched once against
    all markers: spaces, a marker's words separated by spaces, then the
    end or a space. Its words are the head's words, so this holds exactly
    when the head's first words are the marker's. A marker word holding a
    non-word character equals no word and is left out, as is a marker of
    no words.
    """
    listed = sorted(
        {
            tuple(marker.split())
            for marker in markers
            if marker.split() and all(word.isalnum() for word in marker.split())
        }
    )
    if not listed:
        return tf.zeros(tf.shape(texts), tf.bool)
    head = tf.strings.lower(
        tf.strings.substr(tf.reshape(texts, [-1]), 0, 200, unit="UTF8_CHAR"),
        encoding="utf-8",
    )
    alternatives = "|".join(
        " +".join(escape(word) for word in words) for words in listed
    )
    found = tf.strings.regex_full_match(
        _spaced(head), f"(?s) *(?:{alternatives})(?: .*)?"
    )
    return tf.reshape(found, tf.shape(texts))


def _shared_entities(texts, stop_words, patterns):
    """Distinct entities each pair of rows shares: float64 [B,P,P].

    `graphs.entities`: word tokens of at least 2 characters, capitalised,
    not the first of a sentence (`split_sentences` in the graph), whose
    lower-case form is no stop word. The diagonal is 0.
    """
    P = texts.shape[1]
    num_batch = tf.shape(texts)[0]
    sentence_text, sentence_row = split_sentences(tf.reshape(texts, [-1]), patterns)
    # Only the words that can be entities (`_candidates`) become strings;
    # lower-casing (ICU, per string) and the stop-word match run on them.
    sentence, values = _split(
        tf.strings.regex_replace(_spaced(sentence_text), _candidates(), " ")
    )
    row = tf.gather(sentence_row, sentence)
    stop_pattern = "(?:" + "|".join(escape(word) for word in stop_words) + ")"
    entity = ~tf.strings.regex_full_match(
        tf.strings.lower(values, encoding="utf-8"), stop_pattern
    )
    values = tf.boolean_mask(values, entity)
    row = tf.boolean_mask(row, entity)
    batch = row // P
    local, size = per_example_terms(values, batch, num_batch)
    present = tf.cast(
        tf.scatter_nd(
            tf.stack([batch, row % P, local], 1),
            tf.ones_like(local),
            tf.stack([num_batch, P, size]),
        )
        > 0,
        tf.float64,
    )
    shared = tf.matmul(present, present, transpose_b=True)
    return tf.linalg.set_diag(shared, tf.zeros(tf.shape(shared)[:2], tf.float64))


def _split(spaced):
    """`spaced` (tf.string [n], `_spaced` text) cut at runs of ASCII
    whitespace, which no word character is.

    Returns:
        `(row, words)`: int32 [W], the string each word comes from, and
        tf.string [W], in order (no ragged tensor).
    """
    indices, words, _ = tf.raw_ops.StringSplitV2(input=spaced, sep="")
    return tf.cast(indices[:, 0], tf.int32), words


def _spaced(texts):
    """`texts` (tf.string [n]) with each non-word run that holds a
    character other than an ASCII space replaced by one space: tf.string
    [n], the same words (`regex_split(texts, Patterns.nonword)`'s),
    separated by runs of ASCII spaces. Most non-word runs are one space
    between two words, so RE2 restarts once per punctuation run, where
    `regex_split` restarts once per word."""
    return tf.strings.regex_replace(texts, _separators(), " ")


@functools.lru_cache(maxsize=None)
def _separators():
    """RE2: a whole run of non-word characters (`Patterns.nonword`'s class)
    that holds one other than an ASCII space: (spaces, such a character)
    repeated, then spaces. The class once: RE2 builds a DFA of it within
    its memory budget."""
    other = f"[^{character_classes()['alnum']} ]"
    return f"(?: *{other})+ *"


@functools.lru_cache(maxsize=None)
def _candidates():
    """RE2 over `_spaced` text (words separated by ASCII spaces): what is
    no entity candidate, to be replaced by a space. Either the first word
    (`^ *[^ ]+`: `graphs.entities` skips each sentence's first word), or
    a run of words with their spaces, each starting with a character that
    is not upper-case or a single upper-case character, then spaces or
    the end. What is left are the words of 2 or more characters starting
    with an upper-case one (`Patterns.capitalised`), apart from the first,
    separated by spaces."""
    upper = character_classes()["upper"]
    other = f"(?:[^{upper} ][^ ]*|[{upper}])"
    return f"^ *[^ ]+|(?: +{other})+(?: +|$)"
