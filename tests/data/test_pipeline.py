"""Tests of keras_hsum.data.pipeline on the bundled real sample.

Independent references: the structuring builders called directly on the
same example (what a batch row must hold), rouge-score's own `RougeScorer`
(ranker targets), `np.searchsorted` over the boundaries (bucket of an
example), and the corpus lines themselves (what a corrupt file must yield).
"""

import dataclasses
import gzip
import itertools
import json

import numpy as np
import pytest
import tensorflow as tf
from rouge_score import rouge_scorer

from keras_hsum.data import pipeline
import reference_structure as structure
from keras_hsum.data.corpora import sample_path
from keras_hsum.data.reader import InvalidExampleError
from keras_hsum.data.reader import read_examples
from keras_hsum.data.reader import resplit_sentences
from keras_hsum.data.vocabulary import Vocabulary
from keras_hsum.data.vocabulary import corpus_sentences

MAX_UNITS = 12
MAX_TOKENS = 32
FLAT_TOKENS = 512
MAX_TARGET = 48
BATCH = 4
COMMON = {"tokens", "token_mask", "paragraph_mask", "document_ids"}
EXPECTED_KEYS = {
    "paragraphs": COMMON
    | {"paragraph_index", "rank_score", "context_tokens", "target"},
    "sections": COMMON | {"target"},
    "snippets": COMMON | {"target"},
    "sentences": COMMON | {"target"},
    "flat": {"tokens", "token_mask", "target"},
}
DTYPES = {
    "tokens": tf.int32,
    "token_mask": tf.bool,
    "paragraph_mask": tf.bool,
    "document_ids": tf.int32,
    "paragraph_index": tf.int32,
    "rank_score": tf.float32,
    "context_tokens": tf.int32,
    "target": tf.int32,
    "example_id": tf.string,
}


def _take(name, split, count):
    return list(itertools.islice(read_examples(sample_path(name, split)), count))


@pytest.fixture(scope="module")
def examples():
    """Real examples of every shape: short, long, multi-document, query."""
    return (
        _take("scitldr_a", "val", 8)
        + _take("fewsum_amazon", "val", 6)
        + _take("scisummnet", "val", 4)
        + _take("qmsum_general", "val", 2)
    )


@pytest.fixture(scope="module")
def vocabulary(examples):
    return Vocabulary.train(corpus_sentences(examples), vocabulary_size=3000)


@pytest.fixture(scope="module")
def by_id(examples):
    return {example.id: example for example in examples}


def _limits(family):
    if family == "flat":
        return {"max_tokens": FLAT_TOKENS}
    return {"max_units": MAX_UNITS, "max_tokens": MAX_TOKENS}


def _numpy(dataset):
    return [
        {name: tensor.numpy() for name, tensor in batch.items()}
        for batch in dataset
    ]


@pytest.fixture(scope="module")
def family_batches(examples, vocabulary):
    """Batches of every family over the fixture examples (computed once)."""
    cache = {}

    def get(family):
        if family not in cache:
            dataset = pipeline.make_dataset(
                examples,
                vocabulary,
                family,
                batch_size=BATCH,
                max_target_length=MAX_TARGET,
                include_ids=True,
                **_limits(family),
            )
            cache[family] = _numpy(dataset)
        return cache[family]

    return get


def _rows(batch):
    """Number of real rows (P_i) of each example of a batch."""
    return batch["paragraph_mask"].sum(axis=1)


