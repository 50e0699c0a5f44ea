"""Tests for keras_hsum.data.labels against rouge-score and brute force."""

import dataclasses
import functools
import itertools
import math
import random
import time

import numpy as np
import pytest
from rouge_score import rouge_scorer

from keras_hsum.data import labels
import reference_structure as structure
from keras_hsum.data.corpora import sample_path
from keras_hsum.data.corpora import sample_tokenizer_path
from keras_hsum.data.reader import read_jsonl
from keras_hsum.data.vocabulary import Vocabulary

SCORER = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rouge3"], use_stemmer=True)


def peer_score(references, text, metrics=("rouge1", "rouge2"), reduce=sum):
    """rouge-score's F1 of `text`, reduced over metrics, mean over references."""
    if isinstance(references, str):
        references = [references]
    totals = []
    for reference in references:
        scores = SCORER.score(reference, text)
        totals.append(reduce([scores[m].fmeasure for m in metrics]))
    return sum(totals) / len(totals)


def mean(values):
    return sum(values) / len(values)


def _examples(name, split="val", count=2):
    return list(itertools.islice(read_jsonl(sample_path(name, split)), count))


@pytest.fixture(scope="module")
def vocabulary():
    return Vocabulary.load(sample_tokenizer_path())


# -- SEAL proxy labels --------------------------------------------------------


def test_seal_proxy_labels_equal_rouge_score_on_real_snippets(vocabulary):
    example = _examples("scisummnet", count=1)[0]
    snippets = structure.build_snippets(example, vocabulary, 24, 64).texts
    result = labels.seal_proxy_labels(
        snippets, example.summary, segment_length=40, vocabulary=vocabulary
    )
    expected = [peer_score(example.summary, s, reduce=mean) for s in snippets]
    assert result.summary_labels.dtype == np.float32
    np.testing.assert_allclose(result.summary_labels, expected, atol=1e-6)
    ids = vocabulary.encode(example.summary)
    segments = result.segment_texts
    assert len(segments) == math.ceil(len(ids) / 40)
    assert result.segment_labels.shape == (len(segments), len(snippets))
    for m, segment in enumerate(segments):
        expected = [peer_score(segment, s, reduce=mean) for s in snippets]
        np.testing.assert_allclose(result.segment_labels[m], expected, atol=1e-6)
    assert ((result.segment_labels >= 0) & (result.segment_labels <= 1)).all()


def test_vocabulary_segments_cover_the_summary_in_order(vocabulary):
    summary = _examples("scitldr_a", count=1)[0].summary
    ids = vocabulary.encode(summary)
    for length in (1, 3, 7, len(ids), len(ids) + 5):
        segments = labels.summary_segments(summary, length, vocabulary)
        assert len(segments) == math.ceil(len(ids) / length)
        # Cut at token boundaries: nothing lost, nothing repeated.
        assert "".join(segments).replace(" ", "") == vocabulary.decode(
            ids
        ).replace(" ", "")


def test_word_segments_without_a_vocabulary():
    summary = "one two three four five six seven"
    result = labels.seal_proxy_labels(
        ["one two three", "five six", "nothing here"], summary, segment_length=3
    )
    assert result.segment_texts == ("one two three", "four five six", "seven")
    # Snippet 0 is exactly segment 0: ROUGE-1 F1 = ROUGE-2 F1 = 1.
    assert result.segment_labels[0, 0] == pytest.approx(1.0)
    for m, segment in enumerate(result.segment_texts):
        for p, snippet in enumerate(["one two three", "five six", "nothing here"]):
            assert result.segment_labels[m, p] == pytest.approx(
                peer_score(segment, snippet, reduce=mean)
            )


def test_one_long_segment_equals_the_summary_labels():
    example = _examples("fewsum_yelp", count=1)[0]
    snippets = [
        " ".join(paragraph)
        for document in example.documents
        for section in document.sections
        for paragraph in section.paragraphs
    ]
    result = labels.seal_proxy_labels(
        snippets, example.summary, segment_length=10_000
    )
    assert len(result.segment_texts) == 1
    np.testing.assert_allclose(
        result.segment_labels[0], result.summary_labels, atol=1e-6
    )
    without = labels.seal_proxy_labels(snippets, example.summary)
    assert without.segment_labels is None and without.segment_texts == ()
    np.testing.assert_array_equal(without.summary_labels, result.summary_labels)


