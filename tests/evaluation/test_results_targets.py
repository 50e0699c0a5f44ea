"""The target tables of docs/results.md and the README say what the stored reports say.

`benchmarks/quality.py table` writes the table of the rows that decide the
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
    spec = importlib.util.spec_from_file_location(
        "quality_script", os.path.join(ROOT, "benchmarks", "quality.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _between(text, begin, end):
    assert text.count(begin) == 1 and text.count(end) == 1, (begin, end)
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def _report(quality, dataset, system):
    with open(os.path.join(quality.RESULTS, dataset, f"{system}.json"), encoding="utf-8") as f:
        return json.load(f)


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def _rows(table):
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in table.splitlines() if line.startswith("|")]


def test_target_table_is_regenerated_from_the_stored_reports(quality):
    in_doc = _between(_read("docs", "results.md"), quality.TARGETS_BEGIN, quality.TARGETS_END)
    assert in_doc.strip() == quality.targets().strip()
    assert _read("benchmarks", "results", "quality_targets.md").strip() == in_doc.strip()


def test_readme_shows_the_target_rows_of_the_results_document(quality):
    """The README's table: the same rows and figures, less the column that
    says how each row came about (the third)."""
    in_readme = _rows(_between(_read("README.md"), quality.SUMMARY_BEGIN, quality.SUMMARY_END))
    in_doc = _rows(_between(_read("docs", "results.md"), quality.TARGETS_BEGIN, quality.TARGETS_END))
    assert in_doc[0][2] == "how it came about"
    assert in_readme == [row[:2] + row[3:] for row in in_doc]
    assert len(in_readme) == 2 + sum(len(rows) for rows in quality.TARGET_ROWS.values())


def test_results_document_holds_the_stored_table_of_every_row(quality):
    in_doc = _between(_read("docs", "results.md"), quality.BEGIN, quality.END)
    assert in_doc.strip() == _read("benchmarks", "results", "quality.md").strip()
    for dataset in quality.TARGET_ROWS:
        assert f"### {dataset} (" in in_doc


def test_every_deciding_row_was_declared_and_scored(quality):
    for dataset, rows in quality.TARGET_ROWS.items():
        assert dataset in quality.DATASETS
        for name, why in rows:
            assert name in quality.RUNS, name
            assert quality.RUNS[name]["dataset"] == dataset, name
            assert why and "|" not in why
            assert _report(quality, dataset, name)["training"]
            assert quality.RUNS[name]["recipe"] not in quality.EXTRACTIVE_RECIPES


def test_verdicts_and_differences_follow_the_per_example_scores(quality):
    lines = [line for line in quality.targets().splitlines()
             if line.startswith("| ") and "`" in line]
    assert len(lines) == sum(len(rows) for rows in quality.TARGET_ROWS.values())
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
    read from RUNS (following "base" to the run it exports)."""
    expected = []
    for dataset in quality.TARGET_ROWS:
        textrank = _report(quality, dataset, "textrank")
        folder = os.path.join(quality.RESULTS, dataset)
        above = total = 0
        for file in sorted(os.listdir(folder)):
            report = _report(quality, dataset, file[:-len(".json")])
            if "training" not in report:
                continue
            spec = quality.RUNS[report["system"]]
            while "recipe" not in spec:
                spec = quality.RUNS[spec["base"]]
            if spec["recipe"] == "shte":
                continue
            total += 1
            above += all(
                np.mean([e["scores"][m]["f1"] for e in report["examples"]])
                > np.mean([e["scores"][m]["f1"] for e in textrank["examples"]])
                for m in ("rouge1", "rouge2"))
        expected.append(f"{dataset} {above} of {total}")
    assert "; ".join(expected) + "." in quality.targets()
