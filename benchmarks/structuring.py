"""Structuring throughput: the graph pipeline against the old Python one.

Issue 46 replaced the Python structuring of `make_dataset` (the builders
of `keras_hsum.data.structure` driven by `tf.data.Dataset.from_generator`)
by the SavedModel's own `TextStructurer` mapped over raw text. This script
times, in one run and on the same examples, for every recipe's family and
tiny-config limits:

- `python (frozen)`: the old pipeline, frozen: the family's Python builder
  and `build_target` (now `tests/reference_structure.py`, the tests'
  reference) per example in a generator, `from_generator`, `padded_batch`;
- `graph, 1 thread`: `make_dataset` (graph structuring) with tf.data's
  private thread pool and intra-op parallelism set to 1;
- `graph, all cores`: `make_dataset` with tf.data's defaults.

Every variant reads the same examples, builds the target, pads to the
config's maxima (`pad_to_max=True`, batches of 8); one dataset per variant
is iterated to the end twice, without cache: the second pass is the steady
rate in the table, the first (which also builds and traces the graph, once
per dataset) is kept in the JSON and its own column. No
extras (ranker targets, graphs, proxy labels): they run in Python on the
structurer's output in both pipelines alike.

Targets (issue 46): graph per core >= 2x the Python generator; two cores
>= 1.7x one core.

Usage (from the repository root):
    python benchmarks/structuring.py                       # 600 examples per recipe
    python benchmarks/structuring.py --examples 50 --recipes ht flat   # quick

Writes `benchmarks/results/structuring.json` and `.md`.
"""

import argparse
import datetime
import itertools
import json
import os
import platform
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_hsum import recipes  # noqa: E402
from keras_hsum.data import pipeline  # noqa: E402
# The Python builders, frozen as the tests' reference of the graph structurer.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import reference_structure as structure  # noqa: E402
from keras_hsum.data.corpora import corpus_path  # noqa: E402
from keras_hsum.data.corpora import sample_tokenizer_path  # noqa: E402
from keras_hsum.data.reader import read_examples  # noqa: E402
from keras_hsum.data.vocabulary import Vocabulary  # noqa: E402

RECIPES = ("ht", "pht", "seal", "discourse", "shte", "flat")
BATCH = 8


def python_dataset(examples, vocabulary, family, max_units, max_tokens, target, options):
    """The pre-issue-46 pipeline, frozen: Python builders in a generator."""
    builder = structure.build_flat if family == "flat" else structure.BUILDERS[family]
    keys = ["tokens", "token_mask"]
    if family != "flat":
        keys += ["paragraph_mask", "document_ids"]
    if family == "paragraphs":
        keys += ["paragraph_index", "rank_score", "context_tokens"]
    dtypes = {"tokens": tf.int32, "token_mask": tf.bool, "paragraph_mask": tf.bool,
              "document_ids": tf.int32, "paragraph_index": tf.int32,
              "rank_score": tf.float32, "context_tokens": tf.int32, "target": tf.int32}
    rank = {"tokens": 1 if family == "flat" else 2, "token_mask": 1 if family == "flat" else 2}

    def generator():
        for example in examples:
            if family == "flat":
                built = builder(example, vocabulary, max_tokens, **options)
            else:
                built = builder(example, vocabulary, max_units, max_tokens, **options)
            features = {key: built.features[key] for key in keys}
            features["target"] = structure.build_target(example.summary, vocabulary, target)
            yield features

    signature = {
        key: tf.TensorSpec([None] * rank.get(key, 1), dtypes[key]) for key in keys + ["target"]
    }
    if family != "flat":
        signature["tokens"] = tf.TensorSpec([None, max_tokens], tf.int32)
        signature["token_mask"] = tf.TensorSpec([None, max_tokens], tf.bool)
    dataset = tf.data.Dataset.from_generator(generator, output_signature=signature)
    return dataset.padded_batch(BATCH, padding_values={
        key: tf.constant(vocabulary.pad_id if key in ("tokens", "context_tokens", "target") else 0,
                         dtypes[key]) if dtypes[key] != tf.bool else tf.constant(False)
        for key in signature
    }).prefetch(tf.data.AUTOTUNE)


