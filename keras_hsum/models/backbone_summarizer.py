"""`BackboneSummarizer`: a pretrained keras-hub encoder-decoder backbone
(BART, T5) driven through keras_hsum's `Summarizer` decoding contract."""

import math

import keras
from keras import ops

from keras_hsum.features import DECODER_TOKENS
from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import TOKEN_MASK
from keras_hsum.features import TOKENS
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import fold_rows
from keras_hsum.layers.masking import masked_softmax
from keras_hsum.models.summarizer import Summarizer
from keras_hsum.models.summarizer import decoder_padding_mask
from keras_hsum.models.summarizer import flat_tokens
from keras_hsum.models.summarizer import optional_mask
from keras_hsum.models.summarizer import required
from keras_hsum.models.transformer_summary_decoder import cached_decoder_layer
from keras_hsum.models.transformer_summary_decoder import decoder_cross_attention_caches


def cross_attention_probabilities(query, keys, memory_mask, scale):
    """A cross-attention's probabilities at one decoder position, averaged
    over its heads.

    Args:
        query: float [N,1,H,Dh], the projected query; N = B·K rows, row
            b·K + k reading example b of `keys` (K = 1: one row each).
        keys: float [B,M,H,Dh], the cached keys of the memory.
        memory_mask: bool [B,M].
        scale: what multiplies q·k (BART: Dh^-1/2; T5: 1).

    Returns:
        float32 [N,M]: softmax over the real memory positions of
        scale · q·k, the mean over the H heads; each row sums to 1.
    """
    query, rows = fold_rows(query, keys)  # [B,K,H,Dh]
    scores = ops.einsum(
        "bshk,bmhk->bhsm", ops.cast(query, "float32"), ops.cast(keys, "float32")
    ) * scale
    probabilities = masked_softmax(
        scores, as_bool_mask(memory_mask)[:, None, None, :], axis=-1
    )
    return ops.reshape(ops.mean(probabilities, axis=1), (rows, -1))


