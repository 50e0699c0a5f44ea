"""HT's global transformer layer (Liu & Lapata 2019, §3.3)."""

import keras
from keras import ops

from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_rank
from keras_hsum.layers.input_checks import expect_width
from keras_hsum.layers.inter_paragraph_attention import InterParagraphAttention
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import merge_masks
from keras_hsum.layers.multi_head_pooling import MultiHeadPooling
from keras_hsum.layers.packed_dropout import dropout_layer


@keras.saving.register_keras_serializable(package="keras_hsum")
class GlobalTransformerLayer(keras.layers.Layer):
    """Exchanges information between paragraphs, then updates every token.

    Liu & Lapata (2019, eqs. 9-15), for token j of paragraph i:

    1. multi-head pooling (`MultiHeadPooling`, HT form with
       `head_layer_norm=True`) turns the tokens of each paragraph into H
       layer-normalised head vectors head^z_i [B,P,H,Dh];
    2. inter-paragraph attention (`InterParagraphAttention`) lets paragraphs
       attend to each other head by head and fuses the heads into a context
       c_i = W_c [context^1_i; ...; context^H_i]  [B,P,D]; heads listed in
       `graph_heads` follow a given `graph` instead of learned weights;
    3. the context is added to every token of its paragraph and fed to a
       ReLU feed-forward network with a residual connection on the token and
       layer normalisation:

           g_ij = W_o2 ReLU(W_o1 (x_ij + c_i) + b_o1) + b_o2,
           x^{l+1}_ij = LayerNorm(g_ij + x_ij).

    (The residual is on x_ij, as in the paper's eq. 15; HT's released code
    normalises first instead. Dropout, when set, acts on the pooling and
    inter-paragraph attention weights and on g_ij.)

    An HT encoder interleaves these with local layers, which are vanilla
    transformer layers inside each paragraph: reshape x [B,P,T,D] to
    [B·P,T,D], run `keras_hub.layers.TransformerEncoder(...)(x,
    padding_mask=token_mask reshaped to [B·P,T])`, reshape back, and apply
    `GlobalTransformerLayer` on [B,P,T,D] (HT's released configuration:
    D=256, H=8, FFN 1024, 6 local + 2 global layers).

    Args:
        num_heads: H, heads of the pooling and the inter-paragraph attention;
            must divide D.
        intermediate_dim: hidden size d_f of the feed-forward network.
        graph_heads: optional list of head indices whose inter-paragraph
            attention weights are replaced by the row-normalised `graph`
            when one is passed.
        dropout: dropout rate (attention weights and feed-forward output).
        attention_dropout: dropout rate on the pooling and inter-paragraph
            attention weights, or None (the default) for `dropout`.
        activation: feed-forward activation (ReLU in HT).
        layer_norm_epsilon: epsilon of the layer normalisation.
        kernel_initializer: initializer of every projection matrix.
        bias_initializer: initializer of every bias.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: float [B, P, T, D], the token states x^l.
        token_mask: optional bool or 0/1 int [B, P, T]; True marks a real
            token. Defaults to all valid.
        paragraph_mask: optional bool or 0/1 int [B, P]; defaults to
            any(token_mask, axis=-1). A paragraph is attended only when it is
            valid here and has at least one valid token.
        graph: optional float [B, P, P], non-negative edge weights (tf-idf
            similarity or discourse graph) for the `graph_heads`.
        return_attention_weights: also return the inter-paragraph attention
            weights.
        training: bool, whether dropout is active.

    Returns:
        float [B, P, T, D], the updated token states x^{l+1}; with
        `return_attention_weights=True`, a tuple `(states [B, P, T, D],
        weights [B, H, P, P])`. Padded positions hold finite values that
        valid positions never read.

    Example:
    >>> layer = GlobalTransformerLayer(num_heads=2, intermediate_dim=16)
    >>> x = np.random.uniform(size=(2, 3, 5, 8)).astype("float32")
    >>> token_mask = np.ones((2, 3, 5), "bool")
    >>> tuple(layer(x, token_mask=token_mask).shape)
    (2, 3, 5, 8)

    References:
        Liu & Lapata (2019), Hierarchical Transformers for Multi-Document
        Summarization, ACL (§3.3 global transformer layer, §3.4 graphs).
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        graph_heads=None,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-6,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.graph_heads = None if graph_heads is None else list(graph_heads)
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        initializers = {
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }
        self.pooling = MultiHeadPooling(
            num_heads,
            dropout=dropout,
            attention_dropout=attention_dropout,
            head_layer_norm=True,
            layer_norm_epsilon=layer_norm_epsilon,
            dtype=self.dtype_policy,
            name="pooling",
            **initializers,
        )
        self.inter_paragraph_attention = InterParagraphAttention(
            num_heads,
            graph_heads=self.graph_heads,
            dropout=dropout,
            attention_dropout=attention_dropout,
            dtype=self.dtype_policy,
            name="inter_paragraph_attention",
            **initializers,
        )
        self.feedforward_dropout = dropout_layer(
            dropout, dtype=self.dtype_policy, name="feedforward_dropout"
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )

    def _check_shapes(self, inputs_shape, token_mask_shape, paragraph_mask_shape, graph_shape):
        inputs_shape = check_rank(self.name, "inputs", inputs_shape, 4, "[B,P,T,D]")
        batch, paragraphs, tokens, _ = inputs_shape
        if token_mask_shape is not None:
            check_dims(
                self.name, "token_mask", token_mask_shape, (batch, paragraphs, tokens), "[B,P,T]"
            )
        if paragraph_mask_shape is not None:
            check_dims(
                self.name, "paragraph_mask", paragraph_mask_shape, (batch, paragraphs), "[B,P]"
            )
        if graph_shape is not None:
            check_dims(
                self.name, "graph", graph_shape, (batch, paragraphs, paragraphs), "[B,P,P]"
            )
        return inputs_shape

    def build(
        self,
        inputs_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
        graph_shape=None,
    ):
        inputs_shape = self._check_shapes(
            inputs_shape, token_mask_shape, paragraph_mask_shape, graph_shape
        )
        batch, paragraphs, _, hidden_dim = inputs_shape
        if hidden_dim is None or hidden_dim % self.num_heads:
            raise ValueError(
                f"{self.name}: the width D of `inputs` [B,P,T,D] must be known and "
                f"divisible by num_heads={self.num_heads}, received shape "
                f"{inputs_shape}."
            )
        head_dim = hidden_dim // self.num_heads
        self.pooling.build(inputs_shape, token_mask_shape)
        self.inter_paragraph_attention.build(
            (batch, paragraphs, self.num_heads, head_dim),
            paragraph_mask_shape=(batch, paragraphs),
            graph_shape=graph_shape,
        )

        def weight(name, shape, initializer):
            return self.add_weight(
                name=name,
                shape=shape,
                initializer=keras.initializers.get(keras.initializers.serialize(initializer)),
            )

        self.ffn_intermediate_kernel = weight(
            "ffn_intermediate_kernel", (hidden_dim, self.intermediate_dim), self.kernel_initializer
        )
        self.ffn_intermediate_bias = weight(
            "ffn_intermediate_bias", (self.intermediate_dim,), self.bias_initializer
        )
        self.ffn_output_kernel = weight(
            "ffn_output_kernel", (self.intermediate_dim, hidden_dim), self.kernel_initializer
        )
        self.ffn_output_bias = weight("ffn_output_bias", (hidden_dim,), self.bias_initializer)
        self.layer_norm.build(inputs_shape)
        expect_width(self, "inputs", inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        token_mask=None,
        paragraph_mask=None,
        graph=None,
        return_attention_weights=False,
        training=None,
    ):
        self._check_shapes(
            inputs.shape,
            None if token_mask is None else token_mask.shape,
            None if paragraph_mask is None else paragraph_mask.shape,
            None if graph is None else graph.shape,
        )
        if token_mask is not None:
            token_mask = as_bool_mask(token_mask)
            paragraph_mask = merge_masks(paragraph_mask, ops.any(token_mask, axis=-1))
        _, heads, _ = self.pooling(
            inputs, token_mask=token_mask, return_head_outputs=True, training=training
        )
        context, weights = self.inter_paragraph_attention(
            heads,
            paragraph_mask=paragraph_mask,
            graph=graph,
            return_attention_weights=True,
            training=training,
        )
        # g_ij = W_o2 act(W_o1 (x_ij + c_i)); x^{l+1}_ij = LayerNorm(g_ij + x_ij).
        hidden = inputs + context[:, :, None, :]
        hidden = self.activation(
            ops.matmul(hidden, self.ffn_intermediate_kernel) + self.ffn_intermediate_bias
        )
        update = ops.matmul(hidden, self.ffn_output_kernel) + self.ffn_output_bias
        update = self.feedforward_dropout(update, training=training)
        outputs = self.layer_norm(update + inputs)
        if return_attention_weights:
            return outputs, weights
        return outputs

    def compute_output_shape(
        self,
        inputs_shape,
        token_mask_shape=None,
        paragraph_mask_shape=None,
        graph_shape=None,
        return_attention_weights=False,
    ):
        inputs_shape = self._check_shapes(
            inputs_shape, token_mask_shape, paragraph_mask_shape, graph_shape
        )
        if not return_attention_weights:
            return inputs_shape
        batch, paragraphs = inputs_shape[:2]
        return inputs_shape, (batch, self.num_heads, paragraphs, paragraphs)

    def compute_output_spec(
        self,
        inputs,
        token_mask=None,
        paragraph_mask=None,
        graph=None,
        return_attention_weights=False,
        training=None,
    ):
        shapes = self.compute_output_shape(
            inputs.shape,
            None if token_mask is None else token_mask.shape,
            None if paragraph_mask is None else paragraph_mask.shape,
            None if graph is None else graph.shape,
            return_attention_weights=return_attention_weights,
        )
        if not return_attention_weights:
            return keras.KerasTensor(shapes, dtype=self.compute_dtype)
        return tuple(keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "graph_heads": self.graph_heads,
                "dropout": self.dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
