"""The training pipeline's source, now against a baseline commit, in one run.

Issue 58's 2-core target (>= 1.8x one core) is capped by the part of
`make_dataset` that holds Python's GIL: the source generator (reading the
corpus, rendering each example's documents as the marker text a SavedModel
receives, the strings' arrays) and `tf.data.Dataset.from_generator`'s call
and conversions around each element it yields. For each recipe, on the
first `--max-examples` records of its default training corpus (as
`pipeline_speedup.py` picks them; shte: its pairs source,
`recipe.examples(..., training=True)`), each tree in a child process of its
own, alternating, it times:

- generator: iterating the source generator `make_dataset` wraps
  (`raw_chunks` of 32 where the tree has it, else `raw_examples`), in
  Python: CPU ms per example;
- source: the same generator through `from_generator` and into chunks of 32
  (`ragged_batch` after `raw_examples`; `chunk_tensors` after
  `raw_chunks`), one tf.data thread: CPU ms per example, all of it serial;
- with `--pipeline`, also `pipeline_speedup.py`'s child on the same trees:
  the recipe's whole training `make_dataset`, examples per CPU second on one
  thread and wall examples/s on one thread and with every core.

CPU time, the least of `--repeats` runs (each 5 passes over the examples)
after one untimed run.

Usage (from the repository root):
    python benchmarks/source_speed.py                    # ~3 min idle, the source only
    python benchmarks/source_speed.py --recipes seal pht shte flat --pipeline  # ~7 min
Writes benchmarks/results/source_speed.json and .md.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import pipeline_speedup  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")
RECIPES = ("seal", "pht", "shte", "flat", "ht", "discourse")
CHUNK = 32
SOURCE_PASSES = 5


# ------------------------------------------------------------- the child


def child(args):
    """Times one (tree, recipe)'s source and prints one JSON line."""
    sys.path.insert(0, args.tree)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    recipes = pipeline_speedup._tree_recipes(args.tree)
    from keras_hsum.data import raw_examples as raw_lib
    from keras_hsum.data.pipeline_report import PipelineReport

    recipe = recipes.get(args.recipe)
    config = recipes.config(args.recipe, "tiny")
    source = args.corpus
    if recipe.RECIPE.examples is not None:
        source = recipe.RECIPE.examples(config, args.corpus, training=True, seed=0,
                                        max_examples=None)
    chunked = hasattr(raw_lib, "raw_chunks")

    def generator():
        arguments = (source, PipelineReport(), True, True, False, "strict", [])
        if chunked:
            return raw_lib.raw_chunks(*arguments, CHUNK)
        return raw_lib.raw_examples(*arguments)

    if chunked:
        dataset = tf.data.Dataset.from_generator(
            generator, output_signature=raw_lib.RAW_CHUNK_SIGNATURE
        ).map(raw_lib.chunk_tensors)
    else:
        dataset = tf.data.Dataset.from_generator(
            generator, output_signature=raw_lib.RAW_SIGNATURE
        ).ragged_batch(CHUNK)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    examples = sum(len(chunk["title"]) for chunk in dataset)
    # Several passes per timed run (as a repeated training dataset reads
    # them), so that starting an iterator counts once.
    dataset = dataset.repeat(SOURCE_PASSES).with_options(options)

    def in_python():
        for _ in range(SOURCE_PASSES):
            for _ in generator():
                pass

    def through_tf_data():
        for _ in dataset:
            pass

    result = {"tree": args.label, "recipe": args.recipe, "examples": examples}
    for name, run in (("generator", in_python), ("source", through_tf_data)):
        run()
        best = float("inf")
        for _ in range(args.repeats):
            start = time.process_time()
            run()
            best = min(best, time.process_time() - start)
        result[name + "_ms"] = 1000 * best / (examples * SOURCE_PASSES)
    print("RESULT " + json.dumps(result), flush=True)


# ------------------------------------------------------------ the parent


