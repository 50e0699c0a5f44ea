"""ROUGE-N overlap against one reference, tokenised once.

Labels (ranker targets, SEAL proxy labels, the greedy oracle) score many
candidate texts against the same reference. `rouge_score.RougeScorer`
re-tokenises and re-stems the reference for every call; `RougeReference`
tokenises it once with rouge-score's own tokenizer (Porter stemming on) and
counts n-grams with the same definition (clipped counts; precision over the
candidate's n-grams, recall over the reference's, F1 their harmonic mean),
so its scores equal `RougeScorer(["rouge1", "rouge2"], use_stemmer=True)`'s.
"""

import collections
import functools

from nltk.stem import porter
from rouge_score import scoring
from rouge_score import tokenize


class _MemoizedStemmer:
    """rouge-score's Porter stemmer with a cache: the same words recur
    across the candidates of one example (and across examples), and
    stemming is most of rouge-score's tokenisation time."""

    def __init__(self):
        self._stem = functools.lru_cache(maxsize=1 << 18)(porter.PorterStemmer().stem)

    def stem(self, word):
        return self._stem(word)


@functools.lru_cache(maxsize=None)
def _stemmer():
    return _MemoizedStemmer()


def rouge_tokens(text):
    """rouge-score's tokens of `text`: lower-cased, stemmed words.

    Uses rouge-score's own `tokenize.tokenize` (so the tokens are exactly
    `DefaultTokenizer(use_stemmer=True)`'s) with a memoized stemmer.
    """
    return tokenize.tokenize(text, _stemmer())


def ngram_counts(tokens, n):
    """A Counter of the n-grams (tuples) of a token list."""
    return collections.Counter(
        tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)
    )


def overlap_score(reference_counts, candidate_counts):
    """rouge-score's `Score(precision, recall, fmeasure)` of two n-gram Counters."""
    overlap = sum(
        min(count, candidate_counts.get(gram, 0))
        for gram, count in reference_counts.items()
    )
    precision = overlap / max(sum(candidate_counts.values()), 1)
    recall = overlap / max(sum(reference_counts.values()), 1)
    return scoring.Score(
        precision=precision,
        recall=recall,
        fmeasure=scoring.fmeasure(precision, recall),
    )


class RougeReference:
    """A reference text whose n-grams are counted once.

    Args:
        reference: the reference str (or a list of already computed tokens).

    Example:
    >>> ref = RougeReference("the cat sat on the mat")
    >>> round(ref.score("the cat sat", n=2).recall, 2)
    0.4
    """

    def __init__(self, reference):
        self.tokens = (
            list(reference)
            if isinstance(reference, (list, tuple))
            else rouge_tokens(reference)
        )
        self._counts = {}

    def counts(self, n):
        if n not in self._counts:
            self._counts[n] = ngram_counts(self.tokens, n)
        return self._counts[n]

    def score(self, candidate, n):
        """ROUGE-n of `candidate` (str or token list) against the reference."""
        tokens = (
            candidate
            if isinstance(candidate, (list, tuple))
            else rouge_tokens(candidate)
        )
        return overlap_score(self.counts(n), ngram_counts(tokens, n))
