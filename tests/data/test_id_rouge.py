"""keras_hsum.data.id_rouge against a Python transcription on ids
(`tests/id_rouge_reference.py`: n-grams as tuples in `collections.Counter`s,
an extract scored by concatenating its sentences and counting again from
scratch), an independent transcription of rouge-score's ROUGE-N and of the
greedy oracle's rule."""

import collections
import itertools

import numpy as np
import pytest
import tensorflow as tf

from id_rouge_reference import extract_score as _extract_score
from id_rouge_reference import greedy as _greedy
from id_rouge_reference import score as _score
from keras_hsum.data import id_rouge


def _random_sequences(rng, count, base, longest, empty=True):
    low = 0 if empty else 1
    return [list(rng.integers(0, base, size=rng.integers(low, longest + 1))) for _ in range(count)]


def _ragged(sequences):
    return tf.ragged.constant(sequences, dtype=tf.int64, ragged_rank=1) if any(
        sequences
    ) else tf.RaggedTensor.from_row_lengths(
        tf.zeros([0], tf.int64), tf.zeros([len(sequences)], tf.int64)
    )


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ngram_keys_encode_every_ngram_in_order(n):
    rng = np.random.default_rng(n)
    sequences = _random_sequences(rng, 7, 9, 6)
    keys = id_rouge.ngram_keys(_ragged(sequences), n, 9).to_list()
    for sequence, row in zip(sequences, keys):
        expected = [
            sum(int(v) * 9 ** (n - 1 - j) for j, v in enumerate(sequence[i : i + n]))
            for i in range(len(sequence) - n + 1)
        ]
        assert row == expected


@pytest.mark.parametrize("case", range(12))
def test_rouge_n_equals_the_counter_transcription(case):
    rng = np.random.default_rng(100 + case)
    base = int(rng.integers(3, 15))
    candidates = _random_sequences(rng, int(rng.integers(1, 8)), base, 12)
    references = _random_sequences(rng, int(rng.integers(1, 4)), base, 15)
    for n in (1, 2, 3):
        scores = id_rouge.rouge_n(_ragged(candidates), _ragged(references), n, base)
        for r, reference in enumerate(references):
            for p, candidate in enumerate(candidates):
                expected = _score(candidate, reference, n)
                got = (
                    scores.precision[r, p].numpy(),
                    scores.recall[r, p].numpy(),
                    scores.fmeasure[r, p].numpy(),
                )
                np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_rouge_n_on_large_ids_and_empty_sides():
    base = 32000
    candidates = [[31999, 5, 31999, 5], [], [7]]
    references = [[5, 31999, 5], []]
    scores = id_rouge.rouge_n(_ragged(candidates), _ragged(references), 2, base)
    for r, reference in enumerate(references):
        for p, candidate in enumerate(candidates):
            np.testing.assert_allclose(
                scores.fmeasure[r, p].numpy(), _score(candidate, reference, 2)[2], atol=1e-12
            )
    assert scores.recall[0, 0].numpy() == 1.0  # both reference bigrams, clipped to 1 each


def test_too_large_orders_are_refused():
    with pytest.raises(ValueError, match="do not fit one int64 key"):
        id_rouge.ngram_keys(_ragged([[1, 2]]), 5, 32000)
    with pytest.raises(ValueError, match="orders among"):
        id_rouge.greedy_oracle(_ragged([[1]]), _ragged([[1]]), 10, orders=(3,))


@pytest.mark.parametrize("case", range(25))
def test_greedy_oracle_equals_the_from_scratch_greedy(case):
    rng = np.random.default_rng(case)
    base = int(rng.integers(3, 9))
    sentences = _random_sequences(rng, int(rng.integers(1, 9)), base, 6)
    references = _random_sequences(rng, int(rng.integers(1, 3)), base, 10, empty=False)
    orders = [(1, 2), (1,), (2,)][case % 3]
    max_sentences = None if case % 4 else 2
    got = id_rouge.greedy_oracle(
        _ragged(sentences), _ragged(references), base, orders, max_sentences
    )
    expected = _greedy(sentences, references, orders, max_sentences)
    assert np.flatnonzero(got.numpy()).tolist() == expected


@pytest.mark.parametrize("case", range(6))
def test_greedy_oracle_stops_where_no_sentence_improves_and_starts_with_the_best(case):
    """Brute force over all single sentences and all one-sentence additions."""
    rng = np.random.default_rng(50 + case)
    sentences = _random_sequences(rng, 6, 5, 5)
    references = _random_sequences(rng, 2, 5, 8, empty=False)
    chosen = np.flatnonzero(
        id_rouge.greedy_oracle(_ragged(sentences), _ragged(references), 5).numpy()
    ).tolist()
    best = _extract_score(sentences, chosen, references, (1, 2))
    for k in set(range(6)) - set(chosen):
        assert _extract_score(sentences, chosen + [k], references, (1, 2)) <= best
    singles = [_extract_score(sentences, [k], references, (1, 2)) for k in range(6)]
    if max(singles) > 0:
        assert int(np.argmax(singles)) in chosen


