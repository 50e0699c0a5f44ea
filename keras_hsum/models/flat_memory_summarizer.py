"""`FlatMemorySummarizer`: the base of the summarizers whose
`TransformerSummaryDecoder` attends over one flat memory (FT, HT, EA/SEAL, CA)."""

import math

import keras
from keras import ops
from keras_hub.layers import SinePositionEncoding

from keras_hsum.layers.packed_dropout import dropout_layer
from keras_hsum.layers.token_shift import TokenShift
from keras_hsum.layers.transformer_encoder import TransformerEncoder
from keras_hsum.models.copying import copy_log_probabilities
from keras_hsum.models.copying import make_copy_layers
from keras_hsum.models.summarizer import Summarizer
from keras_hsum.models.summarizer import decoder_padding_mask
from keras_hsum.models.summarizer import rows_per_hypothesis
from keras_hsum.models.transformer_summary_decoder import TransformerSummaryDecoder


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
        attention_dropout=None,
    ):
        """Records the hyperparameters every subclass shares and builds
        `self.decoder` (its token embedding is the one the encoders read).
        `attention_dropout` (None: `dropout`) is the rate on the attention
        probabilities of the decoder and of the encoders built after it."""
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.num_decoder_layers = num_decoder_layers
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.tie_embeddings = tie_embeddings
        self.decoder = TransformerSummaryDecoder(
            vocabulary_size=vocabulary_size,
            hidden_dim=hidden_dim,
            num_layers=num_decoder_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
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
        self.source_dropout = dropout_layer(
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
                attention_dropout=self.attention_dropout,
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
        keys/values `"cross_caches"` (a tuple of L `(key, value)` pairs,
        each float [B,M,H,Dh]) (and, when copying, the copy keys
        [B,1,M,D]); zeroed self-attention caches [B,L,2,max_length,H,Dh]."""
        return self._cache(memory, max_length, 1)

    def _cache(self, memory, max_length, beam_size):
        """`(static, state)` for K = `beam_size` hypotheses per example: the
        static part once per example, the self-attention caches B·K rows."""
        static = dict(memory)
        static["cross_caches"] = self.decoder.cross_attention_caches(memory["memory"])
        if self.pointer_generator:
            static["copy_keys"] = self.copy_attention.project_keys(
                memory["memory"][:, None]
            )
        batch = ops.shape(memory["memory"])[0] * int(beam_size)
        state = {
            "self_caches": self.decoder.empty_self_attention_caches(batch, max_length)
        }
        return static, state

    def beam_cache(self, memory, max_length, beam_size):
        """`initial_cache` for K = `beam_size` hypotheses per example, the K
        beams sharing one copy of the memory.

        The memory, its cross-attention keys/values (and copy keys) stay
        [B,...], projected once per example; the self-attention caches are
        [B·K,L,2,max_length,H,Dh], and `step` reads row b of the memory for
        its rows b·K + k (`shared_cross_attention`). Faster than repeating
        the memory K times (the default `Summarizer.beam_cache`), which a
        step then reads K times: see benchmarks/README.md, "beams sharing
        the memory".
        """
        return self._cache(memory, max_length, beam_size)

    def step(self, ids, index, cache):
        """One position: `ids` int [N] at `index` → logits float32 [N,V'].

        N = B with `initial_cache`'s cache; N = B·K with `beam_cache`'s
        (row b·K + k reads example b of the memory; the aux rows follow
        the N hypotheses).
        """
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
        aux = rows_per_hypothesis(self.step_aux(static), ops.shape(ids)[0])
        return logits[:, 0], (static, {"self_caches": self_caches}), aux

    def step_aux(self, static):
        """The aux dict of one step (always with "paragraph_attention" [B,P])."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement step_aux(static)."
        )
