"""How each dataset is scored, its published figures, and its training split."""

import gzip
import json
import os
import statistics

from . import layout

# How each dataset is scored (see ../shared/data/README.md).
DATASETS = {
    "qmsum_goldspan": {"references": "primary"},
    "qmsum_general": {"references": "primary"},
    "scisummnet": {"references": "primary"},
    "scitldr_a": {"references": "max"},
    "fewsum_amazon": {"references": "mean"},
    "fewsum_yelp": {"references": "mean"},
    "cnndm": {"references": "primary", "file": "summeval100", "split": "test"},
}

# Published figures for these data (ROUGE F1 x100), with where they come from.
# The QMSum paper reports "ROUGE-L" without saying which variant.
PUBLISHED = {
    "qmsum_goldspan": [
        ("QMSum pointer-generator, gold spans (Zhong et al. 2021; test split)",
         {"rouge1": 31.52, "rouge2": 8.69, "rougeL": 27.63}),
    ],
    "qmsum_general": [
        ("QMSum PGNet, all queries (Zhong et al. 2021; test split)",
         {"rouge1": 28.74, "rouge2": 5.98, "rougeL": 25.13}),
        ("QMSum BART, all queries (Zhong et al. 2021; test split)",
         {"rouge1": 29.20, "rouge2": 6.37, "rougeL": 25.49}),
    ],
    "cnndm": [
        ("LEAD-3 (SummEval M0, as ../shared/data/README.md states it)",
         {"rouge1": 42.00, "rouge2": 19.37, "rougeLsum": 38.12}),
    ],
}

# Published systems' own summaries of a validation split, kept in
# benchmarks/published/ with their source and licence (see its README), and
# scored with the same evaluator: the one published comparison on the same
# examples and protocol. FewSum released its final model's summaries of the
# very validation products that ../shared/data ships.
PUBLISHED_OUTPUTS = {
    "fewsum_amazon": ("fewsum_generated_val.json", "amazon"),
    "fewsum_yelp": ("fewsum_generated_val.json", "yelp"),
}

BASELINES = ("lead", "lexrank", "textrank", "oracle")


def data_path(dataset, split=None):
    """The JSONL file of `dataset`'s `split` (default: the split the table scores)."""
    spec = DATASETS[dataset]
    split = split or spec.get("split", "val")
    folder = os.path.join(layout.SHARED, dataset)
    return os.path.join(folder, f"{spec.get('file', split)}.jsonl.gz")


def train_lines(dataset):
    """The non-blank JSONL lines of `dataset`'s training split, in file order."""
    with gzip.open(data_path(dataset, "train"), "rt", encoding="utf-8") as handle:
        return [line for line in handle if line.strip()]


def split_train_lines(dataset, fraction):
    """(trained on, held out): the training lines of runs with
    `validation_holdout=fraction`, each in file order."""
    from keras_hsum.training import resolve_data

    _, held_out = resolve_data(os.path.join(layout.SHARED, dataset), dataset, holdout=fraction)
    ids = {example.id for example in held_out}
    lines = train_lines(dataset)
    held = [json.loads(line)["id"] in ids for line in lines]
    return ([line for line, h in zip(lines, held) if not h],
            [line for line, h in zip(lines, held) if h])


def train_examples(dataset):
    """`dataset`'s training examples (none where it has no training split)."""
    from keras_hsum.data.reader import read_examples

    path = data_path(dataset, "train")
    return list(read_examples(path)) if os.path.exists(path) else []


def lead_k(dataset):
    """Lead-k's k: the mean number of reference sentences in the training
    split, 3 where there is none."""
    from keras_hsum.data.sentences import split_sentences

    examples = train_examples(dataset)
    if not examples:
        return 3
    return max(1, round(statistics.mean(len(split_sentences(e.summary)) for e in examples)))
