"""Multi-head pooling of token states into one vector per sequence (HT §3.3, PHT §3.1)."""

import keras
from keras import ops

from keras_hsum.checks import check_int
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.input_checks import expect_width
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import masked_softmax
from keras_hsum.layers.packed_dropout import dropout_layer


def _check_pooling_shapes(layer, inputs_shape, token_mask_shape):
    """ValueErrors for a wrong `inputs` rank or a `token_mask` not [..., T]."""
    inputs_shape = tuple(None if d is None else int(d) for d in inputs_shape)
    if len(inputs_shape) < 3:
        raise ValueError(
            f"{layer}: `inputs` must have rank >= 3 with shape [..., T, D] "
            f"([B,P,T,D] for paragraphs, [B,T,D] for one sequence), received "
            f"shape {inputs_shape}."
        )
    if token_mask_shape is not None:
        mask_shape = tuple(None if d is None else int(d) for d in token_mask_shape)
        expected = inputs_shape[:-1]
        ok = len(mask_shape) == len(expected) and all(
            e is None or m is None or e == m for m, e in zip(mask_shape, expected)
        )
        if not ok:
            raise ValueError(
                f"{layer}: `token_mask` must have shape [..., T] = {expected} "
                f"(the `inputs` shape {inputs_shape} without D), received shape "
                f"{mask_shape}."
            )
    return inputs_shape


