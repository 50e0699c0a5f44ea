"""An exhaustive beam equals brute-force enumeration of all hypotheses.

V = 5 (pad, EOS, three words), L = 4: 121 finished hypotheses. With K = 27
(every 3-word prefix fits in the alive pool) beam search is exhaustive, so
its K outputs must be exactly the K best of the enumeration, with and
without length normalisation, early termination on.
"""

import re

import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding import AttentionAlignment
from keras_hsum.decoding import CoveragePenalty
from keras_hsum.decoding import LengthNormalization
from keras_hsum.decoding import MaxLength
from keras_hsum.decoding import MinLength
from keras_hsum.decoding import NgramBlocking
from keras_hsum.decoding import StructuralCoverage
from keras_hsum.decoding import search
from keras_hsum.decoding.terms import ScoreTerm
from probability_table import EOS, all_hypotheses, initial_state, random_table
from probability_table import sequence_log_prob, table_step_fn

V, L, K = 5, 4, 27


def brute_force(table, penalty):
    scored = []
    for tokens in all_hypotheses(V, L):
        log_prob = sequence_log_prob(table, tokens)
        scored.append((log_prob / penalty(len(tokens)), log_prob, tokens))
    scored.sort(key=lambda item: -item[0])
    return scored[:K]


@pytest.mark.parametrize("alpha", ["none", "length", 0.6])
@pytest.mark.parametrize("seed", [0, 1])
def test_exhaustive_beam_is_brute_force(seed, alpha):
    table = random_table(seed, L, V)
    if alpha == "none":
        terms, penalty = [], lambda n: 1.0
    elif alpha == "length":
        terms, penalty = [LengthNormalization()], lambda n: float(n)
    else:
        terms, penalty = [LengthNormalization(alpha)], lambda n: ((5.0 + n) / 6.0) ** alpha
    out = search(table_step_fn(table), initial_state(1, K), 1, beam_size=K, max_length=L,
                 bos_id=0, eos_id=EOS, pad_id=0, terms=terms)
    expected = brute_force(table, penalty)
    sequences = ops.convert_to_numpy(out["sequences"])[0]
    got = [tuple(int(t) for t in row[: int(n)]) for row, n in
           zip(sequences, ops.convert_to_numpy(out["lengths"])[0])]
    assert got == [tokens for _, _, tokens in expected]
    np.testing.assert_allclose(ops.convert_to_numpy(out["scores"])[0],
                               [s for s, _, _ in expected], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(out["log_probs"])[0],
                               [lp for _, lp, _ in expected], rtol=1e-5, atol=1e-5)
    # pad after the end
    for row, n in zip(sequences, ops.convert_to_numpy(out["lengths"])[0]):
        assert (row[int(n):] == 0).all()


def test_small_beam_top_hypothesis_is_never_better_than_brute_force():
    table = random_table(3, L, V)
    best = brute_force(table, lambda n: float(n))[0]
    out = search(table_step_fn(table), initial_state(1, 2), 1, beam_size=2, max_length=L,
                 bos_id=0, eos_id=EOS, pad_id=0, terms=[LengthNormalization()])
    assert float(ops.convert_to_numpy(out["scores"])[0, 0]) <= best[0] + 1e-6


class _NoBound(ScoreTerm):
    """A term without a score bound: the search then runs to max_length."""

    def score_bound(self, batch_size, max_length):
        return None


def _term_mixes(paragraphs):
    eta = np.array([[0.5, 0.3, 0.2]], "float32")
    return [
        [LengthNormalization()],
        [LengthNormalization(0.6), NgramBlocking(2)],
        # GNMT's alpha < 0 favours short outputs: the penalty shrinks with |y|.
        [LengthNormalization(-1.0)],
        [LengthNormalization(1.0), StructuralCoverage(paragraphs, beta=0.5)],
        [LengthNormalization(), AttentionAlignment(eta, beta=0.8), MinLength(2)],
        [LengthNormalization(), CoveragePenalty(paragraphs, beta=0.3), MaxLength(5)],
        # A negative coverage weight rewards attention: no bound.
        [LengthNormalization(), CoveragePenalty(paragraphs, beta=-1.0)],
    ]


