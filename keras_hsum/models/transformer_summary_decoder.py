"""The Transformer decoder that FT, HT, SEAL and EA share (cached for decoding).

The models built on it derive from `keras_hsum.models.flat_memory_summarizer.
FlatMemorySummarizer`.
"""

import math

import keras
from keras import ops
from keras_hub.layers import ReversibleEmbedding
from keras_hub.layers import SinePositionEncoding

from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import fold_rows
from keras_hsum.layers.masking import unfold_rows
from keras_hsum.layers.packed_dropout import dropout_layer
from keras_hsum.layers.transformer_decoder import TransformerDecoder


def decoder_cross_attention_caches(decoder_layers, memory):
    """The cross-attention keys and values of each keras-hub
    `TransformerDecoder` in `decoder_layers` over `memory` [B,M,D]
    (`TransformerSummaryDecoder` and `BackboneSummarizer`'s BART share it).

    Returns:
        a tuple with one `(key, value)` pair per layer, in layer order;
        key and value each float [B,M,H,Dh], separate arrays. Not one
        stacked [B,L,2,M,H,Dh] tensor: a decode loop that slices layer i's
        key and value out of a stacked cache makes XLA copy them out at
        every step (a strided slice of the whole cache), while separate
        arrays made before the loop are read in place.
    """
    caches = []
    for layer in decoder_layers:
        attention = layer._cross_attention_layer
        caches.append((attention._key_dense(memory), attention._value_dense(memory)))
    return tuple(caches)


def shared_cross_attention(attention, x, cross_cache, memory_mask=None):
    """A keras-hub `CachedMultiHeadAttention`'s cross-attention over cached
    keys and values that the K rows of one example may share.

    Args:
        attention: the layer (`TransformerDecoder._cross_attention_layer`).
        x: float [N,S,D], the queries' inputs; N = B·K, row b·K + k reads
            example b of the cache (K = 1: one row per example).
        cross_cache: `(key, value)`, each float [B,M,H,Dh] (one layer's
            pair of `decoder_cross_attention_caches`).
        memory_mask: bool [B,M] or None.

    Returns:
        float [N,S,D], what the layer returns with `cache` = key and value
        stacked on axis 1, repeated K times, and `cache_update_index=None`
        (the same query, softmax and output projections; the K rows'
        queries are folded into one query axis of length K·S, so the keys
        and values are read once per example, not once per row).
    """
    if not isinstance(cross_cache, (tuple, list)) or len(cross_cache) != 2:
        raise ValueError(
            "shared_cross_attention: `cross_cache` must be one layer's "
            "`(key, value)` pair, each float [B,M,H,Dh] (an item of "
            "`decoder_cross_attention_caches`); received "
            f"{type(cross_cache).__name__} of shape "
            f"{getattr(cross_cache, 'shape', None)}."
        )
    key, value = cross_cache
    query, rows = fold_rows(attention._query_dense(x), key)  # [B,K·S,H,Dh]
    mask = None if memory_mask is None else as_bool_mask(memory_mask)[:, None, :]
    output, _ = attention._compute_attention(
        query=query, key=key, value=value,
        attention_mask=mask, training=False,
    )
    return attention._output_dense(unfold_rows(output, rows))


def cached_decoder_layer(layer, x, index, self_cache, cross_cache, memory_mask=None):
    """One keras-hub `TransformerDecoder` (with cross-attention) at cached
    positions, inference only: the layer's own sublayers in its order
    (self-attention, cross-attention, feed-forward; pre- or post-norm as
    the layer is built), with the cross-attention's keys and values read
    from `cross_cache`, which the K rows of an example may share
    (`shared_cross_attention`).

    Args:
        layer: a built keras-hub `TransformerDecoder`.
        x: float [N,S,D], the inputs at positions `index..index+S-1`;
            N = B·K, row b·K + k reads example b of `cross_cache`.
        index: int scalar.
        self_cache: float [N,2,S_max,H,Dh].
        cross_cache: `(key, value)`, each float [B,M,H,Dh].
        memory_mask: bool [B,M] or None.

    Returns:
        `(x [N,S,D], self_cache updated at index, query input [N,S,D])`,
        the last being what the cross-attention's query projection read.
    """
    first = layer.normalize_first
    self_mask = layer._compute_self_attention_mask(
        decoder_sequence=x,
        decoder_padding_mask=None,
        decoder_attention_mask=None,
        use_causal_mask=True,
        self_attention_cache=self_cache,
        self_attention_cache_update_index=index,
    )
    residual = x
    h = layer._self_attention_layer_norm(x) if first else x
    h, self_cache = layer._self_attention_layer(
        query=h, value=h, attention_mask=self_mask, cache=self_cache,
        cache_update_index=index,
    )
    x = h + residual
    if not first:
        x = layer._self_attention_layer_norm(x)
    residual = x
    query_input = layer._cross_attention_layer_norm(x) if first else x
    x = shared_cross_attention(
        layer._cross_attention_layer, query_input, cross_cache, memory_mask
    ) + residual
    if not first:
        x = layer._cross_attention_layer_norm(x)
    residual = x
    h = layer._feedforward_layer_norm(x) if first else x
    h = layer._feedforward_output_dense(layer._feedforward_intermediate_dense(h))
    x = h + residual
    if not first:
        x = layer._feedforward_layer_norm(x)
    return x, self_cache, query_input


