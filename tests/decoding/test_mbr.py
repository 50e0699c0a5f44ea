"""MBR reranking (`keras_hsum.decoding.mbr`).

References: a brute-force transcription with `collections.Counter` (clipped
n-gram counts, ROUGE-N F1, the expected utility and its argmax), rouge-score's
own ROUGE-N on the same ids written as words (TensorFlow pass only: the
library is imported lazily), and properties (symmetry, a permutation that
carries every field along, empty slots last).
"""

import collections

import keras
import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding import beam_search
from keras_hsum.decoding import expected_utility
from keras_hsum.decoding import mbr_rerank
from keras_hsum.decoding import pairwise_rouge_n
from keras_hsum.decoding.terms import NEG_INF
from keras_hsum.models import FlatTransformer

EOS, PAD = 3, 0


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def content(row, length):
    """The ids that count: before `length`, not EOS, not padding."""
    return [int(t) for t in row[:length] if t not in (EOS, PAD)]


def rouge_n_f1(a, b, n):
    grams_a = collections.Counter(tuple(a[i:i + n]) for i in range(len(a) - n + 1))
    grams_b = collections.Counter(tuple(b[i:i + n]) for i in range(len(b) - n + 1))
    total = sum(grams_a.values()) + sum(grams_b.values())
    if total == 0:
        return 0.0
    return 2 * sum((grams_a & grams_b).values()) / total


def reference_utility(sequences, lengths, scores, orders):
    out = np.full(scores.shape, NEG_INF, "float64")
    for b in range(sequences.shape[0]):
        alive = [k for k in range(sequences.shape[1]) if scores[b, k] > NEG_INF / 2]
        texts = {k: content(sequences[b, k], lengths[b, k]) for k in alive}
        for i in alive:
            others = [j for j in alive if j != i]
            values = [np.mean([rouge_n_f1(texts[i], texts[j], n) for n in orders])
                      for j in others]
            out[b, i] = np.mean(values) if values else 0.0
    return out


def random_beams(seed, batch=3, width=6, length=12, vocabulary=7):
    """Small vocabularies so that n-grams repeat within and across beams."""
    rng = np.random.default_rng(seed)
    sequences = rng.integers(4, 4 + vocabulary, (batch, width, length)).astype("int32")
    lengths = rng.integers(0, length + 1, (batch, width)).astype("int32")
    for b in range(batch):
        for k in range(width):
            if 0 < lengths[b, k] < length and rng.random() < 0.7:
                sequences[b, k, lengths[b, k] - 1] = EOS  # ended by EOS
            sequences[b, k, lengths[b, k]:] = PAD
    scores = -rng.random((batch, width)).astype("float32") * 10
    scores[0, -1] = NEG_INF  # empty slots
    scores[batch - 1, 1] = NEG_INF
    return sequences, lengths, scores


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_pairwise_rouge_n_is_the_clipped_count_f1(seed, n):
    sequences, lengths, _ = random_beams(seed)
    valid = (np.arange(sequences.shape[-1])[None, None] < lengths[..., None]) \
        & (sequences != EOS) & (sequences != PAD)
    got = numpy(pairwise_rouge_n(sequences, valid, n))
    for b in range(sequences.shape[0]):
        for i in range(sequences.shape[1]):
            for j in range(sequences.shape[1]):
                want = rouge_n_f1(content(sequences[b, i], lengths[b, i]),
                                  content(sequences[b, j], lengths[b, j]), n)
                np.testing.assert_allclose(got[b, i, j], want, atol=1e-6)
    np.testing.assert_allclose(got, np.swapaxes(got, 1, 2), atol=1e-6)


def test_repeated_ngrams_are_clipped():
    # h = x x x y, h' = x y y: unigram matches min(3,1) + min(1,2) = 2.
    sequences = np.array([[[5, 5, 5, 6], [5, 6, 6, 0]]], "int32")
    valid = sequences != PAD
    f1 = numpy(pairwise_rouge_n(sequences, valid, 1))
    np.testing.assert_allclose(f1[0, 0, 1], 2 * 2 / (4 + 3), atol=1e-6)
    f2 = numpy(pairwise_rouge_n(sequences, valid, 2))  # (5,6) once in each
    np.testing.assert_allclose(f2[0, 0, 1], 2 * 1 / (3 + 2), atol=1e-6)


@pytest.mark.tensorflow_only
def test_pairwise_rouge_n_matches_rouge_score():
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=False)
    sequences, lengths, _ = random_beams(5, batch=2, width=5, length=15, vocabulary=9)
    valid = (np.arange(sequences.shape[-1])[None, None] < lengths[..., None]) \
        & (sequences != EOS) & (sequences != PAD)
    got = {n: numpy(pairwise_rouge_n(sequences, valid, n)) for n in (1, 2)}
    for b in range(2):
        words = [" ".join(f"w{t}" for t in content(sequences[b, k], lengths[b, k]))
                 for k in range(5)]
        for i in range(5):
            for j in range(5):
                scores = scorer.score(words[j], words[i])
                for n in (1, 2):
                    np.testing.assert_allclose(
                        got[n][b, i, j], scores[f"rouge{n}"].fmeasure, atol=1e-6)


