"""The target tables of docs/results.md and the README say what the stored reports say.

`benchmarks/quality.py table` (quality_record.tables) writes the table of the rows that decide the
issue's target (each against TextRank, with paired bootstrap intervals)
between two markers in docs/results.md, the same rows without their "how it
came about" column between two markers in the README, and the table of every
row between two more in docs/results.md. These tests regenerate the target
table from the reports in benchmarks/results/quality/ and compare, check
that the README's rows are the document's, cell for cell, and check the
verdicts and differences against the reports' per-example scores,
recomputed here with numpy (not through the aggregates the table reads).
"""

import importlib.util
import json
import os
import re

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def quality():
    """benchmarks/quality.py, the command line, with the modules of the
    package it reads (quality_record: runs, tables, steps, ...) as attributes."""
    spec = importlib.util.spec_from_file_location(
        "quality_script", os.path.join(ROOT, "benchmarks", "quality.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _between(text, begin, end):
    assert text.count(begin) == 1 and text.count(end) == 1, (begin, end)
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def _report(quality, dataset, system):
    path = os.path.join(quality.tables.layout.RESULTS, dataset, f"{system}.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def _rows(table):
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in table.splitlines() if line.startswith("|")]


def test_target_table_is_regenerated_from_the_stored_reports(quality):
    tables = quality.tables
    in_doc = _between(_read("docs", "results.md"), tables.TARGETS_BEGIN, tables.TARGETS_END)
    assert in_doc.strip() == quality.tables.targets().strip()
    assert _read("benchmarks", "results", "quality_targets.md").strip() == in_doc.strip()


def test_readme_shows_the_target_rows_of_the_results_document(quality):
    """The README's table: the same rows and figures, less the column that
    says how each row came about (the third)."""
    tables = quality.tables
    in_readme = _rows(_between(_read("README.md"), tables.SUMMARY_BEGIN, tables.SUMMARY_END))
    in_doc = _rows(_between(_read("docs", "results.md"), tables.TARGETS_BEGIN, tables.TARGETS_END))
    assert in_doc[0][2] == "how it came about"
    assert in_readme == [row[:2] + row[3:] for row in in_doc]
    assert len(in_readme) == 2 + sum(len(rows) for rows in quality.runs.TARGET_ROWS.values())


def test_results_document_holds_the_stored_table_of_every_row(quality):
    in_doc = _between(_read("docs", "results.md"), quality.tables.BEGIN, quality.tables.END)
    assert in_doc.strip() == _read("benchmarks", "results", "quality.md").strip()
    for dataset in quality.runs.TARGET_ROWS:
        assert f"### {dataset} (" in in_doc


def test_every_deciding_row_was_declared_and_scored(quality):
    for dataset, rows in quality.runs.TARGET_ROWS.items():
        assert dataset in quality.DATASETS
        for name, why in rows:
            run = quality.runs.RUN_BY_NAME[name]
            assert run.dataset == dataset, name
            assert why and "|" not in why
            assert _report(quality, dataset, name)["training"]
            assert run.recipe not in quality.tables.EXTRACTIVE_RECIPES


def test_verdicts_and_differences_follow_the_per_example_scores(quality):
    lines = [line for line in quality.tables.targets().splitlines()
             if line.startswith("| ") and "`" in line]
    assert len(lines) == sum(len(rows) for rows in quality.runs.TARGET_ROWS.values())
    verdicts = {}
    for line in lines:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        dataset, name = cells[0], re.search(r"`([^`]+)`", cells[1]).group(1)
        ours = _report(quality, dataset, name)
        textrank = _report(quality, dataset, "textrank")
        assert [e["id"] for e in ours["examples"]] == [e["id"] for e in textrank["examples"]]
        above = []
        for metric, cell, mean, baseline in (("rouge1", cells[6], cells[3], cells[5].split(" / ")[0]),
                                             ("rouge2", cells[7], cells[4], cells[5].split(" / ")[1])):
            a = np.array([e["scores"][metric]["f1"] for e in ours["examples"]])
            b = np.array([e["scores"][metric]["f1"] for e in textrank["examples"]])
            assert float(mean) == pytest.approx(100 * a.mean(), abs=0.006)
            assert float(baseline) == pytest.approx(100 * b.mean(), abs=0.006)
            difference, low, high = map(float, re.findall(r"[-+]\d+\.\d+", cell))
            assert difference == pytest.approx(100 * (a.mean() - b.mean()), abs=0.006)
            assert low <= difference <= high
            above.append(a.mean() > b.mean())
        verdicts[name] = cells[8]
        assert cells[8] == ("yes" if all(above) else "**no**"), name
    # Both verdicts occur, so each branch above was checked.
    assert set(verdicts.values()) == {"yes", "**no**"}


def test_count_line_counts_every_abstractive_row(quality):
    """Recounted from the reports' per-example scores, with each run's recipe
    read from the registry (quality_record.runs)."""
    expected = []
    for dataset in quality.runs.TARGET_ROWS:
        textrank = _report(quality, dataset, "textrank")
        folder = os.path.join(quality.tables.layout.RESULTS, dataset)
        above = total = 0
        for file in sorted(os.listdir(folder)):
            report = _report(quality, dataset, file[:-len(".json")])
            if "training" not in report:
                continue
            if quality.runs.RUN_BY_NAME[report["system"]].recipe == "shte":
                continue
            total += 1
            above += all(
                np.mean([e["scores"][m]["f1"] for e in report["examples"]])
                > np.mean([e["scores"][m]["f1"] for e in textrank["examples"]])
                for m in ("rouge1", "rouge2"))
        expected.append(f"{dataset} {above} of {total}")
    assert "; ".join(expected) + "." in quality.tables.targets()


def test_registry_states_what_each_stored_report_was_trained_and_decoded_with(quality):
    """Each stored report's "training" entry, written when the row was
    evaluated, is an independent record of its run: the registry must give
    the same recipe label and, per trained run, the same config, budget,
    hold-out and checkpoint monitor (where the report records them)."""
    runs, steps = quality.runs, quality.steps
    checked = 0
    for dataset in quality.DATASETS:
        folder = os.path.join(quality.tables.layout.RESULTS, dataset)
        for file in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            report = _report(quality, dataset, file[:-len(".json")])
            if "training" not in report:
                continue
            name = report["system"]
            assert runs.RUN_BY_NAME[name].dataset == dataset, name
            assert steps.recipe_label(name) == report["training"]["recipe"], name
            for trained, entry in report["training"]["runs"].items():
                run = runs.RUN_BY_NAME[trained]
                assert entry["config"] == "tiny + " + ", ".join(
                    f"{key}={value}" for key, value in run.overrides.items()), (name, trained)
                assert entry["budget_minutes"] == run.minutes, (name, trained)
                if "validation_holdout" in entry:
                    assert entry["validation_holdout"] == steps.holdout_of(run)[1], trained
                if "checkpoint_monitor" in entry:
                    assert entry["checkpoint_monitor"] == run.overrides.get(
                        "checkpoint_monitor", "val_loss"), trained
                checked += 1
    assert checked > 90


def test_registry_names_runs_once_and_every_reference_resolves(quality):
    runs, choices = quality.runs, quality.choices
    names = [run.name for run in runs.RUNS]
    assert len(names) == len(set(names))
    for run in runs.RUNS:
        for other in (run.base, run.init_from, run.predictor):
            assert other is None or other in runs.RUN_BY_NAME, (run.name, other)
        assert run.chosen_by in (runs.EARLY, runs.DECLARED, runs.ROW_OF_RECORD, runs.CANDIDATE,
                                 runs.EXTRA, runs.DIAGNOSIS, runs.STAGE), run.name
    for groups in (choices.LENGTH_GROUPS, choices.RECENT_GROUPS, choices.BEAM_GROUPS,
                   choices.ROW_GROUPS):
        for group in groups.values():
            assert set(group.runs) <= set(names), group


def test_results_document_holds_the_generated_run_and_choice_tables(quality):
    """The journal's tables of every run and every hold-out choice are the
    registry's and the stored choices', regenerated."""
    tables = quality.tables
    doc = _read("docs", "results.md")
    assert _between(doc, tables.RUNS_BEGIN, tables.RUNS_END).strip() == tables.run_table().strip()
    assert (_between(doc, tables.CHOICES_BEGIN, tables.CHOICES_END).strip()
            == tables.choice_table().strip())
    for run in quality.runs.RUNS:
        assert f"| `{run.name}` |" in doc, run.name


def test_scores_quoted_in_the_results_document_are_the_stored_ones(quality):
    """Prose that quotes a stored row's ROUGE-1 / ROUGE-2 marks it
    (<!--score DATASET/SYSTEM-->...<!--/score-->); each such figure is the
    report's mean F1, recomputed here from its per-example scores."""
    doc = _read("docs", "results.md")
    quotes = list(quality.tables.QUOTED_SCORE.finditer(doc))
    assert len(quotes) > 100
    for match in quotes:
        report = _report(quality, match["dataset"], match["system"])
        figures = re.findall(r"\d+\.\d\d", match.group(0).split("-->", 1)[1])
        for metric, figure in zip(("rouge1", "rouge2"), figures):
            scores = [e["scores"][metric]["f1"] for e in report["examples"]]
            assert float(figure) == pytest.approx(100 * np.mean(scores), abs=0.006), match.group(0)
