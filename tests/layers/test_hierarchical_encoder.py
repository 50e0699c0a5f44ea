import keras
import numpy as np
import pytest
from keras import ops
from layer_test_case import compute_gradients
from layer_test_case import input_gradients
from layer_test_case import run_layer_test
from layer_test_case import to_numpy

from keras_hsum.layers.hierarchical_encoder import HierarchicalEncoder

D = 8


# ---------------------------------------------------------------------------
# Independent numpy transcription of González et al. (2020), Eq. 1-19.
# ---------------------------------------------------------------------------


def numpy_sinusoid(length, dim, max_wavelength=10000):
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(same)."""
    positions = np.arange(length, dtype="float64")[:, None]
    i = np.arange(dim)
    angles = positions / max_wavelength ** (2 * (i // 2) / dim)
    return np.where(i % 2 == 0, np.sin(angles), np.cos(angles))


def block_weights(block):
    """{"self_attention_layer/query/kernel": array, ...} of one encoder block."""
    prefix = block.name + "/"
    return {
        w.path.split(prefix, 1)[1]: ops.convert_to_numpy(w).astype("float64")
        for w in block.weights
    }


def numpy_layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def numpy_encoder_block(x, mask, w, eps):
    """x [N, L, D], mask [N, L] (keys). Eq. 1-3 (MultiHead), 4/12, 6/14, 8/16, 10/18."""
    attn = "self_attention_layer/"
    q = np.einsum("nld,dhk->nlhk", x, w[attn + "query/kernel"]) + w[attn + "query/bias"]
    k = np.einsum("nld,dhk->nlhk", x, w[attn + "key/kernel"]) + w[attn + "key/bias"]
    v = np.einsum("nld,dhk->nlhk", x, w[attn + "value/kernel"]) + w[attn + "value/bias"]
    d_k = q.shape[-1]
    logits = np.einsum("nqhk,nshk->nhqs", q, k) / np.sqrt(d_k)
    logits = np.where(mask[:, None, None, :], logits, -1e30)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights = weights / weights.sum(-1, keepdims=True)  # G = softmax(QK^T/sqrt(d_k))
    heads = np.einsum("nhqs,nshk->nqhk", weights, v)
    multi_head = (
        np.einsum("nqhk,hkd->nqd", heads, w[attn + "attention_output/kernel"])
        + w[attn + "attention_output/bias"]
    )
    normed = numpy_layer_norm(
        x + multi_head,
        w["self_attention_layer_norm/gamma"],
        w["self_attention_layer_norm/beta"],
        eps,
    )
    hidden = np.maximum(
        0.0,
        normed @ w["feedforward_intermediate_dense/kernel"]
        + w["feedforward_intermediate_dense/bias"],
    )
    ffn = hidden @ w["feedforward_output_dense/kernel"] + w["feedforward_output_dense/bias"]
    out = numpy_layer_norm(
        normed + ffn,
        w["feedforward_layer_norm/gamma"],
        w["feedforward_layer_norm/beta"],
        eps,
    )
    return out, weights


def numpy_pool(layer, pooling_layer, x, mask):
    """x [..., N, D], mask [..., N] -> [..., D]; no valid row -> zeros."""
    valid = mask.any(-1)[..., None]
    if layer.pooling == "max":
        pooled = np.where(mask[..., None], x, -np.inf).max(-2)
        return np.where(valid, pooled, 0.0)
    if layer.pooling == "mean":
        count = np.maximum(mask.sum(-1, keepdims=True), 1)
        return (x * mask[..., None]).sum(-2) / count
    # Single-head attention pooling: softmax_t(W_a x_t) over valid t,
    # W_c (sum_t a_t (W_b x_t + b_b)) + b_c.
    w = {
        w.path.rsplit("/", 1)[1]: ops.convert_to_numpy(w).astype("float64")
        for w in pooling_layer.weights
    }
    scores = x @ w["score_kernel"][:, 0]
    scores = np.where(mask, scores, -1e30)
    a = np.exp(scores - scores.max(-1, keepdims=True))
    a = a / a.sum(-1, keepdims=True)
    values = np.einsum("...td,dk->...tk", x, w["value_kernel"][:, 0]) + w["value_bias"][0]
    head = np.einsum("...t,...tk->...k", a, values)
    return np.where(valid, head @ w["head_kernel"][0] + w["head_bias"][0], 0.0)


def numpy_hierarchical_encoder(layer, x, token_mask, paragraph_mask=None):
    """Returns r, sentence states, last attention and the last block's input."""
    eps = layer.layer_norm_epsilon
    batch, paragraphs, tokens, dim = x.shape
    token_mask = token_mask.astype(bool)
    if paragraph_mask is not None:
        token_mask = token_mask & paragraph_mask.astype(bool)[:, :, None]
    sentence_mask = token_mask.any(-1)
    # Word level: X^0_i = P^x + E(X_i) (optional), N blocks, s_i = Pooling(.).
    h = x.astype("float64").reshape(batch * paragraphs, tokens, dim)
    if layer.position_encoding == "sentence_and_word":
        h = h + numpy_sinusoid(tokens, dim)
    for block in layer.word_encoder_layers:
        h, _ = numpy_encoder_block(h, token_mask.reshape(-1, tokens), block_weights(block), eps)
    h = h.reshape(batch, paragraphs, tokens, dim)
    s = numpy_pool(layer, layer.word_pooling, h, token_mask)
    # Sentence level: S^0 = P^s + S (optional), N̂ blocks, r = Pooling(.).
    if layer.position_encoding != "none":
        s = s + numpy_sinusoid(paragraphs, dim)
    last_input = None
    for block in layer.sentence_encoder_layers:
        last_input = s
        s, attention = numpy_encoder_block(s, sentence_mask, block_weights(block), eps)
    r = numpy_pool(layer, layer.sentence_pooling, s, sentence_mask)
    valid = sentence_mask.astype("float64")
    return r, s * valid[:, :, None], attention * valid[:, None, :, None], last_input


