"""The tables of the quality record, written from the stored reports:
benchmarks/results/quality.md (every row), quality_targets.md (the rows
that decide the target, against TextRank with paired intervals), the same
two between markers in docs/results.md, and the target rows without their
"how it came about" column between markers in the README."""

import datetime
import glob
import json
import os
import platform
import re

from . import layout, runs
from .choices import BEAM_GROUPS, LENGTH_GROUPS, RECENT_GROUPS, ROW_GROUPS
from .datasets import BASELINES, DATASETS, PUBLISHED
from .runs import RUN_BY_NAME, TARGET_ROWS

EXTRACTIVE_RECIPES = ("shte",)
BEGIN, END = "<!-- quality table: begin -->", "<!-- quality table: end -->"
TARGETS_BEGIN, TARGETS_END = "<!-- quality targets: begin -->", "<!-- quality targets: end -->"
SUMMARY_BEGIN, SUMMARY_END = "<!-- quality summary: begin -->", "<!-- quality summary: end -->"
RUNS_BEGIN, RUNS_END = "<!-- quality runs: begin -->", "<!-- quality runs: end -->"
CHOICES_BEGIN, CHOICES_END = "<!-- quality choices: begin -->", "<!-- quality choices: end -->"
# A stored row's ROUGE-1 / ROUGE-2 quoted in prose: "<!--score DATASET/SYSTEM-->R1 / R2<!--/score-->".
QUOTED_SCORE = re.compile(r"<!--score (?P<dataset>\w+)/(?P<system>[\w.-]+)-->"
                          r"\d+\.\d\d /(?P<space>\s+)\d+\.\d\d<!--/score-->")
TABLE = os.path.join(os.path.dirname(layout.RESULTS), "quality.md")
TARGETS = os.path.join(os.path.dirname(layout.RESULTS), "quality_targets.md")


def _cell(report, metric):
    value = report["aggregate"][metric]["f1"]
    return f"{100 * value['mean']:.2f} [{100 * value['low']:.2f}, {100 * value['high']:.2f}]"


def _checkpoint_label(training):
    ensembles = [r for r in training["runs"].values() if "+" in r.get("checkpoint", "")]
    if ensembles:
        members = [int(part[len("epoch-"):]) for part in ensembles[0]["checkpoint"].split("+")]
        consecutive = members == list(range(members[0], members[-1] + 1))
        named = (f"{members[0]} to {members[-1]}" if consecutive else
                 f"{', '.join(map(str, members[:-1]))} and {members[-1]}")
        return (f"; an ensemble of epochs {named} (the mean of their next-token "
                "distributions), chosen by the ROUGE of its decoded summaries on half of the "
                "training examples held out")
    averaged = [r for r in training["runs"].values()
                if r.get("checkpoint", "").startswith("epochs-")]
    if averaged:
        first, last = averaged[0]["checkpoint"].split("-")[1:]
        return (f"; the mean of the weights of epochs {first} to {last}, a window chosen by the "
                "ROUGE of its decoded summaries on half of the training examples held out")
    kept = [r for r in training["runs"].values() if r.get("checkpoint", "").startswith("epoch-")]
    if kept:
        return (f"; checkpoint of epoch {kept[0]['checkpoint'][len('epoch-'):]}, chosen by the "
                "ROUGE of its decoded summaries on half of the training examples held out")
    best = [r for r in training["runs"].values() if r.get("checkpoint") == "best"]
    if not best:
        return ""
    by = {"val_accuracy": " (token accuracy)", "val_reward": " (sample reward)"}.get(
        best[0].get("checkpoint_monitor"), "")
    if best[0].get("validation_holdout"):
        return (f"; best checkpoint{by} on {100 * best[0]['validation_holdout']:.0f}% of the "
                "training examples held out")
    return "; best validation-accuracy checkpoint" if by else "; best validation-loss checkpoint"


def measured_now():
    """When and where the rows are measured: "<date> on <machine>, <n> CPUs"."""
    return f"{datetime.date.today()} on {platform.machine()}, {os.cpu_count()} CPUs"


def _measured_before():
    """The measurement line of the stored table (a table written from the
    same reports keeps it), else `measured_now()`."""
    if os.path.exists(TABLE):
        with open(TABLE, encoding="utf-8") as handle:
            match = re.match(r"Measured (.*?), no GPU\.", handle.readline())
        if match:
            return match.group(1)
    return measured_now()


