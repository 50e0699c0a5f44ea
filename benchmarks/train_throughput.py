"""Training throughput of every recipe's paper-size model at 3,000 input tokens.

For each recipe (its `paper` config, with the input resized to 3,000 tokens:
30 paragraphs x 100 tokens for the hierarchical models, 3,000 tokens for
FlatTransformer) one subprocess:

1. builds real batches of B examples from ../shared/data/qmsum_general
   (long meetings, so every model sees full inputs) through the recipe's own
   `make_dataset`, with a SentencePiece vocabulary trained once on the
   same corpus;
2. builds and compiles the model exactly as `keras_hsum.training.train`
   does (recipe loss, Noam/Adagrad, clipping; Keras' default jit_compile),
   runs warm-up steps, then times `--steps` calls of `train_on_batch`;
3. reports input tokens/s (B x 3,000 / median step time) and the peak
   resident memory of the process.

A second subprocess per recipe runs the same model under KERAS_BACKEND=jax
only to count its training-step FLOPs with XLA's cost analysis (forward +
backward of the same loss; the counting needs no timing). Model FLOP/s =
FLOPs / TF step time, reported as a fraction of this machine's measured
dense matmul FLOP/s (float32 `tf.matmul` of 2048x2048, best of several
runs: the practical limit of this CPU).

Targets (issue 4): PHT and HT train at >= 1.5x FlatTransformer's tokens/s at
3,000 input tokens, and reach >= 40% of the measured matmul FLOP/s.

Backends (issue 60): `--backends` times the tiny configs instead (their
own sizes and batch, batches from the recipe's dataset on the bundled
corpus), once under TensorFlow and once under KERAS_BACKEND=jax, each in
its own subprocess: the model built and compiled as `train` builds it
(under JAX on one device, as `keras-hsum train --backend jax` does on a
one-device machine), a warm-up `fit`, then `--repeats` timed `fit` calls of
`--steps` steps on tf.data; steps/s = 1 / the median time per step, and
JAX / TensorFlow in the same run.

Usage:
    python benchmarks/train_throughput.py [--recipes flat,ht,pht] [--batch 2]
    python benchmarks/train_throughput.py --quick     # small sizes, smoke test
    python benchmarks/train_throughput.py --backends [--recipes flat,ht,pht]
Writes benchmarks/results/train_throughput[_quick].json and .md; --backends
writes train_throughput_backends.json and the "Tiny recipes" section of
train_throughput.md (the paper-size table is kept).
"""

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DEFAULT_RECIPES = (
    "flat",
    "ht",
    "pht",
    "extractive_abstractive",
    "seal",
    "compressive_abstractive",
    "discourse",
    "shte",
)

# Config overrides that give each paper config 3,000 input tokens; every
# abstractive model decodes 200 target tokens, so that tokens/s compare.
_TARGET = {"max_target_length": 200}
INPUT_3000 = {
    "flat": {"max_source_length": 3000, **_TARGET},
    "ht": {"max_paragraphs": 30, "max_test_paragraphs": 30, "paragraph_length": 100,
           **_TARGET},
    "pht": {"max_paragraphs": 30, "max_paragraph_tokens": 100, **_TARGET},
    "extractive_abstractive": {"max_snippets": 30, "snippet_length": 100, **_TARGET},
    "seal": {"max_snippets": 30, "snippet_length": 100, "max_target_length": 193},
    "compressive_abstractive": {"max_snippets": 30, "snippet_length": 100,
                                "snippets_per_group": 6, **_TARGET},
    "discourse": {"max_sections": 6, "max_section_length": 500, **_TARGET},
    "shte": {"max_sentences": 60, "max_sentence_tokens": 50},
}
QUICK = {
    "flat": {"max_source_length": 300, "max_target_length": 32},
    "ht": {"max_paragraphs": 6, "max_test_paragraphs": 6, "paragraph_length": 50,
           "max_target_length": 32},
    "pht": {"max_paragraphs": 6, "max_paragraph_tokens": 50, "max_target_length": 32},
    "extractive_abstractive": {"max_snippets": 6, "snippet_length": 50,
                               "max_target_length": 33},
    "seal": {"max_snippets": 6, "snippet_length": 50, "max_target_length": 33},
    "compressive_abstractive": {"max_snippets": 6, "snippet_length": 50,
                                "snippets_per_group": 3, "max_target_length": 33},
    "discourse": {"max_sections": 3, "max_section_length": 100, "max_target_length": 32},
    "shte": {"max_sentences": 6, "max_sentence_tokens": 50},
}


