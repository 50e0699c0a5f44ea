"""SavedModel serving latency vs in-Python XLA decoding, one 30×100 cluster.

The same trained model (default: the tiny PHT run `runs/tiny_recipes/pht`,
its weights and vocabulary), the same input (one qmsum_goldspan validation
cluster, structured to P = 30 paragraphs × T = 100 tokens: the paper's
input size), the same beam search (K = 5, L = `--max-length`, |y|
normalisation + trigram blocking), timed two ways:

- serving: `keras-hsum export` builds a `SummarizerModule` (in-graph
  preprocessing + encoder + beam search + detokenisation), it is written
  as a SavedModel, loaded with `tf.saved_model.load` and its
  `serving_default` signature is called (what TF Serving runs);
- python: the same `TextStructurer` (a tf.function), then encoder + beam
  search as a Python `tf.function(jit_compile=True)`, then detokenize.

Both are warmed up (tracing / XLA compilation excluded) and timed over
`--repeats` calls; the ratio of medians is reported. The SavedModel is
exported with and without `jit_compile` (the serving module's XLA option);
the ratio that the target (≤ 1.2) refers to is the jit-compiled export.

Usage: python benchmarks/serving.py [--run runs/tiny_recipes/pht]
       [--repeats 5] [--max-length 63]
Writes benchmarks/results/serving.json and .md.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import shutil
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_hsum.data import corpus_path  # noqa: E402
from keras_hsum.data import read_examples  # noqa: E402
from keras_hsum.data.reader import render_documents  # noqa: E402
from keras_hsum.export.cli import load_run  # noqa: E402
from keras_hsum.export.preprocessing import TextStructurer  # noqa: E402
from keras_hsum.export.serving import SearchOptions  # noqa: E402
from keras_hsum.export.serving import SummarizerModule  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pick_cluster(structurer, count=40):
    """The first validation cluster that fills the most of the 30×100 grid."""
    best, best_tokens = None, -1
    for example in list(read_examples(corpus_path("qmsum_goldspan", "val")))[:count]:
        documents = tf.constant([render_documents(example)])
        tokens = int(tf.reduce_sum(tf.cast(structurer(documents)["token_mask"], tf.int32)))
        if tokens > best_tokens:
            best, best_tokens = documents, tokens
    return best, best_tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=os.path.join(REPO, "runs", "tiny_recipes", "pht"))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--paragraphs", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=100)
    args = parser.parse_args()

    name, recipe, config, model, vocabulary = load_run(args.run)
    options = dict(recipe.structure_options(config))
    options.update(max_units=args.paragraphs, max_tokens=args.tokens)
    structurer = TextStructurer(vocabulary.proto, **options)
    max_length = args.max_length or config.max_target_length - 1
    search = SearchOptions(beam_size=args.beam_size, max_length=max_length, block_ngrams=3)
    documents, real_tokens = pick_cluster(structurer)

    # In-Python: structurer, then encoder + search under XLA, then detokenize.
    @tf.function(jit_compile=True)
    def jit_search(inputs):
        result = search(model, inputs)
        return result["sequences"][:, 0], result["scores"][:, 0]

    def python_decoding():
        features = structurer(documents)
        inputs = {k: v for k, v in features.items() if v.dtype != tf.string}
        ids, scores = jit_search(inputs)
        return structurer.detokenize(ids).numpy(), scores.numpy()

    python_decoding()  # warm-up: tracing, XLA compilation
    python_summary, python_score = python_decoding()

    paths = {}
    folder = tempfile.mkdtemp(prefix="serving_benchmark_")
    for jit in (True, False):
        module = SummarizerModule(model, structurer, search, jit_compile=jit)
        path = os.path.join(folder, f"jit_{jit}")
        tf.saved_model.save(module, path, signatures=module.signatures())
        paths["saved_model_jit" if jit else "saved_model"] = path
    servings = {}
    for key, path in paths.items():
        signature = tf.saved_model.load(path).signatures["serving_default"]

        def serving(signature=signature):
            outputs = signature(documents=documents)
            return outputs["summary"].numpy(), outputs["score"].numpy()

        serving()  # warm-up
        servings[key] = serving
    # Interleaved: every round times each path once, so that load from other
    # processes on the machine hits all paths alike.
    times = {"python": [], **{key: [] for key in servings}}
    for _ in range(args.repeats):
        for key, function in [("python", python_decoding), *servings.items()]:
            start = time.perf_counter()
            function()
            times[key].append(time.perf_counter() - start)
    python_times = times["python"]
    rows = {}
    for key, serving in servings.items():
        summary, score = serving()
        rows[key] = {
            "median_s": statistics.median(times[key]),
            "min_s": min(times[key]),
            "times_s": times[key],
            "same_summary_as_python": bool(np.array_equal(summary, python_summary)),
            "score_difference": float(np.max(np.abs(score - python_score))),
        }
    shutil.rmtree(folder, ignore_errors=True)
    python_median = statistics.median(python_times)
    result = {
        "run": os.path.relpath(args.run, REPO) if args.run.startswith(REPO) else args.run,
        "recipe": name,
        "input": {
            "paragraphs": args.paragraphs, "tokens_per_paragraph": args.tokens,
            "real_tokens": real_tokens, "documents": int(documents.shape[1]),
        },
        "search": search.to_dict(),
        "python_jit": {"median_s": python_median, "min_s": min(python_times),
                       "times_s": python_times},
        **rows,
        "ratio_saved_model_jit": rows["saved_model_jit"]["median_s"] / python_median,
        "ratio_saved_model_no_jit": rows["saved_model"]["median_s"] / python_median,
        "ratio_saved_model_jit_min": rows["saved_model_jit"]["min_s"] / min(python_times),
        "target_ratio": 1.2,
        "summary": python_summary[0].decode("utf-8", errors="replace"),
        "machine": {
            "platform": platform.platform(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "tensorflow": tf.__version__,
            "devices": [d.device_type for d in tf.config.list_physical_devices()],
        },
    }
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    print(f"ratio SavedModel (jit) / in-Python jit: {result['ratio_saved_model_jit']:.3f}")
    print(f"ratio SavedModel (no jit) / in-Python jit: {result['ratio_saved_model_no_jit']:.3f}")
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "serving.json"), "w") as handle:
        json.dump(result, handle, indent=2)
    lines = [
        "# Serving latency: SavedModel vs in-Python XLA decoding",
        "",
        f"One qmsum_goldspan validation cluster structured to {args.paragraphs} × "
        f"{args.tokens} tokens ({real_tokens} real tokens), `{result['run']}` "
        f"({name}), beam {args.beam_size}, up to {max_length} tokens, trigram "
        f"blocking; {args.repeats} interleaved rounds after warm-up; "
        f"{os.cpu_count()} CPU cores, TensorFlow {tf.__version__}.",
        "",
        "| path | median latency (s) | min (s) | ratio of medians to in-Python jit | same summary |",
        "|---|---|---|---|---|",
        f"| in-Python: structurer + `tf.function(jit_compile=True)` search | "
        f"{python_median:.3f} | {min(python_times):.3f} | 1.000 | - |",
    ]
    for key, label in (("saved_model_jit", "SavedModel `serving_default`, exported with jit_compile"),
                       ("saved_model", "SavedModel `serving_default`, exported without jit_compile")):
        row = rows[key]
        lines.append(
            f"| {label} | {row['median_s']:.3f} | {row['min_s']:.3f} | "
            f"{row['median_s'] / python_median:.3f} | "
            f"{'yes' if row['same_summary_as_python'] else 'no'} |"
        )
    lines += ["", "Target: ≤ 1.2 (the jit-compiled export)."]
    with open(os.path.join(RESULTS, "serving.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
