"""Where the input pipeline's time goes: each stage, per family, one core.

Issue 58, item 1 (the profile) and item 2's figures (the label extras in
the graph against in Python). For each recipe's tiny structure (ht, pht,
ranker, seal, discourse, flat, and SHTE's "sentences" documents with the
greedy oracle) on the first `--examples` examples of its default corpus's
bundled sample (train split), with the bundled 32k SentencePiece
vocabulary, in one process on ONE thread (intra- and inter-op parallelism
1, tf.data private thread pool 1), it times in one run:

- reading: `read_examples` of the corpus file (gzip, JSON, `Example`s);
- rendering: `render_documents` of every example (the marker text a
  SavedModel receives) and the raw-string generator the pipeline reads
  (`raw_examples`: reading + rendering + checks);
- the structurer, 32 examples a call as in `make_dataset`, as cumulative
  prefixes of `TextStructurer` (each a `tf.function`; a stage's time is its
  prefix minus the one before): paragraphs (`structuring.text`), sentence
  splitting (`structuring.sentences`, RE2), tokenizing (SentencePiece per
  sentence and the sentence table), packing (`structuring.rows`), placing
  the rows (rank "order", no graph), ranking (the family's rank: tf-idf),
  graphs (HT's similarity and discourse graphs, on the ht row); the
  summary's tokenization (the target). The truncation statistics the
  pipeline also computes are left out;
- each label extra on the structured examples (cached in memory, then one
  tf.data pass with the extra mapped, minus the same pass without it): in
  Python through `tf.py_function` on rouge-score's words (the extra called
  as before issue 58) and in the graph on ids (`graph_features`,
  `keras_hsum.data.id_rouge`): ms per example and the speed-up;
- the agreement of the two label versions on the same examples: top row
  (ranker targets, SEAL's proxy labels), Jaccard overlap of the oracle's
  extracts, largest and mean absolute difference of a label.

Figures are CPU ms per example (the process's CPU time on one thread, the
least of 3 passes); ratios are within this run.

Usage (from the repository root):
    python benchmarks/data_stages.py                 # ~3 min idle (tracing)
    python benchmarks/data_stages.py --recipes seal ranker
Writes benchmarks/results/data_stages.json and .md.
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

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
CHUNK = 32  # examples per structurer call, as make_dataset's chunks
REPEATS = 2  # timed passes per measurement; the least CPU time is kept


def _one_thread(dataset):
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    options.autotune.enabled = False
    return dataset.with_options(options)


def _best(run, repeats=REPEATS):
    """The least CPU time of the process over `repeats` calls of `run()`
    (seconds). CPU time, not wall time: the process runs on one thread,
    and on a shared machine its wall time mostly measures the others."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


# ------------------------------------------------------------ structures


def _structures(vocabulary):
    """[(label, corpus, ExampleStructure, {extra label: extra})]."""
    from keras_hsum import recipes
    from keras_hsum.data import label_extras
    from keras_hsum.data.example_features import ExampleStructure
    from keras_hsum.recipes.base import example_structure

    rows = []
    for name in ("ranker", "seal", "ht", "pht", "discourse", "flat"):
        recipe = recipes.get(name)
        config = recipes.config(name, "tiny")
        structure = example_structure(recipe, config, vocabulary, training=True)
        extras = {}
        if name == "ranker":
            extras["ranker_targets"] = label_extras.ranker_targets
        if name == "seal":
            segments = recipe.num_segments(config)
            extras["seal_labels"] = label_extras.seal_labels(
                config.segment_length, vocabulary, num_segments=segments
            )
        structure = ExampleStructure(
            structure.family, structure.max_units, structure.max_tokens,
            structure.max_target_length, structure.family_options, tuple(extras.values()),
        )
        rows.append((name, recipe.DEFAULT_DATASET, structure, extras))
    shte = recipes.config("shte", "tiny")
    rows.insert(2, (
        "shte (oracle)", recipes.get("shte").DEFAULT_DATASET,
        ExampleStructure("sentences", shte.max_sentences, shte.max_sentence_tokens,
                         None, {}, (label_extras.oracle_labels,)),
        {"oracle_labels": label_extras.oracle_labels},
    ))
    return rows


