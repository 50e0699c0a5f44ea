"""Blocking terms as properties over random (repetitive) table models."""

import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding import MaxLength
from keras_hsum.decoding import MinLength
from keras_hsum.decoding import NgramBlocking
from keras_hsum.decoding import RecentTokenBlocking
from keras_hsum.decoding import search
from keras_hsum.decoding import TokenBlocking
from probability_table import EOS, sequence_log_prob, initial_state, random_table, table_step_fn

V, L, K, B = 6, 12, 3, 2


def decode(table, terms, beam_size=K):
    out = search(table_step_fn(table), initial_state(B, beam_size), B, beam_size=beam_size,
                 max_length=L, bos_id=0, eos_id=EOS, pad_id=0, terms=terms)
    return {k: ops.convert_to_numpy(v) for k, v in out.items() if k != "aux"}


def hypotheses(out):
    for b in range(B):
        for k in range(out["sequences"].shape[1]):
            n = int(out["lengths"][b, k])
            if n:
                yield list(out["sequences"][b, k, :n])


def repeats_ngram(tokens, n):
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def repetitive_table(seed):
    # the same peaked distribution at every position, EOS unlikely: loops
    table = np.repeat(random_table(seed, 1, V, peak=3.0), L, axis=0)
    table[..., EOS] = -8.0
    return table


@pytest.mark.parametrize("seed", range(4))
def test_trigram_blocking_never_repeats_a_trigram(seed):
    table = repetitive_table(seed)
    assert any(repeats_ngram(h, 3) for h in hypotheses(decode(table, [])))  # the model loops
    out = decode(table, [NgramBlocking(3)])
    for h in hypotheses(out):
        assert not repeats_ngram(h, 3), h
    assert (out["scores"] > -1e8).all()  # every slot is a real hypothesis


@pytest.mark.parametrize("n", [1, 2])
def test_unigram_and_bigram_blocking(n):
    out = decode(repetitive_table(7), [NgramBlocking(n)], beam_size=2)
    for h in hypotheses(out):
        # with V = 6 (4 words + EOS) unigram blocking ends by EOS after <= 5 tokens
        assert not repeats_ngram(h, n), h


# default-suite budget (docs/testing.md): seeds 1 and 2 run in the slow set
@pytest.mark.parametrize("seed", [0] + [pytest.param(s, marks=pytest.mark.slow) for s in (1, 2)])
def test_recent_token_blocking(seed):
    table = repetitive_table(seed)
    comma = 2
    table[..., comma] += 4.0  # the comma is very likely, everywhere
    out = decode(table, [RecentTokenBlocking(2, exceptions=[comma])])
    repeated_comma = False
    for h in hypotheses(out):
        for i, token in enumerate(h):
            recent = h[max(0, i - 2):i]
            if token == comma:
                repeated_comma |= comma in recent
            else:
                assert token not in recent, h
    assert repeated_comma  # exceptions may repeat
    out = decode(table, [RecentTokenBlocking(2)])
    for h in hypotheses(out):
        for i, token in enumerate(h):
            assert token not in h[max(0, i - 2):i], h


@pytest.mark.parametrize("seed", range(3))
def test_min_length(seed):
    table = random_table(seed, L, V)
    table[..., EOS] = 2.0  # EOS is the likeliest token everywhere
    out = decode(table, [MinLength(5)])
    for h in hypotheses(out):
        assert EOS not in h[:5], h
        assert len(h) >= 6 or len(h) == L
    # without the term, EOS comes at once
    assert decode(table, [])["lengths"][:, 0].tolist() == [1] * B


@pytest.mark.parametrize("seed", range(3))
def test_max_length(seed):
    table = repetitive_table(seed)  # EOS unlikely
    out = decode(table, [MaxLength(4)])
    for h in hypotheses(out):
        assert len(h) <= 4 and h[-1] == EOS, h
    per_example = decode(table, [MaxLength(np.array([3, 5], "int32"))])
    for b, limit in enumerate([3, 5]):
        assert (per_example["lengths"][b] <= limit).all()
        assert (per_example["lengths"][b] > 0).all()


# default-suite budget (docs/testing.md): seeds 1 and 2 run in the slow set
@pytest.mark.parametrize("seed", [0] + [pytest.param(s, marks=pytest.mark.slow) for s in (1, 2)])
def test_token_blocking_never_emits_the_blocked_ids(seed):
    table = repetitive_table(seed)
    favourite = int(np.argmax(table[0, 0, 0]))  # the first token the model prefers
    assert any(favourite in h for h in hypotheses(decode(table, [])))
    out = decode(table, [TokenBlocking([favourite])])
    emitted = [h for h in hypotheses(out)]
    assert emitted and all(favourite not in h for h in emitted)
    assert (out["scores"] > -1e8).all()  # every slot is a real hypothesis
    # blocking removes hypotheses without renormalising the rest: each
    # survivor keeps its log-probability under the (normalised) table
    top = table.max(-1, keepdims=True)
    normalised = table - top - np.log(np.exp(table - top).sum(-1, keepdims=True))
    for b in range(B):
        for k in range(K):
            tokens = tuple(int(t) for t in out["sequences"][b, k, :int(out["lengths"][b, k])])
            assert out["scores"][b, k] == pytest.approx(sequence_log_prob(normalised, tokens), abs=1e-4)


def test_token_blocking_rejects_negative_ids():
    with pytest.raises(ValueError, match=">= 0"):
        TokenBlocking([-1])


@pytest.mark.tensorflow_only
def test_every_score_term_method_converts_under_autograph():
    # `search` under tf.function (every export) runs the terms' methods
    # through AutoGraph; one it cannot convert is run as is, with a warning
    # on every export (the base `check`, a docstring alone, did so).
    import inspect

    import tensorflow as tf

    from keras_hsum.decoding import terms

    classes = [
        c for _, c in inspect.getmembers(terms, inspect.isclass)
        if issubclass(c, terms.ScoreTerm)
    ]
    assert len(classes) >= 8, classes
    converted = 0
    for cls in classes:
        for name, method in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("__") or method.__module__ != terms.__name__:
                continue
            try:
                tf.autograph.to_graph(method)
            except Exception as error:  # noqa: BLE001 - report which one
                pytest.fail(f"{cls.__name__}.{name} does not convert: {error}")
            converted += 1
    assert converted >= 20, converted
