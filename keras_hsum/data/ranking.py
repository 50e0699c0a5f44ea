"""Paragraph ranking by tf-idf cosine similarity (Liu et al., 2018).

Liu et al. (2018), "Generating Wikipedia by Summarizing Long Sequences",
rank the paragraphs of the input by the tf-idf cosine similarity of each
paragraph to the article title; Liu & Lapata (2019) start from that ranking
and add a learned ranker trained on ROUGE-2 recall (see
`rouge2_recall_targets`).

Terms are lower-cased word tokens (`[^\\W_]+`, Unicode-aware). The inverse
document frequency is smoothed, idf(w) = ln((1 + N) / (1 + df(w))) + 1, over
the N paragraphs of one example unless a corpus-level `TfidfModel` is given.
Vectors are sparse (dicts), so a document 100x longer than the limits costs
time linear in its length, not quadratic.
"""

import collections
import math
import re

import numpy as np

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words(text):
    """Lower-cased word tokens of `text` (a list of str)."""
    return _WORD.findall(text.lower())


class TfidfModel:
    """Document frequencies over a set of texts.

    Args:
        texts: an iterable of str, each one "document" for df counting.
    """

    def __init__(self, texts=()):
        self.num_documents = 0
        self.document_frequency = collections.Counter()
        for text in texts:
            self.add(text)

    def add(self, text):
        self.num_documents += 1
        self.document_frequency.update(set(words(text)))

    def idf(self, word):
        df = self.document_frequency.get(word, 0)
        return math.log((1 + self.num_documents) / (1 + df)) + 1.0

    def vector(self, text):
        """The L2-normalised tf-idf vector of `text` as a dict word -> weight."""
        counts = collections.Counter(words(text))
        vector = {w: c * self.idf(w) for w, c in counts.items()}
        norm = math.sqrt(sum(v * v for v in vector.values()))
        if norm == 0.0:
            return {}
        return {w: v / norm for w, v in vector.items()}


def _dot(a, b):
    if len(a) > len(b):
        a, b = b, a
    return sum(v * b.get(w, 0.0) for w, v in a.items())


def _term_matrix(texts):
    """Sparse term counts of `texts` as parallel arrays (row, term, count)."""
    vocabulary = {}
    rows, terms = [], []
    for row, text in enumerate(texts):
        ids = [vocabulary.setdefault(w, len(vocabulary)) for w in words(text)]
        terms.extend(ids)
        rows.extend([row] * len(ids))
    size = max(len(vocabulary), 1)
    keys = np.asarray(rows, np.int64) * size + np.asarray(terms, np.int64)
    keys, counts = np.unique(keys, return_counts=True)
    return vocabulary, keys // size, keys % size, counts.astype(np.float64)


def tfidf_cosine(query, texts, model=None):
    """Cosine similarity of each text's tf-idf vector to the query's.

    Vectorised over all texts at once (sparse counts in numpy), so ranking
    the ~1,500 speaker turns of a meeting takes milliseconds.

    Args:
        query: str (a title or query).
        texts: a list of P str.
        model: an optional `TfidfModel`; by default document frequencies
            come from `texts` themselves.

    Returns:
        float32 array [P]; 0 for texts (or a query) without words.
    """
    texts = list(texts)
    scores = np.zeros((len(texts),), dtype=np.float32)
    query_counts = collections.Counter(words(query))
    if not texts or not query_counts:
        return scores
    vocabulary, rows, terms, counts = _term_matrix(texts)
    if model is None:
        num_documents = len(texts)
        df = np.bincount(terms, minlength=len(vocabulary))
        idf = np.log((1.0 + num_documents) / (1.0 + df)) + 1.0

        def query_idf(word):
            return math.log(1.0 + num_documents) + 1.0

    else:
        by_id = sorted(vocabulary.items(), key=lambda item: item[1])
        idf = np.array([model.idf(w) for w, _ in by_id], dtype=np.float64)
        query_idf = model.idf
    weights = counts * idf[terms]
    norms = np.sqrt(
        np.bincount(rows, weights * weights, minlength=len(texts)).astype(np.float64)
    )
    query_weights = np.zeros((len(vocabulary),), dtype=np.float64)
    query_norm = 0.0
    for word, count in query_counts.items():
        index = vocabulary.get(word)
        weight = count * (idf[index] if index is not None else query_idf(word))
        query_norm += weight * weight
        if index is not None:
            query_weights[index] = weight
    dots = np.bincount(
        rows, weights * query_weights[terms], minlength=len(texts)
    ).astype(np.float64)
    denominator = norms * math.sqrt(query_norm)
    np.divide(dots, denominator, out=dots, where=denominator > 0)
    dots[denominator == 0] = 0.0
    return dots.astype(np.float32)


def tfidf_similarity_matrix(texts, model=None):
    """Pairwise tf-idf cosine similarity of P texts: float32 [P, P]."""
    model = model or TfidfModel(texts)
    vectors = [model.vector(t) for t in texts]
    size = len(texts)
    matrix = np.zeros((size, size), dtype=np.float32)
    for i in range(size):
        matrix[i, i] = 1.0 if vectors[i] else 0.0
        for j in range(i + 1, size):
            matrix[i, j] = matrix[j, i] = _dot(vectors[i], vectors[j])
    return matrix


def rank_by_tfidf(query, texts, model=None):
    """Orders texts by decreasing tf-idf cosine to `query`.

    Ties (and an empty query) keep the original order, so ranking a text
    against nothing returns the reading order.

    Returns:
        `(order, scores)`: int32 [P], a permutation of range(P), best first;
        float32 [P] similarity of each text in its original position.
    """
    scores = tfidf_cosine(query or "", texts, model)
    order = np.argsort(-scores, kind="stable").astype(np.int32)
    return order, scores


def rouge2_recall_targets(texts, summary):
    """ROUGE-2 recall of each paragraph against the summary.

    The training target of HT's learned paragraph ranker (Liu & Lapata
    2019, §3): the fraction of the summary's bigrams that a paragraph
    covers, computed with rouge-score's tokenizer and Porter stemming.

    Returns:
        float32 array [P] in [0, 1].
    """
    from keras_hsum.data.rouge_overlap import RougeReference

    reference = RougeReference(summary)
    return np.array(
        [reference.score(text, n=2).recall for text in texts],
        dtype=np.float32,
    )
