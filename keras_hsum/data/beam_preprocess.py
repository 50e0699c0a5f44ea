"""`keras-hsum preprocess`: a corpus to a shard folder with Apache Beam.

The pipeline (any Beam runner; DirectRunner in multi-processing mode on
one machine, Dataflow, Flink or Spark by pipeline options):

    Create(one task per shard) → Reshuffle → ParDo(WriteShard) →
    ToList → Map(write the spec)

A task is shard i's slice of every corpus file: the i-th of `num_shards`
contiguous byte ranges of an uncompressed JSONL file (a line belongs to the
range its first byte is in), every `num_shards`-th line from line i of a
gzip file (which cannot be entered in the middle), or a whole `.txt` file
(one example) for i = file index mod `num_shards`. `WriteShard` loads the
vocabulary and the recipe's `ExampleFeatures` once per worker (`setup`),
reads its slice line by line and streams it through one structuring
pipeline into its shard file: memory stays flat in the corpus size, and shard i holds its examples in corpus order (for one uncompressed
file, shard 0, 1, ... read one after the other is the corpus order). A
retried task rewrites its shard from the start.

Why not `ReadFromText` → ... → `WriteToTFRecord(num_shards=...)`: fixing
the number of shards makes `WriteToTFRecord` group every record by a random
shard key, a GroupByKey that the DirectRunner holds in memory and that
keeps no order, so neither the memory nor the order would be those above.

Skipped examples (invalid lines, no summary, no token, an extra's
ValueError) are counted per reason in Beam metrics
(`keras_hsum.preprocess` namespace) and in the spec.
"""

import logging
import os
import time

import tensorflow as tf

from keras_hsum.data import shards as shards_lib
from keras_hsum.data.example_features import ExampleFeatures
from keras_hsum.data.reader import InvalidExampleError
from keras_hsum.data.reader import parse_jsonl_line
from keras_hsum.data.reader import read_text
from keras_hsum.data.vocabulary import Vocabulary

NAMESPACE = "keras_hsum.preprocess"
REASONS = ("invalid_lines", "empty_input", "empty_summary", "other_errors")
_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".jsonl.gzip")


def _beam():
    try:
        import apache_beam as beam
    except ImportError:
        raise ImportError(
            "keras-hsum preprocess needs Apache Beam: pip install "
            "'keras-hsum[beam]' (apache-beam==2.77.0)."
        ) from None
    return beam


def _is_gzip(path):
    with tf.io.gfile.GFile(path, "rb") as file:
        return file.read(2) == b"\x1f\x8b"


def corpus_files(data):
    """The corpus files of `data`: the file itself, or a folder's `.jsonl`,
    `.jsonl.gz` and `.txt` files in sorted order (as `read_examples`)."""
    data = os.fspath(data)
    if not tf.io.gfile.exists(data):
        raise FileNotFoundError(
            f"--data {data!r} does not exist; expected a JSONL/text file or a "
            "folder of them."
        )
    if not tf.io.gfile.isdir(data):
        return [data]
    files = [
        os.path.join(data, name)
        for name in sorted(tf.io.gfile.listdir(data))
        if name.lower().endswith(_JSONL_SUFFIXES + (".txt",))
        and not tf.io.gfile.isdir(os.path.join(data, name))
    ]
    if not files:
        raise ValueError(
            f"--data folder {data!r} holds no .jsonl, .jsonl.gz or .txt file."
        )
    return files


def plan_tasks(files, num_shards):
    """Shard i's slices of the corpus files: `[(i, pieces)]`.

    A piece is `("range", path, start, end)` (lines starting in bytes
    [start, end) of an uncompressed file), `("stride", path, i, n)` (lines
    i, i + n, ... of a gzip file) or `("text", path)` (a whole text file).
    """
    tasks = [(index, []) for index in range(num_shards)]
    for number, path in enumerate(files):
        if path.lower().endswith(".txt"):
            tasks[number % num_shards][1].append(("text", path))
        elif _is_gzip(path):
            for index in range(num_shards):
                tasks[index][1].append(("stride", path, index, num_shards))
        else:
            size = tf.io.gfile.stat(path).length
            for index in range(num_shards):
                start, end = size * index // num_shards, size * (index + 1) // num_shards
                if end > start:
                    tasks[index][1].append(("range", path, start, end))
    return tasks