def _config(name, quick, tiny=False):
    from keras_hsum import recipes

    if tiny:
        return recipes.config(name, "tiny")

    config = recipes.config(name, "paper")
    overrides = dict((QUICK if quick else INPUT_3000).get(name, {}))
    fields = set(config.to_dict())
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise SystemExit(
            f"benchmark overrides {unknown} are not fields of recipes.{name}.Config; "
            f"its fields: {sorted(fields)}. Update INPUT_3000/QUICK."
        )
    if quick:
        for key, value in (("hidden_dim", 64), ("intermediate_dim", 128),
                           ("num_heads", 4), ("vocabulary_size", 8000)):
            if key in fields:
                overrides[key] = value
    return config.replace(**overrides)


def _batches(name, config, vocabulary_path, batch, count, corpus=("qmsum_general", "train")):
    import numpy as np

    from keras_hsum import recipes
    from keras_hsum.data import corpora
    from keras_hsum.data.vocabulary import Vocabulary

    recipe = recipes.get(name)
    vocabulary = Vocabulary.load(vocabulary_path)
    dataset = recipe.make_dataset(
        config.replace(batch_size=batch),
        corpora.corpus_path(*corpus),
        vocabulary,
        training=False,
        max_examples=batch * count,
    )
    out = []
    for element in dataset.take(count):
        out.append(
            tuple(
                {k: np.asarray(v) for k, v in part.items()}
                if isinstance(part, dict)
                else np.asarray(part)
                for part in element
            )
        )
    return out


def _input_tokens(inputs):
    import numpy as np

    return int(np.prod(inputs["tokens"].shape))


def measure_tensorflow(args):
    """Child: time training steps on TensorFlow."""
    import numpy as np

    from keras_hsum import recipes
    from keras_hsum.training.model_setup import build_compiled_model

    config = _config(args.recipe, args.quick)
    batches = _batches(args.recipe, config, args.vocabulary, args.batch, 2)
    recipe = recipes.get(args.recipe)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model = build_compiled_model(
        recipe, config, config.vocabulary_size, batches[0][0]
    )
    built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for step in range(args.warmup + args.steps):
        x, y, w = batches[step % len(batches)]
        start = time.perf_counter()
        logs = model.train_on_batch(x, y, sample_weight=w, return_dict=True)
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            times.append(elapsed)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    median = statistics.median(times)
    tokens = _input_tokens(batches[0][0])
    return {
        "recipe": args.recipe,
        "input_tokens_per_example": tokens // args.batch,
        "batch": args.batch,
        "parameters": int(model.count_params()),
        "step_seconds_median": median,
        "step_seconds": times,
        "tokens_per_second": tokens / median,
        "peak_rss_mib": peak / 1024.0,
        "peak_growth_mib": (peak - base) / 1024.0,
        "model_built_rss_mib": built / 1024.0,
        "loss": float(np.asarray(logs["loss"])),
        "jit_compile": bool(getattr(model, "jit_compile", False)),
    }


