"""Train, export and evaluate a run through the user-facing commands, and
score the baselines with the same evaluator.

Decoding settings are fixed per dataset from its *training* split only:
beam BEAM_SIZE (or the run's `beam_size`, with MBR reranking of the beam or
of that many samples where it sets `mbr` and `sampling`), trigram blocking,
no token repeated within BLOCK_RECENT positions (PHT §5.2; or the run's
`block_recent` and `recent_exceptions`), the unknown piece blocked,
min_length = MIN_LENGTH_FACTOR x the mean reference length in subword tokens
(or the run's `min_length_factor`), max_length the recipe's target length;
exported with --jit-compile (XLA; 5x faster on CPU, same summaries). Each
setting a run states was picked on a training hold-out (quality_record.choose).
Lead-k takes k = the mean number of reference sentences in the training split
(3 where there is none).
"""

import gzip
import json
import os
import statistics
import subprocess
import sys

from . import layout
from .datasets import (BASELINES, DATASETS, data_path, lead_k, train_examples)
from .prepare import PREPARE
from .runs import RUN_BY_NAME

MIN_LENGTH_FACTOR = 0.8
BLOCK_RECENT = 2
BEAM_SIZE = 4


def keras_hsum(*argv):
    """Runs the `keras-hsum` command of this interpreter's environment."""
    command = [os.path.join(os.path.dirname(sys.executable), "keras-hsum"), *map(str, argv)]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=layout.ROOT,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def min_length(dataset, run, factor):
    """`factor` x the mean training-reference length in the run's subword tokens."""
    import sentencepiece

    from keras_hsum import run_folder

    processor = sentencepiece.SentencePieceProcessor(
        model_file=run_folder.path(run, run_folder.VOCABULARY)
    )
    lengths = [len(processor.encode(e.summary)) for e in train_examples(dataset)]
    return int(factor * statistics.mean(lengths))


def holdout_of(run):
    """(dataset, fraction): the held-out training examples that picked the
    run's checkpoint, as a fraction of its dataset's training split (a run
    on a folder built around that hold-out says so in `holdout_of`)."""
    return run.holdout_of or (run.dataset, run.overrides.get("validation_holdout", 0.0))


def train(name, minutes=None):
    """`keras-hsum train` of the run `name` (resumes and extends its folder)."""
    run = RUN_BY_NAME[name]
    if run.base:
        return  # an export of another run
    sets = []
    for key, value in run.overrides.items():
        sets += ["--set", f"{key}={value}"]
    if run.init_from:
        sets += ["--init-from", layout.run_folder(run.init_from),
                 "--init-checkpoint", run.init_checkpoint or "last"]
    data = os.path.join(layout.SHARED, run.dataset)
    if run.data:
        data = layout.prepared_folder(run.data)
        if run.data in PREPARE and not os.path.exists(data):
            PREPARE[run.data]()
    keras_hsum(
        "train", "--recipe", run.recipe, "--config", "tiny", "--data", data,
        "--out", layout.run_folder(name),
        *sets, "--max-minutes", minutes or run.minutes, "--quiet",
    )


def checkpoint_of(name):
    """The checkpoint an export of the run `name` uses: its own, else its
    base's ("chosen_epoch": the kept epoch `choose_epoch` picked, "epoch-N";
    "chosen_average": the mean of kept epochs `choose_average` picked,
    "epochs-A-B"; "chosen_ensemble": the ensemble of kept epochs
    `choose_ensemble` picked, "epoch-A+epoch-B+...")."""
    run = RUN_BY_NAME[name]
    checkpoint = run.checkpoint or RUN_BY_NAME[run.base or name].checkpoint or "last"
    # (choice file, the step that writes it, its choice -> checkpoint name)
    chosen = {
        "chosen_average": (f"average_choice_{name}.json", f"choose_average {name}", str),
        "chosen_ensemble": (f"ensemble_choice_{name}.json", f"choose_ensemble {name}", str),
        "chosen_epoch": (f"epoch_choice_{run.base or name}.json",
                         f"choose_epoch {run.base or name}", "epoch-{}".format),
    }
    if checkpoint in chosen:
        file, step, named = chosen[checkpoint]
        path = os.path.join(layout.RESULTS, file)
        if not os.path.exists(path):
            raise ValueError(f"{name}: run `quality.py {step}` first; its checkpoint is "
                             "chosen among its kept epochs.")
        with open(path, encoding="utf-8") as handle:
            return named(json.load(handle)["choice"])
    return checkpoint


