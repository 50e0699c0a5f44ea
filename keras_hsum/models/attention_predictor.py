"""PHT's attention-prediction model and its labels (Ma & Zong, §4.2.1)."""

import keras
from keras import ops

from keras_hsum.features import DECODER_TOKENS
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TARGET_MASK
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import masked_softmax
from keras_hsum.layers.transformer_encoder import TransformerEncoder
from keras_hsum.models.first_call import call_without_unbuilt_warnings
from keras_hsum.models.summarizer import decoder_padding_mask
from keras_hsum.models.summarizer import required


def normalised_paragraph_attention(attention, target_mask, paragraph_mask=None):
    """Eq. 15 from per-layer attention: η [B,P].

    η_p = Σ_l Σ_t α^l_{t,p} / Σ_p' Σ_l Σ_t α^l_{t,p'}, t over the real target
    positions (`target_mask`), l over the decoder layers (footnote 3: "the
    final paragraph attention are the summation of paragraph attentions in
    each layer").

    Args:
        attention: float [B,L,S,P], per-layer paragraph attention.
        target_mask: bool/int [B,S], True at the target positions to count.
        paragraph_mask: optional bool/int [B,P]; padded paragraphs get 0.

    Returns:
        float32 [B,P], summing to 1 over the real paragraphs (all 0 for an
        example with no real target position or paragraph).
    """
    attention = ops.cast(attention, "float32")
    weights = ops.cast(as_bool_mask(target_mask), "float32")
    totals = ops.einsum("blsp,bs->bp", attention, weights)
    if paragraph_mask is not None:
        totals = totals * ops.cast(as_bool_mask(paragraph_mask), "float32")
    norm = ops.sum(totals, axis=-1, keepdims=True)
    return ops.where(norm > 0, totals / ops.maximum(norm, 1e-12), 0.0)


def attention_labels(pht_model, inputs, memory=None):
    """The attention predictor's labels: the trained PHT's η [B,P].

    Runs `pht_model` (a `ParallelHierarchicalTransformer`) teacher-forced on
    the reference summary (inference mode, no dropout), sums its paragraph
    attention A_para over the decoder layers and over the real target
    positions, and normalises over paragraphs (Ma & Zong Eqs. 14-16).

    Args:
        pht_model: a trained `ParallelHierarchicalTransformer`.
        inputs: dict with the PHT inputs (`tokens` [B,P,T], masks) plus
            `decoder_tokens` int [B,S] and optional `target_mask` bool [B,S]
            (as `keras_hsum.data.training_pairs` gives; default: the
            positions whose decoder token is not padding).
        memory: optional `pht_model.encode(inputs)` already computed (e.g.
            to reuse Φ as the predictor's inputs); encoded here when None.

    Returns:
        float32 [B,P] η: non-negative, 0 on padded paragraphs, summing to 1
        over the real ones.
    """
    decoder_tokens = required(pht_model, inputs, DECODER_TOKENS, "int [B,S]")
    if memory is None:
        memory = pht_model.encode(inputs, training=False)
    _, attention = pht_model.decode_with_attention(
        decoder_tokens, memory, training=False
    )
    if inputs.get(TARGET_MASK) is not None:
        target_mask = inputs[TARGET_MASK]
    else:
        target_mask = decoder_padding_mask(decoder_tokens, pht_model.pad_id)
    return normalised_paragraph_attention(
        attention, target_mask, memory[PARAGRAPH_MASK]
    )


