"""Sentence splitting in the graph: one boundary pass vs RE2 per word.

Issue 58, item 3a. `structuring.sentences.split_sentences` used to cut
every paragraph into whitespace chunks and whitespace pieces, match every
chunk against RE2 patterns and join the pieces back: several string ops
and allocations per word. It now cuts a paragraph only at its candidate
boundaries (a terminal mark, its closers and the whitespace after them),
about two pieces per sentence. This script times, in one run on ONE
thread (intra/inter-op parallelism 1), the CPU time of both versions (the
per-chunk one kept here as it was, `split_per_chunk`), each a
`tf.function` over the same paragraphs: those of each 32-example chunk of
a recipe's default corpus (bundled train sample), read and cut into
paragraphs as the structurer does (`structuring.text.paragraphs`,
computed once beforehand, so only the splitting is timed).

It checks that both versions return the same sentences and paragraph
indices. CPU ms per example, the least of `--repeats` passes; ratios
within the run.

Usage (from the repository root):
    python benchmarks/sentence_splitting.py            # seal, pht, discourse
    python benchmarks/sentence_splitting.py --recipes seal --examples 64
Writes benchmarks/results/sentence_splitting.json and .md (`--out` to
change).
"""

import argparse
import datetime
import itertools
import json
import os
import platform
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text as tf_text  # noqa: E402

from data_stages import _best  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
CHUNK = 32  # examples per structurer call, as make_dataset's chunks


def split_per_chunk(paragraphs, patterns):
    """The splitter before issue 58 item 3a, kept as it was: every
    paragraph cut into whitespace chunks and runs, RE2 on every chunk (the
    abbreviation rules, `_ends_sentence`, are unchanged and shared)."""
    from keras_hsum.data.structuring.sentences import _ends_sentence

    pieces = tf_text.regex_split(paragraphs, patterns.space, patterns.space)
    piece_values = pieces.flat_values
    is_chunk = ~tf.strings.regex_full_match(piece_values, patterns.space)
    values = tf.boolean_mask(piece_values, is_chunk)
    row = tf.boolean_mask(tf.cast(pieces.value_rowids(), tf.int32), is_chunk)
    count = tf.shape(values)[0]
    last = tf.concat([row[1:] != row[:-1], tf.ones([tf.minimum(count, 1)], tf.bool)], 0)
    ends = tf.where(~last & tf.strings.regex_full_match(values, patterns.ends))[:, 0]
    following = tf.gather(values, ends + 1)
    where = tf.boolean_mask(ends, tf.strings.regex_full_match(following, patterns.starts))
    boundary = tf.scatter_nd(
        where[:, None],
        _ends_sentence(tf.gather(values, where), tf.gather(values, where + 1), patterns),
        tf.shape(last, out_type=tf.int64),
    )
    first = tf.concat([tf.ones([tf.minimum(count, 1)], tf.bool), boundary[:-1] | last[:-1]], 0)
    sentence = tf.cumsum(tf.cast(first, tf.int32)) - 1
    num_sentences = tf.maximum(tf.reduce_max(sentence) + 1, 0)
    paragraph = tf.math.segment_min(row, sentence)
    before = tf.cumsum(tf.cast(is_chunk, tf.int32)) - 1
    padded_sentence = tf.concat([[-1], sentence, [-1]], 0)
    previous_sentence = tf.gather(padded_sentence, before + 1)
    next_sentence = tf.gather(padded_sentence, before + 1 + tf.cast(~is_chunk, tf.int32))
    inside = is_chunk | (tf.equal(previous_sentence, next_sentence) & (previous_sentence >= 0))
    text = tf.strings.reduce_join(
        tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(piece_values, inside),
            tf.boolean_mask(previous_sentence, inside),
            nrows=num_sentences,
        ),
        axis=1,
    )
    return text, paragraph


