"""HT's learned paragraph ranker (Liu & Lapata 2019, §3 "Paragraph Ranking")."""

import keras
from keras import ops

from keras_hsum.features import CONTEXT_TOKENS
from keras_hsum.features import GRAPH
from keras_hsum.features import PARAGRAPH_FEATURES
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.input_checks import check_model_features
from keras_hsum.layers.input_checks import check_rank
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import large_negative
from keras_hsum.layers.packed_dropout import dropout_layer
from keras_hsum.models.first_call import call_without_unbuilt_warnings
from keras_hsum.models.summarizer import PAD_ID
from keras_hsum.models.summarizer import required


def masked_max(x, mask, axis):
    """Max of `x` over `axis` among positions where `mask` is True.

    Args:
        x: float [..., N, F] (with `axis` the N axis).
        mask: bool [..., N], broadcastable after adding a trailing axis.
        axis: the axis to pool.

    Returns:
        float [..., F]; 0 where no position is valid (no -inf, no NaN).
    """
    mask = ops.expand_dims(as_bool_mask(mask), -1)
    filled = ops.where(mask, x, ops.cast(large_negative(x.dtype), x.dtype))
    pooled = ops.max(filled, axis=axis)
    any_valid = ops.any(mask, axis=axis)
    return ops.where(any_valid, pooled, ops.zeros_like(pooled))


