"""`BackboneSummarizer`: a pretrained keras-hub encoder-decoder backbone
(BART) driven through keras_hsum's `Summarizer` decoding contract."""

import keras
from keras import ops

from keras_hsum.features import TOKEN_MASK
from keras_hsum.features import TOKENS
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.models.summarizer import Summarizer
from keras_hsum.models.summarizer import decoder_padding_mask
from keras_hsum.models.summarizer import optional_mask
from keras_hsum.models.summarizer import required

# The keras-hub backbone classes this model knows how to run, by class name
# (keras_hub.models.<name>): their encoder, decoder and caches are read below.
SUPPORTED_BACKBONES = ("BartBackbone",)


def _backbone_class_name(backbone):
    for cls in type(backbone).__mro__:
        if cls.__name__ in SUPPORTED_BACKBONES:
            return cls.__name__
    return None


@keras.saving.register_keras_serializable(package="keras_hsum")
class BackboneSummarizer(Summarizer):
    """A pretrained keras-hub sequence-to-sequence backbone as a `Summarizer`.

    The flat input (the `"flat"` family: the documents concatenated in rank
    order and truncated to N tokens) goes through the backbone's pretrained
    encoder; its pretrained decoder reads the encoder states through its own
    cross-attention and predicts the next token with the backbone's language
    model head (BART: the token embedding, tied). Nothing is added to the
    pretrained computation: `call` gives exactly the bare backbone's
    `decoder_sequence_output` projected by its tied embedding, so
    fine-tuning starts from the pretrained model.

    Decoding follows the `Summarizer` contract (`keras_hsum.models.
    summarizer`), so `keras_hsum.decoding.beam_search` / `greedy_search` and
    their score terms drive it unchanged: `initial_cache` projects every
    decoder layer's cross-attention keys and values once ([B,L,2,N,H,Dh],
    constant), `step` runs one token through the decoder with its cached
    self-attention keys and values ([B,L,2,S_max,H,Dh], the per-hypothesis
    state) written at `index`, as keras-hub's `BartSeq2SeqLM` does when it
    generates.

    Supported backbones: `keras_hub.models.BartBackbone` (and subclasses).

    Args:
        backbone: a built `keras_hub.models.BartBackbone` (pretrained, from
            `keras_hub.models.BartBackbone.from_preset`, or new), or its
            serialized config (as `get_config` writes it).
        pad_id, bos_id, eos_id: the special ids of the backbone's
            vocabulary. The defaults are keras_hsum's `Vocabulary` ids
            (0, 2, 3); a hub BART preset with its own tokenizer uses
            pad 1, EOS 2 and starts decoding from `</s>` = 2 (bos_id=2).
        **kwargs: `keras.Model` arguments (`name`, `dtype`).

    Inputs (dict):
        tokens: int [B,N] (or [B,P,T], read as one flat sequence of P·T
            tokens), N <= the backbone's `max_sequence_length`.
        token_mask: optional bool [B,N] (or [B,P,T]); default tokens != pad.
        decoder_tokens: int [B,S] (teacher forcing; BOS first), S <= the
            backbone's `max_sequence_length`.

    Returns (call):
        float32 logits [B,S,V].

    Decoding aux: `{"paragraph_attention": zeros [B,1]}` (no paragraphs).

    Example:
        >>> backbone = keras_hub.models.BartBackbone.from_preset("bart_base_en")
        >>> model = BackboneSummarizer(backbone, pad_id=1, bos_id=2, eos_id=2)
        >>> # or: BackboneSummarizer.from_preset("bart_base_en", pad_id=1, ...)
        >>> out = keras_hsum.decoding.beam_search(model, batch, beam_size=4)

    References:
        Lewis et al. (2020), BART: Denoising Sequence-to-Sequence
        Pre-training for Natural Language Generation, Translation, and
        Comprehension.
    """

    def __init__(self, backbone, **kwargs):
        if isinstance(backbone, dict):
            backbone = keras.layers.deserialize(backbone)
        kind = _backbone_class_name(backbone)
        if kind is None:
            raise ValueError(
                "BackboneSummarizer: `backbone` must be one of keras_hub.models."
                f"{', '.join(SUPPORTED_BACKBONES)} (built, e.g. from `from_preset`); "
                f"received {type(backbone).__name__}. Load a supported preset, or "
                "use FlatTransformer to train a model from scratch."
            )
        super().__init__(**kwargs)
        self.backbone = backbone
        self.backbone_class = kind
        self.vocabulary_size = int(backbone.vocabulary_size)
        self.hidden_dim = int(backbone.hidden_dim)
        self.num_heads = int(backbone.num_heads)
        self.num_decoder_layers = len(backbone.decoder_transformer_layers)
        self.max_sequence_length = int(backbone.max_sequence_length)
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
        """Dh = D / H."""
        return self.hidden_dim // self.num_heads

    def _check_length(self, name, length):
        if length is not None and int(length) > self.max_sequence_length:
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
        if len(tokens.shape) == 3:
            tokens = ops.reshape(tokens, (ops.shape(tokens)[0], -1))
            mask = ops.reshape(mask, (ops.shape(mask)[0], -1))
        elif len(tokens.shape) != 2:
            raise ValueError(
                f"{self.name}: `tokens` must be int [B,N] or [B,P,T], received "
                f"shape {tuple(tokens.shape)}."
            )
        self._check_length(TOKENS, tokens.shape[1])
        backbone = self.backbone
        x = backbone.token_embedding(tokens)
        positions = backbone.encoder_position_embedding(x)
        x = backbone.encoder_embeddings_add((x, positions))
        x = backbone.encoder_embeddings_layer_norm(x)
        x = backbone.encoder_embeddings_dropout(x, training=training)
        for layer in backbone.encoder_transformer_layers:
            x = layer(x, padding_mask=mask, training=training)
        return {"memory": x, "memory_mask": mask}

    def _embed_decoder(self, tokens, start_index=0, training=False):
        """int [B,S] at positions start_index.. → float [B,S,D]: token +
        learned position embedding, LayerNorm, dropout (BART's decoder input)."""
        backbone = self.backbone
        x = backbone.token_embedding(tokens)
        positions = backbone.decoder_position_embedding(x, start_index=start_index)
        x = backbone.decoder_embeddings_add((x, positions))
        x = backbone.decoder_embeddings_layer_norm(x)
        return backbone.decoder_embeddings_dropout(x, training=training)

    def _logits(self, hidden):
        """float [B,S,D] → float32 [B,S,V] (the tied embedding, reversed)."""
        logits = self.backbone.token_embedding(hidden, reverse=True)
        return ops.cast(logits, "float32")

    def decode(self, decoder_tokens, memory, inputs=None, training=False):
        """Teacher-forced decoder: int [B,S] → float32 logits [B,S,V]."""
        self._check_length("decoder_tokens", decoder_tokens.shape[1])
        x = self._embed_decoder(decoder_tokens, training=training)
        padding = decoder_padding_mask(decoder_tokens, self.pad_id)
        for layer in self.backbone.decoder_transformer_layers:
            x = layer(
                decoder_sequence=x,
                encoder_sequence=memory["memory"],
                decoder_padding_mask=padding,
                encoder_padding_mask=memory["memory_mask"],
                training=training,
            )
        return self._logits(x)

    def _cross_attention_caches(self, memory):
        """float [B,L,2,N,H,Dh]: every decoder layer's cross-attention keys
        and values of the encoder states `memory` [B,N,D], projected once."""
        caches = []
        for layer in self.backbone.decoder_transformer_layers:
            attention = layer._cross_attention_layer
            caches.append(
                ops.stack(
                    [attention._key_dense(memory), attention._value_dense(memory)],
                    axis=1,
                )
            )
        return ops.stack(caches, axis=1)

    def _empty_self_attention_caches(self, batch, max_length):
        """float zeros [B,L,2,max_length,H,Dh] in the compute dtype."""
        return ops.zeros(
            (batch, self.num_decoder_layers, 2, max_length, self.num_heads, self.head_dim),
            dtype=self.backbone.compute_dtype,
        )

    def initial_cache(self, memory, max_length):
        """`(static, state)`: the memory plus every layer's cross-attention
        keys/values `"cross_caches"` [B,L,2,N,H,Dh]; zeroed self-attention
        caches `"self_caches"` [B,L,2,max_length,H,Dh]."""
        self._check_length("max_length", max_length if isinstance(max_length, int) else None)
        static = dict(memory)
        static["cross_caches"] = self._cross_attention_caches(memory["memory"])
        batch = ops.shape(memory["memory"])[0]
        state = {"self_caches": self._empty_self_attention_caches(batch, max_length)}
        return static, state

    def beam_cache(self, memory, max_length, beam_size):
        """As `Summarizer.beam_cache` (row b·K + k is hypothesis k of example
        b), projecting the cross-attention keys and values once per example
        before repeating them K times."""
        K = int(beam_size)
        static, _ = self.initial_cache(memory, max_length)
        static = keras.tree.map_structure(lambda x: ops.repeat(x, K, axis=0), static)
        batch = ops.shape(static["memory"])[0]
        state = {"self_caches": self._empty_self_attention_caches(batch, max_length)}
        return static, state

    def step(self, ids, index, cache):
        """One token: `(ids int [B], index, cache) → (logits float32 [B,V],
        cache, aux)`; the self-attention caches get position `index`."""
        static, state = cache
        x = self._embed_decoder(ops.expand_dims(ids, 1), start_index=index)
        self_caches = state["self_caches"]
        updated = []
        for i, layer in enumerate(self.backbone.decoder_transformer_layers):
            x, self_cache, _ = layer(
                decoder_sequence=x,
                encoder_sequence=static["memory"],
                encoder_padding_mask=as_bool_mask(static["memory_mask"]),
                self_attention_cache=self_caches[:, i],
                self_attention_cache_update_index=index,
                cross_attention_cache=static["cross_caches"][:, i],
                cross_attention_cache_update_index=None,
            )
            updated.append(self_cache)
        logits = self._logits(x)[:, 0]
        batch = ops.shape(ids)[0]
        aux = {"paragraph_attention": ops.zeros((batch, 1), "float32")}
        return logits, (static, {"self_caches": ops.stack(updated, axis=1)}), aux

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