@pytest.mark.parametrize("family", pipeline.FAMILIES)
def test_batches_have_documented_shapes_and_dtypes(family, family_batches, examples):
    batches = family_batches(family)
    assert sum(len(b["example_id"]) for b in batches) == len(examples)
    for batch in batches:
        assert set(batch) == EXPECTED_KEYS[family] | {"example_id"}
        size = len(batch["example_id"])
        assert 1 <= size <= BATCH
        for name, value in batch.items():
            assert value.dtype == DTYPES[name].as_numpy_dtype, name
            assert value.shape[0] == size, name
        target = batch["target"]
        assert target.ndim == 2 and target.shape[1] <= MAX_TARGET
        if family == "flat":
            assert batch["tokens"].ndim == 2
            assert batch["tokens"].shape[1] <= FLAT_TOKENS
            assert batch["token_mask"].shape == batch["tokens"].shape
            continue
        b, p, t = batch["tokens"].shape
        assert t == MAX_TOKENS and 1 <= p <= MAX_UNITS
        assert batch["token_mask"].shape == (b, p, t)
        for name in ("paragraph_mask", "document_ids"):
            assert batch[name].shape == (b, p), name
        if family == "paragraphs":
            assert batch["paragraph_index"].shape == (b, p)
            assert batch["rank_score"].shape == (b, p)
            assert batch["context_tokens"].shape[1] <= 32


@pytest.mark.parametrize("family", pipeline.FAMILIES)
def test_masks_agree_with_padding(family, family_batches, vocabulary):
    for batch in family_batches(family):
        tokens = batch["tokens"]
        np.testing.assert_array_equal(
            batch["token_mask"], tokens != vocabulary.pad_id
        )
        target = batch["target"]
        assert (target[:, 0] == vocabulary.bos_id).all()
        for row in target:
            ends = np.flatnonzero(row == vocabulary.eos_id)
            assert len(ends) == 1
            assert (row[ends[0] + 1 :] == vocabulary.pad_id).all()
            assert (row[: ends[0]] != vocabulary.pad_id).all()
        if family == "flat":
            continue
        # A row is real exactly when it holds a token; real rows come first.
        paragraph_mask = batch["paragraph_mask"]
        np.testing.assert_array_equal(
            paragraph_mask, batch["token_mask"].any(axis=-1)
        )
        rows = _rows(batch)
        for i, count in enumerate(rows):
            assert paragraph_mask[i, :count].all()
            assert not paragraph_mask[i, count:].any()
            assert (tokens[i, count:] == vocabulary.pad_id).all()
            assert (batch["document_ids"][i, count:] == 0).all()
        # Every batch is padded to its longest example, no further.
        assert rows.max() == tokens.shape[1]


def _builder_output(family, example, vocabulary):
    """The Python builders, the graph structurer's independent reference:
    on the example with its sentences split again by `split_sentences`,
    since the pipeline structures the text as the SavedModel receives it."""
    example = resplit_sentences(example)
    if family == "flat":
        return structure.build_flat(example, vocabulary, FLAT_TOKENS)
    return structure.BUILDERS[family](example, vocabulary, MAX_UNITS, MAX_TOKENS)


@pytest.mark.parametrize("family", pipeline.FAMILIES)
def test_batched_rows_equal_the_builder_output(
    family, family_batches, vocabulary, by_id
):
    for batch in family_batches(family):
        for i, raw_id in enumerate(batch["example_id"]):
            example = by_id[raw_id.decode("utf-8")]
            expected = _builder_output(family, example, vocabulary).features
            target = structure.build_target(example.summary, vocabulary, MAX_TARGET)
            np.testing.assert_array_equal(
                batch["target"][i, : len(target)], target
            )
            assert (batch["target"][i, len(target) :] == vocabulary.pad_id).all()
            if family == "flat":
                n = len(expected["tokens"])
                np.testing.assert_array_equal(
                    batch["tokens"][i, :n], expected["tokens"]
                )
                assert (batch["tokens"][i, n:] == vocabulary.pad_id).all()
                continue
            p = len(expected["paragraph_mask"])
            for name, value in expected.items():
                if name == "context_tokens":
                    got = batch[name][i, : len(value)]
                    assert (batch[name][i, len(value) :] == 0).all()
                else:
                    got = batch[name][i, :p]
                if name == "rank_score":
                    # float64 tf-idf summed in another order: the last bit
                    # of a float32 may differ (see the structurer's notes).
                    np.testing.assert_allclose(got, value, atol=1e-6, err_msg=name)
                else:
                    np.testing.assert_array_equal(got, value, err_msg=name)
            assert not batch["paragraph_mask"][i, p:].any()


