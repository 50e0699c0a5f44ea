"""Throughput of the tf.data pipelines, and how it compares to training.

For each corpus (default: qmsum_general, ~10k-word meetings, and
scisummnet, ~4.5k-word papers; the full shared corpora when present, else
the bundled sample), each limit setting and each family, this runs the
whole pipeline of `keras_hsum.data.pipeline.make_dataset` (read → structure
→ target → padded tf.data batches, iterated to the end) and reports
examples/s, source tokens/s (real tokens in the batches) and batches/s, for
a first pass and for a second epoch read from `cache=True`.

Target (the issue): "the pipeline is never the bottleneck, at least 10× the
training-step rate of the tiny recipes that will use it". The recipes do not
exist yet, so the same run times a STAND-IN tiny model on the same batches:
an HT-like encoder-decoder, width 64, 2 heads, 2 local
`keras_hub.layers.TransformerEncoder` layers over tokens reshaped to
[B·P,T,D] (over [B,N,D] for `flat`), one `keras_hub.layers.TransformerDecoder`
layer that cross-attends the flattened token memory, and a Dense(V) head;
compiled with Adam and stepped with `train_on_batch`. The ratio is pipeline
batches/s ÷ training steps/s. Replace the stand-in by the tiny recipes once
they exist.

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
    python benchmarks/data_pipeline.py --quick          # smoke test, < 1 min
    python benchmarks/data_pipeline.py                  # full corpora
    python benchmarks/data_pipeline.py --datasets scisummnet --max-examples 100
    python benchmarks/data_pipeline.py --structurer     # ~1 min
    python benchmarks/data_pipeline.py --shards         # ~1 min
    python benchmarks/data_pipeline.py --corpus-scale 2000 8000

Writes `benchmarks/results/data_pipeline[_quick].json` and `.md`
(`data_pipeline_structurer.json` and `.md` with `--structurer`).
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
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tqdm import tqdm  # noqa: E402

from keras_hsum.data import pipeline  # noqa: E402
from keras_hsum.data.corpora import SAMPLE_ROOT  # noqa: E402
from keras_hsum.data.corpora import corpus_path  # noqa: E402
from keras_hsum.data.reader import read_examples  # noqa: E402
from keras_hsum.data.vocabulary import Vocabulary  # noqa: E402
from keras_hsum.data.vocabulary import corpus_sentences  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# Limits: "tiny" as the tiny recipes will use them, "paper" as in HT
# (Liu & Lapata 2019: 30 paragraphs of 100 tokens). `flat_tokens` is N of the
# FlatTransformer baseline (HT's FT reads 1,600 tokens).
SETTINGS = {
    "tiny": {"max_units": 16, "max_tokens": 64, "flat_tokens": 1024, "max_target_length": 128},
    "paper": {"max_units": 30, "max_tokens": 100, "flat_tokens": 1600, "max_target_length": 128},
}
# Variants measured: (label, family, extras).
VARIANTS = (
    ("paragraphs", "paragraphs", ()),
    ("paragraphs+ranker_targets", "paragraphs", (pipeline.ranker_targets,)),
    ("sections", "sections", ()),
    ("snippets", "snippets", ()),
    ("sentences", "sentences", ()),
    ("flat", "flat", ()),
)


class StandInSummarizer(keras.Model):
    """A stand-in tiny hierarchical encoder-decoder (until recipes exist).

    Local encoder layers run on tokens [B·P,T,D] (hierarchical families) or
    [B,N,D] (`flat`); one decoder layer cross-attends the flattened token
    memory [B,P·T,D]; a Dense head gives logits [B,S-1,V].
    """

    def __init__(self, vocabulary_size, hierarchical, width=64, heads=2, layers=2, **kwargs):
        super().__init__(**kwargs)
        self.hierarchical = hierarchical
        self.width = width
        self.embedding = keras.layers.Embedding(vocabulary_size, width)
        self.encoders = [
            keras_hub.layers.TransformerEncoder(intermediate_dim=2 * width, num_heads=heads)
            for _ in range(layers)
        ]
        self.target_embedding = keras.layers.Embedding(vocabulary_size, width)
        self.decoder = keras_hub.layers.TransformerDecoder(
            intermediate_dim=2 * width, num_heads=heads
        )
        self.head = keras.layers.Dense(vocabulary_size)

    def call(self, inputs):
        tokens, token_mask = inputs["tokens"], inputs["token_mask"]
        if self.hierarchical:
            _, rows, length = tokens.shape
            x = self.embedding(keras.ops.reshape(tokens, (-1, length)))
            mask = keras.ops.reshape(token_mask, (-1, length))
        else:
            x, mask = self.embedding(tokens), token_mask
        for encoder in self.encoders:
            x = encoder(x, padding_mask=mask)
        if self.hierarchical:
            x = keras.ops.reshape(x, (-1, rows * length, self.width))
            mask = keras.ops.reshape(token_mask, (-1, rows * length))
        y = self.target_embedding(inputs["decoder_tokens"])
        y = self.decoder(
            y,
            x,
            decoder_padding_mask=inputs["target_mask"],
            encoder_padding_mask=mask,
        )
        return self.head(y)


def _limits(family, setting):
    limits = SETTINGS[setting]
    if family == "flat":
        return {"max_tokens": limits["flat_tokens"]}
    return {"max_units": limits["max_units"], "max_tokens": limits["max_tokens"]}


def _dataset(path, vocabulary, family, extras, setting, args, report=None, cache=None):
    return pipeline.make_dataset(
        path,
        vocabulary,
        family,
        batch_size=args.batch_size,
        max_target_length=SETTINGS[setting]["max_target_length"],
        extras=extras,
        pad_to_max=True,
        report=report,
        cache=cache,
        max_examples=args.max_examples,
        **_limits(family, setting),
    )


def _iterate(dataset, description, total):
    """Iterates a dataset to the end; returns (seconds, batches, examples, tokens)."""
    batches = examples = tokens = 0
    start = time.perf_counter()
    for batch in tqdm(dataset, desc=description, total=total, unit="batch", leave=False):
        batches += 1
        examples += int(batch["tokens"].shape[0])
        tokens += int(tf.math.count_nonzero(batch["token_mask"]))
    return time.perf_counter() - start, batches, examples, tokens


def measure_pipeline(path, vocabulary, label, family, extras, setting, args, num_examples):
    """Times a first pass and a cached second epoch of one pipeline."""
    report = pipeline.PipelineReport()
    dataset = _dataset(path, vocabulary, family, extras, setting, args, report, cache=True)
    total = math.ceil(num_examples / args.batch_size)
    seconds, batches, examples, tokens = _iterate(dataset, f"{label}/{setting}", total)
    cached_seconds, *_ = _iterate(dataset, f"{label}/{setting} (cached)", total)
    return {
        "variant": label,
        "family": family,
        "setting": setting,
        "limits": _limits(family, setting),
        "examples": examples,
        "batches": batches,
        "source_tokens": tokens,
        "seconds": seconds,
        "examples_per_s": examples / seconds,
        "tokens_per_s": tokens / seconds,
        "batches_per_s": batches / seconds,
        "cached_batches_per_s": batches / cached_seconds,
        "skipped": report.skipped,
    }


def warm_up(path, vocabulary, args):
    """Runs every variant over one batch, so that one-time costs (tf.data
    and py_function start-up, first tokenisation) are not timed."""
    for _, family, extras in VARIANTS:
        dataset = pipeline.make_dataset(
            path,
            vocabulary,
            family,
            batch_size=2,
            max_target_length=16,
            extras=extras,
            pad_to_max=True,
            max_examples=2,
            **_limits(family, "tiny"),
        )
        for _ in dataset:
            pass


def measure_training(path, vocabulary, family, setting, args):
    """Training steps/s of the stand-in model on this pipeline's batches."""
    dataset = pipeline.training_pairs(
        _dataset(path, vocabulary, family, (), setting, args), vocabulary.pad_id
    )
    batches = list(dataset.take(args.train_batches))
    keras.utils.set_random_seed(0)
    model = StandInSummarizer(vocabulary.vocabulary_size, hierarchical=family != "flat")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    for inputs, labels, weights in batches[:1] * args.warmup_steps:
        model.train_on_batch(inputs, labels, sample_weight=weights)
    start = time.perf_counter()
    steps = itertools.islice(itertools.cycle(batches), args.train_steps)
    for inputs, labels, weights in tqdm(
        steps, desc=f"train stand-in {family}/{setting}", total=args.train_steps, leave=False
    ):
        model.train_on_batch(inputs, labels, sample_weight=weights)
    seconds = time.perf_counter() - start
    return {
        "steps_per_s": args.train_steps / seconds,
        "steps": args.train_steps,
        "parameters": int(model.count_params()),
        "jit_compile": bool(model.jit_compile),
    }


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


