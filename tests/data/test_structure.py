"""Tests of the Python structure builders (tests/reference_structure.py),
the graph structurer's reference: property tests and real data.

References used here, independent of the code under test:
- token accounting: every sentence tokenised on its own with the vocabulary;
- document of origin: generated documents use disjoint word groups (no
  shared sentencepiece id), so each token names its document;
- row contents: a plain greedy transcription of the documented packing rule
  ("consecutive whole sentences, at most T tokens; a longer sentence is cut
  into T-token pieces") and, on real data, a decomposition of every row into
  whole sentences.
"""

import collections
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from keras_hsum.data import ranking
import reference_structure as structure
from keras_hsum.data.reader import Document
from keras_hsum.data.reader import Example
from keras_hsum.data.reader import Section
from keras_hsum.data.structure import EmptyInputError
from keras_hsum.data.structure import EmptySummaryError
from keras_hsum.data.structure import TruncationReport

CANDIDATE_WORDS = """
the model data we results table paper system meeting project design remote
control button speech recognition parsing translation corpus sentence words
features training test baseline accuracy precision recall grammar tree
semantic lexical annotation interface market battery colour price user
evaluation marketing industrial designer manager summary experiments
hierarchical transformer summarization zygote quixotic Größe naïve café
""".split()
NUM_GROUPS = 4
ROW_BUILDERS = ("paragraphs", "sections", "snippets", "sentences")


@pytest.fixture(scope="module")
def word_groups(vocabulary):
    """NUM_GROUPS word lists whose sentencepiece ids are pairwise disjoint."""
    groups = [[] for _ in range(NUM_GROUPS)]
    used = [set() for _ in range(NUM_GROUPS)]
    for word in CANDIDATE_WORDS:
        ids = set(vocabulary.encode(word))
        for g in sorted(range(NUM_GROUPS), key=lambda g: len(groups[g])):
            if not any(ids & used[h] for h in range(NUM_GROUPS) if h != g):
                groups[g].append(word)
                used[g] |= ids
                break
    assert all(len(g) >= 6 for g in groups), groups
    # Precondition of the references: sentencepiece segments words
    # independently, so a sentence's ids are its words' ids concatenated.
    for group in groups:
        sentence = " ".join(group)
        assert vocabulary.encode(sentence) == [
            i for w in group for i in vocabulary.encode(w)
        ]
    return groups, used


def weighted(odds, usual, rare):
    """`usual` drawn `odds` times as often as `rare`."""
    return st.integers(0, odds).flatmap(lambda k: rare if k == 0 else usual)


@st.composite
def generated_examples(draw, groups, max_documents=NUM_GROUPS):
    """Random Examples; document d only uses words of group d."""
    num_documents = draw(st.integers(1, max_documents))
    documents = []
    for d in range(num_documents):
        words = st.sampled_from(groups[d])
        length = st.integers(0, 9).flatmap(
            lambda k: st.integers(7, 40) if k < 2 else st.integers(1, 6)
        )
        sentence = weighted(
            5,
            length.flatmap(
                lambda n: st.lists(words, min_size=n, max_size=n).map(" ".join)
            ),
            st.sampled_from(["", "  "]),
        )
        paragraph = weighted(
            7, st.lists(sentence, min_size=1, max_size=4).map(tuple), st.just(())
        )
        section = st.builds(
            Section,
            heading=st.none(),
            paragraphs=weighted(
                5,
                st.lists(paragraph, min_size=1, max_size=3).map(tuple),
                st.just(()),
            ),
        )
        sections = draw(st.lists(section, min_size=1, max_size=3))
        documents.append(Document(None, tuple(sections)))
    all_words = [w for g in groups for w in g]
    context = st.one_of(
        st.none(), st.lists(st.sampled_from(all_words), min_size=1, max_size=4).map(" ".join)
    )
    return Example(
        id=f"gen-{draw(st.integers(0, 10**6))}",
        dataset="generated",
        title=draw(context),
        query=draw(context),
        documents=tuple(documents),
        summary="",
        references=(),
    )


