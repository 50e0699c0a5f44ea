"""tf.data input pipelines: corpus -> structured examples -> padded batches.

One function, `make_dataset`, feeds training, evaluation and the
benchmarks. It streams examples (`read_examples` on a file or folder, or an
iterable of `Example`), renders each one as the plain text a SavedModel
receives (`render_documents`), structures it for a model family in the
graph with the SavedModel's own `keras_hsum.data.structurer.TextStructurer`
(mapped in parallel, order kept), tokenizes the decoder target, optionally
adds "extras" (ranker targets, graphs, proxy labels, ...), and batches them
with padding:

| family       | features per batch (besides `target` [B,S])                    |
|--------------|-----------------------------------------------------------------|
| `paragraphs` | tokens [B,P,T], token_mask [B,P,T], paragraph_mask [B,P],       |
|              | document_ids [B,P], paragraph_index [B,P], rank_score [B,P],    |
|              | context_tokens [B,C]                                            |
| `sections`   | tokens, token_mask, paragraph_mask, document_ids                |
| `snippets`   | tokens, token_mask, paragraph_mask, document_ids                |
| `sentences`  | tokens, token_mask, paragraph_mask, document_ids                |
| `flat`       | tokens [B,N], token_mask [B,N] (N <= max_tokens)                |

With the family option `oov_words=K` (not `flat`) the structurer adds See et
al.'s extended vocabulary, `source_extended_ids` [B,P,T] and
`source_oov_words` [B,K] (`keras_hsum.features.extended_vocabulary_features`),
and `target` holds V + j for a summary word that is the example's OOV word
j (`TextStructurer.tokenize_extended`).

Padding: token ids (`tokens`, `context_tokens`, `target`) with the
vocabulary's pad id, other integers with 0, booleans with False, floats with
0.0. A padded row has `paragraph_mask` False and is all pad.

Batch shapes: by default each batch is padded to its longest example
(P, S, C, N vary from batch to batch; T is always `max_tokens`).
`bucket_boundaries` groups examples of similar P (N for `flat`) before
padding (`tf.data.Dataset.bucket_by_sequence_length`). `pad_to_max=True`
pads P to `max_units`, S to `max_target_length`, C to the builder's
`context_length` and N to `max_tokens`, so every batch has the same static
shape (XLA/TPU friendly; with `drop_remainder=True` B is static too).

Extras. An extra is a callable `(example, structured) -> dict` of numpy
arrays (one example, no batch axis) merged into the features. It runs in
Python (`tf.py_function`) on the structurer's output: `example` is the
`Example` without its documents (id, dataset, title, query, summary,
references), `structured.texts` the text of each kept row (the
structurer's `unit_texts`) and `structured.features` the example's
features as numpy arrays; it never structures the text again. Its signature
(dtype and axes of each array) is taken, in this order, from:
1. its `feature_spec` attribute (set it with `@declare_features(...)`): a
   dict `name -> (dtype, axes)` or `(dtype, axes, padding_value)`, axes a
   tuple of `"P"` (rows, padded with the batch), `"T"` (= max_tokens),
   `"S"` (target length), `"C"` (context length), an int (fixed size) or
   None (any length, padded to the longest in the batch);
2. otherwise, by running it on the first example that structures: dtypes
   are the arrays' dtypes, an axis whose length is that example's number
   of rows is a `"P"` axis, any other axis is None. Declare the signature
   when this guess can be wrong (an axis that happens to equal P), or when
   `pad_to_max=True` needs the size of a None axis.

Skipped examples. A line that is not valid JSON/UTF-8/schema, an example
whose documents hold no token, an example without a summary (when one is
required), or a `ValueError` raised by an extra on one example is skipped
and counted in a `PipelineReport`; the other examples go on. The report's
`truncation` sums the structurer's counts (`statistics=True`) over the
examples that went through.
With `strict=True` the error is raised instead (inside `make_dataset`, a
Python error raised by the generator reaches the caller as a
`tf.errors.InvalidArgumentError` that carries its message).
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from keras_hsum.checks import check_int
from keras_hsum.checks import options_or_keywords
from keras_hsum.data import reader as reader_lib
from keras_hsum.data import structure
from keras_hsum.data.ranking import rouge2_recall_targets

from keras_hsum.features import AXES
from keras_hsum.features import CONTEXT_TOKENS
from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import EXAMPLE_ID
from keras_hsum.features import FAMILIES
from keras_hsum.features import Feature
from keras_hsum.features import GRAPH
from keras_hsum.features import ORACLE_LABELS
from keras_hsum.features import PARAGRAPH_INDEX
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import PROXY_LABELS
from keras_hsum.features import RANKER_TARGETS
from keras_hsum.features import RANK_SCORE
from keras_hsum.features import SEGMENT_LABELS
from keras_hsum.features import SOURCE_EXTENDED_IDS
from keras_hsum.features import SOURCE_OOV_WORDS
from keras_hsum.features import TARGET
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.features import axis_sizes
from keras_hsum.features import extended_vocabulary_features
from keras_hsum.features import family_features
from keras_hsum.features import padded_shape
from keras_hsum.features import padding_value


@dataclasses.dataclass
class PipelineReport:
    """What a pipeline read, yielded and skipped, and why.

    Counts accumulate over every pass through the source (each epoch of a
    dataset re-reads it unless the dataset is cached). They count what the
    generator produced; with shuffling or prefetching the consumer may not
    have received all of it yet.

    Attributes:
        read: records read: examples plus invalid lines.
        yielded: examples structured and yielded.
        invalid_lines: lines that are not valid UTF-8, JSON or schema.
        empty_input: examples whose documents hold no token.
        empty_summary: examples without a reference summary (when one is
            required or a target is built).
        other_errors: examples for which structuring (or an extra) raised
            another `ValueError`.
        passes: how many times the source was read from the start.
        truncation: the merged `TruncationReport` of the yielded examples.
        errors: the first `max_errors` messages of skipped records, each
            `"[reason] example 'id': message"`.
        max_errors: how many messages to keep.
    """

    read: int = 0
    yielded: int = 0
    invalid_lines: int = 0
    empty_input: int = 0
    empty_summary: int = 0
    other_errors: int = 0
    passes: int = 0
    truncation: structure.TruncationReport = dataclasses.field(
        default_factory=structure.TruncationReport
    )
    errors: list = dataclasses.field(default_factory=list)
    max_errors: int = 10

    @property
    def skipped(self):
        """Records skipped for any reason (`read == yielded + skipped`)."""
        return (
            self.invalid_lines
            + self.empty_input
            + self.empty_summary
            + self.other_errors
        )

    def count_skip(self, reason, message):
        """Counts one skipped record under `reason` and keeps its message.

        Args:
            reason: one of `"invalid_lines"`, `"empty_input"`,
                `"empty_summary"`, `"other_errors"`.
            message: what went wrong (it should name the example).
        """
        if reason not in (
            "invalid_lines",
            "empty_input",
            "empty_summary",
            "other_errors",
        ):
            raise ValueError(
                "`reason` must be 'invalid_lines', 'empty_input', "
                f"'empty_summary' or 'other_errors', received {reason!r}."
            )
        setattr(self, reason, getattr(self, reason) + 1)
        if len(self.errors) < self.max_errors:
            self.errors.append(f"[{reason}] {message}")

    def as_dict(self):
        """The report as plain Python values (for JSON)."""
        values = dataclasses.asdict(self)
        values["skipped"] = self.skipped
        return values

    def __str__(self):
        text = (
            f"Read {self.read:,} records in {self.passes} pass(es), yielded "
            f"{self.yielded:,} examples and skipped {self.skipped:,} "
            f"({self.invalid_lines:,} invalid lines, {self.empty_input:,} "
            f"with empty input, {self.empty_summary:,} with an empty "
            f"summary, {self.other_errors:,} other errors). Truncation: "
            f"{self.truncation}"
        )
        if self.errors:
            shown = "; ".join(self.errors[:3])
            more = len(self.errors) - 3
            text += f" First errors: {shown}" + (
                f" (and {more} more kept in `errors`)." if more > 0 else "."
            )
        return text


def declare_features(**specs):
    """Declares the features an extra returns (decorator).

    Args:
        **specs: `name=(dtype, axes)` or `name=(dtype, axes, padding_value)`
            per returned array; dtype a numpy dtype or its name, axes a
            tuple of `"P"`, `"T"`, `"S"`, `"C"`, `"N"`, ints and None (see
            the module docstring). Without a padding value, arrays are
            padded with 0 / False / 0.0.

    Returns:
        A decorator that sets `feature_spec` on the function and returns it.

    Example:
    >>> @declare_features(graph=("float32", ("P", "P")))
    ... def similarity_graph(example, structured):
    ...     ...
    """
    normalised = {name: _spec(name, value) for name, value in specs.items()}

    def decorate(function):
        function.feature_spec = normalised
        return function

    return decorate


def _spec(name, value):
    if not isinstance(value, (tuple, list)) or len(value) not in (2, 3):
        raise ValueError(
            f"The spec of feature {name!r} must be (dtype, axes) or "
            f"(dtype, axes, padding_value), received {value!r}."
        )
    dtype, axes = np.dtype(value[0]), tuple(value[1])
    for axis in axes:
        if not (
            axis is None
            or axis in AXES
            or (isinstance(axis, int) and axis >= 0)
        ):
            raise ValueError(
                f"Axis {axis!r} of feature {name!r} is not one of "
                f"{', '.join(AXES)}, a non-negative int or None."
            )
    padding = value[2] if len(value) == 3 else None
    return Feature(dtype, axes, padding)


@declare_features(ranker_targets=("float32", ("P",)))
def ranker_targets(example, structured):
    """HT's learned-ranker targets: ROUGE-2 recall of each kept row.

    An extra for `structured_examples`/`make_dataset` (Liu & Lapata, 2019,
    §3): for every row the builder kept, the fraction of the summary's
    bigrams it covers (rouge-score tokenizer, Porter stemming).

    Args:
        example: the `Example` (its `summary` is the reference).
        structured: the builder's `Structured` (its `texts`, one per row).

    Returns:
        `{"ranker_targets": float32 [P]}` in [0, 1]; zeros when the example
        has no summary.
    """
    return {
        RANKER_TARGETS: rouge2_recall_targets(
            structured.texts, example.summary or ""
        )
    }


def paragraph_graph(kind="similarity", **graph_options):
    """An extra that adds HT's paragraph graph for graph-informed attention.

    For the `"paragraphs"` family the graph is built in the graph by the
    structurer (`TextStructurer(..., graph_kind=kind,
    graph_options=graph_options)`, the one an exported SavedModel runs), so
    training reads the graph serving computes; the extra then runs no
    Python. Other families, and a corpus-level tf-idf `model` (which the
    structurer does not take), compute it in Python with
    `keras_hsum.data.graphs.graph_for` on the structurer's rows, the
    reference the in-graph graph equals.

    Args:
        kind: `"similarity"` (tf-idf cosine with a threshold) or
            `"discourse"` (the approximate discourse graph); see
            `keras_hsum.data.graphs`.
        **graph_options: passed to the graph function (e.g. `threshold`).

    Returns:
        An extra returning `{"graph": float32 [P, P]}`, row and column i
        being row i of the structured example; the raw graph (the layer
        row-normalises it over valid paragraphs). Padded rows and columns
        of a batch are 0. Its `structurer_options` (None when the graph
        is computed in Python) are the structurer's family options that
        build it.
    """
    from keras_hsum.data import graphs
    from keras_hsum.data.structuring.graphs import GRAPH_OPTIONS

    if kind not in ("similarity", "discourse"):
        raise ValueError(
            f"`kind` must be 'similarity' or 'discourse', received {kind!r}."
        )

    @declare_features(graph=("float32", ("P", "P")))
    def graph(example, structured):
        return {GRAPH: graphs.graph_for(structured, kind, **graph_options)}

    graph.__name__ = f"{kind}_graph"
    graph.structurer_options = (
        {"graph_kind": kind, "graph_options": dict(graph_options)}
        if set(graph_options) <= set(GRAPH_OPTIONS[kind])
        else None
    )
    return graph


def seal_labels(segment_length=None, vocabulary=None):
    """An extra that adds SEAL's proxy extractive labels (snippets family).

    Args:
        segment_length: L_seg; when given, snippets are also labelled
            against every summary segment of L_seg tokens.
        vocabulary: the `Vocabulary` whose tokens define segments (the
            decoder's tokens); words without it.

    The labels read the whole reference summary, also when
    `max_target_length` cuts the decoder's target shorter (the tiny
    configs cut most qmsum_general summaries): they say which snippets the
    summary draws on, not only its first S - 2 tokens. Segment rows beyond
    the decoder's segments are dropped by the model.

    Returns:
        An extra returning `{"proxy_labels": float32 [P]}` (mean ROUGE-1/2
        F1 of each snippet against the whole summary) and, with
        `segment_length`, `{"segment_labels": float32 [M, P]}` (M summary
        segments, padded with 0 to the longest in the batch).
    """
    from keras_hsum.data import labels

    specs = {PROXY_LABELS: ("float32", ("P",))}
    if segment_length is not None:
        specs[SEGMENT_LABELS] = ("float32", (None, "P"))

    @declare_features(**specs)
    def proxy_labels(example, structured):
        result = labels.seal_proxy_labels(
            structured.texts, example.summary, segment_length, vocabulary
        )
        out = {PROXY_LABELS: result.summary_labels}
        if segment_length is not None:
            out[SEGMENT_LABELS] = result.segment_labels
        return out

    return proxy_labels


@declare_features(oracle_labels=("float32", ("P",)))
def oracle_labels(example, structured):
    """An extra that marks the rows of the greedy ROUGE oracle extract.

    For the `sentences` family (extractive baselines, SHTE's evaluation):
    1.0 on the kept sentences that the greedy oracle (`labels.greedy_oracle`
    against all references) selects, 0.0 elsewhere: float32 [P].
    """
    from keras_hsum.data import labels

    references = list(example.references) or [example.summary]
    chosen = labels.greedy_oracle(structured.texts, references)
    return {ORACLE_LABELS: labels.oracle_labels(len(structured.texts), chosen)}


def _check_arguments(
    family, max_units, max_tokens, family_options, max_target_length, extras
):
    """Validates the arguments; returns (family options with defaults, extras)."""
    from keras_hsum.data.structuring.options import EXTRA_OPTIONS
    from keras_hsum.data.structuring.options import FAMILY_OPTIONS

    if family not in FAMILIES:
        raise ValueError(
            f"Unknown family {family!r}; expected one of {', '.join(FAMILIES)}."
        )
    options = dict(family_options or {})
    allowed = sorted(set(FAMILY_OPTIONS[family]) | set(EXTRA_OPTIONS.get(family, ())))
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"Unknown family_options {unknown} for family {family!r}; "
            f"it accepts {allowed or 'none'}."
        )
    structure.check_options(options)
    limits = [("max_tokens", max_tokens)]
    if family != "flat":
        limits.append(("max_units", max_units))
    for name, value in limits:
        check_int(name, value, owner=f"family {family!r}")
    check_int("max_target_length", max_target_length, 3, allow_none=True,
              hint=" (BOS, a token, EOS)")
    extras = list(extras or ())
    for extra in extras:
        if not callable(extra):
            raise TypeError(
                "Every extra must be a callable (example, structured) -> dict; "
                f"received {extra!r}."
            )
    return dict(FAMILY_OPTIONS[family], **options), extras


def _read(source, report, skip_invalid, unicode_errors):
    """Yields the source's examples, counting invalid lines into `report`."""
    if isinstance(source, (str, os.PathLike)):
        read_report = reader_lib.ReadReport(max_errors=report.max_errors)
        seen = 0

        def sync():
            nonlocal seen
            while seen < read_report.skipped:
                message = (
                    read_report.errors[seen]
                    if seen < len(read_report.errors)
                    else "invalid line"
                )
                report.read += 1
                report.count_skip("invalid_lines", message)
                seen += 1

        for example in reader_lib.read_examples(
            source, skip_invalid, unicode_errors, read_report
        ):
            sync()
            report.read += 1
            yield example
        sync()
        return
    for example in source:
        if not isinstance(example, reader_lib.Example):
            raise TypeError(
                "`source` must be a path or an iterable of "
                "keras_hsum.data.reader.Example; it yielded a "
                f"{type(example).__name__}. Read files with `read_examples`."
            )
        report.read += 1
        yield example


_RAW_SIGNATURE = {
    "documents": tf.TensorSpec([None], tf.string),
    "title": tf.TensorSpec([], tf.string),
    "query": tf.TensorSpec([], tf.string),
    "summary": tf.TensorSpec([], tf.string),
    "references": tf.TensorSpec([None], tf.string),
    EXAMPLE_ID: tf.TensorSpec([], tf.string),
    "dataset": tf.TensorSpec([], tf.string),
}
# The structurer's per-example truncation counts (`statistics=True`).
_STATISTICS = ("input_tokens", "output_tokens", "dropped_units",
               "truncated_units", "forced_splits")
# Raw examples are structured this many at a time (the structurer is
# vectorised over a batch), then unbatched.
_STRUCTURE_CHUNK = 32


def _name(extra):
    return getattr(extra, "__name__", repr(extra))


def _raw_examples(source, report, needs_summary, skip_invalid, strict, unicode_errors,
                  failures):
    """Yields each readable example as strings: documents rendered as the
    SavedModel receives them (`render_documents`), title, query, summary,
    references, id. Counts what it skips into `report`; an error it raises
    is also appended to `failures` (tf.data turns it into an
    InvalidArgumentError; `structured_examples` raises the original)."""
    try:
        yield from _raw_strings(
            source, report, needs_summary, skip_invalid, strict, unicode_errors
        )
    except Exception as error:
        failures.append(error)
        raise


def _raw_strings(source, report, needs_summary, skip_invalid, strict, unicode_errors):
    report.passes += 1
    for example in _read(source, report, skip_invalid and not strict, unicode_errors):
        if needs_summary and not (example.summary and example.summary.strip()):
            error = structure.EmptySummaryError(
                "The summary is empty; a training or evaluation example needs "
                "a reference summary (pass require_summary=False and no "
                "max_target_length to structure examples without one)."
            )
            if strict:
                raise error
            report.count_skip("empty_summary", f"example {example.id!r}: {error}")
            continue
        documents = reader_lib.render_documents(example)
        if not any(document.strip() for document in documents):
            error = structure.EmptyInputError("The example's documents hold no text.")
            if strict:
                raise error
            report.count_skip("empty_input", f"example {example.id!r}: {error}")
            continue
        report.yielded += 1
        yield {
            "documents": np.asarray(documents or [""], dtype=object),
            "title": example.title or "",
            "query": example.query or "",
            "summary": example.summary or "",
            "references": np.asarray(list(example.references), dtype=object).reshape(-1),
            EXAMPLE_ID: example.id,
            "dataset": example.dataset or "",
        }


def _uncount(report, reason, strict, failures):
    """A py_function body: one example the reader passed was dropped by the
    graph (its text held no token, or its summary none)."""

    def uncount(example_id):
        name = example_id.numpy().decode("utf-8", "replace")
        message = {
            "empty_input": "the documents hold no token after tokenisation",
            "empty_summary": "the summary holds no token after tokenisation",
        }[reason]
        if strict:
            error = (
                structure.EmptyInputError if reason == "empty_input"
                else structure.EmptySummaryError
            )(f"example {name!r}: {message}")
            failures.append(error)
            raise error
        report.yielded -= 1
        report.count_skip(reason, f"example {name!r}: {message}")
        return False

    return uncount


def _structured_from_tensors(values, family):
    """One graph-structured example as (`Example` without documents,
    `Structured`) for the Python extras."""

    def text(value):
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)

    texts = [text(t) for t in values["unit_texts"]]
    if family == "flat":
        texts = [t for t in texts if t]
    example = reader_lib.Example(
        id=text(values[EXAMPLE_ID]),
        dataset=text(values["dataset"]) or None,
        title=text(values["title"]) or None,
        query=text(values["query"]) or None,
        documents=(),
        summary=text(values["summary"]),
        references=tuple(text(r) for r in values["references"]),
    )
    internal = set(_RAW_SIGNATURE) | set(_STATISTICS) | {"unit_texts", "summary_tokens_count"}
    features = {name: value for name, value in values.items() if name not in internal}
    return example, structure.Structured(
        features=features, texts=texts, report=structure.TruncationReport()
    )


