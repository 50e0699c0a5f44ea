import numpy as np
import pytest
from keras import ops
from layer_test_case import compute_gradients
from layer_test_case import input_gradients
from layer_test_case import run_layer_test
from layer_test_case import to_numpy

from keras_hsum.layers.discourse_attention import DiscourseAttention
from keras_hsum.layers.discourse_attention import additive_scores
from keras_hsum.layers.discourse_attention import softmax_keeping_weights
from keras_hsum.layers.masking import masked_softmax

B, P, T, S = 2, 3, 4, 3
DD, DW, DS, A = 7, 6, 5, 8


def make_inputs(rng, batch=B, sections=P, tokens=T):
    token_mask = np.ones((batch, sections, tokens), bool)
    token_mask[0, 0, 3:] = False  # padded tokens
    token_mask[0, 2, :] = False  # a fully padded section ...
    section_mask = np.ones((batch, sections), bool)
    section_mask[0, 2] = False  # ... also marked in the section mask
    token_mask[1, 1, 2:] = False
    return {
        "decoder_state": rng.normal(size=(batch, DD)).astype("float32"),
        "word_states": rng.normal(size=(batch, sections, tokens, DW)).astype("float32"),
        "section_states": rng.normal(size=(batch, sections, DS)).astype("float32"),
        "token_mask": token_mask,
        "section_mask": section_mask,
        "coverage": rng.uniform(0, 2, size=(batch, sections, tokens)).astype("float32"),
    }


def weights(dense):
    kernel = ops.convert_to_numpy(dense.kernel).astype("float64")
    bias = 0.0 if dense.bias is None else ops.convert_to_numpy(dense.bias).astype("float64")
    return kernel, bias


def numpy_discourse_attention(layer, inputs, weighting):
    """Cohan et al. Eq. 2, 4-6 (+ See et al.'s coverage), one example at a time."""
    wq_s, bq_s = weights(layer.section_query_dense)
    wk_s, _ = weights(layer.section_key_dense)
    v_s = weights(layer.section_score_dense)[0][:, 0]
    wq, bq = weights(layer.word_query_dense)
    wk, _ = weights(layer.word_key_dense)
    v = weights(layer.word_score_dense)[0][:, 0]
    w_c = None
    if inputs.get("coverage") is not None:
        w_c = weights(layer.coverage_dense)[0][0]
    s = inputs["decoder_state"].astype("float64")
    h = inputs["word_states"].astype("float64")
    hs = inputs["section_states"].astype("float64")
    batch, sections, tokens, width = h.shape
    token_mask = inputs.get("token_mask", np.ones((batch, sections, tokens), bool))
    section_mask = inputs.get("section_mask", np.ones((batch, sections), bool))
    contexts = np.zeros((batch, width))
    alphas = np.zeros((batch, sections, tokens))
    betas = np.zeros((batch, sections))
    for b in range(batch):
        # Eq. 6: additive section scores, softmax over the real sections.
        section_scores = np.array(
            [v_s @ np.tanh(s[b] @ wq_s + bq_s + hs[b, j] @ wk_s) for j in range(sections)]
        )
        real = [j for j in range(sections) if section_mask[b, j]]
        if real:
            e = np.exp(section_scores[real] - section_scores[real].max())
            betas[b, real] = e / e.sum()
        # Eq. 2 (+ coverage): additive word scores.
        scores = np.zeros((sections, tokens))
        for j in range(sections):
            for i in range(tokens):
                pre = s[b] @ wq + bq + h[b, j, i] @ wk
                if w_c is not None:
                    pre = pre + w_c * float(inputs["coverage"][b, j, i])
                scores[j, i] = v @ np.tanh(pre)
        words = [
            (j, i)
            for j in range(sections)
            for i in range(tokens)
            if token_mask[b, j, i] and section_mask[b, j]
        ]
        if not words:
            continue
        if weighting == "scores":  # Eq. 5: softmax over (j,i) of beta_j * score.
            logits = np.array([betas[b, j] * scores[j, i] for j, i in words])
            unnormalised = np.exp(logits - logits.max())
        else:  # alpha proportional to beta_j * exp(score).
            unnormalised = np.array([betas[b, j] * np.exp(scores[j, i]) for j, i in words])
        for (j, i), u in zip(words, unnormalised / unnormalised.sum()):
            alphas[b, j, i] = u
        # Eq. 4: context.
        contexts[b] = np.einsum("pt,ptd->d", alphas[b], h[b])
    return contexts, alphas, betas


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_shared_layer_checks_one_step_with_coverage():
    inputs = make_inputs(np.random.default_rng(0))
    run_layer_test(
        DiscourseAttention,
        {"attention_dim": A, "use_coverage": True},
        inputs,
        expected_output_shape=((B, DW), (B, P, T), (B, P)),
        expected_num_trainable_weights=9,
    )


