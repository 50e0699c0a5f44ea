"""The structurer's SentencePiece tokenizing: exactness and time (issue 58, item 3c).

`keras_hsum.data.structuring.tokens.graph_tokenizer` runs tensorflow-text's
compiled unigram tokenizer (`FastSentencepieceTokenizer`) where it gives
the `sentencepiece` package's ids, else the library op
(`tf_text.SentencepieceTokenizer`). This script measures, in one run:

- exactness: on every sentence the structurer tokenizes in every bundled
  corpus (all splits; documents rendered as a SavedModel receives them,
  split by the graph splitter) and on their titles, queries, summaries
  and references, the number of texts where each op's ids differ from
  `Vocabulary.encode` (the package), for the bundled 32k model and a 4k
  model trained by `Vocabulary.train` on scisummnet + qmsum_general
  (the tests' vocabulary);
- time, on ONE thread (intra/inter-op parallelism 1), CPU time of the
  process, the least of `REPEATS` passes, over the sentences of the first
  32 train examples of scisummnet, qmsum_general and qmsum_goldspan (the
  discourse, seal and ht recipes' corpora), bundled 32k model, each in a
  `tf.function`: the library op, the compiled op, `graph_tokenizer`, and
  the sentence table (`tokens.sentence_table`) against its previous
  version, which dropped the sentences without tokens with
  `tf.ragged.boolean_mask` (copying every id) instead of changing the row
  partition alone. CPU ms per example and the ratios.

Usage (from the repository root; about 1 min idle):
    python benchmarks/tokenizer_ops.py
Writes benchmarks/results/tokenizer_ops.json and .md.
"""

import argparse
import datetime
import itertools
import json
import os
import platform
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402
import tensorflow_text as tf_text  # noqa: E402

from data_stages import _best  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
REPEATS = 7
CHUNK = 32
TIMED = ("scisummnet", "qmsum_general", "qmsum_goldspan")


def _sentences(raws):
    """The graph splitter's sentences of `raws` (raw_examples' dicts),
    chunk by chunk as the structurer reads them: (text, paragraph,
    paragraphs) per chunk of 32."""
    from keras_hsum.data.structuring import text as text_lib
    from keras_hsum.data.structuring.character_classes import patterns
    from keras_hsum.data.structuring.sentences import split_sentences

    found = patterns()
    chunks = []
    for start in range(0, len(raws), CHUNK):
        part = raws[start : start + CHUNK]
        width = max(len(raw["documents"]) for raw in part)
        documents = tf.constant(
            [list(raw["documents"]) + [""] * (width - len(raw["documents"])) for raw in part]
        )
        paragraphs = text_lib.paragraphs(documents, found.strip)
        text, paragraph = split_sentences(paragraphs[0], found)
        chunks.append((text, paragraph, paragraphs))
    return chunks


def _raws(path, count=None):
    from keras_hsum.data.pipeline_report import PipelineReport
    from keras_hsum.data.raw_examples import raw_examples

    examples = raw_examples(path, PipelineReport(), False, True, False, "strict", [])
    return list(itertools.islice(examples, count))


def _corpus_texts():
    """{corpus: [str]}: every sentence the structurer tokenizes, titles,
    queries, summaries and references, of every bundled split."""
    from keras_hsum.data.corpora import SAMPLE_ROOT

    texts = {}
    for corpus in sorted(os.listdir(SAMPLE_ROOT)):
        folder = os.path.join(SAMPLE_ROOT, corpus)
        if corpus == "tokenizers" or not os.path.isdir(folder):
            continue
        out = []
        for name in sorted(os.listdir(folder)):
            raws = _raws(os.path.join(folder, name))
            for text, _, _ in _sentences(raws):
                out += [t.decode("utf-8") for t in text.numpy()]
            for raw in raws:
                out += [raw[key] for key in ("title", "query", "summary") if raw[key]]
                out += [str(r) for r in raw["references"]]
        texts[corpus] = out
    return texts


def _exactness(vocabularies, texts):
    """Per vocabulary and corpus: texts, and how many each op gets wrong."""
    from keras_hsum.data.structuring import tokens

    rows = []
    for name, vocabulary in vocabularies.items():
        library = tf_text.SentencepieceTokenizer(model=vocabulary.proto, out_type=tf.int32)
        compiled = tf_text.FastSentencepieceTokenizer(vocabulary.proto)
        graph = tokens.graph_tokenizer(vocabulary.proto, None)
        for corpus, values in texts.items():
            expected = vocabulary.encode_batch(values)
            batch = tf.constant(values)
            got = {
                "library": library.tokenize(batch).to_list(),
                "compiled": compiled.tokenize(batch).to_list(),
                "graph_tokenizer": graph.tokenize(batch).to_list(),
            }
            row = {"vocabulary": name, "corpus": corpus, "texts": len(values)}
            for op, ids in got.items():
                wrong = [i for i, (a, b) in enumerate(zip(ids, expected)) if a != b]
                row[f"{op}_differs"] = len(wrong)
                row[f"{op}_examples"] = [values[i][:80] for i in wrong[:3]]
            rows.append(row)
            print(f"  {name} {corpus}: {len(values)} texts; differ from the package: "
                  f"library {row['library_differs']}, compiled {row['compiled_differs']}, "
                  f"graph_tokenizer {row['graph_tokenizer_differs']}", flush=True)
    return rows


