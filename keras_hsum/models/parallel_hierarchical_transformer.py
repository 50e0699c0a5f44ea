"""PHT: Ma & Zong's Parallel Hierarchical Transformer (encoder §3.1, decoder §3.2)."""

import math

import keras
from keras import ops
from keras_hub.layers import ReversibleEmbedding
from keras_hub.layers import SinePositionEncoding

from keras_hsum.features import DECODER_TOKENS
from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TOKEN_MASK
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.multi_head_pooling import MultiHeadPooling
from keras_hsum.layers.packed_dropout import dropout_layer
from keras_hsum.layers.pht_decoder_layer import PHTDecoderLayer
from keras_hsum.layers.token_shift import TokenShift
from keras_hsum.layers.transformer_encoder import TransformerEncoder
from keras_hsum.models.copying import copy_log_probabilities
from keras_hsum.models.copying import make_copy_layers
from keras_hsum.models.summarizer import Summarizer
from keras_hsum.models.summarizer import decoder_padding_mask
from keras_hsum.models.summarizer import paragraph_source_masks
from keras_hsum.models.summarizer import required


@keras.saving.register_keras_serializable(package="keras_hsum")
class ParallelHierarchicalTransformer(Summarizer):
    """The Parallel Hierarchical Transformer (PHT) of Ma & Zong.

    Encoder (§3.1), shared by all paragraphs and run on them in parallel:

    - Eq. 1, context-aware word embeddings C_p = TransE(W_p + E): the tokens
      of every paragraph are embedded (W_p = Emb(tokens)·√D, the embedding
      shared with the decoder), the fixed sinusoid E of the token position
      inside the paragraph is added, and `num_encoder_layers` keras-hub
      `TransformerEncoder` layers read the B·P paragraphs as one batch
      [B·P,T,D], each paragraph attending only to its own tokens;
    - Eqs. 2-5, paragraph embeddings Φ [B,P,D] by `MultiHeadPooling`
      (`feedforward=True`: per-head attention pooling, W_3, then
      LayerNorm(φ + FFN(φ)));
    - Eq. 6, ranking encoding Φ := Φ + R, R the sinusoid of the paragraph's
      rank (its position p in the ranked input; the "paragraphs" family
      sorts paragraphs best first).

    Optionally (`num_paragraph_layers > 0`, not in the paper, whose encoder
    is only TransE + pooling) that many `TransformerEncoder` layers then run
    over the P paragraph embeddings (masked by `paragraph_mask`) so that Φ
    sees the other paragraphs; the ranking encoding is added before them.

    Decoder (§3.2): y = Emb(summary)·√D + sinusoid(position) →
    `num_decoder_layers` × `PHTDecoderLayer` (cached causal self-attention;
    `ParallelCrossAttention`: paragraph attention over Φ (Eq. 7) and word
    attention over each C_p (Eq. 8) fused by A_para (Eqs. 9-10); FFN) →
    logits = y·Embᵀ. Source, target and output embeddings are tied (§3.2:
    "both the word embedding and vocabulary in the decoder part are shared
    with the encoder").

    Copying (optional, `pointer_generator=True`; not in the paper): a
    `CopyAttention` head over the word memory C, hierarchical like the
    decoder's own fusion (Eq. 9): the last decoder layer's A_para times a
    softmax over each paragraph's tokens; a `PointerGenerator` switch mixes
    the copy distribution into the vocabulary distribution
    (`keras_hsum.models.copying`). `call`/`decode` and `step` then return
    log-probabilities instead of logits. With little training data (a few
    thousand examples) copying is what lets the decoder reproduce the
    source's names and terms.

    Decoding: `initial_cache` keeps the encoder outputs, preallocates the
    self-attention key/value caches [B,L,2,S_max,H,Dh] and projects the
    word memory C and Φ into every decoder layer's cross-attention keys and
    values once per request (`PHTDecoderLayer.project_memory`), so a step
    costs O(P·T·D) per layer for the attention itself instead of the
    O(P·T·D²) projections; `step` decodes one position and equals teacher
    forcing (tested). For beam search, `beam_cache` keeps one copy of the
    memory and its keys/values per example for its K hypotheses (the
    decoder layers and the copy head fold the K rows into their query
    axis), so a step reads the memory once, not K times.

    Args:
        vocabulary_size: V.
        hidden_dim: D.
        num_heads: H (encoder, pooling, decoder attentions).
        intermediate_dim: FFN width (encoder, pooling FFN, decoder).
        num_encoder_layers: word-level TransE layers (paper: 3).
        num_decoder_layers: PHT decoder layers (paper: 3).
        num_paragraph_layers: optional paragraph-level encoder layers over Φ
            (default 0, as in the paper).
        dropout: dropout rate everywhere (paper: 0.3).
        attention_dropout: dropout rate on the attention probabilities, or
            None (the default, the papers' setting) for `dropout`; 0 lets
            keras-hub's attention layers run through `keras.ops.dot_product_attention`
            (fused cuDNN attention on a GPU).
        tie_embeddings: tie the output projection to the embedding.
        layer_norm_epsilon: LayerNorm epsilon.
        pointer_generator: add the copy mechanism (default False, as in the
            paper).
        token_shift: add to each token embedding W_p a learned projection of
            its predecessor's in the same paragraph row, before E
            (`keras_hsum.layers.TokenShift`; default False, not in the
            paper). It lets the copy head follow a span: see there.
        pad_id, bos_id, eos_id: special ids.

    Inputs (dict, the "paragraphs" family of `keras_hsum.data`):
        tokens: int [B,P,T], paragraphs in rank order.
        token_mask: optional bool [B,P,T]; default tokens != pad.
        paragraph_mask: optional bool [B,P]; default any(token_mask, -1).
        decoder_tokens: int [B,S] (teacher forcing; BOS first).
        target_mask: optional bool [B,S] (only `attention_labels` reads it).

    Returns (call):
        float32 logits [B,S,V] (log-probabilities with `pointer_generator`).

    Other outputs:
        `paragraph_attention(inputs)`: float32 [B,L,S,P], every decoder
        layer's teacher-forced head-averaged A_para (each row sums to 1 over
        the real paragraphs).
        `step` aux `"paragraph_attention"`: float32 [B,P], the current step's
        A_para summed over the L decoder layers, NOT normalised (it sums to
        L over the real paragraphs; 0 on padded ones). Attention alignment
        sums it over steps and then normalises over paragraphs (Eq. 15).

    References:
        Ma & Zong, Parallel Hierarchical Transformer with Attention Alignment
        for Abstractive Multi-Document Summarization, §3 (Eqs. 1-10).
        Vaswani et al. (2017), Attention Is All You Need.
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim=256,
        num_heads=4,
        intermediate_dim=1024,
        num_encoder_layers=3,
        num_decoder_layers=3,
        num_paragraph_layers=0,
        dropout=0.3,
        tie_embeddings=True,
        layer_norm_epsilon=1e-5,
        pointer_generator=False,
        token_shift=False,
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, hidden_dim=hidden_dim, num_heads=num_heads,
            intermediate_dim=intermediate_dim, num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers, num_paragraph_layers=num_paragraph_layers,
            dropout=dropout, attention_dropout=attention_dropout,
            optional=("attention_dropout",),
        )
        if hidden_dim % num_heads:
            raise ValueError(
                f"{self.name}: `hidden_dim` must be divisible by `num_heads`, "
                f"received hidden_dim={hidden_dim}, num_heads={num_heads}. "
                "Pick a width that is a multiple of the head count."
            )
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.num_encoder_layers = num_encoder_layers
        self.num_decoder_layers = num_decoder_layers
        self.num_paragraph_layers = num_paragraph_layers
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.tie_embeddings = tie_embeddings
        self.layer_norm_epsilon = layer_norm_epsilon
        self.pointer_generator = bool(pointer_generator)
        self.token_shift = bool(token_shift)
        self.head_dim = hidden_dim // num_heads

        policy = self.dtype_policy
        self.token_embedding = ReversibleEmbedding(
            vocabulary_size,
            hidden_dim,
            tie_weights=tie_embeddings,
            embeddings_initializer=keras.initializers.RandomNormal(
                stddev=hidden_dim**-0.5
            ),
            dtype=policy,
            name="token_embedding",
        )
        self.source_token_shift = (
            TokenShift(dtype=policy, name="source_token_shift") if self.token_shift else None
        )
        # E (Eq. 1), R (Eq. 6) and the decoder's positions: fixed sinusoids.
        self.token_position_encoding = SinePositionEncoding(
            dtype=policy, name="token_position_encoding"
        )
        self.rank_encoding = SinePositionEncoding(dtype=policy, name="rank_encoding")
        self.target_position_encoding = SinePositionEncoding(
            dtype=policy, name="target_position_encoding"
        )
        self.source_dropout = dropout_layer(
            dropout, dtype=policy, name="source_dropout"
        )
        self.target_dropout = dropout_layer(
            dropout, dtype=policy, name="target_dropout"
        )
        self.word_encoder_layers = [
            TransformerEncoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                attention_dropout=attention_dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=policy,
                name=f"word_encoder_layer_{i}",
            )
            for i in range(num_encoder_layers)
        ]
        self.pooling = MultiHeadPooling(
            num_heads=num_heads,
            hidden_dim=hidden_dim,
            feedforward=True,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            dtype=policy,
            name="pooling",
        )
        self.paragraph_encoder_layers = [
            TransformerEncoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                attention_dropout=attention_dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=policy,
                name=f"paragraph_encoder_layer_{i}",
            )
            for i in range(num_paragraph_layers)
        ]
        self.decoder_layers = [
            PHTDecoderLayer(
                hidden_dim=hidden_dim,
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                attention_dropout=attention_dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=policy,
                name=f"decoder_layer_{i}",
            )
            for i in range(num_decoder_layers)
        ]
        if self.pointer_generator:
            self.copy_attention, self.copy_switch = make_copy_layers(
                self, vocabulary_size
            )

    # ------------------------------------------------------------------ encoder
    def encode(self, inputs, training=False):
        """Encodes ranked paragraphs.

        Returns a dict: `word_memory` C [B,P,T,D], `paragraph_memory`
        Φ [B,P,D] (ranking encoding added, Eq. 6; what `AttentionPredictor`
        reads), `token_mask` bool [B,P,T] and `paragraph_mask` bool [B,P];
        with `pointer_generator`, also `source_ids` int [B,P,T].
        """
        tokens, token_mask, paragraph_mask = paragraph_source_masks(self, inputs)
        batch, paragraphs, length = (
            ops.shape(tokens)[0],
            ops.shape(tokens)[1],
            ops.shape(tokens)[2],
        )
        flat_tokens = ops.reshape(tokens, (-1, length))
        flat_mask = ops.reshape(token_mask, (-1, length))
        x = self.token_embedding(flat_tokens)
        x = x * ops.cast(math.sqrt(self.hidden_dim), x.dtype)
        if self.source_token_shift is not None:
            x = self.source_token_shift(x, token_mask=flat_mask)
        x = x + self.token_position_encoding(x)
        x = self.source_dropout(x, training=training)
        for layer in self.word_encoder_layers:
            x = layer(x, padding_mask=flat_mask, training=training)
        words = ops.reshape(x, (batch, paragraphs, length, self.hidden_dim))
        phi = self.pooling(words, token_mask=token_mask, training=training)
        phi = phi + self.rank_encoding(phi)
        for layer in self.paragraph_encoder_layers:
            phi = layer(phi, padding_mask=paragraph_mask, training=training)
        memory = {
            "word_memory": words,
            "paragraph_memory": phi,
            TOKEN_MASK: token_mask,
            PARAGRAPH_MASK: paragraph_mask,
        }
        if self.pointer_generator:
            memory["source_ids"] = ops.cast(tokens, "int32")
        return memory

    # ------------------------------------------------------------------ decoder
    def _embed_target(self, decoder_tokens, start_index=0, training=False):
        y = self.token_embedding(decoder_tokens)
        y = y * ops.cast(math.sqrt(self.hidden_dim), y.dtype)
        y = y + self.target_position_encoding(y, start_index=start_index)
        return self.target_dropout(y, training=training)

    def _logits(self, hidden):
        return ops.cast(self.token_embedding(hidden, reverse=True), "float32")

    def _outputs(self, hidden, decoder_inputs, memory, paragraph_attention):
        """Logits [B,S,V], or copy-mixed log-probabilities.

        `paragraph_attention` [B,S,P] is the last decoder layer's A_para.
        """
        logits = self._logits(hidden)
        if not self.pointer_generator:
            return logits
        # With K hypotheses per memory example (rows b·K + k; `beam_cache`)
        # the copy attention reads the memory once for the K rows.
        log_probabilities, _, _ = copy_log_probabilities(
            self,
            logits,
            hidden,
            decoder_inputs,
            memory["word_memory"],
            memory["source_ids"],
            memory[TOKEN_MASK],
            paragraph_weights=paragraph_attention,
            keys=memory.get("copy_keys"),
        )
        return log_probabilities

    def decode_with_attention(self, decoder_tokens, memory, training=False):
        """Teacher-forced decoder that also returns the paragraph attention.

        Args:
            decoder_tokens: int [B,S], BOS first.
            memory: the dict from `encode`.
            training: bool.

        Returns:
            `(logits float32 [B,S,V], attention float32 [B,L,S,P])`, the
            attention being every decoder layer's head-averaged A_para
            (log-probabilities instead of logits with `pointer_generator`).
        """
        y = self._embed_target(decoder_tokens, training=training)
        decoder_inputs = y
        target_mask = decoder_padding_mask(decoder_tokens, self.pad_id)
        attentions = []
        for layer in self.decoder_layers:
            y, attention = layer(
                y,
                memory["word_memory"],
                memory["paragraph_memory"],
                token_mask=memory[TOKEN_MASK],
                paragraph_mask=memory[PARAGRAPH_MASK],
                decoder_padding_mask=target_mask,
                training=training,
            )
            attentions.append(ops.cast(attention, "float32"))
        outputs = self._outputs(y, decoder_inputs, memory, attentions[-1])
        return outputs, ops.stack(attentions, axis=1)

    def decode(self, decoder_tokens, memory, inputs=None, training=False):
        logits, _ = self.decode_with_attention(
            decoder_tokens, memory, training=training
        )
        return logits

    def paragraph_attention(self, inputs, training=False):
        """float32 [B,L,S,P]: teacher-forced per-layer paragraph attention.

        `inputs` as for `call` (with `decoder_tokens` [B,S]). Row [b,l,s]
        is layer l's head-averaged A_para of target position s (sums to 1
        over the real paragraphs). Used for the attention-predictor labels
        (`keras_hsum.models.attention_labels`).
        """
        decoder_tokens = required(self, inputs, DECODER_TOKENS, "int [B,S]")
        memory = self.encode(inputs, training=training)
        _, attention = self.decode_with_attention(
            decoder_tokens, memory, training=training
        )
        return attention

    # ----------------------------------------------------------------- decoding
    def initial_cache(self, memory, max_length):
        """`(memory, {"self_caches": zeros [B,L,2,max_length,H,Dh]})`.

        The memory also keeps `"cross_caches"`, a list with one dict per
        decoder layer of its cross-attention keys and values
        (`PHTDecoderLayer.project_memory`: word keys/values [B,H,P,T,Dh],
        paragraph keys/values [B,H,P,Dh]), projected once; with
        `pointer_generator`, also the copy keys (`copy_keys` [B,P,T,D]).
        """
        return self._cache(memory, max_length, 1)

    def beam_cache(self, memory, max_length, beam_size):
        """`initial_cache` for K = `beam_size` hypotheses per example.

        The memory, its projections and masks stay [B,...] (projected once
        per example, not once per beam); the self-attention caches are
        [B·K,L,2,max_length,H,Dh], and `step` reads row b of the memory for
        its rows b·K + k. Sharing the memory among the beams is faster
        than repeating it K times (the default `Summarizer.beam_cache`): a
        step reads the keys and values once, not K times. Measured at paper
        width (D=256, 4 heads, 3+3 layers), K=5, jit-compiled on 2 CPUs: a
        step at 3,000 memory tokens 23.8 ms shared against 44.7 ms
        repeated, at 6,000 tokens 34.8 against 76.3 ms
        (`benchmarks/decode.py --memory-sizes`, benchmarks/README.md).
        """
        return self._cache(memory, max_length, beam_size)

    def _cache(self, memory, max_length, beam_size):
        batch = ops.shape(memory["paragraph_memory"])[0] * int(beam_size)
        memory = dict(memory)
        memory["cross_caches"] = [
            layer.project_memory(memory["word_memory"], memory["paragraph_memory"])
            for layer in self.decoder_layers
        ]
        if self.pointer_generator:
            memory["copy_keys"] = self.copy_attention.project_keys(
                memory["word_memory"]
            )
        state = {
            "self_caches": ops.zeros(
                (
                    batch,
                    self.num_decoder_layers,
                    2,
                    max_length,
                    self.num_heads,
                    self.head_dim,
                ),
                dtype=self.compute_dtype,
            )
        }
        return dict(memory), state

    def step(self, ids, index, cache):
        """One position: `ids` int [N] at `index` → logits float32 [N,V].

        N = B with `initial_cache`'s cache; N = B·K with `beam_cache`'s
        (row b·K + k reads example b of the memory).

        aux `"paragraph_attention"` float32 [B,P]: this step's A_para summed
        over the decoder layers (unnormalised; sums to L over real
        paragraphs).
        """
        static, state = cache
        y = self._embed_target(ops.expand_dims(ids, 1), start_index=index)
        decoder_inputs = y
        caches = state["self_caches"]
        # A memory without "cross_caches" (not from `initial_cache`) is
        # projected again at every step: same results, slower.
        cross_caches = static.get("cross_caches") or [None] * len(self.decoder_layers)
        updated = []
        attention_sum = None
        for i, layer in enumerate(self.decoder_layers):
            y, attention, layer_cache = layer(
                y,
                static["word_memory"],
                static["paragraph_memory"],
                token_mask=static[TOKEN_MASK],
                paragraph_mask=static[PARAGRAPH_MASK],
                self_attention_cache=caches[:, i],
                self_attention_cache_update_index=index,
                memory_cache=cross_caches[i],
            )
            updated.append(layer_cache)
            last_attention = ops.cast(attention, "float32")
            attention = last_attention[:, 0]
            attention_sum = (
                attention if attention_sum is None else attention_sum + attention
            )
        logits = self._outputs(y, decoder_inputs, static, last_attention)[:, 0]
        new_state = {"self_caches": ops.stack(updated, axis=1)}
        return logits, (static, new_state), {PARAGRAPH_ATTENTION: attention_sum}

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "num_encoder_layers": self.num_encoder_layers,
                "num_decoder_layers": self.num_decoder_layers,
                "num_paragraph_layers": self.num_paragraph_layers,
                "dropout": self.dropout,
                "tie_embeddings": self.tie_embeddings,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "pointer_generator": self.pointer_generator,
                "token_shift": self.token_shift,
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
