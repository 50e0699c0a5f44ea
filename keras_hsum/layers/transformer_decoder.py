"""keras-hub's Transformer decoder layer with its own attention-dropout rate."""

import keras
from keras_hub.layers import TransformerDecoder as HubTransformerDecoder

from keras_hsum.layers.fused_attention_inputs import use_fused_attention_inputs
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.packed_dropout import use_packed_dropout
from keras_hsum.layers.transformer_encoder import check_attention_dropout
from keras_hsum.layers.transformer_encoder import set_attention_dropout


@keras.saving.register_keras_serializable(package="keras_hsum")
class TransformerDecoder(HubTransformerDecoder):
    """keras-hub's `TransformerDecoder` with a separate attention dropout.

    keras-hub's decoder block (causal self-attention, optional cross
    attention over an encoder sequence, feed-forward network, each with a
    residual dropout and a LayerNorm), unchanged, except that the dropout on
    the attention probabilities of its self- and cross-attention
    (`CachedMultiHeadAttention`) has its own rate, `attention_dropout`;
    keras-hub uses the layer's one `dropout` for both. `attention_dropout=
    None` (the default) is keras-hub's layer exactly.

    With `attention_dropout=0` the residual dropouts still act and both
    attentions run through `keras.ops.dot_product_attention` (cuDNN flash
    attention on a GPU; a query with an empty memory then gets uniform
    instead of zero weights, see `TransformerEncoder`), with the masks at
    their full shapes and odd lengths padded in training, as cuDNN's fused
    attention needs (`fused_attention_inputs`). The rate is set on
    keras-hub's attention sublayers after its `build` (see
    `TransformerEncoder` in this package for why): same sublayers, names
    and weights, so keras-hub models' weights load.

    Args:
        intermediate_dim: the feed-forward network's hidden width.
        num_heads: H, heads of both attentions.
        dropout: dropout rate on the residual branches (and on the attention
            probabilities when `attention_dropout` is None). Defaults to 0.
        attention_dropout: dropout rate on the attention probabilities, or
            None (the default) for `dropout`.
        **kwargs: keras-hub `TransformerDecoder`'s other arguments and base
            layer arguments.

    Call arguments and returns: as keras-hub's `TransformerDecoder`
    (`decoder_sequence` float [B, S, D], `encoder_sequence` float [B, T, D],
    masks, caches [B, 2, S, H, Dh]; outputs float [B, S, D]).

    Example:
    >>> layer = TransformerDecoder(
    ...     intermediate_dim=16, num_heads=2, dropout=0.1, attention_dropout=0.0)
    >>> tuple(layer(np.ones((2, 4, 8)), np.ones((2, 5, 8))).shape)
    (2, 4, 8)
    >>> layer._self_attention_layer.dropout, layer._cross_attention_layer.dropout
    (0.0, 0.0)

    References:
        Vaswani et al. (2017), Attention Is All You Need, NeurIPS.
    """

    def __init__(
        self, intermediate_dim, num_heads, dropout=0, attention_dropout=None, **kwargs
    ):
        # keras-hub builds in `__init__` when `from_config` passes the shapes;
        # hold them back until `attention_dropout` is set.
        decoder_sequence_shape = kwargs.pop("decoder_sequence_shape", None)
        encoder_sequence_shape = kwargs.pop("encoder_sequence_shape", None)
        super().__init__(intermediate_dim, num_heads, dropout=dropout, **kwargs)
        check_hyperparameters(
            self.name, optional=("attention_dropout",), attention_dropout=attention_dropout
        )
        check_attention_dropout(self.name, dropout, attention_dropout)
        self.attention_dropout = attention_dropout
        if decoder_sequence_shape:
            self.build(decoder_sequence_shape, encoder_sequence_shape)

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        super().build(decoder_sequence_shape, encoder_sequence_shape)
        attentions = [self._self_attention_layer, self._cross_attention_layer]
        for attention in [a for a in attentions if a is not None]:
            set_attention_dropout(attention, self.attention_dropout)
            use_fused_attention_inputs(attention)
        use_packed_dropout(self)

    def get_config(self):
        config = super().get_config()
        config["attention_dropout"] = self.attention_dropout
        return config
