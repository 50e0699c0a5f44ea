"""PHT's paragraph compression (Ma et al., §7): decode from the top-s paragraphs."""

from keras import ops

from keras_hsum.features import GRAPH
from keras_hsum.features import PARAGRAPH_FEATURES
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TOKENS
from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_rank

def compress_paragraphs(inputs, eta_hat, keep, keys=None, pair_keys=(GRAPH,)):
    """Keeps the `keep` paragraphs with the highest η̂, in their original order.

    PHT §7 ranks the source paragraphs by the predicted optimal attention η̂
    (`AttentionPredictor`) and feeds only the top s of them to the decoder
    (s ≈ 20–25 of 30 helped on WikiSum). Padded paragraphs (`paragraph_mask`
    False, when present) rank below every real one.

    Args:
        inputs: dict of the `paragraphs` family features with P on axis 1
            (`tokens` [B,P,T], `token_mask` [B,P,T], `paragraph_mask` [B,P],
            `document_ids` [B,P], ...).
        eta_hat: float [B,P], η̂ (or any paragraph score: higher is kept).
        keep: int s <= P.
        keys: the entries gathered along axis 1; default the paragraph
            features of the data pipeline (`keras_hsum.features.
            PARAGRAPH_FEATURES`: tokens, token_mask,
            paragraph_mask, document_ids, ...) present in `inputs`. Target
            entries (`decoder_tokens`, `target_mask`, ...) are never chosen
            by default, even when S happens to equal P.
        pair_keys: entries [B,P,P] (paragraph graphs) gathered on axes 1 and 2.

    Returns:
        A new dict: the gathered entries with P reduced to `keep` ([B,keep,T],
        [B,keep], graphs [B,keep,keep]); the other entries unchanged. Also
        `kept_paragraphs` int32 [B,keep], the original indices (ascending).

    Example (in PHT, η̂ is an `AttentionPredictor`'s on the encoder's
    `paragraph_memory`; here it is given):
        >>> tokens = np.array([[[11, 12], [21, 22], [31, 0], [0, 0]]])  # [B,P,T]
        >>> batch = {"tokens": tokens, "paragraph_mask": (tokens != 0).any(-1)}
        >>> eta_hat = np.array([[0.1, 0.5, 0.3, 0.9]])  # [B,P]
        >>> compressed = compress_paragraphs(batch, eta_hat, keep=2)
        >>> # The top 2 real paragraphs, in their order; the padded 4th ranks last.
        >>> ops.convert_to_numpy(compressed["kept_paragraphs"]).tolist()
        [[1, 2]]
        >>> ops.convert_to_numpy(compressed["tokens"]).tolist()  # [B,keep,T]
        [[[21, 22], [31, 0]]]
    """
    if keys is None:
        keys = PARAGRAPH_FEATURES
    eta_hat = ops.cast(eta_hat, "float32")
    check_rank("compress_paragraphs", "eta_hat", eta_hat.shape, 2, "[B,P]")
    for name in (PARAGRAPH_MASK, TOKENS):
        if getattr(inputs.get(name), "shape", None) is not None:
            # A [1,P] η̂ would rank every example by the first one's scores.
            check_dims("compress_paragraphs", "eta_hat", eta_hat.shape,
                       tuple(inputs[name].shape[:2]), f"[B,P] of `{name}`")
    num_paragraphs = eta_hat.shape[-1]
    keep = int(keep)
    if num_paragraphs is not None and not 0 < keep <= num_paragraphs:
        raise ValueError(
            f"compress_paragraphs: `keep` must be in [1, P={num_paragraphs}], "
            f"received {keep}. Choose how many paragraphs to decode from."
        )
    ranking = eta_hat
    if inputs.get(PARAGRAPH_MASK) is not None:
        real = ops.cast(inputs[PARAGRAPH_MASK], "bool")
        ranking = ops.where(real, ranking, ops.min(ranking) - 1.0)
    _, top = ops.top_k(ranking, k=keep)
    kept = ops.sort(ops.cast(top, "int32"), axis=-1)  # [B,keep], original order

    def gather(x, axis):
        index = kept
        for _ in range(len(x.shape) - 2):
            index = ops.expand_dims(index, -1)
        if axis == 2:
            index = ops.expand_dims(kept, 1)  # [B,1,keep]
        return ops.take_along_axis(x, _broadcast_index(index, x, axis), axis=axis)

    outputs = {}
    for name, value in inputs.items():
        if value is None or not hasattr(value, "shape") or len(value.shape) < 2:
            outputs[name] = value
            continue
        if name in pair_keys and len(value.shape) == 3:
            outputs[name] = gather(gather(value, 1), 2)
        elif name in keys:
            outputs[name] = gather(value, 1)
        else:
            outputs[name] = value
    outputs["kept_paragraphs"] = kept
    return outputs


def _broadcast_index(index, x, axis):
    """Broadcast `index` to `x`'s shape except on `axis`."""
    shape = list(ops.shape(x))
    shape[axis] = ops.shape(index)[axis]
    return ops.broadcast_to(index, shape)