def _preprocess_command(corpus, out, vocab, workers, num_shards, split="train"):
    recipe, config = SHARDS_RECIPE
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


def corpus_scale_markdown(result):
    lines = [
        f"# keras-hsum preprocess at corpus scale ({result['recipe']}, synthetic corpus: "
        f"bundled {result['corpus']} repeated with new ids, DirectRunner, {result['date']})",
        "",
        "| documents | workers | shards | wall s | documents/s | peak RSS, process tree (MiB) "
        "| peak RSS, largest process (MiB) | examples in shards | skipped | exact |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['documents']:,} | {row['workers']} | {row['shards']} | "
            f"{row['wall_seconds']:.1f} | {row['documents_per_second']:.1f} | "
            f"{row['peak_rss_tree_mib']:.0f} | {row['peak_rss_largest_process_mib']:.0f} | "
            f"{row['examples_in_shards']:,} | {sum(row['skipped'].values())} | {row['exact']} |"
        )
    lines += ["", f"Machine: {result['machine']['cpus']} CPUs, {result['machine']['platform']}."]
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


def _corpus(name, args):
    path = corpus_path(name, args.split)
    source = "bundled sample" if path.startswith(SAMPLE_ROOT) else "shared corpus"
    examples = list(itertools.islice(read_examples(path, skip_invalid=True), args.max_examples))
    words = [example.num_words() for example in examples]
    return path, source, examples, float(np.mean(words))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["qmsum_general", "scisummnet"])
    parser.add_argument("--split", default="train")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--max-examples", type=int, default=None, help="first N examples of each corpus")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--vocabulary-examples", type=int, default=50)
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--train-batches", type=int, default=4)
    parser.add_argument("--warmup-steps", type=int, default=2, help="untimed first steps (tracing)")
    parser.add_argument("--quick", action="store_true", help="8 examples, tiny limits, 2 steps")
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
            table, stem = corpus_scale_markdown(result), "data_pipeline_corpus_scale"
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
    if args.quick:
        args.max_examples = args.max_examples or 8
        args.settings = ["tiny"]
        args.train_steps = 2
        args.train_batches = 1
        args.warmup_steps = 1
        args.vocabulary_examples = min(args.vocabulary_examples, 8)
    stem = args.output or os.path.join(RESULTS, "data_pipeline" + ("_quick" if args.quick else ""))

    print(
        "NOTE: training steps/s are those of a STAND-IN tiny model (width 64, 2 heads, "
        "2 encoder layers + 1 decoder layer); replace it by the tiny recipes once they exist."
    )
    rows, corpora = [], {}
    started = time.perf_counter()
    for name in args.datasets:
        path, source, examples, mean_words = _corpus(name, args)
        start = time.perf_counter()
        vocabulary = Vocabulary.train(
            corpus_sentences(examples[: args.vocabulary_examples]),
            vocabulary_size=args.vocabulary_size,
        )
        corpora[name] = {
            "path": path,
            "source": source,
            "examples": len(examples),
            "mean_words": mean_words,
            "vocabulary_size": vocabulary.vocabulary_size,
            "vocabulary_seconds": time.perf_counter() - start,
        }
        print(
            f"{name}: {len(examples)} examples ({source}, {args.split}), "
            f"{mean_words:,.0f} words on average; vocabulary V={vocabulary.vocabulary_size}."
        )
        warm_up(path, vocabulary, args)
        for setting in args.settings:
            training = {
                kind: measure_training(path, vocabulary, kind, setting, args)
                for kind in ("paragraphs", "flat")
            }
            for label, family, extras in VARIANTS:
                row = measure_pipeline(
                    path, vocabulary, label, family, extras, setting, args, len(examples)
                )
                train = training["flat" if family == "flat" else "paragraphs"]
                row.update(
                    dataset=name,
                    train_steps_per_s=train["steps_per_s"],
                    stand_in_parameters=train["parameters"],
                    stand_in_jit_compile=train["jit_compile"],
                    ratio=row["batches_per_s"] / train["steps_per_s"],
                    cached_ratio=row["cached_batches_per_s"] / train["steps_per_s"],
                )
                rows.append(row)
                print(_line(row))

    result = {
        "benchmark": "data_pipeline",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "quick": args.quick,
        "batch_size": args.batch_size,
        "settings": {s: SETTINGS[s] for s in args.settings},
        "stand_in_model": "StandInSummarizer (width 64, 2 heads, 2 local TransformerEncoder "
        "layers, 1 TransformerDecoder layer, Dense(V) head); used until the tiny recipes exist",
        "machine": _machine(),
        "corpora": corpora,
        "rows": rows,
        "total_seconds": time.perf_counter() - started,
    }
    table = markdown(result)
    print()
    print(table)
    _write(stem, result, table)
    return result


