"""ROUGE through rouge-score, multi-reference scoring and bootstrap intervals.

Every score is computed by `rouge_score.rouge_scorer.RougeScorer` with
Porter stemming on (`use_stemmer=True`), so numbers are comparable with
papers that report rouge-score. ROUGE-Lsum (summary-level LCS) needs one
sentence per line: a text that already holds a newline is used as it is,
otherwise it is split with `keras_hsum.data.split_sentences` (or the
`sentence_splitter` given) and joined with newlines. ROUGE-1/2/L ignore
line breaks (rouge-score's tokenizer treats them as spaces).

Scores are fractions in [0, 1]; reports multiply by 100 only for display.

- `score`: one prediction against one or several references, per metric
  `{"precision", "recall", "f1"}`; with several references the best
  reference per metric (`"max"`, by F1, as rouge-score's `score_multi`),
  every metric from the one reference of best ROUGE-1 F1 (`"max_rouge1"`,
  SciTLDR's protocol: allenai/scitldr's evaluate.py keeps the scores of the
  reference of highest ROUGE-1 F), or the mean over references (`"mean"`).
- `score_corpus`: per-example scores and their corpus means.
- `bootstrap_interval`: a seeded percentile bootstrap confidence interval of
  a mean (Efron & Tibshirani 1993); `paired_bootstrap` compares two systems
  on the same examples (Koehn 2004).
"""

import functools
import re

import numpy as np
from rouge_score import rouge_scorer

from keras_hsum.checks import check_int
from keras_hsum.data.sentences import split_sentences

METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")
MEASURES = ("precision", "recall", "f1")
MULTI_REFERENCE = ("max", "mean", "max_rouge1")


@functools.lru_cache(maxsize=None)
def _scorer(metrics):
    return rouge_scorer.RougeScorer(list(metrics), use_stemmer=True)


def _check_metrics(metrics):
    if isinstance(metrics, str):
        metrics = (metrics,)
    metrics = tuple(metrics)
    unknown = [m for m in metrics if m not in METRICS and not _is_rouge_n(m)]
    if not metrics or unknown:
        raise ValueError(
            f"`metrics` must be a non-empty sequence of {METRICS} (or any "
            f"'rougeN'); received {metrics!r}. Pick names from that list."
        )
    return metrics


def _is_rouge_n(name):
    suffix = name[len("rouge") :] if name.startswith("rouge") else ""
    return suffix.isdigit() and int(suffix) >= 1


def lines_for_lsum(text, sentence_splitter=None):
    """Puts one sentence per line, as ROUGE-Lsum expects.

    Args:
        text: a str. If it already holds a newline it is returned unchanged
            (stripped): its lines are taken to be its sentences.
        sentence_splitter: a callable str -> list of str; defaults to
            `keras_hsum.data.split_sentences`.

    Returns:
        The sentences of `text` joined by "\\n" (a str).
    """
    if not isinstance(text, str):
        raise TypeError(
            f"Expected a str summary, received {type(text).__name__}; pass "
            "the summary text (join a list of sentences with '\\n')."
        )
    text = text.strip()
    if "\n" in text:
        return text
    splitter = sentence_splitter or split_sentences
    return "\n".join(splitter(text))


def split_at_terminal_tokens(text):
    """Sentence splitter for tokenised, possibly lower-cased text.

    `split_sentences` needs an upper-case letter or a digit after a full
    stop; lower-cased tokenised text (e.g. the SummEval system outputs,
    "... on sunday . ` just been ...") is one sentence to it. This splitter
    ends a sentence at every run of `.`, `!` or `?` followed by whitespace.

    Args:
        text: a str.

    Returns:
        A list of non-empty, stripped sentences (str).
    """
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def _references(references):
    if isinstance(references, str):
        references = (references,)
    references = tuple(references)
    if not references or not all(isinstance(r, str) for r in references):
        raise ValueError(
            "`references` must be a str or a non-empty sequence of str; "
            f"received {references!r:.80}. Pass example.references or "
            "(example.summary,)."
        )
    return references


def _as_dict(score):
    return {
        "precision": float(score.precision),
        "recall": float(score.recall),
        "f1": float(score.fmeasure),
    }


def score(
    prediction,
    references,
    metrics=METRICS,
    multi_reference="max",
    sentence_splitter=None,
):
    """ROUGE of one prediction against one or several references.

    Args:
        prediction: the system summary (str).
        references: a reference str, or a sequence of R >= 1 str.
        metrics: rouge-score metric names, by default `METRICS`.
        multi_reference: with R > 1, `"max"` keeps, per metric, the scores
            of the reference with the highest F1 (rouge-score's
            `score_multi`); `"max_rouge1"` keeps every metric's scores
            against the one reference of highest ROUGE-1 F1 (the first on
            ties; SciTLDR's protocol: ROUGE-1 as "max", ROUGE-2/L at most
            "max"'s); `"mean"` averages precision, recall and F1 over the R
            references separately.
        sentence_splitter: the splitter for ROUGE-Lsum (see
            `lines_for_lsum`).

    Returns:
        A dict metric -> {"precision": float, "recall": float, "f1": float},
        each in [0, 1].

    Example:
    >>> s = score("The cat sat on the mat.", "A cat sat on a mat.")
    >>> round(s["rouge1"]["f1"], 3)
    0.667
    """
    metrics = _check_metrics(metrics)
    references = _references(references)
    if multi_reference not in MULTI_REFERENCE:
        raise ValueError(
            f"`multi_reference` must be one of {MULTI_REFERENCE}, received "
            f"{multi_reference!r}."
        )
    if not isinstance(prediction, str):
        raise TypeError(
            f"Expected the prediction as a str, received "
            f"{type(prediction).__name__}; join extracted sentences first."
        )
    # max_rouge1 picks the reference by ROUGE-1, asked for or not.
    scored = metrics if multi_reference != "max_rouge1" or "rouge1" in metrics \
        else metrics + ("rouge1",)
    scorer = _scorer(scored)
    needs_lines = "rougeLsum" in metrics
    if needs_lines:
        prediction = lines_for_lsum(prediction, sentence_splitter)
        references = tuple(lines_for_lsum(r, sentence_splitter) for r in references)
    per_reference = [scorer.score(r, prediction) for r in references]
    result = {}
    if multi_reference == "max_rouge1":
        chosen = max(range(len(per_reference)),
                     key=lambda i: (per_reference[i]["rouge1"].fmeasure, -i))
        return {metric: _as_dict(per_reference[chosen][metric]) for metric in metrics}
    for metric in metrics:
        scores = [s[metric] for s in per_reference]
        if multi_reference == "max":
            best = max(range(len(scores)), key=lambda i: scores[i].fmeasure)
            result[metric] = _as_dict(scores[best])
        else:
            result[metric] = {
                "precision": float(np.mean([s.precision for s in scores])),
                "recall": float(np.mean([s.recall for s in scores])),
                "f1": float(np.mean([s.fmeasure for s in scores])),
            }
    return result