def _ids(batches):
    return [i.decode("utf-8") for b in batches for i in b["example_id"]]


def _shuffled(examples, vocabulary, seed):
    return pipeline.make_dataset(
        examples,
        vocabulary,
        "sections",
        batch_size=3,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        max_target_length=MAX_TARGET,
        shuffle_buffer=64,
        seed=seed,
        include_ids=True,
    )


def test_same_seed_gives_identical_batches_and_another_seed_another_order(
    examples, vocabulary
):
    first = _shuffled(examples, vocabulary, seed=7)
    second = _shuffled(examples, vocabulary, seed=7)
    other = _shuffled(examples, vocabulary, seed=8)
    a, b, c = _numpy(first), _numpy(second), _numpy(other)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert set(x) == set(y)
        for name in x:
            np.testing.assert_array_equal(x[name], y[name], err_msg=name)
    reading_order = [example.id for example in examples]
    assert _ids(a) != reading_order  # it does shuffle
    assert _ids(c) != _ids(a)
    assert sorted(_ids(c)) == sorted(_ids(a)) == sorted(reading_order)
    # Each epoch is reshuffled, and the sequence of epochs is reproducible.
    a_epoch2, b_epoch2 = _numpy(first), _numpy(second)
    assert _ids(a_epoch2) != _ids(a)
    assert _ids(a_epoch2) == _ids(b_epoch2)


def test_max_examples_keeps_the_first_good_examples(corrupt_folder, vocabulary):
    folder, _, good = corrupt_folder
    dataset = pipeline.make_dataset(
        folder,
        vocabulary,
        "sentences",
        batch_size=2,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        include_ids=True,
        max_examples=3,
    )
    assert _ids(_numpy(dataset)) == good[:3]


@pytest.mark.parametrize(
    "family, boundaries, length",
    [
        ("sentences", [4, 8, 11], lambda b: _rows(b)),
        ("flat", [200, 300, 512], lambda b: b["token_mask"].sum(axis=1)),
    ],
)
def test_bucketing_batches_examples_of_one_bucket(
    family, boundaries, length, examples, vocabulary
):
    dataset = pipeline.make_dataset(
        examples,
        vocabulary,
        family,
        batch_size=BATCH,
        max_target_length=MAX_TARGET,
        bucket_boundaries=boundaries,
        include_ids=True,
        **_limits(family),
    )
    batches = _numpy(dataset)
    assert sorted(_ids(batches)) == sorted(e.id for e in examples)
    buckets_seen = set()
    for batch in batches:
        lengths = length(batch)
        buckets = np.searchsorted(boundaries, lengths, side="right")
        assert len(set(buckets.tolist())) == 1, (lengths, boundaries)
        buckets_seen.add(int(buckets[0]))
        # Padded to the longest example of the batch, not to the boundary.
        assert batch["tokens"].shape[1] == lengths.max()
    assert len(buckets_seen) >= 2  # the sample really spans several buckets


def _write_corrupt_corpus(folder):
    """A real fewsum file with broken lines; returns (path, good ids)."""
    with gzip.open(sample_path("fewsum_amazon", "val"), "rb") as handle:
        lines = [line for line in handle.read().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines[:7]]
    good = [r["id"] for r in records[:4]]
    no_input = dict(records[4], id="no-input", documents=[])
    no_summary = dict(records[5], id="no-summary", summary="", references=[])
    unicode_line = lines[6].replace(b'"summary": "', b'"summary": "\xff\xfe', 1)
    assert unicode_line != lines[6]
    out = [
        lines[0],
        b'{"id": "broken-json", "documents": [',
        lines[1],
        unicode_line,
        json.dumps(no_input).encode("utf-8"),
        lines[2],
        json.dumps(no_summary).encode("utf-8"),
        lines[3],
    ]
    path = folder / "corrupt.jsonl"
    path.write_bytes(b"\n".join(out) + b"\n")
    return path, good


@pytest.fixture
def corrupt_folder(tmp_path):
    path, good = _write_corrupt_corpus(tmp_path)
    return tmp_path, path, good