def test_shared_layer_checks_all_steps():
    rng = np.random.default_rng(1)
    inputs = make_inputs(rng)
    del inputs["coverage"]
    inputs["decoder_state"] = rng.normal(size=(B, S, DD)).astype("float32")
    run_layer_test(
        DiscourseAttention,
        {"attention_dim": A, "section_weighting": "probabilities"},
        inputs,
        expected_output_shape=((B, S, DW), (B, S, P, T), (B, S, P)),
        expected_num_trainable_weights=8,
        run_mixed_precision_check=False,  # the one-step test covers it
    )


@pytest.mark.parametrize("weighting", ["scores", "probabilities"])
@pytest.mark.parametrize("with_coverage", [False, True])
def test_matches_numpy_transcription(weighting, with_coverage):
    inputs = make_inputs(np.random.default_rng(2))
    if not with_coverage:
        del inputs["coverage"]
    layer = DiscourseAttention(
        attention_dim=A, use_coverage=with_coverage, section_weighting=weighting
    )
    context, alpha, beta = to_numpy(layer(**inputs))
    expected = numpy_discourse_attention(layer, inputs, weighting)
    np.testing.assert_allclose(beta, expected[2], atol=1e-5)
    np.testing.assert_allclose(alpha, expected[1], atol=1e-5)
    np.testing.assert_allclose(context, expected[0], atol=1e-5)
    np.testing.assert_allclose(alpha.sum(axis=(1, 2)), 1.0, atol=1e-5)
    np.testing.assert_allclose(beta.sum(axis=1), 1.0, atol=1e-5)
    # The padded section gets no weight at all.
    assert np.all(alpha[0, 2] == 0) and beta[0, 2] == 0 and np.all(alpha[0, 0, 3:] == 0)


def test_weightings_differ():
    """The two readings of Eq. 5 are different functions (the option matters)."""
    inputs = make_inputs(np.random.default_rng(3))
    del inputs["coverage"]
    scores = DiscourseAttention(attention_dim=A, section_weighting="scores")
    scores(**inputs)
    product = DiscourseAttention(attention_dim=A, section_weighting="probabilities")
    product(**inputs)
    product.set_weights(scores.get_weights())
    a1, a2 = to_numpy(scores(**inputs))[1], to_numpy(product(**inputs))[1]
    assert np.abs(a1 - a2).max() > 1e-3


def test_all_steps_equal_step_by_step():
    rng = np.random.default_rng(4)
    inputs = make_inputs(rng)
    del inputs["coverage"]
    states = rng.normal(size=(B, S, DD)).astype("float32")
    layer = DiscourseAttention(attention_dim=A, section_weighting="probabilities")
    context, alpha, beta = to_numpy(layer(**{**inputs, "decoder_state": states}))
    for t in range(S):
        c_t, a_t, b_t = to_numpy(layer(**{**inputs, "decoder_state": states[:, t]}))
        np.testing.assert_allclose(context[:, t], c_t, atol=1e-5)
        np.testing.assert_allclose(alpha[:, t], a_t, atol=1e-5)
        np.testing.assert_allclose(beta[:, t], b_t, atol=1e-5)