# --- independent references ------------------------------------------------


def sentence_records(example, vocabulary):
    """(ids, document, section key, paragraph key, text) of every non-empty
    sentence, each tokenised on its own."""
    records = []
    paragraph_number = 0
    for d, document in enumerate(example.documents):
        for s, section in enumerate(document.sections):
            for paragraph in section.paragraphs:
                for sentence in paragraph:
                    ids = vocabulary.encode(sentence)
                    if ids:
                        records.append((ids, d, (d, s), paragraph_number, sentence))
                paragraph_number += 1
    return records


def greedy_rows(records, key, max_tokens, vocabulary):
    """Rows of the documented packing rule in reading order: (ids, document, text).

    Within a group (a paragraph, a section or a document, per `key`),
    consecutive whole sentences share a row while they fit in T tokens; a
    sentence longer than T gets rows of its own, T tokens each.
    """
    rows = []
    current = {"ids": [], "texts": [], "group": None, "document": None}

    def flush():
        if current["ids"]:
            rows.append((current["ids"], current["document"], " ".join(current["texts"])))
        current["ids"], current["texts"] = [], []

    for ids, document, section, paragraph, text in records:
        group = {"paragraph": paragraph, "section": section, "document": document}[key]
        if group != current["group"]:
            flush()
            current["group"], current["document"] = group, document
        if len(ids) > max_tokens:
            flush()
            for i in range(0, len(ids), max_tokens):
                piece = ids[i : i + max_tokens]
                rows.append((piece, document, vocabulary.decode(piece)))
            continue
        if len(current["ids"]) + len(ids) > max_tokens:
            flush()
        current["ids"] = current["ids"] + ids
        current["texts"].append(text)
    flush()
    return rows


def row_list(structured):
    tokens = structured.features["tokens"]
    mask = structured.features["token_mask"]
    return [row[m].tolist() for row, m in zip(tokens, mask)]


def check_common(structured, example, vocabulary, max_units, max_tokens, used=None):
    """Checks every row builder's shared contract; returns the input ids."""
    records = sentence_records(example, vocabulary)
    all_ids = [i for ids, *_ in records for i in ids]
    assert vocabulary.pad_id not in all_ids  # real tokens are never padding
    features, report = structured.features, structured.report
    tokens, mask = features["tokens"], features["token_mask"]
    rows = tokens.shape[0]
    assert tokens.dtype == np.int32 and mask.dtype == bool
    assert 1 <= rows <= max_units and tokens.shape == (rows, max_tokens)
    np.testing.assert_array_equal(mask, tokens != vocabulary.pad_id)
    # Real tokens first, padding after (masks are prefixes).
    assert (np.diff(mask.astype(np.int8), axis=1) <= 0).all()
    assert mask[:, 0].all()
    assert features["paragraph_mask"].dtype == bool
    assert features["paragraph_mask"].shape == (rows,) and features["paragraph_mask"].all()
    document_ids = features["document_ids"]
    assert document_ids.dtype == np.int32 and document_ids.shape == (rows,)
    assert ((0 <= document_ids) & (document_ids < len(example.documents))).all()
    assert len(structured.texts) == rows
    # Accounting: nothing lost silently.
    assert report.examples == 1
    assert report.input_tokens == len(all_ids)
    assert report.output_tokens == int(mask.sum())
    assert report.input_tokens == report.output_tokens + report.dropped_tokens
    output = collections.Counter(tokens[mask].tolist())
    source = collections.Counter(all_ids)
    assert not output - source  # a sub-multiset: nothing invented or duplicated
    if report.dropped_tokens == 0:
        assert output == source
    if used is not None:  # every token comes from the row's document
        for row, document in zip(row_list(structured), document_ids):
            assert set(row) <= used[document]
    return records


