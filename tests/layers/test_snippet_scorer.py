import numpy as np
import pytest
from layer_test_case import input_gradients, run_layer_test, to_numpy

from keras_hsum.layers.snippet_scorer import SnippetScorer

B, P, T, D, M, L = 2, 3, 4, 8, 2, 3
INIT = {"num_layers": 1, "num_heads": 2, "intermediate_dim": 8, "max_documents": 3}


def make_inputs(seed=0, segments=M, segment_length=L):
    """Snippets [B,P,T,D] and decoded segments [B,M,L,D] with their masks."""
    M, L = segments, segment_length
    rng = np.random.default_rng(seed)
    token_mask = rng.random((B, P, T)) < 0.7
    token_mask[:, :, 0] = True
    token_mask[0, 2] = False  # a fully padded snippet (token level)
    paragraph_mask = np.ones((B, P), "int32")
    paragraph_mask[1, 1] = 0  # a padded snippet
    decoded_mask = rng.random((B, M, L)) < 0.7
    decoded_mask[:, 0, 0] = True
    decoded_mask[1, 1] = False  # a padded decoded segment
    return {
        "snippets": rng.normal(size=(B, P, T, D)).astype("float32"),
        "token_mask": token_mask,
        "paragraph_mask": paragraph_mask,
        "document_ids": rng.integers(0, 3, size=(B, P)).astype("int32"),
        "decoded_segments": rng.normal(size=(B, M, L, D)).astype("float32"),
        "decoded_mask": decoded_mask.astype("int32"),
    }


def randomize_weights(layer, seed=1):
    """Non-trivial biases and layer-norm parameters for the transcription."""
    rng = np.random.default_rng(seed)
    for variable in layer.weights:
        variable.assign(0.5 * rng.normal(size=variable.shape).astype("float32"))


def value(variable):
    return to_numpy(variable).astype("float64")


# NumPy transcription of the paper: attention pooling -> transformer encoder
# over [pooled snippets; pooled decoded segments] -> feed-forward score.


def np_softmax(scores, mask, axis=-1):
    scores = np.where(mask, scores, -np.inf)
    top = np.max(np.where(mask, scores, -1e30), axis=axis, keepdims=True)
    exp = np.where(mask, np.exp(scores - top), 0.0)
    total = exp.sum(axis=axis, keepdims=True)
    return exp / np.where(total > 0, total, 1.0)


def np_attention_pooling(x, mask, pooling):
    """One-head pooling: W_c (Σ_t softmax_t(w_a·x_t) (W_b x_t + b_b)) + b_c."""
    w_a = value(pooling.score_kernel)[:, 0]
    w_b, b_b = value(pooling.value_kernel)[:, 0], value(pooling.value_bias)[0]
    w_c, b_c = value(pooling.head_kernel)[0], value(pooling.head_bias)[0]
    weights = np_softmax(x @ w_a, mask)
    pooled = np.einsum("...t,...td->...d", weights, x @ w_b + b_b) @ w_c + b_c
    return pooled * mask.any(-1, keepdims=True)


def np_layer_norm(x, norm, epsilon):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * value(norm.gamma) + value(norm.beta)


def np_encoder_layer(x, key_mask, layer, epsilon):
    """Post-norm Transformer layer: LN(x + MHA(x)), then LN(x + FFN(x))."""
    attention = layer._self_attention_layer

    def heads(dense):  # [B,N,D] -> [B,N,H,Dh]
        return np.einsum("bnd,dhk->bnhk", x, value(dense.kernel)) + value(dense.bias)

    q = heads(attention._query_dense)
    k = heads(attention._key_dense)
    v = heads(attention._value_dense)
    q = q / np.sqrt(q.shape[-1])
    logits = np.einsum("bqhk,bshk->bhqs", q, k)
    weights = np_softmax(logits, key_mask[:, None, None, :])
    context = np.einsum("bhqs,bshk->bqhk", weights, v)
    output = attention._output_dense
    attended = np.einsum("bqhk,hkd->bqd", context, value(output.kernel)) + value(output.bias)
    x = np_layer_norm(x + attended, layer._self_attention_layer_norm, epsilon)
    inner = layer._feedforward_intermediate_dense
    outer = layer._feedforward_output_dense
    hidden = np.maximum(x @ value(inner.kernel) + value(inner.bias), 0.0)
    ffn = hidden @ value(outer.kernel) + value(outer.bias)
    return np_layer_norm(x + ffn, layer._feedforward_layer_norm, epsilon)


