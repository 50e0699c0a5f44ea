"""SEAL's extractive-abstractive models: EA and SEAL (Zhao, Saleh & Liu, 2020).

Both models share one snippet encoder E (a Transformer encoder run on every
snippet separately, with the decoder's token embedding), the scorer S
(`keras_hsum.layers.SnippetScorer`), the gate G (`SnippetGate`) and the
Transformer decoder D (`TransformerSummaryDecoder`). They live in one module
because `SEAL` is `ExtractiveAbstractive` plus segment-wise re-selection:

- `ExtractiveAbstractive` (EA, §3.3): S scores the snippets once, G keeps
  the best ones within L_ext tokens, D attends to that memory for the
  whole summary.
- `SEAL` (§3.4): the summary is decoded in segments of L_seg tokens; at the
  start of every segment S re-scores the snippets, also seeing the
  previously decoded segments (encoded by E), and G re-selects the memory
  that D attends to while decoding that segment.

Training loss L = L_abs + w·L_ext: L_abs is the label-smoothed token
cross-entropy of `model.compile`; L_ext (added with `add_loss` inside `call`
when the proxy labels are among the inputs) is `extractive_loss`.
"""

import keras
from keras import ops

from keras_hsum.features import DECODER_TOKENS
from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import PROXY_LABELS
from keras_hsum.features import SEGMENT_LABELS
from keras_hsum.features import SELECTED_IDS
from keras_hsum.features import TARGET_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.snippet_gate import SnippetGate
from keras_hsum.layers.snippet_scorer import SnippetScorer
from keras_hsum.models.flat_memory_summarizer import FlatMemorySummarizer
from keras_hsum.models.summarizer import Summarizer
from keras_hsum.models.summarizer import decoder_padding_mask
from keras_hsum.models.summarizer import required


def extractive_loss(scores, labels, mask):
    """SEAL's L_ext: binary cross-entropy between sigmoid(scores) and labels.

    The proxy labels are ROUGE F1 values in [0, 1] (soft targets); the
    scorer's logits are regressed onto them with the binary cross-entropy
    −[y·log σ(s) + (1−y)·log(1−σ(s))], averaged over the valid entries
    (real snippets, and for SEAL real summary segments: the paper's
    Σ_j Σ_i ℓ_ij / (M·N) over the labelled pairs).

    Args:
        scores: float [..., P] logits (padded snippets may hold -1e9).
        labels: float [..., P] proxy labels in [0, 1].
        mask: bool [..., P], True where the pair is labelled.

    Returns:
        float32 scalar (0 when nothing is labelled).
    """
    scores = ops.cast(scores, "float32")
    labels = ops.cast(labels, "float32")
    mask = ops.cast(as_bool_mask(mask), "float32")
    scores = scores * mask  # padded snippets: finite logits
    # Stable form of the BCE from logits.
    loss = (
        ops.maximum(scores, 0.0)
        - scores * labels
        + ops.log1p(ops.exp(-ops.abs(scores)))
    )
    return ops.sum(loss * mask) / ops.maximum(ops.sum(mask), 1.0)


def selection_indicator(selected_ids, paragraphs):
    """float32 [B,P]: 1.0 on the snippets in `selected_ids` int [B,K] (-1 = none)."""
    index = ops.arange(paragraphs, dtype="int32")
    hits = ops.equal(ops.cast(selected_ids, "int32")[:, :, None], index[None, None, :])
    return ops.cast(ops.any(hits, axis=1), "float32")


