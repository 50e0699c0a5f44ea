"""SEAL's compressive-abstractive model (CA; Zhao, Saleh & Liu, 2020, §3.2)."""

import keras
from keras import ops

from keras_hsum.features import DOCUMENT_IDS
from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.models.flat_memory_summarizer import FlatMemorySummarizer
from keras_hsum.models.summarizer import required


@keras.saving.register_keras_serializable(package="keras_hsum")
class CompressiveAbstractive(FlatMemorySummarizer):
    """CA: groups of snippets compressed into a few learned vectors each.

    SEAL's compressive-abstractive model "compresses each snippet group (a
    block of k continuous snippets) into a short sequence of vectors
    x ∈ R^{c×d}", implemented "by concatenating c learnable vectors to the
    transformer encoder's inputs and retrieving the processed vectors as
    the compressed representations"; the decoder attends to the
    concatenation of all groups' compressed vectors. Here:

    1. the P snippets [B,P,T] are cut into G groups of at most
       k = `snippets_per_group` consecutive snippets (G = ceil(P / k) for
       one document, see below), each group read as one sequence of k·T
       tokens (padded with empty snippets);
    2. tokens are embedded with the decoder's token embedding (·√D, +
       sinusoidal positions 0..k·T−1 inside the group); the c =
       `compressed_length` learnable vectors [c, D] are appended after
       them (no position encoding), giving [B·G, k·T + c, D];
    3. `num_encoder_layers` keras-hub `TransformerEncoder` layers run on
       that sequence (pad tokens masked as keys; the c vectors are always
       valid), and the outputs at the c appended positions are group g's
       compressed memory;
    4. memory [B, G·c, D] (mask: the group has a real token) →
       `TransformerSummaryDecoder` (tied embeddings).

    Training uses only L_abs (the compiled token cross-entropy).

    Multi-document input: the paper's group is "a block of k continuous
    snippets" for one document and the "snippets of a document" for
    several. With `max_documents` set, groups never straddle documents:
    each document's real snippets, in order, are cut into blocks of k (a
    document of at most k snippets is one group), the documents' groups
    follow each other in document order, and padding snippets take no
    place. There are then G = min(P, ceil(P / k) + max_documents − 1)
    group slots (enough for any split of P snippets into max_documents
    documents), unused slots masked. Document ids are clipped to
    [0, max_documents − 1], so the documents from id max_documents − 1 on
    share groups (none of their snippets is dropped). With
    `max_documents=None` (the default) `document_ids` are ignored and the
    P snippets are cut into G = ceil(P / k) blocks of k consecutive
    positions, as for one document.

    Args:
        vocabulary_size: V.
        hidden_dim: D.
        num_heads: H.
        intermediate_dim: FFN width.
        num_encoder_layers, num_decoder_layers: depths.
        snippets_per_group: k.
        compressed_length: c, the learnable vectors per group.
        max_documents: None (groups ignore documents) or an int >= 1, the
            number of documents whose snippets are grouped apart (see
            above).
        dropout: dropout rate.
        attention_dropout: dropout rate on the attention probabilities, or
            None (the default, the papers' setting) for `dropout`; 0 lets
            keras-hub's attention layers run through `keras.ops.dot_product_attention`
            (fused cuDNN attention on a GPU).
        tie_embeddings: tie the output projection to the embedding.
        pad_id, bos_id, eos_id: special ids.

    Inputs (dict):
        tokens: int [B,P,T] snippets (data family "snippets").
        token_mask: optional bool [B,P,T]; default tokens != pad.
        paragraph_mask: optional bool [B,P].
        document_ids: optional int [B,P], the document of every snippet
            (used when `max_documents` is set; absent: one document).
        decoder_tokens: int [B,S] (teacher forcing).

    Returns (call):
        float32 logits [B,S,V].

    Decoding aux: `"paragraph_attention"` float32 [B,P], 1.0 on every real
    snippet (the decoder attends to all groups' compressed vectors).

    References:
        Zhao, Saleh & Liu (2020), SEAL: Segment-wise Extractive-Abstractive
        Long-form Text Summarization, arXiv:2006.10213, §3.2.
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim=256,
        num_heads=8,
        intermediate_dim=1024,
        num_encoder_layers=6,
        num_decoder_layers=6,
        snippets_per_group=8,
        compressed_length=64,
        max_documents=None,
        dropout=0.1,
        tie_embeddings=True,
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, hidden_dim=hidden_dim, num_heads=num_heads,
            intermediate_dim=intermediate_dim, num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers, snippets_per_group=snippets_per_group,
            compressed_length=compressed_length, max_documents=max_documents,
            dropout=dropout, attention_dropout=attention_dropout,
            optional=("max_documents", "attention_dropout"),
        )
        self.snippets_per_group = snippets_per_group
        self.compressed_length = compressed_length
        self.max_documents = max_documents
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
        # The learnable compression vectors [c, D] (scaled like embeddings·√D).
        self.compression_vectors = self.add_weight(
            name="compression_vectors",
            shape=(compressed_length, hidden_dim),
            initializer=keras.initializers.RandomNormal(stddev=1.0),
        )

    def encode(self, inputs, training=False):
        """Returns `{"memory": [B,G·c,D], "memory_mask": bool [B,G·c],
        "paragraph_mask": bool [B,P]}`."""
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
        if inputs.get(PARAGRAPH_MASK) is not None:
            paragraph_mask = as_bool_mask(ops.convert_to_tensor(inputs[PARAGRAPH_MASK]))
            token_mask = ops.logical_and(token_mask, paragraph_mask[:, :, None])
        paragraph_mask = ops.any(token_mask, axis=-1)

        # Groups of k snippets: [B,P,T] → [B·G, k·T].
        k = self.snippets_per_group
        shape = ops.shape(tokens)
        batch, paragraphs, length = shape[0], shape[1], shape[2]
        if self.max_documents is None:
            groups = (paragraphs + k - 1) // k
            extra = groups * k - paragraphs
            tokens = ops.pad(tokens, ((0, 0), (0, extra), (0, 0)), constant_values=self.pad_id)
            token_mask = ops.pad(
                ops.cast(token_mask, "int32"), ((0, 0), (0, extra), (0, 0))
            )
        else:
            tokens, token_mask, groups = self._document_groups(
                tokens, token_mask, paragraph_mask, inputs.get(DOCUMENT_IDS)
            )
        tokens = ops.reshape(tokens, (-1, k * length))
        token_mask = ops.cast(ops.reshape(token_mask, (-1, k * length)), "bool")

        x = self._embed_source(tokens)
        rows = ops.shape(x)[0]
        compression = ops.broadcast_to(
            ops.cast(self.compression_vectors, x.dtype)[None],
            (rows, self.compressed_length, self.hidden_dim),
        )
        x = ops.concatenate([x, compression], axis=1)
        mask = ops.concatenate(
            [token_mask, ops.ones((rows, self.compressed_length), "bool")], axis=1
        )
        x = self._run_encoder(x, mask, training=training)
        compressed = x[:, -self.compressed_length :]  # [B·G, c, D]
        memory = ops.reshape(compressed, (batch, -1, self.hidden_dim))
        group_mask = ops.any(ops.reshape(token_mask, (batch, groups, -1)), axis=-1)
        memory_mask = ops.reshape(
            ops.repeat(group_mask[:, :, None], self.compressed_length, axis=2),
            (batch, -1),
        )
        return {
            "memory": memory,
            "memory_mask": memory_mask,
            PARAGRAPH_MASK: paragraph_mask,
        }

    def _document_groups(self, tokens, token_mask, paragraph_mask, document_ids):
        """The snippets placed in per-document groups of k.

        Returns (tokens [B,G·k,T] pad-filled, token_mask int32 [B,G·k,T],
        G), G = min(P, ceil(P / k) + max_documents − 1): a document of n
        real snippets takes ceil(n / k) groups, and Σ ceil(n_d / k) over
        D documents is at most ceil(Σ n_d / k) + D − 1.
        """
        k, documents = self.snippets_per_group, self.max_documents
        paragraphs = ops.shape(tokens)[1]
        bound = (paragraphs + k - 1) // k + documents - 1
        if isinstance(paragraphs, int):
            groups = min(paragraphs, bound)
        else:
            groups = ops.minimum(paragraphs, bound)
        valid = ops.cast(paragraph_mask, "int32")  # [B,P]
        if document_ids is None:
            document = ops.zeros_like(valid)
        else:
            document = ops.clip(
                ops.cast(ops.convert_to_tensor(document_ids), "int32"), 0, documents - 1
            )
        one_hot = ops.one_hot(document, documents, dtype="int32") * valid[:, :, None]  # [B,P,D]
        # Index of each snippet among its document's real snippets: the
        # real snippets of that document before it.
        rank = ops.take_along_axis(
            ops.cumsum(one_hot, axis=1) - one_hot, document[:, :, None], axis=2
        )[:, :, 0]  # [B,P]
        # Groups taken by each document, and by the documents before it.
        counts = ops.sum(one_hot, axis=1)  # [B,D]
        taken = (counts + k - 1) // k
        before = ops.cumsum(taken, axis=-1) - taken  # [B,D]
        group = ops.take_along_axis(before, document, axis=1) + rank // k
        slot = ops.where(valid > 0, group * k + rank % k, -1)  # [B,P]; -1: no place
        # For each slot the snippet it holds (if any): a one-hot inversion.
        hits = ops.cast(
            ops.equal(slot[:, :, None], ops.arange(groups * k, dtype="int32")[None, None]),
            "int32",
        )  # [B,P,G·k]
        filled = ops.sum(hits, axis=1)  # [B,G·k], 0 or 1
        source = ops.sum(hits * ops.arange(paragraphs, dtype="int32")[None, :, None], axis=1)
        index = ops.broadcast_to(
            source[:, :, None], (ops.shape(source)[0], groups * k, ops.shape(tokens)[2])
        )
        gathered = ops.take_along_axis(tokens, index, axis=1)
        gathered_mask = ops.take_along_axis(ops.cast(token_mask, "int32"), index, axis=1)
        tokens = ops.where(filled[:, :, None] > 0, gathered, self.pad_id)
        token_mask = gathered_mask * filled[:, :, None]
        return tokens, token_mask, groups

    def step_aux(self, static):
        return {PARAGRAPH_ATTENTION: ops.cast(static[PARAGRAPH_MASK], "float32")}

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
                "snippets_per_group": self.snippets_per_group,
                "compressed_length": self.compressed_length,
                "max_documents": self.max_documents,
                "dropout": self.dropout,
                "tie_embeddings": self.tie_embeddings,
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