def np_scorer(layer, data, use_decoded=True, use_documents=True):
    snippets = data["snippets"].astype("float64")
    token_mask = data["token_mask"].astype(bool)
    snippet_mask = data["paragraph_mask"].astype(bool) & token_mask.any(-1)
    x = np_attention_pooling(snippets, token_mask, layer.attention_pooling)
    if use_documents:
        x = x + value(layer.document_embeddings)[data["document_ids"]]
    key_mask = snippet_mask
    if use_decoded:
        decoded_mask = data["decoded_mask"].astype(bool)
        decoded = np_attention_pooling(
            data["decoded_segments"].astype("float64"), decoded_mask, layer.attention_pooling
        )
        x = np.concatenate([x, decoded], axis=1)
        key_mask = np.concatenate([snippet_mask, decoded_mask.any(-1)], axis=1)
    for encoder_layer in layer.encoder_layers:
        x = np_encoder_layer(x, key_mask, encoder_layer, layer.layer_norm_epsilon)
    dense = layer.score_dense
    scores = (x[:, :P] @ value(dense.kernel) + value(dense.bias))[..., 0]
    return np.where(snippet_mask, scores, -1e9), snippet_mask


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_shared_layer_checks():
    run_layer_test(
        SnippetScorer,
        INIT,
        make_inputs(),
        expected_output_shape=(B, P),
        # document table + pooling (5) + encoder layer (16) + score Dense (2).
        expected_num_trainable_weights=24,
    )


def test_shared_layer_checks_minimal():
    run_layer_test(
        SnippetScorer,
        {"num_layers": 0, "num_heads": 1, "intermediate_dim": 4},
        {"snippets": make_inputs()["snippets"]},
        expected_output_shape=(B, P),
        expected_num_trainable_weights=7,
        run_saving_check=False,  # covered by the full configuration above
        run_mixed_precision_check=False,
    )


@pytest.mark.parametrize("num_layers", [0, 2])
def test_matches_numpy_transcription(num_layers):
    data = make_inputs(2)
    layer = SnippetScorer(**{**INIT, "num_layers": num_layers})
    layer(**data)
    randomize_weights(layer)
    scores = to_numpy(layer(**data))
    expected, snippet_mask = np_scorer(layer, data)
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, expected, atol=1e-5, rtol=1e-5)
    assert (~snippet_mask).sum() == 2  # padded snippets were exercised
    # Without the optional inputs.
    plain = {k: data[k] for k in ("snippets", "token_mask", "paragraph_mask")}
    expected, _ = np_scorer(layer, data, use_decoded=False, use_documents=False)
    np.testing.assert_allclose(to_numpy(layer(**plain)), expected, atol=1e-5, rtol=1e-5)