@pytest.mark.parametrize("orders", [(1, 2), (1,), (2, 3)])
def test_expected_utility_matches_brute_force(orders):
    sequences, lengths, scores = random_beams(3)
    got = numpy(expected_utility(sequences, lengths, scores, eos_id=EOS, pad_id=PAD,
                                 orders=orders))
    want = reference_utility(sequences, lengths, scores, orders)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_one_valid_hypothesis_has_utility_zero():
    sequences, lengths, scores = random_beams(4, batch=1, width=3)
    scores[0, 1:] = NEG_INF
    got = numpy(expected_utility(sequences, lengths, scores, eos_id=EOS))
    assert got[0, 0] == 0.0 and (got[0, 1:] == NEG_INF).all()


def test_rerank_puts_the_argmax_first_and_carries_every_field():
    sequences, lengths, scores = random_beams(6)
    width = sequences.shape[1]
    aux = np.random.default_rng(0).random((3, width, 12, 2)).astype("float32")
    result = {"sequences": sequences, "scores": scores, "log_probs": scores * 2,
              "lengths": lengths, "aux": {"paragraph_attention": aux}}
    out = mbr_rerank(result, eos_id=EOS, pad_id=PAD)
    want = reference_utility(sequences, lengths, scores, (1, 2))
    for b in range(3):
        # The expected ranking: utility descending, ties in beam order.
        order = sorted(range(width), key=lambda k: (-round(want[b, k] * 1e6), k))
        np.testing.assert_array_equal(numpy(out["sequences"])[b], sequences[b, order])
        np.testing.assert_array_equal(numpy(out["lengths"])[b], lengths[b, order])
        np.testing.assert_allclose(numpy(out["scores"])[b], scores[b, order])
        np.testing.assert_allclose(numpy(out["log_probs"])[b], 2 * scores[b, order])
        np.testing.assert_allclose(numpy(out["aux"]["paragraph_attention"])[b], aux[b, order])
        np.testing.assert_allclose(numpy(out["mbr_utility"])[b], want[b, order], atol=1e-6)
        empty = scores[b] <= NEG_INF / 2
        assert (numpy(out["scores"])[b, width - empty.sum():] <= NEG_INF / 2).all()


def test_ties_keep_the_beam_order():
    # Three identical hypotheses and one disjoint: the three tie, the first wins.
    sequences = np.array([[[5, 6, 3], [7, 8, 3], [7, 8, 3], [7, 8, 3]]], "int32")
    lengths = np.full((1, 4), 3, "int32")
    scores = np.array([[-1.0, -2.0, -3.0, -4.0]], "float32")
    out = mbr_rerank({"sequences": sequences, "scores": scores, "log_probs": scores,
                      "lengths": lengths}, eos_id=EOS)
    np.testing.assert_allclose(numpy(out["scores"])[0], [-2.0, -3.0, -4.0, -1.0])


def test_rejects_an_empty_order_list():
    sequences, lengths, scores = random_beams(0)
    with pytest.raises(ValueError, match="at least one n-gram order"):
        expected_utility(sequences, lengths, scores, eos_id=EOS, orders=())


def test_mis_shaped_arguments_are_named():
    sequences, lengths, scores = random_beams(0)
    B, K, L = sequences.shape
    valid = np.ones((B, K, L), bool)
    with pytest.raises(ValueError, match=rf"pairwise_rouge_n: `valid` must have shape "
                                         rf"\[B,K,L\] = \({B}, {K}, {L}\)"):
        pairwise_rouge_n(sequences, valid[:1], 1)
    with pytest.raises(ValueError, match=r"pairwise_rouge_n: `sequences` must have rank 3"):
        pairwise_rouge_n(sequences[0], valid[0], 1)
    for name, bad_lengths, bad_scores in (("lengths", lengths[:, :1], scores),
                                          ("scores", lengths, scores[:1])):
        with pytest.raises(ValueError, match=rf"expected_utility: `{name}` must have shape "
                                             rf"\[B,K\] = \({B}, {K}\)"):
            expected_utility(sequences, bad_lengths, bad_scores, eos_id=EOS)


@pytest.mark.jax_slow  # 20 s under JAX (compiles whole searches): the slow set's JAX pass
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_reranks_a_real_beam_search():
    keras.utils.set_random_seed(0)
    model = FlatTransformer(vocabulary_size=40, hidden_dim=16, num_heads=2, intermediate_dim=32,
                            num_encoder_layers=1, num_decoder_layers=1, dropout=0.0)
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, 40, (2, 9)).astype("int32")
    inputs = {"tokens": tokens, "token_mask": tokens != 0}
    model(dict(inputs, decoder_tokens=np.full((2, 3), 2, "int32")))
    result = beam_search(model, inputs, beam_size=5, max_length=8)
    out = mbr_rerank(result, eos_id=model.eos_id, pad_id=model.pad_id)
    sequences, lengths, scores = (numpy(result[k]) for k in ("sequences", "lengths", "scores"))
    want = reference_utility(sequences, lengths, scores, (1, 2))
    for b in range(2):
        first = max(range(5), key=lambda k: (round(want[b, k] * 1e6), -k))
        np.testing.assert_array_equal(numpy(out["sequences"])[b, 0], sequences[b, first])