def test_seal_proxy_labels_other_metric_and_errors():
    snippets = ["the cat sat on the mat", "a dog"]
    summary = "the cat sat on a mat"
    result = labels.seal_proxy_labels(snippets, summary, metric=("rouge1",))
    np.testing.assert_allclose(
        result.summary_labels,
        [peer_score(summary, s, ("rouge1",)) for s in snippets],
        atol=1e-6,
    )
    assert labels.seal_proxy_labels([], summary).summary_labels.shape == (0,)
    with pytest.raises(structure.EmptySummaryError):
        labels.seal_proxy_labels(snippets, " ... ")
    with pytest.raises(ValueError, match="segment_length"):
        labels.seal_proxy_labels(snippets, summary, segment_length=0)
    with pytest.raises(ValueError, match="ROUGE-N"):
        labels.seal_proxy_labels(snippets, summary, metric=("rougeL",))


# -- greedy oracle ------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def oracle_cases():
    cases = []
    for name, count in (
        ("scitldr_a", 4),
        ("fewsum_amazon", 2),
        ("qmsum_goldspan", 3),
        ("scisummnet", 1),
    ):
        for example in _examples(name, count=count):
            cases.append((example.sentences(), list(example.references)))
    return tuple(cases)


def extract(sentences, indices):
    return " ".join(sentences[i] for i in sorted(indices))


@pytest.mark.parametrize("case", range(10))
def test_greedy_oracle_steps_increase_and_stop_correctly(case):
    sentences, references = oracle_cases()[case]
    steps = list(labels.greedy_oracle_steps(sentences, references))
    assert steps, "a real summary overlaps its document"
    selected = []
    previous = 0.0
    for index, score in steps:
        selected.append(index)
        # (a) the reported score is rouge-score's on the joined extract, and
        # each addition increased it.
        expected = peer_score(references, extract(sentences, selected))
        assert score == pytest.approx(expected, abs=1e-9)
        assert expected > previous
        # Greedy: no other sentence would have scored higher at this step.
        previous = expected
    assert len(set(selected)) == len(selected)
    # (b) the stop condition: no remaining sentence raises the final score.
    final = previous
    for k in range(len(sentences)):
        if k not in selected:
            extended = extract(sentences, selected + [k])
            assert peer_score(references, extended) <= final + 1e-12
    assert labels.greedy_oracle(sentences, references) == sorted(selected)


@pytest.mark.parametrize("case", [0, 1, 4, 6])
def test_each_greedy_step_picks_the_best_sentence(case):
    sentences, references = oracle_cases()[case]
    selected = []
    for index, _ in labels.greedy_oracle_steps(sentences, references):
        scores = [
            peer_score(references, extract(sentences, selected + [k]))
            if k not in selected
            else -1.0
            for k in range(len(sentences))
        ]
        assert index == int(np.argmax(scores))  # first maximum on ties
        selected.append(index)


@pytest.mark.parametrize("case", range(10))
def test_one_sentence_oracle_equals_brute_force(case):
    sentences, references = oracle_cases()[case]
    scores = [peer_score(references, s) for s in sentences]
    best = int(np.argmax(scores))
    expected = [best] if scores[best] > 0 else []
    assert labels.greedy_oracle(sentences, references, max_sentences=1) == expected


def test_sentence_budget_is_a_prefix_of_the_greedy_path():
    sentences, references = oracle_cases()[4]
    path = [k for k, _ in labels.greedy_oracle_steps(sentences, references)]
    for budget in range(len(path) + 2):
        assert labels.greedy_oracle(
            sentences, references, max_sentences=budget
        ) == sorted(path[:budget])


def test_greedy_oracle_counts_ngrams_across_sentence_boundaries():
    # Tiny vocabulary, very short sentences: n-grams of the joined extract
    # span several sentences, the hard case of the incremental update.
    rng = random.Random(7)
    words = ["red", "blue", "cat", "sat", "mat", "ran"]
    metrics = ("rouge1", "rouge2", "rouge3")
    for _ in range(40):
        sentences = [
            " ".join(rng.choice(words) for _ in range(rng.randint(0, 3)))
            for _ in range(rng.randint(1, 9))
        ]
        reference = " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        selected = []
        previous = 0.0
        for index, score in labels.greedy_oracle_steps(
            sentences, reference, metric=metrics
        ):
            selected.append(index)
            expected = peer_score(reference, extract(sentences, selected), metrics)
            assert score == pytest.approx(expected, abs=1e-9)
            assert expected > previous
            previous = expected
        for k in set(range(len(sentences))) - set(selected):
            assert (
                peer_score(reference, extract(sentences, selected + [k]), metrics)
                <= previous + 1e-12
            )


