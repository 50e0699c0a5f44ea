"""SHTE's hierarchical transformer encoder (González et al., 2020, §2.1-2.2)."""

import keras
from keras import ops
from keras_hub.layers import SinePositionEncoding

from keras_hsum.checks import check_int
from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_rank
from keras_hsum.layers.input_checks import expect_width
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import large_negative
from keras_hsum.layers.masking import merge_masks
from keras_hsum.layers.multi_head_pooling import MultiHeadPooling
from keras_hsum.layers.transformer_encoder import TransformerEncoder

POSITION_ENCODINGS = ("none", "sentence", "sentence_and_word")
POOLINGS = ("max", "mean", "attention")


def _clone(initializer):
    """A fresh initializer from `initializer`'s config (one per sublayer)."""
    return keras.initializers.get(keras.initializers.serialize(initializer))


def _masked_max(x, mask):
    """Max over axis -2 of x [..., N, D] among rows with mask [..., N] True; 0 if none."""
    filled = ops.where(
        mask[..., None], x, ops.cast(large_negative(x.dtype), x.dtype)
    )
    pooled = ops.max(filled, axis=-2)
    return ops.where(ops.any(mask, axis=-1)[..., None], pooled, ops.zeros_like(pooled))


def _masked_mean(x, mask):
    """Mean over axis -2 of x [..., N, D] among rows with mask [..., N] True; 0 if none."""
    weights = ops.cast(mask, x.dtype)
    total = ops.sum(x * weights[..., None], axis=-2)
    count = ops.maximum(ops.sum(weights, axis=-1, keepdims=True), 1.0)
    return total / count


