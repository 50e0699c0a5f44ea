"""Evaluation: ROUGE (rouge-score), extractive baselines, reports and plots.

- `keras_hsum.evaluation.rouge`: ROUGE-1/2/L/Lsum, multi-reference scoring,
  corpus means, bootstrap confidence intervals, paired bootstrap.
- `keras_hsum.evaluation.baselines`: Lead-k, LexRank, TextRank, the greedy
  ROUGE oracle; `BASELINES` maps "lead3", "lexrank", "textrank", "oracle"
  to them.
- `keras_hsum.evaluation.report`: evaluate a system on examples, JSON,
  markdown and PNG output.
- `keras_hsum.evaluation.cli`: the `keras-hsum evaluate` command.
"""

from keras_hsum.evaluation.baselines import BASELINES
from keras_hsum.evaluation.baselines import Extract
from keras_hsum.evaluation.baselines import get_baseline
from keras_hsum.evaluation.baselines import lead
from keras_hsum.evaluation.baselines import lexrank
from keras_hsum.evaluation.baselines import oracle
from keras_hsum.evaluation.baselines import textrank
from keras_hsum.evaluation.report import evaluate
from keras_hsum.evaluation.rouge import bootstrap_interval
from keras_hsum.evaluation.rouge import paired_bootstrap
from keras_hsum.evaluation.rouge import score
from keras_hsum.evaluation.rouge import score_corpus