def score_corpus(
    predictions,
    references,
    metrics=METRICS,
    multi_reference="max",
    sentence_splitter=None,
):
    """Per-example ROUGE and its corpus mean.

    Args:
        predictions: a sequence of N str.
        references: a sequence of N items, each a str or a sequence of str.
        metrics, multi_reference, sentence_splitter: as in `score`.

    Returns:
        `(per_example, mean)`: a list of N `score` dicts, and one dict
        metric -> measure -> float, the mean over the N examples (the usual
        "corpus" ROUGE of rouge-score users: a macro average).
    """
    predictions = list(predictions)
    references = list(references)
    if len(predictions) != len(references):
        raise ValueError(
            f"Expected as many references as predictions, received "
            f"{len(predictions)} predictions and {len(references)} "
            "references."
        )
    if not predictions:
        raise ValueError("Expected at least one prediction, received none.")
    metrics = _check_metrics(metrics)
    per_example = [
        score(p, r, metrics, multi_reference, sentence_splitter)
        for p, r in zip(predictions, references)
    ]
    mean = {
        metric: {
            measure: float(np.mean([s[metric][measure] for s in per_example]))
            for measure in MEASURES
        }
        for metric in metrics
    }
    return per_example, mean


def _values(values):
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(
            "Expected a non-empty 1-D sequence of per-example values [N], "
            f"received shape {values.shape}."
        )
    return values


def _check_bootstrap(num_resamples, confidence):
    check_int("num_resamples", num_resamples)
    if not 0.0 < confidence < 1.0:
        raise ValueError(
            f"`confidence` must lie in (0, 1), e.g. 0.95; received {confidence!r}."
        )


def bootstrap_means(values, num_resamples=1000, seed=0):
    """Means of bootstrap resamples of `values`.

    Resample b draws N indices uniformly with replacement; all indices come
    from one call `numpy.random.default_rng(seed).integers(0, N,
    size=(num_resamples, N))`, so a seed fixes the resamples.

    Args:
        values: per-example values, float [N].
        num_resamples: B.
        seed: int seed of a private numpy Generator (no global state).

    Returns:
        float64 array [B].
    """
    values = _values(values)
    _check_bootstrap(num_resamples, 0.95)
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, values.size, size=(num_resamples, values.size))
    return values[indices].mean(axis=1)


def bootstrap_interval(values, num_resamples=1000, confidence=0.95, seed=0):
    """Percentile bootstrap confidence interval of the mean.

    Args:
        values: per-example values, float [N].
        num_resamples: B resamples of N examples with replacement.
        confidence: the interval's coverage, e.g. 0.95.
        seed: int seed (see `bootstrap_means`).

    Returns:
        A dict {"mean": float, "low": float, "high": float}: the sample
        mean and the (1-confidence)/2 and (1+confidence)/2 percentiles
        (numpy's linear interpolation) of the resampled means.
    """
    values = _values(values)
    _check_bootstrap(num_resamples, confidence)
    means = bootstrap_means(values, num_resamples, seed)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(means, [100 * alpha, 100 * (1 - alpha)])
    return {"mean": float(values.mean()), "low": float(low), "high": float(high)}


def paired_bootstrap(values_a, values_b, num_resamples=1000, confidence=0.95, seed=0):
    """Paired bootstrap comparison of two systems on the same N examples.

    Both systems are resampled with the same example indices (Koehn 2004);
    the statistic is mean(a) - mean(b).

    Args:
        values_a: system A's per-example values, float [N].
        values_b: system B's per-example values, float [N], same examples.
        num_resamples, confidence, seed: as in `bootstrap_interval`.

    Returns:
        A dict {"difference", "low", "high", "p_value"}: the observed mean
        difference, its percentile interval, and the one-sided bootstrap
        p-value of "A is not better than B": the fraction of resamples
        whose difference is <= 0.
    """
    a, b = _values(values_a), _values(values_b)
    if a.shape != b.shape:
        raise ValueError(
            "A paired bootstrap needs both systems scored on the same "
            f"examples; received {a.size} and {b.size} values."
        )
    _check_bootstrap(num_resamples, confidence)
    differences = bootstrap_means(a - b, num_resamples, seed)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(differences, [100 * alpha, 100 * (1 - alpha)])
    return {
        "difference": float((a - b).mean()),
        "low": float(low),
        "high": float(high),
        "p_value": float(np.mean(differences <= 0.0)),
    }
