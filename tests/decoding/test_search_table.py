"""`search` on fixed probability tables: beams computed by hand.

Ids: 0 = pad (and BOS, as an input only), 1 = EOS, 2 = "A", 3 = "B". The
next-token distribution depends on the example, the previous token (carried
in the search state, so beam reordering must gather it) and the last token
(`ids`): T[example, prev, last] → p over {pad, EOS, A, B}.
"""

import math

import numpy as np
from keras import ops

from keras_hsum.decoding import LengthNormalization
from keras_hsum.decoding import search

BOS, EOS, A, B = 0, 1, 2, 3
V = 4


def _table():
    table = np.full((2, V, V, V), 1.0 / 3)  # uniform over EOS/A/B by default
    table[..., 0] = 0.0

    def put(example, prev, last, eos, a, b):
        table[example, prev, last] = [0.0, eos, a, b]

    # example 0
    put(0, BOS, BOS, eos=0.1, a=0.5, b=0.4)
    put(0, BOS, A, eos=0.3, a=0.1, b=0.6)
    put(0, BOS, B, eos=0.1, a=0.7, b=0.2)
    put(0, A, B, eos=0.6, a=0.25, b=0.15)
    put(0, B, A, eos=0.4, a=0.5, b=0.1)
    # example 1: ends early
    put(1, BOS, BOS, eos=0.6, a=0.3, b=0.1)
    put(1, BOS, A, eos=0.9, a=0.06, b=0.04)
    put(1, BOS, B, eos=0.8, a=0.1, b=0.1)
    return np.where(table > 0, np.log(np.maximum(table, 1e-30)), -1e4).astype("float32")


def _step_fn(table):
    flat = ops.convert_to_tensor(table.reshape(-1, V))

    def step_fn(ids, index, state):
        row = (state["example"] * V + state["prev"]) * V + ids
        logits = ops.take(flat, row, axis=0)
        state = {"example": state["example"], "prev": ops.cast(ids, "int32")}
        return logits, state, {}

    return step_fn


def _run(beam_size=2, terms=(), greedy=False):
    K = beam_size
    state = {
        "example": ops.convert_to_tensor(np.repeat(np.arange(2), K).astype("int32")),
        "prev": ops.zeros((2 * K,), "int32"),
    }
    out = search(_step_fn(_table()), state, 2, beam_size=K, max_length=3,
                 bos_id=BOS, eos_id=EOS, pad_id=0, terms=terms, greedy=greedy)
    return {k: ops.convert_to_numpy(v) for k, v in out.items() if k != "aux"}


def test_beams_without_length_normalisation():
    out = _run()
    # example 0: A B EOS (.5·.6·.6), A EOS (.5·.3)
    # example 1: EOS (.6), A EOS (.3·.9); it stops while example 0 goes on
    np.testing.assert_array_equal(
        out["sequences"],
        [[[A, B, EOS], [A, EOS, 0]], [[EOS, 0, 0], [A, EOS, 0]]],
    )
    expected = [[math.log(0.18), math.log(0.15)], [math.log(0.6), math.log(0.27)]]
    np.testing.assert_allclose(out["scores"], expected, rtol=1e-5)
    np.testing.assert_allclose(out["log_probs"], expected, rtol=1e-5)
    np.testing.assert_array_equal(out["lengths"], [[3, 2], [1, 2]])


def test_beams_with_length_normalisation():
    out = _run(terms=[LengthNormalization()])
    # example 0 by log p / |y|: A B EOS (log .18 / 3), then B A A, cut at
    # max_length without EOS (log .14 / 3), ahead of B A EOS and A EOS.
    np.testing.assert_array_equal(out["sequences"][0], [[A, B, EOS], [B, A, A]])
    np.testing.assert_allclose(
        out["scores"][0], [math.log(0.18) / 3, math.log(0.14) / 3], rtol=1e-5
    )
    np.testing.assert_allclose(out["log_probs"][0], [math.log(0.18), math.log(0.14)], rtol=1e-5)
    np.testing.assert_array_equal(out["lengths"][0], [3, 3])
    # example 1: EOS (log .6 / 1) then A EOS (log .27 / 2)
    np.testing.assert_array_equal(out["sequences"][1], [[EOS, 0, 0], [A, EOS, 0]])
    np.testing.assert_allclose(
        out["scores"][1], [math.log(0.6), math.log(0.27) / 2], rtol=1e-5
    )


def test_gnmt_length_penalty():
    out = _run(terms=[LengthNormalization(alpha=0.6)])
    lp = lambda n: ((5.0 + n) / 6.0) ** 0.6
    candidates = {  # every finished hypothesis of example 0 in the K=2 beam
        (A, B, EOS): math.log(0.18) / lp(3), (B, A, A): math.log(0.14) / lp(3),
        (B, A, EOS): math.log(0.112) / lp(3), (A, B, A): math.log(0.075) / lp(3),
        (A, EOS, 0): math.log(0.15) / lp(2), (EOS, 0, 0): math.log(0.1) / lp(1),
    }
    best = sorted(candidates, key=candidates.get, reverse=True)[:2]
    np.testing.assert_array_equal(out["sequences"][0], best)
    np.testing.assert_allclose(out["scores"][0], [candidates[b] for b in best], rtol=1e-5)


def test_greedy_follows_the_argmax():
    out = _run(beam_size=1, greedy=True)
    # example 0: A (.5), B (.6), EOS (.6); example 1: EOS (.6) at once
    np.testing.assert_array_equal(out["sequences"][:, 0], [[A, B, EOS], [EOS, 0, 0]])
    np.testing.assert_allclose(out["log_probs"][:, 0], [math.log(0.18), math.log(0.6)], rtol=1e-5)