def _run_extras(extras, example, structured):
    """The extras' outputs on one example: a list of (extra, dict)."""
    outputs = []
    for extra in extras:
        values = extra(example, structured)
        if not isinstance(values, dict):
            raise TypeError(
                f"Extra {_name(extra)} must return a dict of numpy arrays, "
                f"returned a {type(values).__name__}."
            )
        for name in values:
            if name in structured.features or any(name in v for _, v in outputs):
                raise TypeError(
                    f"Extra {_name(extra)} returns feature {name!r}, which "
                    "already exists (from the structurer or another extra); "
                    "rename it."
                )
        outputs.append((extra, values))
    return outputs


def _trim(features, family, pad_id):
    """Cuts the structurer's padded rows (P), tokens (N) and context (C) to
    the example's own sizes; batching pads them again."""
    features = dict(features)
    if family == "flat":
        length = tf.reduce_sum(tf.cast(features[TOKEN_MASK], tf.int32))
        features[TOKENS] = features[TOKENS][:length]
        features[TOKEN_MASK] = features[TOKEN_MASK][:length]
        features["unit_texts"] = tf.boolean_mask(
            features["unit_texts"], tf.not_equal(features["unit_texts"], "")
        )
        return features
    rows = tf.reduce_sum(tf.cast(features[PARAGRAPH_MASK], tf.int32))
    for name in (TOKENS, TOKEN_MASK, PARAGRAPH_MASK, DOCUMENT_IDS,
                 "unit_texts", PARAGRAPH_INDEX, RANK_SCORE, SOURCE_EXTENDED_IDS):
        if name in features:
            features[name] = features[name][:rows]
    if GRAPH in features:
        features[GRAPH] = features[GRAPH][:rows, :rows]
    if CONTEXT_TOKENS in features:
        context = features[CONTEXT_TOKENS]
        features[CONTEXT_TOKENS] = context[
            : tf.reduce_sum(tf.cast(tf.not_equal(context, pad_id), tf.int32))
        ]
    return features


