"""Tests for keras_hsum.data.graphs against independent references."""

import re

import numpy as np
import pytest

from keras_hsum.data import graphs
import reference_structure as structure
from keras_hsum.data.corpora import sample_path
from keras_hsum.data.corpora import sample_tokenizer_path
from keras_hsum.data.ranking import TfidfModel
from keras_hsum.data.reader import read_jsonl
from keras_hsum.data.vocabulary import Vocabulary


@pytest.fixture(scope="module")
def vocabulary():
    return Vocabulary.load(sample_tokenizer_path())


def _examples(name, split="val", count=2):
    examples = []
    for example in read_jsonl(sample_path(name, split)):
        examples.append(example)
        if len(examples) == count:
            break
    return examples


@pytest.fixture(scope="module")
def real_structured(vocabulary):
    """HT rows of real examples: multi-document reviews and a paper."""
    result = []
    for example in _examples("fewsum_amazon"):
        result.append(structure.build_paragraphs(example, vocabulary, 16, 48))
    for example in _examples("scisummnet", count=1):
        result.append(structure.build_paragraphs(example, vocabulary, 24, 96))
    for example in _examples("qmsum_goldspan", count=1):
        result.append(
            structure.build_paragraphs(
                example, vocabulary, 12, 64, pack="section"
            )
        )
    return result


def numpy_tfidf_cosine(texts, corpus=None):
    """A dense transcription of smoothed tf-idf cosine similarity.

    Terms: lower-cased runs of letters/digits. idf = ln((1+N)/(1+df)) + 1
    with df over `corpus` (default: the texts themselves).
    """
    tokenize = lambda t: re.findall(r"[^\W_]+", t.lower())  # noqa: E731
    corpus = texts if corpus is None else corpus
    terms = sorted({w for t in list(texts) + list(corpus) for w in tokenize(t)})
    column = {w: i for i, w in enumerate(terms)}

    def term_matrix(rows):
        matrix = np.zeros((len(rows), len(terms)))
        for r, text in enumerate(rows):
            for w in tokenize(text):
                matrix[r, column[w]] += 1
        return matrix

    df = (term_matrix(corpus) > 0).sum(axis=0)
    idf = np.log((1 + len(corpus)) / (1 + df)) + 1
    x = term_matrix(texts) * idf
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    return x @ x.T


def test_similarity_graph_matches_numpy_tfidf_on_real_rows(real_structured):
    threshold = 0.1
    for structured in real_structured:
        texts = structured.texts
        got = graphs.similarity_graph(texts, threshold=threshold)
        cosine = numpy_tfidf_cosine(texts)
        expected = np.where(cosine < threshold, 0.0, cosine)
        # Entries within float error of the threshold may go either way.
        clear = np.abs(cosine - threshold) > 1e-5
        assert got.dtype == np.float32 and got.shape == (len(texts),) * 2
        np.testing.assert_allclose(got[clear], expected[clear], atol=1e-5)
        np.testing.assert_array_equal(got, got.T)
        assert (got >= 0).all() and (got <= 1 + 1e-6).all()
        np.testing.assert_allclose(np.diag(got), 1.0, atol=1e-6)
        np.testing.assert_array_equal(
            got, graphs.graph_for(structured, threshold=threshold)
        )


def test_similarity_graph_thresholds_keep_only_strong_edges(real_structured):
    texts = real_structured[2].texts
    full = graphs.similarity_graph(texts, threshold=0.0)
    np.testing.assert_allclose(full, numpy_tfidf_cosine(texts), atol=1e-5)
    for threshold in (0.05, 0.2, 0.5):
        cut = graphs.similarity_graph(texts, threshold=threshold)
        kept = cut > 0
        np.testing.assert_array_equal(kept, full >= threshold)
        np.testing.assert_array_equal(cut[kept], full[kept])


def test_similarity_graph_with_a_corpus_model(real_structured):
    corpus = [t for s in real_structured for t in s.texts]
    texts = real_structured[0].texts
    got = graphs.similarity_graph(texts, threshold=0.0, model=TfidfModel(corpus))
    np.testing.assert_allclose(
        got, numpy_tfidf_cosine(texts, corpus=corpus), atol=1e-5
    )