# ------------------------------------------------------------ reading


def _read_and_render(path, count):
    from keras_hsum.data.pipeline_report import PipelineReport
    from keras_hsum.data.raw_examples import raw_examples
    from keras_hsum.data.reader import read_examples
    from keras_hsum.data.reader import render_documents

    examples = list(itertools.islice(read_examples(path, skip_invalid=True), count))

    def read():
        list(itertools.islice(read_examples(path, skip_invalid=True), count))

    def render():
        for example in examples:
            render_documents(example)

    def generator():
        list(itertools.islice(
            raw_examples(path, PipelineReport(), True, True, False, "strict", []), count
        ))

    raws = list(itertools.islice(
        raw_examples(path, PipelineReport(), True, True, False, "strict", []), count
    ))
    return examples, raws, {
        "reading": _best(read), "rendering": _best(render), "raw_generator": _best(generator),
    }


def _chunks(raws):
    out = []
    for start in range(0, len(raws), CHUNK):
        part = raws[start : start + CHUNK]
        width = max(len(raw["documents"]) for raw in part)
        documents = [list(raw["documents"]) + [""] * (width - len(raw["documents"]))
                     for raw in part]
        out.append((
            tf.constant(documents, tf.string),
            tf.constant([raw["title"] for raw in part], tf.string),
            tf.constant([raw["query"] for raw in part], tf.string),
            tf.constant([raw["summary"] for raw in part], tf.string),
        ))
    return out


# ------------------------------------------------------------ structurer


def _structurer_stages(structure, vocabulary, chunks, graphs):
    """Seconds per pass over `chunks` of each cumulative prefix."""
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.data.structuring import rows as rows_lib
    from keras_hsum.data.structuring import text as text_lib
    from keras_hsum.data.structuring.sentences import split_sentences

    family = structure.family
    options = dict(structure.options)
    options.pop("graph_kind", None)
    options.pop("graph_options", None)
    plain = dict(options)
    if "rank" in plain:
        plain["rank"] = "order"
    # As make_dataset builds it: its source is valid UTF-8 (no U+FFFD pass).
    base = TextStructurer(vocabulary, family, structure.max_units, structure.max_tokens,
                          valid_utf8=True, **plain)
    signature = [tf.TensorSpec([None, None], tf.string), tf.TensorSpec([None], tf.string),
                 tf.TensorSpec([None], tf.string)]

    def prefix(function):
        return tf.function(function, input_signature=signature, autograph=False)

    def paragraphs(documents, title, query):
        return text_lib.paragraphs(documents, base._patterns.strip, replace_invalid=False)

    def split(documents, title, query):
        return split_sentences(paragraphs(documents, title, query)[0], base._patterns)

    def tokenized(documents, title, query):
        return base._sentences(paragraphs(documents, title, query))

    def packed(documents, title, query):
        sentences = tokenized(documents, title, query)
        return rows_lib.family_rows(family, sentences, base.max_tokens, base._tokenizer,
                                    base.family_options.get("pack", "paragraph"))

    stages = [("paragraphs", prefix(paragraphs)), ("splitting", prefix(split)),
              ("tokenizing", prefix(tokenized))]
    if family != "flat":
        stages.append(("packing", prefix(packed)))
        stages.append(("placing rows", base._structure))
    else:
        stages.append(("packing", base._structure))
    if options.get("rank", "order") != "order":
        ranked = TextStructurer(vocabulary, family, structure.max_units, structure.max_tokens,
                                valid_utf8=True, **options)
        stages.append(("ranking", ranked._structure))
    else:
        ranked = base
    if family == "paragraphs" and graphs:
        for kind in ("similarity", "discourse"):
            graph = TextStructurer(vocabulary, family, structure.max_units,
                                   structure.max_tokens, graph_kind=kind, valid_utf8=True,
                                   **options)
            stages.append((f"graph ({kind})", graph._structure))

    def target(summary):
        return ranked.tokenize(summary)

    target_function = tf.function(target, input_signature=[tf.TensorSpec([None], tf.string)])
    times = {}
    for name, function in stages:
        for documents, title, query, _ in chunks:  # trace and warm up
            function(documents, title, query)
        times[name] = _best(lambda: [function(d, t, q) for d, t, q, _ in chunks])
    for *_, summary in chunks:
        target_function(summary)
    times["target tokenizing"] = _best(lambda: [target_function(c[3]) for c in chunks])
    return times


