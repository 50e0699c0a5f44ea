"""keras-hub's Transformer encoder layer with its own attention-dropout rate."""

import keras
from keras_hub.layers import TransformerEncoder as HubTransformerEncoder

from keras_hsum.layers.fused_attention_inputs import use_fused_attention_inputs
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.packed_dropout import use_packed_dropout


def set_attention_dropout(attention, rate):
    """Sets the attention-probability dropout of a built Keras
    `MultiHeadAttention` (or keras-hub `CachedMultiHeadAttention`) to `rate`;
    `rate=None` leaves it as built.

    Keras' `MultiHeadAttention` reads the rate in two places only: its
    `_compute_attention` takes `ops.dot_product_attention` (cuDNN / flash
    attention on a GPU) when `_dropout` is 0 and no scores are returned, and
    its weightless `_dropout_layer` (made in `build`) drops the
    probabilities otherwise. Setting both changes no weight and no sublayer
    name, so saved weights load unchanged.
    """
    if rate is None:
        return
    attention._dropout = rate
    attention._dropout_layer.rate = rate


def check_attention_dropout(owner, dropout, attention_dropout):
    """A ValueError for `attention_dropout` > 0 with `dropout` 0: keras-hub
    builds the attention's dropout layer with the layer's `dropout`, and a
    Keras `Dropout` made with rate 0 has no random generator, so raising its
    rate after `build` would fail in the first training step."""
    if attention_dropout is not None and attention_dropout > 0 and not dropout:
        raise ValueError(
            f"{owner}: `attention_dropout={attention_dropout}` needs `dropout` > 0 "
            f"(received dropout={dropout}): the attention's dropout layer is built with the "
            "layer's `dropout` rate, and one built with rate 0 cannot draw random masks. "
            "Set `dropout` > 0, or `attention_dropout` to 0 or None."
        )


@keras.saving.register_keras_serializable(package="keras_hsum")
class TransformerEncoder(HubTransformerEncoder):
    """keras-hub's `TransformerEncoder` with a separate attention dropout.

    The layer is keras-hub's post-LayerNorm (or pre-LayerNorm with
    `normalize_first`) encoder block, x := LayerNorm(x + Dropout(
    SelfAttention(x))), x := LayerNorm(x + Dropout(FFN(x))), unchanged,
    except that the dropout on the attention probabilities inside the
    self-attention has its own rate, `attention_dropout`; keras-hub uses the
    layer's one `dropout` for both. `attention_dropout=None` (the default)
    is keras-hub's layer exactly: the same weights, random draws and outputs.

    With `attention_dropout=0` the residual and feed-forward dropouts still
    act, and Keras' `MultiHeadAttention` computes the attention with
    `keras.ops.dot_product_attention`, which takes cuDNN flash attention on a
    GPU (it does so only when its attention dropout is 0). The two paths
    agree up to float rounding except on a query without any key to attend
    (a fully padded row): Keras' written-out softmax gives it zero weights,
    `dot_product_attention` uniform ones over the padding. The summarizers
    never read such rows (a fully padded paragraph is masked everywhere
    downstream).

    With `attention_dropout` set, the self-attention gives
    `dot_product_attention` what JAX's cuDNN attention accepts in a train
    step (`fused_attention_inputs`): the mask at its full [B, 1, T, T]
    shape, and in training an odd T padded to even inside the attention
    (one masked key, one query row dropped). Same outputs at every position
    (empty rows included) and same gradients, up to float rounding.

    Why a subclass that sets the rate after `build`: keras-hub's `build`
    makes the `MultiHeadAttention` with `dropout=self.dropout`, and copying
    that `build` would fork keras-hub's code. The subclass keeps keras-hub's
    sublayers, their names and the weight tree, so a model saved with
    keras-hub's layer loads into this one; `get_config` adds
    `attention_dropout`, and a config without it (an older model) loads
    with None.

    Args:
        intermediate_dim: the feed-forward network's hidden width.
        num_heads: H, the self-attention's heads.
        dropout: dropout rate on the residual branches (and on the attention
            probabilities when `attention_dropout` is None). Defaults to 0.
        attention_dropout: dropout rate on the attention probabilities, or
            None (the default) for `dropout`.
        **kwargs: keras-hub `TransformerEncoder`'s other arguments
            (`activation`, `layer_norm_epsilon`, `kernel_initializer`,
            `bias_initializer`, `normalize_first`) and base layer arguments.

    Call arguments and returns: as keras-hub's `TransformerEncoder`
    (`inputs` float [B, T, D], `padding_mask` bool [B, T],
    `attention_mask` bool [B, T, T]; outputs float [B, T, D]).

    Example:
    >>> layer = TransformerEncoder(
    ...     intermediate_dim=16, num_heads=2, dropout=0.1, attention_dropout=0.0)
    >>> tuple(layer(np.ones((2, 5, 8)), padding_mask=np.ones((2, 5), "bool")).shape)
    (2, 5, 8)
    >>> layer._self_attention_layer.dropout, layer._feedforward_dropout.rate
    (0.0, 0.1)

    References:
        Vaswani et al. (2017), Attention Is All You Need, NeurIPS.
    """

    def __init__(
        self, intermediate_dim, num_heads, dropout=0, attention_dropout=None, **kwargs
    ):
        super().__init__(intermediate_dim, num_heads, dropout=dropout, **kwargs)
        check_hyperparameters(
            self.name, optional=("attention_dropout",), attention_dropout=attention_dropout
        )
        check_attention_dropout(self.name, dropout, attention_dropout)
        self.attention_dropout = attention_dropout

    def build(self, inputs_shape):
        super().build(inputs_shape)
        set_attention_dropout(self._self_attention_layer, self.attention_dropout)
        use_fused_attention_inputs(self._self_attention_layer)
        use_packed_dropout(self)

    def get_config(self):
        config = super().get_config()
        config["attention_dropout"] = self.attention_dropout
        return config
