"""One layer of PHT's decoder (Ma & Zong, §3.2)."""

import numbers

import keras
from keras import ops
from keras_hub.layers import CachedMultiHeadAttention

from keras_hsum.layers.fused_attention_inputs import use_fused_attention_inputs
from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.input_checks import check_rank
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import fold_rows
from keras_hsum.layers.masking import unfold_rows
from keras_hsum.layers.packed_dropout import dropout_layer
from keras_hsum.layers.packed_dropout import use_packed_dropout
from keras_hsum.layers.parallel_cross_attention import ParallelCrossAttention


@keras.saving.register_keras_serializable(package="keras_hsum")
class PHTDecoderLayer(keras.layers.Layer):
    """A Parallel Hierarchical Transformer decoder layer.

    Ma & Zong's decoder layer has three parts, post-LayerNorm as in the
    Transformer (Vaswani et al., 2017):

    - part I, masked (causal) multi-head self-attention over the summary:
      X(I) = LayerNorm(Y + SelfAttention(Y));
    - part II, `ParallelCrossAttention`: a paragraph-level attention over Φ
      and a word-level attention over each paragraph's tokens C_p, fused by
      the head-averaged paragraph attention A_para:
      X(II) = LayerNorm(X(I) + X_para + Σ_p A_para[:, p] · X_word_p);
    - part III, the position-wise feed-forward network:
      X(III) = LayerNorm(X(II) + W2 · act(W1 · X(II) + b1) + b2).

    The self-attention is keras-hub's `CachedMultiHeadAttention`, so the layer
    decodes incrementally: pass a preallocated key/value cache and the index
    of the first position in `decoder_sequence`, and the layer writes the new
    keys/values there and attends causally over positions <= its own. With a
    cache the layer returns the updated cache as a third output; without one
    it returns two outputs. Both paths compute the same function: decoding
    one token at a time with the cache gives the teacher-forced outputs.

    The memories C and Φ stay fixed while decoding: `project_memory(C, Φ)`
    computes part II's keys and values once (see `ParallelCrossAttention`),
    and passing them as `memory_cache` at every step skips their
    O(P·T·D²) projection; the outputs are the same.

    Args:
        hidden_dim: D, the model width.
        intermediate_dim: the feed-forward network's hidden width.
        num_heads: H, heads of every attention; D must be divisible by H.
        dropout: dropout rate before each residual (and on the attention
            weights when `attention_dropout` is None). Defaults to 0.
        attention_dropout: dropout rate on the attention weights of the
            self-attention and of `ParallelCrossAttention`, or None (the
            default) for `dropout`. With 0 the self-attention runs through
            `keras.ops.dot_product_attention` (fused attention on a GPU).
        activation: the feed-forward activation. Defaults to "relu".
        layer_norm_epsilon: epsilon of the three LayerNorms.
        kernel_initializer: initializer of every projection matrix.
        bias_initializer: initializer of every bias.

    Call arguments:
        decoder_sequence: float [B, S, D], the (shifted) summary embeddings Y,
            or, when decoding with a cache, the new position(s) [B, S_new, D].
        word_memory: float [B, P, T, D], context-aware word embeddings C.
            `decoder_sequence` (and its masks and cache) may have B·K rows
            for K hypotheses per example (row b·K + k reads example b, as
            in beam search): part II then reads each memory once for its
            K rows instead of K copies of it.
        paragraph_memory: float [B, P, D], paragraph embeddings Φ (ranking
            encoding already added, Eq. 6).
        token_mask: optional bool/int [B, P, T], True/1 for real tokens.
        paragraph_mask: optional bool/int [B, P], True/1 for real paragraphs.
        decoder_padding_mask: optional bool/int [B, S_k] over the self-attention
            keys, True/1 for real target positions: S_k = S without a cache,
            S_k = the cache length with one.
        self_attention_cache: optional float [B, 2, S_k, H, Dh], the keys
            (index 0) and values (index 1) of the self-attention, in the
            layer's compute dtype. Preallocate with zeros of the full target
            length before decoding.
        self_attention_cache_update_index: int scalar (or int tensor), the
            position of `decoder_sequence[:, 0]`; required with a cache.
        training: bool, whether dropout is active.
        memory_cache: optional dict from `project_memory(word_memory,
            paragraph_memory)`, the cross-attention keys and values of the
            memories (computed once per request while decoding).

    Returns:
        Without a cache, `(outputs, paragraph_attention)`; with a cache,
        `(outputs, paragraph_attention, self_attention_cache)`:
        outputs float [B, S, D];
        paragraph_attention float32 [B, S, P], the head-averaged paragraph
        attention A_para of part II (what attention alignment sums over
        layers);
        self_attention_cache float [B, 2, S_k, H, Dh], updated at the index.

    Example:
    >>> layer = PHTDecoderLayer(hidden_dim=8, intermediate_dim=16, num_heads=2)
    >>> outputs, attention = layer(
    ...     np.ones((2, 4, 8)), np.ones((2, 3, 5, 8)), np.ones((2, 3, 8)))
    >>> tuple(outputs.shape), tuple(attention.shape)
    ((2, 4, 8), (2, 4, 3))
    >>> cache = np.zeros((2, 2, 4, 2, 4), "float32")
    >>> outputs, attention, cache = layer(
    ...     np.ones((2, 1, 8)), np.ones((2, 3, 5, 8)), np.ones((2, 3, 8)),
    ...     self_attention_cache=cache, self_attention_cache_update_index=0)
    >>> tuple(outputs.shape), tuple(attention.shape), tuple(cache.shape)
    ((2, 1, 8), (2, 1, 3), (2, 2, 4, 2, 4))
    >>> memory_cache = layer.project_memory(np.ones((2, 3, 5, 8)), np.ones((2, 3, 8)))
    >>> outputs, attention, cache = layer(
    ...     np.ones((2, 1, 8)), np.ones((2, 3, 5, 8)), np.ones((2, 3, 8)),
    ...     self_attention_cache=cache, self_attention_cache_update_index=1,
    ...     memory_cache=memory_cache)
    >>> tuple(outputs.shape), tuple(memory_cache["word_key"].shape)
    ((2, 1, 8), (2, 2, 3, 5, 4))

    References:
        Ma & Zong, Parallel Hierarchical Transformer with Attention Alignment
        for Abstractive Multi-Document Summarization, §3.2.
        Vaswani et al. (2017), Attention Is All You Need, NeurIPS.
    """

    def __init__(
        self,
        hidden_dim,
        intermediate_dim,
        num_heads,
        dropout=0.0,
        activation="relu",
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
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.head_dim = hidden_dim // num_heads

        def initializers():
            return {
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
            }

        # Part I.
        self.self_attention = CachedMultiHeadAttention(
            num_heads=num_heads,
            key_dim=self.head_dim,
            dropout=dropout if attention_dropout is None else attention_dropout,
            dtype=self.dtype_policy,
            name="self_attention",
            **initializers(),
        )
        self.self_attention_dropout = dropout_layer(
            dropout, dtype=self.dtype_policy, name="self_attention_dropout"
        )
        self.self_attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon,
            dtype=self.dtype_policy,
            name="self_attention_layer_norm",
        )
        # Part II.
        self.cross_attention = ParallelCrossAttention(
            hidden_dim=hidden_dim,
            num_heads=num_heads,
            dropout=dropout,
            attention_dropout=attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            dtype=self.dtype_policy,
            name="parallel_cross_attention",
            **initializers(),
        )
        # Part III.
        self.feedforward_intermediate_dense = keras.layers.Dense(
            intermediate_dim,
            activation=self.activation,
            dtype=self.dtype_policy,
            name="feedforward_intermediate_dense",
            **initializers(),
        )
        self.feedforward_output_dense = keras.layers.Dense(
            hidden_dim,
            dtype=self.dtype_policy,
            name="feedforward_output_dense",
            **initializers(),
        )
        self.feedforward_dropout = dropout_layer(
            dropout, dtype=self.dtype_policy, name="feedforward_dropout"
        )
        self.feedforward_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon,
            dtype=self.dtype_policy,
            name="feedforward_layer_norm",
        )

    def _check_decoder_shapes(
        self, decoder_sequence_shape, decoder_padding_mask_shape, cache_shape
    ):
        name = self.name
        shape = check_rank(
            name, "decoder_sequence", decoder_sequence_shape, 3, "[B,S,D]"
        )
        check_dims(
            name, "decoder_sequence", shape, (None, None, self.hidden_dim), "[B,S,D]"
        )
        batch = shape[0]
        key_length = shape[1]
        if cache_shape is not None:
            cache_shape = check_rank(
                name, "self_attention_cache", cache_shape, 5, "[B,2,S,H,Dh]"
            )
            check_dims(
                name,
                "self_attention_cache",
                cache_shape,
                (batch, 2, None, self.num_heads, self.head_dim),
                "[B,2,S,H,Dh]",
            )
            key_length = cache_shape[2]
        if decoder_padding_mask_shape is not None:
            check_rank(
                name, "decoder_padding_mask", decoder_padding_mask_shape, 2, "[B,S]"
            )
            check_dims(
                name,
                "decoder_padding_mask",
                decoder_padding_mask_shape,
                (batch, key_length),
                "[B,S] (S: the cache length when a cache is given)",
            )
        return shape

    def build(
        self,
        decoder_sequence_shape,
        word_memory_shape,
        paragraph_memory_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
        decoder_padding_mask_shape=None,
        self_attention_cache_shape=None,
        self_attention_cache_update_index_shape=None,
    ):
        shape = self._check_decoder_shapes(
            decoder_sequence_shape,
            decoder_padding_mask_shape,
            self_attention_cache_shape,
        )
        self.self_attention.build(query_shape=shape, value_shape=shape)
        use_fused_attention_inputs(self.self_attention)  # as keras_hsum's TransformerDecoder
        use_packed_dropout(self.self_attention)  # its attention dropout, made in its build
        self.self_attention_layer_norm.build(shape)
        self.cross_attention.build(
            query_shape=shape,
            word_memory_shape=word_memory_shape,
            paragraph_memory_shape=paragraph_memory_shape,
            token_mask_shape=token_mask_shape,
            paragraph_mask_shape=paragraph_mask_shape,
        )
        self.feedforward_intermediate_dense.build(shape)
        self.feedforward_output_dense.build(shape[:-1] + (self.intermediate_dim,))
        self.feedforward_layer_norm.build(shape)
        self.built = True

    def _self_attention_mask(
        self, decoder_sequence, decoder_padding_mask, cache, cache_update_index
    ):
        """Causal (and padding) mask [B, S_new, S_k] for the self-attention."""
        batch = ops.shape(decoder_sequence)[0]
        query_length = ops.shape(decoder_sequence)[1]
        key_length = query_length if cache is None else ops.shape(cache)[2]
        query_positions = ops.arange(query_length, dtype="int32")
        if cache_update_index is not None:
            query_positions = query_positions + ops.cast(cache_update_index, "int32")
        key_positions = ops.arange(key_length, dtype="int32")
        mask = key_positions[None, None, :] <= query_positions[None, :, None]
        if decoder_padding_mask is not None:
            mask = ops.logical_and(
                mask, as_bool_mask(decoder_padding_mask)[:, None, :]
            )
        return ops.broadcast_to(mask, (batch, query_length, key_length))

    def _check_cache_index(self, index, decoder_sequence, cache):
        """A Python int index must leave room for the T new positions in the
        cache's S slots (the backend's slice update would clamp it and
        overwrite the last slots). Tensor indices, as in the decoding loop,
        are not checked."""
        if cache is None or isinstance(index, bool) or not isinstance(index, numbers.Integral):
            return
        slots, length = cache.shape[2], decoder_sequence.shape[1]
        if slots is not None and length is not None and not 0 <= index <= slots - length:
            raise ValueError(
                f"{self.name}: `self_attention_cache_update_index` must be in "
                f"[0, S - T] = [0, {slots - length}] (cache slots S={slots}, new "
                f"positions T={length}), received {index}."
            )

    def project_memory(self, word_memory, paragraph_memory):
        """Part II's keys and values of the memories, to pass as `memory_cache`.

        Args:
            word_memory: float [B, P, T, D], context-aware word embeddings C.
            paragraph_memory: float [B, P, D], paragraph embeddings Φ.

        Returns:
            `ParallelCrossAttention.project_memory`'s dict: `"word_key"`,
            `"word_value"` [B, H, P, T, Dh], `"paragraph_key"`,
            `"paragraph_value"` [B, H, P, Dh].
        """
        return self.cross_attention.project_memory(word_memory, paragraph_memory)

    def call(
        self,
        decoder_sequence,
        word_memory,
        paragraph_memory,
        token_mask=None,
        paragraph_mask=None,
        decoder_padding_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        training=None,
        memory_cache=None,
    ):
        if (self_attention_cache is None) != (
            self_attention_cache_update_index is None
        ):
            raise ValueError(
                f"{self.name}: pass `self_attention_cache` [B,2,S,H,Dh] and "
                "`self_attention_cache_update_index` together (cached "
                "decoding) or neither (teacher forcing); received "
                f"self_attention_cache={'None' if self_attention_cache is None else 'a tensor'}, "
                f"self_attention_cache_update_index={self_attention_cache_update_index!r}."
            )
        self._check_decoder_shapes(
            decoder_sequence.shape,
            None if decoder_padding_mask is None else decoder_padding_mask.shape,
            None if self_attention_cache is None else self_attention_cache.shape,
        )
        self._check_cache_index(
            self_attention_cache_update_index, decoder_sequence, self_attention_cache
        )
        rows, examples = decoder_sequence.shape[0], word_memory.shape[0]
        if rows is not None and examples is not None and rows % examples:
            raise ValueError(
                f"{self.name}: `decoder_sequence` must have B or B·K rows (K "
                f"hypotheses per example of the memories, rows b·K + k) for "
                f"memories of B={examples} examples; received "
                f"{rows} rows."
            )

        # Part I: masked self-attention.
        mask = self._self_attention_mask(
            decoder_sequence,
            decoder_padding_mask,
            self_attention_cache,
            self_attention_cache_update_index,
        )
        attended = self.self_attention(
            query=decoder_sequence,
            value=decoder_sequence,
            attention_mask=mask,
            cache=self_attention_cache,
            cache_update_index=self_attention_cache_update_index,
            training=training,
        )
        if self_attention_cache is not None:
            attended, self_attention_cache = attended
        x = self.self_attention_layer_norm(
            decoder_sequence
            + self.self_attention_dropout(attended, training=training)
        )

        # Part II: parallel paragraph- and word-level cross attention. With
        # K hypotheses per memory example (rows b·K + k), the K rows are
        # folded into the query axis [B, K·S, D] so that the memory is read
        # once for all of them (every query position attends independently).
        x, rows = fold_rows(x, word_memory)
        x, paragraph_attention = self.cross_attention(
            x,
            word_memory,
            paragraph_memory,
            token_mask=token_mask,
            paragraph_mask=paragraph_mask,
            training=training,
            memory_cache=memory_cache,
        )
        x = unfold_rows(x, rows)
        paragraph_attention = unfold_rows(paragraph_attention, rows)

        # Part III: feed-forward network.
        hidden = self.feedforward_output_dense(
            self.feedforward_intermediate_dense(x)
        )
        x = self.feedforward_layer_norm(
            x + self.feedforward_dropout(hidden, training=training)
        )
        if self_attention_cache is not None:
            return x, paragraph_attention, self_attention_cache
        return x, paragraph_attention

    def compute_output_shape(
        self,
        decoder_sequence_shape,
        word_memory_shape,
        paragraph_memory_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
        decoder_padding_mask_shape=None,
        self_attention_cache_shape=None,
        self_attention_cache_update_index_shape=None,
        memory_cache_shape=None,
    ):
        shape = tuple(decoder_sequence_shape)
        attention_shape = shape[:2] + (tuple(word_memory_shape)[1],)
        if self_attention_cache_shape is not None:
            return shape, attention_shape, tuple(self_attention_cache_shape)
        return shape, attention_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "intermediate_dim": self.intermediate_dim,
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