def build(builder, example, vocabulary, max_units, max_tokens, **kwargs):
    return structure.BUILDERS[builder](
        example, vocabulary, max_units, max_tokens, **kwargs
    )


# --- property tests ---------------------------------------------------------

LIMITS = dict(max_units=st.integers(1, 6), max_tokens=st.integers(1, 20))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), rank=st.sampled_from(["tfidf", "order"]),
       pack=st.sampled_from(["paragraph", "section"]), **LIMITS)
def test_paragraphs_properties(vocabulary, word_groups, data, rank, pack, max_units, max_tokens):
    groups, used = word_groups
    example = data.draw(generated_examples(groups))
    records = sentence_records(example, vocabulary)
    if not records:
        with pytest.raises(EmptyInputError, match=example.id):
            structure.build_paragraphs(example, vocabulary, max_units, max_tokens)
        return
    result = structure.build_paragraphs(
        example, vocabulary, max_units, max_tokens, rank=rank, pack=pack
    )
    check_common(result, example, vocabulary, max_units, max_tokens, used)
    report, features = result.report, result.features
    reference = greedy_rows(records, pack, max_tokens, vocabulary)
    rows = len(row_list(result))
    index = features["paragraph_index"]
    # paragraph_index: distinct positions among all rows before ranking.
    assert index.dtype == np.int32 and len(set(index.tolist())) == rows
    assert rows + report.dropped_units == len(reference)
    assert ((0 <= index) & (index < len(reference))).all()
    if report.dropped_units == 0:
        assert sorted(index.tolist()) == list(range(rows))
    assert row_list(result) == [reference[i][0] for i in index]
    assert features["document_ids"].tolist() == [reference[i][1] for i in index]
    assert result.texts == [reference[i][2] for i in index]
    assert report.forced_splits == sum(len(r[0]) > max_tokens for r in records)
    assert report.truncated_units == 0
    # Ranking: decreasing scores, the best P kept; tf-idf against the
    # query, else the title; reading order without either or with "order".
    scores = features["rank_score"]
    assert scores.dtype == np.float32 and (np.diff(scores) <= 0).all()
    context = example.query or example.title
    if rank == "order" or not context:
        assert index.tolist() == list(range(rows))
        assert (scores == 0).all()
    else:
        all_scores = ranking.tfidf_cosine(context, [text for *_, text in reference])
        np.testing.assert_array_equal(scores, all_scores[index])
        dropped = sorted(set(range(len(reference))) - set(index.tolist()))
        if dropped:
            assert scores.min() >= all_scores[dropped].max()
    context_ids = vocabulary.encode(context)[:32] if context else []
    assert features["context_tokens"].tolist() == context_ids


@settings(max_examples=60, deadline=None)
@given(data=st.data(), **LIMITS)
def test_sections_properties(vocabulary, word_groups, data, max_units, max_tokens):
    groups, used = word_groups
    example = data.draw(generated_examples(groups))
    records = sentence_records(example, vocabulary)
    if not records:
        with pytest.raises(EmptyInputError, match=example.id):
            structure.build_sections(example, vocabulary, max_units, max_tokens)
        return
    result = structure.build_sections(example, vocabulary, max_units, max_tokens)
    check_common(result, example, vocabulary, max_units, max_tokens, used)
    sections = collections.OrderedDict()  # reading order, non-empty only
    for ids, _, section, *_ in records:
        sections.setdefault(section, []).extend(ids)
    expected = list(sections.items())[:max_units]
    assert row_list(result) == [ids[:max_tokens] for _, ids in expected]
    assert result.features["document_ids"].tolist() == [k[0] for k, _ in expected]
    report = result.report
    assert report.dropped_units == max(len(sections) - max_units, 0)
    assert report.truncated_units == sum(len(ids) > max_tokens for _, ids in expected)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), **LIMITS)
