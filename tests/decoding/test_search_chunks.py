"""`search` on the accelerator's terms (issue 57): the candidates by a
two-stage top-k and the stop checked every N positions (or never) return
what the search of 1c4cd50 returned (`reference_search`: one top-k over
K·V', the stop checked after every position): ids equal, scores to 1e-5.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding import AttentionAlignment
from keras_hsum.decoding import CoveragePenalty
from keras_hsum.decoding import LengthNormalization
from keras_hsum.decoding import MinLength
from keras_hsum.decoding import NgramBlocking
from keras_hsum.decoding import beam_search
from keras_hsum.decoding import greedy_search
from keras_hsum.decoding import sample_search
from keras_hsum.decoding import search
from keras_hsum.decoding.beam_search import top_candidates
from keras_hsum.decoding.terms import NEG_INF
from probability_table import EOS, initial_state, random_table, table_step_fn
from reference_search import reference_search

CHECKS = (1, 3, 8, None)  # stop_check_every: every position, 3, 8, never


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


@pytest.mark.parametrize("beams,vocabulary,count", [
    (1, 7, 1), (1, 7, 2), (3, 7, 3), (3, 7, 6), (2, 12, 4), (5, 16, 10),
    (4, 3, 8),  # V' <= C: one top-k over K·V'
])
def test_top_candidates_is_the_flat_top_k_with_ties(beams, vocabulary, count):
    """Scores drawn from five values (ties within and across beams) and
    `NEG_INF`: the candidates, their order, parents and tokens are those of
    a stable descending sort of the flattened [B, K·V'] (lower flat index
    first among equals)."""
    rng = np.random.default_rng(beams * 100 + vocabulary)
    totals = rng.choice(np.array([-1.0, -2.0, -2.5, -4.0, NEG_INF], "float32"),
                        size=(6, beams, vocabulary))
    totals[0] = -2.0  # every candidate tied
    values, parents, tokens = map(numpy, top_candidates(ops.convert_to_tensor(totals), count))
    flat = totals.reshape(6, -1)
    order = np.argsort(-flat, axis=1, kind="stable")[:, :count]
    np.testing.assert_array_equal(values, np.take_along_axis(flat, order, 1))
    np.testing.assert_array_equal(parents, order // vocabulary)
    np.testing.assert_array_equal(tokens, order % vocabulary)
    assert parents.dtype == tokens.dtype == np.int32


def _tied_table(seed, length, vocabulary):
    """log-probs [L,V,V,V] from integer logits that depend on the position
    only: beams whose tokens had equal probabilities tie exactly."""
    rng = np.random.default_rng(seed)
    logits = rng.integers(-2, 1, size=(length, 1, 1, vocabulary)).astype("float32")
    logits[..., 0] = -1e4
    logits = np.broadcast_to(logits, (length, vocabulary, vocabulary, vocabulary))
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype("float32")


def _term_mixes(paragraphs):
    eta = np.array([[0.5, 0.3, 0.2]], "float32")
    return [
        [],
        [LengthNormalization()],
        [LengthNormalization(0.6), NgramBlocking(2)],
        [LengthNormalization(-1.0)],  # a penalty that shrinks with |y|
        [LengthNormalization(), AttentionAlignment(eta, beta=0.8), MinLength(2)],
        [LengthNormalization(), CoveragePenalty(paragraphs, beta=-1.0)],  # no bound
    ]


def _compare(table, attention, beams, length, terms, greedy, checks=CHECKS):
    """Asserts every N of `checks` returns the reference's result; returns
    the position the reference stopped at."""
    step_fn = table_step_fn(table, attention)
    expected, stop = reference_search(step_fn, initial_state(1, beams), 1, beam_size=beams,
                                      max_length=length, bos_id=0, eos_id=EOS, terms=terms,
                                      greedy=greedy)
    for every in checks:
        out = search(step_fn, initial_state(1, beams), 1, beam_size=beams, max_length=length,
                     bos_id=0, eos_id=EOS, pad_id=0, terms=terms, greedy=greedy,
                     stop_check_every=every)
        for key in ("sequences", "lengths"):
            np.testing.assert_array_equal(numpy(out[key]), expected[key],
                                          err_msg=f"stop_check_every={every}: {key}")
        for key in ("scores", "log_probs"):
            np.testing.assert_allclose(numpy(out[key]), expected[key], rtol=1e-5, atol=1e-5,
                                       err_msg=f"stop_check_every={every}: {key}")
    return stop


@pytest.mark.jax_slow  # 50-90 s each under JAX on a loaded 2-core machine
@pytest.mark.parametrize("mix", range(6))
def test_chunked_search_returns_the_reference_search(mix):
    """Random and tied tables, K = 1 (greedy and beam), 2, 3; L = 8, so that
    N = 3 and N = 8 run past position L - 1 in their last chunk."""
    length, vocabulary, paragraphs = 8, 6, 3
    rng = np.random.default_rng(mix)
    for trial, (beams, greedy, tied) in enumerate(
            [(2, False, False), (1, True, True), (3, False, True)]):
        if tied:
            table = _tied_table(10 * mix + trial, length, vocabulary)
        else:
            table = random_table(10 * mix + trial, length, vocabulary, peak=1.0)
            table[..., EOS] += rng.uniform(-1, 2)
        attention = rng.uniform(size=(vocabulary, paragraphs)).astype("float32")
        _compare(table, attention, beams, length, _term_mixes(paragraphs)[mix], greedy)


@pytest.mark.jax_slow  # 155 s under JAX on a loaded 2-core machine (each search compiles)
def test_the_stop_mid_chunk_changes_nothing():
    """Tables whose EOS grows likelier, so the search stops early: the
    reference's stopping positions include ones inside a chunk of 3 and of 8
    (the chunked search then runs up to N - 1 positions more) and ones
    before L, and every N returns the reference's result."""
    length, vocabulary = 11, 7
    stops = []
    for seed in range(8):
        table = random_table(100 + seed, length, vocabulary, peak=0.5)
        table[..., EOS] += np.linspace(-2.0, 3.0, length)[:, None, None]
        beams = 1 + seed % 3
        terms = [LengthNormalization(0.6)] if seed % 2 else []
        stops.append(_compare(table, None, beams, length, terms, greedy=False))
    stops = np.array(stops)
    for every in (3, 8):
        assert ((stops < length) & ((stops - 1) % every != 0)).any(), (every, stops)


