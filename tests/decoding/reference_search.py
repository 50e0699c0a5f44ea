"""The beam search of keras_hsum 1c4cd50, transcribed eagerly: the reference
that `search`'s two-stage top-k and chunked stop check must reproduce.

A Python loop over positions with numpy pools; the step function and the
score terms run on tensors as in the search, the log-softmax with
`ops.log_softmax` in float32, the candidates by one `top_k` over the
flattened [B, K·V'] scores (lower flat index first among equals), and the
stop condition checked after every position. Beam search and greedy only
(no sampling).
"""

import numpy as np
from keras import ops

from keras_hsum.decoding.terms import DEAD
from keras_hsum.decoding.terms import NEG_INF
from keras_hsum.decoding.terms import StepContext


def _numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def _gather(x, parents):
    """x [B,N,...], parents [B,M] → [B,M,...]."""
    return x[np.arange(x.shape[0])[:, None], parents]


def _penalty(terms, lengths):
    penalty = None
    for term in terms:
        value = term.length_penalty(ops.convert_to_tensor(lengths, "int32"))
        if value is not None:
            penalty = _numpy(value) if penalty is None else penalty * _numpy(value)
    return penalty


def reference_search(step_fn, state, batch_size, *, beam_size, max_length, bos_id, eos_id,
                     pad_id=0, terms=(), greedy=False):
    """Returns `(result, stop)`: the dict of `search` (numpy, aux left out)
    and the position the search stopped at (L when it ran to the end)."""
    B, K, L = batch_size, beam_size, max_length
    C = K if greedy else 2 * K
    alive_seq = np.full((B, K, L), pad_id, "int32")
    alive_lp = np.tile(np.array([0.0] + [NEG_INF] * (K - 1), "float32"), (B, 1))
    term_states = [tuple(_numpy(s) for s in t.initial_state(B, K)) for t in terms]
    fin_seq = np.full((B, K, L), pad_id, "int32")
    fin_scores = np.full((B, K), NEG_INF, "float32")
    fin_lp = np.full((B, K), NEG_INF, "float32")
    fin_len = np.zeros((B, K), "int32")
    ids = np.full((B * K,), bos_id, "int32")
    bounds = [t.score_bound(B, L) for t in terms]
    early_stop = all(b is not None for b in bounds)
    penalties = _penalty(terms, np.arange(1, L + 1))
    for index in range(L):
        logits, state, aux = step_fn(ops.convert_to_tensor(ids), ops.convert_to_tensor(
            index, "int32"), state)
        log_probs = ops.log_softmax(ops.cast(ops.reshape(logits, (B, K, -1)), "float32"))
        V = int(log_probs.shape[-1])
        step_aux = {n: ops.reshape(v, (B, K) + tuple(v.shape[1:])) for n, v in aux.items()}
        context = StepContext(ops.convert_to_tensor(alive_seq), ops.convert_to_tensor(
            index, "int32"), eos_id, L)
        for term, st in zip(terms, term_states):
            log_probs = term.mask_log_probs(log_probs, tuple(map(ops.convert_to_tensor, st)),
                                            context)
        new_states = [tuple(_numpy(s) for s in term.update_state(
            tuple(map(ops.convert_to_tensor, st)), step_aux, context))
            for term, st in zip(terms, term_states)]
        log_probs = _numpy(log_probs)
        totals = alive_lp[:, :, None] + log_probs
        totals = np.where((log_probs <= DEAD) | (alive_lp <= DEAD)[:, :, None], NEG_INF, totals)
        values, flat = ops.top_k(ops.convert_to_tensor(totals.reshape(B, K * V)), C)
        values, flat = _numpy(values), _numpy(flat).astype("int32")
        parents, tokens = flat // V, flat % V
        valid = values > DEAD
        seqs = _gather(alive_seq, parents)
        seqs[:, :, index] = tokens
        cand_states = [tuple(_gather(s, parents) for s in st) for st in new_states]
        ends = (tokens == eos_id) | (index == L - 1)
        finishing = valid & ends
        # alive: the best K that did not end, by log-prob
        chosen_lp, chosen = ops.top_k(ops.convert_to_tensor(
            np.where(valid & ~ends, values, NEG_INF).astype("float32")), K)
        chosen = _numpy(chosen).astype("int32")
        alive_seq, alive_lp = _gather(seqs, chosen), _numpy(chosen_lp)
        term_states = [tuple(_gather(s, chosen) for s in st) for st in cand_states]
        rows = (_gather(parents, chosen) + np.arange(B)[:, None] * K).reshape(-1)
        state = _map(lambda leaf: ops.take(leaf, ops.convert_to_tensor(rows), axis=0), state)
        ids = alive_seq[:, :, index].reshape(-1)
        # finished: merge, best K by score
        lengths = np.full(values.shape, index + 1, "int32")
        scores, penalty = values, _penalty(terms, lengths)
        if penalty is not None:
            scores = scores / penalty
        for term, st in zip(terms, cand_states):
            bonus = term.score(tuple(map(ops.convert_to_tensor, st)),
                               ops.convert_to_tensor(lengths))
            if bonus is not None:
                scores = scores + _numpy(bonus)
        scores = np.where(finishing, scores, NEG_INF).astype("float32")
        top, picked = ops.top_k(ops.convert_to_tensor(np.concatenate([fin_scores, scores], 1)), K)
        picked = _numpy(picked).astype("int32")
        merge = lambda old, new: _gather(np.concatenate([old, new], 1), picked)
        fin_seq, fin_scores = merge(fin_seq, seqs), _numpy(top)
        fin_lp = merge(fin_lp, np.where(finishing, values, NEG_INF).astype("float32"))
        fin_len = merge(fin_len, np.where(finishing, lengths, 0))
        # stop?
        best = alive_lp.max(1)
        done = best <= DEAD
        if early_stop and index + 1 < L:
            bound = best
            if penalties is not None:
                bound = best / penalties[index + 1:].max()
            for b in bounds:
                bound = bound + np.reshape(_numpy(ops.convert_to_tensor(b, "float32")), (-1,))
            done = done | ((fin_scores > DEAD).all(1) & (fin_scores.min(1) >= bound))
        if done.all():
            return _result(fin_seq, fin_scores, fin_lp, fin_len), index + 1
    return _result(fin_seq, fin_scores, fin_lp, fin_len), L


def _map(function, nest):
    if isinstance(nest, dict):
        return {k: _map(function, v) for k, v in nest.items()}
    if isinstance(nest, (list, tuple)):
        return type(nest)(_map(function, v) for v in nest)
    return function(nest)


def _result(sequences, scores, log_probs, lengths):
    return {"sequences": sequences, "scores": scores, "log_probs": log_probs, "lengths": lengths}