def test_snippets_properties(vocabulary, word_groups, data, max_units, max_tokens):
    groups, used = word_groups
    example = data.draw(generated_examples(groups))
    records = sentence_records(example, vocabulary)
    if not records:
        with pytest.raises(EmptyInputError, match=example.id):
            structure.build_snippets(example, vocabulary, max_units, max_tokens)
        return
    result = structure.build_snippets(example, vocabulary, max_units, max_tokens)
    check_common(result, example, vocabulary, max_units, max_tokens, used)
    rows = row_list(result)
    # Reading order: the rows, concatenated, are a prefix of the input ids.
    all_ids = [i for ids, *_ in records for i in ids]
    flat = [i for row in rows for i in row]
    assert flat == all_ids[: len(flat)]
    reference = greedy_rows(records, "document", max_tokens, vocabulary)[:max_units]
    assert rows == [ids for ids, _, _ in reference]
    assert result.features["document_ids"].tolist() == [d for _, d, _ in reference]
    assert result.texts == [text for *_, text in reference]
    assert result.report.dropped_units == max(
        len(greedy_rows(records, "document", max_tokens, vocabulary)) - max_units, 0
    )
    assert result.report.forced_splits == sum(
        len(r[0]) > max_tokens for r in records
    )


@settings(max_examples=60, deadline=None)
@given(data=st.data(), **LIMITS)
def test_sentences_properties(vocabulary, word_groups, data, max_units, max_tokens):
    groups, used = word_groups
    example = data.draw(generated_examples(groups))
    records = sentence_records(example, vocabulary)
    if not records:
        with pytest.raises(EmptyInputError, match=example.id):
            structure.build_sentences(example, vocabulary, max_units, max_tokens)
        return
    result = structure.build_sentences(example, vocabulary, max_units, max_tokens)
    check_common(result, example, vocabulary, max_units, max_tokens, used)
    kept = records[:max_units]
    assert row_list(result) == [ids[:max_tokens] for ids, *_ in kept]
    assert result.features["document_ids"].tolist() == [r[1] for r in kept]
    assert result.report.dropped_units == max(len(records) - max_units, 0)
    assert result.report.truncated_units == sum(len(r[0]) > max_tokens for r in kept)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), max_tokens=st.integers(1, 60),
       rank=st.sampled_from(["tfidf", "order"]))
def test_flat_properties(vocabulary, word_groups, data, max_tokens, rank):
    groups, _ = word_groups
    example = data.draw(generated_examples(groups))
    records = sentence_records(example, vocabulary)
    if not records:
        with pytest.raises(EmptyInputError, match=example.id):
            structure.build_flat(example, vocabulary, max_tokens)
        return
    result = structure.build_flat(example, vocabulary, max_tokens, rank=rank)
    tokens, report = result.features["tokens"], result.report
    assert tokens.dtype == np.int32 and 1 <= len(tokens) <= max_tokens
    assert result.features["token_mask"].all()
    paragraphs = collections.OrderedDict()
    for ids, _, _, paragraph, text in records:
        paragraphs.setdefault(paragraph, []).append((ids, text))
    ids_of = [[i for ids, _ in p for i in ids] for p in paragraphs.values()]
    texts = [" ".join(t for _, t in p) for p in paragraphs.values()]
    context = example.query or example.title
    if rank == "tfidf" and context:
        order, _ = ranking.rank_by_tfidf(context, texts)
    else:
        order = range(len(texts))
    expected, is_separator = [], []
    for n, p in enumerate(order):
        if n:
            expected.append(vocabulary.paragraph_id)
            is_separator.append(True)
        expected += ids_of[p]
        is_separator += [False] * len(ids_of[p])
    assert tokens.tolist() == expected[:max_tokens]
    assert result.texts == [texts[p] for p in order]
    assert report.input_tokens == sum(map(len, ids_of))
    assert report.output_tokens == len(tokens) - sum(is_separator[:max_tokens])
    assert report.input_tokens == report.output_tokens + report.dropped_tokens
    assert report.truncated_units == int(len(expected) > max_tokens)


