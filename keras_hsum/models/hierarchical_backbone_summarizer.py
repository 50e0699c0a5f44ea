"""`HierarchicalBackboneSummarizer`: HT's global layers and PHT's parallel
paragraph-level cross attention on top of a pretrained keras-hub BART or T5
backbone, behind gates that start closed."""

import keras
from keras import ops
from keras_hub.layers import SinePositionEncoding
from keras_hub.layers import TransformerEncoder

from keras_hsum.features import DECODER_TOKENS
from keras_hsum.features import GRAPH
from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TOKEN_MASK
from keras_hsum.features import TOKENS
from keras_hsum.layers.global_transformer_layer import GlobalTransformerLayer
from keras_hsum.layers.masking import fold_rows
from keras_hsum.layers.masking import unfold_rows
from keras_hsum.layers.multi_head_pooling import MultiHeadPooling
from keras_hsum.layers.parallel_cross_attention import ParallelCrossAttention
from keras_hsum.layers.residual_gate import ResidualGate
from keras_hsum.models.backbone_summarizer import BackboneSummarizer
from keras_hsum.models.summarizer import paragraph_source_masks
from keras_hsum.models.summarizer import required


@keras.saving.register_keras_serializable(package="keras_hsum")
class HierarchicalBackboneSummarizer(BackboneSummarizer):
    """A pretrained BART or T5 backbone with hierarchical layers on top.

    Encoder. The backbone's pretrained encoder reads every paragraph on its
    own: the B·P paragraphs of the "paragraphs" family [B,P,T] go through it
    as one batch [B·P,T] (positions restart at each paragraph, so T, not
    P·T, must fit BART's learned positions), giving word states C [B,P,T,D].
    Then, optionally:

    - HT (Liu & Lapata 2019, §3.3; `num_global_layers > 0`): that many
      `GlobalTransformerLayer`s (multi-head pooling, inter-paragraph
      attention, optionally graph-informed through `graph_heads` and the
      `graph` feature) update C, each behind a `ResidualGate`:
      C := C + tanh(α_g) · (Global_g(C) − C).
    - PHT (Ma & Zong §3.1-3.2; `parallel_cross_attention=True`): the
      paragraph embeddings Φ = MultiHeadPooling(C) + R (PHT's pooling with
      its feed-forward block, R the sinusoid of the paragraph's rank, Eq. 6),
      then `num_paragraph_layers` Transformer layers over Φ.

    Decoder. The backbone's pretrained decoder reads all P·T word states
    through its own cross-attention (the paragraphs' states concatenated,
    padding masked) and predicts with its LM head. With
    `parallel_cross_attention`, after each pretrained decoder layer l a new
    `ParallelCrossAttention` (PHT's Eqs. 7-10: paragraph-level attention
    over Φ, word-level attention inside each paragraph, fused by the
    paragraph attention) reads that layer's output x_l, behind a gate:
    x_l := x_l + tanh(β_l) · (PCA_l(x_l, C, Φ) − x_l).

    Starting as the pretrained model. Every α_g and β_l starts at 0 and
    tanh(0) = 0, so at initialisation the global layers and the parallel
    cross attention change nothing: the model computes exactly what the
    bare backbone computes when its encoder reads each paragraph and its
    decoder reads their concatenation (the test checks it against
    keras-hub's own backbone, to float tolerance, and with P = 1 the
    backbone's logits on the same tokens). The gates receive a gradient from
    the first step (∂/∂α = f − x), and the new layers train once their gate
    opens. New layers take the backbone's dtype policy.

    Decoding follows the `Summarizer` contract: `initial_cache` projects the
    backbone decoder's cross-attention keys and values over the P·T states
    and, per decoder layer, the parallel cross attention's word and
    paragraph keys and values (`ParallelCrossAttention.project_memory`),
    once; `step` runs one token with the self-attention caches; its aux
    `"paragraph_attention"` [B,P] is the step's paragraph attention summed
    over the decoder layers (as `ParallelHierarchicalTransformer.step`; so
    PHT's attention-alignment score term and `summarize --explain` work),
    or, without `parallel_cross_attention` (HT's global layers alone), the
    last pretrained decoder layer's cross-attention over the P·T word
    states, averaged over its heads and summed over each paragraph's tokens
    (as `HierarchicalTransformer.step`).

    Args:
        backbone: a `keras_hub.models.BartBackbone` or `T5Backbone` (or its
            serialized config), as for `BackboneSummarizer`.
        num_global_layers: HT global layers on the encoder states (0: none).
        parallel_cross_attention: add PHT's pooling and gated parallel
            cross attention in every decoder layer.
        num_paragraph_layers: Transformer layers over Φ (with
            `parallel_cross_attention`; PHT's own encoder has none).
        num_heads: heads of the new layers (default: the backbone's).
        intermediate_dim: FFN width of the new layers (default: the
            backbone's).
        dropout: dropout rate of the new layers.
        graph_heads: global-layer heads that follow the `graph` input.
        layer_norm_epsilon: LayerNorm epsilon of the new layers.
        pad_id, bos_id, eos_id: as for `BackboneSummarizer`.
        **kwargs: `keras.Model` arguments (`name`).

    Inputs (dict):
        tokens: int [B,P,T], paragraphs in rank order; T <= BART's
            `max_sequence_length`.
        token_mask: optional bool [B,P,T]; default tokens != pad.
        paragraph_mask: optional bool [B,P]; default any(token_mask, -1).
        graph: optional float [B,P,P] (HT graph heads).
        decoder_tokens: int [B,S], start token first.

    Returns (call): float32 logits [B,S,V].

    Example (a pretrained backbone: `keras_hub.models.BartBackbone.from_preset(
    "bart_base_en")`; here a small random BART):
        >>> import keras_hub
        >>> backbone = keras_hub.models.BartBackbone(
        ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
        ...     intermediate_dim=16, max_sequence_length=16)
        >>> model = HierarchicalBackboneSummarizer(
        ...     backbone, parallel_cross_attention=True, pad_id=1, bos_id=2, eos_id=2)
        >>> tokens = np.random.default_rng(0).integers(4, 50, (2, 3, 5))  # [B,P,T]
        >>> decoder_tokens = np.full((2, 4), 2)  # [B,S]
        >>> tuple(model({"tokens": tokens, "decoder_tokens": decoder_tokens}).shape)
        (2, 4, 50)
        >>> # The gates start closed: with P = 1 it computes what the backbone does.
        >>> flat = BackboneSummarizer(backbone, pad_id=1, bos_id=2, eos_id=2)
        >>> np.allclose(
        ...     model({"tokens": tokens[:, :1], "decoder_tokens": decoder_tokens}),
        ...     flat({"tokens": tokens[:, 0], "decoder_tokens": decoder_tokens}),
        ...     atol=1e-5)
        True
        >>> from keras_hsum.decoding import beam_search
        >>> out = beam_search(model, {"tokens": tokens}, beam_size=3, max_length=5)
        >>> tuple(out["aux"]["paragraph_attention"].shape)  # [B,K,L,P]
        (2, 3, 5, 3)

    References:
        Liu & Lapata (2019), Hierarchical Transformers for Multi-Document
        Summarization, §3.3. Ma & Zong, Parallel Hierarchical Transformer
        with Attention Alignment for Abstractive Multi-Document
        Summarization, §3. Alayrac et al. (2022), Flamingo (tanh-gated new
        layers in a pretrained network).
    """

    def __init__(
        self,
        backbone,
        num_global_layers=0,
        parallel_cross_attention=True,
        num_paragraph_layers=0,
        num_heads=None,
        intermediate_dim=None,
        dropout=0.1,
        graph_heads=None,
        layer_norm_epsilon=1e-5,
        **kwargs,
    ):
        super().__init__(backbone, **kwargs)
        for name, value in (("num_global_layers", num_global_layers),
                            ("num_paragraph_layers", num_paragraph_layers)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(
                    f"{self.name}: `{name}` must be an int >= 0, received {value!r}."
                )
        if not num_global_layers and not parallel_cross_attention:
            raise ValueError(
                f"{self.name}: nothing hierarchical to add: set `num_global_layers` "
                "> 0 (HT) and/or `parallel_cross_attention=True` (PHT); for the "
                "bare backbone use BackboneSummarizer."
            )
        if num_paragraph_layers and not parallel_cross_attention:
            raise ValueError(
                f"{self.name}: `num_paragraph_layers` encodes PHT's paragraph "
                "embeddings and needs `parallel_cross_attention=True`; received "
                f"num_paragraph_layers={num_paragraph_layers}."
            )
        self.num_global_layers = num_global_layers
        self.parallel_cross_attention = bool(parallel_cross_attention)
        self.num_paragraph_layers = num_paragraph_layers
        self.new_num_heads = int(num_heads or backbone.num_heads)
        self.intermediate_dim = int(intermediate_dim or backbone.intermediate_dim)
        self.dropout = dropout
        self.graph_heads = None if graph_heads is None else list(graph_heads)
        self.layer_norm_epsilon = layer_norm_epsilon
        if self.hidden_dim % self.new_num_heads:
            raise ValueError(
                f"{self.name}: the backbone's width {self.hidden_dim} must be "
                f"divisible by `num_heads`, received num_heads={self.new_num_heads}."
            )
        policy = self.backbone.dtype_policy
        common = dict(dropout=dropout, layer_norm_epsilon=layer_norm_epsilon, dtype=policy)
        self.global_layers = [
            GlobalTransformerLayer(
                num_heads=self.new_num_heads, intermediate_dim=self.intermediate_dim,
                graph_heads=self.graph_heads, name=f"global_layer_{i}", **common,
            )
            for i in range(num_global_layers)
        ]
        self.global_gates = [
            ResidualGate(dtype=policy, name=f"global_gate_{i}")
            for i in range(num_global_layers)
        ]
        self.pooling = None
        self.paragraph_encoder_layers = []
        self.paragraph_cross_attentions = []
        self.paragraph_gates = []
        if self.parallel_cross_attention:
            self.pooling = MultiHeadPooling(
                num_heads=self.new_num_heads, hidden_dim=self.hidden_dim, feedforward=True,
                intermediate_dim=self.intermediate_dim, name="pooling", **common,
            )
            self.rank_encoding = SinePositionEncoding(dtype=policy, name="rank_encoding")
            self.paragraph_encoder_layers = [
                TransformerEncoder(
                    intermediate_dim=self.intermediate_dim, num_heads=self.new_num_heads,
                    name=f"paragraph_encoder_layer_{i}", **common,
                )
                for i in range(num_paragraph_layers)
            ]
            self.paragraph_cross_attentions = [
                ParallelCrossAttention(
                    hidden_dim=self.hidden_dim, num_heads=self.new_num_heads,
                    name=f"parallel_cross_attention_{i}", **common,
                )
                for i in range(self.num_decoder_layers)
            ]
            self.paragraph_gates = [
                ResidualGate(dtype=policy, name=f"paragraph_gate_{i}")
                for i in range(self.num_decoder_layers)
            ]
        self._build_new_layers()

    def _build_new_layers(self):
        """Creates every new weight now (shapes follow from D), so the model
        decodes, saves and warm-starts without a first call."""
        D = self.hidden_dim
        words, tokens = (None, None, None, D), (None, None, None)
        for layer, gate in zip(self.global_layers, self.global_gates):
            layer.build(words, tokens, (None, None))
            gate.build(words)
        if self.parallel_cross_attention:
            self.pooling.build(words, tokens)
            for layer in self.paragraph_encoder_layers:
                layer.build((None, None, D))
            for layer, gate in zip(self.paragraph_cross_attentions, self.paragraph_gates):
                layer.build((None, None, D), words, (None, None, D), tokens, (None, None))
                gate.build((None, None, D))
        self.built = True

    # ---------------------------------------------------------------- encoder
    def encode(self, inputs, training=False):
        """Returns a dict: `memory` [B,P·T,D] and `memory_mask` [B,P·T] (what
        the pretrained decoder reads), `word_memory` C [B,P,T,D], `token_mask`
        [B,P,T], `paragraph_mask` [B,P]; with `parallel_cross_attention`,
        `paragraph_memory` Φ [B,P,D]."""
        tokens, token_mask, paragraph_mask = paragraph_source_masks(self, inputs)
        self._check_length(f"{TOKENS} (per paragraph, T)", tokens.shape[2])
        batch, paragraphs, length = (ops.shape(tokens)[i] for i in range(3))
        x = self.computation.encode(
            ops.reshape(tokens, (-1, length)),
            ops.reshape(token_mask, (-1, length)),
            training=training,
        )
        words = ops.reshape(x, (batch, paragraphs, length, self.hidden_dim))
        graph = inputs.get(GRAPH) if self.graph_heads else None
        for layer, gate in zip(self.global_layers, self.global_gates):
            updated = layer(words, token_mask=token_mask, paragraph_mask=paragraph_mask,
                            graph=graph, training=training)
            words = gate(words, updated)
        memory = {
            "memory": ops.reshape(words, (batch, -1, self.hidden_dim)),
            "memory_mask": ops.reshape(token_mask, (batch, -1)),
            "word_memory": words,
            TOKEN_MASK: token_mask,
            PARAGRAPH_MASK: paragraph_mask,
        }
        if self.parallel_cross_attention:
            phi = self.pooling(words, token_mask=token_mask, training=training)
            phi = phi + self.rank_encoding(phi)
            for layer in self.paragraph_encoder_layers:
                phi = layer(phi, padding_mask=paragraph_mask, training=training)
            memory["paragraph_memory"] = phi
        return memory

    # ---------------------------------------------------------------- decoder
    def _between(self, memory, attentions, caches=None, training=False):
        """The `(i, x) -> x` hook run after pretrained decoder layer i: the
        gated parallel cross attention; appends its A_para [B,S,P]."""
        if not self.parallel_cross_attention:
            return None

        def between(i, x):
            # K hypotheses per memory example (rows b·K + k, `beam_cache`):
            # their queries are folded into one axis [B,K·S,D], so the
            # memory is read once for all of them.
            folded, rows = fold_rows(x, memory["word_memory"])
            update, attention = self.paragraph_cross_attentions[i](
                folded,
                memory["word_memory"],
                memory["paragraph_memory"],
                token_mask=memory[TOKEN_MASK],
                paragraph_mask=memory[PARAGRAPH_MASK],
                training=training,
                memory_cache=None if caches is None else caches[i],
            )
            attentions.append(ops.cast(unfold_rows(attention, rows), "float32"))
            return self.paragraph_gates[i](x, unfold_rows(update, rows))

        return between

    def decode_with_attention(self, decoder_tokens, memory, training=False):
        """Teacher forcing: `(logits float32 [B,S,V], attention float32
        [B,L,S,P] or None)`, the attention being every decoder layer's
        paragraph attention A_para (None without `parallel_cross_attention`)."""
        attentions = []
        hidden = self._decode_hidden(
            decoder_tokens, memory, training=training,
            between=self._between(memory, attentions, training=training),
        )
        attention = ops.stack(attentions, axis=1) if attentions else None
        return self._logits(hidden), attention

    def decode(self, decoder_tokens, memory, inputs=None, training=False):
        logits, _ = self.decode_with_attention(decoder_tokens, memory, training=training)
        return logits

    def paragraph_attention(self, inputs, training=False):
        """float32 [B,L,S,P]: teacher-forced per-layer paragraph attention
        (as `ParallelHierarchicalTransformer.paragraph_attention`; the
        attention predictor's labels). Needs `parallel_cross_attention`."""
        if not self.parallel_cross_attention:
            raise ValueError(
                f"{self.name}: no paragraph attention without "
                "`parallel_cross_attention=True`."
            )
        decoder_tokens = required(self, inputs, DECODER_TOKENS, "int [B,S]")
        memory = self.encode(inputs, training=training)
        return self.decode_with_attention(decoder_tokens, memory, training=training)[1]

    # --------------------------------------------------------------- decoding
    def initial_cache(self, memory, max_length):
        """As `BackboneSummarizer.initial_cache`, plus `"paragraph_caches"`:
        per decoder layer, the parallel cross attention's projected keys and
        values (`ParallelCrossAttention.project_memory`)."""
        static, state = super().initial_cache(memory, max_length)
        if self.parallel_cross_attention:
            static["paragraph_caches"] = [
                layer.project_memory(memory["word_memory"], memory["paragraph_memory"])
                for layer in self.paragraph_cross_attentions
            ]
        return static, state

    def step(self, ids, index, cache):
        """One token: `(ids int [N], index, cache) → (logits float32 [N,V],
        cache, aux)`; aux `"paragraph_attention"` float32 [N,P]: the parallel
        cross attention's A_para summed over the decoder layers, or without
        it the last decoder layer's cross-attention summed over each
        paragraph's T tokens (each row sums to 1 over the real paragraphs).
        N = B, or B·K with `beam_cache` (row b·K + k reads example b of the
        memory)."""
        static = cache[0]
        attentions = []
        logits, cache, word_attention = self._decode_step(
            ids, index, cache,
            between=self._between(static, attentions, caches=static.get("paragraph_caches")),
            with_attention=not self.parallel_cross_attention,
        )
        if attentions:
            attention = attentions[0][:, 0]
            for other in attentions[1:]:
                attention = attention + other[:, 0]
        else:
            paragraphs = ops.shape(static[PARAGRAPH_MASK])[1]
            attention = ops.sum(
                ops.reshape(word_attention, (ops.shape(ids)[0], paragraphs, -1)), axis=-1
            )
        return logits, cache, {PARAGRAPH_ATTENTION: attention}

    def get_config(self):
        config = super().get_config()
        config.update(
            num_global_layers=self.num_global_layers,
            parallel_cross_attention=self.parallel_cross_attention,
            num_paragraph_layers=self.num_paragraph_layers,
            num_heads=self.new_num_heads,
            intermediate_dim=self.intermediate_dim,
            dropout=self.dropout,
            graph_heads=self.graph_heads,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config