def test_similarity_graph_matches_scikit_learn(real_structured):
    text_module = pytest.importorskip("sklearn.feature_extraction.text")
    texts = real_structured[2].texts
    vectorizer = text_module.TfidfVectorizer(
        token_pattern=r"(?u)[^\W_]+", lowercase=True, smooth_idf=True, norm="l2"
    )
    x = vectorizer.fit_transform(texts)
    np.testing.assert_allclose(
        graphs.similarity_graph(texts, threshold=0.0),
        (x @ x.T).toarray(),
        atol=1e-5,
    )


def test_similarity_graph_edge_cases():
    graph = graphs.similarity_graph(["cats purr", "!!!", "cats purr loudly"])
    assert graph[1].tolist() == [0.0, 0.0, 0.0]  # a row without words
    assert graph[0, 2] > 0.5 and graph[0, 0] == 1.0
    assert graphs.similarity_graph([]).shape == (0, 0)
    with pytest.raises(ValueError, match="threshold"):
        graphs.similarity_graph(["a b"], threshold=1.5)


# -- discourse graph: hand-built cases --------------------------------------

PLAIN = [
    "the pump was broken for a week",
    "the new pump works well",
    "a technician fixed the valve",
    "the manual explains the setup",
]


def test_adjacency_edges_follow_reading_order_within_a_document():
    # Rows in rank order; reading order 0..3, the last row is another document.
    document_ids = [0, 0, 0, 1]
    paragraph_index = [2, 0, 1, 3]
    graph = graphs.discourse_graph(PLAIN, document_ids, paragraph_index)
    expected = np.zeros((4, 4))
    for a, b in ((1, 2), (2, 0)):  # positions 0-1 and 1-2
        expected[a, b] = expected[b, a] = 1
    np.testing.assert_array_equal(graph, expected)


def test_no_adjacency_over_a_dropped_row():
    graph = graphs.discourse_graph(PLAIN[:2], [0, 0], [0, 2])
    np.testing.assert_array_equal(graph, np.zeros((2, 2)))


def test_discourse_marker_edge_from_the_predecessor():
    texts = [
        "the pump was broken for a week",
        "However, the new pump works well.",
        "it rose, however, in spring",  # marker not at the start
        "In addition, a technician fixed the valve.",
        "Howevers are not markers",
    ]
    graph = graphs.discourse_graph(texts, [0] * 5, [0, 1, 2, 3, 4])
    expected = np.zeros((5, 5))
    for a in range(4):
        expected[a, a + 1] = expected[a + 1, a] = 1  # adjacency
    expected[0, 1] += 1  # "However," from row 0 into row 1
    expected[2, 3] += 1  # "In addition," from row 2 into row 3
    np.testing.assert_array_equal(graph, expected)
    undirected = graphs.discourse_graph(
        texts, [0] * 5, [0, 1, 2, 3, 4], directed=False
    )
    expected[1, 0] += 1
    expected[3, 2] += 1
    np.testing.assert_array_equal(undirected, expected)
    np.testing.assert_array_equal(undirected, undirected.T)


def test_marker_without_a_kept_predecessor_adds_nothing():
    texts = ["However, prices rose.", "the pump works"]
    graph = graphs.discourse_graph(texts, [0, 1], [0, 1])
    np.testing.assert_array_equal(graph, np.zeros((2, 2)))


