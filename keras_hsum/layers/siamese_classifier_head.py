"""SHTE's siamese classifier head and sentence scoring (González et al., 2020, §2.3-2.4)."""

import keras
from keras import ops

from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_rank
from keras_hsum.layers.input_checks import expect_width
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.packed_dropout import dropout_layer


def _clone(initializer):
    """A fresh initializer from `initializer`'s config (seeded ones differ per layer)."""
    return keras.initializers.get(keras.initializers.serialize(initializer))


def sentence_scores(attention, paragraph_mask=None, head=None):
    """SHTE's sentence scores from the last sentence-level self-attention.

    González et al. (2020), Eq. 21-23: G_i is head i's attention matrix over
    the document's sentences, H = (1/h) Σ_i G_i is the head average (Eq. 22)
    and the score of sentence j is the mean of column j over the rows,
    α_j = (1/P) Σ_i H_ij (Eq. 23): how much, on average, the other sentences
    of the document attend to sentence j. With padding, the mean runs over
    the VALID query rows only, α_j = Σ_i m_i H_ij / Σ_i m_i, and padded
    sentences get α_j = 0. A document with no valid sentence gets all zeros.
    The paper's ablation (Table 2) also scores with a single head:
    `head=k` uses G_k instead of H.

    Args:
        attention: float [B, H, P, P], attention weights (rows = queries,
            columns = keys), e.g. the third output of `HierarchicalEncoder`.
        paragraph_mask: optional bool/int [B, P], 1 for real sentences;
            None means every sentence is real.
        head: None to average all heads (the paper's choice), or an int in
            [0, H) to score with that head alone.

    Returns:
        float32 [B, P], the score α of every sentence; rank sentences by it
        and extract the top k (k = 3 in the paper).

    Example:
    >>> attention = np.full((1, 2, 3, 3), 1.0 / 3.0, "float32")
    >>> np.asarray(sentence_scores(attention, np.array([[1, 1, 1]])))
    array([[0.33333334, 0.33333334, 0.33333334]], dtype=float32)

    References:
        González et al. (2020), Extractive Summarization using Siamese
        Hierarchical Transformer Encoders, J. Intelligent & Fuzzy Systems.
    """
    name = "sentence_scores"
    shape = check_rank(name, "attention", attention, 4, "[B,H,P,P]")
    check_dims(
        name, "attention", shape, (None, None, shape[3], shape[2]), "[B,H,P,P]"
    )
    num_heads = shape[1]
    if head is not None:
        if not isinstance(head, int) or isinstance(head, bool):
            raise ValueError(
                f"{name}: `head` must be None (average all heads) or an int "
                f"head index, received {head!r}."
            )
        if num_heads is not None and not 0 <= head < num_heads:
            raise ValueError(
                f"{name}: `head` must be in [0, {num_heads}) for `attention` "
                f"of shape [B,H,P,P] = {shape}, received head={head}."
            )
    attention = ops.cast(attention, "float32")
    if head is None:
        averaged = ops.mean(attention, axis=1)  # Eq. 22: H = (1/h) Σ_i G_i.
    else:
        averaged = attention[:, head]
    if paragraph_mask is None:
        return ops.mean(averaged, axis=1)  # Eq. 23: α = (1/P) Σ_i H_i.
    check_dims(
        name, "paragraph_mask", paragraph_mask, (shape[0], shape[2]), "[B,P]"
    )
    mask = ops.cast(as_bool_mask(paragraph_mask), "float32")
    totals = ops.sum(averaged * mask[:, :, None], axis=1)
    count = ops.maximum(ops.sum(mask, axis=1, keepdims=True), 1.0)
    return totals / count * mask


@keras.saving.register_keras_serializable(package="keras_hsum")
class SiameseClassifierHead(keras.layers.Layer):
    """SHTE's classifier: does summary p fit document r?

    González et al. (2020), Eq. 20: the document representation r and the
    summary representation p (both from the same, weight-shared
    `HierarchicalEncoder`) interact as [r; p; |r − p|] (following Conneau
    et al., 2017), which a single-hidden-layer feed-forward network maps to
    two classes: ŷ = softmax(W_2 max(0, W_1 [r; p; |r − p|] + b_1) + b_2),
    y = 1 for a document with its own summary, y = 0 for a document with a
    random other summary. This layer returns the logits
    W_2 max(0, W_1 [r; p; |r − p|] + b_1) + b_2 (train with
    `from_logits=True`); the softmax is left to the loss.

    The sentence scores of §2.4 (Eq. 21-23) are the module function
    `sentence_scores`, also reachable as `SiameseClassifierHead.sentence_scores`.

    Args:
        hidden_dim: d_h, the width of the hidden ReLU layer (512 in the paper).
        dropout: dropout rate on the hidden ReLU activations (the paper
            reports none).
        kernel_initializer: initializer of W_1 and W_2.
        bias_initializer: initializer of b_1 and b_2.

    Call arguments:
        document: float [B, D], the document representation r.
        summary: float [B, D], the summary representation p.
        training: bool, whether dropout is active.

    Returns:
        float [B, 2], class logits (index 1 = "the summary fits").

    Example:
    >>> head = SiameseClassifierHead(hidden_dim=16)
    >>> logits = head(np.ones((2, 8), "float32"), np.zeros((2, 8), "float32"))
    >>> tuple(logits.shape)
    (2, 2)

    References:
        González et al. (2020), Extractive Summarization using Siamese
        Hierarchical Transformer Encoders, J. Intelligent & Fuzzy Systems.
    """

    sentence_scores = staticmethod(sentence_scores)

    def __init__(
        self,
        hidden_dim=512,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.hidden_dense = keras.layers.Dense(
            hidden_dim,
            activation="relu",
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="hidden_dense",
        )
        self.hidden_dropout = dropout_layer(
            dropout, dtype=self.dtype_policy, name="hidden_dropout"
        )
        self.output_dense = keras.layers.Dense(
            2,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="output_dense",
        )

    def _check_shapes(self, document_shape, summary_shape):
        document_shape = check_rank(self.name, "document", document_shape, 2, "[B,D]")
        summary_shape = check_rank(self.name, "summary", summary_shape, 2, "[B,D]")
        check_dims(self.name, "summary", summary_shape, document_shape, "[B,D] like `document`")
        return document_shape

    def build(self, document_shape, summary_shape):
        document_shape = self._check_shapes(document_shape, summary_shape)
        dim = document_shape[-1]
        if dim is None:
            raise ValueError(
                f"{self.name}: the last axis D of `document` [B,D] must be "
                f"known to build the layer, received shape {document_shape}."
            )
        self.hidden_dense.build((document_shape[0], 3 * dim))
        self.hidden_dropout.build((document_shape[0], self.hidden_dim))
        self.output_dense.build((document_shape[0], self.hidden_dim))
        expect_width(self, "document", document_shape)
        self.built = True

    def call(self, document, summary, training=None):
        self._check_shapes(document.shape, summary.shape)
        interaction = ops.concatenate(
            [document, summary, ops.abs(document - summary)], axis=-1
        )
        hidden = self.hidden_dense(interaction)
        hidden = self.hidden_dropout(hidden, training=training)
        return self.output_dense(hidden)

    def compute_output_shape(self, document_shape, summary_shape):
        return (document_shape[0], 2)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
            }
        )
        return config