def test_padding_does_not_change_valid_scores():
    data = make_inputs(3)
    layer = SnippetScorer(**INIT)
    layer(**data)
    randomize_weights(layer)
    expected = to_numpy(layer(**data))

    def pad(array, axis, fill):
        shape = list(array.shape)
        shape[axis] = 1
        return np.concatenate([array, np.full(shape, fill, array.dtype)], axis=axis)

    padded = {
        # A padded token in every snippet, then a padded snippet (garbage).
        "snippets": pad(pad(data["snippets"], 2, 1e3), 1, -1e3),
        "token_mask": pad(pad(data["token_mask"], 2, False), 1, True),
        "paragraph_mask": pad(data["paragraph_mask"], 1, 0),
        "document_ids": pad(data["document_ids"], 1, 2),
        # A padded token in every decoded segment, then a padded segment.
        "decoded_segments": pad(pad(data["decoded_segments"], 2, 1e3), 1, -1e3),
        "decoded_mask": pad(pad(data["decoded_mask"], 2, 0), 1, 0),
    }
    scores = to_numpy(layer(**padded))
    np.testing.assert_allclose(scores[:, :P], expected, atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(scores[:, P], -1e9)


def test_decoded_segments_condition_the_scores():
    data = make_inputs(5)
    layer = SnippetScorer(**INIT)
    without = {k: v for k, v in data.items() if not k.startswith("decoded")}
    base = to_numpy(layer(**without))
    valid = base > -1e8
    with_decoded = to_numpy(layer(**data))
    assert np.all(np.abs(with_decoded - base)[valid] > 1e-6)
    other = dict(data, decoded_segments=data["decoded_segments"][::-1].copy())
    assert np.all(np.abs(to_numpy(layer(**other)) - with_decoded)[valid] > 1e-6)
    # Fully padded decoded segments act as if none were given.
    masked = dict(data, decoded_mask=np.zeros_like(data["decoded_mask"]))
    np.testing.assert_allclose(to_numpy(layer(**masked)), base, atol=1e-5, rtol=1e-5)


def test_fully_padded_inputs_give_no_nan_forward_or_backward():
    data = make_inputs(6)
    data["token_mask"][1] = False  # a batch row without any real snippet
    data["decoded_mask"][1] = 0
    layer = SnippetScorer(**INIT)
    scores = to_numpy(layer(**data))
    np.testing.assert_array_equal(scores[1], -1e9)
    np.testing.assert_array_equal(scores[0, 2], -1e9)
    assert np.all(np.isfinite(scores))
    grads = input_gradients(layer, data, ["snippets", "decoded_segments"])
    for name, grad in grads.items():
        assert np.all(np.isfinite(grad)), name
    # Padded tokens and snippets get no gradient; real ones do.
    real_tokens = data["token_mask"] & data["paragraph_mask"][..., None].astype(bool)
    snippet_grad = np.abs(grads["snippets"]).sum(-1)
    np.testing.assert_array_equal(snippet_grad[~real_tokens], 0.0)
    assert np.all(snippet_grad[real_tokens] > 0)
    # The extractive loss reaches the encoder through the decoded segments.
    decoded_grad = np.abs(grads["decoded_segments"]).sum(-1)
    decoded_real = data["decoded_mask"].astype(bool)
    np.testing.assert_array_equal(decoded_grad[~decoded_real], 0.0)
    assert np.all(decoded_grad[decoded_real] > 0)


def test_wrong_inputs_raise():
    data = make_inputs()
    layer = SnippetScorer(**INIT)
    with pytest.raises(ValueError, match=r"snippets.*rank 4.*\[B,P,T,D\].*\(2, 3, 4\)"):
        layer(np.zeros((B, P, T), "float32"))
    with pytest.raises(ValueError, match=r"token_mask.*\[B,P,T\].*\(2, 3, 4\).*\(2, 3, 5\)"):
        layer(data["snippets"], token_mask=np.ones((B, P, T + 1), bool))
    with pytest.raises(ValueError, match=r"paragraph_mask.*\[B,P\].*\(2, 3\).*\(2, 4\)"):
        layer(data["snippets"], paragraph_mask=np.ones((B, P + 1), bool))
    with pytest.raises(ValueError, match=r"document_ids.*\[B,P\].*\(2, 3\).*\(2, 2\)"):
        layer(data["snippets"], document_ids=np.zeros((B, P - 1), "int32"))
    with pytest.raises(ValueError, match=r"decoded_segments.*\[B,M,L,D\].*\(2, 2, 3, 6\)"):
        layer(data["snippets"], decoded_segments=np.zeros((B, M, L, 6), "float32"))
    with pytest.raises(ValueError, match=r"decoded_segments.*rank 4.*\(2, 3, 8\)"):
        layer(data["snippets"], decoded_segments=np.zeros((B, L, D), "float32"))
    with pytest.raises(ValueError, match=r"decoded_mask.*\[B,M,L\].*\(2, 2, 3\).*\(2, 2, 4\)"):
        layer(
            data["snippets"],
            decoded_segments=data["decoded_segments"],
            decoded_mask=np.ones((B, M, L + 1), bool),
        )
    with pytest.raises(ValueError, match=r"decoded_mask.*without.*decoded_segments"):
        layer(data["snippets"], decoded_mask=data["decoded_mask"])
    with pytest.raises(ValueError, match=r"document_ids.*max_documents"):
        SnippetScorer(num_layers=1, num_heads=2, intermediate_dim=8)(
            data["snippets"], document_ids=data["document_ids"]
        )
    with pytest.raises(ValueError, match=r"divisible by num_heads=3.*\(2, 3, 4, 8\)"):
        SnippetScorer(num_layers=1, num_heads=3, intermediate_dim=8)(data["snippets"])