@keras.saving.register_keras_serializable(package="keras_hsum")
class ExtractiveAbstractive(FlatMemorySummarizer):
    """EA: snippet encoder → scorer → gate (L_ext tokens) → Transformer decoder.

    1. Encoder E: every snippet [T] is embedded with the decoder's token
       embedding (·√D, + sinusoidal positions 0..T−1) and read by
       `num_encoder_layers` keras-hub `TransformerEncoder` layers on
       [B·P, T, D] (each snippet separately).
    2. Scorer S (`SnippetScorer`): attention pooling → `num_scorer_layers`
       Transformer encoder layers over the pooled snippets (+ a document
       embedding when `max_documents` is set) → Dense → logits [B,P].
    3. Gate G (`SnippetGate(max_length=extract_length)`): sorts the snippets
       by score and concatenates their token encodings up to L_ext tokens →
       memory [B,L_ext,D] + mask + selected snippet ids [B,P] (-1 padded).
       The gather is differentiable: L_abs reaches E through the memory.
    4. Decoder D (`TransformerSummaryDecoder`, tied embeddings) attends to
       that memory.

    Loss: when `inputs` hold `proxy_labels` float [B,P] (the
    `keras_hsum.data.seal_labels` extra), `call` adds
    `extractive_loss_weight · extractive_loss(scores, proxy_labels,
    real snippets)` with `add_loss`, so `model.fit` minimises
    L_abs + w·L_ext. L_ext trains S (and E); the ranking passes no gradient.

    Args:
        vocabulary_size: V.
        hidden_dim: D.
        num_heads: H (encoder, scorer, decoder).
        intermediate_dim: FFN width.
        num_encoder_layers: layers of E.
        num_scorer_layers: Transformer layers inside S.
        num_decoder_layers: layers of D.
        extract_length: L_ext, the memory length kept by G.
        max_documents: optional size of S's document-embedding table
            (multi-document input); None ignores `document_ids`.
        extractive_loss_weight: w, the weight of L_ext.
        dropout: dropout rate.
        attention_dropout: dropout rate on the attention probabilities, or
            None (the default, the papers' setting) for `dropout`; 0 lets
            keras-hub's attention layers run through `keras.ops.dot_product_attention`
            (fused cuDNN attention on a GPU).
        tie_embeddings: tie the output projection to the embedding.
        pad_id, bos_id, eos_id: special ids.

    Inputs (dict):
        tokens: int [B,P,T] snippets (`keras_hsum.data` family "snippets").
        token_mask: optional bool [B,P,T]; default tokens != pad.
        paragraph_mask: optional bool [B,P]; default: snippet has a token.
        document_ids: optional int [B,P] (used when `max_documents` is set).
        proxy_labels: optional float [B,P] (adds L_ext).
        decoder_tokens: int [B,S] (teacher forcing).

    Returns (call):
        float32 logits [B,S,V].

    Decoding aux: `"paragraph_attention"` float32 [B,P], 1.0 on the snippets
    in the memory the decoder attends (the selection indicator);
    `"selected_ids"` int32 [B,P], the selected snippets in selection order,
    -1 padded.

    References:
        Zhao, Saleh & Liu (2020), SEAL: Segment-wise Extractive-Abstractive
        Long-form Text Summarization, arXiv:2006.10213, §3.3.
    """

    label_key = PROXY_LABELS

    def __init__(
        self,
        vocabulary_size,
        hidden_dim=256,
        num_heads=8,
        intermediate_dim=1024,
        num_encoder_layers=6,
        num_scorer_layers=2,
        num_decoder_layers=6,
        extract_length=512,
        max_documents=None,
        extractive_loss_weight=1.0,
        dropout=0.1,
        tie_embeddings=True,
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, hidden_dim=hidden_dim, num_heads=num_heads,
            intermediate_dim=intermediate_dim, num_encoder_layers=num_encoder_layers,
            num_scorer_layers=num_scorer_layers, num_decoder_layers=num_decoder_layers,
            extract_length=extract_length, dropout=dropout,
            attention_dropout=attention_dropout, optional=("attention_dropout",),
        )
        if not isinstance(extract_length, int) or extract_length < 1:
            raise ValueError(
                f"{self.name}: `extract_length` (L_ext) must be a positive int, "
                f"received {extract_length!r}."
            )
        self.num_scorer_layers = num_scorer_layers
        self.extract_length = extract_length
        self.max_documents = max_documents
        self.extractive_loss_weight = extractive_loss_weight
        self._init_decoder(
            vocabulary_size,
            hidden_dim,
            num_heads,
            intermediate_dim,
            num_decoder_layers,
            dropout,
            tie_embeddings,
            attention_dropout=attention_dropout,
        )
        self._init_flat_encoder(num_encoder_layers)
        self.scorer = SnippetScorer(
            num_layers=num_scorer_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            max_documents=max_documents,
            dropout=dropout,
            attention_dropout=attention_dropout,
            dtype=self.dtype_policy,
            name="scorer",
        )
        self.gate = SnippetGate(
            max_length=extract_length, dtype=self.dtype_policy, name="gate"
        )

    # -- encoder E ---------------------------------------------------------

    def encode_sequences(self, tokens, mask, training=False):
        """E on independent sequences: int [N,T] + bool [N,T] → float [N,T,D]."""
        return self._run_encoder(self._embed_source(tokens), mask, training=training)

    def encode_snippets(self, inputs, training=False):
        """Returns `{"snippets" [B,P,T,D], "token_mask", "paragraph_mask"
        [, "document_ids"]}`."""
        tokens = required(self, inputs, TOKENS, "int [B,P,T]")
        if len(tokens.shape) != 3:
            raise ValueError(
                f"{self.name}: `tokens` must be int [B,P,T] snippets (data "
                f"family 'snippets'), received shape {tuple(tokens.shape)}. "
                "Build batches with the recipe's make_dataset."
            )
        tokens = ops.convert_to_tensor(tokens)
        if inputs.get(TOKEN_MASK) is not None:
            token_mask = as_bool_mask(ops.convert_to_tensor(inputs[TOKEN_MASK]))
        else:
            token_mask = ops.not_equal(tokens, self.pad_id)
        has_token = ops.any(token_mask, axis=-1)
        if inputs.get(PARAGRAPH_MASK) is not None:
            paragraph_mask = ops.logical_and(
                as_bool_mask(ops.convert_to_tensor(inputs[PARAGRAPH_MASK])),
                has_token,
            )
        else:
            paragraph_mask = has_token
        token_mask = ops.logical_and(token_mask, paragraph_mask[:, :, None])
        shape = ops.shape(tokens)
        flat_tokens = ops.reshape(tokens, (-1, shape[2]))
        flat_mask = ops.reshape(token_mask, (-1, shape[2]))
        encoded = self.encode_sequences(flat_tokens, flat_mask, training=training)
        snippets = ops.reshape(
            encoded, (shape[0], shape[1], shape[2], self.hidden_dim)
        )
        memory = {
            "snippets": snippets,
            TOKEN_MASK: token_mask,
            PARAGRAPH_MASK: paragraph_mask,
        }
        if self.max_documents is not None and inputs.get(DOCUMENT_IDS) is not None:
            ids = ops.cast(ops.convert_to_tensor(inputs[DOCUMENT_IDS]), "int32")
            memory[DOCUMENT_IDS] = ops.clip(ids, 0, self.max_documents - 1)
        return memory

    def score_and_gate(self, memory, decoded_segments=None, decoded_mask=None,
                       training=False):
        """S then G on `memory` (from `encode_snippets`): returns `(scores
        float32 [N,P], memory [N,L_ext,D], memory_mask [N,L_ext], selected_ids
        int32 [N,P])`, N = B (or the rows of `decoded_segments`)."""
        scores = self.scorer(
            memory["snippets"],
            token_mask=memory[TOKEN_MASK],
            paragraph_mask=memory[PARAGRAPH_MASK],
            document_ids=memory.get(DOCUMENT_IDS),
            decoded_segments=decoded_segments,
            decoded_mask=decoded_mask,
            training=training,
        )
        selected, selected_mask, selected_ids = self.gate(
            memory["snippets"],
            scores,
            token_mask=memory[TOKEN_MASK],
            paragraph_mask=memory[PARAGRAPH_MASK],
        )
        return scores, selected, selected_mask, selected_ids

    # -- Summarizer contract -------------------------------------------------

    def encode(self, inputs, training=False):
        """`encode_snippets` + `"scores"` [B,P], `"memory"` [B,L_ext,D],
        `"memory_mask"` [B,L_ext], `"selected_ids"` [B,P]."""
        memory = self.encode_snippets(inputs, training=training)
        scores, selected, selected_mask, selected_ids = self.score_and_gate(
            memory, training=training
        )
        memory.update(
            scores=scores,
            memory=selected,
            memory_mask=selected_mask,
            selected_ids=selected_ids,
        )
        return memory

    def call(self, inputs, training=False):
        if DECODER_TOKENS not in inputs:
            return super().call(inputs, training=training)  # raises clearly
        memory = self.encode(inputs, training=training)
        logits = self.decode(
            inputs[DECODER_TOKENS], memory, inputs=inputs, training=training
        )
        if inputs.get(self.label_key) is not None:
            labels = ops.convert_to_tensor(inputs[self.label_key])
            self._check_labels(labels, memory["scores"])
            self.add_loss(
                self.extractive_loss_weight
                * extractive_loss(memory["scores"], labels, memory[PARAGRAPH_MASK])
            )
        return logits

    def _check_labels(self, labels, scores):
        if len(labels.shape) != 2 or (
            labels.shape[1] is not None
            and scores.shape[1] is not None
            and labels.shape[1] != scores.shape[1]
        ):
            raise ValueError(
                f"{self.name}: `proxy_labels` must be float [B,P] with the P of "
                f"`tokens` ({scores.shape[1]}), received shape "
                f"{tuple(labels.shape)}. Use keras_hsum.data.seal_labels()."
            )

    def step_aux(self, static):
        paragraphs = ops.shape(static["scores"])[1]
        return {
            PARAGRAPH_ATTENTION: selection_indicator(
                static[SELECTED_IDS], paragraphs
            ),
            SELECTED_IDS: static[SELECTED_IDS],
        }

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "num_encoder_layers": self.num_encoder_layers,
                "num_scorer_layers": self.num_scorer_layers,
                "num_decoder_layers": self.num_decoder_layers,
                "extract_length": self.extract_length,
                "max_documents": self.max_documents,
                "extractive_loss_weight": self.extractive_loss_weight,
                "dropout": self.dropout,
                "tie_embeddings": self.tie_embeddings,
                "attention_dropout": self.attention_dropout,
            }
        )
        return config


