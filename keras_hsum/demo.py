"""The README's main job, on the real data bundled with the package.

Today it runs everything that exists end to end: a SentencePiece vocabulary
trained on real scientific papers (ScisummNet), every model family's tf.data
pipeline over held-out papers, and extractive summaries of one held-out paper
(Lead-3 and the greedy ROUGE oracle) printed beside its reference abstract
with ROUGE. It grows into "train a tiny recipe, export, summarize" as the
models, decoding and export land.
"""

import json
import os
import time

DATASET = "scisummnet"
FAMILIES = {
    # family: (P, T) of the tiny recipes that will use it
    "paragraphs": (16, 64),
    "sections": (4, 128),
    "snippets": (16, 64),
    "sentences": (32, 48),
}


def _rouge(prediction, reference):
    from keras_hsum.evaluation import rouge

    scores = rouge.score(prediction, reference, metrics=("rouge1", "rouge2", "rougeL"))
    return {k: round(100 * v["f1"], 2) for k, v in scores.items()}


def _wrap(text, width=100, indent="    "):
    import textwrap

    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent)


def run(out_dir="demo_out", vocabulary_size=8000):
    """Runs the demo; writes the vocabulary and a JSON report into `out_dir`.

    Returns:
        0 on success (the process exit code).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tqdm

    from keras_hsum.data import pipeline
    from keras_hsum.data import structure
    from keras_hsum.data.corpora import sample_path
    from keras_hsum.data.reader import read_jsonl
    from keras_hsum.data.vocabulary import Vocabulary
    from keras_hsum.data.vocabulary import corpus_sentences
    from keras_hsum.evaluation import baselines

    os.makedirs(out_dir, exist_ok=True)
    report = {"dataset": DATASET}
    train_path, val_path = sample_path(DATASET, "train"), sample_path(DATASET, "val")

    print(f"[1/3] Training a SentencePiece vocabulary on {train_path}")
    start = time.perf_counter()
    train = list(read_jsonl(train_path))
    vocabulary = Vocabulary.train(
        corpus_sentences(tqdm.tqdm(train, desc="    papers", unit="paper")),
        vocabulary_size=vocabulary_size,
    )
    vocabulary_path = os.path.join(out_dir, "spm.model")
    vocabulary.save(vocabulary_path)
    seconds = time.perf_counter() - start
    print(
        f"    {vocabulary.vocabulary_size} pieces from {len(train)} papers in "
        f"{seconds:.1f} s -> {vocabulary_path}"
    )
    report["vocabulary"] = {"size": vocabulary.vocabulary_size, "seconds": seconds}

    print(f"[2/3] Streaming every family's tf.data pipeline over {val_path}")
    report["pipelines"] = {}
    for family, (max_units, max_tokens) in FAMILIES.items():
        family_report = pipeline.PipelineReport()
        dataset = pipeline.make_dataset(
            val_path,
            vocabulary,
            family,
            batch_size=4,
            max_units=max_units,
            max_tokens=max_tokens,
            max_target_length=128,
            report=family_report,
        )
        start = time.perf_counter()
        shapes = None
        batches = 0
        for batch in tqdm.tqdm(dataset, desc=f"    {family}", unit="batch", leave=False):
            batches += 1
            shapes = shapes or {k: tuple(v.shape) for k, v in batch.items()}
        seconds = time.perf_counter() - start
        print(f"    {family} (P<={max_units}, T={max_tokens}): {batches} batches in {seconds:.2f} s")
        for name, shape in shapes.items():
            print(f"      {name:16s} {shape}")
        print(_wrap(str(family_report.truncation), indent="      "))
        report["pipelines"][family] = {
            "batches": batches,
            "seconds": seconds,
            "first_batch_shapes": shapes,
            "report": family_report.as_dict(),
        }

    print("[3/3] Extractive summaries of one held-out paper")
    example = next(iter(read_jsonl(val_path)))
    ranked = structure.build_paragraphs(example, vocabulary, 30, 100)
    print(f"    {example.id}: {example.title!r}, {example.num_words():,} words")
    print("    Paragraphs ranked by tf-idf similarity to the title (top 3):")
    for rank, (text, score) in enumerate(
        zip(ranked.texts[:3], ranked.features["rank_score"][:3]), start=1
    ):
        print(_wrap(f"{rank}. ({score:.3f}) {text[:220]}...", indent="      "))
    systems = {
        "Lead-3": " ".join(baselines.lead3(example).sentences),
        "Oracle": " ".join(
            baselines.oracle(example, references=[example.summary]).sentences
        ),
    }
    print("    Reference abstract:")
    print(_wrap(example.summary))
    report["example"] = {"id": example.id, "systems": {}}
    for name, text in systems.items():
        scores = _rouge(text, example.summary)
        print(f"    {name} (ROUGE-1/2/L F1 {scores['rouge1']}/{scores['rouge2']}/{scores['rougeL']}):")
        print(_wrap(text))
        report["example"]["systems"][name] = {"summary": text, "rouge": scores}

    report_path = os.path.join(out_dir, "demo_report.json")
    with open(report_path, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2)
    print(f"Wrote {report_path}")
    return 0