def _served_without_sections(system):
    run = RUN_BY_NAME.get(system)
    return run is not None and run.served_without_sections


def table(measured=None):
    """Writes every table from the stored reports. `measured`: when and
    where the rows were measured (`measured_now()` after evaluating); by
    default the stored table's."""
    lines = [
        f"Measured {measured or _measured_before()}, no GPU. ROUGE F1 x100 with 95% bootstrap "
        "intervals (1,000 resamples), rouge-score with stemming; ROUGE-Lsum "
        "puts one sentence per line. Models: trained by `keras-hsum "
        "train` within the stated wall-clock budget (two trainings shared the "
        "2 cores), exported, and evaluated from raw validation text through "
        "the SavedModel (`keras-hsum evaluate --model`).",
        "",
    ]
    summary = {}
    stored = {dataset: stored_reports(dataset) for dataset in DATASETS}
    for dataset in DATASETS:
        reports = list(stored[dataset].values())
        if not reports:
            continue
        models = [r for r in reports if "training" in r]
        baseline_rows = sorted(
            (r for r in reports if "training" not in r),
            key=lambda r: [b in r["system"].lower() for b in BASELINES].index(True)
            if any(b in r["system"].lower() for b in BASELINES) else 9,
        )
        textrank = next((r for r in baseline_rows if "textrank" in r["system"]), None)
        n = reports[0]["num_examples"]
        split = DATASETS[dataset].get("split", "val")
        lines += [
            f"### {dataset} ({'validation' if split == 'val' else split} split, {n} examples; "
            f"references: {DATASETS[dataset]['references']})",
            "",
            "| system | minutes / budget | steps | ROUGE-1 | ROUGE-2 | ROUGE-L | ROUGE-Lsum "
            "| beats TextRank R1 & R2 |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for report in models + baseline_rows:
            training = report.get("training")
            beats = ""
            if training and textrank:
                beats = "yes" if beats_textrank(report, textrank) else "no"
                summary[report["system"]] = beats
            lines.append(
                "| " + " | ".join([
                    report["system"] + (f" ({training['recipe']}" + _checkpoint_label(training)
                                        + ("; served without its sections, one per document"
                                           if _served_without_sections(report["system"])
                                           else "")
                                        + ")" if training else ""),
                    f"{training['minutes']:.0f} / {training['budget_minutes']}" if training else "",
                    str(training["steps"]) if training else "",
                    _cell(report, "rouge1"), _cell(report, "rouge2"),
                    _cell(report, "rougeL"), _cell(report, "rougeLsum"), beats,
                ]) + " |"
            )
        for label, values in PUBLISHED.get(dataset, []):
            cells = [f"{values[m]:.2f}" if m in values else ""
                     for m in ("rouge1", "rouge2", "rougeL", "rougeLsum")]
            lines.append(f"| published: {label} | | | " + " | ".join(cells) + " | |")
        lines.append("")
    text = "\n".join(lines)
    with open(TABLE, "w", encoding="utf-8") as f:
        f.write(text)
    replace_between_markers(layout.RESULTS_DOC, text)
    targets_text = targets(stored)
    with open(TARGETS, "w", encoding="utf-8") as f:
        f.write(targets_text)
    replace_between_markers(layout.RESULTS_DOC, targets_text, TARGETS_BEGIN, TARGETS_END)
    replace_between_markers(layout.README, target_summary(targets_text),
                            SUMMARY_BEGIN, SUMMARY_END)
    replace_between_markers(layout.RESULTS_DOC, run_table(stored), RUNS_BEGIN, RUNS_END)
    replace_between_markers(layout.RESULTS_DOC, choice_table(), CHOICES_BEGIN, CHOICES_END)
    with open(layout.RESULTS_DOC, encoding="utf-8") as handle:
        doc = handle.read()
    with open(layout.RESULTS_DOC, "w", encoding="utf-8") as handle:
        handle.write(quote_scores(doc, stored))
    print(text)
    print(targets_text)
    return summary


def recipe_of(system):
    """The recipe of a scored run (a report's "training" entry holds a
    composed label, "flat + copy + ...")."""
    return RUN_BY_NAME[system].recipe


def _signed_interval(comparison):
    return (f"{100 * comparison['difference']:+.2f} "
            f"[{100 * comparison['low']:+.2f}, {100 * comparison['high']:+.2f}]")


def stored_reports(dataset):
    """{system: report} of every report stored for `dataset`, by file name."""
    reports = {}
    for path in sorted(glob.glob(os.path.join(layout.RESULTS, dataset, "*.json"))):
        with open(path, encoding="utf-8") as handle:
            reports[os.path.basename(path)[:-len(".json")]] = json.load(handle)
    return reports


def beats_textrank(report, textrank):
    """Whether `report`'s mean ROUGE-1 and ROUGE-2 F1 are both above TextRank's."""
    return all(report["aggregate"][m]["f1"]["mean"] > textrank["aggregate"][m]["f1"]["mean"]
               for m in ("rouge1", "rouge2"))


def targets(stored=None):
    """The target table: each row of TARGET_ROWS against TextRank on the
    same examples, with the paired bootstrap interval of the difference
    (1,000 resamples, seed 0: `keras_hsum.evaluation.report.compare`), and
    per dataset how many trained rows are above TextRank on both metrics.
    `stored`: {dataset: `stored_reports(dataset)`} when already read."""
    from keras_hsum.evaluation import report as reporting

    lines = [
        "| dataset | deciding row | how it came about | ROUGE-1 | ROUGE-2 | TextRank | "
        "ROUGE-1 - TextRank [paired 95%] | ROUGE-2 - TextRank [paired 95%] | met |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    counts = []
    for dataset, rows in TARGET_ROWS.items():
        reports = stored[dataset] if stored else stored_reports(dataset)
        textrank = reports["textrank"]
        means = {m: 100 * textrank["aggregate"][m]["f1"]["mean"] for m in ("rouge1", "rouge2")}
        for name, why in rows:
            report = reports[name]
            scores = {m: 100 * report["aggregate"][m]["f1"]["mean"] for m in ("rouge1", "rouge2")}
            differences = {m: reporting.compare(report, textrank, metric=m)
                           for m in ("rouge1", "rouge2")}
            met = beats_textrank(report, textrank)
            lines.append(
                f"| {dataset} | `{name}` | {why} | {scores['rouge1']:.2f} | {scores['rouge2']:.2f} "
                f"| {means['rouge1']:.2f} / {means['rouge2']:.2f} "
                f"| {_signed_interval(differences['rouge1'])} "
                f"| {_signed_interval(differences['rouge2'])} | {'yes' if met else '**no**'} |")
        trained = [beats_textrank(report, textrank) for report in reports.values()
                   if "training" in report
                   and recipe_of(report["system"]) not in EXTRACTIVE_RECIPES]
        counts.append(f"{dataset} {sum(trained)} of {len(trained)}")
    lines += [
        "",
        "Abstractive rows above TextRank on both ROUGE-1 and ROUGE-2, of all the abstractive "
        "rows in each dataset's table (every variant scored, whatever chose it): "
        + "; ".join(counts) + ".",
        "",
    ]
    return "\n".join(lines)


def target_summary(targets_text):
    """The README's table: the rows of the target table (`targets()`) without
    their third column, "how it came about" (docs/results.md has it), and
    without the count line."""
    lines = []
    for line in targets_text.splitlines():
        if not line.startswith("|"):
            continue
        cells = line.strip("|").split("|")
        lines.append("|" + "|".join(cells[:2] + cells[3:]) + "|")
    return "\n".join(lines) + "\n"


def replace_between_markers(path, text, begin=BEGIN, end=END):
    """Puts `text` between the `begin` and `end` markers of the markdown file
    at `path` (if present); by default the quality-table markers."""
    with open(path, encoding="utf-8") as handle:
        readme = handle.read()
    if begin not in readme or end not in readme:
        return
    head, rest = readme.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"{head}{begin}\n{text}\n{end}{tail}")


# Short names of `Run.chosen_by` for the table of runs.
_HOW = {runs.EARLY: "early row", runs.DECLARED: "declared", runs.ROW_OF_RECORD: "row of record",
        runs.CANDIDATE: "candidate", runs.EXTRA: "extra row", runs.DIAGNOSIS: "diagnosis",
        runs.STAGE: "training stage"}


def _stored_choice(kind, group):
    path = os.path.join(layout.RESULTS, f"{kind}_choice_{group}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _how(run):
    """The run's `chosen_by` in short, with the row choices it took part in
    and what each stored choice picked."""
    how = _HOW[run.chosen_by]
    for group, choice in ROW_GROUPS.items():
        if run.name in choice.runs:
            stored = _stored_choice("row", group)
            verdict = ("not run" if stored is None else
                       "picked" if stored["choice"] == run.name else "not picked")
            how += f"; `choose_row {group}`: {verdict}"
    return how


def run_table(stored=None):
    """Every run of the registry: what it trains, its budget and checkpoint,
    how it came about, and its stored validation scores (ROUGE-1 / ROUGE-2
    F1 x100). `stored`: {dataset: `stored_reports(dataset)`} when already read."""
    lines = [
        "| run | recipe | trained on | budget | checkpoint | how it came about | stop "
        "| ROUGE-1 / ROUGE-2 |",
        "|---|---|---|---:|---|---|---:|---:|",
    ]
    for run in runs.RUNS:
        reports = (stored or {}).get(run.dataset)
        if reports is None:
            reports = stored_reports(run.dataset) if run.dataset in DATASETS else {}
        report = reports.get(run.name)
        scores = ("not scored" if report is None else " / ".join(
            f"{100 * report['aggregate'][m]['f1']['mean']:.2f}" for m in ("rouge1", "rouge2")))
        checkpoint = run.checkpoint or RUN_BY_NAME[run.base or run.name].checkpoint or "last"
        lines.append(
            f"| `{run.name}` | {run.recipe} | "
            + (f"runs/data/{run.data}" if run.data else run.dataset)
            + (f" (from `{run.init_from}`)" if run.init_from else "")
            + " | " + (f"export of `{run.base}`" if run.base else f"{run.minutes:g}")
            + f" | {checkpoint} | {_how(run)} | {run.stop or ''} | {scores} |")
    lines += ["", "How a run came about (`Run.chosen_by`):", ""]
    lines += [f"- **{short}**: {long}." for long, short in _HOW.items()]
    return "\n".join(lines)


def _option(value, choice):
    text = f"`{value.replace('epoch-', '')}`"  # an ensemble's "epoch-1+epoch-2": "1+2"
    return f"**{text}**" if value == choice else text


def choice_table():
    """Every stored hold-out choice: the runs weighed, each option's pooled
    mean of ROUGE-1 and ROUGE-2 F1 on held-out training examples, and the
    option picked (bold)."""
    lines = ["| choice | runs | options tried: pooled hold-out score (picked in bold) |",
             "|---|---|---|"]
    groups = [("length", LENGTH_GROUPS), ("recent", RECENT_GROUPS), ("beam", BEAM_GROUPS),
              ("row", ROW_GROUPS)]
    kept = [("epoch", run.name) for run in runs.RUNS if run.checkpoint == "chosen_epoch"
            and run.base is None]
    kept += [(run.checkpoint[len("chosen_"):], run.name) for run in runs.RUNS
             if run.checkpoint in ("chosen_average", "chosen_ensemble")]
    for kind, group in [(kind, group) for kind, table in groups for group in table] + kept:
        stored = _stored_choice(kind, group)
        if stored is None:
            continue
        options = ", ".join(
            f"{_option(option, str(stored['choice']))} {score:.5f}"
            for option, score in stored["scores"].items())
        lines.append(f"| `choose_{kind} {group}` | "
                     + ", ".join(f"`{name}`" for name in stored["runs"]) + f" | {options} |")
    return "\n".join(lines) + "\n"


def quote_scores(text, stored=None):
    """`text` with every QUOTED_SCORE span holding its stored report's mean
    ROUGE-1 / ROUGE-2 F1 x100 (the whitespace after the slash kept).
    `stored`: {dataset: `stored_reports(dataset)`} when already read."""
    stored = stored or {}

    def quoted(match):
        dataset, system = match["dataset"], match["system"]
        if dataset not in stored:
            stored[dataset] = stored_reports(dataset)
        if system not in stored[dataset]:
            raise ValueError(f"docs/results.md quotes {dataset}/{system}, which has no stored "
                             f"report in {layout.RESULTS}; expected one of "
                             f"{sorted(stored[dataset])}. Fix the quote's name.")
        means = [100 * stored[dataset][system]["aggregate"][m]["f1"]["mean"]
                 for m in ("rouge1", "rouge2")]
        return (f"<!--score {dataset}/{system}-->{means[0]:.2f} /{match['space']}"
                f"{means[1]:.2f}<!--/score-->")

    return QUOTED_SCORE.sub(quoted, text)