def test_flat_counts_a_literal_separator_in_the_text_as_content(vocabulary):
    # "<para>" typed in the text is the separator piece too; it is content.
    example = make_example([[["one <para> two"], ["three"]]])
    result = structure.build_flat(example, vocabulary, 100, rank="order")
    report = result.report
    assert result.features["tokens"].tolist().count(vocabulary.paragraph_id) == 2
    assert report.input_tokens == report.output_tokens
    assert report.dropped_tokens == 0


def test_foreign_vocabulary_without_separators(foreign_vocabulary, real_examples):
    example = real_examples("fewsum_yelp", "val")[0]
    records = sentence_records(example, foreign_vocabulary)
    for builder in ROW_BUILDERS:
        result = build(builder, example, foreign_vocabulary, 12, 40)
        check_common(result, example, foreign_vocabulary, 12, 40)
    flat = structure.build_flat(example, foreign_vocabulary, 10_000, rank="order")
    # No `<para>` piece: paragraphs are concatenated as they are.
    assert flat.features["tokens"].tolist() == [i for r in records for i in r[0]]
    assert flat.report.dropped_tokens == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(CANDIDATE_WORDS), max_size=40).map(" ".join),
       st.integers(3, 30))
def test_target_properties(vocabulary, summary, max_length):
    ids = vocabulary.encode(summary)
    report = TruncationReport()
    if not ids:
        with pytest.raises(EmptySummaryError):
            structure.build_target(summary, vocabulary, max_length, report)
        return
    target = structure.build_target(summary, vocabulary, max_length, report)
    assert target.dtype == np.int32 and len(target) <= max_length
    assert target[0] == vocabulary.bos_id and target[-1] == vocabulary.eos_id
    assert target[1:-1].tolist() == ids[: max_length - 2]
    assert report.target_tokens == len(ids)
    assert report.target_dropped_tokens == len(ids) - (len(target) - 2)
    assert report.truncated_targets == int(len(ids) > max_length - 2)


# --- real data ---------------------------------------------------------------


def whole_sentence_rows(rows, sentence_ids, group_of, max_tokens):
    """Asserts rows (reading order) are runs of whole sentences of one group.

    `sentence_ids[k]`, `group_of[k]`: ids and group of the k-th non-empty
    sentence. A sentence longer than T instead spans rows of its own, T
    tokens each but the last (a forced split). Every sentence is used once.
    Returns the number of forced splits.
    """
    k = r = forced = 0
    while k < len(sentence_ids):
        ids = sentence_ids[k]
        if len(ids) > max_tokens:
            for i in range(0, len(ids), max_tokens):
                assert rows[r] == ids[i : i + max_tokens]
                r += 1
            k, forced = k + 1, forced + 1
            continue
        row, taken, group = rows[r], [], group_of[k]
        r += 1
        assert 0 < len(row) <= max_tokens
        while (
            k < len(sentence_ids)
            and group_of[k] == group
            and row[len(taken) : len(taken) + len(sentence_ids[k])] == sentence_ids[k]
        ):
            taken += sentence_ids[k]
            k += 1
        assert taken == row, "a row is not a run of whole sentences of one group"
    assert r == len(rows)
    return forced


def reading_order_rows(result):
    rows = row_list(result)
    order = np.argsort(result.features["paragraph_index"])
    return [rows[i] for i in order]