def test_greedy_oracle_small_cases_and_errors():
    assert labels.greedy_oracle(
        ["A cat sat.", "Stocks fell.", "It was on a mat."],
        "The cat sat on the mat.",
    ) == [0, 2]
    assert labels.greedy_oracle([], "a summary") == []
    assert labels.greedy_oracle(["nothing shared"], "a summary") == []
    with pytest.raises(structure.EmptySummaryError):
        labels.greedy_oracle(["a b"], "")
    with pytest.raises(ValueError, match="max_sentences"):
        labels.greedy_oracle(["a b"], "a b", max_sentences=-1)
    with pytest.raises(ValueError, match="references"):
        labels.greedy_oracle(["a b"], [])
    np.testing.assert_array_equal(labels.oracle_labels(4, [2, 0]), [1, 0, 1, 0])
    with pytest.raises(ValueError, match="indices"):
        labels.oracle_labels(2, [2])


def test_greedy_oracle_is_fast_on_a_long_meeting():
    meeting = max(
        read_jsonl(sample_path("qmsum_general", "val")),
        key=lambda e: len(e.sentences()),
    )
    sentences = meeting.sentences()
    assert len(sentences) > 1000
    start = time.perf_counter()
    selected = labels.greedy_oracle(sentences, meeting.summary)
    elapsed = time.perf_counter() - start
    assert selected
    assert elapsed < 3.0, f"{len(sentences)} sentences took {elapsed:.2f}s"


# -- SHTE pairs ---------------------------------------------------------------


@pytest.fixture(scope="module")
def review_examples():
    return list(read_jsonl(sample_path("fewsum_amazon", "train")))


def test_shte_pairs_structure(review_examples):
    negatives = 2
    pairs = list(labels.shte_pairs(review_examples, negatives, seed=3))
    assert len(pairs) == len(review_examples) * (1 + negatives)
    all_summaries = {e.summary for e in review_examples}
    for n, example in enumerate(review_examples):
        group = pairs[n * (1 + negatives) : (n + 1) * (1 + negatives)]
        assert all(p.example is example for p in group)
        assert group[0].summary == example.summary and group[0].label == 1
        drawn = [p.summary for p in group[1:]]
        assert all(p.label == 0 for p in group[1:])
        assert len(set(drawn)) == negatives
        assert all(s in all_summaries and s != example.summary for s in drawn)
        assert not set(drawn) & set(example.references)


def test_shte_pairs_are_deterministic_and_seeded(review_examples):
    state = np.random.get_state()
    python_state = random.getstate()
    def drawn(seed):
        return [
            (p.example.id, p.summary)
            for p in labels.shte_pairs(review_examples, seed=seed)
        ]

    first, again, other = drawn(0), drawn(0), drawn(1)
    assert first == again
    assert first != other
    # No global random state was used.
    assert random.getstate() == python_state
    after = np.random.get_state()
    assert after[0] == state[0] and (after[1] == state[1]).all()


def test_negatives_cover_the_other_summaries(review_examples):
    # Uniform draws: over many seeds every other summary shows up.
    example = review_examples[0]
    seen = set()
    for seed in range(60):
        for pair in labels.shte_pairs(review_examples[:6], 1, seed=seed):
            if pair.example is example and pair.label == 0:
                seen.add(pair.summary)
    assert seen == {e.summary for e in review_examples[1:6]}


def test_duplicate_summaries_are_never_negatives(review_examples):
    twin = dataclasses.replace(
        review_examples[1], id="twin", summary=review_examples[0].summary
    )
    examples = [review_examples[0], twin, review_examples[2]]
    for seed in range(10):
        for pair in labels.shte_pairs(examples, 1, seed=seed):
            if pair.label == 0:
                assert (
                    pair.summary == review_examples[2].summary
                    or pair.example is review_examples[2]
                )
                assert pair.summary != pair.example.summary
    with pytest.raises(ValueError, match="negative summaries"):
        list(labels.shte_pairs(examples, 2))


def test_shte_pairs_stream_in_windows(review_examples):
    def stream():
        yield from review_examples

    pairs = list(labels.shte_pairs(stream(), 1, seed=0, buffer_size=5))
    for pair in pairs:
        if pair.label == 0:
            position = review_examples.index(pair.example)
            window = position // 5
            start, stop = max(window - 1, 0) * 5, (window + 1) * 5
            allowed = {e.summary for e in review_examples[start:stop]}
            assert pair.summary in allowed and pair.summary != pair.example.summary
    positives = [p.example.id for p in pairs if p.label == 1]
    assert positives == [e.id for e in review_examples]