@pytest.mark.jax_slow  # 77 s under JAX (compiles whole searches): the slow set's JAX pass
# default-suite budget (docs/testing.md): mixes 3 to 6 run in the slow set
@pytest.mark.parametrize(
    "mix", [0, 1, 2] + [pytest.param(m, marks=pytest.mark.slow) for m in range(3, 7)])
def test_early_termination_returns_what_the_full_search_returns(mix):
    """Stopping once no alive beam can beat the finished pool must change
    nothing: the same hypotheses, scores and log-probs as a search that runs
    to max_length (small beams, so the pools are not exhaustive)."""
    length, vocabulary, paragraphs = 7, 6, 3
    rng = np.random.default_rng(mix)
    for trial in range(6):
        table = random_table(10 * mix + trial, length, vocabulary, peak=float(rng.uniform(0, 2)))
        table[..., EOS] += rng.uniform(-2, 2)
        attention = rng.uniform(size=(vocabulary, paragraphs)).astype("float32")
        beams = 1 + trial % 3
        outputs = []
        for extra in ([], [_NoBound()]):
            out = search(table_step_fn(table, attention), initial_state(1, beams), 1,
                         beam_size=beams, max_length=length, bos_id=0, eos_id=EOS, pad_id=0,
                         terms=_term_mixes(paragraphs)[mix] + extra)
            outputs.append({k: ops.convert_to_numpy(v) for k, v in out.items() if k != "aux"})
        for key in ("sequences", "lengths", "scores", "log_probs"):
            np.testing.assert_allclose(outputs[0][key], outputs[1][key], atol=1e-5,
                                       err_msg=f"trial {trial}, {key}")


@pytest.mark.parametrize("case", ["alpha=-1", "coverage beta=-1"])
def test_early_termination_with_a_shrinking_penalty_or_a_reward(case):
    """Two tables on which the old bound stopped too early: GNMT's penalty
    with alpha < 0 shrinks as |y| grows (the bound must divide by its value
    at the shortest reachable length), and a coverage weight < 0 is a
    reward without a bound (no early termination)."""
    if case == "alpha=-1":
        length, table, attention = 8, random_table(14, 8, 5), None
        table[..., EOS] += 1.0
        terms = [LengthNormalization(-1.0)]
    else:
        length, table = 5, random_table(25, 5, 5)
        attention = np.random.default_rng(0).uniform(size=(5, 3)).astype("float32")
        terms = [CoveragePenalty(3, beta=-1.0)]
    outputs = []
    for extra in ([], [_NoBound()]):
        out = search(table_step_fn(table, attention), initial_state(1, 2), 1, beam_size=2,
                     max_length=length, bos_id=0, eos_id=EOS, pad_id=0, terms=terms + extra)
        outputs.append({k: ops.convert_to_numpy(v) for k, v in out.items() if k != "aux"})
    for key in ("sequences", "scores", "log_probs"):
        np.testing.assert_allclose(outputs[0][key], outputs[1][key], atol=1e-5, err_msg=key)


def test_a_numpy_int_batch_size_is_a_known_batch():
    """`search` called directly with B as a numpy int checks its terms against
    B as it does for a Python int (a MaxLength of 2 examples is refused for a
    batch of 1 instead of being broadcast) and decodes the same hypotheses;
    B must be a positive int or a scalar tensor."""
    table = random_table(4, L, V)

    def run(batch_size, limits):
        return search(table_step_fn(table), initial_state(1, 3), batch_size, beam_size=3,
                      max_length=L, bos_id=0, eos_id=EOS, pad_id=0,
                      terms=[MaxLength(np.array(limits, "int32"))])

    for batch_size in (1, np.int64(1), np.int32(1)):
        with pytest.raises(ValueError, match=r"MaxLength: `max_length` must be an int or "
                                             r"int \[B\].*received shape \(2,\)"):
            run(batch_size, [2, 3])
    expected = run(1, [2])
    for batch_size in (np.int64(1), ops.convert_to_tensor(1, "int32")):
        got = run(batch_size, [2])
        for key in ("sequences", "scores", "lengths"):
            np.testing.assert_array_equal(ops.convert_to_numpy(got[key]),
                                          ops.convert_to_numpy(expected[key]))
    assert int(ops.convert_to_numpy(expected["lengths"]).max()) <= 2
    for bad in (0, -1, np.int64(0), True):
        with pytest.raises(ValueError, match=re.escape(
                f"search: `batch_size` must be an int >= 1, received {bad!r}.")):
            run(bad, [2])