def run_cached_decoder_layers(
    decoder_layers, x, index, memory_mask, self_caches, cross_caches, between=None
):
    """Runs keras-hub `TransformerDecoder` layers on `x` [N,S_new,D] at
    position `index` with key/value caches (`cached_decoder_layer`).

    Args:
        decoder_layers: the L layers, in order.
        x: float [N,S_new,D], the embedded tokens at `index..index+S_new-1`;
            N = B·K (row b·K + k reads example b of the memory; K = 1 when
            the caches were not shared).
        index: int scalar.
        memory_mask: bool [B,M] or None (the memory's keys and values come
            from `cross_caches`).
        self_caches: float [N,L,2,S_max,H,Dh].
        cross_caches: L `(key, value)` pairs, each float [B,M,H,Dh]
            (`decoder_cross_attention_caches`).
        between: optional `(i, x) -> x`, run on layer i's output before
            layer i + 1 reads it (sublayers added between pretrained ones).

    Returns:
        `(hidden [N,S_new,D], self_caches [N,L,2,S_max,H,Dh] updated at index)`.
    """
    updated = []
    for i, layer in enumerate(decoder_layers):
        x, self_cache, _ = cached_decoder_layer(
            layer, x, index, self_caches[:, i], cross_caches[i], memory_mask
        )
        updated.append(self_cache)
        if between is not None:
            x = between(i, x)
    return x, ops.stack(updated, axis=1)