def _stage_costs(times, family):
    """Cumulative prefix times -> each stage's own time."""
    costs, previous = {}, 0.0
    order = ["paragraphs", "splitting", "tokenizing", "packing"]
    if family != "flat":
        order.append("placing rows")
    for name in order:
        costs[name] = max(times[name] - previous, 0.0) if name != "splitting" else max(
            times["splitting"] - times["paragraphs"], 0.0
        )
        if name != "splitting":
            previous = times[name]
    # tokenizing's prefix includes splitting (the table is built from it).
    costs["tokenizing"] = max(times["tokenizing"] - times["splitting"], 0.0)
    placed = times["placing rows"] if family != "flat" else times["packing"]
    if "ranking" in times:
        costs["ranking"] = max(times["ranking"] - placed, 0.0)
        placed = times["ranking"]
    for name in ("graph (similarity)", "graph (discourse)"):
        if name in times:
            costs[name] = max(times[name] - placed, 0.0)
    costs["structurer total"] = placed  # without a graph
    costs["target tokenizing"] = times["target tokenizing"]
    return costs


# ------------------------------------------------------------ extras


def _steady_pass(dataset):
    """CPU seconds of one pass over `dataset` in steady state: one iterator
    over the repeated dataset, one untimed pass (creating an iterator
    instantiates and optimises the dataset's functions, which costs more
    than a pass over a few examples), then the least of REPEATS passes."""
    count = sum(1 for _ in dataset)
    iterator = iter(dataset.repeat())
    for _ in range(count):
        next(iterator)

    def one_pass():
        for _ in range(count):
            next(iterator)

    return _best(one_pass)


def _in_python(extra):
    def run(example, structured):
        return extra(example, structured)

    run.feature_spec = extra.feature_spec
    run.__name__ = extra.__name__
    return run