@pytest.mark.parametrize("weighting", ["scores", "probabilities"])
def test_padding_does_not_change_valid_outputs(weighting):
    rng = np.random.default_rng(5)
    inputs = make_inputs(rng)
    layer = DiscourseAttention(attention_dim=A, use_coverage=True, section_weighting=weighting)
    context, alpha, beta = to_numpy(layer(**inputs))
    # Two more padded tokens per section and one more padded section, all
    # holding garbage.
    wide = make_inputs(rng, sections=P + 1, tokens=T + 2)
    wide["decoder_state"] = inputs["decoder_state"]
    for name in ("word_states", "coverage", "token_mask"):
        wide[name][:, :P, :T] = inputs[name]
        if name == "token_mask":
            wide[name][:, P:] = False
            wide[name][:, :, T:] = False
    wide["section_states"][:, :P] = inputs["section_states"]
    wide["section_mask"][:, :P] = inputs["section_mask"]
    wide["section_mask"][:, P:] = False
    wide_context, wide_alpha, wide_beta = to_numpy(layer(**wide))
    np.testing.assert_allclose(wide_context, context, atol=1e-5)
    np.testing.assert_allclose(wide_alpha[:, :P, :T], alpha, atol=1e-6)
    np.testing.assert_allclose(wide_beta[:, :P], beta, atol=1e-6)
    assert np.all(wide_alpha[:, P:] == 0) and np.all(wide_alpha[:, :, T:] == 0)
    assert np.all(wide_beta[:, P:] == 0)


def test_fully_padded_section_and_document_give_no_nan():
    inputs = make_inputs(np.random.default_rng(6))
    inputs["token_mask"][1] = False  # example 1: nothing valid at all
    inputs["section_mask"][1] = False
    layer = DiscourseAttention(attention_dim=A, use_coverage=True)
    context, alpha, beta = to_numpy(layer(**inputs))
    for value in (context, alpha, beta):
        assert np.all(np.isfinite(value))
    assert np.all(alpha[1] == 0) and np.all(beta[1] == 0) and np.all(context[1] == 0)
    grads = compute_gradients(layer, inputs)
    assert all(np.all(np.isfinite(g)) for g in grads)
    names = ["decoder_state", "word_states", "section_states", "coverage"]
    input_grads = input_gradients(layer, inputs, names)
    for name, grad in input_grads.items():
        assert np.all(np.isfinite(grad)), name
    word_grad = input_grads["word_states"]
    assert np.all(word_grad[0, 2] == 0) and np.all(word_grad[1] == 0)
    assert np.any(word_grad[0, :2] != 0)


def test_gradients_reach_every_weight_with_probability_weighting():
    # (The shared test checks the default "scores" weighting.)
    inputs = make_inputs(np.random.default_rng(7))
    layer = DiscourseAttention(
        attention_dim=A, use_coverage=True, section_weighting="probabilities"
    )
    layer(**inputs)
    grads = compute_gradients(layer, inputs)
    assert len(grads) == 9
    for variable, grad in zip(layer.trainable_variables, grads):
        assert np.all(np.isfinite(grad)) and np.any(grad != 0), variable.path


def test_no_coverage_means_zero_coverage():
    """A coverage layer called without coverage = zero coverage = no coverage term."""
    inputs = make_inputs(np.random.default_rng(8))
    coverage = inputs.pop("coverage")
    with_weight = DiscourseAttention(attention_dim=A, use_coverage=True)
    with_weight(**inputs, coverage=coverage)
    plain = DiscourseAttention(attention_dim=A)
    plain(**inputs)
    plain.set_weights(
        [w for v, w in zip(with_weight.weights, with_weight.get_weights()) if "coverage" not in v.path]
    )
    expected = to_numpy(plain(**inputs))
    for out in (with_weight(**inputs), with_weight(**inputs, coverage=np.zeros_like(coverage))):
        for e, o in zip(expected, to_numpy(out)):
            np.testing.assert_allclose(o, e, atol=1e-6)
    changed = to_numpy(with_weight(**inputs, coverage=coverage))[1]
    assert np.abs(changed - expected[1]).max() > 1e-4


