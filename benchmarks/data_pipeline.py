"""Throughput of the tf.data pipelines, and how it compares to training.

For each recipe (default: ht, pht, seal, discourse, shte, flat: one per
family) this reads the first `--max-examples` records of the recipe's
default training corpus (../shared/data when present, else the bundled
sample) with a SentencePiece vocabulary of the tiny configs' size trained on
them, and measures in one run:

- train: steps/s of the TINY recipe's model, built and compiled as
  `keras-hsum train` does (`keras_hsum.training.trainer.build_compiled_model`:
  the recipe's loss, optimizer and metrics), `train_on_batch` on real
  batches of the recipe's own `make_dataset`, after warm-up steps;
- pipeline: batches/s of the recipe's training `make_dataset` (shuffled,
  repeated, uncached, so every batch is structured from text), timed over
  `--epochs` passes after one untimed pass, on all cores and on one tf.data
  thread (`private_threadpool_size=1`, `max_intra_op_parallelism=1`);
- shards: the same `make_dataset` reading the TFRecord shards that
  `keras-hsum preprocess` (1 DirectRunner worker) wrote from the same
  records (SHTE has none: it draws new negative pairs every epoch);

and the ratios pipeline ÷ step (target ≥ 10×) and shards ÷ step (target
≥ 50×), measured in the same run. The same pipeline and shard rates are
measured for each recipe's PAPER structure (batch 8, tiny vocabulary) for a
projection of the paper configs on one H100: FLOPs of one training step
(`--paper-flops`: XLA's cost analysis of the recipe loss's value and
gradient under KERAS_BACKEND=jax for one paper example, × the paper batch;
discourse by hand, as XLA counts one iteration of an LSTM scan) at an
assumed 40% of the H100's dense bf16 peak (989.4 TFLOP/s) give steps/s and
the examples/s the input must deliver, against the paper pipeline's
one-thread rate × 16 cores × the per-core efficiency of the second core
measured here.

`--structurer` times the serving side instead: the in-graph
`keras_hsum.data.structurer.TextStructurer` on ONE document without a
blank line (one paragraph) of 100 KB, 300 KB and 1 MB, built from the
bundled real text, for the families the recipes serve, and prints
time(1 MB) / time(100 KB): linear time gives 10×, the target is ≤ 15×
(issue 46: it was quadratic, 26.9 s at 1 MB). The same 1 MB cut into
~1 KB paragraphs is timed beside it.

`--shards` times reading a shard folder written by `keras-hsum preprocess`
against the in-process pipeline: the same recipe's `make_dataset` on the
JSONL corpus (cold) and on its shards, one pass each, examples/s.
`--corpus-scale N [N ...]` writes a synthetic corpus of N documents (the
bundled texts repeated with new ids) and runs `keras-hsum preprocess` on it
with 1 and 2 DirectRunner workers: wall time, peak memory of the whole
process tree (psutil, sampled every 0.2 s), and the shards' example count
against N.

Usage (from the repository root):
    python benchmarks/data_pipeline.py --quick          # smoke test (pht), ~3 min
    python benchmarks/data_pipeline.py --paper-flops    # FLOPs of the paper configs, ~10 min
    python benchmarks/data_pipeline.py                  # every family, ~15 min
    python benchmarks/data_pipeline.py --recipes ht pht --max-examples 64
    python benchmarks/data_pipeline.py --structurer     # ~1 min
    python benchmarks/data_pipeline.py --shards         # ~1 min
    python benchmarks/data_pipeline.py --corpus-scale 2000 8000

Writes `benchmarks/results/data_pipeline[_quick].json` and `.md`
(`data_pipeline_structurer`, `_shards`, `_corpus_scale` and `_paper_flops`
with those modes; `--corpus-scale ... --merge` keeps the earlier file's rows
of other sizes).
"""

import argparse
import datetime
import itertools
import json
import math
import os
import platform
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __package__ in (None, ""):
    # Run as a script from a checkout: make `keras_hsum` importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_hsum.data.corpora import SAMPLE_ROOT  # noqa: E402
from keras_hsum.data.corpora import corpus_path  # noqa: E402
from keras_hsum.data.reader import read_examples  # noqa: E402
from keras_hsum.data.vocabulary import Vocabulary  # noqa: E402
from keras_hsum.data.vocabulary import corpus_sentences  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# The recipes measured by default (one per family; `--recipes` for others).
RECIPES = ("ht", "pht", "seal", "discourse", "shte", "flat")
# The H100 projection: dense bf16 peak of one H100 SXM (989.4 TFLOP/s,
# NVIDIA's datasheet, without sparsity) at an assumed model FLOP utilisation.
H100_PEAK_FLOPS = 989.4e12
ASSUMED_MFU = 0.40
HOST_CORES = 16
PAPER_FLOPS_STEM = os.path.join(RESULTS, "data_pipeline_paper_flops")


def _subset(path, count, out):
    """The first `count` non-blank JSONL records of `path` (gzip or not) in `out`."""
    import gzip

    opener = gzip.open if path.endswith(".gz") else open
    written = 0
    with opener(path, "rt", encoding="utf-8") as source, open(out, "w", encoding="utf-8") as sink:
        for line in source:
            if line.strip():
                sink.write(line if line.endswith("\n") else line + "\n")
                written += 1
                if written == count:
                    break
    return written


def _single_threaded(dataset):
    """`dataset` run by one tf.data thread, one thread per op."""
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    return dataset.with_options(options)