def _paragraph_chunks(dataset, count):
    """The paragraphs (tf.string [n]) of each CHUNK examples of `dataset`'s
    bundled train sample, as `TextStructurer` cuts them, and the number of
    examples read."""
    from keras_hsum.data.corpora import sample_path
    from keras_hsum.data.pipeline_report import PipelineReport
    from keras_hsum.data.raw_examples import raw_examples
    from keras_hsum.data.structuring import text as text_lib
    from keras_hsum.data.structuring.character_classes import patterns

    raws = list(itertools.islice(
        raw_examples(sample_path(dataset, "train"), PipelineReport(), True, True, False,
                     "strict", []),
        count,
    ))
    chunks = []
    for start in range(0, len(raws), CHUNK):
        part = raws[start : start + CHUNK]
        width = max(len(raw["documents"]) for raw in part)
        documents = tf.constant(
            [list(raw["documents"]) + [""] * (width - len(raw["documents"])) for raw in part],
            tf.string,
        )
        chunks.append(text_lib.paragraphs(documents, patterns().strip)[0])
    return chunks, len(raws)


def measure(label, dataset, count, repeats):
    from keras_hsum.data.structuring.character_classes import patterns
    from keras_hsum.data.structuring.sentences import split_sentences

    chunks, examples = _paragraph_chunks(dataset, count)
    signature = [tf.TensorSpec([None], tf.string)]
    versions = {
        "per chunk (before)": tf.function(
            lambda p: split_per_chunk(p, patterns()), input_signature=signature),
        "boundaries (now)": tf.function(
            lambda p: split_sentences(p, patterns()), input_signature=signature),
    }
    outputs = {}
    for name, function in versions.items():  # trace, warm up, keep the output
        outputs[name] = [[t.numpy() for t in function(chunk)] for chunk in chunks]
    (old, new) = outputs.values()
    same = all(
        np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(old, new)
    )
    if not same:
        raise AssertionError(f"{label}: the two splitters disagree on {dataset}")
    ms = {
        name: 1000 * _best(lambda: [function(c) for c in chunks], repeats) / examples
        for name, function in versions.items()
    }
    paragraphs = sum(int(c.shape[0]) for c in chunks)
    sentences = sum(len(o[0]) for o in new)
    row = {
        "recipe": label, "dataset": dataset, "examples": examples, "paragraphs": paragraphs,
        "sentences": sentences, "megabytes": sum(
            sum(len(p) for p in c.numpy()) for c in chunks) / 1e6,
        "ms_per_example": ms, "speedup": ms["per chunk (before)"] / ms["boundaries (now)"],
        "identical": same,
    }
    print(f"{label} ({dataset}, {examples} examples, {paragraphs} paragraphs, "
          f"{sentences} sentences): " + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items())
          + f"; {row['speedup']:.1f}x; identical output")
    return row


def _markdown(result):
    lines = [
        "# Sentence splitting: one boundary pass vs RE2 per word (issue 58 item 3a)",
        "",
        f"Measured {result['date']} on {result['machine']} by "
        "`benchmarks/sentence_splitting.py` (one thread; CPU time of the process, the "
        f"least of {result['repeats']} passes; paragraphs of the first "
        f"{result['examples']} examples (or all, when fewer) of each recipe's bundled "
        f"train sample, in chunks "
        f"of {CHUNK} as the structurer gets them). CPU ms per example; both versions "
        "return identical sentences and paragraph indices.",
        "",
        "| recipe | corpus | examples | paragraphs | sentences | MB | per chunk (before) "
        "| boundaries (now) | speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        ms = row["ms_per_example"]
        lines.append(
            f"| {row['recipe']} | {row['dataset']} | {row['examples']} | {row['paragraphs']} "
            f"| {row['sentences']} | {row['megabytes']:.2f} | {ms['per chunk (before)']:.2f} "
            f"| {ms['boundaries (now)']:.2f} | {row['speedup']:.1f}× |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    from keras_hsum import recipes

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="*", default=["seal", "pht", "discourse"])
    parser.add_argument("--examples", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(RESULTS, "sentence_splitting"))
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rows = [
        measure(name, recipes.get(name).DEFAULT_DATASET, args.examples, args.repeats)
        for name in args.recipes
    ]
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, TF {tf.__version__}, "
                   f"load {os.getloadavg()[0]:.1f}",
        "examples": args.examples, "repeats": args.repeats, "rows": rows,
    }
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(_markdown(result))
    print(f"wrote {args.out}.json and .md")


if __name__ == "__main__":
    main()