def measure_flops(args):
    """Child (KERAS_BACKEND=jax): XLA's FLOP count of one training step."""
    import jax
    import keras

    from keras_hsum import recipes
    from keras_hsum.training.model_setup import recipe_loss

    config = _config(args.recipe, args.quick)
    batches = _batches(args.recipe, config, args.vocabulary, args.batch, 1)
    recipe = recipes.get(args.recipe)
    x, y, w = batches[0]
    model = recipe.build_model(config, config.vocabulary_size)
    model(x, training=False)
    loss_object = recipe_loss(recipe, config)

    def loss_fn(trainable, non_trainable, x, y, w):
        y_pred, _, losses = model.stateless_call(
            trainable, non_trainable, x, training=True, return_losses=True
        )
        loss = loss_object(y, y_pred, sample_weight=w)
        for extra in losses:
            loss = loss + extra
        return loss

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    step = jax.jit(jax.value_and_grad(loss_fn))
    compiled = step.lower(trainable, non_trainable, x, y, w).compile()
    analysis = compiled.cost_analysis()
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0]
    del keras
    return {"recipe": args.recipe, "train_step_flops": float(analysis["flops"])}


def measure_backend_steps(args):
    """Child (KERAS_BACKEND=tensorflow or jax): steps/s of a tiny config's
    `fit`, the model built and compiled as `train` builds it, fed by tf.data
    as `train` feeds it. `fit` keeps the JAX state on the devices between
    steps (`train_on_batch` would copy it back into the variables after
    every step), so the two backends are timed on the path training takes."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_hsum import recipes
    from keras_hsum.training.model_setup import build_compiled_model

    config = _config(args.recipe, False, tiny=True)
    batches = _batches(args.recipe, config, args.vocabulary, config.batch_size, 2,
                       corpus=("qmsum_goldspan", "train"))
    recipe = recipes.get(args.recipe)
    keras.utils.set_random_seed(config.seed)
    model = build_compiled_model(recipe, config, config.vocabulary_size, batches[0][0])
    dataset = tf.data.Dataset.from_tensors(batches[0]).concatenate(
        tf.data.Dataset.from_tensors(batches[1])).repeat()
    # Compiles the step (and runs the warm-up steps).
    model.fit(dataset, steps_per_epoch=args.warmup, epochs=1, verbose=0, shuffle=False)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        history = model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0,
                            shuffle=False)
        times.append((time.perf_counter() - start) / args.steps)
    median = statistics.median(times)
    return {
        "recipe": args.recipe,
        "backend": keras.backend.backend(),
        "batch": config.batch_size,
        "parameters": int(model.count_params()),
        "step_seconds_median": median,
        "step_seconds": times,
        "steps_per_second": 1.0 / median,
        "loss": float(np.asarray(history.history["loss"][-1])),
    }


def measure_matmul(size=2048, repeats=10):
    """Best dense float32 matmul FLOP/s of this machine (TensorFlow)."""
    import tensorflow as tf

    a = tf.random.normal((size, size))
    b = tf.random.normal((size, size))
    matmul = tf.function(lambda a, b: tf.matmul(a, b))
    matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def _child(args, backend, child=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND=backend)
    if backend == "jax":
        env["JAX_PLATFORMS"] = "cpu"
    command = [sys.executable, os.path.abspath(__file__), "--child", child or backend,
               "--recipe", args.recipe, "--vocabulary", args.vocabulary,
               "--batch", str(args.batch), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--repeats", str(args.repeats)]
    if args.quick:
        command.append("--quick")
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    lines = [l for l in result.stdout.splitlines() if l.startswith("{")]
    if result.returncode or not lines:
        return {"recipe": args.recipe, "error": result.stderr.strip().splitlines()[-5:]}
    return json.loads(lines[-1])


def _vocabulary(path):
    from keras_hsum.data import corpora
    from keras_hsum.data.reader import read_examples
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.data.vocabulary import corpus_sentences

    examples = read_examples(corpora.corpus_path("qmsum_general", "train"))
    Vocabulary.train(corpus_sentences(examples), vocabulary_size=8000).save(path)


def _table(rows, matmul):
    flat = next((r for r in rows if r["recipe"] == "flat" and "error" not in r), None)
    lines = [
        "| recipe | tokens/example | params | step s | tokens/s | vs flat | "
        "peak RSS MiB | train-step GFLOP | model GFLOP/s | % of matmul |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['recipe']} | error: {' '.join(r['error'])[-120:]} |" + " |" * 8)
            continue
        ratio = r["tokens_per_second"] / flat["tokens_per_second"] if flat else float("nan")
        flops = r.get("train_step_flops")
        rate = flops / r["step_seconds_median"] if flops else None
        lines.append(
            f"| {r['recipe']} | {r['input_tokens_per_example']} | {r['parameters']:,} | "
            f"{r['step_seconds_median']:.3f} | {r['tokens_per_second']:.0f} | "
            f"{ratio:.2f}x | {r['peak_rss_mib']:.0f} | "
            + (f"{flops / 1e9:.1f} | {rate / 1e9:.1f} | {100 * rate / matmul:.0f}% |"
               if flops else "n/a | n/a | n/a |")
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default=",".join(DEFAULT_RECIPES))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--repeats", type=int, default=3,
        help="--backends: timed fit calls of --steps steps each (the median is reported)",
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-flops", action="store_true", help="skip the JAX FLOP count")
    parser.add_argument(
        "--merge", action="store_true",
        help="keep other recipes' rows of an earlier results file (same matmul figure "
        "re-measured; run the heavy SEAL-size recipes with fewer --steps)",
    )
    parser.add_argument(
        "--backends", action="store_true",
        help="steps/s of the tiny configs under TensorFlow and under JAX",
    )
    parser.add_argument("--child", choices=["tensorflow", "jax", "steps"])
    parser.add_argument("--recipe")
    parser.add_argument("--vocabulary")
    args = parser.parse_args()
    if args.child == "tensorflow":
        print(json.dumps(measure_tensorflow(args)))
        return
    if args.child == "jax":
        print(json.dumps(measure_flops(args)))
        return
    if args.child == "steps":
        print(json.dumps(measure_backend_steps(args)))
        return
    if args.backends:
        compare_backends(args)
        return

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from keras_hsum import recipes

    with tempfile.TemporaryDirectory() as folder:
        args.vocabulary = os.path.join(folder, "vocabulary.model")
        _vocabulary(args.vocabulary)
        matmul = measure_matmul()
        print(f"dense float32 matmul: {matmul / 1e9:.1f} GFLOP/s")
        rows = []
        for name in args.recipes.split(","):
            if name not in recipes.names():
                print(f"{name}: recipe not available, skipped")
                continue
            args.recipe = name
            row = _child(args, "tensorflow")
            if "error" not in row and not args.no_flops:
                row.update({k: v for k, v in _child(args, "jax").items() if k != "recipe"})
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "step_seconds"}))
    suffix = "_quick" if args.quick else ""
    results_json = os.path.join(RESULTS, f"train_throughput{suffix}.json")
    for row in rows:
        row["steps_measured"] = args.steps
    if args.merge and os.path.exists(results_json):
        with open(results_json) as file:
            earlier = json.load(file)["rows"]
        names_now = {row["recipe"] for row in rows}
        rows = [row for row in earlier if row["recipe"] not in names_now] + rows
        order = {name: i for i, name in enumerate(DEFAULT_RECIPES)}
        rows.sort(key=lambda row: order.get(row["recipe"], len(order)))
    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "processor": platform.processor()},
        "batch": args.batch,
        "matmul_flops_per_second": matmul,
        "rows": rows,
    }
    table = _table(rows, matmul)
    print(table)
    os.makedirs(RESULTS, exist_ok=True)
    with open(results_json, "w") as file:
        json.dump(report, file, indent=1)
    markdown = os.path.join(RESULTS, f"train_throughput{suffix}.md")
    _, backends_section = _split_backends_section(markdown)
    with open(markdown, "w") as file:
        file.write(
            f"# Training throughput at 3,000 input tokens (paper sizes)\n\n"
            f"{report['date']}, {report['machine']['platform']}, "
            f"{report['machine']['cpus']} CPUs; batch {args.batch}; dense matmul "
            f"{matmul / 1e9:.1f} GFLOP/s (float32 2048^3).\n\n{table}\n"
            + backends_section
        )


BACKENDS_HEADING = "## Tiny recipes: TensorFlow and JAX"
TINY_RECIPES = ("flat", "ht", "pht")


def _split_backends_section(markdown):
    """`(the file's text before the backends section, that section)`; both
    "" for a missing file."""
    if not os.path.exists(markdown):
        return "", ""
    with open(markdown) as file:
        text = file.read()
    index = text.find(BACKENDS_HEADING)
    if index < 0:
        return text, ""
    return text[:index], "\n" + text[index:]


def compare_backends(args):
    """Parent of --backends: one TensorFlow and one JAX child per tiny
    recipe; writes train_throughput_backends.json and the markdown section."""
    from keras_hsum import recipes

    names = args.recipes.split(",") if args.recipes != ",".join(DEFAULT_RECIPES) \
        else list(TINY_RECIPES)
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        args.vocabulary = os.path.join(folder, "vocabulary.model")
        _tiny_vocabulary(args.vocabulary)
        for name in names:
            if name not in recipes.names():
                print(f"{name}: recipe not available, skipped")
                continue
            args.recipe = name
            row = {"recipe": name}
            for backend in ("tensorflow", "jax"):
                row[backend] = _child(args, backend, child="steps")
                print(json.dumps({backend: {k: v for k, v in row[backend].items()
                                            if k != "step_seconds"}}))
            rows.append(row)
    load_after = os.getloadavg()
    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average_before": load_before, "load_average_after": load_after},
        "steps_measured": args.steps, "warmup": args.warmup, "repeats": args.repeats,
        "rows": rows,
    }
    with open(os.path.join(RESULTS, "train_throughput_backends.json"), "w") as file:
        json.dump(report, file, indent=1)
    lines = [
        "| recipe | batch | params | TF step s | TF steps/s | JAX step s | JAX steps/s | "
        "JAX / TF |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        tf_row, jax_row = row["tensorflow"], row["jax"]
        if "error" in tf_row or "error" in jax_row:
            error = " ".join(tf_row.get("error") or jax_row.get("error"))[-120:]
            lines.append(f"| {row['recipe']} | error: {error} |" + " |" * 6)
            continue
        lines.append(
            f"| {row['recipe']} | {tf_row['batch']} | {tf_row['parameters']:,} | "
            f"{tf_row['step_seconds_median']:.3f} | {tf_row['steps_per_second']:.2f} | "
            f"{jax_row['step_seconds_median']:.3f} | {jax_row['steps_per_second']:.2f} | "
            f"{jax_row['steps_per_second'] / tf_row['steps_per_second']:.2f}x |"
        )
    table = "\n".join(lines)
    print(table)
    loaded = max(load_before[0], load_after[0]) > 2
    section = (
        f"{BACKENDS_HEADING}\n\n"
        f"{report['date']}, {report['machine']['platform']}, {report['machine']['cpus']} "
        f"CPUs; `python benchmarks/train_throughput.py --backends`: each recipe's tiny "
        f"config (its own sizes and batch) on real qmsum_goldspan batches, one "
        f"subprocess per backend, a {args.warmup}-step `fit` (compiling) then "
        f"{args.repeats} timed `fit` calls of {args.steps} steps on tf.data (the median "
        "per step), JAX on one CPU device. "
        f"Load average {load_before[0]:.1f} before and {load_after[0]:.1f} after"
        + (": the machine was shared and loaded, so the absolute times are inflated and "
           "the JAX / TF ratios carry the noise of the other jobs." if loaded else ".")
        + f"\n\n{table}\n"
    )
    markdown = os.path.join(RESULTS, "train_throughput.md")
    before, _ = _split_backends_section(markdown)
    with open(markdown, "w") as file:
        file.write(before.rstrip("\n") + "\n\n" + section)


def _tiny_vocabulary(path):
    """A 4,000-piece vocabulary (the tiny configs' size) on qmsum_goldspan's
    training split."""
    from keras_hsum.data import corpora
    from keras_hsum.data.reader import read_examples
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.data.vocabulary import corpus_sentences

    examples = read_examples(corpora.corpus_path("qmsum_goldspan", "train"))
    Vocabulary.train(corpus_sentences(examples), vocabulary_size=4000).save(path)


if __name__ == "__main__":
    main()
