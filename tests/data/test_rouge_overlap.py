"""Tests for keras_hsum.data.rouge_overlap against rouge-score's scorer."""

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from rouge_score import rouge_scorer

from keras_hsum.data.rouge_overlap import RougeReference
from keras_hsum.data.rouge_overlap import rouge_tokens

SCORER = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)


def real_pairs(real_examples):
    """(reference, candidate) pairs from real data, several hundred of them.

    Candidates: each paragraph and the lead sentences of an example against
    its summary, and each extra reference against the primary one.
    """
    pairs = []
    for name, split in (
        ("scitldr_a", "val"),
        ("fewsum_yelp", "val"),
        ("cnndm", "summeval100"),
        ("qmsum_goldspan", "val"),
    ):
        for example in real_examples(name, split)[:25]:
            paragraphs = [
                " ".join(p) for d in example.documents for s in d.sections
                for p in s.paragraphs
            ]
            pairs += [(example.summary, p) for p in paragraphs[:6]]
            pairs.append((example.summary, " ".join(example.sentences()[:3])))
            pairs += [(example.summary, r) for r in example.references[1:]]
    return pairs


def assert_same_score(got, expected):
    assert got.precision == pytest.approx(expected.precision, rel=1e-12, abs=0)
    assert got.recall == pytest.approx(expected.recall, rel=1e-12, abs=0)
    assert got.fmeasure == pytest.approx(expected.fmeasure, rel=1e-12, abs=0)


def test_equals_rouge_score_on_real_pairs(real_examples):
    pairs = real_pairs(real_examples)
    assert len(pairs) > 300
    references = {}
    nonzero = 0
    for reference, candidate in pairs:
        # One RougeReference per reference text: what labels do.
        ours = references.setdefault(reference, RougeReference(reference))
        expected = SCORER.score(reference, candidate)
        assert_same_score(ours.score(candidate, n=1), expected["rouge1"])
        assert_same_score(ours.score(candidate, n=2), expected["rouge2"])
        nonzero += expected["rouge2"].fmeasure > 0
    assert nonzero > len(pairs) // 3


_WORDS = st.sampled_from(
    ["the", "cat", "cats", "running", "runs", "sat", "on", "mat", "Mat.",
     "3.5", "café", "x", "-", "summaries", "summary"]
)
_TEXT = st.lists(_WORDS, max_size=15).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(_TEXT, _TEXT)
def test_equals_rouge_score_on_generated_pairs(reference, candidate):
    expected = SCORER.score(reference, candidate)
    ours = RougeReference(reference)
    assert_same_score(ours.score(candidate, n=1), expected["rouge1"])
    assert_same_score(ours.score(candidate, n=2), expected["rouge2"])


def test_token_lists_are_accepted_for_reference_and_candidate():
    reference, candidate = "The cats were running home.", "A cat runs home"
    expected = SCORER.score(reference, candidate)
    ours = RougeReference(rouge_tokens(reference))
    assert_same_score(ours.score(rouge_tokens(candidate), n=2), expected["rouge2"])
    assert_same_score(ours.score(candidate, n=1), expected["rouge1"])
    # Stemmed, lower-cased tokens, as rouge-score makes them.
    assert rouge_tokens(reference) == ["the", "cat", "were", "run", "home"]


@pytest.mark.parametrize("reference, candidate", [("", "a b"), ("a b", ""), ("", "")])
def test_empty_sides_score_zero_like_rouge_score(reference, candidate):
    expected = SCORER.score(reference, candidate)
    for n, key in ((1, "rouge1"), (2, "rouge2")):
        got = RougeReference(reference).score(candidate, n=n)
        assert_same_score(got, expected[key])
        assert got.fmeasure == 0.0