def _flat_model():
    from keras_hsum.models import FlatTransformer

    keras.utils.set_random_seed(3)
    model = FlatTransformer(vocabulary_size=40, hidden_dim=16, num_heads=2, intermediate_dim=32,
                            num_encoder_layers=1, num_decoder_layers=2, dropout=0.0)
    rng = np.random.default_rng(3)
    tokens = rng.integers(4, 40, (2, 9)).astype("int32")
    tokens[1, 5:] = 0
    inputs = {"tokens": tokens, "token_mask": tokens != 0}
    model(dict(inputs, decoder_tokens=np.full((2, 3), 2, "int32")))
    return model, inputs


@pytest.mark.slow  # 168 s under JAX on a loaded 2-core machine, minutes under TF
def test_a_cached_model_decodes_as_the_reference_for_every_n():
    """A FlatTransformer (its self-attention cache written at each position)
    with an EOS bias growing with the position: L = 11 is no multiple of 3 or
    8, the last chunk runs past L - 1 (position L - 1 again, the cache
    written there again), and the search returns the reference's beams."""
    model, inputs = _flat_model()
    K, L = 3, 11
    memory = model.encode(inputs)
    tiled = keras.tree.map_structure(lambda x: ops.repeat(x, K, axis=0), memory)
    static, state = model.initial_cache(tiled, L)

    def step_fn(ids, index, state):
        logits, (_, state), aux = model.step(ids, index, (static, state))
        bonus = ops.cast(index, "float32") * 0.6
        return logits + ops.one_hot(model.eos_id, ops.shape(logits)[-1]) * bonus, state, aux

    terms = [LengthNormalization(0.6), NgramBlocking(2)]
    expected, stop = reference_search(step_fn, state, 2, beam_size=K, max_length=L,
                                      bos_id=model.bos_id, eos_id=model.eos_id, terms=terms)
    assert stop < L  # it stops early
    for every in CHECKS:
        out = search(step_fn, state, 2, beam_size=K, max_length=L, bos_id=model.bos_id,
                     eos_id=model.eos_id, pad_id=0, terms=terms, stop_check_every=every)
        np.testing.assert_array_equal(numpy(out["sequences"]), expected["sequences"])
        np.testing.assert_array_equal(numpy(out["lengths"]), expected["lengths"])
        np.testing.assert_allclose(numpy(out["scores"]), expected["scores"], atol=1e-5)
        np.testing.assert_allclose(numpy(out["log_probs"]), expected["log_probs"], atol=1e-5)


@pytest.mark.slow  # 237 s under JAX on a loaded 2-core machine, minutes under TF
def test_model_searches_and_sampling_do_not_depend_on_n():
    """`beam_search`, `greedy_search` and `sample_search` (which runs until
    every sample has ended) return the same for every N, aux included."""
    model, inputs = _flat_model()
    runs = {
        "beam": lambda every: beam_search(model, inputs, beam_size=3, max_length=7,
                                          terms=[LengthNormalization()],
                                          stop_check_every=every),
        "greedy": lambda every: greedy_search(model, inputs, max_length=7,
                                              stop_check_every=every),
        "sample": lambda every: sample_search(model, inputs, num_samples=3, max_length=7,
                                              seed=5, stop_check_every=every),
    }
    for name, run in runs.items():
        expected = run(1)
        for every in CHECKS[1:]:
            out = run(every)
            for key in ("sequences", "lengths"):
                np.testing.assert_array_equal(numpy(out[key]), numpy(expected[key]),
                                              err_msg=f"{name}, N={every}: {key}")
            for key in ("scores", "log_probs"):
                np.testing.assert_allclose(numpy(out[key]), numpy(expected[key]), atol=1e-5,
                                           err_msg=f"{name}, N={every}: {key}")
            assert sorted(out["aux"]) == sorted(expected["aux"])
            for key in expected["aux"]:
                np.testing.assert_allclose(numpy(out["aux"][key]), numpy(expected["aux"][key]),
                                           atol=1e-6, err_msg=f"{name}, N={every}: {key}")


def test_the_stop_check_period_is_checked():
    model, inputs = _flat_model()
    for bad in (0, -2, 2.5, True, "8"):
        for function, caller in ((beam_search, "beam_search"), (greedy_search, "greedy_search"),
                                 (sample_search, "sample_search")):
            with pytest.raises(ValueError, match=(
                    rf"{caller}: `stop_check_every` must be None or an int >= 1 \(None: never "
                    rf"stop early, a static trip count\), received {bad!r}")):
                function(model, inputs, max_length=3, stop_check_every=bad)
        with pytest.raises(ValueError, match=r"search: `stop_check_every` must be None or an"):
            search(table_step_fn(random_table(0, 3, 5)), initial_state(1, 1), 1, beam_size=1,
                   max_length=3, bos_id=0, eos_id=EOS, stop_check_every=bad)
