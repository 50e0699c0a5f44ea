"""Minimum Bayes risk (MBR) reranking of a beam search's finished hypotheses.

Beam search returns the K hypotheses of highest model score; MBR decoding
(Kumar & Byrne 2004) returns instead the one that agrees most with the
others, the hypothesis h maximising its expected utility under the
candidates taken as samples of the model's output distribution:

    E[U](h) = 1 / (K' - 1) · Σ_{h' ≠ h} U(h, h'),

with K' the valid (non-empty) hypotheses and U the mean over the n-gram
orders n of ROUGE-N F1 computed on token ids (subword pieces, no
stemming): with c_h(g) the count of n-gram g in h,

    match_n(h, h') = Σ_g min(c_h(g), c_h'(g)),
    ROUGE-N F1(h, h') = 2 · match_n / (|h|_n + |h'|_n)

(|h|_n: the number of n-grams of h; 0 when both are empty).

Everything is keras.ops over fixed shapes (no hashing, no Python loop over
tokens): the clipped count is Σ over the n-gram positions p of h of
[c_h'(g_p) > r_h(p)], where r_h(p) counts the earlier positions of h with
the same n-gram (the first occurrence has rank 0, so an n-gram occurring a
times in h and b times in h' contributes min(a, b)), and both counts come
from position-by-position equality of n-grams.

Cost: O(B · K² · L²) comparisons per order; for K = 8 and L = 64, 262,144
per example.
"""

from keras import ops

from keras_hsum.decoding.beam_search import gather_beams
from keras_hsum.decoding.terms import DEAD  # an empty slot's score bound
from keras_hsum.decoding.terms import NEG_INF
from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_rank


def _ngrams(x, n, dims):
    """x and its shifts by 1..n-1 along its last `dims` axes, AND-ed.

    With x the token equality [..., L, L'] (dims=2): the n-gram equality
    [..., L-n+1, L'-n+1]; with x the token validity [..., L] (dims=1): the
    validity of the n-grams starting at each position [..., L-n+1].
    """
    # Dynamic sizes: in a SavedModel's graph K and L may be unknown.
    sizes = [ops.shape(x)[axis] - n + 1 for axis in range(-dims, 0)]

    def shifted(d):
        index = (Ellipsis,) + tuple(slice(d, d + size) for size in sizes)
        return x[index]

    out = shifted(0)
    for d in range(1, n):
        out = ops.logical_and(out, shifted(d))
    return out


def pairwise_rouge_n(sequences, valid, n):
    """ROUGE-N F1 between every pair of hypotheses of each example.

    Args:
        sequences: int [B,K,L] token ids.
        valid: bool [B,K,L], the tokens that count (not padding, not EOS).
        n: the n-gram order (1 <= n <= L).

    Returns:
        float32 [B,K,K]: F1(i, j), symmetric, 0 where both have no n-gram.
    """
    length = sequences.shape[-1]  # None inside some graphs
    if n < 1 or (length is not None and n > length):
        raise ValueError(
            f"The n-gram order must be between 1 and the sequence length "
            f"{length}; received n={n}."
        )
    sequences = ops.convert_to_tensor(sequences)
    valid = ops.cast(valid, "bool")
    check_rank("pairwise_rouge_n", "sequences", sequences.shape, 3, "[B,K,L]")
    check_dims("pairwise_rouge_n", "valid", valid.shape, tuple(sequences.shape), "[B,K,L]")
    a = sequences[:, :, None, :, None]  # [B,K,1,L,1]
    b = sequences[:, None, :, None, :]  # [B,1,K,1,L]
    both = ops.logical_and(valid[:, :, None, :, None], valid[:, None, :, None, :])
    eq1 = ops.logical_and(ops.equal(a, b), both)  # [B,K,K,L,L]
    equal = _ngrams(eq1, n, dims=2)  # [B,K,K,L',L']
    grams = _ngrams(valid, n, dims=1)  # [B,K,L'] n-gram validity of each hypothesis
    # c_j(g_p): occurrences in hypothesis j of the n-gram at position p of i.
    counts = ops.sum(ops.cast(equal, "int32"), axis=-1)  # [B,K,K,L']
    # r_i(p): earlier positions of i holding the same n-gram (its own
    # equality block is the diagonal i = j).
    own = ops.diagonal(equal, axis1=1, axis2=2)  # [B,L',L',K]
    own = ops.transpose(own, (0, 3, 1, 2))  # [B,K,L',L']
    positions = ops.arange(ops.shape(own)[-1], dtype="int32")
    earlier = positions[None, :] < positions[:, None]  # [p, p']: p' < p
    ranks = ops.sum(ops.cast(ops.logical_and(own, earlier), "int32"), axis=-1)
    matched = ops.logical_and(counts > ranks[:, :, None, :], grams[:, :, None, :])
    matches = ops.sum(ops.cast(matched, "float32"), axis=-1)  # [B,K,K]
    totals = ops.sum(ops.cast(grams, "float32"), axis=-1)  # [B,K]
    denominator = totals[:, :, None] + totals[:, None, :]
    return ops.where(
        denominator > 0, 2.0 * matches / ops.maximum(denominator, 1.0), 0.0
    )