def test_shared_entities_count_non_initial_capitalised_words():
    texts = [
        "We flew to Paris in May with Lufthansa.",  # Paris, May, Lufthansa
        "Our hotel in Paris was small. The staff of Lufthansa helped.",
        "Paris is lovely in spring.",  # sentence-initial: no entity
        "I read The Times about it.",  # "I", "The" are stop words
        "the Times had a piece on May and the weather.",
    ]
    graph = graphs.discourse_graph(texts, [0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    expected = np.zeros((5, 5))
    expected[0, 1] = expected[1, 0] = 2  # Paris, Lufthansa
    expected[0, 4] = expected[4, 0] = 1  # May
    expected[3, 4] = expected[4, 3] = 1  # Times
    np.testing.assert_array_equal(graph, expected)


def test_edge_weight_is_the_weighted_count_of_relations():
    texts = [
        "We met Alice and Bob there.",
        "Moreover, we saw Alice again.",
    ]
    counts = graphs.discourse_graph(texts, [0, 0], [0, 1])
    # 0 -> 1: adjacency + marker + one entity; 1 -> 0: adjacency + entity.
    np.testing.assert_array_equal(counts, [[0, 3], [2, 0]])
    weighted = graphs.discourse_graph(
        texts,
        [0, 0],
        [0, 1],
        adjacency_weight=0.5,
        marker_weight=2.0,
        entity_weight=0.25,
    )
    np.testing.assert_allclose(weighted, [[0, 2.75], [0.75, 0]])


def test_discourse_graph_rejects_misaligned_inputs():
    with pytest.raises(ValueError, match=r"document_ids.*\[2\]"):
        graphs.discourse_graph(["a", "b"], [0], [0, 1])
    with pytest.raises(ValueError, match="distinct"):
        graphs.discourse_graph(["a", "b"], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="kind"):
        graphs.graph_for(structure.Structured({}, [], None), kind="lexical")


# -- discourse graph: properties on real rows --------------------------------


def _reference_adjacency(document_ids, paragraph_index):
    size = len(document_ids)
    adjacency = np.zeros((size, size))
    for i in range(size):
        for j in range(size):
            if (
                document_ids[i] == document_ids[j]
                and abs(int(paragraph_index[i]) - int(paragraph_index[j])) == 1
            ):
                adjacency[i, j] = 1
    return adjacency


def test_discourse_graph_properties_on_real_rows(real_structured):
    for structured in real_structured:
        texts = structured.texts
        document_ids = structured.features["document_ids"]
        paragraph_index = structured.features["paragraph_index"]
        graph = graphs.graph_for(structured, kind="discourse")
        size = len(texts)
        assert graph.dtype == np.float32 and graph.shape == (size, size)
        assert (graph >= 0).all() and (np.diag(graph) == 0).all()
        np.testing.assert_array_equal(graph, np.round(graph))  # counts
        adjacency_only = graphs.graph_for(
            structured, kind="discourse", marker_weight=0, entity_weight=0
        )
        np.testing.assert_array_equal(
            adjacency_only, _reference_adjacency(document_ids, paragraph_index)
        )
        entity_only = graphs.graph_for(
            structured, kind="discourse", adjacency_weight=0, marker_weight=0
        )
        np.testing.assert_array_equal(entity_only, entity_only.T)
        marker_only = graph - adjacency_only - entity_only
        for i, j in zip(*np.nonzero(marker_only)):
            assert adjacency_only[i, j] == 1
            assert paragraph_index[j] == paragraph_index[i] + 1
            assert graphs.opens_with_marker(texts[j]) is not None


def test_discourse_graph_on_rows_of_a_sentence_builder(vocabulary):
    example = _examples("fewsum_yelp", count=1)[0]
    structured = structure.build_sentences(example, vocabulary, 20, 40)
    graph = graphs.graph_for(
        structured, kind="discourse", marker_weight=0, entity_weight=0
    )
    document_ids = structured.features["document_ids"]
    np.testing.assert_array_equal(
        graph, _reference_adjacency(document_ids, np.arange(len(document_ids)))
    )


def test_row_normalize():
    graph = np.array([[0.0, 2.0, 2.0], [0.0, 0.0, 0.0], [1.0, 3.0, 0.0]])
    normalized = graphs.row_normalize(graph)
    np.testing.assert_allclose(
        normalized, [[0, 0.5, 0.5], [0, 0, 0], [0.25, 0.75, 0]]
    )
    batched = graphs.row_normalize(np.stack([graph, 2 * graph]))
    np.testing.assert_allclose(batched[1], normalized)
    assert not np.isnan(graphs.row_normalize(np.zeros((2, 2)))).any()
    with pytest.raises(ValueError, match="square"):
        graphs.row_normalize(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="non-negative"):
        graphs.row_normalize(-np.ones((2, 2)))


def test_entities_and_markers_helpers():
    assert graphs.entities("Yesterday NASA and Boeing met. Then IBM joined.") == {
        "NASA",
        "Boeing",
        "IBM",
    }
    assert graphs.opens_with_marker('"As a result," he said') == "as a result"
    assert graphs.opens_with_marker("As results go, fine") is None
    markers = graphs.DISCOURSE_MARKERS
    assert len(set(markers)) == len(markers)
    assert all(m == m.lower().strip() for m in markers)
