"""Where the quality record keeps its runs, data folders and reports."""

import os

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCHMARKS)
# Stored reports: <dataset>/<system>.json and the choices' <kind>_choice_<group>.json.
RESULTS = os.path.join(BENCHMARKS, "results", "quality")
RUNS_DIR = os.path.join(ROOT, "runs", "results")
# The data folders `prepare` writes for runs that set `data`.
PREPARED = os.path.join(ROOT, "runs", "data")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
RESULTS_DOC = os.path.join(ROOT, "docs", "results.md")
README = os.path.join(ROOT, "README.md")


def run_folder(name):
    """The folder `keras-hsum train --out` writes for the run `name`."""
    return os.path.join(RUNS_DIR, name)


def report_path(dataset, system):
    """The stored report of `system` scored on `dataset`."""
    return os.path.join(RESULTS, dataset, f"{system.replace('/', '_')}.json")


def prepared_folder(data):
    """The folder of a run's `data` (a name under runs/data/)."""
    return os.path.join(PREPARED, data)