def _run_child(tree, label, name, corpus, args):
    command = [sys.executable, os.path.abspath(__file__), "--child", "--tree", tree,
               "--label", label, "--recipe", name, "--corpus", corpus,
               "--repeats", str(args.repeats)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, PYTHONPATH=tree), cwd=tree)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{label} {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def measure(args):
    folder = tempfile.mkdtemp(prefix="source_speed_")
    baseline = pipeline_speedup._baseline_tree(args.baseline, os.path.join(folder, "baseline"))
    trees = (("baseline", baseline), ("now", os.path.abspath(args.now_tree or ROOT)))
    rows = []
    try:
        for name in args.recipes:
            corpus, _, vocabulary, examples = pipeline_speedup._corpus_and_vocabulary(
                name, args, folder)
            row = {"recipe": name}
            for label, tree in trees:
                row[label] = _run_child(tree, label, name, corpus, args)
                if args.pipeline:
                    row[label]["pipeline"] = pipeline_speedup._run_child(
                        tree, label, name, "tiny", corpus, vocabulary, examples, args)
                print(name, label, json.dumps(row[label]), flush=True)
            rows.append(row)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_before": os.getloadavg()[0], "baseline": args.baseline,
        "now": args.now_tree or subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
            text=True).stdout.strip() + " (working tree)",
        "repeats": args.repeats, "rows": rows,
    }


def markdown(result):
    lines = [
        "# The pipeline's source: now against a baseline commit (issue 58)",
        "",
        f"Measured {result['date']} on {result['machine']} (load "
        f"{result['load_before']:.1f} before the run) by `benchmarks/source_speed.py`: "
        f"{result['now']} against {result['baseline']}, each in child processes of its "
        "own, alternating, on the first examples of each recipe's default corpus. "
        "Generator: the source generator in Python; source: the same through "
        "`from_generator` into chunks of 32 on one tf.data thread (all of it holds the "
        f"GIL). CPU ms per example, the least of {result['repeats']} runs of "
        f"{SOURCE_PASSES} passes.",
        "",
        "| recipe | examples | generator before | generator now | source before | "
        "source now | source before ÷ now |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        old, now = row["baseline"], row["now"]
        lines.append(
            f"| {row['recipe']} | {now['examples']} | {old['generator_ms']:.3f} | "
            f"{now['generator_ms']:.3f} | {old['source_ms']:.3f} | {now['source_ms']:.3f} | "
            f"{old['source_ms'] / now['source_ms']:.1f}× |")
    piped = [row for row in result["rows"] if "pipeline" in row["now"]]
    if piped:
        lines += [
            "",
            "The recipe's whole training `make_dataset` (tiny config; "
            "`pipeline_speedup.py`'s child, the same trees): examples per CPU second on "
            "one tf.data thread, wall examples/s on one thread and with every core.",
            "",
            "| recipe | ex/CPU s before | ex/CPU s now | wall 1 thread before | "
            "wall 1 thread now | wall all cores before | wall all cores now | "
            "2 cores ÷ 1 before | 2 cores ÷ 1 now |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in piped:
            old, now = row["baseline"]["pipeline"], row["now"]["pipeline"]
            cells = []
            for key, part in (("examples_per_cpu_s", "one_thread"),
                              ("examples_per_s", "one_thread"),
                              ("examples_per_s", "all_cores")):
                cells += [f"{old[part][key]:.1f}", f"{now[part][key]:.1f}"]
            for run in (old, now):
                cells.append(f"{run['all_cores']['examples_per_s'] / run['one_thread']['examples_per_s']:.2f}×")
            lines.append(f"| {row['recipe']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--baseline", default="00fbaca",
                        help="the commit to compare with (00fbaca: before the chunked source)")
    parser.add_argument("--now-tree", help="a folder to measure instead of this checkout")
    parser.add_argument("--max-examples", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pipeline", action="store_true",
                        help="also time the whole make_dataset (pipeline_speedup's child)")
    parser.add_argument("--passes", type=int, default=2, help="pipeline passes timed")
    parser.add_argument("--vocabulary-size", type=int, default=4000)
    parser.add_argument("--vocabulary-examples", type=int, default=50)
    parser.add_argument("--output", default=os.path.join(RESULTS, "source_speed"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("--tree", "--label", "--recipe", "--corpus"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    sys.path.insert(0, ROOT)
    result = measure(args)
    table = markdown(result)
    with open(args.output + ".json", "w", encoding="utf-8") as out:
        json.dump(result, out, indent=1)
    with open(args.output + ".md", "w", encoding="utf-8") as out:
        out.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