def expected_utility(sequences, lengths, scores, *, eos_id, pad_id=0, orders=(1, 2)):
    """Each hypothesis's expected utility against the other valid ones.

    Args:
        sequences: int [B,K,L] (a `beam_search` result's `sequences`).
        lengths: int [B,K], tokens generated (EOS included).
        scores: float [B,K]; a slot at or below `NEG_INF / 2` is empty.
        eos_id, pad_id: ids that are not content.
        orders: the n-gram orders whose ROUGE-N F1 the utility averages.

    Returns:
        float32 [B,K]: E[U](h) (see the module docstring); 0 for the only
        valid hypothesis of an example, `NEG_INF` for empty slots.
    """
    if not orders:
        raise ValueError("MBR needs at least one n-gram order; received orders=().")
    sequences = ops.cast(sequences, "int32")
    lengths = ops.cast(lengths, "int32")
    scores = ops.cast(scores, "float32")
    check_rank("expected_utility", "sequences", sequences.shape, 3, "[B,K,L]")
    for name, value in (("lengths", lengths), ("scores", scores)):
        check_dims("expected_utility", name, value.shape, tuple(sequences.shape[:2]), "[B,K]")
    length = sequences.shape[-1]  # None inside some graphs
    positions = ops.arange(ops.shape(sequences)[-1], dtype="int32")
    valid = positions[None, None, :] < lengths[:, :, None]
    valid = ops.logical_and(valid, ops.not_equal(sequences, eos_id))
    valid = ops.logical_and(valid, ops.not_equal(sequences, pad_id))
    alive = scores > DEAD  # [B,K]
    utility = 0.0
    for n in orders:
        n = int(n)
        if length is not None and n > length:  # no n-gram fits: F1 is 0
            continue
        utility = utility + pairwise_rouge_n(sequences, valid, n)
    utility = utility / float(len(orders))
    index = ops.arange(ops.shape(sequences)[1], dtype="int32")
    others = ops.logical_and(
        ops.logical_and(alive[:, :, None], alive[:, None, :]),
        ops.not_equal(index[:, None], index[None, :])[None],
    )
    others_f = ops.cast(others, "float32")
    count = ops.sum(others_f, axis=-1)  # [B,K]
    expected = ops.sum(utility * others_f, axis=-1) / ops.maximum(count, 1.0)
    return ops.where(alive, expected, NEG_INF)


def mbr_rerank(result, *, eos_id, pad_id=0, orders=(1, 2)):
    """Reorders a beam search's hypotheses by expected utility (MBR).

    Args:
        result: the dict of `keras_hsum.decoding.beam_search` (`sequences`
            [B,K,L], `scores`, `log_probs`, `lengths` [B,K], `aux` name →
            [B,K,...]).
        eos_id, pad_id: the model's special ids.
        orders: n-gram orders of the utility (default: ROUGE-1 and ROUGE-2).

    Returns:
        The same dict, every [B,K,...] entry reordered so that hypothesis 0
        is the MBR choice, the rest following by decreasing expected utility
        (ties, to 1e-6, keep the beam's order; empty slots last), plus `mbr_utility`
        float32 [B,K] in that order. `scores` keep the search's scores.

    Example (after `out = beam_search(model, batch, beam_size=8)` or
    `sample_search`: `mbr_rerank(out, eos_id=model.eos_id)["sequences"][:, 0]`
    is the MBR choice of each example; here a hand-made result):
        >>> result = {  # B = 1, K = 3 hypotheses ending in EOS (3), best score first
        ...     "sequences": np.array([[[5, 6, 7, 3], [8, 6, 7, 3], [8, 6, 9, 3]]]),
        ...     "lengths": np.array([[4, 4, 4]]),
        ...     "scores": np.array([[-1.0, -1.2, -1.5]], "float32"),
        ... }
        >>> reranked = mbr_rerank(result, eos_id=3)
        >>> ops.convert_to_numpy(reranked["sequences"])[0].tolist()  # consensus first
        [[8, 6, 7, 3], [5, 6, 7, 3], [8, 6, 9, 3]]
        >>> # Mean ROUGE-1/2 F1 against the two others: (7/12 + 7/12) / 2, ...
        >>> np.round(ops.convert_to_numpy(reranked["mbr_utility"]), 4)
        array([[0.5833, 0.375 , 0.375 ]], dtype=float32)
        >>> ops.convert_to_numpy(reranked["scores"])  # the search's, reordered
        array([[-1.2, -1. , -1.5]], dtype=float32)
    """
    missing = [key for key in ("sequences", "lengths", "scores")
               if not isinstance(result, dict) or key not in result]
    if missing:
        raise ValueError(
            f"mbr_rerank expects the dict of a search (beam_search, sample_search) "
            f"with `sequences`, `lengths` and `scores`; missing {missing}."
        )
    utility = expected_utility(
        result["sequences"], result["lengths"], result["scores"],
        eos_id=eos_id, pad_id=pad_id, orders=orders,
    )
    index = ops.arange(ops.shape(utility)[1], dtype="int32")
    # Ranked on 1e-6 steps, so that utilities equal but for float32
    # rounding tie (and keep the beam's order).
    key = ops.round(utility * 1e6)
    ahead = ops.logical_or(
        key[:, None, :] > key[:, :, None],
        ops.logical_and(
            ops.equal(key[:, None, :], key[:, :, None]),
            index[None, None, :] < index[None, :, None],
        ),
    )  # [B,i,j]: j ranks before i
    rank = ops.sum(ops.cast(ahead, "int32"), axis=-1)  # [B,K], a permutation
    # order[b, r] = the i whose rank is r (ranks are distinct: no ties).
    order = ops.cast(ops.argsort(rank, axis=-1), "int32")
    reordered = {
        key: gather_beams(value, order)
        for key, value in result.items()
        if key != "aux"
    }
    reordered["aux"] = {
        name: gather_beams(value, order) for name, value in result.get("aux", {}).items()
    }
    reordered["mbr_utility"] = gather_beams(utility, order)
    return reordered