class BartComputation:
    """How a `keras_hub.models.BartBackbone` encodes and decodes: learned
    positions, embedding LayerNorm, post-norm `TransformerEncoder` /
    `TransformerDecoder` layers, the tied embedding as LM head. Reads the
    backbone's layers; holds no weights of its own.

    `shares_memory`: its cached decoder step lets the K hypotheses of an
    example read one copy of the memory's keys and values
    (`cached_decoder_layer`)."""

    shares_memory = True

    def __init__(self, backbone):
        self.backbone = backbone
        self.head_dim = backbone.hidden_dim // backbone.num_heads
        self.max_sequence_length = int(backbone.max_sequence_length)

    def encoder_layers(self):
        """The layers only the encoder uses (not the shared token embedding)."""
        backbone = self.backbone
        return [backbone.encoder_position_embedding, backbone.encoder_embeddings_layer_norm,
                *backbone.encoder_transformer_layers]

    def encode(self, tokens, mask, training=False):
        """int [B,N] + bool [B,N] → float [B,N,D]."""
        backbone = self.backbone
        x = backbone.token_embedding(tokens)
        positions = backbone.encoder_position_embedding(x)
        x = backbone.encoder_embeddings_add((x, positions))
        x = backbone.encoder_embeddings_layer_norm(x)
        x = backbone.encoder_embeddings_dropout(x, training=training)
        for layer in backbone.encoder_transformer_layers:
            x = layer(x, padding_mask=mask, training=training)
        return x

    def _embed(self, tokens, start_index=0, training=False):
        backbone = self.backbone
        x = backbone.token_embedding(tokens)
        positions = backbone.decoder_position_embedding(x, start_index=start_index)
        x = backbone.decoder_embeddings_add((x, positions))
        x = backbone.decoder_embeddings_layer_norm(x)
        return backbone.decoder_embeddings_dropout(x, training=training)

    def decode(self, tokens, memory, memory_mask, padding_mask, training=False,
               between=None):
        """Teacher forcing: int [B,S] → hidden float [B,S,D]. `between`:
        optional `(i, x) -> x` run on decoder layer i's output."""
        x = self._embed(tokens, training=training)
        for i, layer in enumerate(self.backbone.decoder_transformer_layers):
            x = layer(
                decoder_sequence=x,
                encoder_sequence=memory,
                decoder_padding_mask=padding_mask,
                encoder_padding_mask=memory_mask,
                training=training,
            )
            if between is not None:
                x = between(i, x)
        return x

    def cross_attention_caches(self, memory):
        """The decoder's cross-attention keys and values of the encoder
        states [B,N,D]: a tuple of L `(key, value)` pairs, each float
        [B,N,H,Dh] (`decoder_cross_attention_caches`)."""
        return decoder_cross_attention_caches(self.backbone.decoder_transformer_layers, memory)

    def decode_step(self, tokens, index, memory, memory_mask, self_caches, cross_caches,
                    between=None, with_attention=False):
        """int [N,1] at `index` → `(hidden [N,1,D], self_caches updated at
        index, attention)`: with `with_attention`, the last decoder layer's
        cross-attention probabilities float32 [N,M]
        (`cross_attention_probabilities`), else None."""
        x = self._embed(tokens, start_index=index)
        updated = []
        for i, layer in enumerate(self.backbone.decoder_transformer_layers):
            x, self_cache, query_input = cached_decoder_layer(
                layer, x, index, self_caches[:, i], cross_caches[i], memory_mask
            )
            updated.append(self_cache)
            if between is not None:
                x = between(i, x)
        attention = None
        if with_attention:
            attention = cross_attention_probabilities(
                layer._cross_attention_layer._query_dense(query_input),
                cross_caches[-1][0], memory_mask, 1.0 / math.sqrt(self.head_dim),
            )
        return x, ops.stack(updated, axis=1), attention

    def logits(self, hidden):
        """float [B,S,D] → [B,S,V]: the token embedding, reversed (tied)."""
        return self.backbone.token_embedding(hidden, reverse=True)