def _range_lines(path, start, end):
    """(line number or None, bytes) of the lines that start in [start, end)."""
    with tf.io.gfile.GFile(path, "rb") as file:
        position = start
        if start > 0:
            file.seek(start - 1)
            # The rest of the line that starts before `start` (just the
            # newline when a line starts exactly at `start`).
            position = start - 1 + len(file.readline())
        while position < end:
            line = file.readline()
            if not line:
                return
            yield f"byte {position}", line
            position += len(line)


def _stride_lines(path, index, count):
    import gzip

    with tf.io.gfile.GFile(path, "rb") as raw, gzip.GzipFile(fileobj=raw) as file:
        for number, line in enumerate(file, start=1):
            if (number - 1) % count == index:
                yield number, line


def _piece_examples(piece, report, unicode_errors):
    """The examples of one piece; invalid lines are counted into `report`."""
    if piece[0] == "text":
        try:
            yield read_text(piece[1], unicode_errors="replace")
        except InvalidExampleError as error:
            report.read += 1
            report.count_skip("invalid_lines", str(error))
        return
    lines = (
        _range_lines(*piece[1:]) if piece[0] == "range" else _stride_lines(*piece[1:])
    )
    path = piece[1]
    for where, raw in lines:
        if where == "byte 0" or where == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        if not raw.strip():
            continue
        try:
            example = parse_jsonl_line(
                raw, f"{path} ({where})" if isinstance(where, str) else path,
                where if isinstance(where, int) else 0, unicode_errors,
            )
        except InvalidExampleError as error:
            # The pipeline counts the examples it reads; an invalid line
            # never reaches it.
            report.read += 1
            report.count_skip("invalid_lines", str(error))
            continue
        yield example


def write_shard(task, out, num_shards, features, unicode_errors="strict"):
    """Writes shard `task[0]` of `num_shards` into `out` (no Beam needed).

    Args:
        task: `(index, pieces)` from `plan_tasks`.
        out: the shard folder.
        num_shards: the number of shards.
        features: an `ExampleFeatures`.
        unicode_errors: as in `read_jsonl`.

    Returns:
        A dict: `index`, `file`, `examples`, `bytes`, `read`, `seconds`,
        the skip count of every reason in `REASONS`, `errors` (the first
        messages).
    """
    from keras_hsum.data.pipeline import PipelineReport

    index, pieces = task
    started = time.perf_counter()
    report = PipelineReport()
    name = shards_lib.shard_name(index, num_shards)
    examples = (
        example
        for piece in pieces
        for example in _piece_examples(piece, report, unicode_errors)
    )
    with shards_lib.ShardWriter(os.path.join(out, name), features.specs) as writer:
        for example_id, arrays in features(examples, report):
            writer.write(example_id, arrays)
    summary = {
        "index": index,
        "file": name,
        "examples": writer.examples,
        "bytes": writer.bytes,
        "read": report.read,
        "seconds": round(time.perf_counter() - started, 3),
        "errors": list(report.errors),
    }
    for reason in REASONS:
        summary[reason] = getattr(report, reason)
    return summary


def _write_spec(summaries, out, skeleton):
    summaries = sorted(summaries, key=lambda summary: summary["index"])
    spec = dict(skeleton)
    spec["shards"] = [
        {"file": s["file"], "examples": s["examples"], "bytes": s["bytes"]}
        for s in summaries
    ]
    spec["examples"] = sum(s["examples"] for s in summaries)
    spec["read"] = sum(s["read"] for s in summaries)
    spec["skipped"] = {reason: sum(s[reason] for s in summaries) for reason in REASONS}
    spec["errors"] = [e for s in summaries for e in s["errors"]][:20]
    spec["worker_seconds"] = round(sum(s["seconds"] for s in summaries), 3)
    shards_lib.write_spec(out, spec)
    return spec