def graph_dataset(examples, vocabulary, family, max_units, max_tokens, target, options,
                  threads=None):
    dataset = pipeline.make_dataset(
        examples, vocabulary, family, batch_size=BATCH, max_units=max_units,
        max_tokens=max_tokens, max_target_length=target, family_options=options,
        pad_to_max=True,
    )
    if threads:
        tf_options = tf.data.Options()
        tf_options.threading.private_threadpool_size = threads
        tf_options.threading.max_intra_op_parallelism = 1
        dataset = dataset.with_options(tf_options)
    return dataset


def timed(make, examples):
    """(examples, seconds of the first pass, seconds of a second pass) over
    one dataset: the first pass includes building and tracing the graph
    (once per dataset), the second is the steady rate."""
    dataset = make(examples)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        count = 0
        for batch in dataset:
            count += int(batch["tokens"].shape[0])
        times.append(time.perf_counter() - start)
    return count, times[0], times[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    parser.add_argument("--examples", type=int, default=600)
    parser.add_argument("--output", default="benchmarks/results/structuring")
    args = parser.parse_args(argv)
    vocabulary = Vocabulary.load(sample_tokenizer_path())
    rows = []
    started = time.perf_counter()
    for name in args.recipes:
        config = recipes.config(name, "tiny")
        options = dict(recipes.get(name).structure_options(config))
        family = options.pop("family")
        max_units, max_tokens = options.pop("max_units"), options.pop("max_tokens")
        target = getattr(config, "max_target_length", None) or 64
        path = corpus_path(config.dataset, "train")
        examples = [
            e for e in itertools.islice(read_examples(path, skip_invalid=True), args.examples * 2)
            if e.summary.strip()
        ][: args.examples]
        arguments = (vocabulary, family, max_units, max_tokens, target, options)
        variants = {
            "python (frozen)": lambda ex: python_dataset(ex, *arguments),
            "graph, 1 thread": lambda ex: graph_dataset(ex, *arguments, threads=1),
            "graph, all cores": lambda ex: graph_dataset(ex, *arguments),
        }
        row = {"recipe": name, "family": family, "dataset": config.dataset,
               "limits": [max_units, max_tokens, target], "examples": len(examples)}
        for label, make in variants.items():
            count, first, seconds = timed(make, examples)
            row[label] = count / seconds
            row[label + ", first pass"] = count / first
            print(f"{name:10s} {label:18s} {count} examples: first pass {first:6.1f} s, "
                  f"second {seconds:6.1f} s: {count / seconds:7.1f} examples/s", flush=True)
        row["graph 1 thread / python"] = row["graph, 1 thread"] / row["python (frozen)"]
        row["all cores / 1 thread"] = row["graph, all cores"] / row["graph, 1 thread"]
        print(f"{name:10s} ratios: graph 1 thread / python {row['graph 1 thread / python']:.2f}x, "
              f"all cores / 1 thread {row['all cores / 1 thread']:.2f}x", flush=True)
        rows.append(row)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "tensorflow": tf.__version__},
        "batch_size": BATCH, "rows": rows,
        "total_seconds": time.perf_counter() - started,
    }
    lines = [
        f"Structuring throughput, examples/s ({result['date']}, {os.cpu_count()} CPUs, "
        f"batch {BATCH}, pad_to_max, target built, no extras; second pass of one "
        f"dataset, one run)",
        "",
        "| recipe | family | corpus | P, T, S | examples | python (frozen) | graph, 1 thread "
        "| graph, all cores | graph 1 thread / python | all cores / 1 thread "
        "| graph all cores, first pass |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['recipe']} | {row['family']} | {row['dataset']} | "
            f"{', '.join(str(v) for v in row['limits'])} | {row['examples']} | "
            f"{row['python (frozen)']:.1f} | {row['graph, 1 thread']:.1f} | "
            f"{row['graph, all cores']:.1f} | {row['graph 1 thread / python']:.2f}x | "
            f"{row['all cores / 1 thread']:.2f}x | {row['graph, all cores, first pass']:.1f} |"
        )
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output + ".json", "w") as handle:
        json.dump(result, handle, indent=2)
    with open(args.output + ".md", "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