def test_scisummnet_sections_are_rechunked_at_sentence_boundaries(
    vocabulary, real_examples
):
    max_tokens, checked_forced, checked_rows = 64, 0, 0
    for example in real_examples("scisummnet", "val")[:6]:
        assert max(len(p) for d in example.documents for s in d.sections
                   for p in s.paragraphs) > 10  # long single-paragraph sections
        records = sentence_records(example, vocabulary)
        result = structure.build_paragraphs(
            example, vocabulary, max_units=10_000, max_tokens=max_tokens
        )
        check_common(result, example, vocabulary, 10_000, max_tokens)
        assert result.report.dropped_tokens == 0
        rows = reading_order_rows(result)
        forced = whole_sentence_rows(
            rows, [r[0] for r in records], [r[3] for r in records], max_tokens
        )
        assert forced == result.report.forced_splits
        checked_forced += forced
        checked_rows += len(rows)
        # Ranked by tf-idf to the title: scores decrease.
        assert (np.diff(result.features["rank_score"]) <= 0).all()
    assert checked_rows > 200 and checked_forced > 0


def test_qmsum_meetings_packed_by_section(vocabulary, real_examples):
    max_units, max_tokens = 64, 256
    for example in real_examples("qmsum_general", "val")[:3]:
        records = sentence_records(example, vocabulary)
        result = structure.build_paragraphs(
            example, vocabulary, max_units, max_tokens, pack="section"
        )
        check_common(result, example, vocabulary, max_units, max_tokens)
        report = result.report
        assert report.dropped_units > 0 and report.dropped_tokens > 0
        assert result.features["tokens"].shape == (max_units, max_tokens)
        # Every kept row is whole speaker turns of one topic section.
        full = structure.build_paragraphs(
            example, vocabulary, 100_000, max_tokens, pack="section", rank="order"
        )
        assert full.report.dropped_tokens == 0
        whole_sentence_rows(
            row_list(full), [r[0] for r in records], [r[2] for r in records],
            max_tokens,
        )
        index = result.features["paragraph_index"]
        all_rows = row_list(full)
        assert row_list(result) == [all_rows[i] for i in index]
        # Packing turns together fills rows far better than one turn a row.
        per_turn = structure.build_paragraphs(
            example, vocabulary, 100_000, max_tokens, rank="order"
        )
        assert len(all_rows) < len(row_list(per_turn)) / 2
        assert result.features["context_tokens"].size > 0  # the query


@pytest.mark.parametrize("name", ["fewsum_amazon", "fewsum_yelp"])
def test_fewsum_document_ids_cover_the_eight_reviews(vocabulary, real_examples, name):
    for example in real_examples(name, "val")[:4]:
        assert len(example.documents) == 8
        records = sentence_records(example, vocabulary)
        for builder in ROW_BUILDERS:
            result = build(builder, example, vocabulary, 1000, 48)
            check_common(result, example, vocabulary, 1000, 48)
            document_ids = result.features["document_ids"]
            assert set(document_ids.tolist()) == set(range(8))
            if builder != "paragraphs":
                assert (np.diff(document_ids) >= 0).all()  # reading order
            # The rows of document d hold exactly document d's tokens.
            rows = row_list(result)
            for d in range(8):
                got = collections.Counter(
                    i for row, doc in zip(rows, document_ids) if doc == d for i in row
                )
                expected = collections.Counter(
                    i for ids, doc, *_ in records if doc == d for i in ids
                )
                if result.report.dropped_tokens == 0:
                    assert got == expected
                else:
                    assert not got - expected
        snippets = structure.build_snippets(example, vocabulary, 1000, 48)
        whole_sentence_rows(
            row_list(snippets), [r[0] for r in records], [r[1] for r in records], 48
        )


def test_reports_merge_over_examples(vocabulary, real_examples):
    total = TruncationReport()
    expected = collections.Counter()
    for example in real_examples("scitldr_a", "val")[:10]:
        report = structure.build_sections(example, vocabulary, 2, 32).report
        expected.update(report.as_dict())
        total.merge(report)
    assert total.as_dict() == dict(expected)
    assert total.examples == 10
    assert "10 examples" in str(total)


# --- bad input -----------------------------------------------------------------


