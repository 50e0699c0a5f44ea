import keras
import keras_hub
import numpy as np
import pytest
from keras import ops
from layer_test_case import compute_gradients
from layer_test_case import input_gradients
from layer_test_case import run_layer_test
from layer_test_case import to_numpy
from test_inter_paragraph_attention import numpy_inter_paragraph_attention
from test_multi_head_pooling import numpy_layer_norm
from test_multi_head_pooling import numpy_pool

from keras_hsum.layers.global_transformer_layer import GlobalTransformerLayer

B, P, T, D, H, F = 2, 3, 4, 8, 2, 12


def weights_of(layer):
    return {v.name: ops.convert_to_numpy(v).astype("float64") for v in layer.weights}


def numpy_global_layer(x, token_mask, paragraph_mask, layer, graph=None, graph_heads=()):
    """HT eqs. 9-15: pool -> inter-paragraph attention -> c_i -> FFN + LN."""
    pool_w = weights_of(layer.pooling)
    attn_w = weights_of(layer.inter_paragraph_attention)
    # Its own output LayerNorm (the pooling's head norm also names its
    # weights gamma and beta).
    w = {**weights_of(layer), **weights_of(layer.layer_norm)}
    # HT eq. 11: each head vector layer-normalised (the pooling's gamma/beta).
    _, heads, _ = numpy_pool(x, token_mask, pool_w, H, feedforward=False, head_norm=True)
    valid = paragraph_mask & token_mask.any(-1)
    out = np.zeros_like(x)
    for b in range(x.shape[0]):
        c, _ = numpy_inter_paragraph_attention(
            heads[b], valid[b], attn_w, None if graph is None else graph[b], graph_heads
        )
        for i in range(x.shape[1]):
            for j in range(x.shape[2]):
                h = np.maximum(
                    (x[b, i, j] + c[i]) @ w["ffn_intermediate_kernel"] + w["ffn_intermediate_bias"],
                    0.0,
                )
                g = h @ w["ffn_output_kernel"] + w["ffn_output_bias"]
                out[b, i, j] = numpy_layer_norm(g + x[b, i, j], w["gamma"], w["beta"], 1e-6)
    return out


def make_inputs(seed=0, paragraphs=P, tokens=T):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, paragraphs, tokens, D)).astype("float32")
    token_mask = np.ones((B, paragraphs, tokens), "bool")
    token_mask[0, 0, 2:] = False
    token_mask[1, 2, :] = False  # a fully padded paragraph
    graph = rng.uniform(size=(B, paragraphs, paragraphs)).astype("float32")
    return x, token_mask, graph


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_shared_layer_checks():
    x, token_mask, graph = make_inputs()
    run_layer_test(
        GlobalTransformerLayer,
        {"num_heads": H, "intermediate_dim": F, "graph_heads": [1]},
        {
            "inputs": x,
            "token_mask": token_mask.astype("int32"),
            "paragraph_mask": np.array([[1, 1, 0], [1, 1, 1]], "int32"),
            "graph": graph,
        },
        expected_output_shape=(B, P, T, D),
        # pooling 5 + inter-paragraph attention 5 + FFN 4 + layer norm 2
        expected_num_trainable_weights=18,
    )