def _segmentwise_decoder_layer(layer, x, memory, memory_mask, padding_mask,
                               segment_length, training):
    """One keras-hub `TransformerDecoder` (post-norm) whose cross-attention
    reads a different memory per decoding segment.

    Same weights and the same computation as `layer(x, memory, ...)`, except
    that the queries [B, M·L_seg, D] are reshaped to [B·M, L_seg, D] so that
    the positions of segment m attend only to memory row b·M + m.

    Args:
        layer: a built `keras_hub.layers.TransformerDecoder`.
        x: float [B, M·L_seg, D].
        memory: float [B·M, L_ext, D]; memory_mask: bool [B·M, L_ext].
        padding_mask: bool [B, M·L_seg].
    """
    self_mask = layer._compute_self_attention_mask(
        decoder_sequence=x,
        decoder_padding_mask=padding_mask,
        decoder_attention_mask=None,
        use_causal_mask=True,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
    )
    residual = x
    h = layer._self_attention_layer(
        query=x, value=x, attention_mask=self_mask, training=training
    )
    h = layer._self_attention_dropout(h, training=training)
    x = layer._self_attention_layer_norm(h + residual)

    shape = ops.shape(x)
    segments = ops.reshape(x, (-1, segment_length, shape[2]))  # [B·M,L,D]
    h = layer._cross_attention_layer(
        query=segments,
        value=memory,
        attention_mask=ops.cast(memory_mask[:, None, :], "int32"),
        training=training,
    )
    h = layer._cross_attention_dropout(h, training=training)
    segments = layer._cross_attention_layer_norm(h + segments)
    x = ops.reshape(segments, shape)

    residual = x
    h = layer._feedforward_intermediate_dense(x)
    h = layer._feedforward_output_dense(h)
    h = layer._feedforward_dropout(h, training=training)
    return layer._feedforward_layer_norm(h + residual)