def _batch_examples(element):
    inputs = element[0]
    return int(next(iter(inputs.values())).shape[0])


def _steady_rate(dataset, batches, skip, threads=None):
    """Batches/s and examples/s over `batches` batches after `skip` untimed
    ones. `make_dataset` shuffles each pass before repeating it, so its first
    batch waits for the whole first pass (with tracing and start-up) and the
    rest of that pass is then already structured: `skip` is one pass."""
    if threads == 1:
        dataset = _single_threaded(dataset)
    iterator = iter(dataset)
    start = time.perf_counter()
    for _ in range(skip):
        _batch_examples(next(iterator))
    first = time.perf_counter() - start
    examples = 0
    start = time.perf_counter()
    for _ in range(batches):
        examples += _batch_examples(next(iterator))
    seconds = time.perf_counter() - start
    return {
        "first_pass_seconds": first, "skipped_batches": skip, "batches": batches,
        "examples": examples, "seconds": seconds, "batches_per_s": batches / seconds,
        "examples_per_s": examples / seconds,
    }


def _pipeline_rates(recipe, config, source, vocabulary, batches, label, skip):
    """The recipe's training `make_dataset` (shuffled, repeated, uncached: every
    batch is structured from text, or read from shards) on all cores and on one
    thread."""
    rates = {}
    for threads in (None, 1):
        keras.utils.set_random_seed(0)
        dataset = recipe.make_dataset(config, source, vocabulary, training=True)
        rates["all_cores" if threads is None else "one_thread"] = rate = _steady_rate(
            dataset, batches, skip, threads
        )
        print(f"  {label} ({'all cores' if threads is None else '1 thread'}): "
              f"{rate['batches_per_s']:.2f} batches/s, {rate['examples_per_s']:.1f} examples/s")
    rates["two_core_scaling"] = (
        rates["all_cores"]["examples_per_s"] / rates["one_thread"]["examples_per_s"]
    )
    return rates


def _training_rate(recipe, config, source, vocabulary, args):
    """Steps/s of the tiny recipe's model, built and compiled as the trainer
    does, on real batches of its own make_dataset (after warm-up steps)."""
    from keras_hsum.training.model_setup import build_compiled_model

    keras.utils.set_random_seed(config.seed)
    dataset = recipe.make_dataset(config, source, vocabulary, training=True)
    batches = list(dataset.take(args.train_batches))
    model = build_compiled_model(recipe, config, vocabulary.vocabulary_size, batches[0][0])
    for inputs, labels, weights in batches[:1] * args.warmup_steps:
        model.train_on_batch(inputs, labels, sample_weight=weights)
    start = time.perf_counter()
    for inputs, labels, weights in itertools.islice(itertools.cycle(batches), args.train_steps):
        model.train_on_batch(inputs, labels, sample_weight=weights)
    seconds = time.perf_counter() - start
    rate = {
        "steps_per_s": args.train_steps / seconds, "steps": args.train_steps,
        "batch_size": _batch_examples(batches[0]), "parameters": int(model.count_params()),
        "jit_compile": bool(model.jit_compile),
    }
    print(f"  train {rate['steps_per_s']:.2f} steps/s ({rate['parameters']:,} parameters, "
          f"jit_compile={rate['jit_compile']})")
    return rate


def _shard_folder(folder, name, config_name):
    return os.path.join(folder, f"shards-{name}-{config_name}")


def write_shards(args, folder):
    """Runs `keras-hsum preprocess` (its `main`, in this process: 1 DirectRunner
    worker, 2 shards) for the tiny and paper configs of every recipe that can
    be preprocessed, before anything is timed. Returns {(recipe, config):
    seconds, or the reason it has no shards}."""
    from keras_hsum import cli
    from keras_hsum import recipes
    from keras_hsum.recipes.base import example_structure

    done = {}
    for name in args.recipes:
        recipe = recipes.get(name)
        corpus, _, vocab, vocabulary = _recipe_corpus(recipe, args, folder)
        for config_name in ("tiny",) + (() if args.no_paper else ("paper",)):
            if config_name not in recipe.CONFIGS:
                continue
            try:
                example_structure(recipe, recipes.config(name, config_name), vocabulary,
                                  training=True)
            except ValueError as error:
                done[name, config_name] = str(error)
                continue
            command = _preprocess_command(corpus, _shard_folder(folder, name, config_name),
                                          vocab, 1, 2, recipe=name, config=config_name)
            started = time.perf_counter()
            if cli.main(command[3:]):
                raise RuntimeError(f"keras-hsum {' '.join(command[3:])} failed")
            done[name, config_name] = time.perf_counter() - started
            print(f"preprocess {name}/{config_name}: {done[name, config_name]:.0f} s")
    return done


