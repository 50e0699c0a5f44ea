import numpy as np
import pytest
from keras import ops
from layer_test_case import compute_gradients
from layer_test_case import input_gradients
from layer_test_case import run_layer_test
from layer_test_case import to_numpy

from keras_hsum.layers.inter_paragraph_attention import InterParagraphAttention

B, P, H, DH = 2, 4, 2, 4


def weights_of(layer):
    return {v.name: ops.convert_to_numpy(v).astype("float64") for v in layer.weights}


def numpy_inter_paragraph_attention(heads, valid, w, graph=None, graph_heads=()):
    """HT eqs. 12-13 for one example; heads [P, H, Dh], valid [P] bool.

    q/k/v^z_i = W^z head^z_i; context^z_i = Σ_j α^z_ij v^z_j with
    α^z_i = softmax over valid j of q^z_i·k^z_j / sqrt(Dh), or, in a graph
    head, α^z_ij = G_ij / Σ_valid j' G_ij'. c_i = W_c [context^z_i]_z + b_c.
    """
    paragraphs, num_heads, head_dim = heads.shape
    context = np.zeros((paragraphs, num_heads * head_dim))
    alphas = np.zeros((num_heads, paragraphs, paragraphs))
    for z in range(num_heads):
        q = heads[:, z] @ w["query_kernel"][z]
        k = heads[:, z] @ w["key_kernel"][z]
        v = heads[:, z] @ w["value_kernel"][z]
        for i in range(paragraphs):
            if not valid[i]:
                continue
            if graph is not None and z in graph_heads:
                row = np.where(valid, graph[i], 0.0)
                alpha = row / row.sum() if row.sum() > 0 else np.zeros(paragraphs)
            else:
                s = np.array([q[i] @ k[j] for j in range(paragraphs)]) / np.sqrt(head_dim)
                e = np.where(valid, np.exp(s - s[valid].max()), 0.0)
                alpha = e / e.sum()
            alphas[z, i] = alpha
            context[i, z * head_dim : (z + 1) * head_dim] = sum(
                alpha[j] * v[j] for j in range(paragraphs)
            )
    out = context @ w["output_kernel"] + w["output_bias"]
    out[~valid] = 0.0
    return out, alphas


def make_inputs(seed=0):
    rng = np.random.default_rng(seed)
    heads = rng.normal(size=(B, P, H, DH)).astype("float32")
    mask = np.array([[1, 1, 1, 0], [1, 0, 1, 1]], "bool")
    graph = rng.uniform(size=(B, P, P)).astype("float32")
    graph[0, 1] = 0.0  # a row without edges
    graph[0, 1, 3] = 5.0  # ... except to a padded paragraph
    return heads, mask, graph


def test_shared_layer_checks_with_graph():
    heads, mask, graph = make_inputs()
    run_layer_test(
        InterParagraphAttention,
        {"num_heads": H, "graph_heads": [0]},
        {"inputs": heads, "paragraph_mask": mask.astype("int32"), "graph": graph},
        expected_output_shape=(B, P, H * DH),
        expected_num_trainable_weights=5,
    )


def test_shared_layer_checks_without_mask_or_graph():
    heads, _, _ = make_inputs(1)
    run_layer_test(
        InterParagraphAttention,
        {"num_heads": H, "output_dim": 6},
        {"inputs": heads},
        expected_output_shape=(B, P, 6),
        expected_num_trainable_weights=5,
        # Same code paths as above; keep the file fast on the shared CPU.
        run_saving_check=False,
        run_mixed_precision_check=False,
    )


@pytest.mark.parametrize("use_graph", [False, True])
def test_matches_numpy_transcription(use_graph):
    heads, mask, graph = make_inputs(2)
    layer = InterParagraphAttention(
        num_heads=H, graph_heads=[1], bias_initializer="random_normal"
    )
    context, weights = to_numpy(
        layer(
            heads,
            paragraph_mask=mask,
            graph=graph if use_graph else None,
            return_attention_weights=True,
        )
    )
    w = weights_of(layer)
    for b in range(B):
        expected, alphas = numpy_inter_paragraph_attention(
            heads[b].astype("float64"),
            mask[b],
            w,
            graph=graph[b].astype("float64") if use_graph else None,
            graph_heads=(1,),
        )
        np.testing.assert_allclose(context[b], expected, atol=1e-5)
        np.testing.assert_allclose(weights[b], alphas, atol=1e-6)
    if use_graph:
        # The edgeless row (only an edge to a padded paragraph) gives zeros.
        assert np.all(weights[0, 1, 1] == 0)
        # The learned head still attends there.
        np.testing.assert_allclose(weights[0, 0, 1].sum(), 1.0, atol=1e-6)