# ---------------------------------------------------------------------------
# Data.
# ---------------------------------------------------------------------------


def make_inputs(rng, batch=2, paragraphs=3, tokens=4):
    x = rng.normal(size=(batch, paragraphs, tokens, D)).astype("float32")
    mask = np.ones((batch, paragraphs, tokens), bool)
    mask[0, 1, 2:] = False  # padded tokens
    mask[0, 2, :] = False  # a fully padded sentence
    mask[1, 0, 3:] = False
    return x, mask


def small_encoder(**kwargs):
    config = dict(num_heads=2, intermediate_dim=12, num_word_layers=1, num_sentence_layers=2)
    config.update(kwargs)
    return HierarchicalEncoder(**config)


def assert_close(actual, expected, atol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), expected, atol=atol, rtol=0)


# ---------------------------------------------------------------------------
# Tests.
# ---------------------------------------------------------------------------


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_shared_layer_checks():
    rng = np.random.default_rng(0)
    x, mask = make_inputs(rng)
    paragraph_mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    run_layer_test(
        HierarchicalEncoder,
        {
            "num_heads": 2,
            "intermediate_dim": 12,
            "num_word_layers": 1,
            "num_sentence_layers": 1,
            "position_encoding": "sentence_and_word",
            "pooling": "max",
        },
        {"inputs": x, "token_mask": mask.astype("int32"), "paragraph_mask": paragraph_mask},
        expected_output_shape=((2, D), (2, 3, D), (2, 2, 3, 3)),
        # 16 weights per encoder block; max pooling has none. (The
        # attention-pooling variant is checked against numpy below; this
        # harness run is the slowest part of the file on JAX, so it runs once.)
        expected_num_trainable_weights=2 * 16,
        # A key bias adds the same q.b_k to every logit of a row: softmax is
        # invariant to it, so its gradient is zero (the paper has no biases).
        weights_without_gradient=("key/bias",),
    )


@pytest.mark.parametrize(
    "pooling, position_encoding",
    [("max", "sentence"), ("mean", "none"), ("attention", "sentence_and_word")],
)
def test_matches_numpy_transcription(pooling, position_encoding):
    rng = np.random.default_rng(1)
    layer = small_encoder(
        pooling=pooling,
        position_encoding=position_encoding,
        bias_initializer="random_normal",
    )
    x, mask = make_inputs(rng)
    paragraph_mask = np.array([[1, 1, 1], [1, 0, 1]], "int32")
    r, states, attention = to_numpy(layer(x, token_mask=mask, paragraph_mask=paragraph_mask))
    ref_r, ref_states, ref_attention, _ = numpy_hierarchical_encoder(
        layer, x, mask, paragraph_mask
    )
    assert r.dtype == states.dtype == attention.dtype == np.float32
    assert_close(r, ref_r)
    assert_close(states, ref_states)
    assert_close(attention, ref_attention)


