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
arrays (one example, no batch axis) merged into the features, run in Python
on the structurer's output, or, when it has `graph_features`, mapped in
the graph (no `tf.py_function`): `keras_hsum.data.extras` says what it
receives, how its signature is declared (`declare_features`) or inferred,
and how it is run; the library's label extras (ranker targets, the
paragraph graph, SEAL's proxy labels, the oracle) are in
`keras_hsum.data.label_extras` and run in the graph on token ids
(`keras_hsum.data.id_rouge`).

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
from keras_hsum.data import extras as extras_lib
from keras_hsum.data import structure
from keras_hsum.data.extras import declare_features  # noqa: F401 (re-exported for keras_hsum.data)
from keras_hsum.data.extras import extra_name
from keras_hsum.data.id_rouge import rouge_id_table
from keras_hsum.data.label_extras import oracle_labels  # noqa: F401 (re-exported for keras_hsum.data)
from keras_hsum.data.label_extras import paragraph_graph
from keras_hsum.data.label_extras import ranker_targets  # noqa: F401 (re-exported for keras_hsum.data)
from keras_hsum.data.label_extras import seal_labels  # noqa: F401 (re-exported for keras_hsum.data)
from keras_hsum.data.pipeline_report import PipelineReport
from keras_hsum.data.raw_examples import RAW_CHUNK_SIGNATURE
from keras_hsum.data.raw_examples import chunk_tensors
from keras_hsum.data.raw_examples import raw_chunks
from keras_hsum.data.structuring.statistics import STATISTICS
from keras_hsum.features import CONTEXT_TOKENS
from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import EXAMPLE_ID
from keras_hsum.features import FAMILIES
from keras_hsum.features import GRAPH
from keras_hsum.features import PARAGRAPH_INDEX
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import RANK_SCORE
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


# Raw examples are read and structured this many at a time (the
# structurer is vectorised over a batch), then unbatched.
_STRUCTURE_CHUNK = 32


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
    failures, graph_extras=(), table=None,
):
    """Unbatched examples, structured in the graph by `TextStructurer`:
    its features (trimmed to the example's sizes), `unit_texts`, `target`
    (with `max_target_length`), the raw strings the extras read, and the
    features of `graph_extras` (`extras.run_graph_extras`, on the chunk's
    summary and reference ids, with the ROUGE id `table`)."""
    from keras_hsum.data.structurer import TextStructurer

    # A `Vocabulary` is read as its SentencePiece proto; a PresetVocabulary
    # (a backbone preset's tokenizer) is used as it is. The source's
    # strings are Python `str` encoded by tf.data: valid UTF-8.
    structurer = TextStructurer(
        vocabulary, family, max_units, max_tokens, statistics=True,
        valid_utf8=True, **options
    )
    needs_summary = bool(require_summary or max_target_length)

    def raw():
        return raw_chunks(
            source, report, needs_summary, skip_invalid, strict, unicode_errors,
            failures, _STRUCTURE_CHUNK,
        )

    # One generator call per chunk, not per example: each call holds the GIL.
    dataset = tf.data.Dataset.from_generator(raw, output_signature=RAW_CHUNK_SIGNATURE)

    mask = TOKEN_MASK if family == "flat" else PARAGRAPH_MASK
    count_truncation = _truncation_counter(report, max_target_length)

    def structure_chunk(chunk):
        chunk = chunk_tensors(chunk)
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
        if graph_extras:
            from keras_hsum.data.label_extras import REFERENCE_LABEL_IDS
            from keras_hsum.data.label_extras import SUMMARY_LABEL_IDS

            plain = (
                ids if max_target_length and not structurer.oov_words
                else structurer.tokenize(chunk["summary"])
            )
            references = chunk["references"]
            given = dict(out)
            given[SUMMARY_LABEL_IDS] = tf.cast(plain, tf.int32)
            given[REFERENCE_LABEL_IDS] = references.with_flat_values(
                tf.cast(structurer.tokenize(references.flat_values), tf.int32)
            )
            out.update(extras_lib.run_graph_extras(graph_extras, given, table))
        # The chunk's truncation counts, over the examples the filter below
        # keeps, go into the report in one call per chunk.
        kept = tf.reduce_any(out[mask], axis=1)
        if max_target_length:
            kept &= out["summary_tokens_count"] > 0
        names = STATISTICS + (("summary_tokens_count",) if max_target_length else ())
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

    dataset = dataset.map(
        structure_chunk, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).unbatch()
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

    graph_features = {
        name: spec for extra in graph_extras for name, spec in extra.feature_spec.items()
    }

    def finish(example):
        example = _trim(dict(example), family, vocabulary.pad_id)
        if graph_features:
            rows = tf.reduce_sum(tf.cast(example[PARAGRAPH_MASK], tf.int32))
            for name, spec in graph_features.items():
                cut = tuple(slice(None, rows) if axis == "P" else slice(None)
                            for axis in spec.axes)
                example[name] = example[name][cut]
        return example

    return dataset.filter(keep).map(
        finish, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )


