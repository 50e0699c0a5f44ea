"""HT's hierarchical position encoding (Liu & Lapata, 2019, §3.1)."""

import math

import keras
from keras import ops
from keras_hub.layers import SinePositionEncoding

from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_rank


@keras.saving.register_keras_serializable(package="keras_hsum")
class HierarchicalPositionEncoding(keras.layers.Layer):
    """Token embedding plus a two-level sinusoidal position encoding.

    Liu & Lapata (2019) give token j of paragraph i the input
    x_ij = w_ij + pe_ij, where w_ij is the token embedding and
    pe_ij = [ sin/cos(rank of paragraph i) ; sin/cos(position j) ] is the
    concatenation of a D/2-dimensional sinusoid of the paragraph's rank and
    a D/2-dimensional sinusoid of the token's position in its paragraph.
    Both sinusoids are keras-hub's `SinePositionEncoding`.

    Args:
        vocabulary_size: V, the number of token ids.
        hidden_dim: D, the model width; must be even.
        max_wavelength: the longest sinusoid wavelength (10000 in the
            Transformer).
        scale_embeddings: multiply token embeddings by sqrt(D) before adding
            the encoding (as HT's OpenNMT-based code does).
        embeddings_initializer: initializer of the embedding matrix.
        token_embedding: an existing `keras.layers.ReversibleEmbedding` of
            [V, D] to embed the tokens with (e.g. a decoder's, to tie source
            and target embeddings), or None to make one. A given layer is
            shared, not serialized: whoever passes it rebuilds it.

    Call arguments:
        token_ids: int [B, P, T].
        paragraph_ranks: optional int [B, P], the rank of every paragraph;
            defaults to 0..P-1 (paragraphs already in rank order).

    Returns:
        float [B, P, T, D].

    Example:
    >>> layer = HierarchicalPositionEncoding(vocabulary_size=100, hidden_dim=8)
    >>> tuple(layer(np.ones((2, 3, 5), "int32")).shape)
    (2, 3, 5, 8)

    References:
        Liu & Lapata (2019), Hierarchical Transformers for Multi-Document
        Summarization, ACL.
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        max_wavelength=10000,
        scale_embeddings=True,
        embeddings_initializer="glorot_uniform",
        token_embedding=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_dim % 2:
            raise ValueError(
                "HierarchicalPositionEncoding: `hidden_dim` must be even "
                f"(two halves of D/2), received {hidden_dim}."
            )
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.max_wavelength = max_wavelength
        self.scale_embeddings = scale_embeddings
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        if token_embedding is None:
            token_embedding = keras.layers.ReversibleEmbedding(
                vocabulary_size,
                hidden_dim,
                embeddings_initializer=self.embeddings_initializer,
                dtype=self.dtype_policy,
                name="token_embedding",
            )
        elif (token_embedding.input_dim, token_embedding.output_dim) != (
            vocabulary_size, hidden_dim
        ):
            raise ValueError(
                "HierarchicalPositionEncoding: `token_embedding` must embed "
                f"vocabulary_size={vocabulary_size} ids in hidden_dim={hidden_dim}; "
                f"received an embedding of {token_embedding.input_dim} x "
                f"{token_embedding.output_dim}."
            )
        self.token_embedding = token_embedding
        self.paragraph_encoding = SinePositionEncoding(
            max_wavelength, dtype=self.dtype_policy, name="paragraph_encoding"
        )
        self.position_encoding = SinePositionEncoding(
            max_wavelength, dtype=self.dtype_policy, name="position_encoding"
        )

    def build(self, token_ids_shape, paragraph_ranks_shape=None):
        check_rank(self.name, "token_ids", token_ids_shape, 3, "[B,P,T]")
        if paragraph_ranks_shape is not None:
            check_rank(self.name, "paragraph_ranks", paragraph_ranks_shape, 2, "[B,P]")
        self.token_embedding.build(token_ids_shape)
        self.built = True

    def call(self, token_ids, paragraph_ranks=None):
        if getattr(paragraph_ranks, "shape", None) is not None:
            # Checked on every call (build runs once): [1,P] ranks would be
            # broadcast over the batch.
            check_dims(self.name, "paragraph_ranks", paragraph_ranks.shape,
                       tuple(token_ids.shape[:2]), "[B,P] of `token_ids`")
        embeddings = self.token_embedding(token_ids)
        if self.scale_embeddings:
            embeddings = embeddings * ops.cast(
                math.sqrt(self.hidden_dim), embeddings.dtype
            )
        shape = ops.shape(token_ids)
        batch, paragraphs, tokens = shape[0], shape[1], shape[2]
        half = self.hidden_dim // 2
        if paragraph_ranks is None:
            paragraph_ranks = ops.broadcast_to(
                ops.arange(paragraphs)[None, :], (batch, paragraphs)
            )
        paragraph_pe = self.paragraph_encoding(
            ops.zeros((batch, paragraphs, half), self.compute_dtype),
            positions=ops.cast(paragraph_ranks, self.compute_dtype),
        )
        token_pe = self.position_encoding(
            ops.zeros((1, tokens, half), self.compute_dtype)
        )
        encoding = ops.concatenate(
            [
                ops.broadcast_to(
                    paragraph_pe[:, :, None, :], (batch, paragraphs, tokens, half)
                ),
                ops.broadcast_to(
                    token_pe[:, None, :, :], (batch, paragraphs, tokens, half)
                ),
            ],
            axis=-1,
        )
        return embeddings + ops.cast(encoding, embeddings.dtype)

    def compute_output_shape(self, token_ids_shape, paragraph_ranks_shape=None):
        return tuple(token_ids_shape) + (self.hidden_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "max_wavelength": self.max_wavelength,
                "scale_embeddings": self.scale_embeddings,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
