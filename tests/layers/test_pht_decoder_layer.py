import keras
import numpy as np
import pytest
from keras import ops
from layer_test_case import BACKEND
from layer_test_case import compute_gradients
from layer_test_case import input_gradients
from layer_test_case import run_layer_test
from layer_test_case import to_numpy
from test_parallel_cross_attention import numpy_layer_norm
from test_parallel_cross_attention import numpy_parallel_cross_attention
from test_parallel_cross_attention import numpy_softmax

from keras_hsum.layers.pht_decoder_layer import PHTDecoderLayer

B, S, P, T, D, H, F = 2, 5, 3, 4, 8, 2, 16
DH = D // H


def make_inputs(seed=0):
    rng = np.random.default_rng(seed)
    token_mask = np.ones((B, P, T), "int32")
    token_mask[0, 0, 2:] = 0
    token_mask[1, 2, :] = 0  # a fully padded paragraph ...
    paragraph_mask = np.ones((B, P), "int32")
    paragraph_mask[1, 2] = 0  # ... marked padded by paragraph_mask too
    decoder_padding_mask = np.ones((B, S), "int32")
    decoder_padding_mask[1, 3:] = 0
    return {
        "decoder_sequence": rng.normal(size=(B, S, D)).astype("float32"),
        "word_memory": rng.normal(size=(B, P, T, D)).astype("float32"),
        "paragraph_memory": rng.normal(size=(B, P, D)).astype("float32"),
        "token_mask": token_mask,
        "paragraph_mask": paragraph_mask,
        "decoder_padding_mask": decoder_padding_mask,
    }


def make_layer(inputs, **kwargs):
    layer = PHTDecoderLayer(
        hidden_dim=D,
        intermediate_dim=F,
        num_heads=H,
        bias_initializer="random_normal",
        **kwargs,
    )
    layer(**inputs)
    return layer


def weight(variable):
    return np.asarray(to_numpy(variable), "float64")


def numpy_pht_decoder_layer(layer, decoder_sequence, word_memory, paragraph_memory,
                            token_mask=None, paragraph_mask=None,
                            decoder_padding_mask=None):
    """Parts I-III of the PHT decoder layer in numpy, from the layer's weights."""
    attention = layer.self_attention
    wq, bq = weight(attention._query_dense.kernel), weight(attention._query_dense.bias)
    wk, bk = weight(attention._key_dense.kernel), weight(attention._key_dense.bias)
    wv, bv = weight(attention._value_dense.kernel), weight(attention._value_dense.bias)
    wo, bo = weight(attention._output_dense.kernel), weight(attention._output_dense.bias)
    eps = layer.layer_norm_epsilon
    y = np.asarray(decoder_sequence, "float64")
    batch, steps, _ = y.shape
    if decoder_padding_mask is None:
        decoder_padding_mask = np.ones((batch, steps), bool)
    causal = np.tril(np.ones((steps, steps), bool))
    # Part I: X(I) = LayerNorm(Y + MaskedMultiHead(Y, Y, Y)).
    part_one = []
    for b in range(batch):
        valid = causal & decoder_padding_mask[b].astype(bool)[None, :]
        heads = []
        for h in range(H):
            q = y[b] @ wq[:, h] + bq[h]
            k = y[b] @ wk[:, h] + bk[h]
            v = y[b] @ wv[:, h] + bv[h]
            heads.append(numpy_softmax(q @ k.T / np.sqrt(DH), valid) @ v)
        attended = np.concatenate(heads, -1) @ wo.reshape(D, D) + bo
        part_one.append(
            numpy_layer_norm(
                y[b] + attended,
                weight(layer.self_attention_layer_norm.gamma),
                weight(layer.self_attention_layer_norm.beta),
                eps,
            )
        )
    part_one = np.stack(part_one)
    # Part II: the parallel cross attention's own transcription (Eqs. 7-10).
    part_two, paragraph_attention = numpy_parallel_cross_attention(
        layer.cross_attention, part_one, word_memory, paragraph_memory,
        token_mask, paragraph_mask,
    )
    # Part III: X(III) = LayerNorm(X(II) + FFN(X(II))).
    w1 = weight(layer.feedforward_intermediate_dense.kernel)
    b1 = weight(layer.feedforward_intermediate_dense.bias)
    w2 = weight(layer.feedforward_output_dense.kernel)
    b2 = weight(layer.feedforward_output_dense.bias)
    hidden = np.maximum(part_two @ w1 + b1, 0.0) @ w2 + b2
    outputs = numpy_layer_norm(
        part_two + hidden,
        weight(layer.feedforward_layer_norm.gamma),
        weight(layer.feedforward_layer_norm.beta),
        eps,
    )
    return outputs, paragraph_attention


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_shared_layer_checks():
    run_layer_test(
        PHTDecoderLayer,
        {"hidden_dim": D, "intermediate_dim": F, "num_heads": H},
        make_inputs(),
        expected_output_shape=((B, S, D), (B, S, P)),
        expected_num_trainable_weights=32,
        # A key bias adds the same number to every score of a query, so the
        # softmax (hence the loss) does not depend on it: its gradient is 0
        # up to rounding.
        weights_without_gradient=("self_attention/key/bias",),
    )


