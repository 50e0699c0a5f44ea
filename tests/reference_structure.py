"""The Python structure builders: the graph structurer's independent reference.

`keras_hsum.data.structurer.TextStructurer` is the library's only
structuring of raw text. These builders do the same in plain Python, one
example at a time, on the example's own sentence split; the tests check the
graph against them (`tests/data/test_structurer.py`, `test_pipeline.py`)
and `benchmarks/structuring.py` times them as the pre-graph pipeline.
Moved here from `keras_hsum/data/structure.py` (issue 46).

Structuring: one example -> dense int tensors with masks, per model family.

Every builder tokenises the input once with a `Vocabulary` and returns a
`Structured`: numpy `features` of one example (no batch axis), the text of
each row, and a `TruncationReport` that counts everything left out. Nothing
is dropped silently: for the source side,
`report.input_tokens == report.output_tokens + report.dropped_tokens`.

| family       | builder            | rows [P, T] are                                  | used by  |
|--------------|--------------------|--------------------------------------------------|----------|
| `paragraphs` | `build_paragraphs` | paragraphs re-chunked at sentence boundaries to  | HT, PHT  |
|              |                    | at most T tokens, ranked, top P kept (rank order)|          |
| `sections`   | `build_sections`   | sections in reading order, each truncated to T   | Cohan    |
| `snippets`   | `build_snippets`   | consecutive sentences packed up to T = L_snpt    | SEAL     |
|              |                    | tokens, never across a document boundary         |          |
| `sentences`  | `build_sentences`  | one sentence per row, truncated to T             | SHTE     |
| `flat`       | `build_flat`       | [N] ranked paragraphs concatenated, truncated    | FT/Trunc |

Common features (P here is the number of rows actually present, at most
`max_units`; batching pads P):
- `tokens` int32 [P, T], padded with `vocabulary.pad_id`;
- `token_mask` bool [P, T], True on real tokens;
- `paragraph_mask` bool [P], True on real rows;
- `document_ids` int32 [P], the input document each row comes from.

A sentence longer than a row (T tokens) is split at token boundaries
("forced split"); no token is lost by it, and it is counted.
"""

import dataclasses

import numpy as np

from keras_hsum.checks import check_int
from keras_hsum.data.ranking import rank_by_tfidf
from keras_hsum.data.structure import EmptyInputError  # noqa: F401
from keras_hsum.data.structure import EmptySummaryError
from keras_hsum.data.structure import Structured
from keras_hsum.data.structure import TruncationReport  # noqa: F401
from keras_hsum.data.structure import check_options
from keras_hsum.data.structure import context_text


@dataclasses.dataclass
class _Sentence:
    ids: list
    text: str
    document: int
    section: int
    paragraph: int  # reading-order paragraph number over the whole example


def _tokenize(example, vocabulary):
    """All non-empty sentences of an example with their position."""
    records = []
    texts = []
    paragraph_number = 0
    for d, document in enumerate(example.documents):
        for s, section in enumerate(document.sections):
            for paragraph in section.paragraphs:
                for sentence in paragraph:
                    records.append((d, s, paragraph_number))
                    texts.append(sentence)
                paragraph_number += 1
    ids = vocabulary.encode_batch(texts)
    sentences = [
        _Sentence(list(i), t, *r)
        for i, t, r in zip(ids, texts, records)
        if len(i) > 0
    ]
    if not sentences:
        raise EmptyInputError(
            f"Example {example.id!r} has no token in its documents "
            f"({len(example.documents)} documents, {len(texts)} sentences); "
            "expected at least one non-empty sentence."
        )
    return sentences