@keras.saving.register_keras_serializable(package="keras_hsum")
class ParagraphRanker(keras.Model):
    """HT's logistic-regression paragraph ranker over LSTM encodings.

    Liu & Lapata (2019, §3): the title (or query) T = (w_t1..w_tm) and every
    paragraph P_i = (w_p1..w_pn) are embedded (one shared embedding) and
    read by LSTMs, giving u_t1..u_tm and u_p1..u_pn. Max-pooling over the
    title gives a fixed vector u_t = maxpool(u_t1..u_tm). u_t is
    concatenated to every paragraph token vector and a non-linear map
    extracts title-paragraph matching features; a second max-pooling gives
    the paragraph vector, and a logistic regression its score:

        p_i = maxpool_j tanh(W_1 [u_pj ; u_t] + b_1),
        s_i = sigmoid(w_2 · p_i + b_2).

    Trained with binary cross-entropy against y_i = ROUGE-2 recall of P_i
    against the gold summary (pipeline extra `ranker_targets`), weighted by
    `paragraph_mask` (`ParagraphBinaryCrossEntropy`). The title and the
    paragraphs have separate LSTMs (the paper's two sequences); the paper
    does not give their sizes: `hidden_dim` units each.

    Args:
        vocabulary_size: V.
        embedding_dim: E, width of the shared token embedding.
        hidden_dim: LSTM units of the title and paragraph LSTMs.
        feature_dim: width of the matching features p_i.
        dropout: dropout on the embeddings and the LSTM outputs.
        pad_id: the pad id (default token mask: tokens != pad_id).

    Inputs (dict):
        tokens: int [B,P,T] paragraphs.
        token_mask: optional bool [B,P,T]; default tokens != pad.
        paragraph_mask: optional bool [B,P]; default any(token_mask, -1).
        context_tokens: int [B,C] title/query tokens (pad = pad_id); an
            example without one gets u_t = 0.

    Returns:
        float32 scores [B,P] in (0,1) for real paragraphs; exactly 0 for
        padded ones (so they rank last).

    References:
        Liu & Lapata (2019), Hierarchical Transformers for Multi-Document
        Summarization, ACL (§3, paragraph ranking).
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_dim=256,
        hidden_dim=256,
        feature_dim=256,
        dropout=0.1,
        pad_id=PAD_ID,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, embedding_dim=embedding_dim,
            hidden_dim=hidden_dim, feature_dim=feature_dim, dropout=dropout,
        )
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.feature_dim = feature_dim
        self.dropout = dropout
        self.pad_id = pad_id
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size, embedding_dim, dtype=self.dtype_policy, name="token_embedding"
        )
        self.embedding_dropout = dropout_layer(
            dropout, dtype=self.dtype_policy, name="embedding_dropout"
        )
        self.title_lstm = keras.layers.LSTM(
            hidden_dim, return_sequences=True, dtype=self.dtype_policy, name="title_lstm"
        )
        self.paragraph_lstm = keras.layers.LSTM(
            hidden_dim,
            return_sequences=True,
            dtype=self.dtype_policy,
            name="paragraph_lstm",
        )
        self.state_dropout = dropout_layer(
            dropout, dtype=self.dtype_policy, name="state_dropout"
        )
        self.matching = keras.layers.Dense(
            feature_dim, activation="tanh", dtype=self.dtype_policy, name="matching"
        )
        self.scorer = keras.layers.Dense(1, dtype=self.dtype_policy, name="scorer")

    def _read(self, tokens, mask, lstm, training):
        x = self.embedding_dropout(self.token_embedding(tokens), training=training)
        states = lstm(x, mask=mask, training=training)
        return self.state_dropout(states, training=training)

    def title_vector(self, context_tokens, training=False):
        """u_t float [B,hidden_dim]: max-pooled title LSTM states (0 if empty)."""
        context_tokens = ops.convert_to_tensor(context_tokens)
        mask = ops.not_equal(context_tokens, self.pad_id)
        states = self._read(context_tokens, mask, self.title_lstm, training)
        return masked_max(states, mask, axis=1)

    def score(self, paragraph_states, token_mask, title_vector, paragraph_mask=None):
        """The scoring head, given the LSTM encodings.

        Args:
            paragraph_states: float [B,P,T,hidden_dim], u_pj per paragraph.
            token_mask: bool [B,P,T].
            title_vector: float [B,hidden_dim], u_t.
            paragraph_mask: optional bool [B,P].

        Returns:
            float32 [B,P]: sigmoid(w_2 · maxpool_j tanh(W_1[u_pj; u_t] + b_1)
            + b_2); 0 at padded paragraphs.
        """
        token_mask = as_bool_mask(token_mask)
        shape = ops.shape(paragraph_states)
        title = ops.broadcast_to(
            title_vector[:, None, None, :], (shape[0], shape[1], shape[2], shape[3])
        )
        features = self.matching(ops.concatenate([paragraph_states, title], axis=-1))
        pooled = masked_max(features, token_mask, axis=2)  # [B,P,F]
        scores = ops.cast(ops.sigmoid(self.scorer(pooled)[..., 0]), "float32")
        valid = ops.any(token_mask, axis=-1)
        if paragraph_mask is not None:
            valid = ops.logical_and(valid, as_bool_mask(paragraph_mask))
        return ops.where(valid, scores, ops.zeros_like(scores))

    def __call__(self, inputs, *args, **kwargs):
        # The model's input errors without Keras' "unbuilt state" warnings
        # on a first call (keras_hsum.models.first_call).
        check_model_features(self, inputs)
        return call_without_unbuilt_warnings(self, super().__call__, inputs, *args, **kwargs)

    def call(self, inputs, training=False):
        tokens = ops.convert_to_tensor(required(self, inputs, TOKENS, "int [B,P,T]"))
        if len(tokens.shape) != 3:
            raise ValueError(
                f"{self.name}: `tokens` must be int [B,P,T] (the 'paragraphs' "
                f"family), received shape {tuple(tokens.shape)}."
            )
        context_tokens = required(self, inputs, CONTEXT_TOKENS, "int [B,C]")
        if inputs.get(TOKEN_MASK) is not None:
            token_mask = as_bool_mask(inputs[TOKEN_MASK])
        else:
            token_mask = ops.not_equal(tokens, self.pad_id)
        paragraph_mask = inputs.get(PARAGRAPH_MASK)
        if paragraph_mask is not None:
            token_mask = ops.logical_and(
                token_mask, as_bool_mask(paragraph_mask)[:, :, None]
            )
        shape = ops.shape(tokens)
        batch, paragraphs, length = shape[0], shape[1], shape[2]
        flat_tokens = ops.reshape(tokens, (batch * paragraphs, length))
        flat_mask = ops.reshape(token_mask, (batch * paragraphs, length))
        states = self._read(flat_tokens, flat_mask, self.paragraph_lstm, training)
        states = ops.reshape(states, (batch, paragraphs, length, self.hidden_dim))
        title = self.title_vector(context_tokens, training=training)
        return self.score(states, token_mask, title, paragraph_mask)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_dim": self.embedding_dim,
                "hidden_dim": self.hidden_dim,
                "feature_dim": self.feature_dim,
                "dropout": self.dropout,
                "pad_id": self.pad_id,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_hsum")
class ParagraphBinaryCrossEntropy(keras.losses.Loss):
    """Binary cross-entropy per paragraph against soft targets in [0,1].

    l_i = −(y_i log s_i + (1 − y_i) log(1 − s_i)), s clipped to
    [ε, 1 − ε]. Returns [B,P] (no mean over paragraphs), so that
    `paragraph_mask` [B,P] as `sample_weight` drops padded paragraphs; with
    the default reduction the batch loss is Σ mask·l / (B·P).

    Call arguments:
        y_true: float [B,P] targets (ROUGE-2 recall).
        y_pred: float [B,P] scores in (0,1).
        sample_weight: float [B,P], the paragraph mask.
    """

    def __init__(
        self,
        epsilon=1e-6,
        reduction="sum_over_batch_size",
        name="paragraph_binary_cross_entropy",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.epsilon = epsilon

    def call(self, y_true, y_pred):
        y_pred = ops.clip(ops.cast(y_pred, "float32"), self.epsilon, 1.0 - self.epsilon)
        y_true = ops.cast(y_true, "float32")
        return -(y_true * ops.log(y_pred) + (1.0 - y_true) * ops.log(1.0 - y_pred))

    def get_config(self):
        config = super().get_config()
        config["epsilon"] = self.epsilon
        return config


def rerank_paragraphs(scores, paragraph_mask):
    """Paragraph indices by decreasing learned score, padding last.

    Ties keep reading order (lower index first), and padded paragraphs
    follow every real one in their original order.

    Args:
        scores: float [B,P] (e.g. `ParagraphRanker` outputs).
        paragraph_mask: bool [B,P].

    Returns:
        int32 [B,P]: `indices[b, r]` is the paragraph ranked r-th.
    """
    scores = ops.cast(scores, "float32")
    mask = as_bool_mask(paragraph_mask)
    if tuple(scores.shape) != tuple(mask.shape) or len(scores.shape) != 2:
        raise ValueError(
            "rerank_paragraphs: `scores` and `paragraph_mask` must both be "
            f"[B,P], received {tuple(scores.shape)} and {tuple(mask.shape)}."
        )
    # Padded paragraphs get a key below every real score.
    floor = ops.min(scores) - 1.0
    key = ops.where(mask, scores, floor)
    _, indices = ops.top_k(key, k=ops.shape(scores)[1], sorted=True)
    return ops.cast(indices, "int32")


def take_paragraphs(features, indices, names=PARAGRAPH_FEATURES):
    """Reorders the paragraph-major features of a batch by `indices` [B,P].

    Args:
        features: a dict of tensors. Those named in `names` have the
            paragraphs on axis 1 ([B,P,...]) and are gathered along it; a
            [B,P,P] `graph` is reordered along both paragraph axes. Other
            features (context_tokens, decoder_tokens, ...) pass through.
        indices: int [B,P] from `rerank_paragraphs`.
        names: the paragraph-major feature names.

    Returns:
        A new dict.
    """
    indices = ops.convert_to_tensor(indices, "int32")
    check_rank("take_paragraphs", "indices", indices.shape, 2, "[B,P]")
    out = dict(features)
    for name in names:
        if name not in features:
            continue
        value = ops.convert_to_tensor(features[name])
        # A [1,P] index (or another P) would be broadcast, not refused.
        check_dims("take_paragraphs", "indices", indices.shape, tuple(value.shape[:2]),
                   f"[B,P] of `{name}`")
        index = ops.reshape(
            indices, tuple(ops.shape(indices)) + (1,) * (len(value.shape) - 2)
        )
        index = ops.broadcast_to(index, ops.shape(value))
        value = ops.take_along_axis(value, index, axis=1)
        if name == GRAPH:
            value = ops.take_along_axis(
                value, ops.broadcast_to(indices[:, None, :], ops.shape(value)), axis=2
            )
        out[name] = value
    return out
