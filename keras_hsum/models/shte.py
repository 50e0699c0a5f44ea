"""SHTE: Siamese Hierarchical Transformer Encoders (González et al., 2020)."""

import keras
from keras import ops

from keras_hsum.checks import check_int
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import SUMMARY_PARAGRAPH_MASK
from keras_hsum.features import SUMMARY_TOKENS
from keras_hsum.features import SUMMARY_TOKEN_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.layers.hierarchical_encoder import HierarchicalEncoder
from keras_hsum.layers.hierarchical_encoder import POOLINGS
from keras_hsum.layers.hierarchical_encoder import POSITION_ENCODINGS
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.input_checks import check_model_features
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import merge_masks
from keras_hsum.layers.siamese_classifier_head import SiameseClassifierHead
from keras_hsum.layers.siamese_classifier_head import sentence_scores
from keras_hsum.models.first_call import call_without_unbuilt_warnings

DOCUMENT_KEYS = (TOKENS, TOKEN_MASK, PARAGRAPH_MASK)
SUMMARY_KEYS = (SUMMARY_TOKENS, SUMMARY_TOKEN_MASK, SUMMARY_PARAGRAPH_MASK)


@keras.saving.register_keras_serializable(package="keras_hsum")
class SHTE(keras.Model):
    """SHTE's siamese classifier and its attention-based sentence extractor.

    González et al. (2020) train a binary classifier on (document, summary)
    pairs: y = 1 when the summary is the document's own, y = 0 when it is
    another document's (§2.3, §3.3). Both sides of a pair go through ONE
    word embedding E and ONE `HierarchicalEncoder` (the siamese branches
    share every weight, Eq. 4-19): words → sentence vectors → document
    representation r [B,D] and summary representation p [B,D]. A
    `SiameseClassifierHead` maps [r; p; |r − p|] to two logits (Eq. 20).

    After training, the classifier is not used: `extract` encodes the
    document alone and scores each sentence by how much the other sentences
    attend to it in the last sentence-level block (Eq. 21-23,
    `sentence_scores`), then keeps the k best (k = 3 in the paper), in
    document order.

    The paper's ablation (Table 2) is reachable through two options:
    `position_encoding` (`"none"`, `"sentence"` — the paper's best —, or
    `"sentence_and_word"`) and `score_head` (None averages all heads, the
    paper's choice; an int scores with that head alone).

    Args:
        vocabulary_size: V, rows of the shared embedding E.
        hidden_dim: D = d_e, embedding and encoder width (128 in the paper).
        num_heads: H, attention heads of every encoder block (6 in the
            paper; the heads split D, so Dh = D // H).
        intermediate_dim: d_ffw, word-level feed-forward width (128).
        sentence_intermediate_dim: d_ffs, sentence-level feed-forward width
            (128); None uses `intermediate_dim`.
        num_word_layers: N, word-level encoder blocks (2).
        num_sentence_layers: N̂, sentence-level encoder blocks (2, >= 1).
        classifier_hidden_dim: d_h, hidden ReLU width of the classifier (512).
        position_encoding: `"none"`, `"sentence"` or `"sentence_and_word"`.
        pooling: `"max"`, `"mean"` or `"attention"` (see
            `HierarchicalEncoder`).
        score_head: None (mean of the heads, Eq. 22) or an int in [0, H)
            (one head's attention scores the sentences).
        dropout: dropout rate of the encoder blocks and the classifier's
            hidden layer (the paper reports none).
        attention_dropout: dropout rate on the encoder blocks' attention
            and pooling weights, or None (the default) for `dropout`.
        pad_id: the padding token id; tokens equal to it are masked when no
            token mask is given.

    Inputs (dict; call):
        tokens: int [B,P,T], the document's P sentences of T tokens (the
            `"sentences"` family of `keras_hsum.data.make_dataset`).
        token_mask: optional bool [B,P,T], True for real tokens; default
            `tokens != pad_id`.
        paragraph_mask: optional bool [B,P], True for real sentences;
            default: sentences with at least one real token.
        summary_tokens: int [B,Q,T'], the candidate summary's Q sentences.
        summary_token_mask: optional bool [B,Q,T']; default
            `summary_tokens != pad_id`.
        summary_paragraph_mask: optional bool [B,Q].
        Other keys (e.g. `document_ids`) are ignored.

    Returns (call):
        float logits [B,2]; index 1 = "the summary belongs to the document".

    Example:
    >>> model = SHTE(vocabulary_size=50, hidden_dim=8, num_heads=2,
    ...              intermediate_dim=16, classifier_hidden_dim=8)
    >>> tokens = np.random.randint(1, 50, (2, 4, 6))
    >>> logits = model({"tokens": tokens, "summary_tokens": tokens[:, :2]})
    >>> indices, scores, all_scores = model.extract({"tokens": tokens}, k=3)
    >>> tuple(logits.shape), tuple(indices.shape), tuple(all_scores.shape)
    ((2, 2), (2, 3), (2, 4))

    References:
        González, Segarra, García-Granada, Sanchis & Hurtado (2020),
        Extractive Summarization using Siamese Hierarchical Transformer
        Encoders, Journal of Intelligent & Fuzzy Systems 39(2).
        Conneau et al. (2017) for the [r; p; |r − p|] interaction.
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim=128,
        num_heads=6,
        intermediate_dim=128,
        sentence_intermediate_dim=None,
        num_word_layers=2,
        num_sentence_layers=2,
        classifier_hidden_dim=512,
        position_encoding="sentence",
        pooling="max",
        score_head=None,
        dropout=0.0,
        pad_id=0,
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, hidden_dim=hidden_dim, num_heads=num_heads,
            intermediate_dim=intermediate_dim, sentence_intermediate_dim=sentence_intermediate_dim,
            num_word_layers=num_word_layers, num_sentence_layers=num_sentence_layers,
            classifier_hidden_dim=classifier_hidden_dim, dropout=dropout,
            attention_dropout=attention_dropout,
            optional=("sentence_intermediate_dim", "attention_dropout"),
        )
        if position_encoding not in POSITION_ENCODINGS:
            raise ValueError(
                f"SHTE: `position_encoding` must be one of {POSITION_ENCODINGS} "
                f"(the paper's ablation), received {position_encoding!r}."
            )
        if pooling not in POOLINGS:
            raise ValueError(
                f"SHTE: `pooling` must be one of {POOLINGS}, received {pooling!r}."
            )
        if score_head is not None and (
            isinstance(score_head, bool)
            or not isinstance(score_head, int)
            or not 0 <= score_head < num_heads
        ):
            raise ValueError(
                "SHTE: `score_head` must be None (average the heads, Eq. 22) "
                f"or an int head index in [0, {num_heads}), received "
                f"{score_head!r}."
            )
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.sentence_intermediate_dim = sentence_intermediate_dim
        self.num_word_layers = num_word_layers
        self.num_sentence_layers = num_sentence_layers
        self.classifier_hidden_dim = classifier_hidden_dim
        self.position_encoding = position_encoding
        self.pooling = pooling
        self.score_head = score_head
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.pad_id = pad_id

        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            hidden_dim,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.encoder = HierarchicalEncoder(
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            num_word_layers=num_word_layers,
            num_sentence_layers=num_sentence_layers,
            sentence_intermediate_dim=sentence_intermediate_dim,
            position_encoding=position_encoding,
            pooling=pooling,
            dropout=dropout,
            attention_dropout=attention_dropout,
            dtype=self.dtype_policy,
            name="encoder",
        )
        self.classifier = SiameseClassifierHead(
            hidden_dim=classifier_hidden_dim,
            dropout=dropout,
            dtype=self.dtype_policy,
            name="classifier",
        )

    def _get(self, inputs, name, symbols, hint):
        if not isinstance(inputs, dict) or name not in inputs:
            received = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise ValueError(
                f"{self.name}: inputs need `{name}` {symbols}; received "
                f"{received}. {hint}"
            )
        return inputs[name]

    def encode(self, tokens, token_mask=None, paragraph_mask=None, training=False):
        """Encodes one side of a pair (document or summary) with the shared weights.

        Args:
            tokens: int [B,P,T].
            token_mask: optional bool [B,P,T]; default `tokens != pad_id`.
            paragraph_mask: optional bool [B,P].
            training: bool, whether dropout is active.

        Returns:
            Tuple `(r, sentence_attention, sentence_mask)`: r float [B,D];
            the last sentence-level attention float [B,H,P,P]; bool [B,P],
            True for real sentences (a real token and, when given,
            `paragraph_mask`).
        """
        tokens = ops.convert_to_tensor(tokens)
        if len(tokens.shape) != 3:
            raise ValueError(
                f"{self.name}: sentence tokens must be int [B,P,T] (the "
                f"'sentences' family), received shape {tuple(tokens.shape)}."
            )
        if token_mask is None:
            token_mask = ops.not_equal(tokens, self.pad_id)
        token_mask = as_bool_mask(token_mask)
        if paragraph_mask is not None:
            token_mask = merge_masks(token_mask, as_bool_mask(paragraph_mask)[:, :, None])
        embedded = self.token_embedding(tokens)
        r, _, attention = self.encoder(
            embedded, token_mask=token_mask, training=training
        )
        return r, attention, ops.any(token_mask, axis=-1)

    def __call__(self, inputs, *args, **kwargs):
        # The model's input errors without Keras' "unbuilt state" warnings
        # on a first call (keras_hsum.models.first_call).
        check_model_features(self, inputs)
        return call_without_unbuilt_warnings(self, super().__call__, inputs, *args, **kwargs)

    def call(self, inputs, training=False):
        hint = (
            "Give both the document and the candidate summary (see "
            "recipes/shte.py); to extract sentences without a summary, use "
            "`extract`."
        )
        document, _, _ = self.encode(
            self._get(inputs, TOKENS, "int [B,P,T]", hint),
            inputs.get(TOKEN_MASK),
            inputs.get(PARAGRAPH_MASK),
            training=training,
        )
        summary, _, _ = self.encode(
            self._get(inputs, SUMMARY_TOKENS, "int [B,Q,T']", hint),
            inputs.get(SUMMARY_TOKEN_MASK),
            inputs.get(SUMMARY_PARAGRAPH_MASK),
            training=training,
        )
        return self.classifier(document, summary, training=training)

    def sentence_scores(self, inputs):
        """α [B,P] float32: every document sentence's score (Eq. 21-23).

        Args:
            inputs: dict with `tokens` int [B,P,T] and optionally
                `token_mask`, `paragraph_mask` (summary keys are ignored).

        Returns:
            Tuple `(scores, sentence_mask)`: float32 [B,P] (0 on padded
            sentences) and bool [B,P].
        """
        tokens = self._get(
            inputs, TOKENS, "int [B,P,T]", "Give the document's sentences."
        )
        _, attention, mask = self.encode(
            tokens, inputs.get(TOKEN_MASK), inputs.get(PARAGRAPH_MASK)
        )
        return sentence_scores(attention, mask, head=self.score_head), mask

    def extract(self, inputs, k=3):
        """The k best-scored sentences of each document, in document order.

        Encodes the document only (no summary needed), scores its sentences
        with `sentence_scores` of the last sentence-level attention (head
        average or `score_head`), keeps the k highest (ties: the earlier
        sentence) and returns them sorted by position.

        Args:
            inputs: dict with `tokens` int [B,P,T] and optionally
                `token_mask` [B,P,T], `paragraph_mask` [B,P].
            k: int >= 1, sentences to extract (3 in the paper).

        Returns:
            Tuple `(indices, scores, sentence_scores)`:
            indices: int32 [B,k], sentence indices in increasing order;
                -1 after them where a document has fewer than k sentences;
            scores: float32 [B,k], their scores (0 where the index is -1);
            sentence_scores: float32 [B,P], the scores of all sentences
                (0 on padded sentences).
        """
        k = check_int("k", k, owner=self.name, hint=" (sentences to extract)")
        scores, mask = self.sentence_scores(inputs)
        batch = ops.shape(scores)[0]
        num_sentences = ops.shape(scores)[1]
        # Padded sentences rank below every real one (real scores are >= 0);
        # k extra columns make top-k well defined even when k > P.
        candidates = ops.concatenate(
            [ops.where(mask, scores, -1.0), ops.full((batch, k), -2.0, "float32")],
            axis=1,
        )
        top_scores, top_indices = ops.top_k(candidates, k=k, sorted=True)
        top_indices = ops.cast(top_indices, "int32")
        chosen = top_scores >= 0.0
        # Document order: sort by position, unused slots last.
        positions = ops.where(chosen, top_indices, num_sentences + k)
        order = ops.argsort(positions, axis=1)
        chosen = ops.take_along_axis(chosen, order, axis=1)
        indices = ops.where(
            chosen, ops.take_along_axis(top_indices, order, axis=1), -1
        )
        top_scores = ops.where(
            chosen, ops.take_along_axis(top_scores, order, axis=1), 0.0
        )
        return ops.cast(indices, "int32"), top_scores, scores

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "sentence_intermediate_dim": self.sentence_intermediate_dim,
                "num_word_layers": self.num_word_layers,
                "num_sentence_layers": self.num_sentence_layers,
                "classifier_hidden_dim": self.classifier_hidden_dim,
                "position_encoding": self.position_encoding,
                "pooling": self.pooling,
                "score_head": self.score_head,
                "dropout": self.dropout,
                "pad_id": self.pad_id,
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
