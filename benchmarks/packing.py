"""Packing sentences into rows: one scan step per sentence vs pointer jumping.

Issue 58, item 3b. `structuring.rows.pack` packs a batch's sentences
greedily into rows of at most T tokens (rows never cross groups). It used
to run a `tf.scan` with one step per sentence of the longest group (a
meeting of SEAL's qmsum_general: thousands of steps); it now finds the row
starts by pointer jumping, in about log2(rows) vectorised steps. This
script times, in one run on ONE thread (intra/inter-op parallelism 1), the
CPU time of:

- `pack` alone (the current version) and the scan version it replaced
  (`scan_pack`, kept here as it was), each a `tf.function` over the same
  `lengths` and `groups` of each 32-example chunk of a recipe's bundled
  train sample, structured by its tiny config (SEAL: snippets per
  document; HT: paragraphs);
- `family_rows` (the whole packing stage: `pack`, the rows' token
  positions and texts), now and as before (traced with `_packed_rows` as
  it was, `packed_rows_before`, kept here).

It checks that both versions of each give the same outputs.
CPU ms per example, the least of `--repeats` passes; ratios within the run.

Usage (from the repository root):
    python benchmarks/packing.py                      # seal and ht
    python benchmarks/packing.py --recipes seal --examples 64
Writes benchmarks/results/packing.json and .md (`--out` to change).
"""

import argparse
import datetime
import json
import os
import platform
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from data_stages import _best  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def scan_pack(lengths, groups, max_tokens):
    """`rows.pack` before issue 58 item 3b: a `tf.scan` over the j-th
    sentence of every group at once (as many steps as the longest group
    has sentences). Same arguments and outputs as `rows.pack`."""
    from keras_hsum.data.structuring.segments import group_rows

    limit = tf.constant(max_tokens, tf.int32)
    count = tf.shape(lengths)[0]
    group = group_rows(groups)
    num_groups = tf.maximum(tf.reduce_max(group) + 1, 0)
    first = tf.math.unsorted_segment_min(tf.range(count), group, num_groups)
    within = tf.range(count) - tf.gather(first, group)
    depth = tf.reduce_max(tf.concat([within + 1, [1]], 0))
    index = tf.stack([within, group], 1)
    grid = tf.scatter_nd(index, lengths, tf.stack([depth, num_groups]))

    def step(state, length):
        used, current, _, _ = state
        present = length > 0
        forced = length > limit
        join = present & ~forced & (current > 0) & (current + length <= limit)
        row = tf.where(join, used - 1, used)
        column = tf.where(join, current, 0)
        grown = tf.where(forced, used + (length + limit - 1) // limit, used + 1)
        used = tf.where(present & ~join, grown, used)
        current = tf.where(
            present,
            tf.where(join, current + length, tf.where(forced, 0, length)),
            current,
        )
        return used, current, row, column

    zeros = tf.zeros([num_groups], tf.int32)
    used, _, rows, columns = tf.scan(step, grid, initializer=(zeros, zeros, zeros, zeros))
    offset = tf.cumsum(used[-1], exclusive=True)
    row = tf.gather(offset, group) + tf.gather_nd(rows, index)
    column = tf.gather_nd(columns, index)
    return row, column, lengths > limit


def packed_rows_before(sentences, groups, max_tokens, tokenizer):
    """`rows._packed_rows` before issue 58 item 3b, as it was but for
    `scan_pack`: per-row values by segment reductions over the tokens and
    the token -> sentence index by `RaggedTensor.value_rowids()` (a repeat
    through a [sentences, longest sentence] mask)."""
    limit = max_tokens
    row, column, forced = scan_pack(sentences["lengths"], groups, max_tokens)
    count = tf.shape(row)[0]
    num_rows = tf.cond(
        count > 0,
        lambda: row[-1]
        + (column[-1] + sentences["lengths"][-1] + limit - 1) // limit,
        lambda: 0,
    )
    token_sentence = tf.cast(sentences["ids"].value_rowids(), tf.int32)
    position = tf.gather(column, token_sentence) + tf.cast(
        tf.ragged.range(sentences["lengths"]).flat_values, tf.int32
    )
    token_row = tf.gather(row, token_sentence) + position // limit
    token_forced = tf.gather(forced, token_sentence)
    row_forced = (
        tf.math.unsorted_segment_max(
            tf.cast(token_forced, tf.int32), token_row, num_rows
        )
        > 0
    )
    row_sentence = tf.math.unsorted_segment_min(token_sentence, token_row, num_rows)
    joined = tf.strings.reduce_join(
        tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(sentences["text"], ~forced),
            tf.boolean_mask(row, ~forced),
            nrows=num_rows,
        ),
        axis=1,
        separator=" ",
    )
    # A row cut out of an over-long sentence reads as its pieces:
    # detokenise those rows only.
    forced_rows = tf.where(row_forced)[:, 0]
    in_forced = tf.gather(row_forced, token_row)
    compact = tf.cumsum(tf.cast(row_forced, tf.int32)) - 1
    pieces = tokenizer.detokenize(
        tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(sentences["ids"].flat_values, in_forced),
            tf.gather(compact, tf.boolean_mask(token_row, in_forced)),
            nrows=tf.shape(forced_rows, out_type=tf.int32)[0],
        )
    )
    return dict(
        token_row=token_row,
        token_column=position % limit,
        num_rows=num_rows,
        batch=tf.gather(sentences["batch"], row_sentence),
        document=tf.gather(sentences["document"], row_sentence),
        text=tf.tensor_scatter_nd_update(joined, forced_rows[:, None], pieces),
    )