def test_shte_pairs_errors(review_examples):
    positives = list(labels.shte_pairs(review_examples[:3], 0))
    assert [p.label for p in positives] == [1, 1, 1]
    empty = dataclasses.replace(review_examples[0], summary="")
    with pytest.raises(structure.EmptySummaryError):
        list(labels.shte_pairs([empty, review_examples[1]]))
    with pytest.raises(ValueError, match="negatives_per_positive"):
        list(labels.shte_pairs(review_examples, -1))
    with pytest.raises(ValueError, match="negative summaries"):
        list(labels.shte_pairs(review_examples[:1], 1))


# -- principal-sentence pairs (PEGASUS) ---------------------------------------


def test_principal_sentence_equals_rouge_score_brute_force():
    """The principal sentence is the argmax of rouge-score's own ROUGE-1 F1
    of each sentence against the others joined (first on ties)."""
    for example in _examples("scitldr_a", "val", 6) + _examples("scisummnet", "val", 1):
        sentences = example.documents[0].sentences()[:12]
        scores = [
            SCORER.score(" ".join(sentences[:i] + sentences[i + 1:]), sentence)["rouge1"].fmeasure
            for i, sentence in enumerate(sentences)
        ]
        assert labels.principal_sentence(sentences) == scores.index(max(scores))
    # Ties go to the first; a sentence sharing nothing never wins.
    assert labels.principal_sentence(["cats purr", "cats purr", "dogs bark"]) == 0
    assert labels.principal_sentence(["zebra", "cats purr", "cats purr loudly"]) == 1
    with pytest.raises(ValueError, match="at least 2 sentences.*received 1"):
        labels.principal_sentence(["alone"])


def test_passages_are_greedy_word_budgets_that_cover_the_sentences():
    sentences = _examples("scisummnet", "val", 1)[0].documents[0].sentences()
    for max_words in (1, 40, 250):
        cut = labels.passages(sentences, max_words)
        assert [s for passage in cut for s in passage] == sentences
        words = [[len(s.split()) for s in passage] for passage in cut]
        for i, counts in enumerate(words):
            # Within budget unless a single sentence exceeds it ...
            assert sum(counts) <= max_words or len(counts) == 1
            # ... and greedy: the next passage's first sentence did not fit.
            if i + 1 < len(words):
                assert sum(counts) + words[i + 1][0] > max_words
    assert labels.passages([], 10) == []


def test_principal_sentence_examples_on_real_papers():
    papers = _examples("scisummnet", "val", 2) + _examples("scitldr_a", "train", 3)
    pairs = list(labels.principal_sentence_examples(papers, max_words=120, min_sentences=3))
    expected = []
    for paper in papers:
        index = 0
        for document in paper.documents:
            for section in document.sections:
                sentences = [s for p in section.paragraphs for s in p]
                for passage in labels.passages(sentences, 120):
                    if len(passage) >= 3:
                        expected.append((f"{paper.id}#p{index}", passage))
                    index += 1
    assert len(expected) > 20
    assert [(p.id, list(p.documents[0].sentences())) for p in pairs] == expected
    for pair in pairs:
        (document,) = pair.documents
        (section,) = document.sections
        assert len(section.paragraphs) == 1 and section.heading is None
        passage = list(section.paragraphs[0])
        assert pair.summary == passage[labels.principal_sentence(passage)]
        assert pair.references == (pair.summary,) and pair.title is None
    # PEGASUS's form: the same pairs with the principal sentence taken out
    # of the input, the other sentences in their order.
    removed = list(labels.principal_sentence_examples(
        papers, max_words=120, min_sentences=3, remove=True))
    assert [(p.id, p.summary) for p in removed] == [(p.id, p.summary) for p in pairs]
    for kept, gap in zip(pairs, removed):
        passage = list(kept.documents[0].sentences())
        chosen = labels.principal_sentence(passage)
        assert list(gap.documents[0].sentences()) == passage[:chosen] + passage[chosen + 1:]
        assert gap.summary not in gap.documents[0].sentences() or passage.count(gap.summary) > 1
    with pytest.raises(ValueError, match="`max_words` must be an int >= 1, received 0"):
        list(labels.principal_sentence_examples(papers, max_words=0))
    with pytest.raises(ValueError, match="`min_sentences` must be an int >= 2, received 1"):
        list(labels.principal_sentence_examples(papers, min_sentences=1))
