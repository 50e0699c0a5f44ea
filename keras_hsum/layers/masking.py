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