@keras.saving.register_keras_serializable(package="keras_hsum")
class TransformerSummaryDecoder(keras.layers.Layer):
    """Embeds summary tokens, runs a stack of Transformer decoder layers over a
    flat memory, and projects back onto the (tied) embedding matrix.

    y = Emb(tokens)·√D + sinusoid(position) → dropout → L × keras-hub
    `TransformerDecoder` (causal self-attention, cross-attention over
    `memory` [B,M,D], FFN; post-LayerNorm as in Vaswani et al.) → logits =
    y·Embᵀ (tied; a separate output matrix with `tie_embeddings=False`).
    The token embedding is public (`token_embedding`) so that an encoder can
    share it (FT/HT/SEAL tie source, target and output embeddings).

    Decoding uses keras-hub's key/value caches: `cross_attention_caches`
    projects the memory once, `empty_self_attention_caches` preallocates, and
    `call_cached` runs one position; it equals `call` (tested).

    Args:
        vocabulary_size: V.
        hidden_dim: D.
        num_layers: decoder layers.
        num_heads: H.
        intermediate_dim: FFN width.
        dropout: dropout rate (embeddings, attention, residuals).
        attention_dropout: dropout rate on the attention probabilities, or
            None (the default) for `dropout`; 0 lets the attentions run
            through `keras.ops.dot_product_attention` (fused on a GPU).
        tie_embeddings: share the output projection with the embedding.
        layer_norm_epsilon: LayerNorm epsilon.

    Call arguments:
        decoder_tokens: int [B,S] (BOS first).
        memory: float [B,M,D].
        memory_mask: optional bool [B,M], True at real memory positions.
        decoder_padding_mask: optional bool [B,S].
        training: bool.

    Returns:
        float32 logits [B,S,V].
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        num_layers,
        num_heads,
        intermediate_dim,
        dropout=0.0,
        tie_embeddings=True,
        layer_norm_epsilon=1e-5,
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, hidden_dim=hidden_dim,
            num_decoder_layers=num_layers, num_heads=num_heads, intermediate_dim=intermediate_dim,
            dropout=dropout, attention_dropout=attention_dropout,
            optional=("attention_dropout",),
        )
        if hidden_dim % num_heads:
            raise ValueError(
                f"{self.name}: `hidden_dim` must be divisible by `num_heads`, "
                f"received hidden_dim={hidden_dim}, num_heads={num_heads}."
            )
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.tie_embeddings = tie_embeddings
        self.layer_norm_epsilon = layer_norm_epsilon
        self.head_dim = hidden_dim // num_heads
        self.token_embedding = ReversibleEmbedding(
            vocabulary_size,
            hidden_dim,
            tie_weights=tie_embeddings,
            embeddings_initializer=keras.initializers.RandomNormal(
                stddev=hidden_dim**-0.5
            ),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.position_encoding = SinePositionEncoding(
            dtype=self.dtype_policy, name="position_encoding"
        )
        self.embedding_dropout = dropout_layer(
            dropout, dtype=self.dtype_policy, name="embedding_dropout"
        )
        self.decoder_layers = [
            TransformerDecoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                attention_dropout=attention_dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=self.dtype_policy,
                name=f"decoder_layer_{i}",
            )
            for i in range(num_layers)
        ]

    def build(self, decoder_tokens_shape, memory_shape=None, *args, **kwargs):
        self.token_embedding.build(decoder_tokens_shape)
        sequence_shape = tuple(decoder_tokens_shape) + (self.hidden_dim,)
        self.position_encoding.build(sequence_shape)
        memory_shape = memory_shape or (None, None, self.hidden_dim)
        for layer in self.decoder_layers:
            layer.build(sequence_shape, memory_shape)
        self.built = True

    def embed(self, tokens, start_index=0, training=False):
        """float [B,S,D]: scaled token embeddings + sinusoids from `start_index`."""
        x = self.token_embedding(tokens)
        x = x * ops.cast(math.sqrt(self.hidden_dim), x.dtype)
        x = x + self.position_encoding(x, start_index=start_index)
        return self.embedding_dropout(x, training=training)

    def logits(self, hidden):
        """float32 [..., V] from decoder states [..., D]."""
        return ops.cast(self.token_embedding(hidden, reverse=True), "float32")

    def call(
        self,
        decoder_tokens,
        memory,
        memory_mask=None,
        decoder_padding_mask=None,
        training=False,
    ):
        _, hidden = self.states(
            decoder_tokens,
            memory,
            memory_mask=memory_mask,
            decoder_padding_mask=decoder_padding_mask,
            training=training,
        )
        return self.logits(hidden)

    def states(
        self,
        decoder_tokens,
        memory,
        memory_mask=None,
        decoder_padding_mask=None,
        training=False,
    ):
        """`(embedded inputs [B,S,D], final hidden states [B,S,D])` of the
        teacher-forced decoder (what a pointer-generator switch reads)."""
        x = self.embed(decoder_tokens, training=training)
        inputs = x
        memory_mask = None if memory_mask is None else as_bool_mask(memory_mask)
        for layer in self.decoder_layers:
            x = layer(
                x,
                encoder_sequence=memory,
                decoder_padding_mask=decoder_padding_mask,
                encoder_padding_mask=memory_mask,
                training=training,
            )
        return inputs, x

    def cross_attention_caches(self, memory):
        """Every layer's cross-attention keys and values: a tuple of L
        `(key, value)` pairs, each float [B,M,H,Dh]
        (`decoder_cross_attention_caches`)."""
        return decoder_cross_attention_caches(self.decoder_layers, memory)

    def empty_self_attention_caches(self, batch_size, max_length):
        """float zeros [B,L,2,max_length,H,Dh] in the compute dtype."""
        return ops.zeros(
            (
                batch_size,
                self.num_layers,
                2,
                max_length,
                self.num_heads,
                self.head_dim,
            ),
            dtype=self.compute_dtype,
        )

    def call_cached(
        self, tokens, index, memory, self_caches, cross_caches, memory_mask=None
    ):
        """Decodes the positions `index..index+S_new-1` with caches.

        Args:
            tokens: int [N,S_new] (usually S_new = 1); N = B·K, row b·K + k
                reads example b of the memory (K = 1: one row per example).
            index: int scalar, the position of `tokens[:, 0]`.
            memory: float [B,M,D] (unused: the keys and values come from
                `cross_caches`).
            self_caches: float [N,L,2,S_max,H,Dh] from
                `empty_self_attention_caches` (positions < index filled).
            cross_caches: L `(key, value)` pairs, each float [B,M,H,Dh],
                from `cross_attention_caches`.
            memory_mask: optional bool [B,M].

        Returns:
            `(hidden [N,S_new,D], logits float32 [N,S_new,V], self_caches)`.
        """
        x = self.embed(tokens, start_index=index)
        memory_mask = None if memory_mask is None else as_bool_mask(memory_mask)
        x, self_caches = run_cached_decoder_layers(
            self.decoder_layers, x, index, memory_mask, self_caches, cross_caches
        )
        return x, self.logits(x), self_caches

    def compute_output_shape(self, decoder_tokens_shape, *args, **kwargs):
        return tuple(decoder_tokens_shape) + (self.vocabulary_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "tie_embeddings": self.tie_embeddings,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