def test_exposed_attention_is_the_last_sentence_layers_attention():
    rng = np.random.default_rng(2)
    layer = small_encoder()
    x, mask = make_inputs(rng)
    _, _, attention = to_numpy(layer(x, token_mask=mask))
    sentence_mask = mask.any(-1)
    # Rows of real sentences sum to 1 over the real sentences; padded keys
    # get 0; padded rows are 0.
    for b in range(2):
        valid = sentence_mask[b]
        assert_close(attention[b][:, valid][:, :, valid].sum(-1), 1.0)
        assert np.all(attention[b][:, :, ~valid] == 0.0)
        assert np.all(attention[b][:, ~valid] == 0.0)
    # Recompute with the last sentence-level block itself, fed the numpy
    # reference's input to that block.
    _, _, _, last_input = numpy_hierarchical_encoder(layer, x, mask)
    _, expected = layer.sentence_encoder_layers[-1](
        last_input.astype("float32"),
        padding_mask=sentence_mask,
        return_attention_scores=True,
    )
    expected = to_numpy(expected) * sentence_mask[:, None, :, None]
    assert_close(attention, expected)
    # ... and it is not the first block's attention.
    _, first = layer.sentence_encoder_layers[0](
        last_input.astype("float32"), padding_mask=sentence_mask, return_attention_scores=True
    )
    assert not np.allclose(attention, to_numpy(first) * sentence_mask[:, None, :, None])


@pytest.mark.parametrize("pooling", ["max", "attention"])
def test_padding_does_not_change_valid_outputs(pooling):
    rng = np.random.default_rng(3)
    layer = small_encoder(pooling=pooling, position_encoding="sentence_and_word")
    x, mask = make_inputs(rng)
    r, states, attention = to_numpy(layer(x, token_mask=mask))
    # Two more padded tokens per sentence and one more padded sentence, all
    # filled with garbage.
    big_x = rng.normal(size=(2, 4, 6, D)).astype("float32") * 10.0
    big_x[:, :3, :4] = x
    big_mask = np.zeros((2, 4, 6), bool)
    big_mask[:, :3, :4] = mask
    big_r, big_states, big_attention = to_numpy(layer(big_x, token_mask=big_mask))
    assert_close(big_r, r)
    assert_close(big_states[:, :3], states)
    assert np.all(big_states[:, 3] == 0.0)
    assert_close(big_attention[:, :, :3, :3], attention)
    assert np.all(big_attention[:, :, :, 3] == 0.0)
    # A paragraph_mask that drops a sentence equals a token_mask without it.
    paragraph_mask = np.array([[1, 0, 1], [1, 1, 1]], bool)
    dropped = mask.copy()
    dropped[0, 1] = False
    for a, b in zip(
        to_numpy(layer(x, token_mask=mask, paragraph_mask=paragraph_mask)),
        to_numpy(layer(x, token_mask=dropped)),
    ):
        assert_close(a, b, atol=0.0)


def test_fully_padded_sentence_and_document_give_no_nan():
    rng = np.random.default_rng(4)
    layer = small_encoder(pooling="attention", num_sentence_layers=1)
    x, mask = make_inputs(rng)
    mask[1] = False  # a document without any real sentence
    inputs = {"inputs": x, "token_mask": mask}
    outputs = to_numpy(layer(**inputs))
    for output in outputs:
        assert np.all(np.isfinite(output))
    assert np.all(outputs[0][1] == 0.0) and np.all(outputs[1][1] == 0.0)
    for grad in compute_gradients(layer, inputs):
        assert np.all(np.isfinite(grad))
    grad = input_gradients(layer, inputs, ["inputs"])["inputs"]
    assert np.all(np.isfinite(grad))
    # Padded tokens influence nothing.
    np.testing.assert_array_equal(grad[~mask], 0.0)
    assert np.any(grad[mask] != 0.0)


def test_gradients_reach_all_weights():
    rng = np.random.default_rng(5)
    layer = small_encoder(bias_initializer="random_normal")
    x, mask = make_inputs(rng)
    inputs = {"inputs": x, "token_mask": mask}
    layer(**inputs)
    grads = compute_gradients(layer, inputs)
    assert len(grads) == 3 * 16
    for variable, grad in zip(layer.trainable_variables, grads):
        assert np.all(np.isfinite(grad)), variable.path
        if variable.path.endswith("key/bias"):
            continue  # softmax is shift-invariant: zero gradient by design
        assert np.any(grad != 0.0), f"no gradient reaches {variable.path}"


def test_without_positions_sentence_order_does_not_matter():
    rng = np.random.default_rng(6)
    x, mask = make_inputs(rng)
    order = np.array([2, 0, 1])  # moves the padded sentence of document 0 too
    layer = small_encoder(position_encoding="none")
    r, states, attention = to_numpy(layer(x, token_mask=mask))
    p_r, p_states, p_attention = to_numpy(layer(x[:, order], token_mask=mask[:, order]))
    assert_close(p_r, r)
    assert_close(p_states, states[:, order])
    assert_close(p_attention, attention[:, :, order][:, :, :, order])
    # With sentence positions, the order matters.
    positional = small_encoder(position_encoding="sentence")
    positional(x, token_mask=mask)
    positional.set_weights(layer.get_weights())
    r_pos = to_numpy(positional(x, token_mask=mask))[0]
    p_r_pos = to_numpy(positional(x[:, order], token_mask=mask[:, order]))[0]
    assert not np.allclose(r_pos, p_r_pos, atol=1e-4)
    assert not np.allclose(r_pos, r, atol=1e-4)


