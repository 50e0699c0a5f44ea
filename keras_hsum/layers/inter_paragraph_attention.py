"""HT's inter-paragraph attention over pooled head vectors (Liu & Lapata 2019, §3.3)."""

import math

import keras
import numpy as np
from keras import ops

from keras_hsum.checks import check_int
from keras_hsum.layers.input_checks import check_dims
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.input_checks import check_rank
from keras_hsum.layers.input_checks import expect_width
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import masked_softmax
from keras_hsum.layers.packed_dropout import dropout_layer


@keras.saving.register_keras_serializable(package="keras_hsum")
class InterParagraphAttention(keras.layers.Layer):
    """Per-head self-attention across paragraphs, optionally graph-informed.

    Liu & Lapata (2019, eqs. 12-13): every paragraph i has one pooled vector
    head^z_i per head z (from `MultiHeadPooling(..., return_head_outputs=True)`).
    Head z attends across paragraphs with its own Dh x Dh projections

        q^z_i = W_q^z head^z_i,  k^z_i = W_k^z head^z_i,  v^z_i = W_v^z head^z_i,
        context^z_i = Σ_i' softmax_i'(q^z_i · k^z_i' / sqrt(Dh)) v^z_i',

    and the heads are fused by one linear map c_i = W_c [context^1_i; ...;
    context^H_i] + b_c. Attention runs over valid paragraphs only.

    Graph-informed attention (HT §3.4): when a `graph` G [B,P,P] (tf-idf
    similarity or approximate discourse graph) is passed, the heads listed in
    `graph_heads` use the row-normalised graph G_ij / Σ_j' G_ij' (over valid
    paragraphs j') instead of their learned softmax weights; the value
    projection W_v^z of those heads is still learned. A row with no weight on
    any valid paragraph gives zero weights (no NaN). Without a `graph`, all
    heads learn their weights.

    Inputs are the pooled per-head vectors [B,P,H,Dh], not token states:
    pooling is `MultiHeadPooling`'s job, and keeping the two apart lets a
    caller pool once and attend with or without a graph.

    Notes: the 1/sqrt(Dh) scaling is Vaswani et al.'s (HT's text writes the
    unscaled dot product; its released code scales). W_q, W_k, W_v carry no
    bias, as in the paper's equations (a key bias would get no gradient).
    Outputs of padded paragraphs (paragraph_mask False) are zero.

    Args:
        num_heads: H; must equal axis 2 of the inputs.
        output_dim: width of the context c_i; defaults to H * Dh (= D).
        graph_heads: optional list of head indices (0 <= z < H) whose weights
            the graph replaces when a `graph` is passed.
        dropout: dropout rate on the attention weights.
        attention_dropout: the same rate under the name the Transformer
            layers give it; when not None it replaces `dropout` (the layer
            has no other dropout). Defaults to None.
        kernel_initializer: initializer of W_q, W_k, W_v, W_c.
        bias_initializer: initializer of b_c.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: float [B, P, H, Dh], the pooled head vectors head^z_i.
        paragraph_mask: optional bool or 0/1 int [B, P]; True marks a real
            paragraph. Defaults to all valid.
        graph: optional float [B, P, P], non-negative edge weights G_ij
            (row i attends to column j).
        return_attention_weights: also return the attention weights.
        training: bool, whether dropout is active.

    Returns:
        context: float [B, P, output_dim]; with
        `return_attention_weights=True`, a tuple
        `(context [B, P, output_dim], weights [B, H, P, P])` (the weights
        before dropout; graph rows in the graph heads).

    Example:
    >>> attention = InterParagraphAttention(num_heads=2, graph_heads=[1])
    >>> heads = np.random.uniform(size=(2, 3, 2, 4)).astype("float32")
    >>> graph = np.random.uniform(size=(2, 3, 3)).astype("float32")
    >>> context, weights = attention(
    ...     heads, paragraph_mask=np.ones((2, 3), "bool"), graph=graph,
    ...     return_attention_weights=True)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 3, 8), (2, 2, 3, 3))

    References:
        Liu & Lapata (2019), Hierarchical Transformers for Multi-Document
        Summarization, ACL (§3.3 inter-paragraph attention, §3.4
        graph-informed attention).
    """

    def __init__(
        self,
        num_heads,
        output_dim=None,
        graph_heads=None,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        num_heads = check_int("num_heads", num_heads, owner="InterParagraphAttention")
        check_hyperparameters(
            self.name, optional=("attention_dropout",), attention_dropout=attention_dropout
        )
        if graph_heads is not None:
            graph_heads = list(graph_heads)
            for head in graph_heads:
                if not isinstance(head, (int, np.integer)) or not 0 <= head < num_heads:
                    raise ValueError(
                        f"InterParagraphAttention: `graph_heads` names head {head!r}, "
                        f"but num_heads={num_heads} has heads 0..{num_heads - 1}. "
                        f"Pass indices in that range."
                    )
            graph_heads = [int(h) for h in graph_heads]
        self.num_heads = num_heads
        self.output_dim = output_dim
        self.graph_heads = graph_heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.attention_weights_dropout = dropout_layer(
            dropout if attention_dropout is None else attention_dropout,
            dtype=self.dtype_policy,
            name="attention_dropout",
        )

    def _initializer(self, initializer):
        return keras.initializers.get(keras.initializers.serialize(initializer))

    def _check_shapes(self, inputs_shape, paragraph_mask_shape, graph_shape):
        inputs_shape = check_rank(self.name, "inputs", inputs_shape, 4, "[B,P,H,Dh]")
        batch, paragraphs, heads, _ = inputs_shape
        if heads is not None and heads != self.num_heads:
            raise ValueError(
                f"{self.name}: `inputs` must have shape [B,P,H,Dh] with "
                f"H = num_heads = {self.num_heads}, received shape {inputs_shape}."
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

    def build(self, inputs_shape, paragraph_mask_shape=None, graph_shape=None):
        inputs_shape = self._check_shapes(inputs_shape, paragraph_mask_shape, graph_shape)
        head_dim = inputs_shape[-1]
        if head_dim is None:
            raise ValueError(
                f"{self.name}: the last axis Dh of `inputs` must be known, "
                f"received shape {inputs_shape}."
            )
        heads = self.num_heads
        output_dim = self.output_dim or heads * head_dim
        for name in ("query_kernel", "key_kernel", "value_kernel"):
            setattr(
                self,
                name,
                self.add_weight(
                    name=name,
                    shape=(heads, head_dim, head_dim),
                    initializer=self._initializer(self.kernel_initializer),
                ),
            )
        self.output_kernel = self.add_weight(
            name="output_kernel",
            shape=(heads * head_dim, output_dim),
            initializer=self._initializer(self.kernel_initializer),
        )
        self.output_bias = self.add_weight(
            name="output_bias",
            shape=(output_dim,),
            initializer=self._initializer(self.bias_initializer),
        )
        expect_width(self, "inputs", inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        paragraph_mask=None,
        graph=None,
        return_attention_weights=False,
        training=None,
    ):
        self._check_shapes(
            inputs.shape,
            None if paragraph_mask is None else paragraph_mask.shape,
            None if graph is None else graph.shape,
        )
        heads, head_dim = self.num_heads, self.query_kernel.shape[-1]
        query = ops.einsum("bphk,hkj->bhpj", inputs, self.query_kernel)
        key = ops.einsum("bphk,hkj->bhpj", inputs, self.key_kernel)
        value = ops.einsum("bphk,hkj->bhpj", inputs, self.value_kernel)
        scores = ops.einsum(
            "bhpj,bhqj->bhpq", ops.cast(query, "float32"), ops.cast(key, "float32")
        ) / math.sqrt(head_dim)
        mask = None
        if paragraph_mask is not None:
            paragraph_mask = as_bool_mask(paragraph_mask)
            # Valid query row and valid key column: [B, 1, P, P].
            mask = ops.logical_and(
                paragraph_mask[:, None, :, None], paragraph_mask[:, None, None, :]
            )
        weights = masked_softmax(scores, mask, axis=-1)
        if graph is not None and self.graph_heads:
            graph = ops.cast(graph, "float32")
            if mask is not None:
                graph = graph * ops.cast(mask[:, 0], "float32")
            totals = ops.sum(graph, axis=-1, keepdims=True)
            has_weight = totals > 0
            graph = ops.where(
                has_weight, graph / ops.where(has_weight, totals, 1.0), 0.0
            )
            is_graph_head = np.zeros((1, heads, 1, 1), "bool")
            is_graph_head[0, self.graph_heads] = True
            weights = ops.where(is_graph_head, graph[:, None], weights)
        weights = ops.cast(weights, self.compute_dtype)
        dropped = self.attention_weights_dropout(weights, training=training)
        context = ops.einsum("bhpq,bhqj->bphj", dropped, value)
        shape = ops.shape(context)
        context = ops.reshape(context, (shape[0], shape[1], heads * head_dim))
        # c_i = W_c [context^1_i; ...; context^H_i] + b_c.
        context = ops.matmul(context, self.output_kernel) + self.output_bias
        if paragraph_mask is not None:
            context = context * ops.cast(paragraph_mask, context.dtype)[..., None]
        if return_attention_weights:
            return context, weights
        return context

    def compute_output_shape(
        self,
        inputs_shape,
        paragraph_mask_shape=None,
        graph_shape=None,
        return_attention_weights=False,
    ):
        batch, paragraphs, heads, head_dim = self._check_shapes(
            inputs_shape, paragraph_mask_shape, graph_shape
        )
        output_dim = self.output_dim or (None if head_dim is None else heads * head_dim)
        context = (batch, paragraphs, output_dim)
        if not return_attention_weights:
            return context
        return context, (batch, self.num_heads, paragraphs, paragraphs)

    def compute_output_spec(
        self,
        inputs,
        paragraph_mask=None,
        graph=None,
        return_attention_weights=False,
        training=None,
    ):
        shapes = self.compute_output_shape(
            inputs.shape,
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
                "output_dim": self.output_dim,
                "graph_heads": self.graph_heads,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "attention_dropout": self.attention_dropout,
            }
        )
        return config
