"""Evaluation reports: score a system on examples, write JSON, markdown, PNG.

A report is a plain, JSON-serialisable dict:

```
{"system": str, "dataset": str, "num_examples": N,
 "references": "primary" | "max" | "mean" | "max_rouge1", "metrics": [...],
 "bootstrap": {"num_resamples": B, "confidence": 0.95, "seed": 0},
 "aggregate": {metric: {measure: {"mean", "low", "high"}}},   # in [0, 1]
 "examples": [{"id": str, "summary": str,
               "scores": {metric: {"precision", "recall", "f1"}}}],
 "seconds": float}
```
Scores are fractions; `markdown_table` and `plot` show them x100.
"""

import json
import os
import time

from keras_hsum.evaluation import rouge

REFERENCE_MODES = ("primary", "max", "mean", "max_rouge1")


def scored_references(example, mode):
    """The references `--references mode` scores `example` against: its
    `summary` for "primary", else its non-blank `references` (or the
    summary when it has none). Raises ValueError when there is none."""
    if mode == "primary":
        if not example.summary.strip():
            raise ValueError(
                f"Example {example.id!r} has no reference summary; expected "
                "one to score against. Filter such examples out."
            )
        return (example.summary,)
    references = tuple(r for r in example.references if r.strip())
    if not references and example.summary.strip():
        references = (example.summary,)
    if not references:
        raise ValueError(
            f"Example {example.id!r} has no reference summary; expected at "
            "least one to score against."
        )
    return references


def _outputs(system, examples):
    if callable(system):
        return [system(example) for example in examples]
    if isinstance(system, dict):
        missing = [e.id for e in examples if e.id not in system]
        if missing:
            raise KeyError(
                f"The precomputed outputs lack {len(missing)} example ids "
                f"(first: {missing[:3]}); expected a summary for every "
                "example id."
            )
        return [system[e.id] for e in examples]
    outputs = list(system)
    if len(outputs) != len(examples):
        raise ValueError(
            f"Expected one precomputed summary per example ({len(examples)}), "
            f"received {len(outputs)}."
        )
    return outputs


def _as_text(output):
    if hasattr(output, "text") and callable(output.text):
        return output.text()  # an `Extract`
    if isinstance(output, (list, tuple)):
        return "\n".join(output)
    if not isinstance(output, str):
        raise TypeError(
            "A system must return a summary str (or a list of sentences / an "
            f"Extract); received {type(output).__name__}."
        )
    return output


def evaluate(
    system,
    examples,
    name="system",
    metrics=rouge.METRICS,
    references="primary",
    num_resamples=1000,
    confidence=0.95,
    seed=0,
    sentence_splitter=None,
):
    """Scores a system's summaries of `examples` with ROUGE.

    Args:
        system: a callable `Example -> summary` (str, list of sentences or
            `Extract`), or precomputed outputs: a dict id -> str, or a
            sequence of N str aligned with `examples`.
        examples: a sequence of N `Example`s.
        name: the system's name in the report.
        metrics: rouge-score metrics.
        references: "primary" scores against `example.summary` only;
            "max"/"mean"/"max_rouge1" score against every reference
            (`rouge.score`'s `multi_reference`).
        num_resamples, confidence, seed: the bootstrap interval of each
            mean (`rouge.bootstrap_interval`).
        sentence_splitter: splitter for ROUGE-Lsum (`rouge.lines_for_lsum`).

    Returns:
        A report dict (see the module docstring).
    """
    if references not in REFERENCE_MODES:
        raise ValueError(
            f"`references` must be one of {REFERENCE_MODES}, received {references!r}."
        )
    examples = list(examples)
    if not examples:
        raise ValueError("Expected at least one example to evaluate, received none.")
    start = time.perf_counter()
    summaries = [_as_text(o) for o in _outputs(system, examples)]
    per_example, _ = rouge.score_corpus(
        summaries,
        [scored_references(e, references) for e in examples],
        metrics,
        "max" if references == "primary" else references,
        sentence_splitter,
    )
    metrics = list(per_example[0])
    aggregate = {
        metric: {
            measure: rouge.bootstrap_interval(
                [s[metric][measure] for s in per_example], num_resamples, confidence, seed
            )
            for measure in rouge.MEASURES
        }
        for metric in metrics
    }
    datasets = sorted({e.dataset for e in examples})
    return {
        "system": name,
        "dataset": ",".join(datasets),
        "num_examples": len(examples),
        "references": references,
        "metrics": metrics,
        "bootstrap": {
            "num_resamples": num_resamples,
            "confidence": confidence,
            "seed": seed,
        },
        "aggregate": aggregate,
        "examples": [
            {"id": e.id, "summary": text, "scores": scores}
            for e, text, scores in zip(examples, summaries, per_example)
        ],
        "seconds": time.perf_counter() - start,
    }


