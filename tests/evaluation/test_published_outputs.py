"""A peer's own numbers: FewSum's published validation summaries, scored by
`keras_hsum.evaluation` with the mean over references, give exactly the
per-product ROUGE that FewSum's authors stored beside them
(benchmarks/published/, from abrazinskas/FewSum; their scorer is
rouge-score with stemming, averaging precision, recall and F1 over a
product's 3 references)."""

import json
import os

import pytest

from keras_hsum.data.corpora import sample_path
from keras_hsum.data.reader import read_examples
from keras_hsum.evaluation import report

PUBLISHED = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks", "published", "fewsum_generated_val.json")


@pytest.mark.parametrize("name", ["amazon", "yelp"])
def test_mean_over_references_reproduces_fewsums_own_scores(name):
    with open(PUBLISHED, encoding="utf-8") as handle:
        published = json.load(handle)
    examples = list(read_examples(sample_path(f"fewsum_{name}", "val")))
    outputs, theirs = published[name], published["fewsum_scores"][name]
    assert [e.id for e in examples] == list(outputs) == list(theirs)
    assert all(len(e.references) == 3 for e in examples)
    scored = report.evaluate(outputs, examples, name="FewSum", references="mean",
                             num_resamples=10)
    for row in scored["examples"]:
        for metric in ("rouge1", "rouge2", "rougeL"):
            for ours, their in (("precision", "p"), ("recall", "r"), ("f1", "f")):
                assert row["scores"][metric][ours] == pytest.approx(
                    theirs[row["id"]][metric][their], abs=1e-12), (row["id"], metric, ours)
    # Scoring against the maximum instead differs: the check can fail.
    best = report.evaluate(outputs, examples, name="FewSum", references="max",
                           num_resamples=10)
    assert any(row["scores"]["rouge1"]["f1"] > theirs[row["id"]]["rouge1"]["f"] + 1e-3
               for row in best["examples"])
