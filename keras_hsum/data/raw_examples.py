"""A corpus as the strings the structurer reads: `make_dataset`'s source.

`raw_examples` reads a corpus path (`read_examples`) or an iterable of
`Example`, and yields each example as strings: its documents rendered as
plain text, as a SavedModel receives them (`render_documents`), its title,
query, summary, references, id and dataset (`RAW_SIGNATURE`). Examples
without a summary (when one is needed) or without text are skipped and
counted in the pipeline's report.
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


def read_source(source, report, skip_invalid, unicode_errors):
    """Yields the source's examples, counting invalid lines into `report`.

    Args:
        source: a corpus path (file or folder) or an iterable of `Example`.
        report: a `PipelineReport` (`read`, `invalid_lines`).
        skip_invalid, unicode_errors: as in `read_examples`.

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
        yield from _raw_strings(
            source, report, needs_summary, skip_invalid, strict, unicode_errors
        )
    except Exception as error:
        failures.append(error)
        raise


def _raw_strings(source, report, needs_summary, skip_invalid, strict, unicode_errors):
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
