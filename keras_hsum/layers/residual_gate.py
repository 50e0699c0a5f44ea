"""`ResidualGate`: adds a new sublayer's output to a pretrained network's
hidden states behind a learned gate that starts closed."""

import keras
from keras import ops

from keras_hsum.layers.input_checks import check_dims


@keras.saving.register_keras_serializable(package="keras_hsum")
class ResidualGate(keras.layers.Layer):
    """y = x + tanh(α) · (f − x), with one learned scalar α.

    Put between the layers of a pretrained network, with x the pretrained
    states and f what a new layer computes from them, the gate lets the
    network start as the pretrained one: α is initialised to 0, tanh(0) = 0,
    so y = x exactly until training opens the gate (∂y/∂α = f − x at α = 0,
    so α receives a gradient from the first step; the new layer's weights do
    once α ≠ 0). tanh keeps the mixing weight in (−1, 1). This is the tanh
    gating of Flamingo's cross-attention (Alayrac et al., 2022), written as
    an interpolation so that f may be a full residual block (f = LayerNorm(x
    + ...)), not only its increment: at tanh(α) = 1 the block replaces x.

    Args:
        initial_value: α at initialisation (0: closed).
        **kwargs: base layer arguments (`name`, `dtype`).

    Call arguments:
        inputs: float [..., D], the pretrained states x.
        update: float, the same shape as `inputs`: the new layer's output f.

    Returns:
        float, the shape of `inputs`.

    Example:
    >>> gate = ResidualGate()
    >>> x, f = np.ones((2, 3, 4)), np.zeros((2, 3, 4))
    >>> bool(np.all(keras.ops.convert_to_numpy(gate(x, f)) == 1.0))
    True
    """

    def __init__(self, initial_value=0.0, **kwargs):
        super().__init__(**kwargs)
        self.initial_value = float(initial_value)

    def build(self, inputs_shape, update_shape=None):
        self.alpha = self.add_weight(
            name="alpha",
            shape=(),
            initializer=keras.initializers.Constant(self.initial_value),
            trainable=True,
        )
        self.built = True

    def call(self, inputs, update):
        check_dims(self.name, "update", update.shape, tuple(inputs.shape),
                   "the shape of `inputs`")
        weight = ops.tanh(ops.cast(self.alpha, inputs.dtype))
        return inputs + weight * (update - inputs)

    def compute_output_shape(self, inputs_shape, update_shape=None):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config["initial_value"] = self.initial_value
        return config