def make_example(documents, example_id="toy-1", query=None):
    """documents: a list of documents, each a list of paragraphs (lists of
    sentences) forming one section."""
    return Example(
        id=example_id,
        dataset="toy",
        title=None,
        query=query,
        documents=tuple(
            Document(None, (Section(None, tuple(tuple(p) for p in paragraphs)),))
            for paragraphs in documents
        ),
        summary="",
        references=(),
    )


@pytest.mark.parametrize(
    "builder, kwargs, rows_per_document",
    [("paragraphs", {"pack": "section"}, 1), ("paragraphs", {}, 2),
     ("snippets", {}, 1), ("sections", {}, 1), ("sentences", {}, 2)],
)
def test_rows_never_mix_two_documents(
    vocabulary, word_groups, builder, kwargs, rows_per_document
):
    # Single-section documents of two short paragraphs: everything would
    # fit in one row if document boundaries were ignored.
    groups, used = word_groups
    example = make_example([[[" ".join(g[:2])], [g[2]]] for g in groups])
    result = build(builder, example, vocabulary, 100, 200, **kwargs)
    check_common(result, example, vocabulary, 100, 200, used)
    expected = [d for d in range(len(groups)) for _ in range(rows_per_document)]
    assert result.features["document_ids"].tolist() == expected


@pytest.mark.parametrize("builder", ROW_BUILDERS + ("flat",))
@pytest.mark.parametrize(
    "documents",
    [[], [[]], [[[]]], [[["", "   "]], [["\n"]]]],
    ids=["no documents", "no paragraphs", "empty paragraph", "empty sentences"],
)
def test_empty_input_names_the_example(vocabulary, builder, documents):
    example = make_example(documents, example_id="meeting-42")
    with pytest.raises(EmptyInputError, match="meeting-42"):
        if builder == "flat":
            structure.build_flat(example, vocabulary, 16)
        else:
            build(builder, example, vocabulary, 4, 16)


@pytest.mark.parametrize("summary", ["", "   ", "\n\t"])
def test_empty_summary_raises(vocabulary, summary):
    with pytest.raises(EmptySummaryError):
        structure.build_target(summary, vocabulary, 16)


def test_a_record_or_a_missing_vocabulary_is_a_type_error(vocabulary, real_examples):
    record = {"id": "x", "documents": [{"text": "One sentence."}], "summary": "A summary."}
    for builder in ("paragraphs", "sections", "snippets", "sentences"):
        with pytest.raises(TypeError, match="expect a keras_hsum.data.Example.*received dict"):
            build(builder, record, vocabulary, 4, 16)
        with pytest.raises(TypeError,
                           match="expect a keras_hsum.data.Vocabulary, received NoneType"):
            build(builder, real_examples("scisummnet", "val")[0], None, 4, 16)
    with pytest.raises(TypeError, match="received dict"):
        structure.build_flat(record, vocabulary, 16)


def test_a_summary_that_is_not_text_is_a_type_error(vocabulary):
    with pytest.raises(EmptySummaryError):
        structure.build_target(None, vocabulary, 16)  # no summary: counted as empty
    for summary in (["A list", "of sentences."], b"bytes", 3):
        with pytest.raises(TypeError, match="summary as a str, received"):
            structure.build_target(summary, vocabulary, 16)


@pytest.mark.parametrize("max_units, max_tokens", [(0, 8), (4, 0), (2.5, 8), (4, None)])
def test_invalid_limits_are_rejected(vocabulary, max_units, max_tokens):
    example = make_example([[["A sentence."]]])
    for builder in ROW_BUILDERS:
        with pytest.raises(ValueError, match="max_"):
            build(builder, example, vocabulary, max_units, max_tokens)


def test_invalid_options_are_rejected(vocabulary):
    example = make_example([[["A sentence."]]])
    with pytest.raises(ValueError, match="rank"):
        structure.build_paragraphs(example, vocabulary, 4, 8, rank="bm25")
    with pytest.raises(ValueError, match="pack"):
        structure.build_paragraphs(example, vocabulary, 4, 8, pack="document")
    with pytest.raises(ValueError, match="rank"):
        structure.build_flat(example, vocabulary, 8, rank="bm25")
    with pytest.raises(ValueError, match="max_length"):
        structure.build_target("A summary.", vocabulary, 2)


