"""ROUGE-N and the greedy oracle on id sequences, transcribed with
`collections.Counter` and from-scratch scoring: the independent reference
of `keras_hsum.data.id_rouge` and of the label extras that run it.

The extract of the greedy oracle is scored by concatenating its sentences
in document order and counting its n-grams again (no incremental update,
no junction bookkeeping).
"""

import collections

import numpy as np


def grams(sequence, n):
    return collections.Counter(tuple(sequence[i : i + n]) for i in range(len(sequence) - n + 1))


def score(candidate, reference, n):
    """(precision, recall, F1) of ROUGE-n, as rouge-score defines them."""
    c, r = grams(candidate, n), grams(reference, n)
    overlap = sum(min(count, c.get(g, 0)) for g, count in r.items())
    precision = overlap / max(sum(c.values()), 1)
    recall = overlap / max(sum(r.values()), 1)
    f = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f


def extract_score(sentences, chosen, references, orders):
    extract = [i for k in sorted(chosen) for i in sentences[k]]
    return np.mean([sum(score(extract, r, n)[2] for n in orders) for r in references])


def greedy(sentences, references, orders=(1, 2), max_sentences=None):
    """The greedy oracle: sorted chosen indices."""
    chosen, current = [], 0.0
    limit = len(sentences) if max_sentences is None else max_sentences
    while len(chosen) < limit:
        best = None
        for k in range(len(sentences)):
            if k in chosen:
                continue
            value = extract_score(sentences, chosen + [k], references, orders)
            if value > current and (best is None or value > best[0]):
                best = (value, k)
        if best is None:
            break
        current = best[0]
        chosen.append(best[1])
    return sorted(chosen)


def rouge_ids(ids, table):
    """ROUGE ids of one sequence: the table's ids, dropped pieces removed."""
    return [int(table[i]) for i in ids if table[i] >= 0]