def _structured_dataset(
    source, vocabulary, family, max_units, max_tokens, max_target_length,
    options, report, require_summary, skip_invalid, strict, unicode_errors,
    failures,
):
    """Unbatched examples, structured in the graph by `TextStructurer`:
    its features (trimmed to the example's sizes), `unit_texts`, `target`
    (with `max_target_length`) and the raw strings the extras read."""
    from keras_hsum.data.structurer import TextStructurer

    # A `Vocabulary` is read as its SentencePiece proto; a PresetVocabulary
    # (a backbone preset's tokenizer) is used as it is.
    structurer = TextStructurer(
        vocabulary, family, max_units, max_tokens, statistics=True, **options
    )
    needs_summary = bool(require_summary or max_target_length)

    def raw():
        return _raw_examples(
            source, report, needs_summary, skip_invalid, strict, unicode_errors,
            failures,
        )

    dataset = tf.data.Dataset.from_generator(raw, output_signature=_RAW_SIGNATURE)

    mask = TOKEN_MASK if family == "flat" else PARAGRAPH_MASK
    count_truncation = _truncation_counter(report, max_target_length)

    def structure_chunk(chunk):
        features = structurer(
            chunk["documents"].to_tensor(default_value=""),
            title=chunk["title"],
            query=chunk["query"],
        )
        out = dict(chunk)
        out.update(features)
        if max_target_length:
            if structurer.oov_words:
                # A summary word that is a source OOV word j is V + j.
                ids = structurer.tokenize_extended(
                    chunk["summary"], features[SOURCE_OOV_WORDS]
                )
            else:
                ids = structurer.tokenize(chunk["summary"])
            count = ids.nrows()
            edge = tf.ones([count, 1], tf.int32)
            out[TARGET] = tf.concat(
                [
                    tf.RaggedTensor.from_tensor(edge * vocabulary.bos_id),
                    tf.cast(ids[:, : max_target_length - 2], tf.int32),
                    tf.RaggedTensor.from_tensor(edge * vocabulary.eos_id),
                ],
                axis=1,
            )
            out["summary_tokens_count"] = tf.cast(ids.row_lengths(), tf.int32)
        # The chunk's truncation counts, over the examples the filter below
        # keeps, go into the report in one call per chunk.
        kept = tf.reduce_any(out[mask], axis=1)
        if max_target_length:
            kept &= out["summary_tokens_count"] > 0
        names = _STATISTICS + (("summary_tokens_count",) if max_target_length else ())
        sums = tf.stack([
            tf.reduce_sum(tf.where(kept, out[name], 0)) for name in names
        ])
        if max_target_length:
            cut = tf.maximum(out["summary_tokens_count"] - (max_target_length - 2), 0)
            sums = tf.concat([sums, [
                tf.reduce_sum(tf.where(kept, cut, 0)),
                tf.reduce_sum(tf.cast(kept & (cut > 0), tf.int32)),
            ]], 0)
        sums = tf.concat([sums, [tf.reduce_sum(tf.cast(kept, tf.int32))]], 0)
        counted = tf.py_function(count_truncation, [sums], tf.bool)
        with tf.control_dependencies([counted]):
            out[TOKENS] = tf.identity(out[TOKENS])
        return out

    dataset = (
        dataset.ragged_batch(_STRUCTURE_CHUNK)
        .map(structure_chunk, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .unbatch()
    )
    count_empty_input = _uncount(report, "empty_input", strict, failures)
    count_empty_summary = _uncount(report, "empty_summary", strict, failures)

    def keep(example):
        has_input = tf.reduce_any(example[mask])
        kept = tf.cond(
            has_input,
            lambda: tf.constant(True),
            lambda: tf.py_function(count_empty_input, [example[EXAMPLE_ID]], tf.bool),
        )
        if max_target_length:
            has_summary = example["summary_tokens_count"] > 0
            kept = kept & tf.cond(
                has_summary | ~has_input,
                lambda: tf.constant(True),
                lambda: tf.py_function(
                    count_empty_summary, [example[EXAMPLE_ID]], tf.bool
                ),
            )
        return tf.reshape(kept, [])

    def finish(example):
        return _trim(dict(example), family, vocabulary.pad_id)

    return dataset.filter(keep).map(
        finish, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )


def _truncation_counter(report, max_target_length):
    """A py_function body adding one chunk's summed counts to
    `report.truncation`: the structurer's statistics, then (with a target)
    summary tokens, summary tokens cut and targets cut, then examples."""

    def count(sums):
        values = [int(v) for v in sums.numpy()]
        counted = dict(zip(_STATISTICS, values))
        counted["dropped_tokens"] = counted["input_tokens"] - counted["output_tokens"]
        if max_target_length:
            (counted["target_tokens"], counted["target_dropped_tokens"],
             counted["truncated_targets"]) = values[len(_STATISTICS):len(_STATISTICS) + 3]
        counted["examples"] = values[-1]
        report.truncation.merge(structure.TruncationReport(**counted))
        return True

    return count


def _uncount_truncation(report, values, max_target_length):
    """Takes one example's counts back out of `report.truncation` (an
    extra skipped it after its chunk was counted)."""
    counted = {name: -int(values[name]) for name in _STATISTICS}
    counted["dropped_tokens"] = counted["input_tokens"] - counted["output_tokens"]
    counted["examples"] = -1
    if max_target_length:
        tokens = int(values["summary_tokens_count"])
        cut = max(tokens - (max_target_length - 2), 0)
        counted.update(target_tokens=-tokens, target_dropped_tokens=-cut,
                       truncated_targets=-int(cut > 0))
    report.truncation.merge(structure.TruncationReport(**counted))


def _with_extras(dataset, extras, names, specs, family, max_tokens, max_target_length,
                 report, strict, failures):
    """Adds the extras' arrays (`names`), computed in Python from the
    structurer's output (`tf.py_function`); an extra's ValueError skips the
    example."""
    if not extras:
        return dataset
    dtypes = [tf.as_dtype(specs[name].numpy_dtype) for name in names]
    keys = sorted(dataset.element_spec)

    def row(*tensors):
        values = {key: tensor.numpy() for key, tensor in zip(keys, tensors)}
        example, structured = _structured_from_tensors(values, family)
        try:
            outputs = _run_extras(extras, example, structured)
        except ValueError as error:
            if strict:
                raise
            report.yielded -= 1
            _uncount_truncation(report, values, max_target_length)
            report.count_skip("other_errors", f"example {example.id!r}: {error}")
            return [np.asarray(False)] + [
                np.zeros([0] * len(specs[name].axes), specs[name].numpy_dtype)
                for name in names
            ]
        merged = {}
        for _, values_out in outputs:
            merged.update(values_out)
        rows = len(structured.texts) if family != "flat" else None
        merged = _conform(merged, {n: specs[n] for n in names}, max_tokens, rows)
        return [np.asarray(True)] + [merged[name] for name in names]

    def run(*tensors):
        try:
            return row(*tensors)
        except Exception as error:
            failures.append(error)
            raise

    def add(example):
        results = tf.py_function(
            run, [example[key] for key in keys], [tf.bool] + dtypes
        )
        example = dict(example)
        example["_extras_ok"] = tf.reshape(results[0], [])
        for name, value in zip(names, results[1:]):
            value.set_shape([None] * len(specs[name].axes))
            example[name] = value
        return example

    def ok(example):
        return example["_extras_ok"]

    def drop_flag(example):
        example = dict(example)
        example.pop("_extras_ok")
        return example

    return (
        dataset.map(add, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .filter(ok)
        .map(drop_flag)
    )


def _prepared(
    source, vocabulary, family, max_units, max_tokens, max_target_length,
    family_options, extras, report, require_summary, skip_invalid, strict,
    unicode_errors, include_ids,
):
    """(unbatched dataset of one signature, specs): the whole per-example
    pipeline shared by `make_dataset` and `structured_examples`."""
    options, extras = _check_arguments(
        family, max_units, max_tokens, family_options, max_target_length, extras
    )
    # Extras the structurer computes itself (the paragraph graph): their
    # options go to the structurer, and they run no Python.
    in_graph = [
        extra for extra in extras
        if family == "paragraphs" and getattr(extra, "structurer_options", None)
    ]
    structurer_options = dict(options)
    for extra in in_graph:
        if set(extra.structurer_options) & set(structurer_options):
            raise ValueError(
                f"Extra {_name(extra)} sets the structurer options "
                f"{sorted(extra.structurer_options)}, which family_options or "
                "another extra already set; give one paragraph graph."
            )
        structurer_options.update(extra.structurer_options)
    arguments = (
        source, vocabulary, family, max_units, max_tokens, max_target_length,
        structurer_options,
    )
    specs = family_features(family, bool(max_target_length), include_ids)
    if options.get("graph_kind"):
        # family_options asked the structurer for the graph itself: keep it.
        specs.update(paragraph_graph(options["graph_kind"]).feature_spec)
    if options.get("oov_words"):
        specs.update(extended_vocabulary_features(options["oov_words"]))
    for extra in extras:
        for name, spec in getattr(extra, "feature_spec", {}).items():
            specs[name] = spec
    extras = [extra for extra in extras if extra not in in_graph]
    names = [name for extra in extras for name in getattr(extra, "feature_spec", {})]
    undeclared = [extra for extra in extras if not hasattr(extra, "feature_spec")]
    if undeclared:
        inferred = _infer_extra_specs(
            undeclared, arguments, require_summary, unicode_errors
        )
        specs.update(inferred)
        names += list(inferred)
    failures = []
    dataset = _structured_dataset(
        *arguments, report, require_summary, skip_invalid, strict, unicode_errors,
        failures,
    )
    dataset = _with_extras(
        dataset, extras, names, specs, family, max_tokens, max_target_length, report,
        strict, failures,
    )
    kept = set(specs)

    def select(example):
        return {name: example[name] for name in kept}

    dataset = dataset.map(select, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset, specs, options, failures


def structured_examples(
    source,
    vocabulary,
    family,
    max_units,
    max_tokens,
    max_target_length=None,
    family_options=None,
    extras=None,
    report=None,
    require_summary=True,
    skip_invalid=True,
    strict=False,
    unicode_errors="strict",
    include_ids=False,
):
    """Streams the features of each example, structured for one family.

    The per-example stage of `make_dataset`: every example's documents are
    rendered as plain text (`render_documents`) and structured in the graph
    by `keras_hsum.data.structurer.TextStructurer`, the structurer the
    exported SavedModel runs, so training reads what serving computes.

    Args:
        source: a corpus path (a JSONL/text file or a folder of them, read
            with `read_examples`) or an iterable of `Example`.
        vocabulary: a `Vocabulary`.
        family: `"paragraphs"`, `"sections"`, `"snippets"`, `"sentences"`
            or `"flat"`.
        max_units: P, the most rows (ignored for `"flat"`).
        max_tokens: T, the most tokens per row (N, the most tokens, for
            `"flat"`).
        max_target_length: S; when given, adds `target` int32 [s] (BOS,
            summary ids, EOS; s <= S).
        family_options: the family's options, e.g.
            `{"rank": "order", "pack": "section"}` for `"paragraphs"`.
        extras: callables `(example, structured) -> dict of numpy arrays`
            merged into the features (e.g. `ranker_targets`). They run in
            Python on the structurer's output: `example` is the `Example`
            without its documents (id, title, query, summary, references),
            `structured.texts` the text of each kept row and
            `structured.features` the example's features as numpy.
        report: a `PipelineReport` that receives the counts.
        require_summary: skip (and count) examples without a summary.
        skip_invalid: skip (and count) invalid lines of a corpus file; when
            False the reader raises `InvalidExampleError`.
        strict: raise the first error of any kind instead of skipping.
        unicode_errors: `"strict"` (lines with invalid UTF-8 are invalid)
            or `"replace"` (keep them with U+FFFD).
        include_ids: add `example_id`, the example's id (0-d object array).

    Yields:
        One dict of numpy arrays per good example, without batch axis:
        `tokens` int32 [P,T], `token_mask` bool [P,T], `paragraph_mask`
        bool [P], `document_ids` int32 [P] (`tokens`/`token_mask` [N] for
        `"flat"`), the family's extras (see `make_dataset`), `target`
        int32 [s] and the extras' arrays.

    Raises:
        ValueError: for an unknown family, bad limits or family options
            (before the first example is read).
    """
    report = report if report is not None else PipelineReport()
    dataset, specs, _, failures = _prepared(
        source, vocabulary, family, max_units, max_tokens, max_target_length,
        family_options, extras, report, require_summary, skip_invalid, strict,
        unicode_errors, include_ids,
    )
    iterator = dataset.as_numpy_iterator()
    while True:
        try:
            example = next(iterator)
        except StopIteration:
            return
        except tf.errors.InvalidArgumentError:
            if failures:  # a Python error inside the pipeline: raise it as is
                raise failures[0] from None
            raise
        if include_ids:
            example[EXAMPLE_ID] = np.asarray(
                example[EXAMPLE_ID].decode("utf-8"), dtype=object
            )
        yield example


def _infer_extra_specs(extras, arguments, require_summary, unicode_errors):
    """Specs of undeclared extras from their outputs on the first example
    that structures."""
    source, vocabulary, family = arguments[:3]
    dataset = _structured_dataset(
        *arguments, PipelineReport(), require_summary, True, False, unicode_errors, []
    )
    for values in dataset.take(1).as_numpy_iterator():
        example, structured = _structured_from_tensors(values, family)
        outputs = _run_extras(extras, example, structured)
        rows = None
        if PARAGRAPH_MASK in structured.features:
            rows = structured.features[PARAGRAPH_MASK].shape[0]
        specs = {}
        for _, values_out in outputs:
            for name, value in values_out.items():
                value = np.asarray(value)
                axes = tuple("P" if size == rows else None for size in value.shape)
                specs[name] = Feature(value.dtype, axes)
        return specs
    raise ValueError(
        "Cannot infer the signature of undeclared extras: the source "
        "holds no example that structures. Check the source (see the "
        "PipelineReport) or declare the extras with @declare_features."
    )


def _example_shape(spec, max_tokens):
    """Per-example shape: T and fixed axes known, the others None."""
    shape = []
    for axis in spec.axes:
        if axis == "T":
            shape.append(max_tokens)
        elif isinstance(axis, int):
            shape.append(axis)
        else:
            shape.append(None)
    return shape


def _missing_size(name, axis):
    hint = {
        "P": " (give max_units)",
        "S": " (give max_target_length)",
    }.get(axis, "; declare its size with @declare_features")
    return ValueError(
        f"pad_to_max=True needs the size of every axis, but axis {axis!r} of "
        f"feature {name!r} has none{hint}."
    )


def _conform(features, specs, max_tokens, rows):
    """Checks and casts one example's arrays against the signature."""
    if set(features) != set(specs):
        raise TypeError(
            f"Expected the features {sorted(specs)}, the example has "
            f"{sorted(features)}; an extra returned other names than it "
            "declared (or than it returned on the first example)."
        )
    out = {}
    for name, spec in specs.items():
        value = np.asarray(features[name])
        if value.ndim != len(spec.axes):
            raise TypeError(
                f"Feature {name!r} has shape {value.shape}; expected rank "
                f"{len(spec.axes)} (axes {spec.axes})."
            )
        for size, axis in zip(value.shape, spec.axes):
            expected = (
                rows if axis == "P" else max_tokens if axis == "T" else axis
            )
            if isinstance(expected, (int, np.integer)) and size != expected:
                raise TypeError(
                    f"Feature {name!r} has shape {value.shape}; axis "
                    f"{axis!r} should have size {expected}. Fix the extra "
                    "that returns it or its declared axes."
                )
        if spec.dtype != "string" and value.dtype != spec.numpy_dtype:
            value = value.astype(spec.numpy_dtype)
        out[name] = value
    return out


@dataclasses.dataclass(frozen=True)
class DatasetOptions:
    """How `make_dataset` reads, orders and batches its examples: every
    setting except the structure of one example (its family, sizes, family
    options and extras), which `make_dataset` takes itself.

    `make_dataset` checks the values (and raises its usual errors); the
    object only carries them, so one can serve several datasets
    (`dataclasses.replace` for a variant).

    Attributes:
        batch_size: B.
        shuffle_buffer: examples in the shuffle buffer (0: no shuffling).
        seed: the shuffle seed.
        bucket_boundaries: increasing ints; examples are batched with others
            whose P (N for `"flat"`) falls between the same boundaries
            (bucket i holds boundaries[i-1] <= P < boundaries[i]).
        pad_to_max: pad every batch to the maxima (static shapes); excludes
            `bucket_boundaries`.
        repeat: repeat the (reshuffled) source forever.
        drop_remainder: drop a last batch (per bucket) smaller than B.
        cache: None (no cache), `True` (cache structured examples in
            memory) or a file path prefix; later epochs then skip reading
            and structuring.
        max_examples: use only the first this many good examples of the
            source (None: all of them).
        require_summary, skip_invalid, strict, unicode_errors, include_ids:
            as in `structured_examples` (`example_id` is tf.string [B]).

    Example:

    ```python
    options = DatasetOptions(batch_size=8, shuffle_buffer=256, seed=1,
                             pad_to_max=True, repeat=True, drop_remainder=True)
    dataset = make_dataset("train.jsonl", vocabulary, "paragraphs",
                           max_units=24, max_tokens=100, options=options)
    ```
    """

    batch_size: int
    shuffle_buffer: int = 0
    seed: int = 0
    bucket_boundaries: object = None
    pad_to_max: bool = False
    repeat: bool = False
    drop_remainder: bool = False
    cache: object = None
    max_examples: object = None
    require_summary: bool = True
    skip_invalid: bool = True
    strict: bool = False
    unicode_errors: str = "strict"
    include_ids: bool = False


def make_dataset(
    source,
    vocabulary,
    family,
    *,
    max_units=None,
    max_tokens,
    max_target_length=None,
    family_options=None,
    extras=None,
    report=None,
    options=None,
    **option_keywords,
):
    """A `tf.data.Dataset` of padded batches for one model family.

    Pipeline: read (a Python generator of strings: each example's
    documents rendered as plain text, title, query, summary) → structure
    in the graph, 32 examples at a time, with the SavedModel's own
    `TextStructurer` and tokenize the target (`map`, AUTOTUNE, order kept)
    → drop examples without a token → extras (Python, on the structurer's
    output) → take (optional) → cache (optional) → shuffle (optional) →
    repeat (optional) → padded or length-bucketed batches → prefetch
    (AUTOTUNE). The same seed gives the
    same batches in the same order; each repetition is reshuffled, also
    deterministically.

    Args:
        source: a corpus path (file or folder) or a re-iterable collection
            of `Example` (a list; not a one-shot iterator, since every epoch
            reads the source again).
        vocabulary: a `Vocabulary`.
        family: `"paragraphs"`, `"sections"`, `"snippets"`, `"sentences"`
            or `"flat"`.
        max_units: P, the most rows per example (not used by `"flat"`).
        max_tokens: T, tokens per row (N, the most tokens, for `"flat"`).
        max_target_length: S; when given, batches carry `target` [B,S].
        family_options: the family's options (`TextStructurer`'s).
        extras: callables `(example, structured) -> dict of numpy arrays`
            (e.g. `ranker_targets`); see the module docstring for their
            signature.
        report: a `PipelineReport` that receives the counts.
        options: a `DatasetOptions`: batch size, shuffling, bucketing,
            padding, repetition, caching, and what to do with invalid
            examples.
        **option_keywords: instead of `options`, its fields as keywords
            (`batch_size=8, shuffle_buffer=256, ...`; `batch_size` is then
            required). Passing both is a TypeError.

    Returns:
        A dataset of dicts: `tokens` int32 [B,P,T], `token_mask` bool
        [B,P,T], `paragraph_mask` bool [B,P], `document_ids` int32 [B,P],
        the family's extras ([B,P] / `context_tokens` [B,C]), `target`
        int32 [B,S], the extras' arrays with a batch axis; for `"flat"`
        `tokens` int32 [B,N] and `token_mask` bool [B,N].

    Raises:
        ValueError: for an unknown family, bad limits or options, or
            pad_to_max with an axis of unknown size.
        TypeError: for a one-shot iterator as source.

    Seed first: `tf.random.set_seed` (and `keras.utils.set_random_seed`)
    clears TensorFlow's eager kernel cache, which deletes the SentencePiece
    resource of the datasets built before it ("Resource
    localhost/_0_SentencepieceOp/... does not exist" when iterated). Build
    datasets after setting seeds.
    """
    options = options_or_keywords("make_dataset", DatasetOptions, options, option_keywords)
    if not isinstance(source, (str, os.PathLike)):
        if iter(source) is source:
            raise TypeError(
                "make_dataset reads its source once per epoch, so `source` "
                "must be a path or a re-iterable collection of Example; "
                "received a one-shot iterator "
                f"({type(source).__name__}). Wrap it in list(...)."
            )
    elif not os.path.exists(source):
        raise FileNotFoundError(
            f"make_dataset source {os.fspath(source)!r} does not exist; expected a "
            "JSONL/text file, a folder of them, or a collection of Example."
        )
    batch_size = check_int("batch_size", options.batch_size)
    shuffle_buffer = check_int(
        "shuffle_buffer", options.shuffle_buffer, 0, hint=" (0: no shuffling)"
    )
    if not hasattr(vocabulary, "encode_batch") or not hasattr(vocabulary, "pad_id"):
        raise ValueError(
            "`vocabulary` must be a keras_hsum.data.Vocabulary (e.g. "
            "Vocabulary.load(path)) or a PresetVocabulary (a backbone preset's "
            f"tokenizer); received {type(vocabulary).__name__}."
        )
    max_examples = check_int("max_examples", options.max_examples, allow_none=True)
    bucket_boundaries, pad_to_max = options.bucket_boundaries, options.pad_to_max
    if pad_to_max and bucket_boundaries:
        raise ValueError(
            "pad_to_max=True pads every batch to the maxima, which makes "
            "bucket_boundaries pointless; pass one or the other."
        )
    if bucket_boundaries:
        boundaries = [int(b) for b in bucket_boundaries]
        if any(b < 1 for b in boundaries) or any(
            a >= b for a, b in zip(boundaries, boundaries[1:])
        ):
            raise ValueError(
                "`bucket_boundaries` must be strictly increasing positive "
                f"ints, received {list(bucket_boundaries)!r}."
            )
    report = report if report is not None else PipelineReport()
    dataset, specs, structure_options, _ = _prepared(
        source, vocabulary, family, max_units, max_tokens, max_target_length,
        family_options, extras, report, options.require_summary, options.skip_invalid,
        options.strict, options.unicode_errors, options.include_ids,
    )
    sizes = axis_sizes(
        max_units, max_tokens, max_target_length, structure_options.get("context_length")
    )
    padded_shapes = {
        name: tf.TensorShape(padded_shape(name, spec, sizes, pad_to_max, _missing_size))
        for name, spec in specs.items()
    }
    padding_values = {
        name: tf.constant(
            padding_value(name, spec, vocabulary.pad_id),
            dtype=tf.as_dtype(spec.numpy_dtype),
        )
        for name, spec in specs.items()
    }
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    if options.cache:
        dataset = dataset.cache("" if options.cache is True else os.fspath(options.cache))
    if shuffle_buffer:
        dataset = dataset.shuffle(
            shuffle_buffer, seed=options.seed, reshuffle_each_iteration=True
        )
    if options.repeat:
        dataset = dataset.repeat()
    if bucket_boundaries:
        length_feature = TOKENS if family == "flat" else PARAGRAPH_MASK
        dataset = dataset.bucket_by_sequence_length(
            element_length_func=lambda x: tf.shape(x[length_feature])[0],
            bucket_boundaries=boundaries,
            bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
            padded_shapes=padded_shapes,
            padding_values=padding_values,
            drop_remainder=options.drop_remainder,
        )
    else:
        dataset = dataset.padded_batch(
            batch_size,
            padded_shapes=padded_shapes,
            padding_values=padding_values,
            drop_remainder=options.drop_remainder,
        )
    return dataset.prefetch(tf.data.AUTOTUNE)


def training_pairs(dataset, pad_id=0):
    """Splits `target` for teacher forcing: `(inputs, labels, weights)`.

    Args:
        dataset: batches from `make_dataset` with `target` [B,S].
        pad_id: the vocabulary's pad id.

    Returns:
        A dataset of `(inputs, labels, sample_weight)` for `model.fit`:
        `inputs` are the batch's features without `target`, plus
        `decoder_tokens` int32 [B,S-1] (= target[:, :-1], BOS first) and
        `target_mask` bool [B,S-1] (True where a label is a real token);
        `labels` int32 [B,S-1] (= target[:, 1:], EOS last);
        `sample_weight` float32 [B,S-1] (the mask as 0/1).

    Raises:
        ValueError: when the batches have no `target` (give
            `max_target_length` to `make_dataset`).
    """
    if TARGET not in dataset.element_spec:
        raise ValueError(
            "training_pairs needs batches with `target`; received features "
            f"{sorted(dataset.element_spec)}. Pass max_target_length to "
            "make_dataset."
        )

    def split(features):
        features = dict(features)
        target = features.pop(TARGET)
        labels = target[:, 1:]
        target_mask = tf.not_equal(labels, pad_id)
        features["decoder_tokens"] = target[:, :-1]
        features["target_mask"] = target_mask
        return features, labels, tf.cast(target_mask, tf.float32)

    return dataset.map(split, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