def _extras(structure, vocabulary, examples, raws, extras):
    """Per extra: ms per example of the extra in Python (one tf.data pass
    over the cached structured examples with it, minus the pass without)
    and in the graph (one pass over the cached structured chunks of 32
    with its `graph_features`, as make_dataset runs it, minus the pass
    without), and the agreement of the two outputs."""
    from keras_hsum.data import extras as extras_lib
    from keras_hsum.data import pipeline
    from keras_hsum.data.id_rouge import rouge_id_table
    from keras_hsum.data.label_extras import REFERENCE_LABEL_IDS
    from keras_hsum.data.label_extras import SUMMARY_LABEL_IDS
    from keras_hsum.data.pipeline_report import PipelineReport
    from keras_hsum.data.raw_examples import RAW_SIGNATURE
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.features import EXAMPLE_ID
    from keras_hsum.features import PARAGRAPH_MASK

    if not extras:
        return {}
    family = structure.family
    plain = pipeline._structured_dataset(
        examples, vocabulary, family, structure.max_units, structure.max_tokens,
        structure.max_target_length, structure.options, PipelineReport(), True, True,
        False, "strict", [],
    ).cache()
    for _ in plain:  # fill the cache
        pass
    structurer = TextStructurer(vocabulary, family, structure.max_units, structure.max_tokens,
                                **structure.options)

    def structure_chunk(chunk):
        out = dict(chunk)
        out.update(structurer(chunk["documents"].to_tensor(default_value=""),
                              title=chunk["title"], query=chunk["query"]))
        out[SUMMARY_LABEL_IDS] = tf.cast(structurer.tokenize(chunk["summary"]), tf.int32)
        references = chunk["references"]
        out[REFERENCE_LABEL_IDS] = references.with_flat_values(
            tf.cast(structurer.tokenize(references.flat_values), tf.int32))
        return out

    chunks = tf.data.Dataset.from_generator(
        lambda: iter(raws), output_signature=RAW_SIGNATURE
    ).ragged_batch(CHUNK).map(structure_chunk).cache()
    for _ in chunks:
        pass
    table = rouge_id_table(vocabulary)
    results = {}
    for label, extra in extras.items():
        specs = dict(extra.feature_spec)
        names = list(specs)

        def skip(values, message):
            raise RuntimeError(message)

        def graph(chunk, extra=extra):
            return extras_lib.run_graph_extras([extra], chunk, table)

        versions = {
            "none": _one_thread(plain),
            "python": _one_thread(extras_lib.with_extras(
                plain, [_in_python(extra)], names, specs, family, structure.max_tokens,
                True, [], skip)),
            "chunks": _one_thread(chunks.map(lambda chunk: chunk[EXAMPLE_ID])),
            "graph": _one_thread(chunks.map(lambda chunk, g=graph: (chunk, g(chunk)))),
        }
        python = {
            element[EXAMPLE_ID]: {name: element[name] for name in names}
            for element in versions["python"].as_numpy_iterator()
        }
        graph_out = {}
        for chunk, values in versions["graph"]:
            masks = chunk[PARAGRAPH_MASK].numpy()
            for b, example_id in enumerate(chunk[EXAMPLE_ID].numpy()):
                rows = int(masks[b].sum())
                graph_out[example_id] = {
                    name: (value[b].numpy() if not isinstance(value, tf.RaggedTensor)
                           else value[b].numpy())[..., :rows]
                    for name, value in values.items()
                }
        common = [key for key in python if key in graph_out]
        seconds = {version: _steady_pass(dataset) for version, dataset in versions.items()}
        count = len(python)
        row = {
            "examples": count,
            "python_ms": 1000 * (seconds["python"] - seconds["none"]) / count,
            "graph_ms": 1000 * (seconds["graph"] - seconds["chunks"]) / count,
            "pass_without_ms": 1000 * seconds["none"] / count,
        }
        row["speedup"] = row["python_ms"] / max(row["graph_ms"], 1e-9)
        row["agreement"] = _agreement(
            label, [graph_out[key] for key in common], [python[key] for key in common]
        )
        results[label] = row
        print(f"  {label}: python {row['python_ms']:.2f} ms, graph {row['graph_ms']:.2f} ms "
              f"per example ({row['speedup']:.1f}x); agreement {row['agreement']}")
    return results


def _agreement(label, graph, python):
    feature = {"ranker_targets": "ranker_targets", "seal_labels": "proxy_labels",
               "oracle_labels": "oracle_labels"}[label]
    top, largest, mean = [], 0.0, []
    for a, b in zip(graph, python):
        x, y = a[feature], b[feature]
        largest = max(largest, float(np.abs(x - y).max()))
        mean.append(float(np.abs(x - y).mean()))
        if label == "oracle_labels":
            both = np.count_nonzero((x > 0) & (y > 0))
            either = np.count_nonzero((x > 0) | (y > 0))
            top.append(both / max(either, 1))
        else:
            top.append(float(np.argmax(x) == np.argmax(y)))
    out = {
        "measure": "mean Jaccard of the extracts" if label == "oracle_labels"
        else "top row agrees",
        "value": float(np.mean(top)), "max_abs_diff": largest,
        "mean_abs_diff": float(np.mean(mean)),
    }
    if label == "seal_labels":
        segments = []
        for a, b in zip(graph, python):
            x, y = a["segment_labels"], b["segment_labels"]
            real = y.sum(axis=1) > 0
            if real.any():
                segments.append(float(np.mean(
                    np.argmax(x[real], axis=1) == np.argmax(y[real], axis=1))))
        out["segment_top_row_agrees"] = float(np.mean(segments))
        out["segment_max_abs_diff"] = float(max(
            np.abs(a["segment_labels"] - b["segment_labels"]).max() for a, b in zip(graph, python)
        ))
    return out