@keras.saving.register_keras_serializable(package="keras_hsum")
class MultiHeadPooling(keras.layers.Layer):
    """Multi-head attention pooling: one vector per sequence of tokens.

    Liu & Lapata (2019, eqs. 9-11) pool the tokens x_t of a paragraph with
    H heads. Head h scores every token with a scalar a^h_t = W_a^h x_t,
    projects it to a value b^h_t = W_b^h x_t (Dh = hidden_dim / H wide),
    normalises the scores with a softmax over the paragraph's valid tokens,
    â^h = softmax_t(a^h), and transforms the weighted sum with its own
    Dh x Dh matrix and layer normalisation ("a weighted summation with
    another linear transformation and layer normalization", §3.3):

        head^h = LayerNorm(W_c^h Σ_t â^h_t b^h_t).

    `feedforward=False` (HT form) returns pooled = [head^1; ...; head^H],
    i.e. W_c applied block-diagonally, one block per head. The layer
    normalisation is `head_layer_norm=True`, over the Dh entries of each
    head vector with one gain and bias shared by the heads (as HT's
    released code); `GlobalTransformerLayer` pools this way, exactly as in
    HT. Without it (the default) head^h = W_c^h Σ_t â^h_t b^h_t, as SEAL's
    and SHTE's attention pooling use it. The per-head vectors head^h are
    what HT's inter-paragraph attention consumes (`return_head_outputs=True`).

    `feedforward=True` (PHT form, Ma & Zong eqs. 2-5) keeps the head vectors
    φ^h = Σ_t â^h_t b^h_t, concatenates them, applies a full linear map
    φ = W_3 [φ^1; ...; φ^H] and a residual two-layer ReLU feed-forward with
    layer normalisation: pooled = LayerNorm(φ + FFN(φ)). (PHT scores head h
    by b^h W_2 with W_2 shared by the heads; that is the special case
    W_a^h = W_b^h W_2 of the per-head score used here.)

    With `num_heads=1` this is SEAL's attention pooling. Tokens with
    `token_mask` False get zero weight; a sequence without any valid token
    pools to the zero vector (zero head vectors and weights), never NaN.

    Args:
        num_heads: H, the number of pooling heads.
        hidden_dim: width of the pooled vector; defaults to D of the input.
            Must be divisible by `num_heads` (Dh = hidden_dim / H).
        feedforward: False for HT's form, True for PHT's
            (W_3, then LayerNorm(φ + FFN(φ))).
        head_layer_norm: HT form only: layer-normalise each head vector
            head^h over its Dh entries (HT §3.3). Must be False with
            `feedforward=True`.
        intermediate_dim: hidden size of the PHT feed-forward network;
            defaults to 4 * hidden_dim. Unused when `feedforward=False`.
        dropout: dropout rate on the pooling weights (unless
            `attention_dropout` is set) and, in the PHT form, on the
            feed-forward output before the residual sum.
        attention_dropout: dropout rate on the pooling weights â^h, or None
            (the default) for `dropout`.
        layer_norm_epsilon: epsilon of the layer normalisation (PHT form,
            or the head vectors' with `head_layer_norm`).
        kernel_initializer: initializer of every projection matrix.
        bias_initializer: initializer of every bias.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: float [..., T, D], e.g. [B, P, T, D] (paragraphs) or
            [B, T, D] (one sequence).
        token_mask: optional bool or 0/1 int [..., T]; True marks a real
            token. Defaults to all tokens valid.
        return_head_outputs: also return the head vectors and the weights.
        training: bool, whether dropout is active.

    Returns:
        pooled: float [..., hidden_dim] (hidden_dim = D by default).
        With `return_head_outputs=True`, a tuple
        `(pooled [..., hidden_dim], head_vectors [..., H, Dh],
        weights [..., H, T])`, where head_vectors are HT's head^h (after
        W_c^h) in the HT form and PHT's φ^h (before W_3) in the PHT form,
        and weights are the pooling distributions â^h over T.

    Weights (for inspection): `score_kernel` W_a [D, H] (no bias: a
    softmax ignores it), `value_kernel` W_b [D, H, Dh] and `value_bias`
    [H, Dh]; HT form: `head_kernel` W_c [H, Dh, Dh] and `head_bias` [H, Dh]
    (and the sublayer `head_norm`, gain and bias [Dh], with
    `head_layer_norm`);
    PHT form: `output_kernel` W_3 [hidden_dim, hidden_dim], `output_bias`,
    `ffn_intermediate_kernel`/`_bias`, `ffn_output_kernel`/`_bias` and the
    sublayer `layer_norm`.

    Example:
    >>> pooling = MultiHeadPooling(num_heads=2)
    >>> x = np.random.uniform(size=(2, 3, 5, 8)).astype("float32")
    >>> mask = np.ones((2, 3, 5), "bool")
    >>> tuple(pooling(x, token_mask=mask).shape)
    (2, 3, 8)
    >>> pooled, heads, weights = pooling(x, mask, return_head_outputs=True)
    >>> tuple(heads.shape), tuple(weights.shape)
    ((2, 3, 2, 4), (2, 3, 2, 5))

    References:
        Liu & Lapata (2019), Hierarchical Transformers for Multi-Document
        Summarization, ACL (§3.3, multi-head pooling).
        Ma & Zong (2021), Parallel Hierarchical Transformer with Attention
        Alignment for Abstractive Multi-Document Summarization (eqs. 2-5).
    """

    def __init__(
        self,
        num_heads,
        hidden_dim=None,
        feedforward=False,
        intermediate_dim=None,
        dropout=0.0,
        layer_norm_epsilon=1e-6,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        head_layer_norm=False,
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        num_heads = check_int("num_heads", num_heads, owner="MultiHeadPooling")
        check_hyperparameters(
            self.name, optional=("attention_dropout",), attention_dropout=attention_dropout
        )
        if head_layer_norm and feedforward:
            raise ValueError(
                "MultiHeadPooling: `head_layer_norm=True` normalises HT's head "
                "vectors and needs `feedforward=False`; the PHT form "
                "(`feedforward=True`) normalises its pooled vector already."
            )
        if hidden_dim is not None and hidden_dim % num_heads:
            raise ValueError(
                f"MultiHeadPooling: `hidden_dim` must be divisible by "
                f"`num_heads`, received hidden_dim={hidden_dim}, "
                f"num_heads={num_heads}."
            )
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.feedforward = feedforward
        self.head_layer_norm = bool(head_layer_norm)
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.attention_weights_dropout = dropout_layer(
            dropout if attention_dropout is None else attention_dropout,
            dtype=self.dtype_policy,
            name="attention_dropout",
        )
        if feedforward:
            self.ffn_dropout = dropout_layer(
                dropout, dtype=self.dtype_policy, name="ffn_dropout"
            )
            self.layer_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
            )
        self.head_norm = None
        if self.head_layer_norm:
            self.head_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="head_norm"
            )

    def _kernel(self, name, shape):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=keras.initializers.get(
                keras.initializers.serialize(self.kernel_initializer)
            ),
        )

    def _bias(self, name, shape):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=keras.initializers.get(
                keras.initializers.serialize(self.bias_initializer)
            ),
        )

    def _resolved_dims(self, inputs_shape):
        hidden_dim = self.hidden_dim if self.hidden_dim is not None else inputs_shape[-1]
        if hidden_dim is None:
            raise ValueError(
                f"{self.name}: the last axis D of `inputs` must be known when "
                f"`hidden_dim` is None, received shape {tuple(inputs_shape)}."
            )
        if hidden_dim % self.num_heads:
            raise ValueError(
                f"{self.name}: the pooled width (hidden_dim, default D) must be "
                f"divisible by num_heads={self.num_heads}, received "
                f"hidden_dim={hidden_dim} (inputs shape {tuple(inputs_shape)})."
            )
        return hidden_dim, hidden_dim // self.num_heads

    def build(self, inputs_shape, token_mask_shape=None):
        inputs_shape = _check_pooling_shapes(self.name, inputs_shape, token_mask_shape)
        input_dim = inputs_shape[-1]
        if input_dim is None:
            raise ValueError(
                f"{self.name}: the last axis D of `inputs` must be known, "
                f"received shape {inputs_shape}."
            )
        hidden_dim, head_dim = self._resolved_dims(inputs_shape)
        heads = self.num_heads
        self.score_kernel = self._kernel("score_kernel", (input_dim, heads))
        self.value_kernel = self._kernel("value_kernel", (input_dim, heads, head_dim))
        self.value_bias = self._bias("value_bias", (heads, head_dim))
        if self.feedforward:
            intermediate_dim = self.intermediate_dim or 4 * hidden_dim
            self.output_kernel = self._kernel("output_kernel", (hidden_dim, hidden_dim))
            self.output_bias = self._bias("output_bias", (hidden_dim,))
            self.ffn_intermediate_kernel = self._kernel(
                "ffn_intermediate_kernel", (hidden_dim, intermediate_dim)
            )
            self.ffn_intermediate_bias = self._bias(
                "ffn_intermediate_bias", (intermediate_dim,)
            )
            self.ffn_output_kernel = self._kernel(
                "ffn_output_kernel", (intermediate_dim, hidden_dim)
            )
            self.ffn_output_bias = self._bias("ffn_output_bias", (hidden_dim,))
            self.layer_norm.build(inputs_shape[:-2] + (hidden_dim,))
        else:
            self.head_kernel = self._kernel("head_kernel", (heads, head_dim, head_dim))
            self.head_bias = self._bias("head_bias", (heads, head_dim))
            if self.head_norm is not None:
                self.head_norm.build(inputs_shape[:-2] + (heads, head_dim))
        expect_width(self, "inputs", inputs_shape)
        self.built = True

    def call(self, inputs, token_mask=None, return_head_outputs=False, training=None):
        _check_pooling_shapes(
            self.name, inputs.shape, None if token_mask is None else token_mask.shape
        )
        hidden_dim = self.value_kernel.shape[1] * self.value_kernel.shape[2]
        # a^h_t = W_a^h x_t (scalar per head), b^h_t = W_b^h x_t.
        scores = ops.einsum("...td,dh->...th", inputs, self.score_kernel)
        values = ops.einsum("...td,dhk->...thk", inputs, self.value_kernel)
        values = values + self.value_bias
        mask = None
        if token_mask is not None:
            token_mask = as_bool_mask(token_mask)
            mask = token_mask[..., None]
        # Softmax over T in float32 (mixed-precision safe); [..., T, H].
        weights = masked_softmax(ops.cast(scores, "float32"), mask, axis=-2)
        weights = ops.cast(weights, self.compute_dtype)
        dropped = self.attention_weights_dropout(weights, training=training)
        heads = ops.einsum("...th,...thk->...hk", dropped, values)
        leading = ops.shape(heads)[:-2]
        if self.feedforward:
            # φ = W_3 [φ^1; ...; φ^H]; φ := LayerNorm(φ + FFN(φ)).
            phi = ops.reshape(heads, tuple(leading) + (hidden_dim,))
            phi = ops.matmul(phi, self.output_kernel) + self.output_bias
            ffn = ops.relu(
                ops.matmul(phi, self.ffn_intermediate_kernel) + self.ffn_intermediate_bias
            )
            ffn = ops.matmul(ffn, self.ffn_output_kernel) + self.ffn_output_bias
            ffn = self.ffn_dropout(ffn, training=training)
            pooled = self.layer_norm(phi + ffn)
        else:
            # head^h = LayerNorm(W_c^h Σ_t â^h_t b^h_t) (HT; the norm with
            # head_layer_norm); pooled = [head^1; ...; head^H].
            heads = ops.einsum("...hk,hkj->...hj", heads, self.head_kernel)
            heads = heads + self.head_bias
            if self.head_norm is not None:
                heads = self.head_norm(heads)
            pooled = ops.reshape(heads, tuple(leading) + (hidden_dim,))
        if token_mask is not None:
            # A sequence without valid tokens pools to zeros.
            valid = ops.cast(ops.any(token_mask, axis=-1), pooled.dtype)
            pooled = pooled * valid[..., None]
            heads = heads * ops.cast(valid, heads.dtype)[..., None, None]
        if return_head_outputs:
            return pooled, heads, ops.swapaxes(weights, -1, -2)
        return pooled

    def compute_output_shape(
        self, inputs_shape, token_mask_shape=None, return_head_outputs=False
    ):
        inputs_shape = _check_pooling_shapes(self.name, inputs_shape, token_mask_shape)
        hidden_dim, head_dim = self._resolved_dims(inputs_shape)
        leading = inputs_shape[:-2]
        pooled = leading + (hidden_dim,)
        if not return_head_outputs:
            return pooled
        return (
            pooled,
            leading + (self.num_heads, head_dim),
            leading + (self.num_heads, inputs_shape[-2]),
        )

    def compute_output_spec(
        self, inputs, token_mask=None, return_head_outputs=False, training=None
    ):
        shapes = self.compute_output_shape(
            inputs.shape,
            None if token_mask is None else token_mask.shape,
            return_head_outputs=return_head_outputs,
        )
        if not return_head_outputs:
            return keras.KerasTensor(shapes, dtype=self.compute_dtype)
        return tuple(keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "hidden_dim": self.hidden_dim,
                "feedforward": self.feedforward,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "head_layer_norm": self.head_layer_norm,
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