def test_matches_numpy_transcription():
    inputs = make_inputs(1)
    layer = make_layer(inputs)
    outputs, attention = to_numpy(layer(**inputs))
    expected_outputs, expected_attention = numpy_pht_decoder_layer(layer, **inputs)
    np.testing.assert_allclose(attention, expected_attention, atol=1e-5, rtol=0)
    np.testing.assert_allclose(outputs, expected_outputs, atol=1e-5, rtol=0)


def cached_decode(step, inputs, cache_dtype="float32"):
    """Feeds `decoder_sequence` one position at a time through `step`."""
    cache = np.zeros((B, 2, S, H, DH), cache_dtype)
    outputs, attentions = [], []
    for index in range(S):
        output, attention, cache = step(
            inputs["decoder_sequence"][:, index : index + 1],
            cache,
            np.array(index, "int32"),
        )
        outputs.append(to_numpy(output))
        attentions.append(to_numpy(attention))
    return np.concatenate(outputs, 1), np.concatenate(attentions, 1), to_numpy(cache)


def memory_kwargs(inputs):
    return {k: v for k, v in inputs.items() if k != "decoder_sequence"}


def test_cached_decoding_equals_teacher_forcing():
    inputs = make_inputs(2)
    layer = make_layer(inputs)
    full_outputs, full_attention = to_numpy(layer(**inputs))
    memories = memory_kwargs(inputs)

    def eager_step(x, cache, index):
        return layer(
            x, **memories, self_attention_cache=cache,
            self_attention_cache_update_index=index,
        )

    outputs, attention, cache = cached_decode(eager_step, inputs)
    np.testing.assert_allclose(outputs, full_outputs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(attention, full_attention, atol=1e-5, rtol=0)
    # The cache holds the keys and values of every position.
    keys = np.einsum("bsd,dhk->bshk", inputs["decoder_sequence"],
                     to_numpy(layer.self_attention._key_dense.kernel))
    keys = keys + to_numpy(layer.self_attention._key_dense.bias)
    np.testing.assert_allclose(cache[:, 0], keys, atol=1e-5, rtol=0)


def test_cached_decoding_equals_teacher_forcing_under_jit():
    inputs = make_inputs(3)
    layer = make_layer(inputs)
    full_outputs, full_attention = to_numpy(layer(**inputs))
    memories = memory_kwargs(inputs)

    if BACKEND == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def step(x, cache, index):
            return layer(
                x, **memories, self_attention_cache=cache,
                self_attention_cache_update_index=index,
            )

    elif BACKEND == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        @jax.jit
        def jitted(trainable, non_trainable, x, cache, index):
            outputs, _ = layer.stateless_call(
                trainable, non_trainable, x, **memories,
                self_attention_cache=cache,
                self_attention_cache_update_index=index,
            )
            return outputs

        def step(x, cache, index):
            return jitted(trainable, non_trainable, x, cache, index)

    else:
        pytest.skip(f"no jit helper for {BACKEND}")

    outputs, attention, _ = cached_decode(step, inputs)
    np.testing.assert_allclose(outputs, full_outputs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(attention, full_attention, atol=1e-5, rtol=0)


def test_memory_cache_decoding_equals_teacher_forcing_eager_and_jit():
    """Both caches (self-attention and `project_memory`'s cross-attention
    keys/values): step by step equals the teacher-forced call, eager and
    jit-compiled. The memories passed beside the cache are zeros, so the
    steps can only have read the keys and values from it."""
    inputs = make_inputs(4)
    layer = make_layer(inputs)
    full_outputs, full_attention = to_numpy(layer(**inputs))
    memories = memory_kwargs(inputs)
    memory_cache = layer.project_memory(
        inputs["word_memory"], inputs["paragraph_memory"]
    )
    zeroed = dict(
        memories,
        word_memory=np.zeros_like(inputs["word_memory"]),
        paragraph_memory=np.zeros_like(inputs["paragraph_memory"]),
    )

    def eager_step(x, cache, index):
        return layer(
            x, **zeroed, self_attention_cache=cache,
            self_attention_cache_update_index=index, memory_cache=memory_cache,
        )

    steps = {"eager": eager_step}
    if BACKEND == "tensorflow":
        import tensorflow as tf

        steps["jit"] = tf.function(eager_step, jit_compile=True)
    elif BACKEND == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        @jax.jit
        def jitted(trainable, non_trainable, x, cache, index, memory_cache):
            outputs, _ = layer.stateless_call(
                trainable, non_trainable, x, **zeroed,
                self_attention_cache=cache,
                self_attention_cache_update_index=index,
                memory_cache=memory_cache,
            )
            return outputs

        steps["jit"] = lambda x, cache, index: jitted(
            trainable, non_trainable, x, cache, index, memory_cache
        )
    for name, step in steps.items():
        outputs, attention, _ = cached_decode(step, inputs)
        np.testing.assert_allclose(outputs, full_outputs, atol=1e-5, rtol=0, err_msg=name)
        np.testing.assert_allclose(attention, full_attention, atol=1e-5, rtol=0, err_msg=name)


def test_padding_changes_no_valid_output():
    rng = np.random.default_rng(4)
    inputs = make_inputs(4)
    layer = make_layer(inputs)
    outputs, attention = to_numpy(layer(**inputs))
    junk = dict(inputs)
    # Junk in padded target positions, padded tokens and padded paragraphs.
    valid_target = inputs["decoder_padding_mask"].astype(bool)
    valid_paragraph = inputs["paragraph_mask"].astype(bool)
    valid_token = inputs["token_mask"].astype(bool) & valid_paragraph[:, :, None]
    junk["decoder_sequence"] = np.where(
        valid_target[:, :, None], inputs["decoder_sequence"],
        rng.normal(scale=50, size=(B, S, D)),
    ).astype("float32")
    junk["word_memory"] = np.where(
        valid_token[..., None], inputs["word_memory"],
        rng.normal(scale=50, size=(B, P, T, D)),
    ).astype("float32")
    junk["paragraph_memory"] = np.where(
        valid_paragraph[..., None], inputs["paragraph_memory"],
        rng.normal(scale=50, size=(B, P, D)),
    ).astype("float32")
    junk_outputs, junk_attention = to_numpy(layer(**junk))
    np.testing.assert_allclose(
        junk_outputs[valid_target], outputs[valid_target], atol=1e-5, rtol=0
    )
    np.testing.assert_allclose(
        junk_attention[valid_target], attention[valid_target], atol=1e-6, rtol=0
    )
    assert np.all(attention[:, :, ~valid_paragraph[1]][1] == 0)


def test_fully_padded_paragraph_gives_no_nan():
    inputs = make_inputs(5)
    inputs["token_mask"][0] = 0  # example 0: nothing to attend to at all
    inputs["paragraph_mask"][0] = 0
    layer = make_layer(inputs)
    outputs, attention = to_numpy(layer(**inputs))
    assert np.all(np.isfinite(outputs)) and np.all(np.isfinite(attention))
    grads = compute_gradients(layer, inputs)
    for variable, grad in zip(layer.trainable_variables, grads):
        assert np.all(np.isfinite(grad)), variable.path
    grads = input_gradients(
        layer, inputs, ["decoder_sequence", "word_memory", "paragraph_memory"]
    )
    for name, grad in grads.items():
        assert np.all(np.isfinite(grad)), name
    assert np.all(grads["word_memory"][1, 2] == 0)
    assert np.all(grads["paragraph_memory"][1, 2] == 0)


def test_gradients_reach_every_weight():
    inputs = make_inputs(6)
    layer = make_layer(inputs)
    grads = compute_gradients(layer, inputs)
    assert len(grads) == 32
    for variable, grad in zip(layer.trainable_variables, grads):
        if variable.path.endswith("self_attention/key/bias"):
            # Inert (see test_shared_layer_checks): only rounding noise.
            assert np.max(np.abs(grad)) < 1e-6, variable.path
            continue
        assert np.any(grad != 0), variable.path


def test_wrong_inputs_raise():
    inputs = make_inputs(7)
    layer = make_layer(inputs)

    def call(**changes):
        args = dict(inputs)
        args.update(changes)
        return layer(**args)

    with pytest.raises(ValueError, match=r"`decoder_sequence`.*rank 3.*\(2, 5\)"):
        call(decoder_sequence=inputs["decoder_sequence"][..., 0])
    with pytest.raises(ValueError, match=r"`decoder_sequence`.*\(None, None, 8\).*\(2, 5, 4\)"):
        call(decoder_sequence=inputs["decoder_sequence"][..., :4])
    with pytest.raises(ValueError, match=r"`decoder_padding_mask`.*\(2, 5\).*\(2, 4\)"):
        call(decoder_padding_mask=inputs["decoder_padding_mask"][:, :4])
    with pytest.raises(ValueError, match=r"`paragraph_memory`.*\(2, 3, None\).*\(2, 2, 8\)"):
        call(paragraph_memory=inputs["paragraph_memory"][:, :2])
    with pytest.raises(ValueError, match=r"`token_mask`.*\(2, 3, 4\).*\(2, 3, 2\)"):
        call(token_mask=inputs["token_mask"][:, :, :2])
    with pytest.raises(ValueError, match=r"`paragraph_mask`.*rank 2.*\(2, 3, 1\)"):
        call(paragraph_mask=inputs["paragraph_mask"][..., None])
    with pytest.raises(ValueError, match=r"`word_memory`.*rank 4.*\(2, 3, 8\)"):
        call(word_memory=inputs["word_memory"][:, :, 0])
    cache = np.zeros((B, 2, S, H, DH), "float32")
    step = dict(inputs, decoder_sequence=inputs["decoder_sequence"][:, :1])
    with pytest.raises(ValueError, match="self_attention_cache_update_index"):
        layer(**step, self_attention_cache=cache)
    with pytest.raises(ValueError, match="self_attention_cache"):
        layer(**step, self_attention_cache_update_index=0)
    with pytest.raises(ValueError, match=r"`self_attention_cache`.*\(2, 2, None, 2, 4\).*\(2, 2, 5, 4, 2\)"):
        layer(**step, self_attention_cache=np.zeros((B, 2, S, 4, 2), "float32"),
              self_attention_cache_update_index=0)
    with pytest.raises(ValueError, match=r"`decoder_padding_mask`.*\(2, 7\).*\(2, 5\)"):
        layer(**step, self_attention_cache=np.zeros((B, 2, 7, H, DH), "float32"),
              self_attention_cache_update_index=0)
    # A Python int index past the cache would be clamped by the slice update
    # (index 9 of S=5 wrote slot 4); it is refused, the last slot accepted.
    step = dict(step, decoder_padding_mask=None)
    cache = np.zeros((B, 2, S, H, DH), "float32")
    for index in (S, 9, -1):
        with pytest.raises(ValueError, match=rf"must be in \[0, S - T\] = \[0, {S - 1}\] "
                                             rf"\(cache slots S={S}, new positions T=1\), "
                                             rf"received {index}"):
            layer(**step, self_attention_cache=cache, self_attention_cache_update_index=index)
    _, new_cache = layer(**step, self_attention_cache=cache,
                         self_attention_cache_update_index=S - 1)[::2]
    written = np.abs(to_numpy(new_cache)).sum(axis=(0, 1, 3, 4))
    assert written[S - 1] > 0 and not written[: S - 1].any()
    with pytest.raises(ValueError, match="hidden_dim"):
        PHTDecoderLayer(hidden_dim=10, intermediate_dim=4, num_heads=4)


def test_outputs_and_cache_contract():
    inputs = make_inputs(8)
    layer = make_layer(inputs)
    shapes = dict(
        decoder_sequence_shape=(B, 1, D),
        word_memory_shape=(B, P, T, D),
        paragraph_memory_shape=(B, P, D),
        self_attention_cache_shape=(B, 2, S, H, DH),
    )
    assert layer.compute_output_shape(**shapes) == (
        (B, 1, D), (B, 1, P), (B, 2, S, H, DH)
    )
    cache = np.zeros((B, 2, S, H, DH), "float32")
    result = layer(
        inputs["decoder_sequence"][:, :1], inputs["word_memory"],
        inputs["paragraph_memory"], self_attention_cache=cache,
        self_attention_cache_update_index=0,
    )
    assert len(result) == 3
    assert tuple(result[2].shape) == (B, 2, S, H, DH)
    assert keras.backend.standardize_dtype(result[1].dtype) == "float32"
    # Only position 0 of the cache was written.
    assert np.all(to_numpy(result[2])[:, :, 1:] == 0)
    assert np.any(ops.convert_to_numpy(result[2])[:, :, 0] != 0)


def test_k_rows_per_memory_example_equal_the_repeated_memories():
    """B·K decoder rows (row b·K + k) against memories of B examples equal
    the same rows against the memories repeated K times; a row count that is
    not a multiple of B is refused."""
    inputs = make_inputs(5)
    layer = make_layer(inputs)
    beams = 3
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(B * beams, S, D)).astype("float32")
    padding = np.repeat(inputs["decoder_padding_mask"], beams, axis=0)
    memories = {k: v for k, v in memory_kwargs(inputs).items() if k != "decoder_padding_mask"}
    repeated = {k: np.repeat(v, beams, axis=0) for k, v in memories.items()}
    expected = to_numpy(layer(rows, **repeated, decoder_padding_mask=padding))
    shared = to_numpy(layer(rows, **memories, decoder_padding_mask=padding))
    for got, want in zip(shared, expected):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match=r"`decoder_sequence` must have B or B·K rows.*B=2.*received 3 rows"):
        layer(rows[:3], **memories)