def export(name, factor=None, out=None, block_recent=None, recent_exceptions=None,
           beam_size=None, mbr=None, sampling=None, checkpoint=None):
    """`keras-hsum export` of the run `name` with its decoding settings (each
    argument given replaces the run's own: the hold-out choices try options)."""
    spec = RUN_BY_NAME[name]
    if not spec.evaluate:
        return
    beam_size = beam_size or spec.beam_size or BEAM_SIZE
    if mbr is None:
        mbr = spec.mbr
    if sampling is None:
        sampling = dict(spec.sampling or {})
    sample_args = []
    if sampling:  # {"epsilon": 0.02, ...}: `export --sample` with these
        sample_args = ["--sample"] + [
            f"--{key.replace('_', '-')}={value}" for key, value in sorted(sampling.items())
        ]
    run = layout.run_folder(spec.base or name)
    out = out or os.path.join(layout.run_folder(name), "export")
    factor = factor or spec.min_length_factor or MIN_LENGTH_FACTOR
    if block_recent is None:
        block_recent = BLOCK_RECENT if spec.block_recent is None else spec.block_recent
    if recent_exceptions is None:
        recent_exceptions = spec.recent_exceptions
    extra = []
    if spec.predictor:
        extra = ["--predictor-run", layout.run_folder(spec.predictor)]
    if spec.recipe == "shte":
        keras_hsum("export", "--run", run, "--out", out, "--serving-root", "",
                   "--extract-sentences", lead_k(spec.dataset))
        return
    keras_hsum(
        "export", "--run", run, "--out", out, "--serving-root", "", "--jit-compile",
        "--beam-size", beam_size, "--block-ngrams", 3, "--block-recent", block_recent,
        "--min-length", min_length(spec.dataset, run, factor),
        *[f"--recent-exception={piece}" for piece in recent_exceptions],
        "--checkpoint", checkpoint or checkpoint_of(name), *extra,
        *(["--mbr"] if mbr else []),
        *sample_args,
    )


def recipe_label(name):
    """The recipe column of the run's row: "flat + copy + token shift + ..."."""
    spec = RUN_BY_NAME[name]
    base = RUN_BY_NAME[spec.base or name]
    parts = [spec.recipe]
    parts += ["copy"] if base.overrides.get("pointer_generator") else []
    parts += ["token shift"] if base.overrides.get("token_shift") else []
    parts += ["weight averaging"] if base.overrides.get("ema_momentum") else []
    parts += ["attention alignment"] if spec.predictor else []
    if spec.sampling:
        settings = ", ".join(f"{key} {value}" for key, value in sorted(spec.sampling.items()))
        parts.append(f"MBR over {spec.beam_size or BEAM_SIZE} samples ({settings})"
                     if spec.mbr else f"sampling ({settings})")
    elif spec.mbr:
        parts.append("MBR decoding")
    parts += [base.label] if base.label is not None else []
    if spec.checkpoint == "chosen_average":
        parts.append("checkpoint averaging")
    if spec.checkpoint == "chosen_ensemble":
        parts.append("snapshot ensemble")
    if base.init_from:
        start = RUN_BY_NAME[base.init_from]
        parts.append((start.pretraining or f"fine-tuning of {base.init_from}")
                     + (" (its best checkpoint)" if base.init_checkpoint == "best" else ""))
    return " + ".join(parts)