def test_wrong_inputs_raise():
    inputs = make_inputs(np.random.default_rng(9))
    with pytest.raises(ValueError, match="section_weighting"):
        DiscourseAttention(attention_dim=A, section_weighting="sum")

    def call(layer=None, **changes):
        layer = layer or DiscourseAttention(attention_dim=A, use_coverage=True)
        layer(**{**inputs, **changes})

    with pytest.raises(ValueError, match=r"`word_states`.*\[B,P,T,Dw\].*\(2, 3, 6\)"):
        call(word_states=np.zeros((2, 3, 6), "float32"))
    with pytest.raises(ValueError, match=r"`decoder_state`.*\[B,Dd\].*\(2, 1, 1, 7\)"):
        call(decoder_state=np.zeros((2, 1, 1, 7), "float32"))
    with pytest.raises(ValueError, match=r"`decoder_state`.*\(2, None\).*\(3, 7\)"):
        call(decoder_state=np.zeros((3, 7), "float32"))
    with pytest.raises(ValueError, match=r"`section_states`.*\[B,P,Ds\].*\(2, 3, None\).*\(2, 4, 5\)"):
        call(section_states=np.zeros((2, 4, 5), "float32"))
    with pytest.raises(ValueError, match=r"`token_mask`.*\[B,P,T\].*\(2, 3, 4\).*\(2, 3, 5\)"):
        call(token_mask=np.ones((2, 3, 5), bool))
    with pytest.raises(ValueError, match=r"`token_mask`.*\(2, 3, 4\).*\(2, 2, 4\)"):
        call(token_mask=np.ones((2, 2, 4), bool))
    with pytest.raises(ValueError, match=r"`section_mask`.*\[B,P\].*\(2, 3\).*\(2, 4\)"):
        call(section_mask=np.ones((2, 4), bool))
    with pytest.raises(ValueError, match=r"`coverage`.*\[B,P,T\].*\(2, 3, 4\).*\(2, 3, 5\)"):
        call(coverage=np.zeros((2, 3, 5), "float32"))
    with pytest.raises(ValueError, match=r"`coverage`.*use_coverage=False"):
        call(layer=DiscourseAttention(attention_dim=A))
    with pytest.raises(ValueError, match=r"`coverage` needs a rank-2 `decoder_state`.*\(2, 3, 7\)"):
        call(decoder_state=np.zeros((2, 3, 7), "float32"))
    # Also after the layer is built (the checks run in call, too).
    layer = DiscourseAttention(attention_dim=A, use_coverage=True)
    layer(**inputs)
    with pytest.raises(ValueError, match=r"`token_mask`.*\(2, 3, 4\).*\(2, 3, 3\)"):
        call(layer=layer, token_mask=np.ones((2, 3, 3), bool))


@pytest.mark.parametrize("weighting", ["scores", "probabilities"])
def test_memory_cache_gives_the_numpy_transcription(weighting):
    """`project_memory`'s terms in place of the projections: the same
    function (Eqs. 2, 4-6 with coverage). The section states passed beside
    the cache are zeros: they enter only through W_h' h_j, so the layer can
    only have read it from the cache."""
    inputs = make_inputs(np.random.default_rng(12))
    layer = DiscourseAttention(
        attention_dim=A, use_coverage=True, section_weighting=weighting
    )
    uncached = to_numpy(layer(**inputs))
    cache = layer.project_memory(inputs["word_states"], inputs["section_states"])
    assert tuple(cache["word_keys"].shape) == (B, P, T, A)
    assert tuple(cache["section_keys"].shape) == (B, P, A)
    zeroed = dict(inputs, section_states=np.zeros_like(inputs["section_states"]))
    cached = to_numpy(layer(**zeroed, memory_cache=cache))
    expected = numpy_discourse_attention(layer, inputs, weighting)
    for name, got, want, plain in zip(("context", "alpha", "beta"), cached, expected, uncached):
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(got, plain, atol=1e-6, err_msg=name)


def test_wrong_memory_cache_raises():
    inputs = make_inputs(np.random.default_rng(13))
    del inputs["coverage"]
    layer = DiscourseAttention(attention_dim=A)
    with pytest.raises(ValueError, match=r"`project_memory` needs a built layer"):
        layer.project_memory(inputs["word_states"], inputs["section_states"])
    layer(**inputs)
    cache = layer.project_memory(inputs["word_states"], inputs["section_states"])
    with pytest.raises(ValueError, match=r"`memory_cache` must be the dict.*\['word_keys'\]"):
        layer(**inputs, memory_cache={"word_keys": cache["word_keys"]})
    with pytest.raises(ValueError, match=r"memory_cache\['word_keys'\].*\(2, 3, 4, 8\).*\(2, 3, 2, 8\)"):
        layer(**inputs, memory_cache=dict(cache, word_keys=cache["word_keys"][:, :, :2]))