def _truncation_counter(report, max_target_length):
    """A py_function body adding one chunk's summed counts to
    `report.truncation`: the structurer's statistics, then (with a target)
    summary tokens, summary tokens cut and targets cut, then examples."""

    def count(sums):
        values = [int(v) for v in sums.numpy()]
        counted = dict(zip(STATISTICS, values))
        counted["dropped_tokens"] = counted["input_tokens"] - counted["output_tokens"]
        if max_target_length:
            (counted["target_tokens"], counted["target_dropped_tokens"],
             counted["truncated_targets"]) = values[len(STATISTICS):len(STATISTICS) + 3]
        counted["examples"] = values[-1]
        report.truncation.merge(structure.TruncationReport(**counted))
        return True

    return count


def _uncount_truncation(report, values, max_target_length):
    """Takes one example's counts back out of `report.truncation` (an
    extra skipped it after its chunk was counted)."""
    counted = {name: -int(values[name]) for name in STATISTICS}
    counted["dropped_tokens"] = counted["input_tokens"] - counted["output_tokens"]
    counted["examples"] = -1
    if max_target_length:
        tokens = int(values["summary_tokens_count"])
        cut = max(tokens - (max_target_length - 2), 0)
        counted.update(target_tokens=-tokens, target_dropped_tokens=-cut,
                       truncated_targets=-int(cut > 0))
    report.truncation.merge(structure.TruncationReport(**counted))


def _skip_for_extra(report, max_target_length):
    """`skip(values, message)` for `extras.with_extras`: counts an example
    an extra refused (after its chunk was counted) as an other error."""

    def skip(values, message):
        report.yielded -= 1
        _uncount_truncation(report, values, max_target_length)
        report.count_skip("other_errors", message)

    return skip


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
                f"Extra {extra_name(extra)} sets the structurer options "
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
        inferred = extras_lib.infer_specs(
            undeclared,
            _structured_dataset(
                *arguments, PipelineReport(), require_summary, True, False,
                unicode_errors, [],
            ),
            family,
        )
        specs.update(inferred)
        names += list(inferred)
    failures = []
    graph_extras = [extra for extra in extras if extras_lib.runs_in_graph(extra, family)]
    dataset = _structured_dataset(
        *arguments, report, require_summary, skip_invalid, strict, unicode_errors,
        failures, graph_extras, rouge_id_table(vocabulary) if graph_extras else None,
    )
    dataset = extras_lib.with_extras(
        dataset, extras, names, specs, family, max_tokens, strict, failures,
        _skip_for_extra(report, max_target_length),
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


def _missing_size(name, axis):
    hint = {
        "P": " (give max_units)",
        "S": " (give max_target_length)",
    }.get(axis, "; declare its size with @declare_features")
    return ValueError(
        f"pad_to_max=True needs the size of every axis, but axis {axis!r} of "
        f"feature {name!r} has none{hint}."
    )


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

    Pipeline: read (a Python generator of strings, 32 examples per call:
    each example's documents rendered as plain text, title, query,
    summary; `raw_examples.raw_chunks`) → structure in the graph, the
    same 32 examples at a time, with the SavedModel's own
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