def test_padding_does_not_change_valid_outputs():
    heads, mask, graph = make_inputs(3)
    layer = InterParagraphAttention(num_heads=H, graph_heads=[0])
    context = to_numpy(layer(heads, paragraph_mask=mask, graph=graph))
    rng = np.random.default_rng(4)
    heads_p = rng.normal(scale=30.0, size=(B, P + 2, H, DH)).astype("float32")
    heads_p[:, :P] = heads
    mask_p = np.zeros((B, P + 2), "bool")
    mask_p[:, :P] = mask
    graph_p = rng.uniform(high=9.0, size=(B, P + 2, P + 2)).astype("float32")
    graph_p[:, :P, :P] = graph
    # Garbage in padded paragraphs must not leak: also scramble the padded slots.
    heads_p[~mask_p] = rng.normal(scale=30.0, size=heads_p[~mask_p].shape)
    graph_p[:, :P, :P][np.broadcast_to(~mask[:, None, :], (B, P, P))] = 7.0
    context_p, weights_p = to_numpy(
        layer(heads_p, paragraph_mask=mask_p, graph=graph_p, return_attention_weights=True)
    )
    np.testing.assert_allclose(context_p[:, :P][mask], context[mask], atol=1e-5)
    assert np.all(context_p[~mask_p] == 0)
    assert np.all(weights_p[..., ~np.any(mask_p, 0)] == 0)


def test_fully_padded_example_no_nan_and_gradients_reach_weights():
    heads, mask, graph = make_inputs(5)
    mask[1] = False  # the second example has no valid paragraph at all
    layer = InterParagraphAttention(num_heads=H, graph_heads=[1])
    inputs = {
        "inputs": heads,
        "paragraph_mask": mask,
        "graph": graph,
        "return_attention_weights": True,
    }

    def loss(outputs):
        context, weights = outputs
        return ops.sum(ops.square(context)) + ops.sum(ops.square(weights))

    context, weights = to_numpy(layer(**inputs))
    assert np.all(np.isfinite(context)) and np.all(np.isfinite(weights))
    assert np.all(context[1] == 0) and np.all(weights[1] == 0)
    grads = compute_gradients(layer, inputs, loss_fn=loss)
    for variable, grad in zip(layer.trainable_variables, grads):
        assert np.all(np.isfinite(grad)), variable.path
        assert np.any(grad != 0), f"no gradient reaches {variable.path}"
    # The graph head's W_q, W_k get nothing; the learned head's do.
    by_name = dict(zip([v.name for v in layer.trainable_variables], grads))
    assert np.all(by_name["query_kernel"][1] == 0)
    assert np.any(by_name["query_kernel"][0] != 0)
    assert np.any(by_name["value_kernel"][1] != 0)
    dx = input_gradients(layer, inputs, ["inputs", "graph"], loss_fn=loss)
    for name, grad in dx.items():
        assert np.all(np.isfinite(grad)), name
    assert np.all(dx["inputs"][~mask] == 0)


def test_wrong_inputs_raise():
    heads, mask, graph = make_inputs()
    with pytest.raises(ValueError, match=r"graph_heads.*head 2.*num_heads=2"):
        InterParagraphAttention(num_heads=2, graph_heads=[0, 2])
    with pytest.raises(ValueError, match=r"graph_heads.*head -1.*num_heads=2"):
        InterParagraphAttention(num_heads=2, graph_heads=[-1])
    layer = InterParagraphAttention(num_heads=H)
    with pytest.raises(ValueError, match=r"inputs.*rank 4.*\[B,P,H,Dh\].*\(2, 4, 8\)"):
        layer(heads.reshape(B, P, H * DH))
    with pytest.raises(ValueError, match=r"inputs.*num_heads = 2.*\(2, 4, 1, 4\)"):
        layer(heads[:, :, :1])
    with pytest.raises(ValueError, match=r"paragraph_mask.*\[B,P\].*\(2, 4\).*\(2, 3\)"):
        layer(heads, paragraph_mask=mask[:, :3])
    with pytest.raises(ValueError, match=r"graph.*\[B,P,P\].*\(2, 4, 4\).*\(2, 4, 3\)"):
        layer(heads, paragraph_mask=mask, graph=graph[:, :, :3])
    with pytest.raises(ValueError, match=r"graph.*\[B,P,P\].*\(2, 4, 4\).*\(2, 4\)"):
        layer(heads, graph=graph[:, 0])