# default-suite budget (docs/testing.md): snippets and flat run in the slow set
@pytest.mark.parametrize("family", [
    "paragraphs", pytest.param("snippets", marks=pytest.mark.slow), pytest.param("flat", marks=pytest.mark.slow)])
def test_a_corrupt_file_yields_every_good_example_and_counts_the_rest(
    family, corrupt_folder, vocabulary
):
    folder, _, good = corrupt_folder

    def fails_on_second(example, structured):
        if example.id == good[1]:
            raise ValueError("an extra that cannot label this example")
        return {}

    report = pipeline.PipelineReport()
    dataset = pipeline.make_dataset(
        folder,
        vocabulary,
        family,
        batch_size=2,
        max_target_length=MAX_TARGET,
        extras=[fails_on_second],
        include_ids=True,
        report=report,
        **_limits(family),
    )
    ids = _ids(_numpy(dataset))
    assert ids == [good[0], good[2], good[3]]
    assert report.read == 8
    assert report.yielded == 3
    assert report.invalid_lines == 2
    assert report.empty_input == 1
    assert report.empty_summary == 1
    assert report.other_errors == 1
    assert report.skipped == 5
    assert report.truncation.examples == 3
    joined = " ".join(report.errors)
    for needle in ("no-input", "no-summary", good[1], "line 2", "line 4"):
        assert needle in joined, needle
    text = str(report)
    assert "\n" not in text and "yielded 3 examples" in text


def test_strict_mode_raises_instead_of_skipping(corrupt_folder, vocabulary):
    _, path, _ = corrupt_folder
    features = pipeline.structured_examples(
        path, vocabulary, "sections", MAX_UNITS, MAX_TOKENS, strict=True
    )
    with pytest.raises(InvalidExampleError, match="line 2"):
        list(features)
    dataset = pipeline.make_dataset(
        path,
        vocabulary,
        "sections",
        batch_size=2,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        strict=True,
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="line 2"):
        list(dataset)


def test_examples_without_summary_are_kept_when_not_required(tmp_path, vocabulary):
    path = tmp_path / "meeting.txt"
    path.write_text(
        "The committee met on Monday. It discussed the budget.\n\n"
        "The chair closed the meeting.\n",
        encoding="utf-8",
    )
    required = pipeline.PipelineReport()
    assert not list(
        pipeline.structured_examples(
            path, vocabulary, "sentences", 4, 16, report=required
        )
    )
    assert required.empty_summary == 1
    kept = list(
        pipeline.structured_examples(
            path, vocabulary, "sentences", 4, 16, require_summary=False
        )
    )
    assert len(kept) == 1 and kept[0]["tokens"].shape == (3, 16)


@pytest.mark.parametrize("family", pipeline.FAMILIES)
def test_pad_to_max_gives_static_shapes(family, examples, vocabulary):
    dataset = pipeline.make_dataset(
        examples[:10],
        vocabulary,
        family,
        batch_size=BATCH,
        max_target_length=MAX_TARGET,
        pad_to_max=True,
        drop_remainder=True,
        **_limits(family),
    )
    expected = {"target": (BATCH, MAX_TARGET)}
    if family == "flat":
        expected.update(tokens=(BATCH, FLAT_TOKENS), token_mask=(BATCH, FLAT_TOKENS))
    else:
        expected.update(
            tokens=(BATCH, MAX_UNITS, MAX_TOKENS),
            token_mask=(BATCH, MAX_UNITS, MAX_TOKENS),
            paragraph_mask=(BATCH, MAX_UNITS),
            document_ids=(BATCH, MAX_UNITS),
        )
    if family == "paragraphs":
        expected.update(
            paragraph_index=(BATCH, MAX_UNITS),
            rank_score=(BATCH, MAX_UNITS),
            context_tokens=(BATCH, 32),
        )
    spec = dataset.element_spec
    assert {name: tuple(s.shape) for name, s in spec.items()} == expected
    batches = _numpy(dataset)
    assert len(batches) == 10 // BATCH
    for batch in batches:
        assert {name: v.shape for name, v in batch.items()} == expected
    pairs = pipeline.training_pairs(dataset)
    inputs, labels, weights = pairs.element_spec
    assert tuple(inputs["decoder_tokens"].shape) == (BATCH, MAX_TARGET - 1)
    assert tuple(labels.shape) == tuple(weights.shape) == (BATCH, MAX_TARGET - 1)


