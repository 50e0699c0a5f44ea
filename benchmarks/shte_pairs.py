"""SHTE's training pipeline: the pair features in Python vs in the graph.

Issue 58, item 2. `recipes.shte.summary_features` gives each pair its
summary's sentences and its label. It ran in Python (`tf.py_function`,
one eager structurer call per pair); it now runs in the graph on each
chunk of pairs (`graph_features`). This script times, in one run, the
recipe's training `make_dataset` (shuffled, repeated, uncached: every
batch structured from text) on ONE tf.data thread
(`private_threadpool_size=1`, `max_intra_op_parallelism=1`) with the extra
on each route: "python" is the same extra without its `graph_features`
(so the pipeline runs it through `tf.py_function`, as before), "graph" the
recipe as it is. Each pass: one untimed pass over the pairs (tracing,
start-up, the shuffle buffer filling), then `--batches` batches timed:
examples/s (wall) and CPU ms per example (this process's CPU time, less
sensitive to other processes on a shared machine). Routes alternate,
`--repeats` times; the best pass of each is reported, with the ratio.

Source: the bundled scitldr_a train sample (300 examples, 600 pairs per
pass), a 4000-piece SentencePiece vocabulary trained on it, the tiny
config (batch 16).

Usage (from the repository root):
    python benchmarks/shte_pairs.py
    python benchmarks/shte_pairs.py --repeats 3 --batches 75 --output /tmp/shte
Writes `<output>.json` and `.md` (default benchmarks/results/shte_pairs).
"""

import argparse
import dataclasses
import datetime
import json
import os
import platform
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_hsum import recipes  # noqa: E402
from keras_hsum.data import corpora  # noqa: E402
from keras_hsum.data import reader  # noqa: E402
from keras_hsum.data.vocabulary import Vocabulary  # noqa: E402
from keras_hsum.data.vocabulary import corpus_sentences  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def python_route(recipe):
    """`recipe` with its summary extra run in Python (no graph_features)."""

    def labels(config, vocabulary):
        extras = recipe.labels(config, vocabulary)
        for extra in extras:
            if hasattr(extra, "graph_features"):
                del extra.graph_features
        return extras

    return dataclasses.replace(recipe, labels=labels)


def one_pass(recipe, config, examples, vocabulary, skip, batches):
    keras.utils.set_random_seed(0)
    dataset = recipe.make_dataset(config, examples, vocabulary, training=True)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    iterator = iter(dataset.with_options(options))
    for _ in range(skip):
        next(iterator)
    count = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        inputs, labels, _ = next(iterator)
        count += int(labels.shape[0])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"examples": count, "seconds": wall, "examples_per_s": count / wall,
            "cpu_ms_per_example": 1000 * cpu / count}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batches", type=int, default=75, help="timed batches per pass")
    parser.add_argument("--output", default=os.path.join(RESULTS, "shte_pairs"))
    args = parser.parse_args(argv)

    recipe = recipes.get("shte").RECIPE
    config = recipes.config("shte", "tiny")
    examples = list(reader.read_jsonl(corpora.sample_path("scitldr_a", "train")))
    vocabulary = Vocabulary.train(corpus_sentences(examples), vocabulary_size=4000)
    pairs = 2 * len(examples)  # one negative per positive (the tiny config)
    skip = -(-pairs // config.batch_size)
    routes = {"python": python_route(recipe), "graph": recipe}
    runs = {name: [] for name in routes}
    for repeat in range(args.repeats):
        for name, route in routes.items():
            run = one_pass(route, config, examples, vocabulary, skip, args.batches)
            runs[name].append(run)
            print(f"pass {repeat + 1} {name}: {run['examples_per_s']:.1f} examples/s, "
                  f"{run['cpu_ms_per_example']:.2f} CPU ms/example", flush=True)
    best = {
        name: {"examples_per_s": max(r["examples_per_s"] for r in passes),
               "cpu_ms_per_example": min(r["cpu_ms_per_example"] for r in passes)}
        for name, passes in runs.items()
    }
    result = {
        "benchmark": "shte_pairs", "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "tensorflow": tf.__version__},
        "corpus": "scitldr_a train (bundled sample)", "examples": len(examples),
        "pairs_per_pass": pairs, "batch_size": config.batch_size,
        "timed_batches": args.batches, "runs": runs, "best": best,
        "speedup_examples_per_s": best["graph"]["examples_per_s"]
        / best["python"]["examples_per_s"],
        "cpu_ratio": best["python"]["cpu_ms_per_example"]
        / best["graph"]["cpu_ms_per_example"],
    }
    table = "\n".join([
        f"# SHTE training make_dataset, one tf.data thread ({result['date']})", "",
        f"scitldr_a train sample ({len(examples)} examples, {pairs} pairs per pass), tiny "
        f"config (batch {config.batch_size}), {args.batches} batches timed after one "
        f"untimed pass, best of {args.repeats} alternating passes; shared {os.cpu_count()}-CPU "
        "machine.", "",
        "| summary extra | examples/s (wall) | CPU ms/example |", "|---|---|---|",
        *(f"| {name} | {best[name]['examples_per_s']:.1f} | "
          f"{best[name]['cpu_ms_per_example']:.2f} |" for name in routes),
        "",
        f"graph ÷ python: {result['speedup_examples_per_s']:.1f}× examples/s, "
        f"{result['cpu_ratio']:.1f}× less CPU per example.",
    ])
    print()
    print(table)
    with open(args.output + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    with open(args.output + ".md", "w", encoding="utf-8") as handle:
        handle.write(table + "\n")
    return result


if __name__ == "__main__":
    main()
