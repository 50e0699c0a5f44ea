"""Ancestral sampling (`keras_hsum.decoding.sampling`, `search(sampling=)`).

References: a numpy transcription of the tempered, truncated distribution
(temperature, then top-k, top-p and epsilon, each written as a loop over
the ids in order of probability) and of inverse transform sampling
(`np.searchsorted`); the empirical frequencies of many samples against the
table's exact sequence probabilities; the table's own log P(y) of every
sample; and properties (top-k = 1 is greedy decoding, blocked ids are never
drawn, a seed reproduces its samples).
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding import LengthNormalization
from keras_hsum.decoding import NgramBlocking
from keras_hsum.decoding import Sampling
from keras_hsum.decoding import greedy_search
from keras_hsum.decoding import mbr_rerank
from keras_hsum.decoding import sample_search
from keras_hsum.decoding import search
from keras_hsum.decoding.sampling import hashed_uniforms
from keras_hsum.decoding.terms import NEG_INF
from probability_table import EOS, initial_state, random_table
from probability_table import sequence_log_prob, table_step_fn


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def reference_distribution(log_probs, temperature=1.0, top_k=0, top_p=1.0, epsilon=0.0):
    """numpy [V] → the sampling distribution [V] (float64): Hugging Face's
    logits warpers in their order (temperature, top-k, top-p, epsilon), each
    reading the renormalised distribution the ones before it left."""
    allowed = log_probs > NEG_INF / 2
    p = np.zeros(len(log_probs))
    z = np.where(allowed, log_probs.astype("float64") / temperature, -np.inf)
    p[allowed] = np.exp(z[allowed] - z[allowed].max())
    p /= p.sum()

    def renormalised(keep):
        q = np.where(keep, p, 0.0)
        return q / q.sum()

    keep = allowed.copy()
    if top_k:
        order = sorted(np.flatnonzero(keep), key=lambda v: -p[v])
        kth = p[order[min(top_k, len(order)) - 1]]
        keep &= p >= kth
        p = renormalised(keep)
    if top_p < 1:
        order = sorted(np.flatnonzero(keep), key=lambda v: -p[v])
        nucleus, mass = [], 0.0
        for v in order:
            if mass >= top_p:
                break
            nucleus.append(v)
            mass += p[v]
        keep &= p >= min(p[v] for v in nucleus)
        p = renormalised(keep)
    if epsilon:
        keep &= (p >= epsilon) | (p == p.max())
    return renormalised(keep)


SETTINGS = [
    {},
    {"temperature": 0.5},
    {"temperature": 2.0, "top_k": 3},
    {"top_p": 0.6},
    {"epsilon": 0.08},
    {"temperature": 0.8, "top_k": 5, "top_p": 0.9, "epsilon": 0.02},
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_truncated_distribution_matches_numpy(settings):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 3, 11)) * 2.0
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    log_probs[0, 0, [1, 4, 5]] = NEG_INF  # blocked by a term
    log_probs[1, 2, :-1] = NEG_INF  # one id left
    got = np.exp(numpy(Sampling(**settings).truncate(log_probs.astype("float32"))))
    for index in np.ndindex(log_probs.shape[:-1]):
        np.testing.assert_allclose(
            got[index], reference_distribution(log_probs[index], **settings), atol=2e-6
        )


def test_the_top_k_filter_in_blocks_keeps_the_ids_of_one_top_k(monkeypatch):
    """Where a GPU is visible the top-k filter takes its k-th value from
    blocks (`keras_hsum.decoding.top_k.blocked_top_k`): rows of V = 2,000 in
    blocks of 64 (the last padded), with ties at the 50th value, keep the
    ids of the numpy reference and exactly what one top-k keeps, ties
    included."""
    import importlib

    top_k_module = importlib.import_module("keras_hsum.decoding.top_k")
    rng = np.random.default_rng(3)
    logits = rng.integers(0, 40, (3, 2000)).astype("float32") / 5.0  # many ties
    log_probs = (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype("float32")
    sampling = Sampling(top_k=50, temperature=0.9)
    shapes = []
    original = ops.top_k

    def recording(x, k, *args, **kwargs):
        shapes.append(tuple(x.shape))
        return original(x, k, *args, **kwargs)

    monkeypatch.setattr(ops, "top_k", recording)
    monkeypatch.setattr(top_k_module, "_gpu_visible", lambda: False)  # as on a CPU
    one = numpy(sampling.truncate(log_probs))
    assert shapes == [(3, 2000)]
    monkeypatch.setattr(top_k_module, "TOP_K_BLOCK", 64)
    monkeypatch.setattr(top_k_module, "_gpu_visible", lambda: True)  # as on a GPU
    blocked = numpy(sampling.truncate(log_probs))
    assert shapes[1:] == [(3, 32, 64), (3, 32 * 50)]  # the blocks, then their best 50
    np.testing.assert_array_equal(blocked, one)
    kept = blocked > NEG_INF / 2
    for row in range(3):
        reference = reference_distribution(log_probs[row], temperature=0.9, top_k=50)
        np.testing.assert_array_equal(kept[row], reference > 0)
    assert (kept.sum(-1) >= 50).all() and (kept.sum(-1) > 50).any()  # ties at the 50th stay


@pytest.mark.parametrize("settings, expected", [
    ({"top_k": 2, "top_p": 0.55}, [1.0, 0.0, 0.0]),  # 0.625 of the top-2 mass >= 0.55
    ({"top_k": 2, "epsilon": 0.35}, [0.625, 0.375, 0.0]),  # 0.3 / 0.8 >= 0.35
    ({"top_p": 0.75, "epsilon": 0.35}, [0.625, 0.375, 0.0]),  # top-p keeps 2; 0.375 >= 0.35
])
def test_each_filter_reads_what_the_filters_before_it_left(settings, expected):
    """Hugging Face's order: top-p counts the mass of the top-k tokens only,
    and epsilon reads the distribution renormalised after top-k and top-p."""
    probs = np.array([0.5, 0.3, 0.2])
    got = np.exp(numpy(Sampling(**settings).truncate(np.log(probs).astype("float32"))))
    np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("top_p, kept", [(0.5, 1), (0.75, 2), (0.8, 3), (0.9, 5)])
def test_the_nucleus_is_the_smallest_set_reaching_p(top_p, kept):
    """Dyadic probabilities (exact in float32): the nucleus stops as soon as
    its mass reaches p (Holtzman et al. 2020), so 0.5 keeps one id, not two;
    at 0.9 the fourth id enters and the fifth, tied with it, stays too."""
    probs = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625])
    got = np.exp(numpy(Sampling(top_p=top_p).truncate(np.log(probs).astype("float32"))))
    expected = np.where(np.arange(5) < kept, probs, 0.0)
    np.testing.assert_allclose(got, expected / expected.sum(), atol=1e-7)


@pytest.mark.parametrize("settings", SETTINGS)
def test_draw_is_inverse_transform_sampling(settings):
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(5, 7, 9))
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    log_probs[2, :, :4] = NEG_INF
    uniforms = rng.uniform(1e-7, 1.0, size=(5, 7))
    got = numpy(Sampling(**settings).draw(log_probs.astype("float32"),
                                          uniforms.astype("float32")))
    for index in np.ndindex(uniforms.shape):
        q = reference_distribution(log_probs[index], **settings)
        cdf = np.cumsum(q)
        expected = min(int(np.searchsorted(cdf, uniforms[index] * cdf[-1])), len(q) - 1)
        # float32 against float64 cumulative sums: only a draw within
        # 1e-5 of a boundary may differ, and then by one id.
        if abs(uniforms[index] * cdf[-1] - cdf[min(expected, len(q) - 1)]) > 1e-5 and (
                expected == 0 or abs(uniforms[index] * cdf[-1] - cdf[expected - 1]) > 1e-5):
            assert got[index] == expected, index
        assert q[got[index]] > 0  # never a blocked or truncated id


def _fmix32(x):
    x = x.astype(np.uint64)
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    return x ^ (x >> 16)


@pytest.mark.parametrize("seed", [0, 7, -3, 2**40 + 5])
def test_hashed_uniforms_match_a_numpy_transcription_and_are_uniform(seed):
    u = numpy(hashed_uniforms((5, 40, 50), seed))
    index = np.arange(u.size, dtype=np.uint64)
    key = _fmix32(np.array([(seed + 0x9E3779B9) & 0xFFFFFFFF], np.uint64))
    bits = _fmix32(((index * 0x9E3779B9) & 0xFFFFFFFF) ^ key)
    np.testing.assert_array_equal(u.ravel(), ((bits >> 9) + 0.5) / 2.0 ** 23)
    assert ((u > 0) & (u < 1)).all()
    # 10,000 draws: each of 20 bins within 5 standard errors of 500, and
    # neighbours uncorrelated (a weak generator would fail one of them).
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    assert (np.abs(counts - 500) < 5 * np.sqrt(500 * 0.95)).all(), counts
    flat = u.ravel()
    assert abs(np.corrcoef(flat[:-1], flat[1:])[0, 1]) < 0.05
    assert not np.array_equal(u, numpy(hashed_uniforms((5, 40, 50), seed + 1)))


@pytest.mark.parametrize("stream", [0, 1, 12345, 2**31 - 1])
def test_streams_of_the_uniforms_match_a_numpy_transcription(stream):
    u = numpy(hashed_uniforms((3, 50), 11, ops.convert_to_tensor(stream, "int64")))
    index = np.arange(u.size, dtype=np.uint64)
    key = _fmix32(np.array([(11 + 0x9E3779B9) & 0xFFFFFFFF], np.uint64))
    mixed = _fmix32(np.array([((stream * 0x9E3779B9) & 0xFFFFFFFF) ^ 0x85EBCA77], np.uint64))
    key = _fmix32(key ^ mixed)
    bits = _fmix32(((index * 0x9E3779B9) & 0xFFFFFFFF) ^ key)
    np.testing.assert_array_equal(u.ravel(), ((bits >> 9) + 0.5) / 2.0 ** 23)
    assert not np.array_equal(u, numpy(hashed_uniforms((3, 50), 11)))
    assert not np.array_equal(u, numpy(hashed_uniforms((3, 50), 11, stream + 1)))


@pytest.mark.parametrize("first_row", [0, 1, 3])
def test_first_row_gives_those_rows_of_the_larger_buffer(first_row):
    """A replica's slice of a global batch draws what one device draws for
    those rows (with and without a stream; `first_row` may be a tensor)."""
    for stream in (None, 7):
        whole = numpy(hashed_uniforms((6, 4, 5), 3, stream))
        part = numpy(hashed_uniforms(
            (2, 4, 5), 3, stream, ops.convert_to_tensor(first_row, "int32")))
        np.testing.assert_array_equal(part, whole[first_row:first_row + 2])
    np.testing.assert_array_equal(numpy(hashed_uniforms((2, 4, 5), 3, None, 0)),
                                  numpy(hashed_uniforms((2, 4, 5), 3)))


def test_blocked_and_truncated_ids_are_never_drawn():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(64, 50)) * 3.0
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    log_probs[:, ::3] = NEG_INF
    # The extreme uniforms of the generator included: 2^-24 and 1 - 2^-24.
    uniforms = np.concatenate([np.full(4, 2.0 ** -24), np.full(4, 1 - 2.0 ** -24),
                               rng.uniform(size=56)])
    sampling = Sampling(top_p=0.5)
    drawn = numpy(sampling.draw(log_probs.astype("float32"), uniforms.astype("float32")))
    allowed = np.exp(numpy(sampling.truncate(log_probs.astype("float32")))) > 0
    assert allowed[np.arange(64), drawn].all()
    assert (drawn % 3 != 0).all()


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_sample_frequencies_follow_the_sequence_probabilities():
    """4,000 samples of 2 tokens: their joint frequencies match the table's
    P(y1, y2) within 4.5 standard errors (this needs the search to carry each
    sample's state along when it reorders the alive pool)."""
    V, L, N = 4, 2, 4000
    table = random_table(5, L, V)
    out = search(table_step_fn(table), initial_state(1, N), 1, beam_size=N, max_length=L,
                 bos_id=0, eos_id=EOS, pad_id=0, sampling=Sampling(seed=3))
    sequences, lengths = numpy(out["sequences"])[0], numpy(out["lengths"])[0]
    assert (numpy(out["scores"])[0] > NEG_INF / 2).all()  # every sample finished
    counts = {}
    for row, n in zip(sequences, lengths):
        key = tuple(int(t) for t in row[:n])
        counts[key] = counts.get(key, 0) + 1
    outcomes = [(EOS,)] + [(a, b) for a in range(2, V) for b in range(1, V)]
    probabilities = [np.exp(sequence_log_prob(table, y)) for y in outcomes]
    np.testing.assert_allclose(sum(probabilities), 1.0, atol=1e-5)  # the whole space
    assert set(counts) <= set(outcomes)
    for y, p in zip(outcomes, probabilities):
        error = np.sqrt(p * (1 - p) / N)
        assert abs(counts.get(y, 0) / N - p) < 4.5 * error + 1e-9, (y, counts.get(y, 0) / N, p)


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_samples_carry_their_model_log_probability_and_rank_by_score():
    V, L, K = 6, 5, 12
    table = random_table(7, L, V)
    out = search(table_step_fn(table), initial_state(2, K), 2, beam_size=K, max_length=L,
                 bos_id=0, eos_id=EOS, pad_id=0, terms=[LengthNormalization()],
                 sampling=Sampling(temperature=1.5, top_k=3, seed=11))
    sequences, lengths = numpy(out["sequences"]), numpy(out["lengths"])
    log_probs, scores = numpy(out["log_probs"]), numpy(out["scores"])
    for b in range(2):
        for k in range(K):
            tokens = tuple(int(t) for t in sequences[b, k, :lengths[b, k]])
            assert (sequences[b, k, lengths[b, k]:] == 0).all()
            assert EOS not in tokens[:-1] and (tokens[-1] == EOS or len(tokens) == L)
            # The untempered model's log-probability, not the sampler's.
            np.testing.assert_allclose(log_probs[b, k], sequence_log_prob(table, tokens),
                                       rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(scores[b, k], log_probs[b, k] / len(tokens),
                                       rtol=1e-5, atol=1e-5)
        assert (np.diff(scores[b]) <= 1e-6).all()  # best first
    # A sampler that could only draw the table's argmax would return K copies
    # of one sequence; these differ.
    assert len({tuple(r) for r in sequences[0]}) > 1


@pytest.mark.jax_slow  # 22 s under JAX (compiles whole searches): the slow set's JAX pass
@pytest.mark.parametrize("settings", [{"top_k": 1}, {"epsilon": 0.999}, {"temperature": 1e-3}])
def test_samples_restricted_to_the_best_token_are_greedy_decoding(settings):
    """top-k = 1 (or an epsilon or temperature that leaves only the argmax):
    every sample is the greedy path, blocking terms included."""
    V, L, K = 7, 6, 4
    table = random_table(9, L, V, peak=1.0)
    greedy = search(table_step_fn(table), initial_state(3, 1), 3, beam_size=1, max_length=L,
                    bos_id=0, eos_id=EOS, pad_id=0, terms=[NgramBlocking(2)], greedy=True)
    out = search(table_step_fn(table), initial_state(3, K), 3, beam_size=K, max_length=L,
                 bos_id=0, eos_id=EOS, pad_id=0, terms=[NgramBlocking(2)],
                 sampling=Sampling(seed=4, **settings))
    expected = np.repeat(numpy(greedy["sequences"]), K, axis=1)
    np.testing.assert_array_equal(numpy(out["sequences"]), expected)


@pytest.mark.jax_slow  # default-suite budget (docs/testing.md): the TF pass runs it, the slow set's JAX pass too
def test_a_seed_reproduces_its_samples_and_another_seed_differs():
    V, L, K = 8, 6, 6
    table = random_table(2, L, V)

    def run(seed):
        out = search(table_step_fn(table), initial_state(2, K), 2, beam_size=K,
                     max_length=L, bos_id=0, eos_id=EOS, pad_id=0,
                     sampling=Sampling(seed=seed))
        return numpy(out["sequences"])

    np.testing.assert_array_equal(run(1), run(1))
    assert not np.array_equal(run(1), run(2))


def test_settings_are_checked_with_what_was_received():
    for settings, message in [
        ({"temperature": 0.0}, "temperature > 0 \\(received 0.0\\)"),
        ({"top_k": -1}, "top_k an integer >= 0"),
        ({"top_p": 1.5}, "top_p in \\(0, 1\\] \\(received 1.5\\)"),
        ({"epsilon": 1.0}, "epsilon in \\[0, 1\\)"),
        ({"seed": 0.5}, "an integer seed"),
    ]:
        with pytest.raises(ValueError, match=message):
            Sampling(**settings)
    table = random_table(0, 3, 4)
    with pytest.raises(ValueError, match="exclude each other"):
        search(table_step_fn(table), initial_state(1, 1), 1, beam_size=1, max_length=3,
               bos_id=0, eos_id=EOS, pad_id=0, greedy=True, sampling=Sampling())


def _flat(seed=0):
    """A small flat transformer with a copy mechanism, built by one
    teacher-forced call (as after training)."""
    from keras_hsum.models import FlatTransformer

    keras.utils.set_random_seed(seed)
    model = FlatTransformer(vocabulary_size=29, hidden_dim=16, num_heads=2,
                            intermediate_dim=32, num_encoder_layers=1,
                            num_decoder_layers=1, dropout=0.0, pointer_generator=True)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, 29, size=(2, 12)).astype("int32")
    tokens[1, 9:] = 0
    inputs = {"tokens": tokens, "token_mask": tokens != 0}
    model(dict(inputs, decoder_tokens=np.full((2, 3), 2, "int32")))
    return model, inputs


@pytest.mark.jax_slow  # 30 s under JAX (compiles whole searches): the slow set's JAX pass
def test_sample_search_draws_from_a_summarizer_and_mbr_picks_a_sample():
    model, inputs = _flat()
    out = sample_search(model, inputs, num_samples=6, max_length=8, epsilon=0.02,
                        min_length=2, seed=5)
    sequences, lengths = numpy(out["sequences"]), numpy(out["lengths"])
    assert sequences.shape == (2, 6, 8) and (lengths >= 2).all()
    assert ((sequences[:, :, :2] != model.eos_id)).all()  # min_length held
    greedy = numpy(greedy_search(model, inputs, max_length=8, min_length=2)["sequences"])
    assert not all(np.array_equal(row, greedy[b, 0])
                   for b in range(2) for row in sequences[b])
    reranked = mbr_rerank(out, eos_id=model.eos_id, pad_id=model.pad_id)
    for b in range(2):
        chosen = numpy(reranked["sequences"])[b, 0]
        assert any(np.array_equal(chosen, row) for row in sequences[b])


@pytest.mark.tensorflow_only
def test_sampling_compiles_under_tf_xla_with_the_same_draws():
    import tensorflow as tf

    model, inputs = _flat(1)
    decode = lambda inputs: sample_search(model, inputs, num_samples=4, max_length=8,
                                          top_p=0.9, seed=3)
    eager = decode(inputs)
    compiled = tf.function(decode, jit_compile=True)(
        {k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_array_equal(numpy(compiled["sequences"]), numpy(eager["sequences"]))


def test_sampling_compiles_under_jax_jit_with_the_same_draws():
    if keras.backend.backend() != "jax":
        pytest.skip("the JAX pass runs this")
    import jax

    model, inputs = _flat(1)
    decode = lambda inputs: sample_search(model, inputs, num_samples=4, max_length=8,
                                          top_p=0.9, seed=3)
    np.testing.assert_array_equal(numpy(jax.jit(decode)(inputs)["sequences"]),
                                  numpy(decode(inputs)["sequences"]))
