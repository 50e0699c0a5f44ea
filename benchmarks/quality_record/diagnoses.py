"""Measurements that decide nothing: a row served another way, scored under
another protocol, or decoded with other seeds."""

import glob
import gzip
import json
import os

from . import layout
from .choose import holdout_file
from .datasets import DATASETS, data_path
from .runs import RUN_BY_NAME
from .steps import export, holdout_of, keras_hsum


def unmarked(name):
    """Scores the run's export on its validation examples with every
    document's sections merged into one, i.e. served as text without the
    `===` section marker (as every evaluation before stop 40 was):
    results/quality/unmarked_<name>.json."""
    run = RUN_BY_NAME[name]
    folder = os.path.join(layout.RUNS_DIR, "unmarked", run.dataset)
    os.makedirs(folder, exist_ok=True)
    merged = os.path.join(folder, "val.jsonl.gz")
    with gzip.open(data_path(run.dataset), "rt", encoding="utf-8") as source, \
            gzip.open(merged, "wt", encoding="utf-8") as target:
        for line in source:
            example = json.loads(line)
            for document in example["documents"]:
                document["sections"] = [{"heading": None, "paragraphs": [
                    p for section in document["sections"] for p in section["paragraphs"]]}]
            target.write(json.dumps(example) + "\n")
    keras_hsum(
        "evaluate", "--model", os.path.join(layout.run_folder(name), "export"),
        "--name", f"{name} (sections unmarked)", "--data", merged,
        "--references", DATASETS[run.dataset]["references"],
        "--out", os.path.join(layout.RESULTS, f"unmarked_{name}.json"),
    )


def rescore(dataset, references):
    """Every stored report of `dataset` (its summaries as they were scored;
    nothing is decoded again) scored under another multi-reference protocol,
    e.g. "max_rouge1", SciTLDR's own (every metric from the reference of best
    ROUGE-1). Writes results/quality/<dataset>_<references>.json with both
    protocols' F1 means and intervals per system, and prints them."""
    from keras_hsum.data.reader import read_examples
    from keras_hsum.evaluation import report as reporting

    examples = [e for e in read_examples(data_path(dataset)) if e.sentences()]
    by_id = {e.id: e for e in examples}
    out = {"dataset": dataset, "table_references": DATASETS[dataset]["references"],
           "references": references, "systems": {}}
    for path in sorted(glob.glob(os.path.join(layout.RESULTS, dataset, "*.json"))):
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
        outputs = {e["id"]: e["summary"] for e in stored["examples"]}
        scored = [by_id[i] for i in outputs if i in by_id]
        if len(scored) != len(examples):
            continue  # not a validation report of the table
        again = reporting.evaluate(outputs, scored, name=stored["system"],
                                   references=references)
        out["systems"][os.path.basename(path)[:-len(".json")]] = {
            protocol: {m: {k: report["aggregate"][m]["f1"][k] for k in ("mean", "low", "high")}
                       for m in ("rouge1", "rouge2", "rougeL")}
            for protocol, report in ((stored["references"], stored), (references, again))
        }
    path = os.path.join(layout.RESULTS, f"{dataset}_{references}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(out, handle, indent=1)
    for system, scores in out["systems"].items():
        print(f"{system}: " + "; ".join(
            f"{protocol} " + " / ".join(f"{100 * v[m]['mean']:.2f}"
                                        for m in ("rouge1", "rouge2", "rougeL"))
            for protocol, v in scores.items()))
    print(f"-> {path}")
    return out


def sampling_seeds(name, seeds=(1, 2, 3, 4)):
    """A sampling row of record re-decoded with other seeds of the same
    settings, scored on its held-out training examples and on the validation
    split (mean of ROUGE-1 and ROUGE-2 F1, and each), to show how much of its
    score the draws decide. The row keeps its own seed; writes
    results/quality/<name>_sampling_seeds.json."""
    run = RUN_BY_NAME[name]
    if not run.sampling:
        raise ValueError(f"{name} does not decode by sampling (no `sampling` in its Run).")
    out = {"run": name, "sampling": dict(run.sampling), "beam_size": run.beam_size,
           "seeds": {}}
    for seed in (run.sampling.get("seed", 0),) + tuple(seeds):
        folder = os.path.join(layout.run_folder(name), f"seed_{seed}")
        export(name, out=os.path.join(folder, "export"),
               sampling=dict(run.sampling, seed=seed))
        scores = {}
        for split, data in (("holdout", holdout_file(*holdout_of(run))),
                            ("validation", data_path(run.dataset))):
            report = os.path.join(folder, f"{split}.json")
            keras_hsum("evaluate", "--model", os.path.join(folder, "export"), "--name", name,
                       "--data", data, "--references",
                       DATASETS[run.dataset]["references"], "--out", report)
            with open(report, encoding="utf-8") as handle:
                aggregate = json.load(handle)["aggregate"]
            r1, r2 = (aggregate[m]["f1"]["mean"] for m in ("rouge1", "rouge2"))
            scores[split] = {"rouge1": r1, "rouge2": r2, "mean": (r1 + r2) / 2}
        out["seeds"][str(seed)] = scores
    path = os.path.join(layout.RESULTS, f"{name}_sampling_seeds.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(out, handle, indent=1)
    for seed, scores in out["seeds"].items():
        print(f"seed {seed}: " + ", ".join(
            f"{split} {v['rouge1'] * 100:.2f} / {v['rouge2'] * 100:.2f}"
            for split, v in scores.items()))
    return out