def test_training_pairs_shift_the_target(examples, vocabulary):
    dataset = pipeline.make_dataset(
        examples[:6],
        vocabulary,
        "sections",
        batch_size=3,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        max_target_length=MAX_TARGET,
    )
    for batch, (inputs, labels, weights) in zip(
        _numpy(dataset), pipeline.training_pairs(dataset, vocabulary.pad_id)
    ):
        target = batch["target"]
        np.testing.assert_array_equal(inputs["decoder_tokens"], target[:, :-1])
        np.testing.assert_array_equal(labels, target[:, 1:])
        np.testing.assert_array_equal(inputs["target_mask"], target[:, 1:] != 0)
        np.testing.assert_array_equal(weights, (target[:, 1:] != 0).astype("f"))
        assert "target" not in inputs
        np.testing.assert_array_equal(inputs["tokens"], batch["tokens"])


def _in_python(extra):
    """The extra without its `graph_features`: make_dataset then runs its
    rouge-score definition in Python (the graph labels on ids are tested
    against it and against a transcription on ids in test_label_extras.py)."""

    def run(example, structured):
        return extra(example, structured)

    run.feature_spec = extra.feature_spec
    run.__name__ = extra.__name__
    return run


def test_ranker_targets_equal_rouge_score_recall(examples, vocabulary, by_id):
    dataset = pipeline.make_dataset(
        examples,
        vocabulary,
        "paragraphs",
        batch_size=BATCH,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        extras=[_in_python(pipeline.ranker_targets)],
        include_ids=True,
    )
    scorer = rouge_scorer.RougeScorer(["rouge2"], use_stemmer=True)
    nonzero = 0
    for batch in _numpy(dataset):
        assert batch["ranker_targets"].dtype == np.float32
        assert batch["ranker_targets"].shape == batch["paragraph_mask"].shape
        for i, raw_id in enumerate(batch["example_id"]):
            example = by_id[raw_id.decode("utf-8")]
            texts = _builder_output("paragraphs", example, vocabulary).texts
            expected = [
                scorer.score(example.summary, text)["rouge2"].recall
                for text in texts
            ]
            got = batch["ranker_targets"][i]
            np.testing.assert_allclose(got[: len(texts)], expected, atol=1e-6)
            assert (got[len(texts) :] == 0).all()
            nonzero += int(np.count_nonzero(expected))
    assert nonzero > 0


@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_undeclared_extras_are_inferred_from_the_first_example(
    examples, vocabulary
):
    def per_row_and_fixed(example, structured):
        rows = structured.features["paragraph_mask"].shape[0]
        return {
            "row_weight": np.arange(1, rows + 1, dtype=np.float64),
            "summary_words": np.zeros((len(example.summary.split()) + 100,), "int64"),
        }

    dataset = pipeline.make_dataset(
        examples[:6],
        vocabulary,
        "sentences",
        batch_size=3,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        extras=[per_row_and_fixed],
    )
    spec = dataset.element_spec
    assert spec["row_weight"].dtype == tf.float64
    assert spec["summary_words"].dtype == tf.int64
    for batch in _numpy(dataset):
        rows = _rows(batch)
        assert batch["row_weight"].shape == batch["paragraph_mask"].shape
        for i, count in enumerate(rows):
            expected = np.zeros(batch["row_weight"].shape[1])
            expected[:count] = np.arange(1, count + 1)
            np.testing.assert_array_equal(batch["row_weight"][i], expected)
    with pytest.raises(ValueError, match="summary_words"):
        pipeline.make_dataset(
            examples[:6],
            vocabulary,
            "sentences",
            batch_size=3,
            max_units=MAX_UNITS,
            max_tokens=MAX_TOKENS,
            extras=[per_row_and_fixed],
            pad_to_max=True,
        )