def test_greedy_oracle_counts_bigrams_across_the_junctions():
    # Alone, neither sentence holds the reference bigram (1, 2); joined in
    # document order they do, and the oracle takes both.
    sentences = [[1], [9, 9, 9, 9], [2]]
    references = [[1, 2]]
    got = id_rouge.greedy_oracle(_ragged(sentences), _ragged(references), 10).numpy()
    assert np.flatnonzero(got).tolist() == _greedy(sentences, references) == [0, 2]
    # Inserting a sentence between two chosen ones removes their junction.
    sentences = [[1], [2], [5]]
    references = [[1, 2, 5]]
    assert np.flatnonzero(
        id_rouge.greedy_oracle(_ragged(sentences), _ragged(references), 10).numpy()
    ).tolist() == _greedy(sentences, references)


def test_ops_run_inside_dataset_map_in_parallel():
    rng = np.random.default_rng(7)
    examples = [
        (_random_sequences(rng, 5, 6, 6, empty=False), _random_sequences(rng, 1, 6, 9, empty=False))
        for _ in range(8)
    ]
    dataset = tf.data.Dataset.from_tensor_slices(
        (
            tf.ragged.constant([s for s, _ in examples], tf.int64, ragged_rank=2),
            tf.ragged.constant([r for _, r in examples], tf.int64, ragged_rank=2),
        )
    ).map(
        lambda s, r: id_rouge.greedy_oracle(s, r, 6),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    for (sentences, references), got in zip(examples, dataset.as_numpy_iterator()):
        assert np.flatnonzero(got).tolist() == _greedy(sentences, references)


def test_rouge_id_table_lowercases_and_drops_what_rouge_score_drops():
    from keras_hsum.data.corpora import sample_tokenizer_path
    from keras_hsum.data.vocabulary import Vocabulary

    vocabulary = Vocabulary.load(sample_tokenizer_path())
    table = id_rouge.rouge_id_table(vocabulary)
    assert table.shape == (vocabulary.vocabulary_size,)
    for special in (vocabulary.pad_id, vocabulary.bos_id, vocabulary.eos_id, vocabulary.unk_id):
        assert table[special] == -1
    pieces = [vocabulary.id_to_piece(i) for i in range(vocabulary.vocabulary_size)]
    lowered = collections.defaultdict(list)
    for i, piece in enumerate(pieces):
        lowered[piece.lower()].append(i)
    checked = 0
    for i, piece in itertools.islice(enumerate(pieces), 200, 4000):
        if any("a" <= ch <= "z" or "0" <= ch <= "9" for ch in piece.lower()) and not (
            piece.startswith("<") and piece.endswith(">")
        ):
            assert table[i] == min(lowered[piece.lower()])
            checked += 1
        else:
            assert table[i] == -1
    assert checked > 1000
    the = vocabulary.piece_to_id("▁the")
    upper = vocabulary.piece_to_id("▁The")
    assert table[the] == table[upper] == min(the, upper)
    mapped = id_rouge.rouge_ids(tf.ragged.constant([vocabulary.encode("The cat, the CAT.")]), table)
    ids = mapped.to_list()[0]
    assert len(ids) >= 4 and ids[0] == ids[2]


def _dense(batch, width=None):
    """[[sequence, ...], ...] -> (ids [B, R, L], mask) padded with 0."""
    rows = max(len(example) for example in batch)
    width = width or max([len(s) for example in batch for s in example] + [1])
    ids = np.zeros((len(batch), rows, width), np.int32)
    mask = np.zeros((len(batch), rows, width), bool)
    for b, example in enumerate(batch):
        for r, sequence in enumerate(example):
            ids[b, r, : len(sequence)] = sequence
            mask[b, r, : len(sequence)] = True
    return ids, mask


@pytest.mark.parametrize("case", range(8))
def test_batch_rouge_n_equals_the_transcription_per_example(case):
    """Dense ids with dropped pieces (table -1) between kept ones: n-grams
    join across them, as rouge-score's words join across punctuation."""
    rng = np.random.default_rng(300 + case)
    base = 11
    table = np.arange(base, dtype=np.int64)
    table[[0, 3]] = -1  # dropped pieces
    table[7] = 2  # two ids, one ROUGE id (as "The" and "the")
    batch_candidates = [_random_sequences(rng, int(rng.integers(1, 6)), base, 8) for _ in range(3)]
    batch_references = [_random_sequences(rng, int(rng.integers(1, 4)), base, 9) for _ in range(3)]
    c_ids, c_mask = _dense(batch_candidates)
    r_ids, r_mask = _dense(batch_references)
    for n in (1, 2):
        scores = id_rouge.batch_rouge_n(c_ids, c_mask, r_ids, r_mask, n, table)
        for b in range(3):
            for r, reference in enumerate(batch_references[b]):
                ref = [int(table[i]) for i in reference if table[i] >= 0]
                for p, candidate in enumerate(batch_candidates[b]):
                    cand = [int(table[i]) for i in candidate if table[i] >= 0]
                    expected = _score(cand, ref, n)
                    got = [scores[k][b, r, p].numpy() for k in range(3)]
                    np.testing.assert_allclose(got, expected, atol=1e-12)
