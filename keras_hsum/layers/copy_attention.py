"""The attention a pointer-generator decoder copies with (flat or hierarchical)."""

import math

import keras
from keras import ops

from keras_hsum.checks import check_int
from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_rank
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import masked_softmax


@keras.saving.register_keras_serializable(package="keras_hsum")
class CopyAttention(keras.layers.Layer):
    """One attention head of decoder states over source token states, for copying.

    A Transformer decoder has many cross-attention heads and none of them is
    trained to say where to copy from. This layer is the single attention a
    pointer-generator (`PointerGenerator`, See et al. 2017) mixes into the
    output distribution. With decoder states h_s and source token states
    c_(p,t) (token t of paragraph p), the scores are

        e_(s,p,t) = (W_q h_s) . (W_k c_(p,t)) / sqrt(Dk)

    and the weights are either flat, one softmax over every real source
    token,

        alpha_(s,p,t) = softmax_(p,t)(e_(s,·,·)),

    or, given paragraph weights beta [B,S,P] (a distribution over the
    paragraphs, e.g. PHT's head-averaged A_para of Eq. 9 or Cohan et al.'s
    section attention), hierarchical: a softmax over the tokens of each
    paragraph, scaled by the paragraph's weight (the fusion of Ma & Zong
    Eq. 9 and the section scaling of Cohan et al. Eq. 5, probability form),

        alpha_(s,p,t) = beta_(s,p) . softmax_t(e_(s,p,·)).

    The copy context is c_s = sum_(p,t) alpha_(s,p,t) c_(p,t) (the memory
    itself, unprojected). Padded tokens get zero weight; a fully padded
    paragraph contributes nothing and produces no NaN. Weights are computed
    and returned in float32 under every dtype policy.

    While decoding, the keys W_k c do not change: `project_keys(memory)`
    computes them once and `call(..., keys=...)` reuses them at every step.

    Args:
        key_dim: Dk, the width of the query and key projections (default:
            the memory's width).
        kernel_initializer: initializer of W_q and W_k.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: float [B,S,Dq], the decoder states.
        memory: float [B,P,T,D], the source token states.
        token_mask: optional bool/0-1 [B,P,T], True for real tokens.
        paragraph_weights: optional float [B,S,P]; given, the weights are
            hierarchical (see above).
        keys: optional float [B,P,T,Dk] from `project_keys(memory)`.

    Returns:
        A tuple `(attention, context)`: float32 [B,S,P,T] (each row sums to
        1 over the real tokens, or to sum_p beta_(s,p) when hierarchical) and
        float [B,S,D].

    Example:
    >>> layer = CopyAttention(key_dim=4)
    >>> attention, context = layer(
    ...     np.ones((2, 3, 8)), np.ones((2, 2, 5, 6)),
    ...     token_mask=np.ones((2, 2, 5), "int32"))
    >>> tuple(attention.shape), tuple(context.shape)
    ((2, 3, 2, 5), (2, 3, 6))

    References:
        See et al. (2017), Get To The Point: Summarization with
        Pointer-Generator Networks, ACL (Eqs. 8-9).
        Cohan et al. (2018), A Discourse-Aware Attention Model for
        Abstractive Summarization of Long Documents, NAACL (Eqs. 5, 9).
        Ma & Zong, Parallel Hierarchical Transformer with Attention Alignment
        for Abstractive Multi-Document Summarization (Eq. 9).
    """

    def __init__(self, key_dim=None, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.key_dim = check_int("key_dim", key_dim, owner=self.name, allow_none=True)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.query_dense = None
        self.key_dense = None

    def _dense(self, name):
        return keras.layers.Dense(
            self._key_dim,
            use_bias=False,
            kernel_initializer=self.kernel_initializer.__class__.from_config(
                self.kernel_initializer.get_config()
            ),
            dtype=self.dtype_policy,
            name=name,
        )

    def _check_shapes(
        self, query_shape, memory_shape, token_mask_shape=None, paragraph_weights_shape=None
    ):
        query_shape = check_rank(self.name, "query", query_shape, 3, "[B,S,Dq]")
        memory_shape = check_rank(self.name, "memory", memory_shape, 4, "[B,P,T,D]")
        batch = query_shape[0] if query_shape[0] is not None else memory_shape[0]
        check_dims(
            self.name, "memory", memory_shape, (batch, None, None, None), "[B,P,T,D]"
        )
        if token_mask_shape is not None:
            check_rank(self.name, "token_mask", token_mask_shape, 3, "[B,P,T]")
            check_dims(
                self.name, "token_mask", token_mask_shape, memory_shape[:3], "[B,P,T]"
            )
        if paragraph_weights_shape is not None:
            check_rank(
                self.name, "paragraph_weights", paragraph_weights_shape, 3, "[B,S,P]"
            )
            check_dims(
                self.name,
                "paragraph_weights",
                paragraph_weights_shape,
                (batch, query_shape[1], memory_shape[1]),
                "[B,S,P] (S of `query`, P of `memory`)",
            )
        return query_shape, memory_shape

    def build(
        self,
        query_shape,
        memory_shape,
        token_mask_shape=None,
        paragraph_weights_shape=None,
        keys_shape=None,
    ):
        query_shape, memory_shape = self._check_shapes(
            query_shape, memory_shape, token_mask_shape, paragraph_weights_shape
        )
        if memory_shape[-1] is None and self.key_dim is None:
            raise ValueError(
                f"{self.name}: the memory's width must be known to build the "
                f"layer without `key_dim`; received memory shape {memory_shape}."
            )
        self._key_dim = int(self.key_dim or memory_shape[-1])
        self.query_dense = self._dense("query")
        self.key_dense = self._dense("key")
        self.query_dense.build(query_shape)
        self.key_dense.build(memory_shape)
        self.built = True

    def project_keys(self, memory):
        """float [B,P,T,Dk]: W_k c, to pass as `keys` at every decoding step."""
        return self.key_dense(memory)

    def call(
        self, query, memory, token_mask=None, paragraph_weights=None, keys=None
    ):
        self._check_shapes(
            query.shape,
            memory.shape,
            None if token_mask is None else token_mask.shape,
            None if paragraph_weights is None else paragraph_weights.shape,
        )
        if keys is None:
            keys = self.key_dense(memory)
        queries = self.query_dense(query)
        scores = ops.einsum("bsk,bptk->bspt", queries, keys)
        scores = ops.cast(scores, "float32") * (1.0 / math.sqrt(self._key_dim))
        mask = None if token_mask is None else as_bool_mask(token_mask)[:, None]
        if paragraph_weights is None:
            shape = ops.shape(scores)
            flat = ops.reshape(scores, (shape[0], shape[1], -1))
            flat_mask = None
            if mask is not None:
                flat_mask = ops.reshape(mask, (shape[0], 1, -1))
            attention = ops.reshape(masked_softmax(flat, flat_mask), shape)
        else:
            attention = masked_softmax(scores, mask) * ops.cast(
                paragraph_weights, "float32"
            )[..., None]
        context = ops.einsum(
            "bspt,bptd->bsd", ops.cast(attention, memory.dtype), memory
        )
        return attention, context

    def compute_output_shape(
        self,
        query_shape,
        memory_shape,
        token_mask_shape=None,
        paragraph_weights_shape=None,
        keys_shape=None,
    ):
        query_shape, memory_shape = tuple(query_shape), tuple(memory_shape)
        return (
            query_shape[:2] + memory_shape[1:3],
            query_shape[:2] + memory_shape[-1:],
        )

    def compute_output_spec(
        self, query, memory, token_mask=None, paragraph_weights=None, keys=None
    ):
        attention_shape, context_shape = self.compute_output_shape(query.shape, memory.shape)
        return (
            keras.KerasTensor(attention_shape, dtype="float32"),
            keras.KerasTensor(context_shape, dtype=self.compute_dtype),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "key_dim": self.key_dim,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config