def test_a_document_100x_longer_than_the_limits_is_fast_and_counted(
    vocabulary, real_examples
):
    meeting = real_examples("qmsum_general", "val")[0]
    max_units, max_tokens = 16, 64
    sections = meeting.documents[0].sections
    repeats = 1
    long_example = meeting
    while long_example.num_words() < 100 * max_units * max_tokens:
        repeats += 1
        long_example = Example(
            id="long", dataset="qmsum", title=None, query=meeting.query,
            documents=(Document(None, sections * repeats),),
            summary=meeting.summary, references=meeting.references,
        )
    input_tokens = None
    for builder in ROW_BUILDERS + ("paragraphs-section",):
        start = time.perf_counter()
        if builder == "paragraphs-section":
            result = structure.build_paragraphs(
                long_example, vocabulary, max_units, max_tokens, pack="section"
            )
        else:
            result = build(builder, long_example, vocabulary, max_units, max_tokens)
        elapsed = time.perf_counter() - start
        assert elapsed < 20, (builder, elapsed)
        report = result.report
        input_tokens = input_tokens or report.input_tokens
        assert report.input_tokens == input_tokens > 100 * max_units * max_tokens
        assert report.output_tokens <= max_units * max_tokens
        assert report.input_tokens == report.output_tokens + report.dropped_tokens
        assert report.dropped_units > 0
        assert result.features["tokens"].shape == (max_units, max_tokens)
    start = time.perf_counter()
    flat = structure.build_flat(long_example, vocabulary, 512)
    assert time.perf_counter() - start < 20
    assert flat.report.dropped_tokens == flat.report.input_tokens - flat.report.output_tokens > 0


def test_a_paragraph_without_sentence_break_is_force_split(vocabulary, real_examples):
    words = [
        w for e in real_examples("scisummnet", "val")[:3] for w in " ".join(e.sentences()).split()
    ]
    sentence = " ".join(words[:5000])
    example = make_example([[["A short first sentence.", sentence, "A last one."]]])
    ids = [vocabulary.encode(s) for s in example.sentences()]
    max_tokens = 128
    result = structure.build_paragraphs(
        example, vocabulary, max_units=1000, max_tokens=max_tokens, rank="order"
    )
    check_common(result, example, vocabulary, 1000, max_tokens)
    report = result.report
    assert report.forced_splits == 1 and report.dropped_tokens == 0
    rows = row_list(result)
    long_rows = -(-len(ids[1]) // max_tokens)
    assert len(rows) == 2 + long_rows
    assert [i for row in rows for i in row] == [i for s in ids for i in s]
    assert all(len(row) == max_tokens for row in rows[1:long_rows])
    # Snippets force-split it the same way; sentences and sections truncate.
    snippets = structure.build_snippets(example, vocabulary, 1000, max_tokens)
    assert snippets.report.forced_splits == 1 and snippets.report.dropped_tokens == 0
    sentences = structure.build_sentences(example, vocabulary, 1000, max_tokens)
    assert sentences.report.truncated_units == 1
    assert sentences.report.dropped_tokens == len(ids[1]) - max_tokens


def test_invalid_utf8_text_is_structured_after_replacement(vocabulary, tmp_path):
    from keras_hsum.data import reader

    path = tmp_path / "latin1.txt"
    path.write_bytes(b"Caf\xe9 prices rose. The meeting ended.\n\nSecond \xff.\n")
    example = reader.read_text(path)
    result = structure.build_sentences(example, vocabulary, 8, 32)
    check_common(result, example, vocabulary, 8, 32)
    assert result.report.dropped_tokens == 0
