"""A toy "model" for search tests: next-token log-probs from a table.

T[index, prev, last] [V]: the distribution of the token at `index` given the
two tokens before it (`prev` is carried in the search state, so beam
reordering must gather it; `last` is the step's `ids`). Optional per-step aux
`paragraph_attention` = A[last] [P] (a function of the input token).
"""

import itertools

import numpy as np
from keras import ops

BOS, EOS = 0, 1


def random_table(seed, length, vocabulary, peak=0.0):
    """float32 log-probs [L,V,V,V]; pad/BOS (id 0) is never generated.

    `peak` > 0 sharpens the distributions (degenerate, repetitive models).
    """
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(length, vocabulary, vocabulary, vocabulary)) * (1.0 + peak)
    logits[..., 0] = -1e4
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype("float32")


def table_step_fn(table, attention=None):
    """`search` step function over `table` [L,V,V,V] (and attention [V,P])."""
    length, vocabulary = table.shape[0], table.shape[-1]
    flat = ops.convert_to_tensor(table.reshape(-1, vocabulary))
    attention = None if attention is None else ops.convert_to_tensor(attention, "float32")

    def step_fn(ids, index, state):
        ids = ops.cast(ids, "int32")
        row = (ops.minimum(index, length - 1) * vocabulary + state["prev"]) * vocabulary + ids
        logits = ops.take(flat, row, axis=0)
        aux = {} if attention is None else {"paragraph_attention": ops.take(attention, ids, axis=0)}
        return logits, {"prev": ids}, aux

    return step_fn


def initial_state(batch_size, beam_size):
    return {"prev": ops.zeros((batch_size * beam_size,), "int32")}


def sequence_log_prob(table, tokens):
    """log P(tokens) under `table` (numpy), tokens a tuple of ids."""
    prev, last, total = BOS, BOS, 0.0
    for index, token in enumerate(tokens):
        total += float(table[index, prev, last, token])
        prev, last = last, token
    return total


def all_hypotheses(vocabulary, max_length):
    """Every finished hypothesis: EOS-terminated ones of length 1..L and the
    cut ones of length L without EOS (tokens 2..V-1 before the end)."""
    words = range(2, vocabulary)
    for n in range(1, max_length + 1):
        for prefix in itertools.product(words, repeat=n - 1):
            yield prefix + (EOS,)
    yield from itertools.product(words, repeat=max_length)