def compare(report_a, report_b, metric="rouge2", measure="f1", num_resamples=1000, seed=0):
    """Paired bootstrap of two reports over the same examples.

    Returns:
        `rouge.paired_bootstrap`'s dict for mean(A) - mean(B).
    """
    ids_a = [e["id"] for e in report_a["examples"]]
    ids_b = [e["id"] for e in report_b["examples"]]
    if ids_a != ids_b:
        raise ValueError(
            "Expected two reports on the same examples in the same order; "
            f"received {len(ids_a)} and {len(ids_b)} examples with different ids."
        )
    return rouge.paired_bootstrap(
        [e["scores"][metric][measure] for e in report_a["examples"]],
        [e["scores"][metric][measure] for e in report_b["examples"]],
        num_resamples=num_resamples,
        seed=seed,
    )


def write_json(report, path):
    """Writes a report (or a list of reports) as indented UTF-8 JSON."""
    directory = os.path.dirname(os.fspath(path))
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, ensure_ascii=False)


_LABELS = {"rouge1": "R-1", "rouge2": "R-2", "rougeL": "R-L", "rougeLsum": "R-Lsum"}


def markdown_table(reports, measure="f1"):
    """A markdown table: one row per report, mean x100 [95% CI] per metric.

    Args:
        reports: a report dict or a list of them.
        measure: "precision", "recall" or "f1".

    Returns:
        str.
    """
    reports = [reports] if isinstance(reports, dict) else list(reports)
    metrics = reports[0]["metrics"]
    header = ["system", "dataset", "N"] + [_LABELS.get(m, m) for m in metrics]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * 3 + ["---:"] * len(metrics)) + "|",
    ]
    for report in reports:
        cells = [report["system"], report["dataset"], str(report["num_examples"])]
        for metric in metrics:
            value = report["aggregate"][metric][measure]
            cells.append(
                f"{100 * value['mean']:.2f} [{100 * value['low']:.2f}, "
                f"{100 * value['high']:.2f}]"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_markdown(reports, path, measure="f1"):
    """Writes `markdown_table(reports, measure)` to `path` (its folder is
    created)."""
    directory = os.path.dirname(os.fspath(path))
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(markdown_table(reports, measure))


def plot(reports, path, measure="f1", title=None):
    """Writes a PNG bar chart comparing systems, with CI error bars.

    Groups of bars per metric, one bar per report, height = mean x100,
    error bars = the bootstrap interval.

    Args:
        reports: a report dict or a list of them (same metrics).
        path: the PNG file to write.
        measure: "precision", "recall" or "f1".
        title: the chart title, also the PNG's "Title" text chunk (default:
            the examples' `dataset` fields).

    Raises:
        ImportError: when matplotlib is missing (`pip install
            keras-hsum[bench]`).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            "Plotting needs matplotlib, which is not installed; install it "
            "with `pip install 'keras-hsum[bench]'` (or `pip install "
            f"matplotlib`). Original error: {error}"
        ) from None
    import numpy as np

    reports = [reports] if isinstance(reports, dict) else list(reports)
    if not reports:
        raise ValueError("Expected at least one report to plot, received none.")
    metrics = reports[0]["metrics"]
    positions = np.arange(len(metrics))
    width = 0.8 / len(reports)
    figure, axes = plt.subplots(figsize=(1.6 + 1.4 * len(metrics) * max(1, len(reports) / 2), 4))
    for i, report in enumerate(reports):
        values = [report["aggregate"][m][measure] for m in metrics]
        means = np.array([100 * v["mean"] for v in values])
        errors = np.array(
            [[100 * (v["mean"] - v["low"]) for v in values],
             [100 * (v["high"] - v["mean"]) for v in values]]
        )
        axes.bar(
            positions + (i - (len(reports) - 1) / 2) * width,
            means,
            width,
            yerr=np.maximum(errors, 0.0),
            capsize=3,
            label=report["system"],
        )
    axes.set_xticks(positions)
    axes.set_xticklabels([_LABELS.get(m, m) for m in metrics])
    axes.set_ylabel(f"ROUGE {measure} x100")
    confidence = reports[0]["bootstrap"]["confidence"]
    title = title or (f"{', '.join(sorted({r['dataset'] for r in reports}))} "
                      f"(error bars: {100 * confidence:.0f}% bootstrap CI)")
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    directory = os.path.dirname(os.fspath(path))
    if directory:
        os.makedirs(directory, exist_ok=True)
    figure.savefig(path, format="png", dpi=120, metadata={"Title": title})
    plt.close(figure)
