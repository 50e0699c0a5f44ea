"""A corpus as the strings the structurer reads: `make_dataset`'s source.

`raw_examples` reads a corpus path (`read_examples`) or an iterable of
`Example`, and yields each example as strings: its documents rendered as
plain text, as a SavedModel receives them (`render_documents`), its title,
query, summary, references, id and dataset (`RAW_SIGNATURE`). Examples
without a summary (when one is needed) or without text are skipped and
counted in the pipeline's report.

`raw_chunks` yields the same examples several at a time, as flat arrays
(`RAW_CHUNK_SIGNATURE`; `chunk_tensors` makes them the batch of
`RAW_SIGNATURE` that `ragged_batch` would give): `make_dataset` reads its
source so, since `tf.data.Dataset.from_generator` costs a Python call and a
conversion per field for every element it yields, under the GIL.
"""

import os

import numpy as np
import tensorflow as tf

from keras_hsum.data import reader as reader_lib
from keras_hsum.data import structure
from keras_hsum.features import EXAMPLE_ID

# One raw example, as `tf.data.Dataset.from_generator` reads it.
RAW_SIGNATURE = {
    "documents": tf.TensorSpec([None], tf.string),
    "title": tf.TensorSpec([], tf.string),
    "query": tf.TensorSpec([], tf.string),
    "summary": tf.TensorSpec([], tf.string),
    "references": tf.TensorSpec([None], tf.string),
    EXAMPLE_ID: tf.TensorSpec([], tf.string),
    "dataset": tf.TensorSpec([], tf.string),
}
# The fields of `RAW_SIGNATURE` with one string per example.
_SCALARS = ("title", "query", "summary", EXAMPLE_ID, "dataset")
# The fields with several strings per example, and the counts' names.
_LISTS = {"documents": "document_counts", "references": "reference_counts"}
# A chunk of B raw examples, as `raw_chunks` yields them: `title`, `query`,
# `summary`, `example_id` and `dataset` [B]; the documents of every example,
# one after the other, [sum of document_counts] and `document_counts` [B];
# the same for `references`.
RAW_CHUNK_SIGNATURE = dict(
    {name: tf.TensorSpec([None], tf.string) for name in RAW_SIGNATURE},
    **{counts: tf.TensorSpec([None], tf.int64) for counts in _LISTS.values()},
)


def read_source(source, report, skip_invalid, unicode_errors):
    """Yields the source's examples, counting invalid lines into `report`.

    Args:
        source: a corpus path (file or folder) or an iterable of `Example`.
        report: a `PipelineReport` (`read`, `invalid_lines`).
        skip_invalid, unicode_errors: as in `read_examples`.

    Yields:
        A corpus file's examples as `reader.RenderedExample`s (its lines
        read straight into them), an iterable's as the `Example`s it yields.

    Raises:
        TypeError: when the iterable yields something else than `Example`.
    """
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
            source, skip_invalid, unicode_errors, read_report, rendered=True
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


def raw_examples(source, report, needs_summary, skip_invalid, strict, unicode_errors,
                 failures):
    """Yields each readable example as a dict of `RAW_SIGNATURE`'s strings.

    Counts what it skips into `report` (one more `passes` per call); an
    error it raises is also appended to `failures` (tf.data turns it into
    an InvalidArgumentError; `structured_examples` raises the original).

    Args:
        source: as in `read_source`.
        report: a `PipelineReport`.
        needs_summary: skip (or, with `strict`, raise for) examples without
            a summary.
        skip_invalid, unicode_errors: as in `read_examples`.
        strict: raise instead of skipping.
        failures: a list that receives the error raised.
    """
    try:
        for example in _raw_strings(
            source, report, needs_summary, skip_invalid, strict, unicode_errors
        ):
            yield {
                "documents": np.asarray(example.documents or [""], dtype=object),
                "title": example.title or "",
                "query": example.query or "",
                "summary": example.summary or "",
                "references": np.asarray(list(example.references),
                                         dtype=object).reshape(-1),
                EXAMPLE_ID: example.id,
                "dataset": example.dataset or "",
            }
    except Exception as error:
        failures.append(error)
        raise


def raw_chunks(source, report, needs_summary, skip_invalid, strict, unicode_errors,
               failures, size):
    """Yields the examples of `raw_examples`, `size` at a time (the last
    chunk may hold fewer), as `RAW_CHUNK_SIGNATURE`'s flat arrays.

    The same examples in the same order, counted into `report` as
    `raw_examples` counts them, one example at a time; an error raised in
    a chunk loses the examples of that chunk read before it, as
    `ragged_batch(size)` over `raw_examples` loses them.

    Args:
        source, report, needs_summary, skip_invalid, strict,
        unicode_errors, failures: as in `raw_examples`.
        size: B, the examples per chunk.
    """
    try:
        examples = _raw_strings(
            source, report, needs_summary, skip_invalid, strict, unicode_errors
        )
        chunk = []
        for example in examples:
            chunk.append(example)
            if len(chunk) == size:
                yield _chunk_arrays(chunk)
                chunk = []
        if chunk:
            yield _chunk_arrays(chunk)
    except Exception as error:
        failures.append(error)
        raise


def _chunk_arrays(chunk):
    """`RAW_CHUNK_SIGNATURE`'s arrays of a list of `RenderedExample`s."""
    return {
        "documents": np.array(
            [text for example in chunk for text in example.documents], dtype=object
        ),
        "document_counts": np.array(
            [len(example.documents) for example in chunk], np.int64
        ),
        "title": np.array([example.title or "" for example in chunk], dtype=object),
        "query": np.array([example.query or "" for example in chunk], dtype=object),
        "summary": np.array([example.summary or "" for example in chunk], dtype=object),
        "references": np.array(
            [text for example in chunk for text in example.references], dtype=object
        ),
        "reference_counts": np.array(
            [len(example.references) for example in chunk], np.int64
        ),
        EXAMPLE_ID: np.array([example.id for example in chunk], dtype=object),
        "dataset": np.array([example.dataset or "" for example in chunk], dtype=object),
    }


def chunk_tensors(chunk):
    """A chunk of `RAW_CHUNK_SIGNATURE` as `ragged_batch` batches
    `RAW_SIGNATURE`: `documents` and `references` tf.string ragged
    [B, None] (int64 row splits), the other fields tf.string [B]."""
    out = {name: chunk[name] for name in _SCALARS}
    for name, counts in _LISTS.items():
        out[name] = tf.RaggedTensor.from_row_lengths(
            chunk[name], chunk[counts], validate=False
        )
    return out


def _raw_strings(source, report, needs_summary, skip_invalid, strict, unicode_errors):
    """The `RenderedExample`s `raw_examples` yields, one more `passes` and
    the skips counted into `report`."""
    report.passes += 1
    for example in read_source(
        source, report, skip_invalid and not strict, unicode_errors
    ):
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
        if not isinstance(example, reader_lib.RenderedExample):
            example = reader_lib.rendered_example(example)
        if not any(document.strip() for document in example.documents):
            error = structure.EmptyInputError("The example's documents hold no text.")
            if strict:
                raise error
            report.count_skip("empty_input", f"example {example.id!r}: {error}")
            continue
        report.yielded += 1
        yield example