# `structuring.rows`' helpers before issue 58 item 3b.
BEFORE = {"_packed_rows": packed_rows_before}


def _chunk_inputs(name, vocabulary, count):
    """[(sentences dict, groups)] per 32-example chunk, and the structure."""
    from data_stages import sentence_chunks

    structure, base, chunks, examples = sentence_chunks(name, vocabulary, count)
    pack_option = base.family_options.get("pack", "paragraph")
    if structure.family == "snippets":
        key = "document_key"
    elif pack_option == "paragraph":
        key = "paragraph"
    else:
        key = "section_key"
    inputs = [(chunk["sentences"], chunk["sentences"][key]) for chunk in chunks]
    return structure, base, pack_option, inputs, examples


def measure(name, vocabulary, count, repeats):
    from keras_hsum.data.structuring import rows as rows_lib

    structure, base, pack_option, chunks, examples = _chunk_inputs(name, vocabulary, count)
    T = structure.max_tokens
    versions = {
        "scan (before)": tf.function(lambda l, g: scan_pack(l, g, T), autograph=False),
        "pointer jumping (now)": tf.function(lambda l, g: rows_lib.pack(l, g, T),
                                             autograph=False),
    }
    inputs = [(s["lengths"], g) for s, g in chunks]
    outputs = {}
    for label, function in versions.items():
        outputs[label] = [[o.numpy() for o in function(*i)] for i in inputs]
    for a, b in zip(*outputs.values()):
        for x, y in zip(a, b):
            if not np.array_equal(x, y):
                raise AssertionError(f"{name}: the two versions of `pack` differ.")
    seconds = {label: _best(lambda f=function: [f(*i) for i in inputs], repeats)
               for label, function in versions.items()}
    results = {}
    for label, patch in (("family_rows (before)", BEFORE), ("family_rows (now)", {})):
        whole = tf.function(
            lambda s: rows_lib.family_rows(structure.family, s, T, base._tokenizer, pack_option),
            autograph=False)
        # Traced (once per chunk) with the module's helpers of before when
        # asked; the traced graphs keep them.
        saved = {helper: getattr(rows_lib, helper) for helper in patch}
        try:
            for helper, value in patch.items():
                setattr(rows_lib, helper, value)
            results[label] = [whole(sentences) for sentences, _ in chunks]
        finally:
            for helper, value in saved.items():
                setattr(rows_lib, helper, value)
        seconds[label] = _best(lambda f=whole: [f(s) for s, _ in chunks], repeats)
    for a, b in zip(*results.values()):
        for key in a:
            if not np.array_equal(np.asarray(a[key]), np.asarray(b[key])):
                raise AssertionError(f"{name}: `family_rows` before and now differ in {key!r}.")
    lengths = np.concatenate([i[0].numpy() for i in inputs])
    groups_per_chunk = [len(np.unique(i[1].numpy())) for i in inputs]
    rows = sum(int(r["num_rows"]) for r in results["family_rows (now)"])
    ms = {label: 1000 * value / examples for label, value in seconds.items()}
    return {
        "recipe": name, "family": structure.family, "max_tokens": T, "examples": examples,
        "sentences": int(lengths.size), "forced": int((lengths > T).sum()),
        "groups": int(sum(groups_per_chunk)), "rows": rows,
        "ms_per_example": ms,
        "speed_up": ms["scan (before)"] / ms["pointer jumping (now)"],
        "family_rows_speed_up": ms["family_rows (before)"] / ms["family_rows (now)"],
    }


def _markdown(result):
    lines = [
        "# Packing sentences into rows (issue 58 item 3b)", "",
        f"Measured {result['date']} on {result['machine']} by `benchmarks/packing.py` "
        f"(one thread; CPU time, least of {result['repeats']} passes; each recipe's "
        "tiny structure on the first examples of its bundled train sample, 32 a call). "
        "CPU ms per example.", "",
        "| recipe | family | T | examples | sentences | forced | groups | rows | scan (before) "
        "| pointer jumping (now) | speed-up | family_rows (before) | family_rows (now) "
        "| speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        ms = row["ms_per_example"]
        lines.append(
            f"| {row['recipe']} | {row['family']} | {row['max_tokens']} | {row['examples']} "
            f"| {row['sentences']} | {row['forced']} | {row['groups']} | {row['rows']} "
            f"| {ms['scan (before)']:.2f} | {ms['pointer jumping (now)']:.2f} "
            f"| {row['speed_up']:.1f}× | {ms['family_rows (before)']:.2f} "
            f"| {ms['family_rows (now)']:.2f} | {row['family_rows_speed_up']:.1f}× |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="*", default=["seal", "ht"])
    parser.add_argument("--examples", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(RESULTS, "packing"))
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    from keras_hsum.data.corpora import sample_tokenizer_path
    from keras_hsum.data.vocabulary import Vocabulary

    vocabulary = Vocabulary.load(sample_tokenizer_path())
    rows = []
    for name in args.recipes:
        row = measure(name, vocabulary, args.examples, args.repeats)
        print(json.dumps(row))
        rows.append(row)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, TF {tf.__version__}, "
                   f"load {os.getloadavg()[0]:.1f}",
        "repeats": args.repeats, "rows": rows,
    }
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(_markdown(result))
    print(_markdown(result))


if __name__ == "__main__":
    main()