def test_declared_extras_pad_with_their_value(examples, vocabulary):
    @pipeline.declare_features(labels=("int32", ("P",), -1))
    def labels(example, structured):
        return {"labels": np.ones_like(structured.features["document_ids"])}

    dataset = pipeline.make_dataset(
        examples[:8],
        vocabulary,
        "sentences",
        batch_size=4,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        extras=[labels],
        pad_to_max=True,
    )
    for batch in _numpy(dataset):
        mask = batch["paragraph_mask"]
        np.testing.assert_array_equal(batch["labels"], np.where(mask, 1, -1))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"family": "chapters"}, ValueError, "Unknown family"),
        ({"family_options": {"rnak": "order"}}, ValueError, "rnak"),
        ({"max_units": 0}, ValueError, "max_units"),
        ({"pad_to_max": True, "bucket_boundaries": [4]}, ValueError, "pad_to_max"),
        ({"bucket_boundaries": [8, 4]}, ValueError, "increasing"),
        ({"source": iter(())}, TypeError, "one-shot iterator"),
        ({"max_target_length": 2}, ValueError, "max_target_length"),
        ({"extras": [42]}, TypeError, "callable"),
        ({"max_examples": 0}, ValueError, "max_examples"),
        # Option values fail before any example is read (not one error per
        # example and an empty dataset).
        ({"family_options": {"rank": "bm25"}}, ValueError, "`rank` must be 'tfidf' or 'order'"),
        ({"family_options": {"pack": "bogus"}}, ValueError, "`pack` must be 'paragraph'"),
        ({"family_options": {"context_length": -1}}, ValueError, "`context_length` must be"),
        ({"shuffle_buffer": -5}, ValueError, "`shuffle_buffer` must be an int >= 0"),
        ({"batch_size": True}, ValueError, "`batch_size` must be an int >= 1, received True"),
        ({"vocabulary": None}, ValueError, "must be a keras_hsum.data.Vocabulary"),
        ({"source": "/nonexistent/corpus.jsonl"}, FileNotFoundError, "does not exist"),
    ],
)
def test_bad_arguments_fail_early_with_clear_errors(
    kwargs, error, match, examples, vocabulary
):
    arguments = dict(
        source=examples[:2],
        vocabulary=vocabulary,
        family="paragraphs",
        batch_size=2,
        max_units=4,
        max_tokens=8,
    )
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        pipeline.make_dataset(**arguments)


def _dense_tfidf_cosine(texts):
    """Independent dense tf-idf cosine matrix (smoothed idf, as documented)."""
    import re

    tokens = [re.findall(r"[^\W_]+", t.lower()) for t in texts]
    vocab = sorted({w for ws in tokens for w in ws})
    index = {w: i for i, w in enumerate(vocab)}
    tf_matrix = np.zeros((len(texts), len(vocab)))
    for row, ws in enumerate(tokens):
        for w in ws:
            tf_matrix[row, index[w]] += 1
    df = (tf_matrix > 0).sum(0)
    idf = np.log((1 + len(texts)) / (1 + df)) + 1
    weights = tf_matrix * idf
    norms = np.linalg.norm(weights, axis=1, keepdims=True)
    unit = np.divide(weights, norms, out=np.zeros_like(weights), where=norms > 0)
    return unit @ unit.T


def test_similarity_graph_extra_is_thresholded_tfidf_cosine(examples, vocabulary, by_id):
    dataset = pipeline.make_dataset(
        examples,
        vocabulary,
        "paragraphs",
        batch_size=BATCH,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        extras=[pipeline.paragraph_graph("similarity", threshold=0.1)],
        include_ids=True,
    )
    edges = 0
    for batch in _numpy(dataset):
        rows = batch["paragraph_mask"].shape[1]
        assert batch["graph"].shape == (len(batch["example_id"]), rows, rows)
        for i, raw_id in enumerate(batch["example_id"]):
            texts = _builder_output("paragraphs", by_id[raw_id.decode()], vocabulary).texts
            n = len(texts)
            expected = _dense_tfidf_cosine(texts)
            expected[expected < 0.1] = 0.0
            graph = batch["graph"][i]
            off_diagonal = ~np.eye(n, dtype=bool)
            np.testing.assert_allclose(graph[:n, :n][off_diagonal], expected[off_diagonal], atol=1e-5)
            assert (graph[n:] == 0).all() and (graph[:, n:] == 0).all()
            edges += int(np.count_nonzero(graph[:n, :n][off_diagonal]))
    assert edges > 0