# ------------------------------------------------------------ report


def _markdown(result):
    lines = [
        "# Input pipeline: time per stage, per family (issue 58)",
        "",
        f"Measured {result['date']} on {result['machine']} by `benchmarks/data_stages.py` "
        f"(one run, one thread: intra/inter-op parallelism 1, tf.data private pool 1; "
        f"CPU time of the process, the least of {REPEATS} passes; the first {result['examples']} examples of each "
        "recipe's bundled train sample; bundled 32k SentencePiece vocabulary; the tiny "
        "configs' structures). CPU ms per example.",
        "",
    ]
    stage_names = ["reading", "rendering", "paragraphs", "splitting", "tokenizing", "packing",
                   "placing rows", "ranking", "graph (similarity)", "graph (discourse)",
                   "target tokenizing"]
    header = "| stage | " + " | ".join(row["recipe"] for row in result["rows"]) + " |"
    lines += [header, "|---" * (len(result["rows"]) + 1) + "|"]
    for name in stage_names + ["structurer total (no graph)", "label extras (python)",
                               "label extras (graph)"]:
        cells = []
        for row in result["rows"]:
            value = row["stages_ms"].get(name.replace(" (no graph)", ""))
            if name == "label extras (python)":
                value = sum(e["python_ms"] for e in row["extras"].values()) or None
            if name == "label extras (graph)":
                value = sum(e["graph_ms"] for e in row["extras"].values()) or None
            cells.append("–" if value is None else f"{value:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Share of the per-example total (reading + rendering + structurer + "
              "target + extras in Python, i.e. the path before issue 58):", ""]
    lines += [header, "|---" * (len(result["rows"]) + 1) + "|"]
    for name in ["reading", "rendering", "splitting", "tokenizing", "packing", "ranking",
                 "graph (discourse)", "label extras (python)"]:
        cells = []
        for row in result["rows"]:
            total = row["before_total_ms"]
            value = row["stages_ms"].get(name)
            if name == "label extras (python)":
                value = sum(e["python_ms"] for e in row["extras"].values()) or None
            cells.append("–" if value is None else f"{100 * value / total:.0f}%")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Label extras: in Python (rouge-score words, py_function) vs in the "
              "graph (ids)", "",
              "| extra | recipe | examples | Python ms/example | graph ms/example | "
              "speed-up | agreement | max abs diff | mean abs diff |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        for label, extra in row["extras"].items():
            agreement = extra["agreement"]
            lines.append(
                f"| {label} | {row['recipe']} | {extra['examples']} | {extra['python_ms']:.2f} "
                f"| {extra['graph_ms']:.2f} | {extra['speedup']:.1f}× | "
                f"{agreement['measure']}: {agreement['value']:.3f} | "
                f"{agreement['max_abs_diff']:.3f} | {agreement['mean_abs_diff']:.4f} |"
            )
            if "segment_top_row_agrees" in agreement:
                lines.append(
                    f"| segment_labels | {row['recipe']} | | | | | top row per segment "
                    f"agrees: {agreement['segment_top_row_agrees']:.3f} | "
                    f"{agreement['segment_max_abs_diff']:.3f} | |"
                )
    lines += ["", result.get("conclusion", ""), ""]
    return "\n".join(lines)