def loss_gradients(fn, inputs, names, layer=None):
    """Gradients of mean(output²) summed over `fn(inputs)`'s outputs w.r.t.
    `inputs[name]` for `names`, then `layer`'s trainable weights (read by
    `fn` through the layer), float32 numpy."""
    import keras

    variables = [] if layer is None else layer.trainable_variables

    def loss_of(outputs):
        outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        return sum(ops.mean(ops.square(ops.cast(o, "float32"))) for o in outputs)

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tensors = {k: tf.convert_to_tensor(v) for k, v in inputs.items()}
        with tf.GradientTape() as tape:
            for name in names:
                tape.watch(tensors[name])
            loss = loss_of(fn(tensors))
        grads = tape.gradient(loss, [tensors[n] for n in names] + [v.value for v in variables])
    else:
        import jax

        def loss_fn(xs, values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return loss_of(fn(dict(inputs, **dict(zip(names, xs)))))

        grads = jax.grad(loss_fn, argnums=(0, 1))(
            [inputs[n] for n in names], [v.value for v in variables])
        grads = list(grads[0]) + list(grads[1])
    return [np.zeros((), "float32") if g is None else to_numpy(g) for g in grads]


@pytest.mark.parametrize("with_coverage", [False, True])
@pytest.mark.parametrize("memory_shape", [(P,), (P, T)], ids=["sections", "words"])
def test_additive_scores_and_their_gradient(memory_shape, with_coverage):
    """`additive_scores` against a numpy transcription of v . tanh(q + k +
    cov w_c), and its written-out gradient against automatic
    differentiation of the same ops, for every argument."""
    rng = np.random.default_rng(21)
    inputs = {
        "queries": rng.normal(size=(B, A)).astype("float32"),
        "keys": rng.normal(size=(B,) + memory_shape + (A,)).astype("float32"),
        "vector": rng.normal(size=(A,)).astype("float32"),
    }
    if with_coverage:
        inputs["coverage"] = rng.uniform(0, 2, size=(B,) + memory_shape).astype("float32")
        inputs["coverage_vector"] = rng.normal(size=(A,)).astype("float32")
    names = list(inputs)

    def automatic(x):
        queries = x["queries"]
        for _ in memory_shape:
            queries = ops.expand_dims(queries, 1)
        features = queries + x["keys"]
        if with_coverage:
            features = features + x["coverage"][..., None] * x["coverage_vector"]
        return ops.sum(ops.tanh(features) * x["vector"], axis=-1)

    queries = inputs["queries"].reshape((B,) + (1,) * len(memory_shape) + (A,))
    features = queries + inputs["keys"].astype("float64")
    if with_coverage:
        features = features + inputs["coverage"][..., None] * inputs["coverage_vector"]
    expected = np.tanh(features) @ inputs["vector"]
    got = to_numpy(additive_scores(**inputs))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    grads = loss_gradients(lambda x: additive_scores(**x), inputs, names)
    reference = loss_gradients(automatic, inputs, names)
    for name, grad, want in zip(names, grads, reference, strict=True):
        assert grad.shape == inputs[name].shape, name
        np.testing.assert_allclose(grad, want, atol=1e-6, rtol=1e-5, err_msg=name)
        assert np.abs(want).max() > 0, name


@pytest.mark.parametrize("masked", [False, True])
def test_softmax_keeping_weights_and_its_gradient(masked):
    """Weights: a numpy softmax over the kept entries (0 elsewhere; an
    all-masked row all 0). Gradient: automatic differentiation of
    `masked_softmax`, through a loss that weighs every entry differently."""
    rng = np.random.default_rng(24)
    scores = rng.normal(size=(3, 2, 5)).astype("float32")
    mask = rng.uniform(size=(3, 1, 5)) > 0.4
    mask[1, 0] = False  # a row with nothing to attend to
    mask[2, 0, 1] = True
    mask = mask if masked else None
    keep = np.ones(scores.shape, bool) if mask is None else np.broadcast_to(mask, scores.shape)
    exp = np.exp(scores - scores.max(-1, keepdims=True)) * keep
    total = exp.sum(-1, keepdims=True)
    expected = np.where(total > 0, exp / np.where(total > 0, total, 1.0), 0.0)
    np.testing.assert_allclose(
        to_numpy(softmax_keeping_weights(scores, mask)), expected, atol=1e-6)
    weighting = rng.normal(size=scores.shape).astype("float32")

    def weighted(softmax):
        return lambda x: softmax(x["scores"], mask) * weighting

    inputs = {"scores": scores}
    (grad,) = loss_gradients(weighted(softmax_keeping_weights), inputs, ["scores"])
    (reference,) = loss_gradients(weighted(masked_softmax), inputs, ["scores"])
    np.testing.assert_allclose(grad, reference, atol=1e-7, rtol=1e-5)
    assert np.abs(reference).max() > 0
    assert np.all(grad[~keep] == 0)


@pytest.mark.jax_slow  # 0.2 s under TensorFlow, 5 s eager under JAX
@pytest.mark.parametrize("weighting", ["scores", "probabilities"])
def test_attend_equals_call(weighting):
    """`attend` with `loop_weights()` (both queries in one matmul, the
    written-out score gradient) gives `call`'s outputs and the gradients
    of every input and every weight (9, coverage included)."""
    inputs = make_inputs(np.random.default_rng(22))
    layer = DiscourseAttention(attention_dim=A, use_coverage=True, section_weighting=weighting)
    layer(**inputs)
    names = ["decoder_state", "word_states", "section_states", "coverage"]

    def by_call(x):
        cache = layer.project_memory(x["word_states"], x["section_states"])
        return layer(**x, memory_cache=cache)

    def by_attend(x):
        cache = layer.project_memory(x["word_states"], x["section_states"])
        return layer.attend(**x, memory_cache=cache, loop_weights=layer.loop_weights())

    for name, got, want in zip(("context", "alpha", "beta"), to_numpy(by_attend(inputs)),
                               to_numpy(by_call(inputs)), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=name)
    grads = loss_gradients(by_attend, inputs, names, layer)
    reference = loss_gradients(by_call, inputs, names, layer)
    labels = names + [v.path for v in layer.trainable_variables]
    assert len(labels) == 4 + 9
    for label, grad, want in zip(labels, grads, reference, strict=True):
        np.testing.assert_allclose(grad, want, atol=1e-6, rtol=1e-5, err_msg=label)
        assert np.abs(want).max() > 0, label


def test_attend_without_coverage_and_its_errors():
    inputs = make_inputs(np.random.default_rng(23))
    del inputs["coverage"]
    layer = DiscourseAttention(attention_dim=A)
    with pytest.raises(ValueError, match=r"`loop_weights` needs a built layer"):
        layer.loop_weights()
    layer(**inputs)
    cache = layer.project_memory(inputs["word_states"], inputs["section_states"])
    weights = layer.loop_weights()
    assert sorted(weights) == ["query_bias", "query_kernel", "section_vector", "word_vector"]
    got = layer.attend(**inputs, memory_cache=cache, loop_weights=weights)
    for name, value, want in zip(("context", "alpha", "beta"), to_numpy(got),
                                 to_numpy(layer(**inputs)), strict=True):
        np.testing.assert_allclose(value, want, atol=1e-6, err_msg=name)
    with pytest.raises(ValueError, match=r"`attend` needs `memory_cache`.*loop_weights=NoneType"):
        layer.attend(**inputs, memory_cache=cache)
    with pytest.raises(ValueError, match=r"`attend` takes one step.*\(2, 1, 7\)"):
        layer.attend(**dict(inputs, decoder_state=inputs["decoder_state"][:, None]),
                     memory_cache=cache, loop_weights=weights)
    with pytest.raises(ValueError, match=r"use_coverage=False"):
        layer.attend(**inputs, coverage=np.zeros((B, P, T), "float32"),
                     memory_cache=cache, loop_weights=weights)
    with pytest.raises(ValueError, match=r"`coverage` .* and `coverage_vector` .* together"):
        additive_scores(np.zeros((B, A)), np.zeros((B, P, A)), np.zeros((A,)),
                        coverage=np.zeros((B, P)))