def test_seal_labels_extra_matches_rouge_score(examples, vocabulary, by_id):
    dataset = pipeline.make_dataset(
        examples,
        vocabulary,
        "snippets",
        batch_size=BATCH,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        extras=[_in_python(pipeline.seal_labels(segment_length=16, vocabulary=vocabulary))],
        include_ids=True,
    )
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)
    for batch in _numpy(dataset):
        assert batch["segment_labels"].shape[2] == batch["paragraph_mask"].shape[1]
        for i, raw_id in enumerate(batch["example_id"]):
            example = by_id[raw_id.decode()]
            texts = _builder_output("snippets", example, vocabulary).texts
            expected = [
                (lambda s: (s["rouge1"].fmeasure + s["rouge2"].fmeasure) / 2)(
                    scorer.score(example.summary, text)
                )
                for text in texts
            ]
            np.testing.assert_allclose(batch["proxy_labels"][i, : len(texts)], expected, atol=1e-6)
            segments = len(example.summary and vocabulary.encode(example.summary))
            num_segments = -(-segments // 16)
            assert (batch["segment_labels"][i, num_segments:] == 0).all()
            assert (batch["segment_labels"][i, :, len(texts):] == 0).all()


def test_oracle_labels_extra_marks_a_rouge_improving_extract(examples, vocabulary, by_id):
    dataset = pipeline.make_dataset(
        examples[:8],
        vocabulary,
        "sentences",
        batch_size=BATCH,
        max_units=MAX_UNITS,
        max_tokens=MAX_TOKENS,
        extras=[_in_python(pipeline.oracle_labels)],
        include_ids=True,
    )
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)
    for batch in _numpy(dataset):
        for i, raw_id in enumerate(batch["example_id"]):
            example = by_id[raw_id.decode()]
            texts = _builder_output("sentences", example, vocabulary).texts
            chosen = np.flatnonzero(batch["oracle_labels"][i])
            assert len(chosen) >= 1 and chosen.max() < len(texts)

            def score(indices):
                extract = " ".join(texts[j] for j in sorted(indices))
                return np.mean([
                    scorer.score(ref, extract)["rouge1"].fmeasure
                    + scorer.score(ref, extract)["rouge2"].fmeasure
                    for ref in (list(example.references) or [example.summary])
                ])

            best = score(chosen)
            # The oracle's stop rule: no remaining sentence improves the extract.
            for j in set(range(len(texts))) - set(chosen.tolist()):
                assert score(list(chosen) + [j]) <= best + 1e-9


def test_the_extras_are_reachable_where_the_models_messages_name_them():
    """SEAL's error messages say `keras_hsum.data.seal_labels(...)`; every
    extra of make_dataset resolves from keras_hsum.data."""
    import keras_hsum.data as data

    for name in ("seal_labels", "ranker_targets", "paragraph_graph", "oracle_labels",
                 "declare_features", "make_dataset"):
        assert getattr(data, name) is getattr(pipeline, name)
    with pytest.raises(AttributeError, match="no attribute 'seal_label'"):
        data.seal_label


