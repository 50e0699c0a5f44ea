"""The quality record: summary quality per dataset, trained recipes against
extractive baselines.

Every run is data (`runs.RUNS`, the hold-out choice groups in `choices`);
the modules here read it: `prepare` writes the data folders some runs train
on, `steps` trains, exports and evaluates through the user-facing commands
(`keras-hsum train`, `export`, `evaluate`), `choose` makes the hold-out
choices, `diagnoses` measures what decides nothing, and `tables` writes the
tables of benchmarks/results/quality*.md, docs/results.md and the README
from the stored reports. `benchmarks/quality.py` is the command line.
"""