def _check_limits(max_units, max_tokens):
    for name, value in (("max_units", max_units), ("max_tokens", max_tokens)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(
                f"`{name}` must be a positive int, received {value!r}."
            )


def _pack(sentences, max_tokens, report, vocabulary):
    """Packs consecutive sentences into rows of at most `max_tokens` ids.

    Returns a list of `(ids, text)`; sentences longer than a row are split
    at token boundaries.
    """
    rows = []
    ids, texts = [], []

    def flush():
        if ids:
            rows.append((list(ids), " ".join(texts)))
            ids.clear()
            texts.clear()

    for sentence in sentences:
        if len(sentence.ids) > max_tokens:
            flush()
            report.forced_splits += 1
            for start in range(0, len(sentence.ids), max_tokens):
                piece = sentence.ids[start : start + max_tokens]
                rows.append((piece, vocabulary.decode(piece)))
            continue
        if len(ids) + len(sentence.ids) > max_tokens:
            flush()
        ids.extend(sentence.ids)
        texts.append(sentence.text)
    flush()
    return rows


def _dense(rows, max_tokens, pad_id):
    tokens = np.full((len(rows), max_tokens), pad_id, dtype=np.int32)
    token_mask = np.zeros((len(rows), max_tokens), dtype=bool)
    for i, ids in enumerate(rows):
        tokens[i, : len(ids)] = ids
        token_mask[i, : len(ids)] = True
    return tokens, token_mask


def _finish(rows, documents, texts, max_tokens, vocabulary, report, extra):
    """Shared tail of the row builders: dense tensors + report."""
    tokens, token_mask = _dense(rows, max_tokens, vocabulary.pad_id)
    report.output_tokens = int(token_mask.sum())
    report.dropped_tokens = report.input_tokens - report.output_tokens
    report.examples = 1
    features = {
        "tokens": tokens,
        "token_mask": token_mask,
        "paragraph_mask": np.ones((len(rows),), dtype=bool),
        "document_ids": np.asarray(documents, dtype=np.int32),
    }
    features.update(extra)
    return Structured(features, list(texts), report)


def _sentences_and_report(example, vocabulary, max_units, max_tokens):
    if not hasattr(example, "documents"):
        raise TypeError(
            "The structure builders expect a keras_hsum.data.Example (e.g. from "
            f"`read_examples`), received {type(example).__name__}; a JSONL record "
            "(dict) becomes one with `keras_hsum.data.reader.example_from_dict`."
        )
    if not hasattr(vocabulary, "encode_batch"):
        raise TypeError(
            "The structure builders expect a keras_hsum.data.Vocabulary, received "
            f"{type(vocabulary).__name__}."
        )
    _check_limits(max_units, max_tokens)
    sentences = _tokenize(example, vocabulary)
    report = TruncationReport(input_tokens=sum(len(s.ids) for s in sentences))
    return sentences, report


def _group(sentences, key):
    groups = []
    for sentence in sentences:
        if groups and key(groups[-1][0]) == key(sentence):
            groups[-1].append(sentence)
        else:
            groups.append([sentence])
    return groups


def _rank(example, texts, rank):
    """`(order, scores)` of texts: tf-idf to the query/title, else reading order."""
    context = context_text(example)
    if rank == "tfidf" and context:
        return rank_by_tfidf(context, texts)
    return (
        np.arange(len(texts), dtype=np.int32),
        np.zeros((len(texts),), dtype=np.float32),
    )


def build_paragraphs(
    example,
    vocabulary,
    max_units,
    max_tokens,
    rank="tfidf",
    context_length=32,
    pack="paragraph",
):
    """Paragraphs for HT and PHT: re-chunked, ranked, top P kept.

    Every paragraph of every document is re-chunked at sentence boundaries
    into rows of at most T tokens (long paragraphs, e.g. a whole scisummnet
    section, become several rows). Rows are ranked by tf-idf cosine
    similarity to the query, else the title (Liu et al., 2018); with
    `rank="order"`, or when the example has neither, rows keep reading
    order. The top P rows are kept, best first.

    Args:
        example: an `Example`.
        vocabulary: a `Vocabulary`.
        max_units: P, the most rows kept.
        max_tokens: T, the most tokens per row.
        rank: `"tfidf"` or `"order"`.
        context_length: the most tokens of `context_tokens`.
        pack: `"paragraph"` packs sentences within each source paragraph
            (HT's re-chunking); `"section"` also packs consecutive short
            paragraphs of one section together (meeting transcripts, whose
            paragraphs are single speaker turns).

    Returns:
        A `Structured` with, besides the common features:
        `paragraph_index` int32 [P] (reading-order position of each row
        among all rows before ranking), `rank_score` float32 [P] (tf-idf
        cosine; 0 with `rank="order"`), `context_tokens` int32 [C] (query or
        title tokens, C <= context_length).
    """
    check_options({"rank": rank, "pack": pack, "context_length": context_length})
    sentences, report = _sentences_and_report(
        example, vocabulary, max_units, max_tokens
    )
    rows, documents = [], []
    if pack == "paragraph":
        key = lambda s: s.paragraph  # noqa: E731
    else:
        key = lambda s: (s.document, s.section)  # noqa: E731
    for paragraph in _group(sentences, key):
        packed = _pack(paragraph, max_tokens, report, vocabulary)
        rows.extend(packed)
        documents.extend([paragraph[0].document] * len(packed))
    context = context_text(example)
    texts = [text for _, text in rows]
    order, scores = _rank(example, texts, rank)
    kept = order[:max_units]
    report.dropped_units = len(rows) - len(kept)
    context_tokens = vocabulary.encode(context)[:context_length] if context else []
    return _finish(
        [rows[i][0] for i in kept],
        [documents[i] for i in kept],
        [texts[i] for i in kept],
        max_tokens,
        vocabulary,
        report,
        {
            "paragraph_index": kept.astype(np.int32),
            "rank_score": scores[kept].astype(np.float32),
            "context_tokens": np.asarray(context_tokens, dtype=np.int32),
        },
    )


def build_sections(example, vocabulary, max_units, max_tokens):
    """Sections for the discourse-aware model (Cohan et al., 2018).

    Sections of all documents in reading order; each is its sentences
    concatenated and truncated to T tokens; the first P sections are kept.
    Sections without tokens are skipped.

    Returns:
        A `Structured` with the common features; `texts` are the sections'
        full texts.
    """
    sentences, report = _sentences_and_report(
        example, vocabulary, max_units, max_tokens
    )
    sections = _group(sentences, lambda s: (s.document, s.section))
    report.dropped_units = max(len(sections) - max_units, 0)
    rows, documents, texts = [], [], []
    for section in sections[:max_units]:
        ids = [i for s in section for i in s.ids]
        if len(ids) > max_tokens:
            report.truncated_units += 1
        rows.append(ids[:max_tokens])
        documents.append(section[0].document)
        texts.append(" ".join(s.text for s in section))
    return _finish(rows, documents, texts, max_tokens, vocabulary, report, {})


def build_snippets(example, vocabulary, max_units, max_tokens):
    """Snippets for SEAL (Zhao, Saleh & Liu).

    Consecutive sentences of one document are packed into snippets of at
    most T = L_snpt tokens; a snippet never crosses a document boundary
    (it may cross sections and paragraphs). The first P snippets are kept.

    Returns:
        A `Structured` with the common features; `document_ids` tells
        which input document each snippet comes from (multi-document input).
    """
    sentences, report = _sentences_and_report(
        example, vocabulary, max_units, max_tokens
    )
    rows, documents = [], []
    for document in _group(sentences, lambda s: s.document):
        packed = _pack(document, max_tokens, report, vocabulary)
        rows.extend(packed)
        documents.extend([document[0].document] * len(packed))
    report.dropped_units = max(len(rows) - max_units, 0)
    rows, documents = rows[:max_units], documents[:max_units]
    return _finish(
        [ids for ids, _ in rows],
        documents,
        [text for _, text in rows],
        max_tokens,
        vocabulary,
        report,
        {},
    )


def build_sentences(example, vocabulary, max_units, max_tokens):
    """Sentences for SHTE (González et al., 2020): one per row.

    Each sentence is truncated to T tokens; the first P sentences are kept.

    Returns:
        A `Structured` with the common features; `texts` are the sentences.
    """
    sentences, report = _sentences_and_report(
        example, vocabulary, max_units, max_tokens
    )
    report.dropped_units = max(len(sentences) - max_units, 0)
    kept = sentences[:max_units]
    report.truncated_units = sum(len(s.ids) > max_tokens for s in kept)
    return _finish(
        [s.ids[:max_tokens] for s in kept],
        [s.document for s in kept],
        [s.text for s in kept],
        max_tokens,
        vocabulary,
        report,
        {},
    )


def build_flat(example, vocabulary, max_tokens, rank="tfidf"):
    """One flat sequence for FlatTransformer (FT / Trunc baseline).

    Source paragraphs, ranked as in `build_paragraphs` (whole paragraphs,
    not re-chunked), are concatenated, separated by `<para>` when the
    vocabulary has it, and truncated to `max_tokens` tokens.

    Returns:
        A `Structured` whose features are `tokens` int32 [N] and
        `token_mask` bool [N] (N <= max_tokens, no padding), and whose
        `texts` are the paragraphs in the order used.
    """
    check_options({"rank": rank})
    sentences, report = _sentences_and_report(example, vocabulary, 1, max_tokens)
    paragraphs = _group(sentences, lambda s: s.paragraph)
    texts = [" ".join(s.text for s in p) for p in paragraphs]
    order, _ = _rank(example, texts, rank)
    separator = vocabulary.paragraph_id
    ids = []
    kept_separators = 0  # counted by position: the text may hold `<para>`
    for n, index in enumerate(order):
        if n and separator is not None:
            kept_separators += len(ids) < max_tokens
            ids.append(separator)
        ids.extend(i for s in paragraphs[index] for i in s.ids)
    truncated = ids[:max_tokens]
    content = len(truncated) - kept_separators
    report.examples = 1
    report.output_tokens = content
    report.dropped_tokens = report.input_tokens - content
    if len(ids) > max_tokens:
        report.truncated_units = 1
    return Structured(
        {
            "tokens": np.asarray(truncated, dtype=np.int32),
            "token_mask": np.ones((len(truncated),), dtype=bool),
        },
        [texts[i] for i in order],
        report,
    )


def build_target(summary, vocabulary, max_length, report=None):
    """The decoder target: [BOS] + summary ids + [EOS], at most S ids.

    A longer summary is cut to S - 2 ids before EOS is appended, so every
    target ends with EOS; the cut is counted in `report`.

    Args:
        summary: the reference str.
        vocabulary: a `Vocabulary`.
        max_length: S, at least 3.
        report: an optional `TruncationReport` to count into.

    Returns:
        int32 array [s], s <= S.

    Raises:
        EmptySummaryError: when the summary has no token.
    """
    max_length = check_int("max_length", max_length, 3, hint=" (BOS, a token, EOS)")
    if summary is not None and not isinstance(summary, str):
        raise TypeError(
            f"build_target expects the summary as a str, received {type(summary).__name__}."
        )
    ids = vocabulary.encode(summary) if summary else []
    if not ids:
        raise EmptySummaryError(
            "The summary is empty (no token after tokenisation); a training "
            "or evaluation example needs a reference summary."
        )
    kept = ids[: max_length - 2]
    if report is not None:
        report.target_tokens += len(ids)
        report.target_dropped_tokens += len(ids) - len(kept)
        report.truncated_targets += int(len(kept) < len(ids))
    return np.asarray(
        [vocabulary.bos_id] + kept + [vocabulary.eos_id], dtype=np.int32
    )


BUILDERS = {
    "paragraphs": build_paragraphs,
    "sections": build_sections,
    "snippets": build_snippets,
    "sentences": build_sentences,
}