class T5Computation:
    """How a `keras_hub.models.T5Backbone` encodes and decodes: no position
    embedding (the first layer's relative position bias, shared by the
    stack), pre-norm `T5TransformerLayer`s, a final RMS norm, and the LM head
    (the tied embedding with the hidden states scaled by D^-0.5, or the
    untied output embedding)."""

    def __init__(self, backbone):
        self.backbone = backbone
        self.head_dim = int(backbone.key_value_dim or backbone.hidden_dim // backbone.num_heads)
        self.max_sequence_length = None  # relative positions: no limit

    # keras-hub's T5 attention reads one memory row per query row: the K
    # hypotheses of an example read K copies of its keys and values.
    shares_memory = False

    def encoder_layers(self):
        """The layers only the encoder uses (not the shared token embedding)."""
        return [*self.backbone.encoder_transformer_layers, self.backbone.encoder_layer_norm]

    def encode(self, tokens, mask, training=False):
        backbone = self.backbone
        x = backbone.token_embedding(tokens)
        x = backbone.encoder_embedding_dropout(x, training=training)
        attention_mask = mask[:, None, :]
        position_bias = None
        for layer in backbone.encoder_transformer_layers:
            x, position_bias = layer(
                x,
                attention_mask=attention_mask,
                position_bias=position_bias,
                use_causal_mask=False,
                training=training,
            )
        x = backbone.encoder_layer_norm(x)
        return backbone.encoder_dropout(x, training=training)

    def _finish(self, x, training=False):
        x = self.backbone.decoder_layer_norm(x)
        return self.backbone.decoder_dropout(x, training=training)

    def decode(self, tokens, memory, memory_mask, padding_mask, training=False,
               between=None):
        backbone = self.backbone
        x = backbone.token_embedding(tokens)
        x = backbone.decoder_embedding_dropout(x, training=training)
        position_bias = None
        for i, layer in enumerate(backbone.decoder_transformer_layers):
            x, position_bias = layer(
                x,
                attention_mask=padding_mask[:, None, :],
                position_bias=position_bias,
                encoder_hidden_states=memory,
                encoder_attention_mask=memory_mask[:, None, :],
                use_causal_mask=True,
                training=training,
            )
            if between is not None:
                x = between(i, x)
        return self._finish(x, training=training)

    def cross_attention_caches(self, memory):
        """The decoder's cross-attention keys and values of the encoder
        states [B,N,D] as keras-hub's `T5MultiHeadAttention` reads its
        `cache`: a tuple of L arrays, each float [B,2,N,H,Dh] (key, value
        stacked on axis 1)."""
        batch = ops.shape(memory)[0]
        heads = self.backbone.num_heads
        caches = []
        for layer in self.backbone.decoder_transformer_layers:
            attention = layer.cross_attention
            key = ops.reshape(attention.key_projector(memory), (batch, -1, heads, self.head_dim))
            value = ops.reshape(
                attention.value_projector(memory), (batch, -1, heads, self.head_dim)
            )
            caches.append(ops.stack([key, value], axis=1))
        return tuple(caches)

    def decode_step(self, tokens, index, memory, memory_mask, self_caches, cross_caches,
                    between=None, with_attention=False):
        """As `BartComputation.decode_step`; with `with_attention`, the last
        layer runs through `_layer_step_with_attention`."""
        x = self.backbone.token_embedding(tokens)
        x = self.backbone.decoder_embedding_dropout(x)
        position_bias = None
        updated = []
        attention = None
        layers = self.backbone.decoder_transformer_layers
        for i, layer in enumerate(layers):
            if with_attention and i == len(layers) - 1:
                x, position_bias, self_cache, attention = self._layer_step_with_attention(
                    layer, x, index, position_bias, self_caches[:, i], cross_caches[i],
                    memory, memory_mask,
                )
            else:
                x, position_bias, self_cache, _ = layer(
                    x,
                    position_bias=position_bias,
                    encoder_hidden_states=memory,
                    encoder_attention_mask=memory_mask[:, None, :],
                    use_causal_mask=True,
                    self_attention_cache=self_caches[:, i],
                    self_attention_cache_update_index=index,
                    cross_attention_cache=cross_caches[i],
                    cross_attention_cache_update_index=None,
                )
            updated.append(self_cache)
            if between is not None:
                x = between(i, x)
        return self._finish(x), ops.stack(updated, axis=1), attention

    def _layer_step_with_attention(self, layer, x, index, position_bias, self_cache,
                                   cross_cache, memory, memory_mask):
        """A keras-hub `T5TransformerLayer` (decoder) at one cached position,
        inference only, through its own sublayers in its order (pre-norm
        self-attention, cross-attention, feed-forward), so that the
        cross-attention's query is at hand: `(x [N,1,D], position_bias,
        self_cache, attention float32 [N,M])`, the attention being its
        cross-attention probabilities (T5 does not scale q·k)."""
        attention_mask = None
        if position_bias is None:  # the stack's first layer makes the causal mask
            attention_mask = layer._compute_self_attention_mask(x, None, self_cache, index)
        residual = x
        h, position_bias, self_cache = layer.self_attention(
            layer.self_attention_layer_norm(x), mask=attention_mask,
            position_bias=position_bias, cache=self_cache, cache_update_index=index,
        )
        x = h + residual
        residual = x
        query_input = layer.cross_attention_layer_norm(x)
        h, _, _ = layer.cross_attention(
            query_input, key_value_states=memory, mask=memory_mask[:, None, :],
            cache=cross_cache, cache_update_index=None,
        )
        x = h + residual
        residual = x
        h = layer.layer_norm(x)
        if layer.use_gated_activation:
            h = layer.input_projector(h) * layer.gate_projector(h)
        else:
            h = layer.input_projector(h)
        x = layer.output_projector(h) + residual
        query = ops.reshape(
            layer.cross_attention.query_projector(query_input),
            (ops.shape(x)[0], -1, self.backbone.num_heads, self.head_dim),
        )
        attention = cross_attention_probabilities(query, cross_cache[:, 0], memory_mask, 1.0)
        return x, position_bias, self_cache, attention

    def logits(self, hidden):
        if self.backbone.tie_embedding_weights:
            hidden = hidden * ops.cast(self.backbone.hidden_dim**-0.5, hidden.dtype)
        return self.backbone.token_embedding(hidden, reverse=True)


# The keras-hub backbone classes this model runs, by class name
# (keras_hub.models.<name>), and how it runs each.
COMPUTATIONS = {"BartBackbone": BartComputation, "T5Backbone": T5Computation}


def _backbone_class_name(backbone):
    for cls in type(backbone).__mro__:
        if cls.__name__ in COMPUTATIONS:
            return cls.__name__
    return None


@keras.saving.register_keras_serializable(package="keras_hsum")
class BackboneSummarizer(Summarizer):
    """A pretrained keras-hub sequence-to-sequence backbone as a `Summarizer`.

    The flat input (the `"flat"` family: the documents concatenated in rank
    order and truncated to N tokens) goes through the backbone's pretrained
    encoder; its pretrained decoder reads the encoder states through its own
    cross-attention and predicts the next token with the backbone's language
    model head (BART: the token embedding, tied; T5: the tied embedding
    after scaling the hidden states by D^-0.5, or its untied output
    embedding, as `keras_hub.models.T5Seq2SeqLM`). Nothing is added to the
    pretrained computation: `call` gives exactly the bare backbone's
    `decoder_sequence_output` projected by that head, so fine-tuning starts
    from the pretrained model.

    Decoding follows the `Summarizer` contract (`keras_hsum.models.
    summarizer`), so `keras_hsum.decoding.beam_search` / `greedy_search` and
    their score terms drive it unchanged: `initial_cache` projects every
    decoder layer's cross-attention keys and values once (`"cross_caches"`,
    constant: a tuple with one item per layer, BART's a `(key, value)` pair
    of [B,N,H,Dh] arrays, T5's one [B,2,N,H,Dh] array), `step` runs one
    token through the decoder with its cached self-attention keys and
    values ([B,L,2,S_max,H,Dh], the per-hypothesis state) written at
    `index`, as keras-hub's `BartSeq2SeqLM` and `T5Seq2SeqLM` do when they
    generate (T5's relative position bias is computed for the query at
    `index`).

    Supported backbones: `keras_hub.models.BartBackbone` and `T5Backbone`
    (and their subclasses); `BartComputation` / `T5Computation` in this
    module say how each is run.

    Args:
        backbone: a built `keras_hub.models.BartBackbone` or `T5Backbone`
            (pretrained, from `from_preset`, or new), or its serialized
            config (as `get_config` writes it).
        pad_id, bos_id, eos_id: the special ids of the backbone's
            vocabulary. The defaults are keras_hsum's `Vocabulary` ids
            (0, 2, 3); a hub BART preset with its own tokenizer uses
            pad 1, EOS 2 and starts decoding from `</s>` = 2 (bos_id=2);
            a T5 preset pad 0, EOS 1 and starts from pad (bos_id=0).
        **kwargs: `keras.Model` arguments (`name`, `dtype`).

    Inputs (dict):
        tokens: int [B,N] (or [B,P,T], read as one flat sequence of P·T
            tokens), N <= the backbone's `max_sequence_length` (BART; T5
            has relative positions and no limit).
        token_mask: optional bool [B,N] (or [B,P,T]); default tokens != pad.
        decoder_tokens: int [B,S] (teacher forcing; BOS first), S <= the
            backbone's `max_sequence_length`.

    Returns (call):
        float32 logits [B,S,V].

    Decoding aux: `{"paragraph_attention": ones [B,1]}`: the flat source
    is one row, which holds all of the decoder's cross-attention (the
    SavedModel's `paragraph_attention` is then 1 for the row; a preset's
    tokenizer puts no separator between the paragraphs, so the attention
    cannot be split among them).

    Example (a pretrained one: `BackboneSummarizer.from_preset("bart_base_en",
    pad_id=1, bos_id=2, eos_id=2)`; here a small random BART):
        >>> import keras_hub
        >>> backbone = keras_hub.models.BartBackbone(
        ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
        ...     intermediate_dim=16, max_sequence_length=16)
        >>> model = BackboneSummarizer(backbone, pad_id=1, bos_id=2, eos_id=2)
        >>> tokens = np.random.default_rng(0).integers(4, 50, (2, 10))  # [B,N]
        >>> decoder_tokens = np.full((2, 3), 2)  # [B,S]
        >>> logits = model({"tokens": tokens, "decoder_tokens": decoder_tokens})
        >>> tuple(logits.shape)  # [B,S,V]
        (2, 3, 50)
        >>> hidden = backbone({  # the bare backbone, its tied LM head
        ...     "encoder_token_ids": tokens, "encoder_padding_mask": tokens != 1,
        ...     "decoder_token_ids": decoder_tokens,
        ...     "decoder_padding_mask": decoder_tokens != 1,
        ... })["decoder_sequence_output"]
        >>> embeddings = ops.convert_to_numpy(backbone.token_embedding.embeddings)
        >>> np.allclose(logits, ops.convert_to_numpy(hidden) @ embeddings.T, atol=1e-5)
        True
        >>> from keras_hsum.decoding import beam_search
        >>> out = beam_search(model, {"tokens": tokens}, beam_size=3, max_length=5)
        >>> tuple(out["sequences"].shape)  # [B,K,L]
        (2, 3, 5)

    References:
        Lewis et al. (2020), BART: Denoising Sequence-to-Sequence
        Pre-training for Natural Language Generation, Translation, and
        Comprehension. Raffel et al. (2020), Exploring the Limits of
        Transfer Learning with a Unified Text-to-Text Transformer (T5).
    """

    def __init__(self, backbone, **kwargs):
        if isinstance(backbone, dict):
            backbone = keras.layers.deserialize(backbone)
        kind = _backbone_class_name(backbone)
        if kind is None:
            raise ValueError(
                "BackboneSummarizer: `backbone` must be one of keras_hub.models."
                f"{' or '.join(COMPUTATIONS)} (built, e.g. from `from_preset`); "
                f"received {type(backbone).__name__}. Load a supported preset, or "
                "use FlatTransformer to train a model from scratch."
            )
        super().__init__(**kwargs)
        self.backbone = backbone
        self.backbone_class = kind
        self.computation = COMPUTATIONS[kind](backbone)
        self.vocabulary_size = int(backbone.vocabulary_size)
        self.hidden_dim = int(backbone.hidden_dim)
        self.num_heads = int(backbone.num_heads)
        self.num_decoder_layers = len(backbone.decoder_transformer_layers)
        self.max_sequence_length = self.computation.max_sequence_length
        # Every weight is the backbone's, created when it was built: the
        # model needs no trace to build, and can decode at once.
        self.built = True

    @classmethod
    def from_preset(cls, preset, load_weights=True, backbone_kwargs=None, **kwargs):
        """A `BackboneSummarizer` on the backbone of a keras-hub preset.

        Args:
            preset: a keras-hub preset name (`"bart_base_en"`, where the hub
                is reachable), a `kaggle://` / `hf://` handle, or the path of
                a local preset folder (`Backbone.save_to_preset` writes one).
            load_weights: load the preset's weights (False: random ones).
            backbone_kwargs: optional dict passed to `Backbone.from_preset`
                (e.g. `{"dropout": 0.0}` or `{"dtype": "bfloat16"}`).
            **kwargs: this class's other arguments (`pad_id`, `bos_id`,
                `eos_id`, `name`).

        Returns:
            A `BackboneSummarizer`.
        """
        import keras_hub

        backbone = keras_hub.models.Backbone.from_preset(
            preset, load_weights=load_weights, **(backbone_kwargs or {})
        )
        return cls(backbone=backbone, **kwargs)

    @property
    def head_dim(self):
        """Dh: D / H (T5: its `key_value_dim` when set)."""
        return self.computation.head_dim

    def check_source_length(self, max_source_length, setting="max_source_length"):
        """Refuses, before any data is read, a source longer than the
        backbone's learned positions: a flat source of `max_source_length`
        tokens (N) must fit BART's `max_sequence_length` (T5: no limit).

        Args:
            max_source_length: N, the tokens of the flat source.
            setting: the config field that sets N, for the message.

        Raises:
            ValueError: N > the backbone's `max_sequence_length`; the message
                names `setting`, both numbers and the `--set` that fits.
        """
        limit = self.max_sequence_length
        if limit is not None and int(max_source_length) > limit:
            raise ValueError(
                f"{self.name}: {setting}={int(max_source_length)}, and the backbone "
                f"reads at most {limit} source positions (its max_sequence_length: "
                "its learned position embeddings end there). Set "
                f"--set {setting}={limit} (or less), or choose a backbone with more "
                "positions."
            )

    def _check_length(self, name, length):
        limit = self.max_sequence_length
        if limit is not None and length is not None and int(length) > limit:
            raise ValueError(
                f"{self.name}: `{name}` has {int(length)} positions, more than the "
                f"backbone's max_sequence_length {self.max_sequence_length} (its "
                "learned position embeddings end there). Truncate the input (the "
                "flat family's length) or the targets to at most "
                f"{self.max_sequence_length} tokens."
            )

    def encode(self, inputs, training=False):
        """The backbone's encoder: returns `{"memory": float [B,N,D],
        "memory_mask": bool [B,N]}`."""
        tokens = required(self, inputs, TOKENS, "int [B,N] or [B,P,T]")
        if TOKEN_MASK in inputs and inputs[TOKEN_MASK] is not None:
            mask = optional_mask(inputs, TOKEN_MASK, tokens)
        else:
            mask = ops.not_equal(tokens, self.pad_id)
        tokens, mask = flat_tokens(self, tokens, mask)
        self._check_length(TOKENS, tokens.shape[1])
        x = self.computation.encode(tokens, as_bool_mask(mask), training=training)
        return {"memory": x, "memory_mask": mask}

    def _logits(self, hidden):
        """float [B,S,D] → float32 [B,S,V]: the backbone's LM head."""
        return ops.cast(self.computation.logits(hidden), "float32")

    def _decode_hidden(self, decoder_tokens, memory, training=False, between=None):
        """Teacher-forced decoder states float [B,S,D] (`between`: the
        computation's between-layers hook)."""
        self._check_length(DECODER_TOKENS, decoder_tokens.shape[1])
        return self.computation.decode(
            decoder_tokens,
            memory["memory"],
            as_bool_mask(memory["memory_mask"]),
            decoder_padding_mask(decoder_tokens, self.pad_id),
            training=training,
            between=between,
        )

    def decode(self, decoder_tokens, memory, inputs=None, training=False):
        """Teacher-forced decoder: int [B,S] → float32 logits [B,S,V]."""
        return self._logits(self._decode_hidden(decoder_tokens, memory, training=training))

    def _empty_self_attention_caches(self, batch, max_length):
        """float zeros [B,L,2,max_length,H,Dh] in the compute dtype."""
        return ops.zeros(
            (batch, self.num_decoder_layers, 2, max_length, self.num_heads, self.head_dim),
            dtype=self.backbone.compute_dtype,
        )

    def initial_cache(self, memory, max_length):
        """`(static, state)`: the memory plus every layer's cross-attention
        keys/values `"cross_caches"` (a tuple with one item per decoder
        layer: BART's a `(key, value)` pair, each float [B,N,H,Dh]; T5's one
        float [B,2,N,H,Dh], key and value stacked as keras-hub's T5
        attention reads its cache); zeroed self-attention caches
        `"self_caches"` [B,L,2,max_length,H,Dh]."""
        self._check_length("max_length", max_length if isinstance(max_length, int) else None)
        static = dict(memory)
        static["cross_caches"] = self.computation.cross_attention_caches(memory["memory"])
        batch = ops.shape(memory["memory"])[0]
        state = {"self_caches": self._empty_self_attention_caches(batch, max_length)}
        return static, state

    def beam_cache(self, memory, max_length, beam_size):
        """The cache of K = `beam_size` hypotheses per example (row b·K + k
        is hypothesis k of example b): the cross-attention keys and values
        are projected once per example; with BART the K hypotheses share
        that one copy (the step folds their queries into one axis), with T5
        it is repeated K times. The self-attention caches have B·K rows."""
        K = int(beam_size)
        static, _ = self.initial_cache(memory, max_length)
        if not self.computation.shares_memory:
            static = keras.tree.map_structure(lambda x: ops.repeat(x, K, axis=0), static)
        batch = ops.shape(memory["memory"])[0] * K
        state = {"self_caches": self._empty_self_attention_caches(batch, max_length)}
        return static, state

    def _decode_step(self, ids, index, cache, between=None, with_attention=False):
        """`(logits float32 [N,V], cache, attention)` of one token through
        the cached decoder (`between`: the computation's between-layers
        hook); with `with_attention`, the last decoder layer's
        cross-attention probabilities over the memory float32 [N,M], else
        None."""
        static, state = cache
        x, self_caches, attention = self.computation.decode_step(
            ops.expand_dims(ids, 1),
            index,
            static["memory"],
            as_bool_mask(static["memory_mask"]),
            state["self_caches"],
            static["cross_caches"],
            between=between,
            with_attention=with_attention,
        )
        return self._logits(x)[:, 0], (static, {"self_caches": self_caches}), attention

    def step(self, ids, index, cache):
        """One token: `(ids int [B], index, cache) → (logits float32 [B,V],
        cache, aux)`; the self-attention caches get position `index`."""
        logits, cache, _ = self._decode_step(ids, index, cache)
        batch = ops.shape(ids)[0]
        # The one source row holds all of the cross-attention.
        aux = {PARAGRAPH_ATTENTION: ops.ones((batch, 1), "float32")}
        return logits, cache, aux

    def variable_groups(self):
        """The trainable variables by group, for per-group learning rates
        (`keras_hsum.training.learning_rate_groups.GroupedAdam`):
        `"pretrained"` (the backbone's), `"pretrained_encoder"` (those only
        its encoder uses; the token embedding is shared with the decoder
        and not among them) and `"new"` (every other: the layers a subclass
        adds)."""
        pretrained = list(self.backbone.trainable_variables)
        encoder = [v for layer in self.computation.encoder_layers()
                   for v in layer.trainable_variables]
        known = {id(v) for v in pretrained}
        new = [v for v in self.trainable_variables if id(v) not in known]
        return {"pretrained": pretrained, "pretrained_encoder": encoder, "new": new}

    def get_config(self):
        config = super().get_config()
        config["backbone"] = keras.layers.serialize(self.backbone)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("backbone"), dict):
            config["backbone"] = keras.layers.deserialize(config["backbone"])
        return cls(**config)
