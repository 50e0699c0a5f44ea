"""Attention inputs shaped so that cuDNN's fused attention takes them.

On a GPU, Keras' JAX `dot_product_attention` first tries JAX's cuDNN flash
attention and falls back to XLA's written-out attention when JAX refuses
the inputs. In a train step JAX refuses two things our attentions used to
pass (jax/_src/cudnn/fused_attention_stablehlo.py):

- `check_layout`: the boolean mask becomes an additive bias, which must
  span the full query and key lengths, [B|1, N|1, T, S]; a key-padding mask
  broadcast over the queries ([B, 1, 1, S]) is refused;
- `check_is_flash_attention(is_training=True)`: with a bias, T and S must
  be even.

`fused_attention_inputs` rewrites one attention's inputs to pass both
checks with the same outputs: the mask broadcast to [B, 1, T, S], an odd T
padded by one query row (its output is dropped), an odd S by one key that no
query sees. `use_fused_attention_inputs` makes a Keras `MultiHeadAttention`
(or keras-hub `CachedMultiHeadAttention`) apply it to its projected
queries, keys and values whenever it calls `dot_product_attention`, and
(under JAX on a GPU) take keras_hsum's fused attention dropout
(`keras_hsum.layers.dropout_attention`) in training with attention dropout.
"""

import types

from keras import ops

from keras_hsum.layers.dropout_attention import layer_dropout_attention
from keras_hsum.layers.dropout_attention import layer_implementation


def _static(length):
    return length if isinstance(length, int) else None


def fused_attention_inputs(query, key, value, mask, pad_to_even=True):
    """Queries, keys, values and mask that JAX's cuDNN attention accepts in
    training, computing the same attention at the real positions.

    The mask is broadcast to its full [B, 1, T, S] shape. With `pad_to_even`,
    an odd T gets one more query (zeros; the caller drops its output row),
    and an odd S one more key and value: the means of the S keys and values,
    masked for every query. A query that sees no key at all attends
    uniformly over every key in `dot_product_attention` (the masked logits
    are all the same large negative number); over S + 1 keys whose last is
    the mean of the others, that average is unchanged. Every other query
    gives the added key exactly zero weight.

    Args:
        query: float [B, T, N, H].
        key: float [B, S, N, H].
        value: float [B, S, N, Hv].
        mask: bool/int, broadcastable to [B, 1, T, S] (e.g. [B, 1, S] or
            [B, T, S], the shapes Keras' `MultiHeadAttention` passes;
            rank 3 masks get the head axis at 1), True/1 = attend.
        pad_to_even: pad odd T and S (needed only when the attention is
            differentiated). Lengths unknown when traced are left as they are.

    Returns:
        `(query, key, value, mask, length)`: query [B, T', N, H], key and
        value [B, S', N, H|Hv], mask bool [B, 1, T', S'] with T' and S' even
        (or T and S), and `length` = T, the rows of the output to keep.
    """
    batch = ops.shape(query)[0]
    length, keys = query.shape[1], key.shape[1]
    mask = ops.cast(mask, "bool")
    if len(mask.shape) == 3:
        mask = mask[:, None]
    mask = ops.broadcast_to(mask, (batch, 1, ops.shape(query)[1], ops.shape(key)[1]))
    if not pad_to_even:
        return query, key, value, mask, length
    odd_queries = int(_static(length) is not None and length % 2)
    odd_keys = int(_static(keys) is not None and keys % 2)
    if odd_queries:
        query = ops.pad(query, ((0, 0), (0, 1), (0, 0), (0, 0)))
    if odd_keys:
        key = ops.concatenate([key, ops.mean(key, axis=1, keepdims=True)], axis=1)
        value = ops.concatenate([value, ops.mean(value, axis=1, keepdims=True)], axis=1)
    if odd_queries or odd_keys:
        mask = ops.pad(mask, ((0, 0), (0, 0), (0, odd_queries), (0, odd_keys)),
                       constant_values=False)
    return query, key, value, mask, length


def _compute_fused_attention(self, query, key, value, attention_mask=None, training=None,
                             return_attention_scores=False, **kwargs):
    """`MultiHeadAttention._compute_attention` (of the layer's class) with
    `fused_attention_inputs` on the `dot_product_attention` path."""
    compute_attention = type(self)._compute_attention
    implementation = (
        layer_implementation(query.shape[-1])
        if training is True and self._dropout > 0 and not return_attention_scores
        and len(query.shape) == 4
        else None
    )
    if implementation is not None:
        return _dropout_attention(self, query, key, value, attention_mask, implementation,
                                  kwargs.get("use_causal_mask", False)), None
    if (
        attention_mask is None
        or return_attention_scores
        or self._dropout > 0
        or len(query.shape) != 4
    ):
        return compute_attention(self, query, key, value, attention_mask, training,
                                 return_attention_scores, **kwargs)
    query, key, value, mask, length = fused_attention_inputs(
        query, key, value, attention_mask,
        pad_to_even=isinstance(training, bool) and training,
    )
    outputs, scores = compute_attention(self, query, key, value, mask, training, False,
                                        **kwargs)
    if outputs.shape[1] != length:
        outputs = outputs[:, :length]
    return outputs, scores


def _dropout_attention(self, query, key, value, attention_mask, implementation,
                       use_causal_mask):
    """The layer's attention in training with its attention dropout fused
    (`dropout_attention.layer_dropout_attention`): the mask Keras merged
    ([B,T,S], or [1,T,S] causal), the layer's scale and rate, a draw of
    its attention `Dropout`'s seed generator."""
    mask = None if attention_mask is None else ops.cast(attention_mask, "bool")
    if use_causal_mask:
        causal = self._compute_causal_mask(query, value)
        mask = causal if mask is None else ops.logical_and(mask, causal)
    if mask is not None and len(mask.shape) == 3:
        mask = mask[:, None]
    return layer_dropout_attention(
        query, key, value, mask, self._dropout, self._dropout_layer.seed_generator,
        self._inverse_sqrt_key_dim, implementation,
    )


def use_fused_attention_inputs(attention):
    """Makes a built Keras `MultiHeadAttention` (or keras-hub
    `CachedMultiHeadAttention`) pass `fused_attention_inputs` to
    `dot_product_attention`.

    Keras' `MultiHeadAttention._compute_attention` calls
    `keras.ops.dot_product_attention` when the attention dropout is 0 and
    no scores are returned, with the mask it merged from the layer's masks
    ([B, 1, S] from a key-padding mask). This binds to the layer its own
    `_compute_attention`, which on that path and with a mask calls the
    class's with `fused_attention_inputs` (the full mask always; odd
    lengths padded when `training` is True, i.e. when the step is
    differentiated; not in inference or cached decoding) and drops the
    padded output row. In training with attention dropout, where
    `dropout_attention.layer_implementation` names one (under JAX on a GPU:
    the Pallas kernel that drops the weights inside it, never writing the
    [B,N,T,S] weights), it computes the attention with that (its own
    dropout mask, drawn from the seed generator of the layer's attention
    `Dropout`). Otherwise it is the class's method unchanged. No
    weight, sublayer or config changes: saved models load as before, and
    the random draws of every dropout are the same. A bound method, so a
    copy of the layer (`copy.deepcopy`) binds it to the copy.

    Args:
        attention: a built `keras.layers.MultiHeadAttention`.
    """
    if "_compute_attention" not in vars(attention):
        attention._compute_attention = types.MethodType(_compute_fused_attention, attention)