def _write(args, rows, started):
    """Writes the rows measured so far (after every row: a run cut short
    keeps its figures)."""
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, TF {tf.__version__}, "
                   f"load {os.getloadavg()[0]:.1f}",
        "examples": args.examples, "rows": rows,
        "seconds": time.perf_counter() - started,
    }
    conclusion_path = args.out + "_conclusion.md"
    if os.path.exists(conclusion_path):
        with open(conclusion_path, encoding="utf-8") as handle:
            result["conclusion"] = handle.read().strip()
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(_markdown(result))
    return result


def sentence_chunks(name, vocabulary, count):
    """The structurer's inputs up to its sentences, for one row of `_structures`.

    Returns:
        `(structure, base, chunks, examples)`: the row's `ExampleStructure`,
        a `TextStructurer` of that structure ranking in order and without
        graphs, per chunk of `CHUNK` examples a dict of `documents`,
        `title`, `query`, `paragraphs` (`structuring.text.paragraphs`) and
        `sentences` (`TextStructurer._sentences`), and the number of
        examples read (the first `count` of the row's bundled train split).
    """
    from keras_hsum.data.corpora import sample_path
    from keras_hsum.data.structurer import TextStructurer
    from keras_hsum.data.structuring import text as text_lib

    for label, dataset, structure, _ in _structures(vocabulary):
        if label == name:
            break
    else:
        raise ValueError(f"Unknown recipe {name!r}; expected one of data_stages' rows.")
    _, raws, _ = _read_and_render(sample_path(dataset, "train"), count)
    options = dict(structure.options)
    for key in ("graph_kind", "graph_options"):
        options.pop(key, None)
    options["rank"] = "order" if "rank" in options else options.get("rank")
    options = {k: v for k, v in options.items() if v is not None}
    base = TextStructurer(vocabulary, structure.family, structure.max_units,
                          structure.max_tokens, **options)
    chunks = []
    for documents, title, query, _ in _chunks(raws):
        paragraphs = text_lib.paragraphs(documents, base._patterns.strip)
        chunks.append(dict(documents=documents, title=title, query=query,
                           paragraphs=paragraphs, sentences=base._sentences(paragraphs)))
    return structure, base, chunks, len(raws)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=32)
    parser.add_argument("--recipes", nargs="*", default=None,
                        help="labels of the rows to measure (default: all)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "data_stages"))
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    from keras_hsum.data.corpora import sample_path
    from keras_hsum.data.corpora import sample_tokenizer_path
    from keras_hsum.data.vocabulary import Vocabulary

    vocabulary = Vocabulary.load(sample_tokenizer_path())
    rows = []
    started = time.perf_counter()
    for label, dataset, structure, extras in _structures(vocabulary):
        if args.recipes and label.split()[0] not in args.recipes:
            continue
        path = sample_path(dataset, "train")
        examples, raws, reading = _read_and_render(path, args.examples)
        count = len(raws)
        print(f"{label}: {dataset}, {count} examples, family {structure.family}")
        times = _structurer_stages(structure, vocabulary, _chunks(raws), label == "ht")
        stages = {name: 1000 * seconds / count
                  for name, seconds in _stage_costs(times, structure.family).items()}
        stages["reading"] = 1000 * reading["reading"] / count
        stages["rendering"] = 1000 * reading["rendering"] / count
        stages["raw generator"] = 1000 * reading["raw_generator"] / count
        for name, value in stages.items():
            print(f"  {name}: {value:.2f} ms")
        extra_rows = _extras(structure, vocabulary, examples, raws, extras)
        before = (stages["reading"] + stages["rendering"] + stages["structurer total"]
                  + stages["target tokenizing"] + sum(e["python_ms"] for e in extra_rows.values()))
        rows.append({
            "recipe": label, "dataset": dataset, "family": structure.family,
            "examples": count, "max_units": structure.max_units,
            "max_tokens": structure.max_tokens, "family_options": {
                k: v for k, v in structure.options.items() if isinstance(v, (str, int, float))
            },
            "stages_ms": stages, "extras": extra_rows, "before_total_ms": before,
        })
        result = _write(args, rows, started)
    print(f"wrote {args.out}.json and .md in {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
