"""Attention with dropout on its weights: the hash's statistics (numpy, both
backends), the reference against a numpy transcription of masked softmax
attention, and the Pallas kernel in interpret mode against the reference
(outputs and gradients wrt query, key and value; JAX only)."""

import math

import keras
import numpy as np
import pytest

from keras_hsum.layers import dropout_attention as da

BACKEND = keras.backend.backend()
jax_only = pytest.mark.skipif(BACKEND != "jax", reason="the kernel and the reference are JAX")

SIGMAS = 5.0  # a correct hash fails one comparison with probability 6e-7


def scalar_value(seed, b, n, i, j, num_heads):
    """The module docstring's hash of one weight, in Python integers."""
    word = 0xFFFFFFFF

    def mix(x):
        x ^= x >> 16
        x = (x * 0x7FEB352D) & word
        x ^= x >> 15
        x = (x * 0x846CA68B) & word
        return x ^ (x >> 16)

    key = mix(mix(seed[0] ^ 0x243F6A88) ^ seed[1])
    head = mix(key ^ (((b * num_heads + n) * 0x85EBCA6B) & word))
    row = mix(head ^ ((i * 0xC2B2AE35) & word))
    pair = mix(row ^ (((j // 2) * 0x9E3779B9) & word))
    return (pair >> (16 * (j % 2))) & 0xFFFF


def within(observed, expected, sigma, what):
    assert abs(observed - expected) <= SIGMAS * sigma, (
        f"{what}: {observed:.6f}, expected {expected:.6f} ± {SIGMAS}·{sigma:.2e}")


# ---------------------------------------------------------------------------
# The hash (numpy: runs under every backend).


def test_hash_is_the_documented_function():
    seed = (0x12345678, 0x9ABCDEF0)
    bits = da.dropout_mask_bits(np.array(seed, np.uint32), 2, 3, 5, 7)
    assert bits.dtype == np.uint32 and bits.shape == (2, 3, 5, 7)
    for b, n, i, j in [(0, 0, 0, 0), (1, 2, 4, 6), (0, 1, 3, 2), (1, 0, 0, 5)]:
        assert int(bits[b, n, i, j]) == scalar_value(seed, b, n, i, j, 3)
    # An int seed is its low and high words.
    np.testing.assert_array_equal(
        da.dropout_mask_bits(0x9ABCDEF0_12345678, 2, 3, 5, 7), bits)


def test_keep_threshold():
    assert da.keep_threshold(0.1) == round(0.9 * 2**16)
    assert da.keep_threshold(0.0) == 2**16 - 1
    assert da.keep_threshold(1 - 1e-12) == 1
    with pytest.raises(ValueError, match="rate"):
        da.keep_threshold(1.0)


@pytest.fixture(scope="module")
def draws():
    """2²⁰ values: B 2 · N 4 · T 256 · S 512."""
    return da.dropout_mask_bits(np.array([2024, 7], np.uint32), 2, 4, 256, 512)


def test_kept_fraction_and_bits_are_uniform(draws):
    count = draws.size
    for rate in (0.1, 0.5, 0.9):
        keep = da.keep_threshold(rate) / da.VALUES
        kept = (draws < np.uint32(da.keep_threshold(rate))).mean()
        within(kept, keep, math.sqrt(keep * (1 - keep) / count), f"kept fraction at {rate}")
    for bit in range(da.BITS):
        ones = ((draws >> np.uint32(bit)) & np.uint32(1)).mean()
        within(ones, 0.5, math.sqrt(0.25 / count), f"bit {bit}")
    # The values' mean and variance of a uniform on [0, 1).
    u = draws.astype(np.float64) / da.VALUES
    within(u.mean(), 0.5, math.sqrt(1 / 12 / count), "mean")
    within(((u - 0.5) ** 2).mean(), 1 / 12, math.sqrt(1 / 180 / count), "variance")


def test_rates_per_position(draws):
    keep = da.keep_threshold(0.1) / da.VALUES
    kept = draws < np.uint32(da.keep_threshold(0.1))
    for axes, what in [((0, 1, 2), "key position"), ((0, 1, 3), "query position"),
                       ((2, 3), "batch and head")]:
        rates = kept.mean(axis=axes).ravel()
        draws_each = kept.size // rates.size
        sigma = math.sqrt(keep * (1 - keep) / draws_each)
        worst = rates[np.argmax(np.abs(rates - keep))]
        within(worst, keep, sigma, f"worst {what} of {rates.size}")


def test_neighbours_are_independent(draws):
    keep = da.keep_threshold(0.1) / da.VALUES
    kept = draws < np.uint32(da.keep_threshold(0.1))
    u = draws.astype(np.float64) / da.VALUES - 0.5
    pairs = {"next key": (kept[..., 1:], kept[..., :-1], u[..., 1:], u[..., :-1]),
             "next query": (kept[:, :, 1:], kept[:, :, :-1], u[:, :, 1:], u[:, :, :-1]),
             "next head": (kept[:, 1:], kept[:, :-1], u[:, 1:], u[:, :-1]),
             "next batch": (kept[1:], kept[:-1], u[1:], u[:-1])}
    for what, (a, b, ua, ub) in pairs.items():
        both = (a & b).mean()
        within(both, keep**2, math.sqrt(keep**2 * (1 - keep**2) / a.size), f"both kept, {what}")
        correlation = (ua * ub).mean() * 12
        within(correlation, 0.0, 1 / math.sqrt(ua.size), f"correlation, {what}")


def test_seeds_give_independent_masks(draws):
    keep = da.keep_threshold(0.1) / da.VALUES
    threshold = np.uint32(da.keep_threshold(0.1))
    kept = draws < threshold
    agreement = keep**2 + (1 - keep) ** 2
    # A SeedGenerator's consecutive draws differ in the second word by 1.
    for other in ([2024, 8], [2025, 7], [7, 2024]):
        other_kept = da.dropout_mask_bits(np.array(other, np.uint32), 2, 4, 256, 512) < threshold
        same = (kept == other_kept).mean()
        within(same, agreement, math.sqrt(agreement * (1 - agreement) / kept.size),
               f"agreement with seed {other}")


# ---------------------------------------------------------------------------
# Numpy transcription of masked softmax attention (float64).


def numpy_attention(query, key, value, mask, scale, kept=None, keep=1.0):
    """softmax over visible keys; a row with none visible gives zeros;
    `kept` [B,N,T,S] bool drops weights, kept ones scaled by 1/keep."""
    q, k, v = (np.asarray(x, np.float64) for x in (query, key, value))
    b, t, n, _ = q.shape
    s = k.shape[1]
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    visible = np.ones((b, 1, t, s), bool) if mask is None else np.broadcast_to(
        np.asarray(mask, bool).reshape((1,) * (4 - np.ndim(mask)) + np.shape(mask)),
        (b, 1, t, s))
    weights = np.zeros_like(logits)
    for bi in range(b):
        for ni in range(n):
            for ti in range(t):
                seen = visible[bi, 0, ti]
                if seen.any():
                    row = logits[bi, ni, ti, seen]
                    e = np.exp(row - row.max())
                    weights[bi, ni, ti, seen] = e / e.sum()
    if kept is not None:
        weights = weights * kept / keep
    return np.einsum("bnts,bsnh->btnh", weights, v)


def make_inputs(b, t, s, n, h, dtype="float32", mask_kind="keys", seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(b, t, n, h)).astype(np.float32)
    k = rng.normal(size=(b, s, n, h)).astype(np.float32)
    v = rng.normal(size=(b, s, n, h)).astype(np.float32)
    if mask_kind == "keys":  # key padding: the first example keeps half its keys
        mask = np.ones((b, 1, 1, s), bool)
        mask[0, ..., s // 2:] = False
    elif mask_kind == "full":  # random, with fully masked query rows
        mask = rng.random((b, 1, t, s)) < 0.6
        mask[0, 0, 3] = False
        mask[-1, 0, -1] = False
    elif mask_kind == "shared":  # one [T, S] mask for every example (causal)
        mask = np.tril(np.ones((t, s), bool))[None, None]
        mask[..., 0, :] = False  # and a row with nothing visible
    else:
        mask = None
    if dtype != "float32":
        import jax.numpy as jnp

        q, k, v = (jnp.asarray(x, dtype) for x in (q, k, v))
    return q, k, v, mask


# ---------------------------------------------------------------------------
# The reference (JAX).


@jax_only
@pytest.mark.parametrize("mask_kind", ["keys", "full", "shared", None])
def test_reference_at_rate_zero_is_masked_softmax_attention(mask_kind):
    q, k, v, mask = make_inputs(2, 9, 11, 2, 4, mask_kind=mask_kind)
    out = np.asarray(da.reference_dropout_attention(q, k, v, mask, 0.0, 0, scale=0.3))
    np.testing.assert_allclose(out, numpy_attention(q, k, v, mask, 0.3), atol=1e-5, rtol=1e-5)


@jax_only
def test_reference_drops_the_hash_mask():
    q, k, v, mask = make_inputs(2, 9, 11, 2, 4, mask_kind="full")
    seed = np.array([11, 3], np.uint32)
    threshold = da.keep_threshold(0.25)
    kept = da.dropout_mask_bits(seed, 2, 2, 9, 11) < np.uint32(threshold)
    out = np.asarray(da.reference_dropout_attention(q, k, v, mask, 0.25, seed))
    want = numpy_attention(q, k, v, mask, 0.5, kept, threshold / da.VALUES)
    np.testing.assert_allclose(out, want, atol=1e-5, rtol=1e-5)


@jax_only
def test_expectation_over_seeds_is_the_undropped_attention():
    """The mean over M seeds of each output element is within 5 standard
    errors (its sample standard deviation / √M) of the undropped output.
    Its worst element is at 2.7 standard errors (192 elements). Dropping
    without the 1/κ scaling puts the median element at 10 standard errors
    and the worst at 31: it fails."""
    import jax
    import jax.numpy as jnp

    q, k, v, mask = make_inputs(2, 6, 40, 2, 8, mask_kind="keys", seed=3)
    rate, count = 0.3, 512
    seeds = jnp.stack([jnp.full((count,), 99, jnp.uint32),
                       jnp.arange(count, dtype=jnp.uint32)], axis=1)
    outs = jax.jit(jax.vmap(
        lambda seed: da.reference_dropout_attention(q, k, v, mask, rate, seed)))(seeds)
    outs = np.asarray(outs, np.float64)
    undropped = numpy_attention(q, k, v, mask, 1 / math.sqrt(8))
    error = np.abs(outs.mean(axis=0) - undropped)
    standard_error = outs.std(axis=0, ddof=1) / math.sqrt(count)
    assert np.all(error <= SIGMAS * standard_error + 1e-6), (
        f"worst: {np.max(error / (standard_error + 1e-12)):.1f} standard errors")
    # Different seeds do give different outputs.
    assert np.mean(np.abs(outs[0] - outs[1])) > 0.05


@jax_only
def test_reference_is_finite_forward_and_backward_on_fully_masked_rows():
    import jax
    import jax.numpy as jnp

    q, k, v, mask = make_inputs(2, 9, 11, 2, 4, mask_kind="full")
    mask[1] = False  # a whole example without a visible key
    out, grads = jax.value_and_grad(
        lambda *a: jnp.sum(da.reference_dropout_attention(*a, mask, 0.2, 5) ** 2),
        argnums=(0, 1, 2))(q, k, v)
    assert np.isfinite(float(out)) and all(np.isfinite(np.asarray(g)).all() for g in grads)
    values = np.asarray(da.reference_dropout_attention(q, k, v, mask, 0.2, 5))
    assert np.all(values[1] == 0) and np.all(values[0, 3] == 0)
    assert np.all(np.asarray(grads[0])[1] == 0)


@jax_only
def test_errors_say_what_was_expected():
    q, k, v, _ = make_inputs(2, 9, 11, 2, 4)
    with pytest.raises(ValueError, match=r"broadcast to \[B,1,T,S\]"):
        da.reference_dropout_attention(q, k, v, np.ones((2, 2, 9, 11), bool))
    with pytest.raises(ValueError, match="key and value"):
        da.reference_dropout_attention(q, k[:, :, :1], v, None)
    with pytest.raises(ValueError, match="head widths"):
        da.flash_dropout_attention(q, k, v, None, interpret=True)  # Dh 4
    with pytest.raises(ValueError, match="implementation"):
        da.dropout_attention(q, k, v, implementation="cudnn")
    with pytest.raises(ValueError, match="seed"):
        da.reference_dropout_attention(q, k, v, None, 0.1, np.zeros(3, np.uint32))


# ---------------------------------------------------------------------------
# The kernel in interpret mode (JAX).

SMALL_BLOCKS = da.BlockSizes(block_q=32, block_k=32, block_q_backward=32, block_k_backward=32)


def outputs_and_gradients(attention, q, k, v, mask, rate, seed):
    """(out, dq, dk, dv) of `attention` for a fixed random cotangent."""
    import jax
    import jax.numpy as jnp

    cotangent = np.random.default_rng(1).normal(size=q.shape).astype(np.float32)

    def run(q, k, v):
        out, vjp = jax.vjp(lambda q, k, v: attention(q, k, v, mask, rate, seed), q, k, v)
        return (out,) + vjp(jnp.asarray(cotangent, out.dtype))

    return [np.asarray(x, np.float32) for x in jax.jit(run)(q, k, v)]


def flash(block_sizes=SMALL_BLOCKS):
    return lambda *args: da.flash_dropout_attention(*args, block_sizes=block_sizes,
                                                    interpret=True)


# (B, T, S, N, Dh, dtype, rate, mask, blocks): T and S not multiples of the
# blocks; a sequence shorter than a block; bf16 at Dh 64.
KERNEL_CASES = {
    "f32-keys-tails": (2, 70, 90, 2, 32, "float32", 0.2, "keys", SMALL_BLOCKS),
    "bf16-full-fully-masked-rows": (2, 45, 50, 2, 64, "bfloat16", 0.1, "full", SMALL_BLOCKS),
    "f32-rate0-no-mask-short": (1, 33, 20, 2, 32, "float32", 0.0, None, SMALL_BLOCKS),
    "bf16-shared-mask-default-blocks": (1, 40, 72, 2, 32, "bfloat16", 0.3, "shared", None),
}


@jax_only
@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_kernel_equals_reference(case):
    """float32: within 2e-5 of the largest value (summation order); bf16:
    within 2 % of it, about five bf16 rounding steps (2⁻⁸ relative each):
    the kernel rounds the weights to bf16 before multiplying v, as
    FlashAttention does, where the reference keeps them in float32."""
    b, t, s, n, h, dtype, rate, mask_kind, blocks = KERNEL_CASES[case]
    q, k, v, mask = make_inputs(b, t, s, n, h, dtype, mask_kind, seed=len(case))
    seed = np.array([5, 9], np.uint32)
    got = outputs_and_gradients(flash(blocks or da.BlockSizes()), q, k, v, mask, rate, seed)
    want = outputs_and_gradients(da.reference_dropout_attention, q, k, v, mask, rate, seed)
    tolerance = 2e-5 if dtype == "float32" else 2e-2
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert np.isfinite(g).all(), name
        scale = np.max(np.abs(w))
        assert scale > 0, name
        np.testing.assert_allclose(g, w, atol=tolerance * scale, rtol=0, err_msg=name)
    if mask_kind == "full":  # fully masked rows give zeros
        assert np.all(got[0][0, 3] == 0) and np.all(got[1][0, 3] == 0)


@jax_only
def test_kernel_at_rate_zero_is_numpy_softmax_attention():
    q, k, v, mask = make_inputs(2, 37, 45, 2, 32, mask_kind="full", seed=4)
    out = np.asarray(flash()(q, k, v, mask, 0.0, 0))
    np.testing.assert_allclose(out, numpy_attention(q, k, v, mask, 1 / math.sqrt(32)),
                               atol=2e-5, rtol=1e-4)


@jax_only
@pytest.mark.jax_slow  # default-suite budget (tests/suite_budget.py)
def test_dispatch_and_seed_generator():
    import jax

    q, k, v, mask = make_inputs(1, 20, 24, 2, 16, mask_kind="keys", seed=5)
    generator = keras.random.SeedGenerator(42)
    seed = generator.next()
    flash_out = np.asarray(da.dropout_attention(q, k, v, mask, 0.2, seed,
                                                implementation="flash", interpret=True))
    reference = np.asarray(da.reference_dropout_attention(q, k, v, mask, 0.2, seed))
    np.testing.assert_allclose(flash_out, reference, atol=1e-5)
    chosen = np.asarray(da.dropout_attention(q, k, v, mask, 0.2, seed))
    if jax.default_backend() != "gpu":
        np.testing.assert_array_equal(chosen, reference)
    following = np.asarray(da.reference_dropout_attention(q, k, v, mask, 0.2, generator.next()))
    assert np.mean(np.abs(following - reference)) > 0.01


# ---------------------------------------------------------------------------
# In the layers: `layer_implementation` / `use_layer_implementation`.


@pytest.fixture
def implementation():
    """Sets `use_layer_implementation` for one test, restored after it."""
    previous = []

    def use(name):
        previous.append(da.use_layer_implementation(name))

    yield use
    if previous:
        da.use_layer_implementation(previous[0])


@jax_only
def test_this_jax_has_the_kernel_api():
    """The project's JAX has the Pallas Triton API the kernel is written
    against (on a GPU with a JAX that lacks it, the layers keep Keras')."""
    assert da.kernel_available()


def test_layer_implementation_is_keras_on_a_cpu_and_checked(implementation):
    if BACKEND != "jax" or __import__("jax").default_backend() != "gpu":
        assert da.layer_implementation(64) is None
    implementation("keras")
    assert da.layer_implementation(64) is None
    with pytest.raises(ValueError, match="flash.*received 'cuda'"):
        da.use_layer_implementation("cuda")


def _encoder_attention():
    from keras_hsum.layers.transformer_encoder import TransformerEncoder

    layer = TransformerEncoder(64, 2, dropout=0.1, attention_dropout=0.3)
    layer.build((2, 9, 32))  # heads of width 16
    return layer


@jax_only
@pytest.mark.parametrize("mode", ["reference", "interpret"])
def test_encoder_self_attention_drops_by_the_hash(implementation, mode):
    """keras_hsum's TransformerEncoder's self-attention in training equals
    the numpy transcription with the hash's mask for the seed its attention
    dropout's generator draws (the padding mask merged as Keras merges it),
    and advances that generator by one draw."""
    implementation(mode)
    layer = _encoder_attention()
    attention = layer._self_attention_layer
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 9, 32)).astype(np.float32)
    padding = np.ones((2, 9), bool)
    padding[1, 6:] = False
    generator = attention._dropout_layer.seed_generator
    seed = np.asarray(generator.state.value).astype(np.uint32)
    got = attention(x, x, attention_mask=padding[:, None, :] & padding[:, :, None],
                    training=True)
    assert not np.array_equal(np.asarray(generator.state.value).astype(np.uint32), seed)
    q = np.asarray(attention._query_dense(x))
    k = np.asarray(attention._key_dense(x))
    v = np.asarray(attention._value_dense(x))
    mask = (padding[:, None, :] & padding[:, :, None])[:, None]
    threshold = da.keep_threshold(0.3)
    kept = da.dropout_mask_bits(seed, 2, 2, 9, 9) < np.uint32(threshold)
    context = numpy_attention(q, k, v, mask, 1 / math.sqrt(16), kept, threshold / da.VALUES)
    want = np.asarray(attention._output_dense(context.astype(np.float32)))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)


@jax_only
@pytest.mark.jax_slow  # default-suite budget (tests/suite_budget.py)
def test_encoder_train_step_takes_the_kernel_gradients(implementation):
    """A whole layer's loss and gradients: the kernel (interpret mode) and
    the reference give the same mask, so the same numbers."""
    import jax

    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 9, 32)).astype(np.float32)
    padding = np.ones((2, 9), bool)
    padding[0, 5:] = False
    results = []
    layer = _encoder_attention()
    variables = [v.value for v in layer.trainable_variables]
    seed_state = [v.value for v in layer.non_trainable_variables]
    for mode in ("reference", "interpret"):
        implementation(mode)

        def loss(trainable, x=x, layer=layer, seed_state=seed_state):
            out, _ = layer.stateless_call(trainable, seed_state, x, padding_mask=padding,
                                          training=True)
            return (out.astype("float32") ** 2).sum()

        value, grads = jax.value_and_grad(loss)(variables)
        results.append((float(value), [np.asarray(g) for g in grads]))
    assert abs(results[0][0] - results[1][0]) <= 1e-5 * abs(results[0][0])
    for g, w in zip(results[1][1], results[0][1]):
        np.testing.assert_allclose(g, w, atol=1e-4 * max(1.0, np.abs(w).max()))


