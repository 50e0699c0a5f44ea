"""Mask helpers shared by the layers: one place where masks are merged.

Masks are explicit call arguments (`token_mask [B,P,T]`, `paragraph_mask
[B,P]`, `target_mask [B,S]`), boolean or 0/1 integers. Scores are masked with
a large *finite* negative number (never -inf), and rows whose every entry is
masked get all-zero weights instead of NaN, forward and backward.
"""

from keras import ops


def large_negative(dtype):
    """A finite number far below any attention score in `dtype`."""
    dtype = str(dtype)
    if "float16" in dtype:
        return -3.0e4
    return -1.0e9


def as_bool_mask(mask):
    """Casts a 0/1 or boolean mask tensor to bool (None passes through)."""
    if mask is None:
        return None
    return ops.cast(mask, "bool")


def merge_masks(*masks):
    """Logical AND of broadcastable masks, skipping `None`s (None if all are)."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = as_bool_mask(mask)
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def masked_softmax(scores, mask=None, axis=-1):
    """Softmax over `axis` that ignores masked entries.

    Args:
        scores: float tensor of any shape.
        mask: bool/int tensor broadcastable to `scores`; True = keep.
        axis: the normalisation axis.

    Returns:
        Weights of `scores`' shape and dtype; masked entries are 0 and a
        slice whose entries are all masked is all 0 (no NaN).
    """
    if mask is None:
        return ops.softmax(scores, axis=axis)
    mask = ops.broadcast_to(as_bool_mask(mask), ops.shape(scores))
    filled = ops.where(
        mask, scores, ops.cast(large_negative(scores.dtype), scores.dtype)
    )
    weights = ops.softmax(filled, axis=axis)
    return weights * ops.cast(mask, weights.dtype)


def compact_masked_softmax(scores, mask=None, axis=-1):
    """`masked_softmax` that keeps the [.., T] tensors in the dtype of
    `scores` (bfloat16 under mixed precision) and only its normalising sums
    in float32.

    The sum over `axis` is accumulated in float32 and its reciprocal
    rounded once; d = s − max s and exp(d) are in the dtype of `scores`, so
    in bfloat16 a weight w errs by about w·(2 + |d|)·2^-9, at most about
    2^-8 (the float32 softmax rounded to bfloat16, as keras' attention
    hands it on, errs by up to w·2^-9). What the backward pass keeps (the
    exponentials) is in the dtype of `scores`: half the memory of a
    float32 softmax, which matters where the scores are the largest tensor
    of the step (PHT's word-level cross attention, [B,H,S,P,T]). It is how
    JAX's own softmax treats bfloat16 (what keras' attention runs under
    mixed precision), written out so that every backend does the same. With
    float32 scores it is the float32 softmax.

    Args:
        scores: float tensor of any shape.
        mask: bool/int tensor broadcastable to `scores`; True = keep.
        axis: the normalisation axis.

    Returns:
        Weights of `scores`' shape and dtype; masked entries are 0 and a
        slice whose entries are all masked is all 0 (no NaN).
    """
    dtype = scores.dtype
    if mask is not None:
        mask = ops.broadcast_to(as_bool_mask(mask), ops.shape(scores))
        scores = ops.where(mask, scores, ops.cast(large_negative(dtype), dtype))
    peak = ops.stop_gradient(ops.max(scores, axis=axis, keepdims=True))
    exps = ops.exp(scores - peak)
    total = ops.sum(ops.cast(exps, "float32"), axis=axis, keepdims=True)
    weights = exps * ops.cast(1.0 / total, dtype)
    if mask is None:
        return weights
    return weights * ops.cast(mask, dtype)


def fold_rows(x, memory):
    """`(x folded [B,K·S,...], N)`: the N = B·K rows of `x` [N,S,...] that
    read the B examples of `memory` (row b·K + k reads example b, as a
    search's `beam_cache` shares one copy of the memory among K
    hypotheses), folded into the query axis so that attention reads the
    memory once per example; `x` itself (and N) when N = B is known."""
    rows, examples = x.shape[0], memory.shape[0]
    if rows is not None and examples is not None and rows == examples:
        return x, rows
    rows = ops.shape(x)[0]
    return ops.reshape(x, (ops.shape(memory)[0], -1, *ops.shape(x)[2:])), rows


def unfold_rows(x, rows):
    """`fold_rows`' inverse: [B,K·S,...] → [N,S,...] for N = `rows`."""
    if x.shape[0] is not None and isinstance(rows, int) and x.shape[0] == rows:
        return x
    return ops.reshape(x, (rows, -1, *ops.shape(x)[2:]))
