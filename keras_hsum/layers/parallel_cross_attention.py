"""PHT's parallel word- and paragraph-level cross attention (Ma & Zong, §3.2)."""

import math

import keras
from keras import ops

from keras_hsum.layers.dropout_attention import layer_dropout_attention
from keras_hsum.layers.dropout_attention import layer_implementation
from keras_hsum.layers.fused_attention_inputs import fused_attention_inputs
from keras_hsum.layers.input_checks import check_cache_keys
from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.input_checks import check_rank
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import compact_masked_softmax
from keras_hsum.layers.masking import masked_softmax
from keras_hsum.layers.masking import merge_masks
from keras_hsum.layers.packed_dropout import dropout_layer


@keras.saving.register_keras_serializable(package="keras_hsum")
class ParallelCrossAttention(keras.layers.Layer):
    """Parallel paragraph- and word-level cross attention with attention fusion.

    Part II of the PHT decoder layer. With X the decoder states (queries),
    Φ the paragraph embeddings and C_p the context-aware word embeddings of
    paragraph p, Ma & Zong compute two cross attentions in parallel:

    - paragraph level (Eq. 7): X_para, A_para = MultiHead(X, Φ, Φ), where
      A_para [S,P] is the attention over paragraphs averaged over the heads;
    - word level (Eq. 8): X_word_p = MultiHead(X, C_p, C_p) for every
      paragraph p, each attending over the tokens of paragraph p only;

    and fuse them (Eqs. 9-10): X_int = Σ_p A_para[:, p] · X_word_p and
    output = LayerNorm(X + X_para + X_int).

    MultiHead is the Transformer's multi-head attention: per-head query,
    key and value projections, softmax(q·kᵀ / sqrt(Dh)) over the keys, the
    heads' contexts concatenated and projected by an output matrix. Query,
    value and output projections have biases; key projections have none (a
    key bias adds the same amount to every score of a query, so the softmax
    ignores it and it could never be trained). The paragraph and word attentions have their own
    weights. The word attention runs batched over all P paragraphs at once;
    because the output projection is linear it is applied once to the
    A_para-weighted sum of the per-paragraph head contexts, with its bias
    scaled by Σ_p A_para[:, p] -- exactly Σ_p A_para[:, p] · X_word_p.

    Padded tokens (`token_mask`) and padded paragraphs (`paragraph_mask`, which
    also masks every token of the paragraph) get zero attention; a fully
    padded paragraph contributes nothing and produces no NaN, forward or
    backward. The paragraph attention is computed in float32 and returned in
    float32 under every dtype policy (decoding score terms consume it).

    While decoding, Φ and C do not change from step to step, and their key
    and value projections are most of a step's work (O(P·T·D²) against the
    queries' O(D²)): `project_memory(word_memory, paragraph_memory)`
    computes them once and `call(..., memory_cache=...)` reuses them at
    every step. Both paths compute the same function.

    When the word attention's weights are not dropped out (attention dropout
    0, or not training) and the memory is projected in the call (training,
    teacher forcing), the word attention runs through
    `keras.ops.dot_product_attention` with the B·P paragraphs as its batch
    (cuDNN flash attention on a GPU: the [B,H,S,P,T] weights are never
    written to memory); with a `memory_cache` (decoding) it stays written
    out, in the heads-first layout that decoding steps read fastest. The
    paragraph attention is always written out: A_para is returned and
    weights the fusion.

    Args:
        hidden_dim: D, the width of the queries and of the output.
        num_heads: H; D must be divisible by H (Dh = D / H).
        dropout: dropout rate on X_para + X_int before the residual (and on
            the attention weights when `attention_dropout` is None).
            Defaults to 0.
        attention_dropout: dropout rate on the attention weights of both
            attentions, or None (the default) for `dropout`.
        layer_norm_epsilon: epsilon of the final LayerNorm.
        kernel_initializer: initializer of the projection matrices.
        bias_initializer: initializer of the projection biases.

    Call arguments:
        query: float [B, S, D], the decoder states X (output of part I).
        word_memory: float [B, P, T, Dc], context-aware word embeddings C.
        paragraph_memory: float [B, P, Dp], paragraph embeddings Φ.
        token_mask: optional bool/int [B, P, T], True/1 for real tokens.
        paragraph_mask: optional bool/int [B, P], True/1 for real paragraphs.
        training: bool, whether dropout is active.
        memory_cache: optional dict from `project_memory(word_memory,
            paragraph_memory)`: the keys and values are taken from it instead
            of being projected again (`word_memory` and `paragraph_memory`
            are then only read for their shapes).

    Returns:
        A tuple `(outputs, paragraph_attention)`:
        outputs float [B, S, D], LayerNorm(X + X_para + X_int);
        paragraph_attention float32 [B, S, P], the head-averaged paragraph
        attention A_para (rows sum to 1, or to 0 when every paragraph is
        padded).

    Example:
    >>> layer = ParallelCrossAttention(hidden_dim=8, num_heads=2)
    >>> outputs, attention = layer(
    ...     np.ones((2, 4, 8)), np.ones((2, 3, 5, 8)), np.ones((2, 3, 8)),
    ...     token_mask=np.ones((2, 3, 5), "int32"),
    ...     paragraph_mask=np.ones((2, 3), "int32"))
    >>> tuple(outputs.shape), tuple(attention.shape)
    ((2, 4, 8), (2, 4, 3))
    >>> cache = layer.project_memory(np.ones((2, 3, 5, 8)), np.ones((2, 3, 8)))
    >>> tuple(cache["word_key"].shape), tuple(cache["paragraph_value"].shape)
    ((2, 2, 3, 5, 4), (2, 2, 3, 4))
    >>> outputs, attention = layer(
    ...     np.ones((2, 1, 8)), np.ones((2, 3, 5, 8)), np.ones((2, 3, 8)),
    ...     memory_cache=cache)
    >>> tuple(outputs.shape), tuple(attention.shape)
    ((2, 1, 8), (2, 1, 3))

    References:
        Ma & Zong, Parallel Hierarchical Transformer with Attention Alignment
        for Abstractive Multi-Document Summarization, §3.2, Eqs. 7-10.
    """

    def __init__(
        self,
        hidden_dim,
        num_heads,
        dropout=0.0,
        layer_norm_epsilon=1e-5,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, optional=("attention_dropout",), attention_dropout=attention_dropout
        )
        if hidden_dim % num_heads:
            raise ValueError(
                f"{self.name}: `hidden_dim` must be divisible by `num_heads`, "
                f"received hidden_dim={hidden_dim}, num_heads={num_heads}."
            )
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.head_dim = hidden_dim // num_heads

        heads = (num_heads, self.head_dim)

        def projection(name, equation, output_shape, bias_axes):
            return keras.layers.EinsumDense(
                equation,
                output_shape=output_shape,
                bias_axes=bias_axes,
                kernel_initializer=self._clone(self.kernel_initializer),
                bias_initializer=self._clone(self.bias_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        # Paragraph-level MultiHead(X, Φ, Φ).
        self.paragraph_query_dense = projection(
            "paragraph_query", "bsd,dhk->bshk", (None,) + heads, "hk"
        )
        self.paragraph_key_dense = projection(
            "paragraph_key", "bpd,dhk->bphk", (None,) + heads, None
        )
        self.paragraph_value_dense = projection(
            "paragraph_value", "bpd,dhk->bphk", (None,) + heads, "hk"
        )
        self.paragraph_output_dense = projection(
            "paragraph_output", "bshk,hkd->bsd", (None, hidden_dim), "d"
        )
        # Word-level MultiHead(X, C_p, C_p), all paragraphs at once.
        self.word_query_dense = projection(
            "word_query", "bsd,dhk->bshk", (None,) + heads, "hk"
        )
        self.word_key_dense = projection(
            "word_key", "bptd,dhk->bpthk", (None, None) + heads, None
        )
        self.word_value_dense = projection(
            "word_value", "bptd,dhk->bpthk", (None, None) + heads, "hk"
        )
        # The word output projection's bias is applied separately, scaled by
        # Σ_p A_para (see the class docstring).
        self.word_output_dense = projection(
            "word_output", "bshk,hkd->bsd", (None, hidden_dim), None
        )
        self.attention_weights_dropout = dropout_layer(
            dropout if attention_dropout is None else attention_dropout,
            dtype=self.dtype_policy,
            name="attention_dropout",
        )
        self.output_dropout = dropout_layer(
            dropout, dtype=self.dtype_policy, name="output_dropout"
        )
        self.output_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon,
            dtype=self.dtype_policy,
            name="output_layer_norm",
        )

    @staticmethod
    def _clone(initializer):
        """A fresh initializer with the same config (no shared RNG state)."""
        return initializer.__class__.from_config(initializer.get_config())

    def _check_shapes(
        self,
        query_shape,
        word_memory_shape,
        paragraph_memory_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
    ):
        name = self.name
        query_shape = check_rank(name, "query", query_shape, 3, "[B,S,D]")
        check_dims(
            name, "query", query_shape, (None, None, self.hidden_dim), "[B,S,D]"
        )
        batch = query_shape[0]
        word_shape = check_rank(
            name, "word_memory", word_memory_shape, 4, "[B,P,T,D]"
        )
        check_dims(
            name, "word_memory", word_shape, (batch, None, None, None), "[B,P,T,D]"
        )
        batch = batch if batch is not None else word_shape[0]
        paragraphs, tokens = word_shape[1], word_shape[2]
        paragraph_shape = check_rank(
            name, "paragraph_memory", paragraph_memory_shape, 3, "[B,P,D]"
        )
        check_dims(
            name,
            "paragraph_memory",
            paragraph_shape,
            (batch, paragraphs, None),
            "[B,P,D] (P as in `word_memory`)",
        )
        if token_mask_shape is not None:
            check_rank(name, "token_mask", token_mask_shape, 3, "[B,P,T]")
            check_dims(
                name,
                "token_mask",
                token_mask_shape,
                (batch, paragraphs, tokens),
                "[B,P,T] (as `word_memory`)",
            )
        if paragraph_mask_shape is not None:
            check_rank(name, "paragraph_mask", paragraph_mask_shape, 2, "[B,P]")
            check_dims(
                name,
                "paragraph_mask",
                paragraph_mask_shape,
                (batch, paragraphs),
                "[B,P] (as `paragraph_memory`)",
            )
        return query_shape, word_shape, paragraph_shape

    def build(
        self,
        query_shape,
        word_memory_shape,
        paragraph_memory_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
    ):
        query_shape, word_shape, paragraph_shape = self._check_shapes(
            query_shape,
            word_memory_shape,
            paragraph_memory_shape,
            token_mask_shape,
            paragraph_mask_shape,
        )
        heads_shape = query_shape[:2] + (self.num_heads, self.head_dim)
        self.paragraph_query_dense.build(query_shape)
        self.paragraph_key_dense.build(paragraph_shape)
        self.paragraph_value_dense.build(paragraph_shape)
        self.paragraph_output_dense.build(heads_shape)
        self.word_query_dense.build(query_shape)
        self.word_key_dense.build(word_shape)
        self.word_value_dense.build(word_shape)
        self.word_output_dense.build(heads_shape)
        self.word_output_bias = self.add_weight(
            name="word_output_bias",
            shape=(self.hidden_dim,),
            initializer=self._clone(self.bias_initializer),
        )
        self.output_layer_norm.build(query_shape)
        self.built = True

    def project_memory(self, word_memory, paragraph_memory):
        """Keys and values of the memories, to pass as `memory_cache`.

        Args:
            word_memory: float [B, P, T, D], context-aware word embeddings C.
            paragraph_memory: float [B, P, D], paragraph embeddings Φ.

        Returns:
            A dict of compute-dtype tensors, heads first: `"word_key"` and
            `"word_value"` [B, H, P, T, Dh], `"paragraph_key"` and
            `"paragraph_value"` [B, H, P, Dh]. (Heads-first keys make both
            attention products plain batched matrix products over (B, H); a
            decoding step with the keys [B, P, T, H, Dh] was 4x slower under
            XLA on CPU: 5.1 against 1.3 ms at P×T = 30×100, K=5.)
        """
        word_shape = check_rank(
            self.name, "word_memory", word_memory.shape, 4, "[B,P,T,D]"
        )
        self._check_shapes(
            (word_shape[0], None, self.hidden_dim),
            word_shape,
            paragraph_memory.shape,
        )
        if not self.built:
            self.build(
                (word_shape[0], None, self.hidden_dim),
                word_shape,
                paragraph_memory.shape,
            )

        def heads_first(x):  # [B,P,(T,)H,Dh] → [B,H,P,(T,)Dh]
            rank = len(x.shape)
            return ops.transpose(x, (0, rank - 2) + tuple(range(1, rank - 2)) + (rank - 1,))

        return {
            "word_key": heads_first(self.word_key_dense(word_memory)),
            "word_value": heads_first(self.word_value_dense(word_memory)),
            "paragraph_key": heads_first(self.paragraph_key_dense(paragraph_memory)),
            "paragraph_value": heads_first(self.paragraph_value_dense(paragraph_memory)),
        }

    def _check_memory_cache(self, memory_cache, word_shape):
        """`memory_cache` must be `project_memory`'s dict for this memory."""
        check_cache_keys(
            self, "memory_cache", memory_cache,
            ("paragraph_key", "paragraph_value", "word_key", "word_value"),
            "project_memory(word_memory, paragraph_memory)",
        )
        heads, head_dim = self.num_heads, self.head_dim
        batch, paragraphs, tokens = tuple(word_shape)[:3]
        word_dims = (batch, heads, paragraphs, tokens, head_dim)
        paragraph_dims = (batch, heads, paragraphs, head_dim)
        for key, rank, dims, spec in (
            ("word_key", 5, word_dims, "[B,H,P,T,Dh]"),
            ("word_value", 5, word_dims, "[B,H,P,T,Dh]"),
            ("paragraph_key", 4, paragraph_dims, "[B,H,P,Dh]"),
            ("paragraph_value", 4, paragraph_dims, "[B,H,P,Dh]"),
        ):
            name = f"memory_cache['{key}']"
            shape = check_rank(self.name, name, memory_cache[key].shape, rank, spec)
            check_dims(
                self.name, name, shape, dims, f"{spec} (B, P, T of `word_memory`)"
            )

    def _explicit_word_context(
        self, query, key, value, word_mask, fusion, scale, training
    ):
        """Σ_p A_para[:, p] · (head contexts of paragraph p): scores
        [B,H,S,P,T] written out, the attention weights dropped out.

        query [B,S,H,Dh]; key, value [B,H,P,T,Dh]; word_mask bool [B,P,T]
        or None; fusion [B,S,P] (A_para). Returns [B,S,H,Dh].
        """
        # The largest tensors of the step: kept in the compute dtype, only
        # the softmax's sums in float32 (compact_masked_softmax).
        scores = ops.einsum("bshk,bhptk->bhspt", query, key)
        weights = compact_masked_softmax(
            scores * ops.cast(scale, scores.dtype),
            None if word_mask is None else word_mask[:, None, None, :, :],
        )
        weights = self.attention_weights_dropout(weights, training=training)
        # Fusion (Eq. 9): weight paragraph p's token weights by A_para[:, p]
        # and contract over paragraphs and tokens in one step.
        weights = weights * fusion[:, None, :, :, None]
        return ops.einsum("bhspt,bhptk->bshk", weights, value)

    def _fused_word_context(self, query, key, value, word_mask, fusion, scale, training,
                            dropout_implementation=None):
        """`_explicit_word_context` without attention dropout, through
        `keras.ops.dot_product_attention` (cuDNN flash attention on a GPU,
        where the [B,H,S,P,T] weights are never written to memory); with
        attention dropout where `dropout_implementation`
        (`dropout_attention.layer_implementation`) is given, through
        `layer_dropout_attention` (on a GPU the Pallas kernel that drops the
        weights inside it, the same B·P attention batch; its mask is its
        own, not Keras').

        The B·P paragraphs are the attention's batch: every paragraph's T
        tokens are attended by the same S queries (broadcast [B·P,S,H,Dh]),
        and the contexts [B,P,S,H,Dh] are summed with the weights A_para.
        A paragraph without any real token (fully padded) attends uniformly
        over its padding in `dot_product_attention`; its weight is set to 0
        here, as the explicit path's all-zero softmax row gives it. Equal to
        the explicit path up to float rounding (tested).

        The token mask goes in broadcast to its full [B·P, 1, S, T] shape,
        and in training an odd S or T is padded to even
        (`fused_attention_inputs`): JAX's cuDNN attention refuses a mask
        bias without the query axis, and odd lengths with a bias when
        differentiated.
        """
        batch, heads, paragraphs, tokens, head_dim = ops.shape(key)
        length = ops.shape(query)[1]

        def paragraphs_first(x):  # [B,H,P,T,Dh] → [B·P,T,H,Dh]
            return ops.reshape(
                ops.transpose(x, (0, 2, 3, 1, 4)),
                (batch * paragraphs, tokens, heads, head_dim),
            )

        queries = ops.reshape(
            ops.broadcast_to(
                query[:, None], (batch, paragraphs, length, heads, head_dim)
            ),
            (batch * paragraphs, length, heads, head_dim),
        )
        keys, values, mask = paragraphs_first(key), paragraphs_first(value), None
        if word_mask is not None:
            mask = ops.reshape(word_mask, (batch * paragraphs, 1, 1, tokens))
        if dropout_implementation is not None:
            # Rows of a paragraph without tokens give zeros here (no NaN).
            contexts = layer_dropout_attention(
                queries, keys, values, mask, self.attention_weights_dropout.rate,
                self.attention_weights_dropout.seed_generator, scale,
                dropout_implementation,
            )
        else:
            if word_mask is not None:
                has_token = ops.any(word_mask, axis=-1)  # [B,P]
                fusion = fusion * ops.cast(has_token, fusion.dtype)[:, None, :]
                queries, keys, values, mask, _ = fused_attention_inputs(
                    queries, keys, values, mask,
                    pad_to_even=isinstance(training, bool) and training,
                )
            contexts = ops.dot_product_attention(
                queries, keys, values, mask=mask, scale=scale
            )
            if contexts.shape[1] != query.shape[1]:  # a padded query row
                contexts = contexts[:, :length]
        contexts = ops.reshape(
            contexts, (batch, paragraphs, length, heads, head_dim)
        )
        return ops.einsum("bsp,bpshk->bshk", fusion, contexts)

    def call(
        self,
        query,
        word_memory,
        paragraph_memory,
        token_mask=None,
        paragraph_mask=None,
        training=None,
        memory_cache=None,
    ):
        _, word_shape, _ = self._check_shapes(
            query.shape,
            word_memory.shape,
            paragraph_memory.shape,
            None if token_mask is None else token_mask.shape,
            None if paragraph_mask is None else paragraph_mask.shape,
        )
        projected_here = memory_cache is None
        if projected_here:
            memory_cache = self.project_memory(word_memory, paragraph_memory)
        else:
            self._check_memory_cache(memory_cache, word_shape)
        scale = 1.0 / math.sqrt(self.head_dim)
        paragraph_mask = as_bool_mask(paragraph_mask)
        word_mask = merge_masks(
            token_mask,
            None if paragraph_mask is None else paragraph_mask[:, :, None],
        )

        # Paragraph level: scores [B,H,S,P], softmax over P (Eq. 7).
        query_p = self.paragraph_query_dense(query)
        key_p = memory_cache["paragraph_key"]
        value_p = memory_cache["paragraph_value"]
        scores_p = ops.einsum("bshk,bhpk->bhsp", query_p, key_p)
        weights_p = masked_softmax(
            ops.cast(scores_p, "float32") * scale,
            None if paragraph_mask is None else paragraph_mask[:, None, None, :],
        )
        paragraph_attention = ops.mean(weights_p, axis=1)  # A_para [B,S,P]
        weights_p = self.attention_weights_dropout(
            ops.cast(weights_p, self.compute_dtype), training=training
        )
        context_p = ops.einsum("bhsp,bhpk->bshk", weights_p, value_p)
        paragraph_context = self.paragraph_output_dense(context_p)  # X_para

        # Word level, all paragraphs at once: softmax over the T tokens of
        # each paragraph (Eq. 8), fused by A_para (Eq. 9).
        query_w = self.word_query_dense(query)
        fusion = ops.cast(paragraph_attention, self.compute_dtype)
        dropping = training is True and self.attention_weights_dropout.rate > 0
        implementation = layer_implementation(self.head_dim) if dropping else None
        if projected_here and (not dropping or implementation is not None):
            context_w = self._fused_word_context(
                query_w, memory_cache["word_key"], memory_cache["word_value"],
                word_mask, fusion, scale, training, implementation,
            )
        else:
            context_w = self._explicit_word_context(
                query_w, memory_cache["word_key"], memory_cache["word_value"],
                word_mask, fusion, scale, training,
            )
        fused_context = self.word_output_dense(context_w) + ops.sum(
            fusion, axis=-1, keepdims=True
        ) * ops.cast(self.word_output_bias, self.compute_dtype)  # X_int

        # Eq. 10.
        residual = self.output_dropout(
            paragraph_context + fused_context, training=training
        )
        outputs = self.output_layer_norm(query + residual)
        return outputs, paragraph_attention

    def compute_output_shape(
        self,
        query_shape,
        word_memory_shape,
        paragraph_memory_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
        memory_cache_shape=None,
    ):
        query_shape = tuple(query_shape)
        paragraphs = tuple(word_memory_shape)[1]
        return query_shape, query_shape[:2] + (paragraphs,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
            }
        )
        return config
