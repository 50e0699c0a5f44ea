"""The Transformer decoder that FT, HT, SEAL and EA share (cached for decoding)."""

import math

import keras
from keras import ops
from keras_hub.layers import ReversibleEmbedding
from keras_hub.layers import SinePositionEncoding
from keras_hub.layers import TransformerDecoder
from keras_hub.layers import TransformerEncoder

from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.token_shift import TokenShift
from keras_hsum.models.copying import copy_log_probabilities
from keras_hsum.models.copying import make_copy_layers
from keras_hsum.models.summarizer import Summarizer
from keras_hsum.models.summarizer import decoder_padding_mask


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
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, hidden_dim=hidden_dim,
            num_decoder_layers=num_layers, num_heads=num_heads, intermediate_dim=intermediate_dim,
            dropout=dropout,
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
        self.embedding_dropout = keras.layers.Dropout(
            dropout, dtype=self.dtype_policy, name="embedding_dropout"
        )
        self.decoder_layers = [
            TransformerDecoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
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
        """float [B,L,2,M,H,Dh]: every layer's cross-attention keys and values."""
        caches = []
        for layer in self.decoder_layers:
            attention = layer._cross_attention_layer
            key = attention._key_dense(memory)
            value = attention._value_dense(memory)
            caches.append(ops.stack([key, value], axis=1))
        return ops.stack(caches, axis=1)

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
            tokens: int [B,S_new] (usually S_new = 1).
            index: int scalar, the position of `tokens[:, 0]`.
            memory: float [B,M,D] (only its shape and mask are used: the
                keys and values come from `cross_caches`).
            self_caches: float [B,L,2,S_max,H,Dh] from
                `empty_self_attention_caches` (positions < index filled).
            cross_caches: float [B,L,2,M,H,Dh] from `cross_attention_caches`.
            memory_mask: optional bool [B,M].

        Returns:
            `(hidden [B,S_new,D], logits float32 [B,S_new,V], self_caches)`.
        """
        x = self.embed(tokens, start_index=index)
        memory_mask = None if memory_mask is None else as_bool_mask(memory_mask)
        updated = []
        for i, layer in enumerate(self.decoder_layers):
            x, self_cache, _ = layer(
                x,
                encoder_sequence=memory,
                encoder_padding_mask=memory_mask,
                self_attention_cache=self_caches[:, i],
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_caches[:, i],
                cross_attention_cache_update_index=None,
            )
            updated.append(self_cache)
        return x, self.logits(x), ops.stack(updated, axis=1)

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
            }
        )
        return config


class FlatMemorySummarizer(Summarizer):
    """A `Summarizer` whose `self.decoder` (a `TransformerSummaryDecoder`)
    attends over one flat memory.

    Subclasses build `self.decoder` (`_init_decoder`; `_init_flat_encoder`
    adds the flat Transformer encoder FT, EA/SEAL and CA share), implement
    `encode` returning at least
    `{"memory": [B,M,D], "memory_mask": bool [B,M]}`, and `step_aux(static)`
    (the per-step aux dict, from the static part of the cache). Teacher
    forcing, the caches (cross-attention keys/values projected once; self-
    attention preallocated) and the cached step are shared here.

    Copying: a subclass that sets `self.pointer_generator = True`, builds
    `self.copy_attention, self.copy_switch = make_copy_layers(self, V)` and
    adds `"source_ids"` int [B,M] to its `encode` output gets a
    pointer-generator over the whole memory (one softmax over its M real
    tokens; `keras_hsum.models.copying`): `decode` and `step` then return
    log-probabilities instead of logits.
    """

    pointer_generator = False

    def _init_decoder(
        self,
        vocabulary_size,
        hidden_dim,
        num_heads,
        intermediate_dim,
        num_decoder_layers,
        dropout,
        tie_embeddings,
    ):
        """Records the hyperparameters every subclass shares and builds
        `self.decoder` (its token embedding is the one the encoders read)."""
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.num_decoder_layers = num_decoder_layers
        self.dropout = dropout
        self.tie_embeddings = tie_embeddings
        self.decoder = TransformerSummaryDecoder(
            vocabulary_size=vocabulary_size,
            hidden_dim=hidden_dim,
            num_layers=num_decoder_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            tie_embeddings=tie_embeddings,
            dtype=self.dtype_policy,
            name="decoder",
        )

    def _init_flat_encoder(self, num_encoder_layers, token_shift=False):
        """Builds the flat source encoder after `_init_decoder`: a
        `TokenShift` of the source embeddings when `token_shift`, a
        sinusoidal position encoding, dropout, the copy layers when
        `self.pointer_generator`, and `num_encoder_layers` keras-hub
        `TransformerEncoder` layers (`_embed_source`, `_run_encoder`)."""
        self.num_encoder_layers = num_encoder_layers
        self.token_shift = bool(token_shift)
        self.source_token_shift = (
            TokenShift(dtype=self.dtype_policy, name="source_token_shift")
            if self.token_shift
            else None
        )
        self.source_position_encoding = SinePositionEncoding(
            dtype=self.dtype_policy, name="source_position_encoding"
        )
        self.source_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="source_dropout"
        )
        if self.pointer_generator:
            self.copy_attention, self.copy_switch = make_copy_layers(
                self, self.vocabulary_size
            )
        self.encoder_layers = [
            TransformerEncoder(
                intermediate_dim=self.intermediate_dim,
                num_heads=self.num_heads,
                dropout=self.dropout,
                layer_norm_epsilon=1e-5,
                dtype=self.dtype_policy,
                name=f"encoder_layer_{i}",
            )
            for i in range(num_encoder_layers)
        ]

    def _embed_source(self, tokens, mask=None):
        """int [N,T] (+ bool mask [N,T]) → Emb(tokens)·√D (token-shifted
        when `token_shift`) + sinusoid(position), float [N,T,D]."""
        x = self.decoder.token_embedding(tokens)
        x = x * ops.cast(math.sqrt(self.hidden_dim), x.dtype)
        if self.source_token_shift is not None:
            x = self.source_token_shift(x, token_mask=mask)
        return x + self.source_position_encoding(x)

    def _run_encoder(self, x, mask, training=False):
        """Dropout, then the encoder layers: float [N,T,D] + bool [N,T] → [N,T,D]."""
        x = self.source_dropout(x, training=training)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=mask, training=training)
        return x

    def _outputs(self, hidden, decoder_inputs, memory):
        """Vocabulary logits [B,S,V], or the copy-mixed log-probabilities."""
        logits = self.decoder.logits(hidden)
        if not self.pointer_generator:
            return logits
        log_probabilities, _, _ = copy_log_probabilities(
            self,
            logits,
            hidden,
            decoder_inputs,
            memory["memory"][:, None],
            memory["source_ids"][:, None],
            memory["memory_mask"][:, None],
            keys=memory.get("copy_keys"),
        )
        return log_probabilities

    def decode(self, decoder_tokens, memory, inputs=None, training=False):
        if not self.decoder.built:
            # The decoder is used through `states`/`logits`, never
            # `__call__`, so Keras would not build it (and would warn that
            # the model has unbuilt state when it builds the model).
            self.decoder.build(
                tuple(decoder_tokens.shape), tuple(memory["memory"].shape)
            )
        decoder_inputs, hidden = self.decoder.states(
            decoder_tokens,
            memory["memory"],
            memory_mask=memory["memory_mask"],
            decoder_padding_mask=decoder_padding_mask(decoder_tokens, self.pad_id),
            training=training,
        )
        return self._outputs(hidden, decoder_inputs, memory)

    def initial_cache(self, memory, max_length):
        """`(static, state)`: the memory plus every layer's cross-attention
        keys/values (and, when copying, the copy keys [B,1,M,D]); zeroed
        self-attention caches [B,L,2,max_length,H,Dh]."""
        batch = ops.shape(memory["memory"])[0]
        static = dict(memory)
        static["cross_caches"] = self.decoder.cross_attention_caches(memory["memory"])
        if self.pointer_generator:
            static["copy_keys"] = self.copy_attention.project_keys(
                memory["memory"][:, None]
            )
        state = {
            "self_caches": self.decoder.empty_self_attention_caches(batch, max_length)
        }
        return static, state

    def step(self, ids, index, cache):
        static, state = cache
        tokens = ops.expand_dims(ids, 1)
        hidden, _, self_caches = self.decoder.call_cached(
            tokens,
            index,
            static["memory"],
            state["self_caches"],
            static["cross_caches"],
            memory_mask=static["memory_mask"],
        )
        decoder_inputs = (
            self.decoder.embed(tokens, start_index=index)
            if self.pointer_generator
            else None
        )
        logits = self._outputs(hidden, decoder_inputs, static)
        return logits[:, 0], (static, {"self_caches": self_caches}), self.step_aux(static)

    def step_aux(self, static):
        """The aux dict of one step (always with "paragraph_attention" [B,P])."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement step_aux(static)."
        )
