"""The data folders under runs/data/ that some runs train on (`Run.data`),
each written from ../shared/data's training splits only."""

import gzip
import itertools
import json
import os
import random

from . import layout
from .datasets import split_train_lines, train_lines
from .runs import RUN_BY_NAME


def _write_train_split(folder, lines):
    os.makedirs(folder, exist_ok=True)
    with gzip.open(os.path.join(folder, "train.jsonl.gz"), "wt", encoding="utf-8") as handle:
        handle.writelines(lines)
    print(f"wrote {len(lines)} examples to {folder}")


def _write_holdout_last(folder, lines, held, run):
    """Writes `lines` then the `held` lines last as `folder`'s training
    split, after checking that the run `run`'s `validation_holdout` holds
    out exactly the `held` ones."""
    lines = lines + held
    fraction = RUN_BY_NAME[run].overrides["validation_holdout"]
    if round(len(lines) * fraction) != len(held):
        raise ValueError(f"{len(lines)} examples with {len(held)} held out: {run}'s "
                         f"validation_holdout {fraction} would hold out another number.")
    _write_train_split(folder, lines)


def prepare_reviews():
    """runs/data/fewsum_reviews: both FewSum training splits, alternating."""
    sets = [train_lines(dataset) for dataset in ("fewsum_amazon", "fewsum_yelp")]
    _write_train_split(
        layout.prepared_folder("fewsum_reviews"),
        [line for pair in itertools.zip_longest(*sets) for line in pair if line],
    )


def prepare_science():
    """runs/data/scitldr_science: the ScisummNet training papers and the
    scitldr_a training papers outside flat_copy_scitldr's hold-out, shuffled."""
    lines = train_lines("scisummnet") + split_train_lines("scitldr_a", 0.1)[0]
    random.Random(0).shuffle(lines)
    _write_train_split(layout.prepared_folder("scitldr_science"), lines)


def prepare_bothsets():
    """runs/data/fewsum_bothsets: the fewsum_amazon training products
    outside the row of record's hold-out and every fewsum_yelp training
    product, alternating, then the 4 held-out amazon products last (the
    `validation_holdout` of pht_copy_bothsets_tuned_fewsum_amazon)."""
    amazon, held = split_train_lines("fewsum_amazon", 0.15)
    lines = [line for pair in itertools.zip_longest(amazon, train_lines("fewsum_yelp"))
             for line in pair if line]
    _write_holdout_last(layout.prepared_folder("fewsum_bothsets"), lines, held,
                        "pht_copy_bothsets_tuned_fewsum_amazon")


TITLE_CODE = "[title]"


def prepare_titles():
    """runs/data/scitldr_titles: one abstract -> title pair per ScisummNet
    training paper (its source opens with the sentence TITLE_CODE) and the
    scitldr_a training papers outside the row of record's hold-out, shuffled
    together, then its 199 held-out papers last (the `validation_holdout` of
    flat_copy_shift_titles_scitldr)."""
    from keras_hsum.data.sentences import split_sentences

    titles = []
    for line in train_lines("scisummnet"):
        paper = json.loads(line)
        titles.append(json.dumps({
            "id": f"title-{paper['id']}", "dataset": "scitldr_titles", "title": None,
            "query": None, "summary": paper["title"], "references": [paper["title"]],
            "documents": [{"title": None, "sections": [{
                "heading": "Abstract",
                "paragraphs": [[TITLE_CODE] + split_sentences(paper["summary"])]}]}],
        }) + "\n")
    trained, held = split_train_lines("scitldr_a", 0.1)
    lines = titles + trained
    random.Random(0).shuffle(lines)
    _write_holdout_last(layout.prepared_folder("scitldr_titles"), lines, held,
                        "flat_copy_shift_titles_scitldr")


# {Run.data: the function that writes that folder}
PREPARE = {"fewsum_reviews": prepare_reviews, "scitldr_science": prepare_science,
           "fewsum_bothsets": prepare_bothsets, "scitldr_titles": prepare_titles}