def _previous_sentence_table(ids, text, paragraph, paragraphs):
    """tokens.sentence_table before issue 58 item 3c (the ids part): the
    sentences without tokens dropped by `tf.ragged.boolean_mask`."""
    lengths = tf.cast(ids.row_lengths(), tf.int32)
    nonempty = lengths > 0
    return (
        tf.ragged.boolean_mask(ids, nonempty),
        tf.boolean_mask(lengths, nonempty),
        tf.boolean_mask(text, nonempty),
        tf.gather(paragraphs[1], tf.boolean_mask(paragraph, nonempty)),
    )


def _times(vocabulary):
    from keras_hsum.data.corpora import sample_path
    from keras_hsum.data.structuring import tokens

    library = tf_text.SentencepieceTokenizer(model=vocabulary.proto, out_type=tf.int32)
    compiled = tf_text.FastSentencepieceTokenizer(vocabulary.proto)
    graph = tokens.graph_tokenizer(vocabulary.proto, None)
    spec = [tf.TensorSpec([None], tf.string)]
    ops = {
        "library op": tf.function(lambda t: library.tokenize(t), input_signature=spec),
        "compiled op": tf.function(lambda t: compiled.tokenize(t), input_signature=spec),
        "graph_tokenizer": tf.function(lambda t: graph.tokenize(t), input_signature=spec),
    }
    tables = {
        "sentence table (before)": tf.function(_previous_sentence_table),
        "sentence table": tf.function(tokens.sentence_table),
    }
    rows = []
    for corpus in TIMED:
        raws = _raws(sample_path(corpus, "train"), CHUNK)
        (text, paragraph, paragraphs), = _sentences(raws)
        ids = graph.tokenize(text)
        count = len(raws)
        row = {"corpus": corpus, "examples": count, "sentences": int(tf.shape(text)[0]),
               "pieces": int(tf.size(ids.flat_values))}
        for name, function in ops.items():
            function(text)
            row[name] = 1000 * _best(lambda: function(text), REPEATS) / count
        for name, function in tables.items():
            function(ids, text, paragraph, paragraphs)
            row[name] = 1000 * _best(lambda: function(ids, text, paragraph, paragraphs), REPEATS) / count
        row["op speed-up"] = row["library op"] / row["compiled op"]
        row["table speed-up"] = row["sentence table (before)"] / row["sentence table"]
        before = row["library op"] + row["sentence table (before)"]
        after = row["graph_tokenizer"] + row["sentence table"]
        row["tokenizing before"], row["tokenizing after"] = before, after
        row["tokenizing speed-up"] = before / after
        rows.append(row)
        print("  " + ", ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
        ), flush=True)
    return rows


def _markdown(result):
    lines = [
        "# SentencePiece in the structurer: exactness and time (issue 58, item 3c)",
        "",
        f"Measured {result['date']} on {result['machine']} by `benchmarks/tokenizer_ops.py` "
        "(see its docstring).",
        "",
        "## Texts whose ids differ from the sentencepiece package (`Vocabulary.encode`)",
        "",
        "| vocabulary | corpus | texts | library op | compiled op | graph_tokenizer |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["exactness"]:
        lines.append(
            f"| {row['vocabulary']} | {row['corpus']} | {row['texts']} | "
            f"{row['library_differs']} | {row['compiled_differs']} | "
            f"{row['graph_tokenizer_differs']} |"
        )
    lines += [
        "",
        "## CPU ms per example, one thread (first 32 train examples, bundled 32k model)",
        "",
        "| corpus | sentences | pieces | library op | compiled op | op speed-up "
        "| graph_tokenizer | sentence table before | sentence table | table speed-up "
        "| tokenizing before | tokenizing after | speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["times"]:
        lines.append(
            f"| {row['corpus']} | {row['sentences']} | {row['pieces']} | "
            f"{row['library op']:.2f} | {row['compiled op']:.2f} | {row['op speed-up']:.1f}× | "
            f"{row['graph_tokenizer']:.2f} | {row['sentence table (before)']:.2f} | "
            f"{row['sentence table']:.2f} | {row['table speed-up']:.1f}× | "
            f"{row['tokenizing before']:.2f} | {row['tokenizing after']:.2f} | "
            f"{row['tokenizing speed-up']:.1f}× |"
        )
    lines += [
        "",
        "Tokenizing before = library op + sentence table before; after = "
        "graph_tokenizer + sentence table.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(RESULTS, "tokenizer_ops"))
    parser.add_argument("--skip-exactness", action="store_true")
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    from keras_hsum.data import corpora
    from keras_hsum.data import reader
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.data.vocabulary import corpus_sentences

    bundled = Vocabulary.load(corpora.sample_tokenizer_path())
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, TF {tf.__version__}, "
                   f"tensorflow-text {tf_text.__version__}, load {os.getloadavg()[0]:.1f}",
    }
    print("time (CPU ms per example, one thread):", flush=True)
    result["times"] = _times(bundled)
    result["exactness"] = []
    if not args.skip_exactness:
        examples = tuple(reader.read_jsonl(corpora.sample_path("scisummnet", "train"))) + tuple(
            reader.read_jsonl(corpora.sample_path("qmsum_general", "train"))
        )
        trained = Vocabulary.train(corpus_sentences(examples), vocabulary_size=4000)
        print("exactness:", flush=True)
        result["exactness"] = _exactness(
            {"bundled 32k": bundled, "trained 4k": trained}, _corpus_texts()
        )
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(_markdown(result))
    print(f"wrote {args.out}.json and .md")


if __name__ == "__main__":
    main()