@keras.saving.register_keras_serializable(package="keras_hsum")
class SEAL(ExtractiveAbstractive):
    """SEAL: EA whose snippets are re-selected for every decoded segment.

    The summary is decoded in non-overlapping segments of L_seg
    (`segment_length`) tokens; segment m covers decoder positions
    [m·L_seg, (m+1)·L_seg), i.e. it predicts summary tokens
    y[m·L_seg : (m+1)·L_seg] (the same split as
    `keras_hsum.data.labels.summary_segments`). For segment m:

    1. the previously decoded segments y[0 : m·L_seg], split into m
       segments of L_seg tokens, are encoded by E (each segment a separate
       sequence, positions 0..L_seg−1);
    2. the scorer S scores the snippets together with those m pooled
       segments (`SnippetScorer(decoded_segments=...)`);
    3. the gate G selects that segment's memory [L_ext, D];
    4. the decoder positions of segment m cross-attend only to it (causal
       self-attention still runs over the whole summary).

    Teacher forcing is batched: E runs once on all M = ceil(S / L_seg)
    segments [B·M, L_seg]; S and G run on B·M rows (row b·M + m sees
    snippets of example b and its segments < m, the others masked); the
    decoder's cross-attention reshapes its queries [B, M·L_seg, D] to
    [B·M, L_seg, D] (same weights as keras-hub's `TransformerDecoder`, whose
    sublayers it calls). Decoding (`step`) keeps the decoded tokens in
    `state` and, when `index % L_seg == 0 and index > 0`, re-runs E, S, G
    and the cross-attention key/value projections inside `keras.ops.cond`
    (works under `tf.function`/XLA and `jax.jit`); the selected memory and
    its caches live in `state` (they differ per hypothesis).

    Loss: with `segment_labels` float [B,M',P] among the inputs (the
    `seal_labels(segment_length=L_seg)` extra; M' rows are cut or
    zero-padded to M), `call` adds w·L_ext over the (labelled segment, real
    snippet) pairs. Segment m is labelled when the summary y (the decoder
    tokens after BOS) has a token at position m·L_seg, as the labels are
    cut from the summary's tokens (and, with `target_mask`, that target is
    real): a last segment that would hold only EOS has no label row and no
    L_ext term.

    Args:
        segment_length: L_seg.
        (the others as `ExtractiveAbstractive`).

    Inputs (dict): as `ExtractiveAbstractive`, with `segment_labels`
    [B,M',P] instead of `proxy_labels`; optional `target_mask` bool [B,S].

    Returns (call):
        float32 logits [B,S,V].

    Decoding aux: `"paragraph_attention"` float32 [B,P], 1.0 on the snippets
    selected for the current segment; `"selected_ids"` int32 [B,P] (selection
    order, -1 padded).

    References:
        Zhao, Saleh & Liu (2020), SEAL: Segment-wise Extractive-Abstractive
        Long-form Text Summarization, arXiv:2006.10213, §3.4.
    """

    label_key = SEGMENT_LABELS

    def __init__(self, vocabulary_size, segment_length=64, **kwargs):
        super().__init__(vocabulary_size, **kwargs)
        if not isinstance(segment_length, int) or segment_length < 1:
            raise ValueError(
                f"{self.name}: `segment_length` (L_seg) must be a positive int, "
                f"received {segment_length!r}."
            )
        self.segment_length = segment_length

    # -- segments ------------------------------------------------------------

    def _previous_segments(self, summary_tokens, training=False):
        """E on the summary cut into segments: int [B, M·L_seg] →
        (encoded [B,M,L_seg,D], real-token mask bool [B,M,L_seg])."""
        length = self.segment_length
        shape = ops.shape(summary_tokens)
        segments = ops.reshape(summary_tokens, (-1, length))
        mask = ops.not_equal(segments, self.pad_id)
        encoded = self.encode_sequences(segments, mask, training=training)
        encoded = ops.reshape(encoded, (shape[0], -1, length, self.hidden_dim))
        return encoded, ops.reshape(mask, (shape[0], -1, length))

    def _padded_summary(self, decoder_tokens):
        """decoder_tokens [B,S] → (summary y = decoder_tokens[:,1:] padded
        with pad_id to [B, M·L_seg], M = ceil(S / L_seg))."""
        length = self.segment_length
        steps = ops.shape(decoder_tokens)[1]
        segments = (steps + length - 1) // length
        summary = ops.pad(
            decoder_tokens[:, 1:],
            ((0, 0), (0, segments * length - steps + 1)),
            constant_values=self.pad_id,
        )
        return summary, segments

    def segment_selection(self, decoder_tokens, memory, training=False):
        """Teacher-forced S and G for every segment, batched over B·M.

        Returns `(scores float32 [B,M,P], memory [B·M,L_ext,D], memory_mask
        [B·M,L_ext], selected_ids int32 [B,M,P])`.
        """
        decoder_tokens = ops.convert_to_tensor(decoder_tokens)
        summary, segments = self._padded_summary(decoder_tokens)
        encoded, token_mask = self._previous_segments(summary, training)
        batch = ops.shape(decoder_tokens)[0]
        index = ops.arange(segments)
        earlier = index[None, :] < index[:, None]  # [M(row m), M(segment k)]
        decoded_mask = ops.logical_and(
            token_mask[:, None, :, :], earlier[None, :, :, None]
        )  # [B,M,M,L]
        length = self.segment_length

        def tile(x):  # [B,...] → [B·M,...], row b·M + m = x[b]
            return ops.reshape(
                ops.repeat(x[:, None], segments, axis=1),
                (-1,) + tuple(ops.shape(x)[1:]),
            )

        rows = {
            key: tile(value)
            for key, value in memory.items()
            if key in ("snippets", TOKEN_MASK, PARAGRAPH_MASK, DOCUMENT_IDS)
        }
        scores, selected, selected_mask, selected_ids = self.score_and_gate(
            rows,
            decoded_segments=tile(encoded),
            decoded_mask=ops.reshape(decoded_mask, (-1, segments, length)),
            training=training,
        )
        paragraphs = ops.shape(scores)[1]
        return (
            ops.reshape(scores, (batch, segments, paragraphs)),
            selected,
            selected_mask,
            ops.reshape(selected_ids, (batch, segments, paragraphs)),
        )

    # -- Summarizer contract -------------------------------------------------

    def encode(self, inputs, training=False):
        """`encode_snippets` (no selection: it depends on the decoded summary)."""
        return self.encode_snippets(inputs, training=training)

    def decode(self, decoder_tokens, memory, inputs=None, training=False):
        return self._decode(decoder_tokens, memory, training)[0]

    def _decode(self, decoder_tokens, memory, training):
        decoder_tokens = ops.convert_to_tensor(decoder_tokens)
        scores, selected, selected_mask, _ = self.segment_selection(
            decoder_tokens, memory, training=training
        )
        steps = ops.shape(decoder_tokens)[1]
        segments = ops.shape(scores)[1]
        padded = ops.pad(
            decoder_tokens,
            ((0, 0), (0, segments * self.segment_length - steps)),
            constant_values=self.pad_id,
        )
        if not self.decoder.built:
            self.decoder.build(tuple(padded.shape), (None, None, self.hidden_dim))
        x = self.decoder.embed(padded, training=training)
        padding_mask = decoder_padding_mask(padded, self.pad_id)
        for layer in self.decoder.decoder_layers:
            x = _segmentwise_decoder_layer(
                layer,
                x,
                selected,
                selected_mask,
                padding_mask,
                self.segment_length,
                training,
            )
        return self.decoder.logits(x[:, :steps]), scores

    def call(self, inputs, training=False):
        if DECODER_TOKENS not in inputs:
            return Summarizer.call(self, inputs, training=training)  # raises
        memory = self.encode(inputs, training=training)
        decoder_tokens = ops.convert_to_tensor(inputs[DECODER_TOKENS])
        logits, scores = self._decode(decoder_tokens, memory, training)
        if inputs.get(self.label_key) is not None:
            labels = ops.cast(ops.convert_to_tensor(inputs[self.label_key]), "float32")
            if len(labels.shape) != 3:
                raise ValueError(
                    f"{self.name}: `segment_labels` must be float [B,M,P] (M "
                    "summary segments), received shape "
                    f"{tuple(labels.shape)}. Use keras_hsum.data.seal_labels("
                    "segment_length=L_seg, vocabulary=...)."
                )
            segments = ops.shape(scores)[1]
            labels = ops.concatenate([labels, ops.zeros_like(scores)], axis=1)
            labels = labels[:, :segments]
            # Segment m is labelled when y has a token at m·L (the labels are
            # cut from y's tokens; an EOS-only last segment has none).
            summary, _ = self._padded_summary(decoder_tokens)  # [B, M·L]
            real = ops.not_equal(summary, self.pad_id)
            if inputs.get(TARGET_MASK) is not None:
                target_real = as_bool_mask(ops.convert_to_tensor(inputs[TARGET_MASK]))
                target_real = ops.pad(
                    ops.cast(target_real, "int32"),
                    ((0, 0), (0, segments * self.segment_length - ops.shape(target_real)[1])),
                )
                real = ops.logical_and(real, ops.not_equal(target_real, 0))
            segment_real = ops.reshape(real, (ops.shape(real)[0], segments, -1))[:, :, 0]
            mask = ops.logical_and(
                segment_real[:, :, None], memory[PARAGRAPH_MASK][:, None, :]
            )
            self.add_loss(
                self.extractive_loss_weight * extractive_loss(scores, labels, mask)
            )
        return logits

    def _select_for_step(self, static, decoded, index):
        """S + G for the segment starting at `index`, on the tokens decoded
        so far (`decoded` int [B,N], positions > index are pad)."""
        length = self.segment_length
        summary = decoded[:, 1:]  # y: [B, M_max·L]
        encoded, token_mask = self._previous_segments(summary)
        segments = ops.shape(token_mask)[1]
        current = index // length
        earlier = ops.arange(segments) < current  # [M]
        decoded_mask = ops.logical_and(token_mask, earlier[None, :, None])
        _, selected, selected_mask, selected_ids = self.score_and_gate(
            static, decoded_segments=encoded, decoded_mask=decoded_mask
        )
        return {
            "memory": selected,
            "memory_mask": selected_mask,
            SELECTED_IDS: selected_ids,
            "cross_caches": self.decoder.cross_attention_caches(selected),
        }

    def beam_cache(self, memory, max_length, beam_size):
        """The memory repeated K times (`Summarizer.beam_cache`): each
        hypothesis re-selects its own snippets at every segment boundary, so
        the selected memory and its keys/values are per-hypothesis state."""
        return Summarizer.beam_cache(self, memory, max_length, beam_size)

    def initial_cache(self, memory, max_length):
        """State: self-attention caches, the decoded tokens [B, M_max·L_seg+1]
        (M_max = ceil(max_length / L_seg)) and the current selection (its
        memory, mask, snippet ids and `"cross_caches"`: L `(key, value)`
        pairs, each float [B,L_ext,H,Dh], projected again at every segment
        boundary)."""
        batch = ops.shape(memory["snippets"])[0]
        segments = -(-int(max_length) // self.segment_length)
        decoded = ops.full(
            (batch, segments * self.segment_length + 1), self.pad_id, "int32"
        )
        static = dict(memory)
        state = self._select_for_step(static, decoded, 0)
        state["decoded"] = decoded
        state["self_caches"] = self.decoder.empty_self_attention_caches(
            batch, max_length
        )
        return static, state

    def step(self, ids, index, cache):
        static, state = cache
        ids = ops.cast(ids, "int32")
        decoded = state["decoded"]
        position = ops.arange(ops.shape(decoded)[1], dtype="int32")
        decoded = ops.where(
            ops.equal(position, ops.cast(index, "int32"))[None, :],
            ids[:, None],
            decoded,
        )
        keys = ("memory", "memory_mask", "selected_ids", "cross_caches")
        current = {key: state[key] for key in keys}
        if isinstance(index, int):  # eager, static index: plain Python
            if index > 0 and index % self.segment_length == 0:
                current = self._select_for_step(static, decoded, index)
        else:
            index_tensor = ops.cast(index, "int32")
            boundary = ops.logical_and(
                ops.equal(index_tensor % self.segment_length, 0), index_tensor > 0
            )
            current = ops.cond(
                boundary,
                lambda: self._select_for_step(static, decoded, index_tensor),
                lambda: current,
            )
            current = dict(current)
        _, logits, self_caches = self.decoder.call_cached(
            ops.expand_dims(ids, 1),
            index,
            current["memory"],
            state["self_caches"],
            current["cross_caches"],
            memory_mask=current["memory_mask"],
        )
        new_state = dict(current, decoded=decoded, self_caches=self_caches)
        paragraphs = ops.shape(static["snippets"])[1]
        aux = {
            PARAGRAPH_ATTENTION: selection_indicator(
                current[SELECTED_IDS], paragraphs
            ),
            SELECTED_IDS: current[SELECTED_IDS],
        }
        return logits[:, 0], (static, new_state), aux

    def get_config(self):
        config = super().get_config()
        config["segment_length"] = self.segment_length
        return config
