"""Tests for keras_hsum.data.ranking against dense numpy / rouge-score."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from rouge_score import rouge_scorer

from keras_hsum.data import ranking


def numpy_tfidf(query, texts, corpus=None):
    """Dense transcription of the documented tf-idf cosine.

    Terms: lower-cased runs of Unicode letters/digits. tf: raw counts.
    idf(w) = ln((1 + N) / (1 + df(w))) + 1 with N and df over `corpus`
    (default: the texts). Vectors are L2-normalised; the score is their dot
    product (0 for an empty vector).
    """
    corpus = texts if corpus is None else corpus
    tokenize = lambda t: re.findall(r"[^\W_]+", t.lower())  # noqa: E731
    vocab = sorted({w for t in [query, *texts, *corpus] for w in tokenize(t)})
    index = {w: i for i, w in enumerate(vocab)}

    def counts(text):
        row = np.zeros(len(vocab))
        for w in tokenize(text):
            row[index[w]] += 1
        return row

    df = np.sum([counts(t) > 0 for t in corpus], axis=0) if corpus else 0
    idf = np.log((1 + len(corpus)) / (1 + df)) + 1
    matrix = np.stack([counts(t) for t in [query, *texts]]) * idf
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit[1:] @ unit[0], unit[1:] @ unit[1:].T


_WORDS = st.sampled_from(
    ["model", "Model", "data", "graph", "sum_mary", "attention", "café",
     "naïve", "x2", "2019", "the", "of", "data-set", "数据"]
)
_TEXT = st.lists(_WORDS, max_size=12).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(_TEXT, st.lists(_TEXT, min_size=1, max_size=8))
def test_tfidf_cosine_equals_dense_numpy(query, texts):
    expected, _ = numpy_tfidf(query, texts)
    got = ranking.tfidf_cosine(query, texts)
    assert got.dtype == np.float32 and got.shape == (len(texts),)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@settings(max_examples=80, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=8), st.lists(_TEXT, max_size=6))
def test_similarity_matrix_and_corpus_model_equal_dense_numpy(texts, corpus):
    _, expected = numpy_tfidf("", texts)
    got = ranking.tfidf_similarity_matrix(texts)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # A corpus-level model: df and N come from the corpus, not the texts.
    model = ranking.TfidfModel(corpus)
    expected_scores, _ = numpy_tfidf(texts[0], texts, corpus=corpus)
    np.testing.assert_allclose(
        ranking.tfidf_cosine(texts[0], texts, model),
        expected_scores,
        rtol=1e-5,
        atol=1e-6,
    )


def test_tfidf_cosine_on_real_paragraphs_and_titles(real_examples):
    checked = 0
    for name in ("scisummnet", "qmsum_goldspan"):
        for example in real_examples(name, "val")[:8]:
            query = example.query or example.title
            texts = [
                " ".join(p)
                for d in example.documents
                for s in d.sections
                for p in s.paragraphs
            ]
            expected, _ = numpy_tfidf(query, texts)
            np.testing.assert_allclose(
                ranking.tfidf_cosine(query, texts), expected, rtol=1e-5, atol=1e-6
            )
            checked += 1
            assert expected.max() > 0
    assert checked == 16


def test_words_are_unicode_letters_and_digits():
    assert ranking.words("Naïve café, x_2 and 3.14! 数据") == [
        "naïve", "café", "x", "2", "and", "3", "14", "数据"
    ]


@settings(max_examples=100, deadline=None)
@given(_TEXT, st.lists(_TEXT, min_size=1, max_size=10))
def test_rank_orders_by_decreasing_score_with_stable_ties(query, texts):
    order, scores = ranking.rank_by_tfidf(query, texts)
    assert order.dtype == np.int32
    assert sorted(order.tolist()) == list(range(len(texts)))
    np.testing.assert_array_equal(scores, ranking.tfidf_cosine(query, texts))
    ranked = scores[order]
    for i in range(len(texts) - 1):
        assert ranked[i] > ranked[i + 1] or (
            ranked[i] == ranked[i + 1] and order[i] < order[i + 1]
        )


@pytest.mark.parametrize("query", ["", None, "  ...  !!"])
def test_rank_with_an_empty_query_keeps_reading_order(query):
    texts = ["graph attention", "the model", "", "data data data"]
    order, scores = ranking.rank_by_tfidf(query, texts)
    assert order.tolist() == [0, 1, 2, 3]
    assert (scores == 0).all()


def test_rank_puts_the_matching_paragraph_first():
    texts = ["we thank the reviewers", "hierarchical transformers summarize",
             "results on the test set"]
    order, _ = ranking.rank_by_tfidf("Hierarchical Transformers", texts)
    assert order[0] == 1


def test_rouge2_recall_targets_equal_rouge_score(real_examples):
    scorer = rouge_scorer.RougeScorer(["rouge2"], use_stemmer=True)
    pairs = 0
    for name, split in (("scisummnet", "val"), ("qmsum_goldspan", "val"),
                        ("fewsum_amazon", "val")):
        for example in real_examples(name, split)[:6]:
            texts = [
                " ".join(p)
                for d in example.documents
                for s in d.sections
                for p in s.paragraphs
            ][:40]
            got = ranking.rouge2_recall_targets(texts, example.summary)
            assert got.dtype == np.float32 and got.shape == (len(texts),)
            expected = [
                scorer.score(example.summary, text)["rouge2"].recall
                for text in texts
            ]
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
            assert ((got >= 0) & (got <= 1)).all()
            pairs += len(texts)
    assert pairs > 150