@keras.saving.register_keras_serializable(package="keras_hsum")
class AttentionPredictor(keras.Model):
    """Predicts PHT's optimal paragraph-attention distribution η̂ [B,P].

    Ma & Zong §4.2.1: "the inputs of the attention-prediction model are
    extracted from the PHT, which are paragraph embeddings Φ in Eq. 6" --
    so this model has no encoder of its own: it reads the (frozen) trained
    PHT's Φ = `ParallelHierarchicalTransformer.encode(inputs)
    ["paragraph_memory"]` (ranking encoding included). "Paragraph embeddings
    are first input to a Transformer-encoder to obtain the context-aware
    paragraph embeddings ... then linearly transformed and converted to m
    units before normalized by softmax": `num_layers` keras-hub
    `TransformerEncoder` layers over the P paragraphs (masked), a Dense to
    one score per paragraph, and a softmax over the real paragraphs. Trained
    with MSE against `attention_labels` (§4.2.1: "the prediction is
    regression").

    Args:
        num_heads: H of the encoder layers (must divide Φ's width D).
        intermediate_dim: FFN width.
        num_layers: encoder layers (paper: 2).
        dropout: dropout rate (paper: 0.5).
        attention_dropout: dropout rate on the attention probabilities, or
            None (the default, the papers' setting) for `dropout`; 0 lets
            keras-hub's attention layers run through `keras.ops.dot_product_attention`
            (fused cuDNN attention on a GPU).
        layer_norm_epsilon: LayerNorm epsilon.

    Inputs (dict):
        paragraph_embeddings: float [B,P,D], PHT's Φ.
        paragraph_mask: optional bool [B,P]; default all paragraphs real.

    Returns:
        float32 η̂ [B,P]: a distribution over the real paragraphs (0 on
        padded ones).

    References:
        Ma & Zong, Parallel Hierarchical Transformer with Attention Alignment
        for Abstractive Multi-Document Summarization, §4.2.1 and §5.2.
    """

    def __init__(
        self,
        num_heads=4,
        intermediate_dim=1024,
        num_layers=2,
        dropout=0.5,
        layer_norm_epsilon=1e-5,
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, num_heads=num_heads, intermediate_dim=intermediate_dim,
            num_layers=num_layers, dropout=dropout, attention_dropout=attention_dropout,
            optional=("attention_dropout",),
        )
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.num_layers = num_layers
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.encoder_layers = [
            TransformerEncoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                attention_dropout=attention_dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=self.dtype_policy,
                name=f"encoder_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.score_dense = keras.layers.Dense(
            1, dtype=self.dtype_policy, name="score_dense"
        )

    def __call__(self, *args, **kwargs):
        # The model's input errors without Keras' "unbuilt state" warnings
        # on a first call (keras_hsum.models.first_call).
        return call_without_unbuilt_warnings(self, super().__call__, *args, **kwargs)

    def call(self, inputs, training=False):
        if not isinstance(inputs, dict):
            raise ValueError(
                f"{self.name}: inputs must be a dict with `paragraph_embeddings` "
                f"[B,P,D] (PHT's Φ) and `paragraph_mask` [B,P]; received "
                f"{type(inputs).__name__}."
            )
        phi = required(self, inputs, "paragraph_embeddings", "float [B,P,D] (PHT's Φ)")
        if len(phi.shape) != 3:
            raise ValueError(
                f"{self.name}: `paragraph_embeddings` must be float [B,P,D], "
                f"received shape {tuple(phi.shape)}. Pass "
                "ParallelHierarchicalTransformer.encode(inputs)"
                "['paragraph_memory']."
            )
        if phi.shape[-1] is not None and phi.shape[-1] % self.num_heads:
            raise ValueError(
                f"{self.name}: the width D={phi.shape[-1]} of "
                f"`paragraph_embeddings` must be divisible by "
                f"num_heads={self.num_heads}; build the predictor with a head "
                "count that divides the PHT's hidden_dim."
            )
        if inputs.get(PARAGRAPH_MASK) is not None:
            mask = as_bool_mask(inputs[PARAGRAPH_MASK])
        else:
            mask = ops.ones(ops.shape(phi)[:2], dtype="bool")
        x = phi
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=mask, training=training)
        scores = ops.cast(ops.squeeze(self.score_dense(x), axis=-1), "float32")
        return masked_softmax(scores, mask, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "num_layers": self.num_layers,
                "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "attention_dropout": self.attention_dropout,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_hsum")
class ParagraphAttentionMSE(keras.losses.Loss):
    """Squared error per paragraph between η and η̂, for `AttentionPredictor`.

    Returns (η̂_p − η_p)² per paragraph [B,P] (no mean over P), so that
    `sample_weight` = `paragraph_mask` [B,P] drops the padded paragraphs:
    with the default reduction the batch loss is Σ mask·(η̂ − η)² / (B·P).
    (Keras' `MeanSquaredError` averages over the last axis first, which
    leaves no per-paragraph value to weight.)

    Call arguments:
        y_true: float [B,P] η.
        y_pred: float [B,P] η̂.
        sample_weight: float [B,P], the paragraph mask.
    """

    def __init__(
        self,
        reduction="sum_over_batch_size",
        name="paragraph_attention_mse",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        difference = ops.cast(y_pred, "float32") - ops.cast(y_true, "float32")
        return ops.square(difference)
