"""The structurer's remaining stages, function by function, before vs now.

Issue 58, item 3. After sentence splitting and packing, the per-stage
table of `benchmarks/data_stages.py` leaves placing rows, tf-idf ranking,
paragraphs and HT's similarity graph. This script times, in one run on ONE
thread (intra/inter-op parallelism 1), the CPU time of each of these
functions as a `tf.function` over the same inputs (each 32-example chunk
of a recipe's bundled train sample, structured by its tiny config), now
and before (the structuring modules as they were at commit `--before`,
default da81da2, read with `git show` and imported beside the current
ones):

- `paragraphs`: `structuring.text.paragraphs` of the chunk's documents;
- `split_sentences`: `structuring.sentences.split_sentences` of those
  paragraphs;
- `tfidf + rank`: `ranking.rank(ranking.tfidf_scores(...))` of the rows
  (the `paragraphs` family's ranking, run here on every row family);
- `place_tokens`: `rows.place_tokens` of the first P rows of each example;
- `similarity graph`, `discourse graph`: `graphs.paragraph_graph` of those
  rows' texts (HT's graphs, default options).

It checks that both versions of each give identical outputs.
CPU ms per example, the least of `--repeats` passes; ratios within the run.

Usage (from the repository root):
    python benchmarks/structurer_stages.py                  # ht pht discourse seal
    python benchmarks/structurer_stages.py --recipes ht --repeats 5
Writes benchmarks/results/structurer_stages.json and .md (`--out` to change).
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
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
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ("text", "sentences", "ranking", "rows", "graphs")


def _old_modules(commit):
    """The structuring modules of `commit`, imported under other names."""
    modules = {}
    for name in MODULES:
        path = f"keras_hsum/data/structuring/{name}.py"
        source = subprocess.run(
            ["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True,
            capture_output=True, text=True,
        ).stdout
        spec = importlib.util.spec_from_loader(f"_before_{name}", loader=None)
        module = importlib.util.module_from_spec(spec)
        exec(compile(source, f"{commit}:{path}", "exec"), module.__dict__)
        modules[name] = module
    return modules


def _chunk_inputs(name, vocabulary, count):
    """The structure, a base `TextStructurer` and per chunk its inputs."""
    from data_stages import sentence_chunks
    from keras_hsum.data.structuring import rows as rows_lib
    from keras_hsum.data.structuring.segments import local_index

    structure, base, chunks, examples = sentence_chunks(name, vocabulary, count)
    pack_option = base.family_options.get("pack", "paragraph")
    inputs = []
    for chunk in chunks:
        documents, sentences = chunk["documents"], chunk["sentences"]
        rows = rows_lib.family_rows(structure.family, sentences, structure.max_tokens,
                                    base._tokenizer, pack_option)
        inputs.append(dict(
            documents=documents, paragraph_text=chunk["paragraphs"][0],
            context=tf.where(tf.not_equal(chunk["query"], ""), chunk["query"], chunk["title"]),
            sentences=sentences, rows=rows,
            local=local_index(rows["batch"], tf.shape(documents)[0]),
        ))
    return structure, base, inputs, examples


def _functions(modules, structure, base):
    """{stage: (function of a chunk's inputs)} over the given modules."""
    from keras_hsum.data.structuring import rows as rows_now
    from keras_hsum.features import DOCUMENT_IDS
    from keras_hsum.features import PARAGRAPH_INDEX
    from keras_hsum.features import PARAGRAPH_MASK

    P, T = structure.max_units, structure.max_tokens
    patterns = base._patterns

    def function(body):
        return tf.function(body, autograph=False)

    def placement(rows, local, num_batch):
        return rows_now.RowPlacement(rows["batch"], local, local < P, num_batch, P)

    def rows_tensor(values, default, place):
        kept = tf.boolean_mask(tf.stack([place.batch, place.slot], 1), place.kept)
        return tf.tensor_scatter_nd_update(
            tf.fill(tf.stack([place.num_batch, P]), default), kept,
            tf.boolean_mask(values, place.kept),
        )

    def graph(rows, local, num_batch, kind="similarity"):
        place = placement(rows, local, num_batch)
        features = {
            "unit_texts": rows_tensor(rows["text"], "", place),
            PARAGRAPH_MASK: rows_tensor(tf.ones_like(local, tf.bool), False, place),
            DOCUMENT_IDS: rows_tensor(rows["document"], 0, place),
            PARAGRAPH_INDEX: rows_tensor(local, 0, place),
        }
        _, options = modules["graphs"].check_graph(kind, {})
        return modules["graphs"].paragraph_graph(features, kind, options, patterns)

    return {
        "paragraphs": function(
            lambda c: modules["text"].paragraphs(c["documents"], patterns.strip)),
        "split_sentences": function(
            lambda c: modules["sentences"].split_sentences(c["paragraph_text"], patterns)),
        "tfidf + rank": function(lambda c: modules["ranking"].rank(
            modules["ranking"].tfidf_scores(
                c["rows"]["text"], c["rows"]["batch"], c["context"],
                tf.shape(c["documents"])[0], patterns.nonword),
            c["rows"]["batch"], tf.shape(c["documents"])[0])),
        "place_tokens": function(lambda c: modules["rows"].place_tokens(
            c["rows"], c["sentences"], base.pad_id,
            placement(c["rows"], c["local"], tf.shape(c["documents"])[0]), T)),
        "similarity graph": function(
            lambda c: graph(c["rows"], c["local"], tf.shape(c["documents"])[0])),
        "discourse graph": function(lambda c: graph(
            c["rows"], c["local"], tf.shape(c["documents"])[0], "discourse")),
    }


def _flat(value):
    return [np.asarray(v) for v in tf.nest.flatten(value)]


def measure(name, vocabulary, count, repeats, before, stages=None):
    from keras_hsum.data.structuring import graphs
    from keras_hsum.data.structuring import ranking
    from keras_hsum.data.structuring import rows
    from keras_hsum.data.structuring import sentences
    from keras_hsum.data.structuring import text

    structure, base, chunks, examples = _chunk_inputs(name, vocabulary, count)
    now = dict(text=text, sentences=sentences, ranking=ranking, rows=rows, graphs=graphs)
    versions = {"before": _functions(before, structure, base),
                "now": _functions(now, structure, base)}
    ms = {}
    for stage in stages or versions["now"]:
        outputs = {label: [_flat(f[stage](c)) for c in chunks]
                   for label, f in versions.items()}
        for a, b in zip(outputs["before"], outputs["now"]):
            for x, y in zip(a, b):
                if x.shape != y.shape or not np.array_equal(x, y):
                    raise AssertionError(f"{name}: {stage} differs before and now.")
        ms[stage] = {
            label: 1000 * _best(lambda f=f[stage]: [f(c) for c in chunks], repeats) / examples
            for label, f in versions.items()
        }
    return {
        "recipe": name, "family": structure.family, "max_units": structure.max_units,
        "max_tokens": structure.max_tokens, "examples": examples,
        "rows": int(sum(int(c["rows"]["num_rows"]) for c in chunks)),
        "ms_per_example": ms,
    }


def _markdown(result):
    lines = [
        "# The structurer's remaining stages, before vs now (issue 58 item 3)", "",
        f"Measured {result['date']} on {result['machine']} by "
        f"`benchmarks/structurer_stages.py` (one thread; CPU time, least of "
        f"{result['repeats']} passes; each recipe's tiny structure on the first examples "
        f"of its bundled train sample, 32 a call; before: the modules at "
        f"{result['before']}; outputs checked identical). CPU ms per example "
        "(before → now, speed-up).", "",
        "| recipe | family | examples | rows | " + " | ".join(result["stages"]) + " |",
        "|---|---|---|---|" + "---|" * len(result["stages"]),
    ]
    for row in result["rows"]:
        cells = []
        for stage in result["stages"]:
            ms = row["ms_per_example"][stage]
            cells.append(f"{ms['before']:.3f} → {ms['now']:.3f} "
                         f"({ms['before'] / max(ms['now'], 1e-9):.1f}×)")
        lines.append(f"| {row['recipe']} | {row['family']} | {row['examples']} "
                     f"| {row['rows']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="*", default=["ht", "pht", "discourse", "seal"])
    parser.add_argument("--examples", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stages", nargs="*", default=None,
                        help="stages to time (default: all)")
    parser.add_argument("--before", default="da81da2")
    parser.add_argument("--out", default=os.path.join(RESULTS, "structurer_stages"))
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    from keras_hsum.data.corpora import sample_tokenizer_path
    from keras_hsum.data.vocabulary import Vocabulary

    vocabulary = Vocabulary.load(sample_tokenizer_path())
    before = _old_modules(args.before)
    rows = []
    for name in args.recipes:
        row = measure(name, vocabulary, args.examples, args.repeats, before, args.stages)
        print(json.dumps(row))
        rows.append(row)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, TF {tf.__version__}, "
                   f"load {os.getloadavg()[0]:.1f}",
        "repeats": args.repeats, "before": args.before,
        "stages": list(rows[0]["ms_per_example"]) if rows else [], "rows": rows,
    }
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(_markdown(result))
    print(_markdown(result))


if __name__ == "__main__":
    main()