@jax_only
@pytest.mark.jax_slow  # default-suite budget (tests/suite_budget.py)
def test_parallel_cross_attention_word_level_dropout_by_the_hash(implementation):
    """PHT's word-level attention with dropout as one B·P-batched attention
    equals the explicit [B,H,S,P,T] path with the same hash mask applied to
    its weights (a fully padded paragraph included)."""
    from keras_hsum.layers.parallel_cross_attention import ParallelCrossAttention

    implementation("reference")
    b, s, p, t, d, heads = 2, 5, 3, 7, 16, 2
    layer = ParallelCrossAttention(d, heads, dropout=0.1, attention_dropout=0.25)
    rng = np.random.default_rng(6)
    query = rng.normal(size=(b, s, d)).astype(np.float32)
    words = rng.normal(size=(b, p, t, d)).astype(np.float32)
    paragraphs = rng.normal(size=(b, p, d)).astype(np.float32)
    tokens = np.ones((b, p, t), bool)
    tokens[0, 1, 4:] = False
    tokens[1, 2] = False  # a paragraph without tokens
    layer(query, words, paragraphs, token_mask=tokens)  # build
    memory = layer.project_memory(words, paragraphs)
    generator = layer.attention_weights_dropout.seed_generator
    state = generator.state.value
    captured = {}
    original = layer._fused_word_context

    def capture(*args):
        captured["seed"] = np.asarray(generator.state.value).astype(np.uint32)
        captured["out"] = np.asarray(original(*args))
        captured["args"] = args
        return captured["out"]

    layer._fused_word_context = capture
    layer(query, words, paragraphs, token_mask=tokens, training=True)
    del layer._fused_word_context
    generator.state.assign(state)
    query_w, key, value, word_mask, fusion, scale, _, mode = captured["args"]
    assert mode == "reference"
    threshold = da.keep_threshold(0.25)
    kept = da.dropout_mask_bits(captured["seed"], b * p, heads, s, t) < np.uint32(threshold)
    kept = kept.reshape(b, p, heads, s, t).transpose(0, 2, 3, 1, 4)  # [B,H,S,P,T]
    explicit_dropout = layer.attention_weights_dropout
    layer.attention_weights_dropout = lambda w, training=None: (
        w * kept / (threshold / da.VALUES))
    try:
        want = layer._explicit_word_context(query_w, key, value, word_mask, fusion, scale,
                                            True)
    finally:
        layer.attention_weights_dropout = explicit_dropout
    np.testing.assert_allclose(captured["out"], np.asarray(want), atol=1e-5)
    assert np.abs(captured["out"]).max() > 0