@pytest.mark.parametrize("family", pipeline.FAMILIES)
def test_truncation_report_equals_the_builders(family, examples, vocabulary):
    """The report's truncation counts (computed in the graph by the
    structurer) equal the Python builders' `TruncationReport`s merged over
    the same examples (split again by `split_sentences`), target counts
    from `build_target` included; tight limits so that every count moves."""
    limits = (
        {"max_tokens": 64} if family == "flat" else {"max_units": 4, "max_tokens": 12}
    )
    report = pipeline.PipelineReport()
    for _ in pipeline.make_dataset(
        examples, vocabulary, family, batch_size=BATCH, max_target_length=12,
        report=report, **limits,
    ):
        pass
    expected = structure.TruncationReport()
    for example in examples:
        example = resplit_sentences(example)
        if family == "flat":
            built = structure.build_flat(example, vocabulary, limits["max_tokens"])
        else:
            built = structure.BUILDERS[family](
                example, vocabulary, limits["max_units"], limits["max_tokens"]
            )
        structure.build_target(example.summary, vocabulary, 12, built.report)
        expected.merge(built.report)
    assert report.truncation.as_dict() == expected.as_dict()
    moved = [name for name, value in expected.as_dict().items() if value]
    print(f"\n{family}: {expected}")
    assert "dropped_tokens" in moved and "target_dropped_tokens" in moved


# ---- DatasetOptions: the object and the keywords build the same dataset ----

@pytest.mark.parametrize(
    "settings",
    [
        # Shuffled, bucketed, with ids, a cache and a cut: every stage that
        # an option switches on.
        dict(batch_size=3, shuffle_buffer=16, seed=5, bucket_boundaries=[4, 8],
             cache=True, max_examples=7, include_ids=True),
        # Static shapes, repeated (reshuffled) epochs, full batches only.
        dict(batch_size=2, shuffle_buffer=8, seed=1, pad_to_max=True, repeat=True,
             drop_remainder=True, include_ids=True),
    ],
    ids=["bucketed", "padded_repeated"],
)
def test_dataset_options_build_the_batches_of_the_same_keywords(
    settings, examples, vocabulary
):
    def build(**how):
        dataset = pipeline.make_dataset(
            examples[:10], vocabulary, "sentences", max_units=MAX_UNITS,
            max_tokens=MAX_TOKENS, max_target_length=MAX_TARGET, **how,
        )
        return _numpy(dataset.take(6))

    by_keywords = build(**settings)
    by_options = build(options=pipeline.DatasetOptions(**settings))
    assert len(by_keywords) == len(by_options) >= 3
    for x, y in zip(by_keywords, by_options):
        assert set(x) == set(y)
        for name in x:
            np.testing.assert_array_equal(x[name], y[name], err_msg=name)
    if settings.get("repeat"):  # 10 examples fill 5 batches of 2: a 6th repeats
        assert len(by_keywords) == 6


@pytest.mark.parametrize(
    "call, match",
    [
        (dict(options="options", shuffle_buffer=4, seed=2),
         r"options= and the keyword\(s\) \['seed', 'shuffle_buffer'\]"),
        (dict(batch_size=2, shuffle=True), "unexpected keyword argument 'shuffle'"),
        (dict(), "missing 1 required keyword-only argument: 'batch_size'"),
        (dict(options={"batch_size": 2}), "must be a DatasetOptions; received dict"),
    ],
    ids=["both", "unknown", "no_batch_size", "not_options"],
)
def test_dataset_options_misuse_is_a_type_error_naming_the_conflict(
    call, match, examples, vocabulary
):
    if call.get("options") == "options":
        call = dict(call, options=pipeline.DatasetOptions(batch_size=2))
    with pytest.raises(TypeError, match=match):
        pipeline.make_dataset(
            examples[:2], vocabulary, "sentences", max_units=MAX_UNITS,
            max_tokens=MAX_TOKENS, **call,
        )


def test_dataset_options_is_exported_and_frozen():
    from keras_hsum.data import DatasetOptions

    options = DatasetOptions(batch_size=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batch_size = 8
    assert DatasetOptions is pipeline.DatasetOptions
    # Its defaults are make_dataset's keyword defaults from before the object.
    assert dataclasses.asdict(options) == dict(
        batch_size=4, shuffle_buffer=0, seed=0, bucket_boundaries=None,
        pad_to_max=False, repeat=False, drop_remainder=False, cache=None,
        max_examples=None, require_summary=True, skip_invalid=True, strict=False,
        unicode_errors="strict", include_ids=False,
    )
