"""Summary quality per dataset: trained recipes against extractive baselines.

Every row goes through the user-facing commands: `keras-hsum train` (with the
CPU budget in minutes its Run states), `keras-hsum export` (the SavedModel a
TF Serving deployment would load) and `keras-hsum evaluate` (raw validation
text in, ROUGE F1 with 95% bootstrap intervals out); the baselines use the
same `evaluate` code path. The runs are data (quality_record/runs.py, the
hold-out choices quality_record/choices.py); docs/results.md tells how each
came about.

Usage:
    python benchmarks/quality.py train RUN [--minutes M]   # resumes, extends
    python benchmarks/quality.py export RUN
    python benchmarks/quality.py evaluate RUN
    python benchmarks/quality.py baselines DATASET         # and published outputs
    python benchmarks/quality.py choose_length GROUP       # min_length on a hold-out
    python benchmarks/quality.py choose_recent GROUP       # recent blocking, likewise
    python benchmarks/quality.py choose_row GROUP          # a row of record, likewise
    python benchmarks/quality.py choose_beam GROUP         # beam width (and MBR), likewise
    python benchmarks/quality.py choose_epoch RUN          # a kept epoch's weights, likewise
    python benchmarks/quality.py choose_average RUN        # a mean of kept epochs, likewise
    python benchmarks/quality.py choose_ensemble RUN       # an ensemble of kept epochs, likewise
    python benchmarks/quality.py table [--measured-now]    # the tables: results/, docs/, README
    python benchmarks/quality.py rescore DATASET [--references max_rouge1]  # a diagnosis
    python benchmarks/quality.py sampling_seeds RUN        # a diagnosis
    python benchmarks/quality.py unmarked RUN              # a diagnosis
    python benchmarks/quality.py all                       # every step above

Runs live in runs/results/<run>/ (exports under <run>/export/); reports in
benchmarks/results/quality/<dataset>/<system>.json.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(HERE), HERE):  # keras_hsum, then quality_record
    if _path not in sys.path:
        sys.path.insert(0, _path)

from quality_record import choices, choose, diagnoses, runs, steps, tables  # noqa: E402
from quality_record.datasets import DATASETS, PUBLISHED_OUTPUTS  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["train", "export", "evaluate", "baselines", "table",
                                         "choose_length", "choose_recent", "choose_row",
                                         "choose_beam", "choose_epoch", "choose_average",
                                         "choose_ensemble",
                                         "sampling_seeds", "rescore", "unmarked", "all"])
    parser.add_argument("target", nargs="?", help="a run name (runs.RUNS), a dataset "
                        "(DATASETS) or, for choose_length / choose_recent / choose_row / "
                        "choose_beam, a group (choices.LENGTH_GROUPS / RECENT_GROUPS / "
                        "ROW_GROUPS / BEAM_GROUPS)")
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--references", default="max_rouge1",
                        help="rescore: the multi-reference protocol (see keras-hsum evaluate)")
    parser.add_argument("--measured-now", action="store_true",
                        help="table: stamp today's date and this machine (after evaluating); "
                        "by default the stored table's measurement line is kept")
    args = parser.parse_args(argv)
    if args.step == "table":
        tables.table(tables.measured_now() if args.measured_now else None)
    elif args.step in ("choose_length", "choose_recent", "choose_row", "choose_beam"):
        groups, choose_one = {
            "choose_length": (choices.LENGTH_GROUPS, choose.choose_length),
            "choose_recent": (choices.RECENT_GROUPS, choose.choose_recent),
            "choose_row": (choices.ROW_GROUPS, choose.choose_row),
            "choose_beam": (choices.BEAM_GROUPS, choose.choose_beam)}[args.step]
        if args.target not in groups:
            parser.error(f"expected a group among {', '.join(groups)}; "
                         f"received {args.target!r}")
        choose_one(args.target)
    elif args.step == "all":
        for dataset in DATASETS:
            steps.baselines(dataset)
            if dataset in PUBLISHED_OUTPUTS:
                steps.published_outputs(dataset)
        steps.stored_system("cnndm", "M0", "LEAD-3 outputs stored in the file (M0)")
        for run in runs.RUNS:
            steps.train(run.name)
            if run.checkpoint == "chosen_epoch":
                choose.choose_epoch(run.name)
            if run.checkpoint == "chosen_average":
                choose.choose_average(run.name)
            if run.checkpoint == "chosen_ensemble":
                choose.choose_ensemble(run.name)
            steps.export(run.name)
            steps.evaluate(run.name)
        tables.table(tables.measured_now())
    elif args.step in ("rescore", "baselines"):
        if args.target not in DATASETS:
            parser.error(f"expected a dataset among {', '.join(DATASETS)}; "
                         f"received {args.target!r}")
        if args.step == "rescore":
            diagnoses.rescore(args.target, args.references)
            return
        steps.baselines(args.target)
        if args.target in PUBLISHED_OUTPUTS:
            steps.published_outputs(args.target)
        if args.target == "cnndm":
            steps.stored_system("cnndm", "M0", "LEAD-3 outputs stored in the file (M0)")
    else:
        if args.target not in runs.RUN_BY_NAME:
            parser.error(f"expected a run among {', '.join(runs.RUN_BY_NAME)}; "
                         f"received {args.target!r}")
        {"train": lambda: steps.train(args.target, args.minutes),
         "export": lambda: steps.export(args.target),
         "evaluate": lambda: steps.evaluate(args.target),
         "choose_epoch": lambda: choose.choose_epoch(args.target),
         "choose_average": lambda: choose.choose_average(args.target),
         "choose_ensemble": lambda: choose.choose_ensemble(args.target),
         "sampling_seeds": lambda: diagnoses.sampling_seeds(args.target),
         "unmarked": lambda: diagnoses.unmarked(args.target)}[args.step]()


if __name__ == "__main__":
    main()
