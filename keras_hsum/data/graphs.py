"""Paragraph graphs for HT's graph-informed attention (Liu & Lapata, 2019).

HT can replace the learned inter-paragraph attention weights of some heads
by a fixed graph G [P, P] over the input paragraphs (appendix of the
paper): a lexical *similarity* graph or an approximate *discourse* graph.
This module builds both for the rows of one structured example. The graphs
are **raw** edge weights: the `InterParagraphAttention` layer row-normalises
them (`row_normalize` does the same in numpy, for inspection). Batching pads
G with zeros, like every padded row.

Training and serving build these graphs in the graph, inside
`keras_hsum.data.structurer.TextStructurer(..., graph_kind=...)`
(`keras_hsum.data.structuring.graphs`); this module is their Python
reference (the tests compare the two), and `label_extras.paragraph_graph`
still uses it for the families other than "paragraphs" and for a
corpus-level tf-idf `model`.

Similarity graph (Erkan & Radev's LexRank graph as HT uses it)
--------------------------------------------------------------
G[i, j] is the tf-idf cosine similarity of rows i and j
(`ranking.tfidf_similarity_matrix`: lower-cased word terms, smoothed idf
ln((1 + N) / (1 + df)) + 1 over the P rows unless a corpus-level
`TfidfModel` is given, L2-normalised vectors); entries below `threshold`
are set to 0. HT removes low-weight edges with a threshold whose value was
lost from the paper text we have; 0.2 is our default. The diagonal keeps
the self-similarity, 1 for a row with words and 0 for a row without: a
paragraph attends to itself, as in learned self-attention, and every
non-empty row has a positive sum, so row normalisation never divides by 0.

Discourse graph (an approximation of Christensen et al. 2013's ADG)
--------------------------------------------------------------------
Christensen et al.'s approximate discourse graph links sentences by
deverbal-noun reference, event/entity continuation, discourse markers,
inferred edges and co-reference, using a parser, an NER tagger and a
co-reference system. HT's simplified version (its appendix) works on
paragraphs and keeps two relations: co-occurring named entities (spaCy NER,
exact match) and explicit discourse markers connecting paragraphs adjacent
in a source document. We approximate further, with no tagger:

1. **Adjacency** (not in HT's list, kept as the backbone of every ADG:
   consecutive text is related): rows i and j of one document whose
   reading-order positions differ by exactly 1 get one relation, both
   ways. Rows whose neighbour was dropped by ranking (top-P) have no
   adjacency edge to it: adjacency is never bridged over a missing row, and
   never crosses documents.
2. **Discourse marker** (HT, Christensen): a row whose first words are an
   explicit discourse marker from `DISCOURSE_MARKERS` ("However, ...",
   "In addition, ...", case-insensitive, whole words) gets one relation
   *from* its predecessor (the row of the same document just before it in
   reading order, when it was kept): G[pred, row] += 1. With
   `directed=False` the relation is added both ways.
3. **Shared entities** (HT's e_ij): named entities are approximated by
   capitalised word tokens (first character upper-case, at least 2
   characters) that are neither sentence-initial (first word of a sentence
   of `split_sentences(row text)`) nor stop words (`STOP_WORDS`). Rows i != j
   get one relation per distinct entity string they share (exact,
   case-sensitive match), both ways, across documents too. Entity types and
   multi-word names are not recognised ("New York" gives "New" and "York").

Edge weight = the number of relations found between the two rows, each
relation kind weighted by `adjacency_weight`, `marker_weight`,
`entity_weight` (all 1 by default: a plain count, HT's weighted sum with
equal weights). The diagonal is 0. `graph[i, j]` is the edge from row i to
row j; adjacency and entity relations are symmetric, marker relations are
not (unless `directed=False`).
"""

import re

import numpy as np

from keras_hsum.data.ranking import tfidf_similarity_matrix
from keras_hsum.data.ranking import words
from keras_hsum.data.sentences import split_sentences
from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import PARAGRAPH_INDEX

