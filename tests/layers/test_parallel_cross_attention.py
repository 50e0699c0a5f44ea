import numpy as np
import pytest
from layer_test_case import compute_gradients
from layer_test_case import input_gradients
from layer_test_case import run_layer_test
from layer_test_case import to_numpy

from keras_hsum.layers.parallel_cross_attention import ParallelCrossAttention

B, S, P, T, D, H = 2, 3, 3, 4, 8, 2


# --- An independent numpy transcription of Ma & Zong, Eqs. 7-10. -----------


def numpy_softmax(scores, valid):
    """Softmax over the last axis restricted to `valid`; all-invalid -> 0."""
    scores = np.where(valid, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.where(valid, np.exp(scores - top), 0.0)
    total = e.sum(-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)


def numpy_multi_head(x, memory, valid, wq, bq, wk, bk, wv, bv, wo, bo):
    """Vaswani's MultiHead(x, memory, memory) for one example.

    x [S,D]; memory [N,Dm]; valid [N]; wq [D,H,Dh]; wo [H,Dh,D].
    Returns (output [S,D], per-head weights [H,S,N]).
    """
    heads, head_dim = wq.shape[1], wq.shape[2]
    contexts, weights = [], []
    for h in range(heads):
        q = x @ wq[:, h, :] + bq[h]
        k = memory @ wk[:, h, :] + bk[h]
        v = memory @ wv[:, h, :] + bv[h]
        a = numpy_softmax(q @ k.T / np.sqrt(head_dim), valid[None, :])
        weights.append(a)
        contexts.append(a @ v)
    concat = np.concatenate(contexts, axis=-1)  # [S, H*Dh]
    output = concat @ wo.reshape(heads * head_dim, -1) + bo
    return output, np.stack(weights)


def numpy_layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def layer_weights(layer):
    """The layer's weights as float64 numpy arrays, keyed by sublayer name."""
    w = {}
    for prefix in ("paragraph", "word"):
        for part in ("query", "key", "value", "output"):
            dense = getattr(layer, f"{prefix}_{part}_dense")
            w[f"{prefix}_{part}_kernel"] = np.asarray(to_numpy(dense.kernel), "float64")
            bias = dense.bias
            w[f"{prefix}_{part}_bias"] = (
                None if bias is None else np.asarray(to_numpy(bias), "float64")
            )
    w["word_output_bias"] = np.asarray(to_numpy(layer.word_output_bias), "float64")
    w["gamma"] = np.asarray(to_numpy(layer.output_layer_norm.gamma), "float64")
    w["beta"] = np.asarray(to_numpy(layer.output_layer_norm.beta), "float64")
    return w


def numpy_parallel_cross_attention(
    layer, query, word_memory, paragraph_memory, token_mask=None, paragraph_mask=None
):
    """Eqs. 7-10 for every example, paragraph by paragraph, from the weights.

    Returns (outputs [B,S,D], head-averaged paragraph attention [B,S,P]).
    """
    w = layer_weights(layer)
    batch, paragraphs, tokens = word_memory.shape[:3]
    heads, head_dim = layer.num_heads, layer.head_dim
    zeros = np.zeros((heads, head_dim))
    if token_mask is None:
        token_mask = np.ones((batch, paragraphs, tokens), bool)
    if paragraph_mask is None:
        paragraph_mask = np.ones((batch, paragraphs), bool)
    token_mask = np.asarray(token_mask).astype(bool)
    paragraph_mask = np.asarray(paragraph_mask).astype(bool)
    outputs, attentions = [], []
    for b in range(batch):
        x = np.asarray(query[b], "float64")
        # Eq. 7: X_para, A_para = MultiHead(X, Φ, Φ), A_para head-averaged.
        x_para, a_heads = numpy_multi_head(
            x,
            np.asarray(paragraph_memory[b], "float64"),
            paragraph_mask[b],
            w["paragraph_query_kernel"], w["paragraph_query_bias"],
            w["paragraph_key_kernel"], zeros,
            w["paragraph_value_kernel"], w["paragraph_value_bias"],
            w["paragraph_output_kernel"], w["paragraph_output_bias"],
        )
        a_para = a_heads.mean(0)  # [S, P]
        # Eq. 8 for each paragraph p on its own tokens; Eq. 9 fuses them.
        x_int = np.zeros_like(x)
        for p in range(paragraphs):
            x_word_p, _ = numpy_multi_head(
                x,
                np.asarray(word_memory[b, p], "float64"),
                token_mask[b, p] & paragraph_mask[b, p],
                w["word_query_kernel"], w["word_query_bias"],
                w["word_key_kernel"], zeros,
                w["word_value_kernel"], w["word_value_bias"],
                w["word_output_kernel"], w["word_output_bias"],
            )
            x_int += a_para[:, p : p + 1] * x_word_p
        # Eq. 10.
        outputs.append(
            numpy_layer_norm(
                x + x_para + x_int, w["gamma"], w["beta"], layer.layer_norm_epsilon
            )
        )
        attentions.append(a_para)
    return np.stack(outputs), np.stack(attentions)


# --- Inputs. ----------------------------------------------------------------


def make_inputs(seed=0, batch=B, steps=S, paragraphs=P, tokens=T, width=D):
    rng = np.random.default_rng(seed)
    token_mask = np.ones((batch, paragraphs, tokens), "int32")
    token_mask[0, 0, 3:] = 0
    token_mask[1, 1, 1:] = 0
    token_mask[1, 2, :] = 0  # fully padded paragraph ...
    paragraph_mask = np.ones((batch, paragraphs), "int32")
    paragraph_mask[1, 2] = 0  # ... that paragraph_mask also marks
    return {
        "query": rng.normal(size=(batch, steps, width)).astype("float32"),
        "word_memory": rng.normal(size=(batch, paragraphs, tokens, width)).astype(
            "float32"
        ),
        "paragraph_memory": rng.normal(size=(batch, paragraphs, width)).astype(
            "float32"
        ),
        "token_mask": token_mask,
        "paragraph_mask": paragraph_mask,
    }


def make_layer(inputs, **kwargs):
    """A built layer with random (non-zero) biases so the test sees them."""
    layer = ParallelCrossAttention(
        hidden_dim=D, num_heads=H, bias_initializer="random_normal", **kwargs
    )
    layer(**inputs)
    return layer


# --- Tests. -----------------------------------------------------------------


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_shared_layer_checks():
    run_layer_test(
        ParallelCrossAttention,
        {"hidden_dim": D, "num_heads": H},
        make_inputs(),
        expected_output_shape=((B, S, D), (B, S, P)),
        expected_num_trainable_weights=16,
    )


def test_matches_numpy_transcription():
    inputs = make_inputs(1)
    # Also a paragraph that paragraph_mask keeps but whose tokens are all
    # padded: its word context is empty (zero weights), A_para still counts it.
    inputs["token_mask"][0, 2, :] = 0
    layer = make_layer(inputs)
    outputs, attention = to_numpy(layer(**inputs))
    expected_outputs, expected_attention = numpy_parallel_cross_attention(layer, **inputs)
    assert attention.dtype == np.float32
    np.testing.assert_allclose(attention, expected_attention, atol=1e-5, rtol=0)
    np.testing.assert_allclose(outputs, expected_outputs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-5)
    assert np.all(attention[1, :, 2] == 0)


def test_matches_numpy_transcription_without_masks():
    inputs = make_inputs(2)
    del inputs["token_mask"], inputs["paragraph_mask"]
    layer = make_layer(inputs)
    outputs, attention = to_numpy(layer(**inputs))
    expected_outputs, expected_attention = numpy_parallel_cross_attention(layer, **inputs)
    np.testing.assert_allclose(attention, expected_attention, atol=1e-5, rtol=0)
    np.testing.assert_allclose(outputs, expected_outputs, atol=1e-5, rtol=0)


def pad(inputs, rng, extra_tokens=2, padded_paragraph_at=1, junk=50.0):
    """Inserts a padded paragraph and padded tokens filled with large junk."""
    word = inputs["word_memory"]
    batch, paragraphs, tokens, width = word.shape
    new_word = rng.normal(scale=junk, size=(batch, paragraphs + 1, tokens + extra_tokens, width))
    new_tmask = np.zeros((batch, paragraphs + 1, tokens + extra_tokens), "int32")
    new_para = rng.normal(scale=junk, size=(batch, paragraphs + 1, width))
    new_pmask = np.zeros((batch, paragraphs + 1), "int32")
    keep = [p for p in range(paragraphs + 1) if p != padded_paragraph_at]
    new_word[:, keep, :tokens] = word
    new_tmask[:, keep, :tokens] = inputs["token_mask"]
    # The padded paragraph's tokens are "valid" by token_mask: paragraph_mask
    # alone must keep the word attention away from them.
    new_tmask[:, padded_paragraph_at, :] = 1
    new_para[:, keep] = inputs["paragraph_memory"]
    new_pmask[:, keep] = inputs["paragraph_mask"]
    padded = dict(inputs)
    padded.update(
        word_memory=new_word.astype("float32"),
        token_mask=new_tmask,
        paragraph_memory=new_para.astype("float32"),
        paragraph_mask=new_pmask,
    )
    return padded, keep


def test_padded_tokens_and_paragraphs_change_nothing():
    rng = np.random.default_rng(3)
    inputs = make_inputs(3)
    layer = make_layer(inputs)
    outputs, attention = to_numpy(layer(**inputs))
    padded, keep = pad(inputs, rng)
    padded_outputs, padded_attention = to_numpy(layer(**padded))
    np.testing.assert_allclose(padded_outputs, outputs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(padded_attention[:, :, keep], attention, atol=1e-6, rtol=0)
    assert np.all(padded_attention[:, :, 1] == 0)

    # No gradient flows into padded tokens or padded paragraphs: the word
    # attention never looks at them.
    grads = input_gradients(layer, padded, ["word_memory", "paragraph_memory"])
    valid_tokens = padded["token_mask"].astype(bool) & padded["paragraph_mask"].astype(bool)[:, :, None]
    assert np.all(grads["word_memory"][~valid_tokens] == 0)
    assert np.all(grads["paragraph_memory"][~padded["paragraph_mask"].astype(bool)] == 0)
    assert np.any(grads["word_memory"][valid_tokens] != 0)


def test_fully_padded_paragraph_and_example_give_no_nan():
    inputs = make_inputs(4)
    inputs["paragraph_mask"][0, :] = 0  # example 0: every paragraph padded
    inputs["token_mask"][0, :, :] = 0
    layer = make_layer(inputs)
    outputs, attention = to_numpy(layer(**inputs))
    assert np.all(np.isfinite(outputs)) and np.all(np.isfinite(attention))
    assert np.all(attention[0] == 0)
    for grad in compute_gradients(layer, inputs):
        assert np.all(np.isfinite(grad))
    grads = input_gradients(layer, inputs, ["query", "word_memory", "paragraph_memory"])
    for name, grad in grads.items():
        assert np.all(np.isfinite(grad)), name
    assert np.all(grads["word_memory"][0] == 0)
    assert np.all(grads["word_memory"][1, 2] == 0)


def test_gradients_reach_every_weight_and_both_memories():
    inputs = make_inputs(5)
    layer = make_layer(inputs)
    grads = compute_gradients(layer, inputs)
    assert len(grads) == 16
    for variable, grad in zip(layer.trainable_variables, grads):
        assert np.any(grad != 0), variable.path
    grads = input_gradients(layer, inputs, ["word_memory", "paragraph_memory"])
    assert np.any(grads["word_memory"] != 0)
    assert np.any(grads["paragraph_memory"] != 0)


def test_dropout_only_in_training():
    inputs = make_inputs(6)
    layer = make_layer(inputs, dropout=0.5)
    reference = make_layer(inputs)
    reference.set_weights(layer.get_weights())
    inference = to_numpy(layer(**inputs, training=False))
    expected = to_numpy(reference(**inputs))
    for a, b in zip(inference, expected):
        np.testing.assert_allclose(a, b, atol=1e-6)
    trained, attention = to_numpy(layer(**inputs, training=True))
    assert not np.allclose(trained, expected[0])
    np.testing.assert_allclose(attention, expected[1], atol=1e-6)  # A_para: pre-dropout


def test_wrong_inputs_raise():
    inputs = make_inputs(7)
    layer = make_layer(inputs)

    def call(**changes):
        args = dict(inputs)
        args.update(changes)
        return layer(**args)

    with pytest.raises(ValueError, match=r"`query`.*rank 3.*\[B,S,D\].*\(2, 3, 8, 1\)"):
        call(query=inputs["query"][..., None])
    with pytest.raises(ValueError, match=r"`query`.*\(None, None, 8\).*\(2, 3, 6\)"):
        call(query=inputs["query"][..., :6])
    with pytest.raises(ValueError, match=r"`word_memory`.*rank 4.*\(2, 3, 8\)"):
        call(word_memory=inputs["word_memory"][:, :, 0])
    with pytest.raises(ValueError, match=r"`paragraph_memory`.*rank 3.*\(2, 3, 1, 8\)"):
        call(paragraph_memory=inputs["paragraph_memory"][:, :, None])
    with pytest.raises(ValueError, match=r"`paragraph_memory`.*\(2, 3, None\).*\(2, 2, 8\)"):
        call(paragraph_memory=inputs["paragraph_memory"][:, :2])
    with pytest.raises(ValueError, match=r"`token_mask`.*\(2, 3, 4\).*\(2, 3, 3\)"):
        call(token_mask=inputs["token_mask"][:, :, :3])
    with pytest.raises(ValueError, match=r"`token_mask`.*rank 3.*\(2, 3\)"):
        call(token_mask=inputs["token_mask"][:, :, 0])
    with pytest.raises(ValueError, match=r"`paragraph_mask`.*\(2, 3\).*\(2, 2\)"):
        call(paragraph_mask=inputs["paragraph_mask"][:, :2])
    with pytest.raises(ValueError, match=r"`word_memory`.*\(2, None, None, None\).*\(1, 3, 4, 8\)"):
        call(word_memory=inputs["word_memory"][:1])
    with pytest.raises(ValueError, match="hidden_dim"):
        ParallelCrossAttention(hidden_dim=10, num_heads=4)
    # The same checks run when building from shapes.
    with pytest.raises(ValueError, match=r"`token_mask`.*\(2, 3, 4\).*\(2, 3, 5\)"):
        ParallelCrossAttention(hidden_dim=D, num_heads=H).build(
            query_shape=(2, 3, 8),
            word_memory_shape=(2, 3, 4, 8),
            paragraph_memory_shape=(2, 3, 8),
            token_mask_shape=(2, 3, 5),
        )


def test_memory_cache_gives_the_numpy_transcription():
    """With `memory_cache` the keys and values come from the cache: the
    memories passed beside it are only read for their shapes (zeros here),
    and the outputs are Eqs. 7-10 on the memories the cache was made from."""
    inputs = make_inputs(8)
    layer = make_layer(inputs)
    cache = layer.project_memory(inputs["word_memory"], inputs["paragraph_memory"])
    assert {key: tuple(value.shape) for key, value in cache.items()} == {
        "word_key": (B, H, P, T, D // H),
        "word_value": (B, H, P, T, D // H),
        "paragraph_key": (B, H, P, D // H),
        "paragraph_value": (B, H, P, D // H),
    }
    cached = dict(
        inputs,
        word_memory=np.zeros_like(inputs["word_memory"]),
        paragraph_memory=np.zeros_like(inputs["paragraph_memory"]),
    )
    outputs, attention = to_numpy(layer(**cached, memory_cache=cache))
    expected_outputs, expected_attention = numpy_parallel_cross_attention(layer, **inputs)
    np.testing.assert_allclose(attention, expected_attention, atol=1e-5, rtol=0)
    np.testing.assert_allclose(outputs, expected_outputs, atol=1e-5, rtol=0)
    # ... and equal to the uncached call.
    uncached_outputs, uncached_attention = to_numpy(layer(**inputs))
    np.testing.assert_allclose(outputs, uncached_outputs, atol=1e-6, rtol=0)
    np.testing.assert_allclose(attention, uncached_attention, atol=1e-6, rtol=0)


def test_memory_cache_of_one_step_per_query_row():
    """Decoding shape: one query position per row against the cache."""
    inputs = make_inputs(9)
    layer = make_layer(inputs)
    cache = layer.project_memory(inputs["word_memory"], inputs["paragraph_memory"])
    for s in range(S):
        step_inputs = dict(inputs, query=inputs["query"][:, s : s + 1])
        outputs, attention = to_numpy(layer(**step_inputs, memory_cache=cache))
        expected_outputs, expected_attention = numpy_parallel_cross_attention(
            layer, **step_inputs
        )
        np.testing.assert_allclose(outputs, expected_outputs, atol=1e-5, rtol=0)
        np.testing.assert_allclose(attention, expected_attention, atol=1e-5, rtol=0)


def test_wrong_memory_cache_raises():
    inputs = make_inputs(10)
    layer = make_layer(inputs)
    cache = layer.project_memory(inputs["word_memory"], inputs["paragraph_memory"])
    with pytest.raises(ValueError, match=r"`memory_cache` must be the dict.*project_memory.*\['paragraph_key'\]"):
        layer(**inputs, memory_cache={"paragraph_key": cache["paragraph_key"]})
    with pytest.raises(ValueError, match=r"memory_cache\['word_key'\].*\(2, 2, 3, 4, 4\).*\(2, 2, 2, 4, 4\)"):
        layer(**inputs, memory_cache=dict(cache, word_key=cache["word_key"][:, :, :2]))
    with pytest.raises(ValueError, match=r"memory_cache\['paragraph_value'\].*rank 4.*\[B,H,P,Dh\]"):
        layer(**inputs, memory_cache=dict(cache, paragraph_value=cache["paragraph_value"][..., 0]))
