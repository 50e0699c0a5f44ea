"""Attention-based terms on a constructed two-paragraph case (hand-computed).

Ids: 0 pad/BOS, 1 EOS, 2 "A", 3 "B". P(first) = A .5, B .4, EOS .1; then EOS
.9, A .05, B .05. The step's paragraph attention depends on its input token:
BOS → [.5,.5], A → [1,0], B → [0,1]. So "A EOS" attends [1.5,.5] (η = [.75,
.25]) and "B EOS" [.5,1.5] (η = [.25,.75]). With η̂ = [.1,.9]:
  A EOS: log(.45)/2 + β(log .1 + log .25)
  B EOS: log(.36)/2 + β(log .1 + log .75)
β = 0 keeps "A EOS" first; β = 0.8 makes "B EOS" win.
"""

import math

import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding import AttentionAlignment
from keras_hsum.decoding import CoveragePenalty
from keras_hsum.decoding import ExtractiveAlignment
from keras_hsum.decoding import LengthNormalization
from keras_hsum.decoding import StructuralCoverage
from keras_hsum.decoding import search
from probability_table import initial_state, table_step_fn

EOS, A, Bt = 1, 2, 3
ATTENTION = np.array([[0.5, 0.5], [0.5, 0.5], [1.0, 0.0], [0.0, 1.0]], "float32")


def table():
    p = np.zeros((2, 4, 4, 4))
    p[0, :, :] = [0.0, 0.1, 0.5, 0.4]
    p[1, :, :] = [0.0, 0.9, 0.05, 0.05]
    return np.where(p > 0, np.log(np.maximum(p, 1e-30)), -1e4).astype("float32")


def decode(terms, beam_size=2):
    out = search(table_step_fn(table(), ATTENTION), initial_state(1, beam_size), 1,
                 beam_size=beam_size, max_length=2, bos_id=0, eos_id=EOS, pad_id=0,
                 terms=terms)
    return {k: (v if k == "aux" else ops.convert_to_numpy(v)) for k, v in out.items()}


def alignment(eta, eta_hat):
    return sum(math.log(min(a, b)) for a, b in zip(eta, eta_hat))


def test_beta_zero_keeps_the_likeliest():
    out = decode([LengthNormalization(), AttentionAlignment(np.array([[0.1, 0.9]]), beta=0.0)])
    np.testing.assert_array_equal(out["sequences"][0, 0], [A, EOS])
    np.testing.assert_allclose(out["scores"][0, 0], math.log(0.45) / 2, rtol=1e-5)


@pytest.mark.parametrize("term", ["predicted", "extractive"])
def test_alignment_changes_the_winner(term):
    beta = 0.8
    if term == "predicted":
        aligned = AttentionAlignment(np.array([[0.1, 0.9]]), beta=beta)
    else:  # ranker scores .2 and 1.8 normalise to the same η̂
        aligned = ExtractiveAlignment(np.array([[0.2, 1.8]]), beta=beta)
    out = decode([LengthNormalization(), aligned])
    np.testing.assert_array_equal(out["sequences"][0], [[Bt, EOS], [A, EOS]])
    expected_b = math.log(0.36) / 2 + beta * alignment([0.25, 0.75], [0.1, 0.9])
    expected_a = math.log(0.45) / 2 + beta * alignment([0.75, 0.25], [0.1, 0.9])
    np.testing.assert_allclose(out["scores"][0], [expected_b, expected_a], rtol=1e-5)
    # aux: the attention of each generated token's step, zeros after the end
    attention = ops.convert_to_numpy(out["aux"]["paragraph_attention"])
    np.testing.assert_allclose(attention[0, 0], [[0.5, 0.5], [0.0, 1.0]])


def test_padded_paragraph_is_ignored():
    eta_hat = np.array([[0.1, 0.9, 0.0]], "float32")
    attention = np.concatenate([ATTENTION, np.zeros((4, 1), "float32")], axis=1)
    out = search(table_step_fn(table(), attention), initial_state(1, 2), 1, beam_size=2,
                 max_length=2, bos_id=0, eos_id=EOS, pad_id=0,
                 terms=[LengthNormalization(), AttentionAlignment(eta_hat, beta=0.8)])
    expected = math.log(0.36) / 2 + 0.8 * alignment([0.25, 0.75], [0.1, 0.9])
    np.testing.assert_allclose(ops.convert_to_numpy(out["scores"])[0, 0], expected, rtol=1e-5)


def test_coverage_penalty_is_gnmt():
    # GNMT: β Σ_p log min(Σ_t a_tp, 1), a_t normalised per step
    out = decode([CoveragePenalty(2, beta=0.5)], beam_size=4)
    scores = dict()
    for tokens, log_p, acc in [((A, EOS), math.log(0.45), [1.5, 0.5]),
                               ((Bt, EOS), math.log(0.36), [0.5, 1.5]),
                               ((EOS,), math.log(0.1), [0.5, 0.5])]:
        scores[tokens] = log_p + 0.5 * sum(math.log(min(c, 1.0)) for c in acc)
    got = {tuple(int(t) for t in s[:n]): v for s, n, v in
           zip(out["sequences"][0], out["lengths"][0], out["scores"][0])}
    for tokens, value in scores.items():
        np.testing.assert_allclose(got[tokens], value, rtol=1e-5)


def test_structural_coverage_reading():
    # strCov(α_t) = 1 − Σ_p min(α_tp, Σ_{t'<t} α_t'p), averaged over |y|
    def str_cov(steps):
        coverage, total = np.zeros(2), 0.0
        for a in steps:
            total += 1.0 - np.minimum(a, coverage).sum()
            coverage = coverage + a
        return total / len(steps)

    out = decode([LengthNormalization(), StructuralCoverage(2, beta=1.0)], beam_size=8)
    got = {tuple(int(t) for t in s[:n]): v for s, n, v in
           zip(out["sequences"][0], out["lengths"][0], out["scores"][0])}
    for tokens, log_p, steps in [((A, EOS), math.log(0.45), [[.5, .5], [1, 0]]),
                                 ((Bt, EOS), math.log(0.36), [[.5, .5], [0, 1]]),
                                 ((EOS,), math.log(0.1), [[.5, .5]])]:
        expected = log_p / len(tokens) + str_cov(np.array(steps, float))
        np.testing.assert_allclose(got[tokens], expected, rtol=1e-5)