def _shard_rates(name, config_name, recipe, config, vocabulary, folder, batches, written):
    """Reads the shards `write_shards` wrote through the recipe's make_dataset;
    the reason instead when the recipe has none."""
    if isinstance(written.get((name, config_name)), str):
        return {"skipped": written[name, config_name]}
    rates = _pipeline_rates(recipe, config, _shard_folder(folder, name, config_name),
                            vocabulary, 8 * batches, f"shards/{config_name}",
                            max(1, batches // 2))
    rates["preprocess_seconds"] = written[name, config_name]
    return rates


def _recipe_corpus(recipe, args, folder):
    """(subset file of the recipe's default training corpus, its source, the
    vocabulary file and Vocabulary), cached per corpus in `folder`."""
    from keras_hsum.data.vocabulary import corpus_sentences as sentences

    dataset = recipe.DEFAULT_DATASET
    subset = os.path.join(folder, f"{dataset}.jsonl")
    vocab = os.path.join(folder, f"vocabulary-{dataset}.model")
    path = corpus_path(dataset, args.split)
    source = "bundled sample" if path.startswith(SAMPLE_ROOT) else "shared corpus"
    if not os.path.exists(subset):
        _subset(path, args.max_examples, subset)
        examples = list(itertools.islice(read_examples(subset, skip_invalid=True),
                                         args.vocabulary_examples))
        Vocabulary.train(sentences(examples), vocabulary_size=args.vocabulary_size).save(vocab)
    return subset, source, vocab, Vocabulary.load(vocab)


def measure_recipe(name, args, folder, paper_flops, written):
    from keras_hsum import recipes

    recipe = recipes.get(name)
    tiny = recipes.config(name, "tiny")
    paper = recipes.config(name, "paper") if "paper" in recipe.CONFIGS else None
    corpus, source, _, vocabulary = _recipe_corpus(recipe, args, folder)
    examples = sum(1 for _ in read_examples(corpus, skip_invalid=True))
    skip = max(1, examples // tiny.batch_size)  # one pass
    batches = args.epochs * skip
    print(f"{name}: {recipe.DEFAULT_DATASET} ({source}), first {examples} examples, "
          f"{batches} timed batches of {tiny.batch_size}")
    row = {
        "recipe": name, "dataset": recipe.DEFAULT_DATASET, "source": source,
        "examples": examples, "batch_size": tiny.batch_size,
        "train": _training_rate(recipe, tiny, corpus, vocabulary, args),
        "pipeline": _pipeline_rates(recipe, tiny, corpus, vocabulary, batches, "pipeline/tiny",
                                    skip),
    }
    if not args.no_shards:
        row["shards"] = _shard_rates(name, "tiny", recipe, tiny, vocabulary, folder, batches,
                                     written)
    step = row["train"]["steps_per_s"]
    row["pipeline_ratio"] = row["pipeline"]["all_cores"]["batches_per_s"] / step
    shards = row.get("shards") or {}
    row["shards_ratio"] = shards["all_cores"]["batches_per_s"] / step if "all_cores" in shards else None
    if paper is not None and not args.no_paper:
        # The paper config's structure, batched as the tiny one (examples/s
        # is what the projection needs) and with the tiny vocabulary.
        paper_small = paper.replace(batch_size=tiny.batch_size)
        row["paper"] = {
            "batch_size": paper.batch_size,
            "pipeline": _pipeline_rates(recipe, paper_small, corpus, vocabulary, batches,
                                        "pipeline/paper", skip),
        }
        if not args.no_shards:
            row["paper"]["shards"] = _shard_rates(
                name, "paper", recipe, paper_small, vocabulary, folder, batches, written
            )
        row["paper"]["projection"] = _projection(row["paper"], paper_flops.get(name))
    return row


def _projected_host_rate(rates):
    """Examples/s on a HOST_CORES-core host: one thread's rate × HOST_CORES ×
    the per-core efficiency measured on this machine's 2 cores (scaling / 2)."""
    if not rates or "one_thread" not in rates:
        return None
    efficiency = min(1.0, rates["two_core_scaling"] / 2)
    return rates["one_thread"]["examples_per_s"] * HOST_CORES * efficiency


def _projection(paper, flops):
    if not flops:
        return None
    step_flops = flops["flops_per_example"] * paper["batch_size"]
    steps = ASSUMED_MFU * H100_PEAK_FLOPS / step_flops
    needed = steps * paper["batch_size"]
    pipeline_rate = _projected_host_rate(paper["pipeline"])
    shards_rate = _projected_host_rate(paper.get("shards"))
    return {
        "flops_per_step": step_flops, "flops_method": flops["method"],
        "h100_steps_per_s": steps, "examples_per_s_needed": needed,
        "pipeline_host_examples_per_s": pipeline_rate,
        "pipeline_keeps_up": pipeline_rate >= needed,
        "shards_host_examples_per_s": shards_rate,
        "shards_keep_up": None if shards_rate is None else shards_rate >= needed,
    }


# --paper-flops: FLOPs of one training step of each paper config (a child
# process under KERAS_BACKEND=jax, as benchmarks/train_throughput.py counts).


def _discourse_forward_flops(config):
    """Forward multiply-adds ×2 of DiscourseSummarizer per example, counted by
    hand: XLA's cost analysis counts one iteration of each LSTM scan."""
    P, T, S = config.max_sections, config.max_section_length, config.max_target_length
    D, E, V = config.hidden_dim, config.embedding_dim, config.vocabulary_size
    words = P * T
    lstm = lambda inputs, units: 2 * 4 * units * (inputs + units)  # noqa: E731
    encoder = (
        2 * words * lstm(E, D)  # word-level BiLSTM
        + words * 2 * 2 * D * D  # word_reduce
        + 2 * P * lstm(D, D) + P * 2 * 2 * D * D  # section BiLSTM and reduce
        + (words + P) * 2 * D * D  # attention keys of words and sections
    )
    step = (
        lstm(E + D, D)  # decoder cell on [x; context]
        + 2 * 2 * D * D  # attention queries (words, sections)
        + words * 5 * D + P * 5 * D  # additive scores (add, tanh, v·) and context
        + 2 * 2 * D * D  # output projection V [h; c]
        + 2 * D * V + 5 * V  # vocabulary projection and softmax
    )
    return encoder + S * step


def _flops_child(args):
    """Child (KERAS_BACKEND=jax): training-step FLOPs of one paper example."""
    import jax

    from keras_hsum import recipes
    from keras_hsum.training.model_setup import recipe_loss

    recipe = recipes.get(args.flops_child)
    config = recipes.config(args.flops_child, "paper")
    vocabulary = Vocabulary.load(args.flops_vocabulary)
    keras.utils.set_random_seed(0)
    dataset = recipe.make_dataset(
        config.replace(batch_size=1), args.flops_corpus, vocabulary, training=True,
        max_examples=4,
    )
    x, y, w = (
        {k: np.asarray(v) for k, v in part.items()} if isinstance(part, dict) else np.asarray(part)
        for part in next(iter(dataset))
    )
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
    lowered = jax.jit(jax.value_and_grad(loss_fn)).lower(trainable, non_trainable, x, y, w)
    analysis = lowered.cost_analysis()
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0]
    row = {
        "recipe": args.flops_child, "parameters": int(model.count_params()),
        "input_shapes": {k: list(v.shape) for k, v in x.items()},
        "xla_flops_per_example": float(analysis["flops"]),
        "flops_per_example": float(analysis["flops"]),
        "method": "XLA cost analysis of jax.value_and_grad of the recipe loss (batch 1)",
    }
    if args.flops_child == "discourse":
        row["flops_per_example"] = 3.0 * _discourse_forward_flops(config)
        row["method"] = ("by hand: 3 x forward (LSTM cells, attention, projections); "
                         "XLA counts one iteration of each LSTM scan")
    print(json.dumps(row))


def measure_paper_flops(args, folder):
    import subprocess

    from keras_hsum import recipes

    rows = {}
    for name in args.recipes:
        recipe = recipes.get(name)
        if "paper" not in recipe.CONFIGS:
            continue
        corpus, _, vocab, _ = _recipe_corpus(recipe, args, folder)
        env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
        command = [sys.executable, os.path.abspath(__file__), "--flops-child", name,
                   "--flops-corpus", corpus, "--flops-vocabulary", vocab]
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            rows[name] = {"error": done.stderr.strip().splitlines()[-3:]}
        else:
            rows[name] = json.loads(lines[-1])
        rows[name]["seconds"] = time.perf_counter() - started
        print(name, json.dumps(rows[name])[:300])
    return rows


def _load_paper_flops():
    try:
        with open(PAPER_FLOPS_STEM + ".json", encoding="utf-8") as handle:
            return json.load(handle)
    except OSError:
        return None


def _fmt(value, spec=".1f"):
    return "n/a" if value is None else format(value, spec)


def _yes(value):
    return "n/a" if value is None else ("yes" if value else "no")


def markdown(result):
    """The results as markdown: the tiny recipes' ratios, then the projection."""
    lines = [
        f"# Data pipeline vs training step, per tiny recipe ({result['date']}"
        f"{', quick' if result['quick'] else ''})",
        "",
        f"One run on a shared {result['machine']['cpus']}-CPU machine (other developers ran "
        f"tests on it at the same time: compare the ratios, measured in the same run, not "
        f"the absolute rates); TensorFlow {result['machine']['tensorflow']}. Each recipe "
        f"reads the first {result['max_examples']} records of its default training corpus "
        f"with a {result['vocabulary_size']}-piece SentencePiece vocabulary trained on its "
        "first examples. Train: `train_on_batch` steps/s of the tiny recipe's model built "
        "and compiled as the trainer does (`build_compiled_model`), on real batches of its "
        f"`make_dataset`, after {result['warmup_steps']} warm-up steps. Pipeline: the "
        "recipe's training `make_dataset` (shuffled, repeated, uncached: every batch "
        f"structured from text), {result['epochs']} passes timed after one untimed pass "
        "(start-up, tracing). Shards: the same make_dataset reading the shards "
        "`keras-hsum preprocess` wrote from the same records (1 worker, 2 shards), "
        f"{8 * result['epochs']} passes timed. 1 thread: `private_threadpool_size=1`, "
        "`max_intra_op_parallelism=1`. Targets: pipeline ÷ step ≥ 10×, shards ÷ step ≥ 50×.",
        "",
        "| recipe | corpus | examples | batch | params | train steps/s | pipeline batches/s "
        "| pipeline ÷ step | 1 thread ex/s | all cores ex/s | 2 cores ÷ 1 | shards batches/s "
        "| shards ÷ step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        pipeline, shards = row["pipeline"], row.get("shards") or {}
        shards_cell = (f"{shards['all_cores']['batches_per_s']:.1f}" if "all_cores" in shards
                       else "n/a" + (" (recipe not preprocessable)" if "skipped" in shards else ""))
        lines.append(
            f"| {row['recipe']} | {row['dataset']} ({row['source']}) | {row['examples']} | "
            f"{row['batch_size']} | {row['train']['parameters']:,} | "
            f"{row['train']['steps_per_s']:.2f} | {pipeline['all_cores']['batches_per_s']:.2f} | "
            f"**{row['pipeline_ratio']:.1f}×** | {pipeline['one_thread']['examples_per_s']:.1f} | "
            f"{pipeline['all_cores']['examples_per_s']:.1f} | {pipeline['two_core_scaling']:.2f}× | "
            f"{shards_cell} | **{_fmt(row['shards_ratio'])}{'×' if row['shards_ratio'] else ''}** |"
        )
    lines += [
        "",
        "## Paper configs on one H100 (projection)",
        "",
        f"FLOPs of one training step: {result.get('flops_note', 'not counted')}. Projected "
        f"steps/s = {ASSUMED_MFU:.0%} (assumed MFU) × {H100_PEAK_FLOPS / 1e12:.1f} TFLOP/s "
        "(H100 SXM dense bf16 peak) ÷ FLOPs per step; examples/s needed = that × the paper "
        f"batch. Host rate on {HOST_CORES} cores = the paper config's 1-thread examples/s "
        f"measured here × {HOST_CORES} × (2-core scaling measured here ÷ 2), i.e. the "
        "per-core efficiency of this machine's second core is assumed for every core. "
        "The paper structure is measured with the tiny vocabulary and batch 8.",
        "",
        "| recipe | paper batch | train-step TFLOP | H100 steps/s | examples/s needed "
        "| pipeline 1 thread ex/s | 2 cores ÷ 1 | pipeline, 16 cores ex/s | keeps up "
        "| shards 1 thread ex/s | shards, 16 cores ex/s | shards keep up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        paper = row.get("paper")
        if not paper or not paper.get("projection"):
            lines.append(f"| {row['recipe']} | n/a |" + " |" * 10)
            continue
        projection = paper["projection"]
        shards = paper.get("shards") or {}
        lines.append(
            f"| {row['recipe']} | {paper['batch_size']} | "
            f"{projection['flops_per_step'] / 1e12:.2f} | {projection['h100_steps_per_s']:.1f} | "
            f"{projection['examples_per_s_needed']:,.0f} | "
            f"{paper['pipeline']['one_thread']['examples_per_s']:.1f} | "
            f"{paper['pipeline']['two_core_scaling']:.2f}× | "
            f"{projection['pipeline_host_examples_per_s']:,.0f} | "
            f"**{_yes(projection['pipeline_keeps_up'])}** | "
            f"{_fmt(shards.get('one_thread', {}).get('examples_per_s'))} | "
            f"{_fmt(projection['shards_host_examples_per_s'], ',.0f')} | "
            f"**{_yes(projection['shards_keep_up'])}** |"
        )
    if result.get("notes"):
        lines += [""] + [f"- {note}" for note in result["notes"]]
    return "\n".join(lines)


# --structurer: request sizes (bytes of one document) and the recipes whose
# structure options are timed (one per family they serve).
STRUCTURER_SIZES = (100_000, 300_000, 1_000_000)
STRUCTURER_RECIPES = ("pht", "seal", "discourse", "shte", "flat")


def _size_label(size):
    return f"{size // 1_000_000} MB" if size >= 1_000_000 else f"{size // 1000} KB"


def _one_paragraph(sentences, size):
    """Sentences joined by single spaces (no blank line), cut to `size`
    bytes at a space: one paragraph."""
    text, total, i = [], 0, 0
    while total < size:
        sentence = sentences[i % len(sentences)]
        text.append(sentence)
        total += len(sentence.encode("utf-8")) + 1
        i += 1
    joined = " ".join(text).encode("utf-8")[:size]
    return joined[: joined.rfind(b" ")].decode("utf-8")


def _as_paragraphs(text, every=1000):
    """`text` with a blank line after the first space past every `every` bytes."""
    pieces, start = [], 0
    while start < len(text):
        cut = text.find(" ", start + every)
        cut = len(text) if cut < 0 else cut
        pieces.append(text[start:cut].strip())
        start = cut + 1
    return "\n\n".join(p for p in pieces if p)


def measure_structurer(args):
    """Seconds of `TextStructurer` per one-paragraph document size, per recipe.

    The structurer is traced once on a short request first; each size is
    timed `args.structurer_repeats` times and the fastest run kept.
    """
    from keras_hsum import recipes
    from keras_hsum.data.corpora import sample_path
    from keras_hsum.data.corpora import sample_tokenizer_path
    from keras_hsum.data.structurer import TextStructurer

    vocabulary = Vocabulary.load(sample_tokenizer_path())
    examples = read_examples(sample_path("qmsum_general", "train"))
    sentences = [s for example in examples for s in example.sentences()]
    texts = {size: _one_paragraph(sentences, size) for size in STRUCTURER_SIZES}
    largest = max(STRUCTURER_SIZES)
    rows = []
    for name in args.structurer_recipes:
        options = recipes.get(name).structure_options(recipes.config(name, "tiny"))
        structurer = TextStructurer(vocabulary.proto, **options)
        structurer(tf.constant([["Warm up. It traces the graph."]]))

        def seconds(text):
            best = math.inf
            for _ in range(args.structurer_repeats):
                start = time.perf_counter()
                structurer(tf.constant([[text]]))["tokens"].numpy()
                best = min(best, time.perf_counter() - start)
            return best

        times = {size: seconds(text) for size, text in texts.items()}
        paragraphs = seconds(_as_paragraphs(texts[largest]))
        row = {
            "recipe": name,
            "family": options["family"],
            "max_units": options.get("max_units"),
            "max_tokens": options["max_tokens"],
            "seconds": {str(size): t for size, t in times.items()},
            "ratio": times[largest] / times[min(STRUCTURER_SIZES)],
            "paragraphs_seconds": paragraphs,
        }
        rows.append(row)
        print(
            f"  {name:<10} {options['family']:<10} "
            + " ".join(f"{_size_label(size):>6} {t:6.3f} s" for size, t in times.items())
            + f" | 1 MB / 100 KB = {row['ratio']:.1f}x (target <= 15x) | "
            f"1 MB in ~1 KB paragraphs {paragraphs:.3f} s"
        )
    return rows


def structurer_markdown(result):
    """The --structurer results as a markdown table (one row per recipe)."""
    sizes = [str(size) for size in STRUCTURER_SIZES]
    lines = [
        f"# In-graph TextStructurer on one paragraph ({result['date']})",
        "",
        "One document without a blank line (bundled qmsum_general text joined "
        "by spaces), batch 1, best of "
        f"{result['repeats']} runs after a warm-up call; {result['machine']['cpus']} "
        f"CPUs, TensorFlow {result['machine']['tensorflow']}. Ratio = time(1 MB) / "
        "time(100 KB): 10 is linear, target <= 15. Last column: the same 1 MB "
        "cut into ~1 KB paragraphs.",
        "",
        "| recipe | family | "
        + " | ".join(f"{_size_label(int(s))} s" for s in sizes)
        + " | 1 MB / 100 KB | 1 MB in paragraphs s |",
        "|---|---|" + "---|" * (len(sizes) + 2),
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['recipe']} | {row['family']} | "
            + " | ".join(f"{row['seconds'][s]:.3f}" for s in sizes)
            + f" | {row['ratio']:.1f}x | {row['paragraphs_seconds']:.3f} |"
        )
    return "\n".join(lines)


SHARDS_RECIPE = ("pht", "tiny")
SCALE_CORPUS = ("qmsum_goldspan", "train")


def _preprocess_command(corpus, out, vocab, workers, num_shards, split="train",
                        recipe=SHARDS_RECIPE[0], config=SHARDS_RECIPE[1]):
    return [
        sys.executable, "-m", "keras_hsum.cli", "preprocess", "--recipe", recipe,
        "--config", config, "--data", corpus, "--out", out, "--vocab", vocab,
        "--split", split, "--num-shards", str(num_shards),
        "--direct-num-workers", str(workers),
    ]


def _run_measured(command):
    """Runs `command`; returns (wall seconds, peak RSS of its process tree
    in MiB, peak RSS of its largest process in MiB, stdout)."""
    import subprocess

    import psutil

    import tempfile

    errors = tempfile.TemporaryFile(mode="w+")
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
    root = psutil.Process(process.pid)
    peak_tree = peak_one = 0
    while process.poll() is None:
        try:
            tree = [root] + root.children(recursive=True)
            sizes = []
            for member in tree:
                try:
                    sizes.append(member.memory_info().rss)
                except psutil.Error:
                    pass
            peak_tree = max(peak_tree, sum(sizes))
            peak_one = max(peak_one, max(sizes, default=0))
        except psutil.Error:
            pass
        time.sleep(0.2)
    output = process.stdout.read()
    if process.returncode:
        errors.seek(0)
        raise RuntimeError(
            f"{' '.join(command)} failed ({process.returncode}): {output}\n"
            + errors.read()[-3000:]
        )
    return time.perf_counter() - started, peak_tree / 2**20, peak_one / 2**20, output


def _vocabulary_file(folder):
    from keras_hsum.data.corpora import sample_path

    path = os.path.join(folder, "vocab.model")
    examples = list(read_examples(sample_path(*SCALE_CORPUS)))
    Vocabulary.train(corpus_sentences(examples), vocabulary_size=4000).save(path)
    return path


def measure_shards(args):
    """Examples/s of a recipe's make_dataset on JSONL (cold) vs on shards."""
    import subprocess
    import tempfile

    from keras_hsum import recipes
    from keras_hsum.data.corpora import sample_path

    recipe_name, config_name = SHARDS_RECIPE
    recipe = recipes.get(recipe_name)
    config = recipes.config(recipe_name, config_name)
    with tempfile.TemporaryDirectory() as folder:
        corpus = sample_path(*SCALE_CORPUS)
        vocab = _vocabulary_file(folder)
        vocabulary = Vocabulary.load(vocab)
        out = os.path.join(folder, "shards")
        subprocess.run(_preprocess_command(corpus, out, vocab, 1, 2, split="val"),
                       check=True, capture_output=True)
        rows = []
        for label, source in (("make_dataset (JSONL, cold)", corpus), ("read_shards", out)):
            for repeat in range(args.shards_repeats):
                started = time.perf_counter()
                count = 0
                for inputs, _, _ in recipe.make_dataset(config, source, vocabulary, training=False):
                    count += int(inputs["tokens"].shape[0])
                seconds = time.perf_counter() - started
                rows.append({"pipeline": label, "repeat": repeat, "examples": count,
                             "seconds": seconds, "examples_per_second": count / seconds})
                print(f"{label}: {count} examples in {seconds:.2f} s "
                      f"({count / seconds:.0f} examples/s)")
    return rows


def shards_markdown(result):
    lines = [
        f"# Reading shards vs the in-process pipeline ({result['recipe']}, "
        f"{result['corpus']}, batch {result['batch_size']}, one pass, {result['date']})",
        "",
        "| pipeline | repeat | examples | seconds | examples/s |",
        "|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['pipeline']} | {row['repeat']} | {row['examples']} | "
            f"{row['seconds']:.2f} | {row['examples_per_second']:.0f} |"
        )
    best = {}
    for row in result["rows"]:
        best[row["pipeline"]] = max(best.get(row["pipeline"], 0), row["examples_per_second"])
    values = list(best.values())
    if len(values) == 2 and values[0]:
        lines += ["", f"read_shards / make_dataset (best of each): {values[1] / values[0]:.1f}x"]
    return "\n".join(lines)


def _synthetic_corpus(path, size):
    """`size` documents: the bundled examples repeated, each with a new id."""
    from keras_hsum.data.corpora import sample_path
    import gzip

    with gzip.open(sample_path(*SCALE_CORPUS), "rt", encoding="utf-8") as file:
        records = [json.loads(line) for line in file if line.strip()]
    with open(path, "w", encoding="utf-8") as file:
        for index in range(size):
            record = dict(records[index % len(records)])
            record["id"] = f"synthetic-{index:07d}-{record['id']}"
            file.write(json.dumps(record) + "\n")


def measure_corpus_scale(args):
    import shutil
    import tempfile

    from keras_hsum.data import shards

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        vocab = _vocabulary_file(folder)
        for size in args.corpus_scale:
            corpus = os.path.join(folder, f"corpus-{size}.jsonl")
            _synthetic_corpus(corpus, size)
            for workers in args.scale_workers:
                out = os.path.join(folder, f"shards-{size}-{workers}")
                seconds, tree_mib, one_mib, _ = _run_measured(
                    _preprocess_command(corpus, out, vocab, workers, args.scale_shards)
                )
                spec = shards.read_spec(out)
                counted = shards.verify_shards(out)
                row = {
                    "documents": size, "workers": workers, "shards": len(spec["shards"]),
                    "wall_seconds": seconds, "documents_per_second": size / seconds,
                    "peak_rss_tree_mib": tree_mib, "peak_rss_largest_process_mib": one_mib,
                    "examples_written": spec["examples"], "examples_in_shards": counted,
                    "skipped": spec["skipped"],
                    "exact": counted == spec["examples"]
                    and spec["examples"] + sum(spec["skipped"].values()) == size,
                }
                rows.append(row)
                print(json.dumps(row))
                shutil.rmtree(out)
            os.remove(corpus)
    return rows


def merge_corpus_scale(result, path):
    """Adds to `result` the rows of the results file `path` whose (documents,
    workers) this run did not measure, and that file's notes; rows sorted by
    size and workers."""
    try:
        with open(path, encoding="utf-8") as handle:
            earlier = json.load(handle)
    except OSError:
        return result
    measured = {(row["documents"], row["workers"]) for row in result["rows"]}
    kept = [
        dict(row, date=row.get("date", earlier["date"]))
        for row in earlier["rows"]
        if (row["documents"], row["workers"]) not in measured
    ]
    result["rows"] = sorted(kept + result["rows"], key=lambda r: (r["documents"], r["workers"]))
    result["notes"] = list(earlier.get("notes", ())) + list(result.get("notes", ()))
    return result


def corpus_scale_markdown(result):
    lines = [
        f"# keras-hsum preprocess at corpus scale ({result['recipe']}, synthetic corpus: "
        f"bundled {result['corpus']} repeated with new ids, DirectRunner, {result['date']})",
        "",
        "| documents | workers | shards | wall s | documents/s | peak RSS, process tree (MiB) "
        "| peak RSS, largest process (MiB) | examples in shards | skipped | exact | run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['documents']:,} | {row['workers']} | {row['shards']} | "
            f"{row['wall_seconds']:.1f} | {row['documents_per_second']:.1f} | "
            f"{row['peak_rss_tree_mib']:.0f} | {row['peak_rss_largest_process_mib']:.0f} | "
            f"{row['examples_in_shards']:,} | {sum(row['skipped'].values())} | {row['exact']} | "
            f"{row.get('date', result['date'])} |"
        )
    lines += ["", f"Machine: {result['machine']['cpus']} CPUs, {result['machine']['platform']}."]
    lines += [""] + [f"- {note}" for note in result.get("notes", ())] if result.get("notes") else []
    return "\n".join(lines)


def _write(stem, result, table):
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    with open(stem + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    with open(stem + ".md", "w", encoding="utf-8") as handle:
        handle.write(table + "\n")
    print(f"\nWrote {stem}.json and {stem}.md ({result['total_seconds']:.0f} s).")


def _machine():
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--split", default="train")
    parser.add_argument(
        "--max-examples", type=int, default=64,
        help="first N records of each recipe's default corpus",
    )
    parser.add_argument("--epochs", type=int, default=2, help="passes over them timed per pipeline")
    parser.add_argument("--vocabulary-size", type=int, default=4000, help="the tiny configs' size")
    parser.add_argument("--vocabulary-examples", type=int, default=50)
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--train-batches", type=int, default=4)
    parser.add_argument("--warmup-steps", type=int, default=2, help="untimed first steps (tracing)")
    parser.add_argument("--no-shards", action="store_true", help="skip preprocess and shards")
    parser.add_argument("--no-paper", action="store_true", help="skip the paper-config columns")
    parser.add_argument(
        "--paper-flops", action="store_true",
        help="count the paper configs' training-step FLOPs (JAX children) and write "
        "data_pipeline_paper_flops.json, which the default mode reads",
    )
    parser.add_argument("--flops-child", help=argparse.SUPPRESS)
    parser.add_argument("--flops-corpus", help=argparse.SUPPRESS)
    parser.add_argument("--flops-vocabulary", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="pht only, 16 examples, 2 steps")
    parser.add_argument("--output", default=None, help="results file stem (no extension)")
    parser.add_argument(
        "--structurer", action="store_true",
        help="time the in-graph TextStructurer on one-paragraph documents of "
        "100 KB, 300 KB and 1 MB instead",
    )
    parser.add_argument("--structurer-recipes", nargs="+", default=list(STRUCTURER_RECIPES))
    parser.add_argument("--structurer-repeats", type=int, default=2)
    parser.add_argument(
        "--shards", action="store_true",
        help="examples/s of make_dataset on JSONL vs on shards written by preprocess",
    )
    parser.add_argument("--shards-repeats", type=int, default=2)
    parser.add_argument(
        "--corpus-scale", type=int, nargs="+", default=None, metavar="N",
        help="preprocess synthetic corpora of N documents: wall time, peak memory, counts",
    )
    parser.add_argument("--scale-workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--merge", action="store_true",
        help="--corpus-scale: keep the earlier results file's rows of other sizes and "
        "worker counts (each row names its run's date)",
    )
    parser.add_argument("--scale-shards", type=int, default=4)
    args = parser.parse_args(argv)
    if args.shards or args.corpus_scale:
        started = time.perf_counter()
        result = {
            "benchmark": "data_pipeline --shards" if args.shards else "data_pipeline --corpus-scale",
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "recipe": "/".join(SHARDS_RECIPE),
            "corpus": "/".join(SCALE_CORPUS),
            "batch_size": 8,
            "machine": _machine(),
        }
        if args.shards:
            result["rows"] = measure_shards(args)
            table, stem = shards_markdown(result), "data_pipeline_shards"
        else:
            result["rows"] = measure_corpus_scale(args)
            for row in result["rows"]:
                row["date"] = result["date"]
            stem = "data_pipeline_corpus_scale"
            if args.merge:
                merge_corpus_scale(result, os.path.join(RESULTS, stem + ".json"))
            table = corpus_scale_markdown(result)
        result["total_seconds"] = time.perf_counter() - started
        print()
        print(table)
        _write(args.output or os.path.join(RESULTS, stem), result, table)
        return result
    if args.structurer:
        started = time.perf_counter()
        result = {
            "benchmark": "data_pipeline --structurer",
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "repeats": args.structurer_repeats,
            "sizes": list(STRUCTURER_SIZES),
            "machine": _machine(),
            "rows": measure_structurer(args),
        }
        result["total_seconds"] = time.perf_counter() - started
        table = structurer_markdown(result)
        print()
        print(table)
        _write(args.output or os.path.join(RESULTS, "data_pipeline_structurer"), result, table)
        return result
    if args.flops_child:
        return _flops_child(args)
    if args.paper_flops:
        import tempfile

        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            rows = measure_paper_flops(args, folder)
        result = {
            "benchmark": "data_pipeline --paper-flops",
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": _machine(), "rows": rows,
            "total_seconds": time.perf_counter() - started,
        }
        table = "\n".join(
            ["# Training-step FLOPs per example of the paper configs "
             f"({result['date']})", "", "| recipe | parameters | GFLOP per example | method |",
             "|---|---|---|---|"]
            + [f"| {name} | {row.get('parameters', 0):,} | "
               f"{row.get('flops_per_example', float('nan')) / 1e9:.1f} | "
               f"{row.get('method', row.get('error'))} |" for name, row in rows.items()]
        )
        print(table)
        _write(args.output or PAPER_FLOPS_STEM, result, table)
        return result
    if args.quick:
        args.recipes = ["pht"]
        args.max_examples = 16
        args.train_steps = 2
        args.train_batches = 1
        args.warmup_steps = 1
        args.vocabulary_examples = 16
    stem = args.output or os.path.join(RESULTS, "data_pipeline" + ("_quick" if args.quick else ""))
    flops = _load_paper_flops()
    paper_flops = {
        name: row for name, row in ((flops or {}).get("rows") or {}).items() if "error" not in row
    }
    import tempfile

    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        written = {} if args.no_shards else write_shards(args, folder)
        for name in args.recipes:
            begun = time.perf_counter()
            rows.append(measure_recipe(name, args, folder, paper_flops, written))
            rows[-1]["seconds"] = time.perf_counter() - begun
            print(json.dumps({k: rows[-1][k] for k in ("recipe", "pipeline_ratio", "shards_ratio")}))
    result = {
        "benchmark": "data_pipeline",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "quick": args.quick,
        "max_examples": args.max_examples,
        "epochs": args.epochs,
        "vocabulary_size": args.vocabulary_size,
        "warmup_steps": args.warmup_steps,
        "train_steps": args.train_steps,
        "machine": _machine(),
        "shared_machine": "other developers ran tests on the same 2 cores during the run",
        "assumptions": {
            "h100_peak_flops": H100_PEAK_FLOPS, "mfu": ASSUMED_MFU, "host_cores": HOST_CORES,
        },
        "flops_note": (
            f"{flops['rows'][next(iter(paper_flops))]['method'] if paper_flops else ''}, "
            f"from {os.path.basename(PAPER_FLOPS_STEM)}.json ({flops['date']}); discourse "
            "by hand (XLA counts one iteration of its LSTM scans); ×paper batch"
        ) if paper_flops else "not counted (run --paper-flops first)",
        "rows": rows,
        "total_seconds": time.perf_counter() - started,
    }
    table = markdown(result)
    print()
    print(table)
    _write(stem, result, table)
    return result

if __name__ == "__main__":
    main()