@keras.saving.register_keras_serializable(package="keras_hsum")
class HierarchicalEncoder(keras.layers.Layer):
    """SHTE's two-level transformer encoder: words → sentences → document.

    González et al. (2020) encode every sentence i of a document on its own
    with N transformer encoder blocks over its words (Eq. 4-9: multi-head
    self-attention, LayerNorm(x + MultiHead(x)), position-wise ReLU
    feed-forward, LayerNorm(L + F)) and pool the last block's token states
    into a sentence vector s_i (Eq. 10). Sinusoidal sentence positions are
    added, S^0 = P^s + S, N̂ encoder blocks run over the sentence vectors
    (Eq. 12-17), and pooling their output gives the document
    representation r (Eq. 18). The same layer, with the same weights, encodes
    the summary into p (Eq. 11, 19): the siamese branches share it.

    The attention matrices G_h of the LAST sentence-level block (Eq. 21) are
    returned for sentence scoring (`sentence_scores` in
    `keras_hsum.layers.siamese_classifier_head`, Eq. 22-23).

    Word embeddings are the model's: this layer takes embedded tokens.
    `position_encoding` reproduces the paper's ablation (Table 2):
    `"sentence"` (the best: sinusoid of the sentence index added to s_i),
    `"sentence_and_word"` (also a sinusoid of the token index added to the
    token embeddings, P^x + E(X_i) of §2.1) or `"none"`. Positions count from
    0 in document/sentence order, so padding at the end moves nothing.

    The paper does not say which "Pooling" it uses; the authors' public
    prototype pools with a global max over time, the default here
    (`pooling="max"`, over valid positions only). `"mean"` averages valid
    positions; `"attention"` is a learned single-head attention pooling
    (`MultiHeadPooling(num_heads=1)`, as in the hierarchical attention
    networks SHTE's predecessor SHA-NN builds on). Padded tokens and padded
    sentences never enter a pooling, a softmax, or a valid output.

    Each encoder block is `keras_hub.layers.TransformerEncoder` (post-norm,
    as Eq. 6-10); its per-head width is Dh = D / H (the paper uses
    d_k = 64 with d_e = 128, h = 6, i.e. h·d_k ≠ d_e; here the heads split D).

    Args:
        num_heads: H, attention heads of every encoder block (6 in the paper).
        intermediate_dim: d_ffw, hidden size of the word-level feed-forward
            networks (128 in the paper).
        num_word_layers: N, word-level encoder blocks (2 in the paper; 0
            pools the embeddings directly).
        num_sentence_layers: N̂, sentence-level encoder blocks (2 in the
            paper); at least 1 (its attention is the scoring signal).
        sentence_intermediate_dim: d_ffs, hidden size of the sentence-level
            feed-forward networks; defaults to `intermediate_dim`.
        position_encoding: `"none"`, `"sentence"` or `"sentence_and_word"`.
        pooling: `"max"`, `"mean"` or `"attention"` (word → sentence and
            sentence → document alike).
        dropout: dropout rate of the encoder blocks (and attention pooling).
        attention_dropout: dropout rate on the attention and pooling
            weights, or None (the default) for `dropout`.
        activation: activation of the feed-forward networks (ReLU in Eq. 8).
        layer_norm_epsilon: epsilon of the layer normalisations.
        max_wavelength: longest wavelength of the sinusoids (10000).
        kernel_initializer: initializer of every kernel.
        bias_initializer: initializer of every bias.

    Call arguments:
        inputs: float [B, P, T, D], embedded tokens of P sentences of T
            tokens each.
        token_mask: optional bool/0-1 int [B, P, T], True for real tokens;
            defaults to all real.
        paragraph_mask: optional bool/0-1 int [B, P], True for real
            sentences; defaults to "has at least one real token". When
            given, it is ANDed with the sentences derived from `token_mask`.
        training: bool, whether dropout is active.

    Returns:
        Tuple `(r, sentence_states, sentence_attention)`:
        r: float [B, D], the document (or summary) representation;
        sentence_states: float [B, P, D], the last sentence-level block's
            output (zeros for padded sentences);
        sentence_attention: float [B, H, P, P], the last sentence-level
            block's attention weights G_h (query rows × key columns); every
            real row sums to 1 over the real sentences, padded rows are 0.

    Example:
    >>> encoder = HierarchicalEncoder(num_heads=2, intermediate_dim=16)
    >>> x = np.random.uniform(size=(2, 3, 5, 8)).astype("float32")
    >>> mask = np.ones((2, 3, 5), "bool")
    >>> r, states, attention = encoder(x, token_mask=mask)
    >>> tuple(r.shape), tuple(states.shape), tuple(attention.shape)
    ((2, 8), (2, 3, 8), (2, 2, 3, 3))

    References:
        González et al. (2020), Extractive Summarization using Siamese
        Hierarchical Transformer Encoders, J. Intelligent & Fuzzy Systems
        39(2). Vaswani et al. (2017), Attention Is All You Need.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        num_word_layers=2,
        num_sentence_layers=2,
        sentence_intermediate_dim=None,
        position_encoding="sentence",
        pooling="max",
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-5,
        max_wavelength=10000,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if position_encoding not in POSITION_ENCODINGS:
            raise ValueError(
                f"HierarchicalEncoder: `position_encoding` must be one of "
                f"{POSITION_ENCODINGS}, received {position_encoding!r}."
            )
        if pooling not in POOLINGS:
            raise ValueError(
                f"HierarchicalEncoder: `pooling` must be one of {POOLINGS}, "
                f"received {pooling!r}."
            )
        num_word_layers = check_int("num_word_layers", num_word_layers, 0,
                                    owner="HierarchicalEncoder")
        num_sentence_layers = check_int(
            "num_sentence_layers", num_sentence_layers, 1, owner="HierarchicalEncoder",
            hint=" (the last sentence-level block's attention scores the sentences)")
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.num_word_layers = num_word_layers
        self.num_sentence_layers = num_sentence_layers
        self.sentence_intermediate_dim = sentence_intermediate_dim
        self.position_encoding = position_encoding
        self.pooling = pooling
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.max_wavelength = max_wavelength
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

        def encoder_block(dim, name):
            return TransformerEncoder(
                intermediate_dim=dim,
                num_heads=num_heads,
                dropout=dropout,
                attention_dropout=attention_dropout,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=_clone(self.kernel_initializer),
                bias_initializer=_clone(self.bias_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        def attention_pooling(name):
            return MultiHeadPooling(
                num_heads=1,
                dropout=dropout,
                attention_dropout=attention_dropout,
                kernel_initializer=_clone(self.kernel_initializer),
                bias_initializer=_clone(self.bias_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        self.word_position_encoding = None
        if position_encoding == "sentence_and_word":
            self.word_position_encoding = SinePositionEncoding(
                max_wavelength, dtype=self.dtype_policy, name="word_position_encoding"
            )
        self.sentence_position_encoding = None
        if position_encoding != "none":
            self.sentence_position_encoding = SinePositionEncoding(
                max_wavelength,
                dtype=self.dtype_policy,
                name="sentence_position_encoding",
            )
        self.word_encoder_layers = [
            encoder_block(intermediate_dim, f"word_encoder_layer_{i}")
            for i in range(num_word_layers)
        ]
        self.sentence_encoder_layers = [
            encoder_block(
                sentence_intermediate_dim or intermediate_dim,
                f"sentence_encoder_layer_{i}",
            )
            for i in range(num_sentence_layers)
        ]
        self.word_pooling = None
        self.sentence_pooling = None
        if pooling == "attention":
            self.word_pooling = attention_pooling("word_pooling")
            self.sentence_pooling = attention_pooling("sentence_pooling")

    def _check_shapes(self, inputs_shape, token_mask_shape, paragraph_mask_shape):
        shape = check_rank(self.name, "inputs", inputs_shape, 4, "[B,P,T,D]")
        if token_mask_shape is not None:
            check_rank(self.name, "token_mask", token_mask_shape, 3, "[B,P,T]")
            check_dims(self.name, "token_mask", token_mask_shape, shape[:3], "[B,P,T]")
        if paragraph_mask_shape is not None:
            check_rank(self.name, "paragraph_mask", paragraph_mask_shape, 2, "[B,P]")
            check_dims(
                self.name, "paragraph_mask", paragraph_mask_shape, shape[:2], "[B,P]"
            )
        return shape

    def build(self, inputs_shape, token_mask_shape=None, paragraph_mask_shape=None):
        batch, paragraphs, tokens, dim = self._check_shapes(
            inputs_shape, token_mask_shape, paragraph_mask_shape
        )
        if dim is None:
            raise ValueError(
                f"{self.name}: the last axis D of `inputs` [B,P,T,D] must be "
                f"known to build the layer, received shape {tuple(inputs_shape)}."
            )
        flat = None if batch is None or paragraphs is None else batch * paragraphs
        for layer in self.word_encoder_layers:
            layer.build((flat, tokens, dim))
        sentence_shape = (batch, paragraphs, dim)
        for layer in self.sentence_encoder_layers:
            layer.build(sentence_shape)
        if self.word_pooling is not None:
            self.word_pooling.build(
                (batch, paragraphs, tokens, dim), (batch, paragraphs, tokens)
            )
            self.sentence_pooling.build(sentence_shape, (batch, paragraphs))
        expect_width(self, "inputs", inputs_shape)
        self.built = True

    def _pool(self, pooling_layer, x, mask, training):
        if self.pooling == "attention":
            return pooling_layer(x, token_mask=mask, training=training)
        if self.pooling == "mean":
            return _masked_mean(x, mask)
        return _masked_max(x, mask)

    def call(self, inputs, token_mask=None, paragraph_mask=None, training=None):
        self._check_shapes(
            inputs.shape,
            None if token_mask is None else token_mask.shape,
            None if paragraph_mask is None else paragraph_mask.shape,
        )
        shape = ops.shape(inputs)
        batch, paragraphs, tokens, dim = shape[0], shape[1], shape[2], inputs.shape[-1]
        if token_mask is None:
            token_mask = ops.ones((batch, paragraphs, tokens), "bool")
        token_mask = as_bool_mask(token_mask)
        if paragraph_mask is not None:
            token_mask = merge_masks(token_mask, as_bool_mask(paragraph_mask)[:, :, None])
        sentence_mask = ops.any(token_mask, axis=-1)  # [B, P]

        # Word level (Eq. 4-10), all sentences at once as [B*P, T, D].
        x = ops.reshape(inputs, (-1, tokens, dim))
        flat_mask = ops.reshape(token_mask, (-1, tokens))
        if self.word_position_encoding is not None:
            x = x + self.word_position_encoding(x)
        for layer in self.word_encoder_layers:
            x = layer(x, padding_mask=flat_mask, training=training)
        x = ops.reshape(x, (batch, paragraphs, tokens, dim))
        sentences = self._pool(self.word_pooling, x, token_mask, training)  # s_i

        # Sentence level (Eq. 12-18): S^0 = P^s + S.
        if self.sentence_position_encoding is not None:
            sentences = sentences + self.sentence_position_encoding(sentences)
        for layer in self.sentence_encoder_layers[:-1]:
            sentences = layer(sentences, padding_mask=sentence_mask, training=training)
        sentences, attention = self.sentence_encoder_layers[-1](
            sentences,
            padding_mask=sentence_mask,
            training=training,
            return_attention_scores=True,
        )
        document = self._pool(self.sentence_pooling, sentences, sentence_mask, training)

        valid = ops.cast(sentence_mask, sentences.dtype)
        sentences = sentences * valid[:, :, None]
        attention = attention * ops.cast(valid, attention.dtype)[:, None, :, None]
        return document, sentences, attention

    def compute_output_shape(
        self, inputs_shape, token_mask_shape=None, paragraph_mask_shape=None
    ):
        batch, paragraphs, _, dim = self._check_shapes(
            inputs_shape, token_mask_shape, paragraph_mask_shape
        )
        return (
            (batch, dim),
            (batch, paragraphs, dim),
            (batch, self.num_heads, paragraphs, paragraphs),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "num_word_layers": self.num_word_layers,
                "num_sentence_layers": self.num_sentence_layers,
                "sentence_intermediate_dim": self.sentence_intermediate_dim,
                "position_encoding": self.position_encoding,
                "pooling": self.pooling,
                "dropout": self.dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "max_wavelength": self.max_wavelength,
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
