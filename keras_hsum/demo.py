"""The README's main job, end to end on the real data bundled with the package.

1. trains the tiny PHT recipe (Ma & Zong's parallel hierarchical
   transformer) on the bundled QMSum gold-span sample (300 real meeting
   excerpts with their query-focused summaries) with a progress bar —
   vocabulary, tf.data pipeline, `model.fit`, checkpoints, exactly what
   `keras-hsum train --recipe pht --config tiny` does;
2. exports it as a text-in/text-out SavedModel (preprocessing, encoder and
   beam search all in the graph: what TF Serving would load);
3. reloads the SavedModel and summarizes one held-out meeting excerpt from
   its raw text, printing the summary beside the reference with ROUGE (and
   the Lead-3 and TextRank baselines for scale);
4. writes the paragraph-attention heatmap (which paragraphs each summary
   token attended to) as a PNG, and a JSON report.

A tiny model trained for a few CPU minutes writes rough summaries; the point
is the whole path running on real data. `benchmarks/` and the README's
results table measure the recipes trained for longer.
"""

import json
import os
import time

from keras_hsum.features import SUMMARY

DATASET = "qmsum_goldspan"
RECIPE = "pht"
# The tiny recipe's 6 epochs take about 2 minutes on 2 cores; the demo trains
# longer (still well inside the 15-minute budget) for a less rough summary.
DEMO_EPOCHS = 16


def _rouge(prediction, reference):
    from keras_hsum.evaluation import rouge

    scores = rouge.score(prediction, reference, metrics=("rouge1", "rouge2", "rougeL"))
    return {k: round(100 * v["f1"], 2) for k, v in scores.items()}


def _wrap(text, width=100, indent="    "):
    import textwrap

    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent)


def run(out_dir="demo_out", epochs=None, steps_per_epoch=None, example_index=0):
    """Runs the demo into `out_dir` (run folder, SavedModel, PNG, report).

    Args:
        out_dir: output folder (a second run resumes/extends the training run
            in it and exports the next SavedModel version).
        epochs, steps_per_epoch: the schedule (default: DEMO_EPOCHS of the
            tiny recipe's steps; tests use a few steps).
        example_index: which held-out example to summarize.

    Returns:
        0 on success (the process exit code).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from keras_hsum import recipes
    from keras_hsum.data.corpora import sample_path
    from keras_hsum.data.reader import read_jsonl
    from keras_hsum.evaluation import baselines
    from keras_hsum.export import exporter
    from keras_hsum.training import train

    start_all = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    data_folder = os.path.dirname(sample_path(DATASET, "train"))
    report = {"dataset": DATASET, "recipe": RECIPE, "data": data_folder}

    recipe = recipes.declaration(RECIPE)
    config = recipe.config("tiny")
    config = config.replace(epochs=DEMO_EPOCHS if epochs is None else epochs)
    if steps_per_epoch is not None:
        config = config.replace(steps_per_epoch=steps_per_epoch)
    run_dir = os.path.join(out_dir, "run")
    print(
        f"[1/4] Training the tiny {RECIPE.upper()} recipe on the bundled real "
        f"{DATASET} sample ({data_folder}): {config.epochs} epochs x "
        f"{config.steps_per_epoch} steps -> {run_dir}"
    )
    start = time.perf_counter()
    result = train(
        recipe, config, out=run_dir, data=data_folder,
        recipe_name=RECIPE, config_name="tiny", verbose=1,
    )
    seconds = time.perf_counter() - start
    history = result.history
    print(
        f"    {result.steps} steps in {seconds / 60:.1f} min; validation loss by epoch: "
        + ", ".join(f"{v:.2f}" for v in history.get("val_loss", []))
    )
    report["training"] = {
        "steps": result.steps,
        "seconds": seconds,
        "val_loss": history.get("val_loss", []),
        "val_accuracy": history.get("val_accuracy", []),
    }

    saved_models = os.path.join(out_dir, "saved_models", RECIPE)
    print(f"[2/4] Exporting a text-in/text-out SavedModel -> {saved_models}")
    start = time.perf_counter()
    version_path = exporter.export_run(
        run_dir, saved_models, recipes=recipes, options=exporter.ExportOptions(
            beam_size=4, block_ngrams=3, block_recent=2, length_alpha=0.6, serving_root=None,
        ),
    )
    report["export"] = {"path": version_path, "seconds": time.perf_counter() - start}
    print(f"    wrote {version_path} in {report['export']['seconds']:.0f} s")

    examples = list(read_jsonl(sample_path(DATASET, "val")))
    example = examples[example_index % len(examples)]
    print(
        f"[3/4] Summarizing held-out example {example.id} from its raw text with the "
        "reloaded SavedModel"
    )
    path, loaded, _ = exporter.load_saved_model(version_path)
    start = time.perf_counter()
    outputs = exporter.summarize_examples(loaded, [example])[0]
    seconds = time.perf_counter() - start
    summary = exporter.as_text(outputs[SUMMARY])
    if example.query:
        print(_wrap(f"Query: {example.query}"))
    print(f"    Input: {example.num_words():,} words in "
          f"{sum(len(d.sections) for d in example.documents)} section(s)")
    print("    Reference:")
    print(_wrap(example.summary))
    systems = {
        f"{RECIPE.upper()} (tiny, SavedModel)": summary,
        "Lead-3": " ".join(baselines.lead3(example).sentences),
        "TextRank": " ".join(baselines.textrank(example).sentences),
    }
    report["example"] = {"id": example.id, "reference": example.summary,
                         "summarize_seconds": seconds, "systems": {}}
    for name, text in systems.items():
        scores = _rouge(text, example.summary)
        print(f"    {name} (ROUGE-1/2/L F1 {scores['rouge1']}/{scores['rouge2']}/"
              f"{scores['rougeL']}):")
        print(_wrap(text or "(empty)"))
        report["example"]["systems"][name] = {"summary": text, "rouge": scores}

    heatmap = os.path.join(out_dir, "paragraph_attention.png")
    print(f"[4/4] Writing the paragraph-attention heatmap -> {heatmap}")
    exporter.write_explanations(heatmap, [example], [outputs])
    report["heatmap"] = heatmap
    report["seconds"] = time.perf_counter() - start_all

    report_path = os.path.join(out_dir, "demo_report.json")
    with open(report_path, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, default=str)
    print(f"Wrote {report_path} ({report['seconds'] / 60:.1f} min in all)")
    return 0