def evaluate(name):
    """`keras-hsum evaluate` of the run's export on its dataset's scored
    split, with the report's "training" entry: the recipe, and per trained
    run (itself or its base, its predictor, the runs it started from) the
    config, budget, time and steps up to the checkpoint used."""
    from keras_hsum import run_folder

    spec = RUN_BY_NAME[name]
    if not spec.evaluate:
        return
    dataset = spec.dataset
    out = layout.report_path(dataset, name)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    keras_hsum(
        "evaluate", "--model", os.path.join(layout.run_folder(name), "export"), "--name", name,
        "--data", data_path(dataset), "--references", DATASETS[dataset]["references"],
        "--out", out,
    )
    with open(out, encoding="utf-8") as handle:
        report = json.load(handle)
    trained = [spec.base or name] + ([spec.predictor] if spec.predictor else [])
    # A warm-started run's budget includes the runs it started from.
    for run in list(trained):
        while RUN_BY_NAME[run].init_from:
            run = RUN_BY_NAME[run].init_from
            trained.append(run)
    report["training"] = {"recipe": recipe_label(name),
                          "runs": {}, "budget_minutes": 0, "minutes": 0.0, "steps": 0}
    # Runs whose best.keras started a fine-tuning (`--init-checkpoint
    # best`): the weights are those of their best step, but the whole run
    # was needed to know which step that is, so its time counts whole.
    started_from_best = {RUN_BY_NAME[run].init_from for run in trained
                         if RUN_BY_NAME[run].init_checkpoint == "best"}
    for run in trained:
        epochs = run_folder.read_history(layout.run_folder(run))["epochs"]
        run_spec = RUN_BY_NAME[run]
        checkpoint = checkpoint_of(name if run == (spec.base or name) else run)
        whole = epochs
        if run in started_from_best:
            checkpoint = "best"
        if checkpoint.startswith(("epoch-", "epochs-")):
            # A kept epoch's weights, the mean of kept epochs A to B, or an
            # ensemble of such: the time and steps up to the last epoch used.
            last = max(int(part.rsplit("-", 1)[1]) for part in checkpoint.split("+"))
            epochs = [e for e in epochs if e["epoch"] <= last]
        elif checkpoint == "best":
            # The weights used are those of the best validation loss:
            # report the training time and steps that produced them.
            with open(run_folder.path(layout.run_folder(run), run_folder.BEST_STATE),
                      encoding="utf-8") as handle:
                best = json.load(handle)
            # A resumed run re-runs the epoch a time budget cut short, so
            # the step (recorded since best.json has one) is the exact mark.
            epochs = [e for e in epochs if e["step"] <= best["step"]] if "step" in best \
                else [e for e in epochs if e["epoch"] <= best["epoch"]]
        timed = whole if run in started_from_best else epochs
        report["training"]["runs"][run] = {
            "config": "tiny + " + ", ".join(f"{k}={v}" for k, v in run_spec.overrides.items()),
            "budget_minutes": run_spec.minutes,
            "minutes": timed[-1]["seconds"] / 60 if timed else 0.0,  # cumulative
            "steps": epochs[-1]["step"] if epochs else 0,
            "final_val_loss": epochs[-1].get("val_loss") if epochs else None,
            "checkpoint": checkpoint,
            "validation_holdout": holdout_of(run_spec)[1],
            "checkpoint_monitor": run_spec.overrides.get("checkpoint_monitor", "val_loss"),
        }
        for key in ("budget_minutes", "minutes", "steps"):
            report["training"][key] += report["training"]["runs"][run][key]
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1, ensure_ascii=False)


def baselines(dataset):
    """Lead-k, LexRank, TextRank (k sentences each) and the oracle on `dataset`."""
    k = lead_k(dataset)
    for baseline in BASELINES:
        out = layout.report_path(dataset, baseline)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        budget = [] if baseline == "oracle" else ["--max-sentences", k]
        keras_hsum(
            "evaluate", "--baseline", "lead3" if baseline == "lead" else baseline,
            "--data", data_path(dataset), *budget,
            "--references", DATASETS[dataset]["references"], "--out", out,
        )
        with open(out, encoding="utf-8") as handle:
            report = json.load(handle)
        report["system"] = f"Lead-{k}" if baseline == "lead" else (
            baseline if baseline == "oracle" else f"{baseline} (k={k})"
        )
        with open(out, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1, ensure_ascii=False)


def _score_outputs(dataset, outputs, name, system):
    """Scores `outputs` {example id: summary} on `dataset`'s evaluated split
    with the same evaluator as every row; writes the report `system`."""
    from keras_hsum.data.reader import read_examples
    from keras_hsum.evaluation import report as reporting

    path = data_path(dataset)
    examples = [e for e in read_examples(path) if e.sentences()]
    missing = [e.id for e in examples if e.id not in outputs]
    if missing:
        raise ValueError(f"{name}: no output for {len(missing)} examples of {path} "
                         f"(first: {missing[0]!r}).")
    report = reporting.evaluate(
        outputs, examples, name=name, references=DATASETS[dataset]["references"],
    )
    report["data"] = path
    out = layout.report_path(dataset, system)
    reporting.write_json(report, out)
    print(f"{name}: wrote {out}")


def stored_system(dataset, system_id, name):
    """Scores outputs stored in the corpus file itself (SummEval's
    `system_summaries`, e.g. M0 = LEAD-3) with the same evaluator."""
    with gzip.open(data_path(dataset), "rt", encoding="utf-8") as handle:
        outputs = {
            record["id"]: record["system_summaries"][system_id]
            for record in map(json.loads, handle)
        }
    _score_outputs(dataset, outputs, name, f"stored_{system_id}")


def published_outputs(dataset):
    """Scores the published outputs of PUBLISHED_OUTPUTS[dataset]."""
    from .datasets import PUBLISHED_OUTPUTS

    file, key = PUBLISHED_OUTPUTS[dataset]
    with open(os.path.join(layout.BENCHMARKS, "published", file), encoding="utf-8") as handle:
        stored = json.load(handle)
    name = (f"published outputs: {stored['system']} ({stored['source']}, "
            f"{stored['paths'][key]}), scored here")
    _score_outputs(dataset, stored[key], name, f"published_{file.split('_')[0]}")