def test_word_positions_only_with_sentence_and_word():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 3, 4, D)).astype("float32")
    order = np.array([3, 1, 0, 2])
    outputs = {}
    reference = None
    for mode in ("none", "sentence", "sentence_and_word"):
        layer = small_encoder(position_encoding=mode)
        layer(x)
        if reference is None:
            reference = layer.get_weights()
        layer.set_weights(reference)
        outputs[mode] = (to_numpy(layer(x)), to_numpy(layer(x[:, :, order])))
    # Shuffling the words of every sentence changes nothing without word
    # positions ...
    for mode in ("none", "sentence"):
        plain, shuffled = outputs[mode]
        for a, b in zip(plain, shuffled):
            assert_close(b, a)
    # ... but does with them.
    plain, shuffled = outputs["sentence_and_word"]
    assert not np.allclose(plain[0], shuffled[0], atol=1e-4)
    assert not np.allclose(plain[0], outputs["sentence"][0][0], atol=1e-4)


def test_variable_sentence_and_token_counts_in_a_functional_model():
    rng = np.random.default_rng(8)
    layer = small_encoder()
    inputs = keras.Input(shape=(None, None, D))
    token_mask = keras.Input(shape=(None, None), dtype="bool")
    model = keras.Model([inputs, token_mask], layer(inputs, token_mask=token_mask))
    for shape in ((2, 3, 4), (2, 4, 6)):
        x = rng.normal(size=shape + (D,)).astype("float32")
        mask = np.ones(shape, bool)
        r, states, attention = to_numpy(model([x, mask]))
        ref_r, ref_states, ref_attention, _ = numpy_hierarchical_encoder(layer, x, mask)
        assert_close(r, ref_r)
        assert_close(states, ref_states)
        assert_close(attention, ref_attention)


def test_dropout_only_in_training():
    rng = np.random.default_rng(9)
    layer = small_encoder(dropout=0.5, num_word_layers=0, num_sentence_layers=1)
    x, mask = make_inputs(rng)
    inference = to_numpy(layer(x, token_mask=mask))[0]
    assert_close(to_numpy(layer(x, token_mask=mask, training=False))[0], inference, atol=0.0)
    assert not np.allclose(to_numpy(layer(x, token_mask=mask, training=True))[0], inference)


def test_wrong_inputs_raise():
    layer = small_encoder()
    x = np.ones((2, 3, 4, D), "float32")
    with pytest.raises(ValueError, match=r"`inputs`.*rank 4.*\[B,P,T,D\].*\(3, 4, 8\)"):
        layer(x[0])
    with pytest.raises(ValueError, match=r"`token_mask`.*\[B,P,T\].*\(2, 3, 4\).*\(2, 3, 5\)"):
        layer(x, token_mask=np.ones((2, 3, 5), bool))
    with pytest.raises(ValueError, match=r"`token_mask`.*\(2, 3, 4\).*\(2, 2, 4\)"):
        layer(x, token_mask=np.ones((2, 2, 4), bool))
    with pytest.raises(ValueError, match=r"`token_mask`.*rank 3.*\(2, 3\)"):
        layer(x, token_mask=np.ones((2, 3), bool))
    with pytest.raises(ValueError, match=r"`paragraph_mask`.*\[B,P\].*\(2, 3\).*\(2, 4\)"):
        layer(x, paragraph_mask=np.ones((2, 4), bool))
    # A built layer still checks every call.
    layer(x)
    with pytest.raises(ValueError, match=r"`token_mask`.*\(2, 3, 4\).*\(2, 3, 2\)"):
        layer(x, token_mask=np.ones((2, 3, 2), bool))
    with pytest.raises(ValueError, match="position_encoding.*'words'"):
        HierarchicalEncoder(num_heads=2, intermediate_dim=8, position_encoding="words")
    with pytest.raises(ValueError, match="pooling.*'cls'"):
        HierarchicalEncoder(num_heads=2, intermediate_dim=8, pooling="cls")
    with pytest.raises(ValueError, match=r"HierarchicalEncoder: `num_sentence_layers` must be "
                                         r"an int >= 1 \(the last.*received 0"):
        HierarchicalEncoder(num_heads=2, intermediate_dim=8, num_sentence_layers=0)
