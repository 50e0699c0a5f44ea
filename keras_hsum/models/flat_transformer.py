"""FT / Trunc: the flat Transformer baseline over concatenated, truncated input."""

import keras
from keras import ops

from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.models.flat_memory_summarizer import FlatMemorySummarizer
from keras_hsum.models.summarizer import flat_tokens
from keras_hsum.models.summarizer import optional_mask
from keras_hsum.models.summarizer import required


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
        attention_dropout: dropout rate on the attention probabilities, or
            None (the default, the papers' setting) for `dropout`; 0 lets
            keras-hub's attention layers run through `keras.ops.dot_product_attention`
            (fused cuDNN attention on a GPU).
        tie_embeddings: tie the output projection to the embedding.
        pointer_generator: add the copy mechanism over the N source tokens
            (`keras_hsum.models.copying`; default False).
        token_shift: add to each source embedding a learned projection of
            its predecessor's (`keras_hsum.layers.TokenShift`; default
            False), which lets the copy mechanism follow a span (see there).
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
        token_shift=False,
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, hidden_dim=hidden_dim, num_heads=num_heads,
            intermediate_dim=intermediate_dim, num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers, dropout=dropout,
            attention_dropout=attention_dropout, optional=("attention_dropout",),
        )
        self.pointer_generator = bool(pointer_generator)
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
        self._init_flat_encoder(num_encoder_layers, token_shift=token_shift)

    def encode(self, inputs, training=False):
        """Returns `{"memory": [B,N,D], "memory_mask": bool [B,N]}` (and
        `"source_ids"` int [B,N] with `pointer_generator`)."""
        tokens = required(self, inputs, TOKENS, "int [B,N] or [B,P,T]")
        mask = optional_mask(inputs, TOKEN_MASK, tokens)
        if TOKEN_MASK not in inputs:
            mask = ops.not_equal(tokens, self.pad_id)
        tokens, mask = flat_tokens(self, tokens, mask)
        x = self._run_encoder(self._embed_source(tokens, mask), mask, training=training)
        memory = {"memory": x, "memory_mask": mask}
        if self.pointer_generator:
            memory["source_ids"] = ops.cast(tokens, "int32")
        return memory

    def step_aux(self, static):
        batch = ops.shape(static["memory"])[0]
        return {PARAGRAPH_ATTENTION: ops.zeros((batch, 1), "float32")}

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
                "token_shift": self.token_shift,
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
