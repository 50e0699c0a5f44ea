import numpy as np
import pytest
from keras import ops
from layer_test_case import run_layer_test
from layer_test_case import to_numpy

from keras_hsum.layers.copy_attention import CopyAttention

B, S, P, T, DQ, D, K = 2, 3, 3, 4, 6, 5, 4


def make_inputs(rng, hierarchical=False, paragraphs=P, tokens=T):
    token_mask = np.ones((B, paragraphs, tokens), bool)
    token_mask[1, 2] = False  # a fully padded paragraph
    token_mask[1, 0, 3:] = False
    token_mask[0, 1, 1:] = False
    inputs = {
        "query": rng.normal(size=(B, S, DQ)).astype("float32"),
        "memory": rng.normal(size=(B, paragraphs, tokens, D)).astype("float32"),
        "token_mask": token_mask,
    }
    if hierarchical:
        weights = rng.uniform(0.1, 1.0, size=(B, S, paragraphs))
        weights = weights * token_mask.any(-1)[:, None, :]
        inputs["paragraph_weights"] = (weights / weights.sum(-1, keepdims=True)).astype(
            "float32"
        )
    return inputs


def numpy_copy_attention(layer, inputs):
    """See et al. Eq. 1-2 with one head; hierarchical: beta_p softmax_t (loops)."""
    w_q = ops.convert_to_numpy(layer.query_dense.kernel).astype("float64")
    w_k = ops.convert_to_numpy(layer.key_dense.kernel).astype("float64")
    query = inputs["query"].astype("float64")
    memory = inputs["memory"].astype("float64")
    mask = inputs["token_mask"]
    beta = inputs.get("paragraph_weights")
    batch, steps = query.shape[:2]
    paragraphs, tokens = memory.shape[1:3]
    attention = np.zeros((batch, steps, paragraphs, tokens))
    for b in range(batch):
        for s in range(steps):
            q = query[b, s] @ w_q
            scores = np.full((paragraphs, tokens), -np.inf)
            for p in range(paragraphs):
                for t in range(tokens):
                    if mask[b, p, t]:
                        scores[p, t] = q @ (memory[b, p, t] @ w_k) / np.sqrt(w_k.shape[1])
            if beta is None:
                e = np.exp(scores - scores.max())
                attention[b, s] = e / e.sum()
            else:
                for p in range(paragraphs):
                    if mask[b, p].any():
                        e = np.exp(scores[p] - scores[p].max())
                        attention[b, s, p] = beta[b, s, p] * e / e.sum()
    context = np.einsum("bspt,bptd->bsd", attention, memory)
    return attention, context


def test_shared_layer_checks_flat():
    run_layer_test(
        CopyAttention,
        {"key_dim": K},
        make_inputs(np.random.default_rng(0)),
        expected_output_shape=((B, S, P, T), (B, S, D)),
        expected_num_trainable_weights=2,
    )


def test_shared_layer_checks_hierarchical():
    run_layer_test(
        CopyAttention,
        {"key_dim": None},
        make_inputs(np.random.default_rng(1), hierarchical=True),
        expected_output_shape=((B, S, P, T), (B, S, D)),
        expected_num_trainable_weights=2,
        run_mixed_precision_check=False,  # the flat test covers it
    )


@pytest.mark.parametrize("hierarchical", [False, True])
def test_matches_numpy_transcription(hierarchical):
    inputs = make_inputs(np.random.default_rng(2), hierarchical=hierarchical)
    layer = CopyAttention(key_dim=K)
    attention, context = to_numpy(layer(**inputs))
    expected_attention, expected_context = numpy_copy_attention(layer, inputs)
    np.testing.assert_allclose(attention, expected_attention, atol=1e-6)
    np.testing.assert_allclose(context, expected_context, atol=1e-5)
    # Distributions over the real tokens (hierarchical: beta sums to 1 too).
    np.testing.assert_allclose(attention.sum(axis=(-2, -1)), 1.0, atol=1e-6)
    assert np.all(attention[~np.broadcast_to(inputs["token_mask"][:, None], attention.shape)] == 0)


def test_precomputed_keys_give_the_same_outputs():
    inputs = make_inputs(np.random.default_rng(3), hierarchical=True)
    layer = CopyAttention()
    reference = to_numpy(layer(**inputs))
    keys = layer.project_keys(inputs["memory"])
    # A memory whose keys were computed before: `keys` is what is attended.
    for r, o in zip(reference, to_numpy(layer(**inputs, keys=keys))):
        np.testing.assert_allclose(o, r, atol=1e-6)


def test_padding_does_not_change_outputs():
    rng = np.random.default_rng(4)
    inputs = make_inputs(rng, hierarchical=True)
    layer = CopyAttention(key_dim=K)
    attention, context = to_numpy(layer(**inputs))
    wide = make_inputs(rng, hierarchical=True, paragraphs=P + 1, tokens=T + 2)
    wide["query"] = inputs["query"]
    wide["memory"][:, :P, :T] = inputs["memory"]
    wide["token_mask"][:] = False
    wide["token_mask"][:, :P, :T] = inputs["token_mask"]
    wide["paragraph_weights"][:] = 0.0
    wide["paragraph_weights"][..., :P] = inputs["paragraph_weights"]
    wide_attention, wide_context = to_numpy(layer(**wide))
    np.testing.assert_allclose(wide_attention[..., :P, :T], attention, atol=1e-6)
    assert np.all(wide_attention[..., P:, :] == 0) and np.all(wide_attention[..., T:] == 0)
    np.testing.assert_allclose(wide_context, context, atol=1e-5)


def test_errors_name_the_argument():
    layer = CopyAttention()
    inputs = make_inputs(np.random.default_rng(5))
    with pytest.raises(ValueError, match="`memory` must have rank 4"):
        layer(inputs["query"], inputs["memory"][:, 0])
    with pytest.raises(ValueError, match="`paragraph_weights` must have shape"):
        layer(inputs["query"], inputs["memory"], paragraph_weights=np.ones((B, S, P + 1), "float32"))
    with pytest.raises(ValueError, match="`key_dim` must be None or an int >= 1"):
        CopyAttention(key_dim=0)