@pytest.mark.parametrize("use_graph", [False, True])
def test_matches_numpy_transcription(use_graph):
    x, token_mask, graph = make_inputs(1)
    paragraph_mask = np.array([[1, 1, 0], [1, 1, 1]], "bool")
    layer = GlobalTransformerLayer(
        num_heads=H, intermediate_dim=F, graph_heads=[0], bias_initializer="random_normal"
    )
    layer.build(x.shape, token_mask.shape, paragraph_mask.shape, graph.shape)
    rng = np.random.default_rng(2)
    layer.layer_norm.gamma.assign(rng.normal(size=(D,)).astype("float32"))
    layer.layer_norm.beta.assign(rng.normal(size=(D,)).astype("float32"))
    layer.pooling.head_norm.gamma.assign(rng.normal(size=(D // H,)).astype("float32"))
    layer.pooling.head_norm.beta.assign(rng.normal(size=(D // H,)).astype("float32"))
    out = to_numpy(
        layer(
            x,
            token_mask=token_mask,
            paragraph_mask=paragraph_mask,
            graph=graph if use_graph else None,
        )
    )
    expected = numpy_global_layer(
        x.astype("float64"),
        token_mask,
        paragraph_mask,
        layer,
        graph=graph.astype("float64") if use_graph else None,
        graph_heads=(0,),
    )
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_paragraph_mask_defaults_to_any_token():
    x, token_mask, _ = make_inputs(3)
    layer = GlobalTransformerLayer(num_heads=H, intermediate_dim=F)
    default = to_numpy(layer(x, token_mask=token_mask))
    explicit = to_numpy(
        layer(x, token_mask=token_mask, paragraph_mask=token_mask.any(-1))
    )
    np.testing.assert_allclose(default, explicit, atol=1e-6)
    expected = numpy_global_layer(
        x.astype("float64"), token_mask, np.ones((B, P), bool), layer
    )
    np.testing.assert_allclose(default, expected, atol=1e-5)


def test_padding_does_not_change_valid_outputs():
    x, token_mask, graph = make_inputs(4)
    layer = GlobalTransformerLayer(num_heads=H, intermediate_dim=F, graph_heads=[1])
    out = to_numpy(layer(x, token_mask=token_mask, graph=graph))
    # Two extra padded tokens per paragraph and one extra padded paragraph,
    # all filled with large garbage; garbage graph edges to the padding.
    rng = np.random.default_rng(5)
    x_p = rng.normal(scale=40.0, size=(B, P + 1, T + 2, D)).astype("float32")
    x_p[:, :P, :T][token_mask] = x[token_mask]
    mask_p = np.zeros((B, P + 1, T + 2), "bool")
    mask_p[:, :P, :T] = token_mask
    graph_p = rng.uniform(high=9.0, size=(B, P + 1, P + 1)).astype("float32")
    graph_p[:, :P, :P] = graph
    out_p, weights_p = to_numpy(
        layer(x_p, token_mask=mask_p, graph=graph_p, return_attention_weights=True)
    )
    np.testing.assert_allclose(out_p[:, :P, :T][token_mask], out[token_mask], atol=1e-5)
    assert np.all(weights_p[:, :, :, P] == 0)


def test_fully_padded_paragraph_no_nan_and_gradients_reach_everything():
    x, token_mask, graph = make_inputs(6)
    layer = GlobalTransformerLayer(num_heads=H, intermediate_dim=F, graph_heads=[1])
    inputs = {"inputs": x, "token_mask": token_mask, "graph": graph}
    out = to_numpy(layer(**inputs))
    assert np.all(np.isfinite(out))
    grads = compute_gradients(layer, inputs)
    paths = [v.path for v in layer.trainable_variables]
    for path, grad in zip(paths, grads):
        assert np.all(np.isfinite(grad)), path
        assert np.any(grad != 0), f"no gradient reaches {path}"
    for name in [
        "pooling/score_kernel",  # W_a
        "pooling/value_kernel",  # W_b
        "pooling/head_kernel",  # W_c^z
        "inter_paragraph_attention/query_kernel",
        "inter_paragraph_attention/key_kernel",
        "inter_paragraph_attention/value_kernel",
        "inter_paragraph_attention/output_kernel",  # W_c
        "ffn_intermediate_kernel",
        "ffn_output_kernel",
    ]:
        assert any(p.endswith(name) for p in paths), (name, paths)
    dx = input_gradients(layer, inputs, ["inputs"])["inputs"]
    assert np.all(np.isfinite(dx))


def test_context_reaches_other_paragraphs():
    # Changing paragraph 0 changes the tokens of paragraph 1 (through c_1) ...
    x, token_mask, _ = make_inputs(7)
    layer = GlobalTransformerLayer(num_heads=H, intermediate_dim=F)
    out = to_numpy(layer(x, token_mask=token_mask))
    x2 = x.copy()
    x2[0, 0, 0] += 3.0
    out2 = to_numpy(layer(x2, token_mask=token_mask))
    assert np.abs(out2[0, 1] - out[0, 1]).max() > 1e-4
    # ... but not when paragraph 0 is masked out.
    paragraph_mask = np.array([[0, 1, 1], [1, 1, 1]], "bool")
    a = to_numpy(layer(x, token_mask=token_mask, paragraph_mask=paragraph_mask))
    b = to_numpy(layer(x2, token_mask=token_mask, paragraph_mask=paragraph_mask))
    np.testing.assert_allclose(a[0, 1:], b[0, 1:], atol=1e-6)


class TinyHTEncoder(keras.Model):
    """One local keras-hub TransformerEncoder on [B·P,T,D] + one global layer."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.local = keras_hub.layers.TransformerEncoder(
            intermediate_dim=F, num_heads=H, layer_norm_epsilon=1e-6
        )
        self.global_layer = GlobalTransformerLayer(num_heads=H, intermediate_dim=F)

    def call(self, inputs):
        x, token_mask = inputs["x"], inputs["token_mask"]
        batch, paragraphs, tokens, width = x.shape
        flat = self.local(
            ops.reshape(x, (-1, tokens, width)),
            padding_mask=ops.reshape(token_mask, (-1, tokens)),
        )
        x = ops.reshape(flat, (-1, paragraphs, tokens, width))
        return self.global_layer(x, token_mask=token_mask)


def test_stack_with_keras_hub_local_layer_trains():
    x, token_mask, _ = make_inputs(8)
    model = TinyHTEncoder()
    data = {"x": x, "token_mask": token_mask}
    out = to_numpy(model(data))
    assert out.shape == (B, P, T, D) and np.all(np.isfinite(out))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [np.array(ops.convert_to_numpy(w)) for w in model.trainable_weights]
    model.fit(data, np.zeros_like(x), batch_size=B, epochs=1, verbose=0)
    after = [np.array(ops.convert_to_numpy(w)) for w in model.trainable_weights]
    assert all(np.all(np.isfinite(a)) for a in after)
    changed = [not np.array_equal(b, a) for b, a in zip(before, after)]
    assert sum(changed) > len(changed) // 2


def test_wrong_inputs_raise():
    x, token_mask, graph = make_inputs()
    layer = GlobalTransformerLayer(num_heads=H, intermediate_dim=F)
    with pytest.raises(ValueError, match=r"inputs.*rank 4.*\[B,P,T,D\].*\(2, 4, 8\)"):
        layer(x[:, 0])
    with pytest.raises(ValueError, match=r"token_mask.*\[B,P,T\].*\(2, 3, 4\).*\(2, 3, 3\)"):
        layer(x, token_mask=token_mask[..., :3])
    with pytest.raises(ValueError, match=r"token_mask.*\[B,P,T\].*\(2, 3, 4\).*\(2, 2, 4\)"):
        layer(x, token_mask=token_mask[:, :2])
    with pytest.raises(ValueError, match=r"paragraph_mask.*\[B,P\].*\(2, 3\).*\(2, 4\)"):
        layer(x, paragraph_mask=np.ones((2, 4), "bool"))
    with pytest.raises(ValueError, match=r"graph.*\[B,P,P\].*\(2, 3, 3\).*\(2, 4, 4\)"):
        layer(x, graph=np.ones((2, 4, 4), "float32"))
    with pytest.raises(ValueError, match=r"graph_heads.*head 3.*num_heads=2"):
        GlobalTransformerLayer(num_heads=H, intermediate_dim=F, graph_heads=[3])
    with pytest.raises(ValueError, match=r"divisible by num_heads=3"):
        GlobalTransformerLayer(num_heads=3, intermediate_dim=F)(x)