def _shard_writer_fn(beam):
    class WriteShard(beam.DoFn):
        """Writes one shard per task; the vocabulary and the recipe's
        feature function are loaded once per worker."""

        def __init__(self, out, num_shards, structure_factory, unicode_errors):
            self.out = out
            self.num_shards = num_shards
            self.structure_factory = structure_factory
            self.unicode_errors = unicode_errors
            self.features = None

        def setup(self):
            path = os.path.join(self.out, shards_lib.VOCABULARY_FILE)
            with tf.io.gfile.GFile(path, "rb") as file:
                vocabulary = Vocabulary(file.read())
            self.features = ExampleFeatures(self.structure_factory(vocabulary), vocabulary)

        def process(self, task):
            from apache_beam.metrics import Metrics

            summary = write_shard(
                task, self.out, self.num_shards, self.features, self.unicode_errors,
            )
            Metrics.counter(NAMESPACE, "examples_written").inc(summary["examples"])
            Metrics.counter(NAMESPACE, "shards_written").inc()
            for reason in REASONS:
                if summary[reason]:
                    Metrics.counter(NAMESPACE, f"skipped_{reason}").inc(summary[reason])
            logging.info(
                "keras-hsum preprocess: wrote %s: %d examples, %d skipped, %.1f s",
                summary["file"], summary["examples"],
                sum(summary[r] for r in REASONS), summary["seconds"],
            )
            yield summary

    return WriteShard


def preprocess(
    *,
    data,
    out,
    structure,
    structure_factory,
    vocabulary_file,
    num_shards,
    recipe=None,
    config=None,
    split=None,
    pipeline_args=(),
    unicode_errors="strict",
):
    """Runs the Beam pipeline: `data` → shard folder `out`.

    Args:
        data: a corpus file or folder (JSONL, JSONL.gz, .txt).
        out: the shard folder (created; must not hold shards already).
        structure: the `ExampleStructure` (recorded in the spec).
        structure_factory: a picklable `vocabulary -> ExampleStructure`
            that each worker calls in `setup` (it must give `structure`).
        vocabulary_file: the SentencePiece `.model`; copied into `out`.
        num_shards: the number of shard files.
        recipe, config, split: recorded in the spec.
        pipeline_args: Beam pipeline options, e.g. `["--runner",
            "DirectRunner", "--direct_running_mode", "multi_processing",
            "--direct_num_workers", "2"]`.
        unicode_errors: as in `read_jsonl`.

    Returns:
        The spec written (a dict), with `wall_seconds` added.
    """
    beam = _beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    out = os.fspath(out)
    files = corpus_files(data)
    if tf.io.gfile.exists(out) and any(
        name == shards_lib.SPEC_FILE or name.startswith("shard-")
        for name in tf.io.gfile.listdir(out)
    ):
        raise ValueError(
            f"--out {out!r} already holds shards; choose a new folder or delete it."
        )
    tf.io.gfile.makedirs(out)
    vocabulary_copy = os.path.join(out, shards_lib.VOCABULARY_FILE)
    tf.io.gfile.copy(os.fspath(vocabulary_file), vocabulary_copy, overwrite=True)
    with tf.io.gfile.GFile(vocabulary_copy, "rb") as file:
        vocabulary = Vocabulary(file.read())
    skeleton = {
        "format": shards_lib.FORMAT,
        "recipe": recipe,
        "config": config,
        "split": split,
        "family": structure.family,
        "structure": structure.describe(),
        "pad_id": int(vocabulary.pad_id),
        "vocabulary": {
            "file": shards_lib.VOCABULARY_FILE,
            "source": os.fspath(vocabulary_file),
            "sha256": shards_lib.file_sha256(vocabulary_copy),
        },
        "source": [os.fspath(path) for path in files],
        "num_shards": num_shards,
    }
    tasks = plan_tasks(files, num_shards)
    started = time.perf_counter()
    options = PipelineOptions(list(pipeline_args))
    with beam.Pipeline(options=options) as pipeline:
        _ = (
            pipeline
            | "Tasks" >> beam.Create(tasks)
            | "Spread" >> beam.Reshuffle()
            | "WriteShards" >> beam.ParDo(
                _shard_writer_fn(beam)(
                    out, num_shards, structure_factory, unicode_errors
                )
            )
            | "Collect" >> beam.combiners.ToList()
            | "WriteSpec" >> beam.Map(_write_spec, out, skeleton)
        )
    spec = shards_lib.read_spec(out)
    spec["wall_seconds"] = round(time.perf_counter() - started, 3)
    return spec
