"""Tests of keras_hsum.data.raw_examples: the chunked source of make_dataset.

Independent reference: `tf.data`'s own `ragged_batch` over the per-example
generator `raw_examples` (what `make_dataset` read before the source was
chunked): the same batches, counts, messages and errors.
"""

import gzip
import json

import numpy as np
import pytest
import tensorflow as tf

from keras_hsum.data import raw_examples as raw_lib
from keras_hsum.data.corpora import sample_path
from keras_hsum.data.pipeline_report import PipelineReport
from keras_hsum.data.reader import read_examples


def _corpus(tmp_path):
    """The scitldr_a val sample (99 examples) with broken lines, empty
    summaries and empty documents in it."""
    with gzip.open(sample_path("scitldr_a", "val"), "rb") as handle:
        lines = [line for line in handle.read().splitlines() if line.strip()]
    out = []
    for i, line in enumerate(lines):
        record = json.loads(line)
        if i % 17 == 3:
            record["summary"], record["references"] = " ", []
        if i % 19 == 5:
            record["documents"] = [{"sections": [{"paragraphs": [[" ", "\n"]]}]}]
        out.append(json.dumps(record).encode("utf-8"))
        if i % 23 == 7:
            out.append(b'{"id": "broken", "documents": [')
        if i % 29 == 2:
            out.append(b'{"documents": [], "summary": "caf\xe9"}')
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"\n".join(out) + b"\n")
    return str(path)


def _batches(dataset):
    """Every batch as nested Python values (ragged rows as lists)."""
    out = []
    for batch in dataset:
        out.append({
            name: value.to_list() if isinstance(value, tf.RaggedTensor)
            else value.numpy().tolist()
            for name, value in batch.items()
        })
    return out


def _both(source, size, needs_summary, skip_invalid, strict, unicode_errors):
    """(reference, chunked): each its batches, report and failures."""
    results = []
    for chunked in (False, True):
        report, failures = PipelineReport(), []
        arguments = (source, report, needs_summary, skip_invalid, strict, unicode_errors,
                     failures)
        if chunked:
            dataset = tf.data.Dataset.from_generator(
                lambda: raw_lib.raw_chunks(*arguments, size),
                output_signature=raw_lib.RAW_CHUNK_SIGNATURE,
            ).map(raw_lib.chunk_tensors)
        else:
            dataset = tf.data.Dataset.from_generator(
                lambda: raw_lib.raw_examples(*arguments),
                output_signature=raw_lib.RAW_SIGNATURE,
            ).ragged_batch(size)
        batches, error = [], None
        iterator = iter(dataset)
        while True:
            try:
                batches.append(next(iterator))
            except StopIteration:
                break
            except tf.errors.InvalidArgumentError as raised:
                error = raised
                break
        results.append((
            dataset.element_spec, _batches(batches), repr(report),
            [repr(failure) for failure in failures], error is not None,
        ))
    return results


@pytest.mark.parametrize("size, needs_summary", [(1, True), (5, False), (32, True)])
def test_chunks_are_the_ragged_batches_of_the_examples(tmp_path, size, needs_summary):
    path = _corpus(tmp_path)
    reference, chunked = _both(path, size, needs_summary, True, False, "replace")
    assert chunked == reference
    spec, batches, report = reference[0], reference[1], reference[2]
    assert isinstance(spec["documents"], tf.RaggedTensorSpec)
    assert sum(len(batch["title"]) for batch in batches) > 80
    assert "empty_summary=" in report and "invalid_lines=" in report


@pytest.mark.parametrize("strict, skip_invalid, unicode_errors", [
    (True, True, "replace"), (False, False, "strict")])
def test_chunks_fail_where_the_ragged_batches_fail(tmp_path, strict, skip_invalid,
                                                   unicode_errors):
    # An error inside a chunk loses the chunk's examples read before it, as
    # a batch loses them; the chunks before it come through.
    path = _corpus(tmp_path)
    reference, chunked = _both(path, 5, True, skip_invalid, strict, unicode_errors)
    assert chunked == reference
    assert reference[4] and reference[3] == chunked[3] != []


def test_an_iterable_of_examples_chunks_as_it_batches():
    examples = list(read_examples(sample_path("fewsum_amazon", "val")))
    reference, chunked = _both(examples, 4, True, True, False, "strict")
    assert chunked == reference and len(reference[1]) == int(np.ceil(len(examples) / 4))
    with pytest.raises(TypeError, match="yielded a str"):
        list(raw_lib.raw_chunks(["text"], PipelineReport(), True, True, False, "strict",
                                [], 4))