# Explicit discourse markers that open a paragraph. The readable part of HT's
# appendix list (comparatively, furthermore, at the same time, immediately,
# instead, to be sure, likewise, nevertheless, nonetheless, notably,
# regardless, similarly, unlike, in addition, in turn, in exchange, in this
# case, in any event, finally, later, specifically, as a result, for example,
# in fact), plus the common connectives it lost with its stop words (also,
# however, indeed, meanwhile, moreover, otherwise, then, therefore, thus) and
# a few more (PDTB-style explicit connectives).
DISCOURSE_MARKERS = (
    "additionally",
    "also",
    "as a result",
    "at the same time",
    "besides",
    "but",
    "comparatively",
    "consequently",
    "conversely",
    "finally",
    "for example",
    "for instance",
    "furthermore",
    "hence",
    "however",
    "immediately",
    "in addition",
    "in any event",
    "in contrast",
    "in exchange",
    "in fact",
    "in other words",
    "in this case",
    "in turn",
    "indeed",
    "instead",
    "later",
    "likewise",
    "meanwhile",
    "moreover",
    "nevertheless",
    "nonetheless",
    "notably",
    "on the other hand",
    "otherwise",
    "regardless",
    "similarly",
    "specifically",
    "subsequently",
    "then",
    "therefore",
    "thus",
    "to be sure",
    "unlike",
)