def _line(row):
    return (
        f"  {row['variant']:<26} {row['setting']:<5} {row['examples_per_s']:8.1f} ex/s "
        f"{row['tokens_per_s']:10,.0f} tok/s {row['batches_per_s']:7.2f} batch/s "
        f"(cached {row['cached_batches_per_s']:7.1f}) | stand-in train "
        f"{row['train_steps_per_s']:6.2f} step/s | ratio {row['ratio']:6.2f} "
        f"(cached {row['cached_ratio']:7.1f})"
    )


def markdown(result):
    """The results as a markdown table (one row per corpus, setting, variant)."""
    lines = [
        f"# Data pipeline throughput ({result['date']}{', quick' if result['quick'] else ''})",
        "",
        f"Batch size {result['batch_size']}, `pad_to_max=True`, target S=128; "
        f"{result['machine']['cpus']} CPUs, TensorFlow {result['machine']['tensorflow']}. "
        "Tokens/s counts real source tokens in the batches. Training steps/s are those of "
        f"a stand-in model: {result['stand_in_model']}. Ratio = pipeline batches/s ÷ "
        "training steps/s (target ≥ 10); 'cached' is a second epoch read from "
        "`make_dataset(cache=True)`.",
        "",
        "| corpus | examples | limits | variant | examples/s | tokens/s | batches/s "
        "| train steps/s | ratio | cached batches/s | cached ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        limits = row["limits"]
        shape = (
            f"N={limits['max_tokens']}"
            if row["family"] == "flat"
            else f"P={limits['max_units']}, T={limits['max_tokens']}"
        )
        corpus = result["corpora"][row["dataset"]]
        lines.append(
            f"| {row['dataset']} ({corpus['source']}) | {row['examples']} | "
            f"{row['setting']}: {shape} | {row['variant']} | {row['examples_per_s']:.1f} | "
            f"{row['tokens_per_s']:,.0f} | {row['batches_per_s']:.2f} | "
            f"{row['train_steps_per_s']:.2f} | {row['ratio']:.2f} | "
            f"{row['cached_batches_per_s']:.1f} | {row['cached_ratio']:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
