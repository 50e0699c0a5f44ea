"""SEAL's snippet scorer S (Zhao, Saleh & Liu, 2020, §3.3 and §3.4)."""

import keras
from keras import ops

from keras_hsum.checks import check_int
from keras_hsum.layers.input_checks import check_dims, check_rank
from keras_hsum.layers.input_checks import expect_width
from keras_hsum.layers.masking import as_bool_mask, merge_masks
from keras_hsum.layers.multi_head_pooling import MultiHeadPooling
from keras_hsum.layers.transformer_encoder import TransformerEncoder

# The score of a padded snippet: finite, far below any logit, so the gate
# puts padded snippets last and a loss on valid snippets never sees inf.
PADDED_SNIPPET_SCORE = -1.0e9


@keras.saving.register_keras_serializable(package="keras_hsum")
class SnippetScorer(keras.layers.Layer):
    """Scores encoded snippets for SEAL's gate.

    SEAL's scorer "consists of an attention pooling layer, a transformer
    encoder and a feed-forward layer":

    1. attention pooling (`MultiHeadPooling(num_heads=1)`) reduces every
       encoded snippet [T, D] to one vector [D];
    2. for multi-document inputs, a learned document embedding of the
       snippet's document id is added to its pooled vector;
    3. in SEAL's segment-wise form, the previously decoded segments (encoded
       by the same encoder E) are pooled by the same attention pooling layer
       and concatenated after the pooled snippets, [P + M, D], so that the
       snippets can condition on what was already decoded;
    4. a stack of `num_layers` transformer encoder layers
       (`keras_hub.layers.TransformerEncoder`) contextualises that sequence
       (padded snippets and padded decoded segments masked out as keys);
    5. a feed-forward (Dense) layer maps every contextual snippet vector to
       one score.

    The scores are float32 logits (SEAL regresses them onto proxy ROUGE
    labels with the extractive loss L_ext; they reach the gate only through
    its ranking, which passes no gradient). A padded snippet (`paragraph_mask`
    False, or no valid token) scores `PADDED_SNIPPET_SCORE` = -1e9: finite,
    below every real score, so `SnippetGate` puts it last. With
    `num_layers=0` the scorer is pooling (+ document embedding) + Dense and
    decoded segments have no effect. No position information is added (the
    paper adds none; the snippet order is not a signal for the scorer).

    Args:
        num_layers: number of transformer encoder layers (0 allowed).
        num_heads: heads of every transformer encoder layer; must divide D.
        intermediate_dim: feed-forward width of the encoder layers.
        max_documents: optional int, the size of the document-embedding
            table (multi-document inputs); `document_ids` may only be passed
            when it is set.
        dropout: dropout rate of the encoder layers and of the pooling
            weights.
        attention_dropout: dropout rate on the attention and pooling
            weights, or None (the default) for `dropout`.
        activation: activation of the encoder layers' feed-forward network.
        layer_norm_epsilon: epsilon of the encoder layers' layer norms.
        normalize_first: pre-norm encoder layers (post-norm by default, as in
            the Transformer SEAL uses).
        kernel_initializer: initializer of every kernel.
        bias_initializer: initializer of every bias.
        embeddings_initializer: initializer of the document embeddings.

    Weights: `document_embeddings` [max_documents, D] (when `max_documents`
    is set), the sublayers `attention_pooling` (`MultiHeadPooling`),
    `encoder_layers` (list of `TransformerEncoder`) and `score_dense`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        snippets: float [B, P, T, D], the encoded snippets.
        token_mask: optional bool/int [B, P, T], True for real tokens.
        paragraph_mask: optional bool/int [B, P], True for real snippets.
        document_ids: optional int [B, P], the document of every snippet,
            in [0, max_documents).
        decoded_segments: optional float [B, M, L, D], the encoded
            previously decoded segments.
        decoded_mask: optional bool/int [B, M, L], True for real tokens of
            the decoded segments (a segment without any is ignored).
        training: bool, whether dropout is active.

    Returns:
        scores: float32 [B, P], one logit per snippet; -1e9 on padded
        snippets.

    Example:
    >>> scorer = SnippetScorer(num_layers=1, num_heads=2, intermediate_dim=16)
    >>> snippets = np.random.rand(2, 3, 4, 8).astype("float32")
    >>> tuple(scorer(snippets).shape)
    (2, 3)

    References:
        Zhao, Saleh & Liu (2020), SEAL: Segment-wise Extractive-Abstractive
        Long-form Text Summarization, arXiv:2006.10213.
    """

    def __init__(
        self,
        num_layers,
        num_heads,
        intermediate_dim,
        max_documents=None,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-6,
        normalize_first=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        embeddings_initializer="uniform",
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        num_layers = check_int("num_layers", num_layers, 0, owner="SnippetScorer")
        max_documents = check_int("max_documents", max_documents, owner="SnippetScorer",
                                  allow_none=True)
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.max_documents = max_documents
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

        def initializer(value):
            # A fresh initializer per sublayer (no shared seeds).
            return keras.initializers.get(keras.initializers.serialize(value))

        self.attention_pooling = MultiHeadPooling(
            num_heads=1,
            dropout=dropout,
            attention_dropout=attention_dropout,
            kernel_initializer=initializer(self.kernel_initializer),
            bias_initializer=initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="attention_pooling",
        )
        self.encoder_layers = [
            TransformerEncoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                attention_dropout=attention_dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=initializer(self.kernel_initializer),
                bias_initializer=initializer(self.bias_initializer),
                normalize_first=normalize_first,
                dtype=self.dtype_policy,
                name=f"encoder_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.document_embeddings = None  # a weight, created in build()
        self.score_dense = keras.layers.Dense(
            1,
            kernel_initializer=initializer(self.kernel_initializer),
            bias_initializer=initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="score_dense",
        )

    def _check_shapes(
        self,
        snippets_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
        document_ids_shape=None,
        decoded_segments_shape=None,
        decoded_mask_shape=None,
    ):
        batch, paragraphs, tokens, dim = check_rank(
            self.name, "snippets", snippets_shape, 4, "[B,P,T,D]"
        )
        if dim is None:
            raise ValueError(
                f"{self.name}: the last axis D of `snippets` must be known, "
                f"received shape {tuple(snippets_shape)}."
            )
        if self.num_layers and dim % self.num_heads:
            raise ValueError(
                f"{self.name}: D (last axis of `snippets`) must be divisible by "
                f"num_heads={self.num_heads}, received shape "
                f"{tuple(snippets_shape)}."
            )
        if token_mask_shape is not None:
            check_rank(self.name, "token_mask", token_mask_shape, 3, "[B,P,T]")
            check_dims(
                self.name,
                "token_mask",
                token_mask_shape,
                (batch, paragraphs, tokens),
                "[B,P,T]",
            )
        for name, shape in (
            ("paragraph_mask", paragraph_mask_shape),
            ("document_ids", document_ids_shape),
        ):
            if shape is not None:
                check_rank(self.name, name, shape, 2, "[B,P]")
                check_dims(self.name, name, shape, (batch, paragraphs), "[B,P]")
        if document_ids_shape is not None and self.max_documents is None:
            raise ValueError(
                f"{self.name}: `document_ids` were passed but the scorer has no "
                "document embedding; construct it with `max_documents` set "
                "(expected max_documents >= 1, received None)."
            )
        if decoded_mask_shape is not None and decoded_segments_shape is None:
            raise ValueError(
                f"{self.name}: `decoded_mask` [B,M,L] was passed without "
                "`decoded_segments` [B,M,L,D]; pass both or neither "
                f"(received decoded_mask shape {tuple(decoded_mask_shape)})."
            )
        if decoded_segments_shape is not None:
            check_rank(
                self.name, "decoded_segments", decoded_segments_shape, 4, "[B,M,L,D]"
            )
            check_dims(
                self.name,
                "decoded_segments",
                decoded_segments_shape,
                (batch, None, None, dim),
                "[B,M,L,D]",
            )
            if decoded_mask_shape is not None:
                check_rank(self.name, "decoded_mask", decoded_mask_shape, 3, "[B,M,L]")
                check_dims(
                    self.name,
                    "decoded_mask",
                    decoded_mask_shape,
                    tuple(decoded_segments_shape)[:3],
                    "[B,M,L]",
                )
        return batch, paragraphs, tokens, dim

    def build(
        self,
        snippets_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
        document_ids_shape=None,
        decoded_segments_shape=None,
        decoded_mask_shape=None,
    ):
        batch, paragraphs, _, dim = self._check_shapes(
            snippets_shape,
            token_mask_shape,
            paragraph_mask_shape,
            document_ids_shape,
            decoded_segments_shape,
            decoded_mask_shape,
        )
        self.attention_pooling.build(snippets_shape, token_mask_shape)
        if self.max_documents is not None:
            self.document_embeddings = self.add_weight(
                name="document_embeddings",
                shape=(self.max_documents, dim),
                initializer=keras.initializers.get(
                    keras.initializers.serialize(self.embeddings_initializer)
                ),
            )
        # The encoder runs over P snippets (+ M decoded segments): any length.
        for layer in self.encoder_layers:
            layer.build((batch, None, dim))
        self.score_dense.build((batch, paragraphs, dim))
        expect_width(self, "snippets", snippets_shape)
        self.built = True

    def call(
        self,
        snippets,
        token_mask=None,
        paragraph_mask=None,
        document_ids=None,
        decoded_segments=None,
        decoded_mask=None,
        training=None,
    ):
        def shape_of(x):
            return None if x is None else x.shape

        self._check_shapes(
            snippets.shape,
            shape_of(token_mask),
            shape_of(paragraph_mask),
            shape_of(document_ids),
            shape_of(decoded_segments),
            shape_of(decoded_mask),
        )
        paragraphs = ops.shape(snippets)[1]
        # A snippet is real if paragraph_mask says so and it has a real token.
        if token_mask is not None:
            token_mask = as_bool_mask(token_mask)
        snippet_mask = merge_masks(
            paragraph_mask,
            None if token_mask is None else ops.any(token_mask, axis=-1),
        )

        # 1-2. Attention pooling (+ document embedding): [B,P,D].
        x = self.attention_pooling(snippets, token_mask=token_mask, training=training)
        if document_ids is not None:
            x = x + ops.cast(
                ops.take(self.document_embeddings, ops.cast(document_ids, "int32"), axis=0),
                x.dtype,
            )

        # 3. Pooled decoded segments after the snippets: [B,P+M,D].
        padding_mask = snippet_mask
        if decoded_segments is not None:
            if decoded_mask is not None:
                decoded_mask = as_bool_mask(decoded_mask)
            decoded = self.attention_pooling(
                decoded_segments, token_mask=decoded_mask, training=training
            )
            x = ops.concatenate([x, ops.cast(decoded, x.dtype)], axis=1)
            if decoded_mask is not None or snippet_mask is not None:
                shape = ops.shape(snippets)
                if snippet_mask is None:
                    snippet_mask = ops.ones((shape[0], shape[1]), "bool")
                if decoded_mask is None:
                    segments = ops.shape(decoded_segments)
                    segment_mask = ops.ones((segments[0], segments[1]), "bool")
                else:
                    segment_mask = ops.any(decoded_mask, axis=-1)
                padding_mask = ops.concatenate([snippet_mask, segment_mask], axis=1)

        # 4. Transformer encoder over the pooled sequence.
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=padding_mask, training=training)

        # 5. Feed-forward scoring of the snippets (float32 logits).
        scores = ops.cast(self.score_dense(x[:, :paragraphs])[..., 0], "float32")
        if snippet_mask is not None:
            scores = ops.where(
                snippet_mask,
                scores,
                ops.full_like(scores, PADDED_SNIPPET_SCORE),
            )
        return scores

    def compute_output_shape(
        self,
        snippets_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
        document_ids_shape=None,
        decoded_segments_shape=None,
        decoded_mask_shape=None,
    ):
        return tuple(snippets_shape)[:2]

    def compute_output_spec(
        self,
        snippets,
        token_mask=None,
        paragraph_mask=None,
        document_ids=None,
        decoded_segments=None,
        decoded_mask=None,
        training=None,
    ):
        # Scores are float32 logits under every dtype policy.
        return keras.KerasTensor(tuple(snippets.shape)[:2], dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "max_documents": self.max_documents,
                "dropout": self.dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "normalize_first": self.normalize_first,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