# Function words that are capitalised mid-sentence often enough (titles,
# "I", after a colon) to be mistaken for names.
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because
    been before being below between both but by can could did do does doing
    down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me
    more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why
    will with would you your yours yourself yourselves yes ok okay oh well
    also however mr mrs ms dr
    """.split()
)

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def check_threshold(threshold):
    """Raises a ValueError unless `threshold` is a number in [0, 1] (the
    similarity graph's edge threshold; the structurer checks it too)."""
    if not isinstance(threshold, (int, float, np.floating)) or not (
        0.0 <= float(threshold) <= 1.0
    ):
        raise ValueError(
            "`threshold` must be a number in [0, 1] (a cosine similarity), "
            f"received {threshold!r}."
        )


def similarity_graph(texts, threshold=0.2, model=None):
    """HT's similarity graph: thresholded tf-idf cosine similarity.

    Args:
        texts: a list of P str, the rows (paragraphs).
        threshold: entries strictly below it become 0 (in [0, 1]).
        model: an optional `ranking.TfidfModel` (corpus-level document
            frequencies); by default idf is computed over `texts`.

    Returns:
        float32 array [P, P], symmetric, entries in [0, 1]; the diagonal is
        1 for rows with words and 0 for rows without (see the module
        docstring). Raw weights: not row-normalised.

    Example:
    >>> graph = similarity_graph(["cats purr", "cats purr loudly", "dogs bark"])
    >>> float(graph[0, 2]), bool(graph[0, 1] > 0.5)
    (0.0, True)
    """
    check_threshold(threshold)
    texts = list(texts)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    graph = tfidf_similarity_matrix(texts, model=model)
    graph[graph < threshold] = 0.0
    return graph.astype(np.float32)


def opens_with_marker(text, markers=DISCOURSE_MARKERS):
    """Whether `text` starts with one of `markers` (whole words, any case).

    Args:
        text: a str.
        markers: lower-case markers, single words or phrases.

    Returns:
        The marker found (str), or None.
    """
    head = words(text[:200])
    for marker in sorted(markers, key=len, reverse=True):
        marker_words = marker.split()
        if head[: len(marker_words)] == marker_words:
            return marker
    return None


def entities(text, stop_words=STOP_WORDS):
    """Approximate named entities of `text`: its non-initial capitalised words.

    Args:
        text: a str (one row; it is split with `split_sentences`).
        stop_words: lower-case words never taken as entities.

    Returns:
        A set of str: word tokens of at least 2 characters whose first
        character is upper-case, that are not the first word of a sentence
        and whose lower-case form is not a stop word.
    """
    found = set()
    for sentence in split_sentences(text):
        for token in _TOKEN.findall(sentence)[1:]:
            if (
                len(token) >= 2
                and token[0].isupper()
                and token.lower() not in stop_words
            ):
                found.add(token)
    return found


def _check_rows(texts, document_ids, paragraph_index):
    size = len(texts)
    document_ids = np.asarray(document_ids)
    paragraph_index = np.asarray(paragraph_index)
    for name, value in (
        (DOCUMENT_IDS, document_ids),
        (PARAGRAPH_INDEX, paragraph_index),
    ):
        if value.shape != (size,):
            raise ValueError(
                f"`{name}` must have shape [P] = [{size}] (one entry per "
                f"text), received shape {list(value.shape)}."
            )
    if size and len(set(paragraph_index.tolist())) != size:
        raise ValueError(
            "`paragraph_index` must give each row a distinct reading-order "
            f"position, received {paragraph_index.tolist()}."
        )
    return document_ids.astype(np.int64), paragraph_index.astype(np.int64)


def discourse_graph(
    texts,
    document_ids,
    paragraph_index,
    adjacency_weight=1.0,
    marker_weight=1.0,
    entity_weight=1.0,
    directed=True,
    markers=DISCOURSE_MARKERS,
    stop_words=STOP_WORDS,
):
    """An approximate discourse graph over rows (see the module docstring).

    Args:
        texts: a list of P str, the rows.
        document_ids: int [P], the document of each row.
        paragraph_index: int [P], distinct reading-order positions of the
            rows (rows of one document that are adjacent in reading order
            differ by 1).
        adjacency_weight: weight of an adjacency relation.
        marker_weight: weight of a discourse-marker relation.
        entity_weight: weight of one shared entity.
        directed: marker relations go only from the predecessor to the row
            that opens with the marker (True) or both ways (False).
        markers: the discourse markers (lower case).
        stop_words: words never taken as entities (lower case).

    Returns:
        float32 array [P, P] >= 0, zero diagonal; `graph[i, j]` is the
        weighted count of relations from row i to row j. Raw weights: not
        row-normalised.

    Example:
    >>> texts = ["Rain fell.", "However, it stopped."]
    >>> discourse_graph(texts, [0, 0], [0, 1]).tolist()
    [[0.0, 2.0], [1.0, 0.0]]
    """
    texts = list(texts)
    document_ids, paragraph_index = _check_rows(
        texts, document_ids, paragraph_index
    )
    size = len(texts)
    graph = np.zeros((size, size), dtype=np.float64)
    row_at = {
        (int(d), int(p)): i
        for i, (d, p) in enumerate(zip(document_ids, paragraph_index))
    }
    for i in range(size):
        predecessor = row_at.get(
            (int(document_ids[i]), int(paragraph_index[i]) - 1)
        )
        if predecessor is None:
            continue
        graph[predecessor, i] += adjacency_weight
        graph[i, predecessor] += adjacency_weight
        if opens_with_marker(texts[i], markers) is not None:
            graph[predecessor, i] += marker_weight
            if not directed:
                graph[i, predecessor] += marker_weight
    row_entities = [entities(text, stop_words) for text in texts]
    for i in range(size):
        if not row_entities[i]:
            continue
        for j in range(i + 1, size):
            shared = len(row_entities[i] & row_entities[j])
            if shared:
                graph[i, j] += entity_weight * shared
                graph[j, i] += entity_weight * shared
    return graph.astype(np.float32)


def graph_for(structured, kind="similarity", **kwargs):
    """The graph of one `Structured`, aligned with its rows.

    Works on any family's rows; the "paragraphs" family gives rows in rank
    order with `features["paragraph_index"]` their reading-order position,
    the other builders keep reading order (row i is at position i).

    Args:
        structured: a `structure.Structured` (one example, rows [P, T]).
        kind: `"similarity"` (`similarity_graph`) or `"discourse"`
            (`discourse_graph`).
        **kwargs: passed to that function (`threshold`, `model`, weights...).

    Returns:
        float32 array [P, P], row i and column i are `structured.texts[i]`.
    """
    texts = list(structured.texts)
    if kind == "similarity":
        return similarity_graph(texts, **kwargs)
    if kind == "discourse":
        features = structured.features
        size = len(texts)
        document_ids = features.get(
            DOCUMENT_IDS, np.zeros((size,), dtype=np.int32)
        )
        paragraph_index = features.get(
            PARAGRAPH_INDEX, np.arange(size, dtype=np.int32)
        )
        return discourse_graph(texts, document_ids, paragraph_index, **kwargs)
    raise ValueError(
        f"`kind` must be 'similarity' or 'discourse', received {kind!r}."
    )


def row_normalize(graph):
    """Divides every row of a graph by its sum; all-zero rows stay zero.

    What `InterParagraphAttention` does to the graph inside the model,
    here in numpy for inspection.

    Args:
        graph: float array [..., P, P] >= 0.

    Returns:
        float32 array [..., P, P]; each row with a positive sum sums to 1.
    """
    graph = np.asarray(graph, dtype=np.float64)
    if graph.ndim < 2 or graph.shape[-1] != graph.shape[-2]:
        raise ValueError(
            "`graph` must be square in its last two axes [..., P, P], "
            f"received shape {list(graph.shape)}."
        )
    if (graph < 0).any():
        raise ValueError(
            "`graph` must be non-negative (edge weights), received a minimum "
            f"of {graph.min()}."
        )
    sums = graph.sum(axis=-1, keepdims=True)
    return np.divide(
        graph, sums, out=np.zeros_like(graph), where=sums > 0
    ).astype(np.float32)
