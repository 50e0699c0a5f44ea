"""FT / Trunc: the flat Transformer baseline over concatenated, truncated input."""

import math

import keras
from keras import ops
from keras_hub.layers import SinePositionEncoding
from keras_hub.layers import TransformerEncoder

from keras_hsum.models.copying import make_copy_layers
from keras_hsum.models.summarizer import optional_mask
from keras_hsum.models.summarizer import required
from keras_hsum.models.transformer_summary_decoder import FlatMemorySummarizer
from keras_hsum.models.transformer_summary_decoder import TransformerSummaryDecoder


@keras.saving.register_keras_serializable(package="keras_hsum")
class FlatTransformer(FlatMemorySummarizer):
    """The flat Transformer encoder-decoder (FT in HT/PHT, Trunc in SEAL).

    The input documents are concatenated in rank order and truncated to N
    tokens (`keras_hsum.data` family `"flat"`); an encoder of keras-hub
    `TransformerEncoder` layers reads them and the shared
    `TransformerSummaryDecoder` attends over all N states. Source, target
    and output embeddings are tied. Hierarchical input `tokens` [B,P,T] is
    accepted too and read as one flat sequence of P·T tokens (padding inside
    is masked).

    Args:
        vocabulary_size: V.
        hidden_dim: D.
        num_heads: H.
        intermediate_dim: FFN width.
        num_encoder_layers, num_decoder_layers: depths.
        dropout: dropout rate.
        tie_embeddings: tie the output projection to the embedding.
        pointer_generator: add the copy mechanism over the N source tokens
            (`keras_hsum.models.copying`; default False).
        pad_id, bos_id, eos_id: special ids.

    Inputs (dict):
        tokens: int [B,N] (or [B,P,T]).
        token_mask: optional bool [B,N] (or [B,P,T]); default tokens != pad.
        decoder_tokens: int [B,S] (teacher forcing).

    Returns (call):
        float32 logits [B,S,V] (log-probabilities with `pointer_generator`).

    Decoding aux: `{"paragraph_attention": zeros [B,1]}` (no paragraphs).

    References:
        Vaswani et al. (2017); Liu & Lapata (2019) §4 (FT baseline);
        Zhao, Saleh & Liu (2020) (Trunc variant).
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim=256,
        num_heads=8,
        intermediate_dim=1024,
        num_encoder_layers=6,
        num_decoder_layers=6,
        dropout=0.1,
        tie_embeddings=True,
        pointer_generator=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.pointer_generator = bool(pointer_generator)
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.num_encoder_layers = num_encoder_layers
        self.num_decoder_layers = num_decoder_layers
        self.dropout = dropout
        self.tie_embeddings = tie_embeddings
        self.decoder = TransformerSummaryDecoder(
            vocabulary_size=vocabulary_size,
            hidden_dim=hidden_dim,
            num_layers=num_decoder_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            tie_embeddings=tie_embeddings,
            dtype=self.dtype_policy,
            name="decoder",
        )
        self.source_position_encoding = SinePositionEncoding(
            dtype=self.dtype_policy, name="source_position_encoding"
        )
        self.source_dropout = keras.layers.Dropout(
            dropout, dtype=self.dtype_policy, name="source_dropout"
        )
        if self.pointer_generator:
            self.copy_attention, self.copy_switch = make_copy_layers(
                self, vocabulary_size
            )
        self.encoder_layers = [
            TransformerEncoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                layer_norm_epsilon=1e-5,
                dtype=self.dtype_policy,
                name=f"encoder_layer_{i}",
            )
            for i in range(num_encoder_layers)
        ]

    def encode(self, inputs, training=False):
        """Returns `{"memory": [B,N,D], "memory_mask": bool [B,N]}` (and
        `"source_ids"` int [B,N] with `pointer_generator`)."""
        tokens = required(self, inputs, "tokens", "int [B,N] or [B,P,T]")
        mask = optional_mask(inputs, "token_mask", tokens)
        if "token_mask" not in inputs:
            mask = ops.not_equal(tokens, self.pad_id)
        if len(tokens.shape) == 3:
            tokens = ops.reshape(tokens, (ops.shape(tokens)[0], -1))
            mask = ops.reshape(mask, (ops.shape(mask)[0], -1))
        elif len(tokens.shape) != 2:
            raise ValueError(
                f"{self.name}: `tokens` must be int [B,N] or [B,P,T], received "
                f"shape {tuple(tokens.shape)}."
            )
        x = self.decoder.token_embedding(tokens)
        x = x * ops.cast(math.sqrt(self.hidden_dim), x.dtype)
        x = x + self.source_position_encoding(x)
        x = self.source_dropout(x, training=training)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=mask, training=training)
        memory = {"memory": x, "memory_mask": mask}
        if self.pointer_generator:
            memory["source_ids"] = ops.cast(tokens, "int32")
        return memory

    def step_aux(self, static):
        batch = ops.shape(static["memory"])[0]
        return {"paragraph_attention": ops.zeros((batch, 1), "float32")}

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
                "dropout": self.dropout,
                "tie_embeddings": self.tie_embeddings,
                "pointer_generator": self.pointer_generator,
            }
        )
        return config
