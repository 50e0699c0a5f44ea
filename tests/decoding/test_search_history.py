"""The search keeps parent pointers instead of reordering whole hypotheses
(issue 57): `backtrack` reads the tokens back as a walk over the pointers
does, the finished hypotheses' aux is the aux of the steps that scored
their tokens, and terms that say they do not read the alive sequences
run without them.
"""

import inspect

import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding import Sampling
from keras_hsum.decoding import search
from keras_hsum.decoding import terms as score_terms
from keras_hsum.decoding.beam_search import backtrack
from keras_hsum.decoding.terms import StepContext
from probability_table import EOS, initial_state, random_table, table_step_fn


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def _walk(paths, end, row, candidates, pad_id):
    """The tokens and beams of one hypothesis by following its pointers
    back one position at a time (paths numpy [L+1,R,2])."""
    length = paths.shape[0] - 1
    tokens, beams = np.full(length, pad_id), np.full(length, -1)
    for position in range(end, -1, -1):
        beams[position], tokens[position] = paths[position, row]
        row = candidates + beams[position]
    return tokens, beams


@pytest.mark.parametrize("length,beams,candidates", [(1, 1, 1), (9, 3, 6), (33, 2, 2)])
def test_backtrack_follows_the_pointers(length, beams, candidates):
    """Random pointer histories (every bit count of the distance up to
    L - 1 = 32): doubling gives what the walk gives; unfilled slots pad."""
    rng = np.random.default_rng(length)
    batch, slots, pad_id = 3, 4, 7
    rows = candidates + beams
    paths = np.stack([rng.integers(0, beams, (batch, length + 1, rows)),
                      rng.integers(0, 50, (batch, length + 1, rows))], axis=-1).astype("int32")
    ends = rng.integers(0, length, (batch, slots)).astype("int32")
    ends[0, 0] = length - 1
    starts = rng.integers(0, candidates, (batch, slots)).astype("int32")
    filled = rng.uniform(size=(batch, slots)) < 0.8
    filled[0, 0] = True
    tokens, parents = map(numpy, backtrack(
        ops.convert_to_tensor(paths), ops.convert_to_tensor(ends), ops.convert_to_tensor(starts),
        ops.convert_to_tensor(filled), candidates, pad_id))
    assert tokens.shape == parents.shape == (batch, slots, length)
    for b in range(batch):
        for j in range(slots):
            if filled[b, j]:
                want_tokens, want_beams = _walk(paths[b], ends[b, j], starts[b, j], candidates,
                                                pad_id)
            else:
                want_tokens, want_beams = np.full(length, pad_id), np.full(length, -1)
            np.testing.assert_array_equal(tokens[b, j], want_tokens, err_msg=f"{b},{j}")
            np.testing.assert_array_equal(parents[b, j], want_beams, err_msg=f"{b},{j}")


@pytest.mark.jax_slow  # compiles whole searches under JAX
@pytest.mark.parametrize("mode", ["beam", "greedy", "sample"])
def test_finished_aux_is_the_aux_of_each_tokens_step(mode):
    """The table model's aux is A[input token] [P]: a finished hypothesis'
    aux at position u is A[its token u - 1] (A[BOS] at 0) up to its end,
    zeros after, for every N."""
    length, vocabulary, paragraphs, beams, batch = 7, 6, 3, 3, 2
    rng = np.random.default_rng(4)
    table = random_table(4, length, vocabulary, peak=0.5)
    table[..., EOS] += np.linspace(-2.0, 2.0, length)[:, None, None]
    attention = rng.uniform(size=(vocabulary, paragraphs)).astype("float32")
    options = {"beam": {}, "greedy": {"greedy": True},
               "sample": {"sampling": Sampling(seed=3)}}[mode]
    K = 1 if mode == "greedy" else beams
    for every in (3, None):  # 3: L = 7 runs positions past L - 1 (the scratch column)
        out = search(table_step_fn(table, attention), initial_state(batch, K), batch,
                     beam_size=K, max_length=length, bos_id=0, eos_id=EOS, pad_id=0,
                     stop_check_every=every, **options)
        sequences, lengths = numpy(out["sequences"]), numpy(out["lengths"])
        aux = numpy(out["aux"]["paragraph_attention"])
        assert aux.shape == (batch, K, length, paragraphs)
        assert (lengths > 0).any()
        for b in range(batch):
            for k in range(K):
                n = lengths[b, k]
                inputs = np.concatenate([[0], sequences[b, k, :max(n - 1, 0)]]).astype(int)
                want = np.zeros((length, paragraphs), "float32")
                want[:n] = attention[inputs[:n]]
                np.testing.assert_allclose(aux[b, k], want, atol=1e-7,
                                           err_msg=f"{mode}, N={every}, {b},{k}")


def test_terms_that_do_not_read_the_sequences_run_without_them():
    """Every term class of keras_hsum.decoding.terms that sets
    `reads_sequences = False` masks and updates with `sequences=None`;
    the two that read them say so."""
    batch, beams, vocabulary, paragraphs = 2, 3, 9, 4
    eta = np.full((batch, paragraphs), 0.25, "float32")
    examples = {
        "LengthNormalization": lambda c: c(0.6), "MinLength": lambda c: c(3),
        "MaxLength": lambda c: c(4), "TokenBlocking": lambda c: c([5]),
        "CoveragePenalty": lambda c: c(paragraphs), "AttentionAlignment": lambda c: c(eta),
        "ExtractiveAlignment": lambda c: c(eta), "StructuralCoverage": lambda c: c(paragraphs),
        "NgramBlocking": lambda c: c(3), "RecentTokenBlocking": lambda c: c(2),
    }
    classes = {name: cls for name, cls in inspect.getmembers(score_terms, inspect.isclass)
               if issubclass(cls, score_terms.ScoreTerm) and not name.startswith("_")
               and cls is not score_terms.ScoreTerm}
    assert set(classes) == set(examples), sorted(classes)
    assert score_terms.ScoreTerm.reads_sequences
    assert classes["NgramBlocking"].reads_sequences
    assert classes["RecentTokenBlocking"].reads_sequences
    log_probs = ops.convert_to_tensor(
        np.random.default_rng(0).normal(size=(batch, beams, vocabulary)).astype("float32"))
    aux = {"paragraph_attention": ops.ones((batch, beams, paragraphs))}
    context = StepContext(None, ops.convert_to_tensor(3, "int32"), EOS, 8)
    for name, cls in classes.items():
        if cls.reads_sequences:
            continue
        term = examples[name](cls)
        assert not score_terms.term_reads_sequences(term), name
        state = term.initial_state(batch, beams)
        masked = term.mask_log_probs(log_probs, state, context)
        assert tuple(masked.shape) == (batch, beams, vocabulary), name
        term.update_state(state, aux, context)


class _MinLengthNoRepeat(score_terms.MinLength):
    """A user's subclass of a term that does not read the sequences, whose
    own `mask_log_probs` does: it also blocks repeating the last token."""

    def mask_log_probs(self, log_probs, state, context):
        log_probs = super().mask_log_probs(log_probs, state, context)
        return score_terms.RecentTokenBlocking(1).mask_log_probs(log_probs, state, context)


@pytest.mark.jax_slow  # compiles whole searches under JAX
def test_a_subclass_that_reads_the_sequences_gets_them():
    """`reads_sequences = False` of a built-in term does not reach a
    subclass that overrides `mask_log_probs` without saying it again: the
    search keeps the sequences for it, and it decodes as the two built-in
    terms it combines."""
    class Declared(_MinLengthNoRepeat):
        reads_sequences = False

    assert not score_terms.term_reads_sequences(score_terms.MinLength(2))
    assert score_terms.term_reads_sequences(_MinLengthNoRepeat(2))
    assert not score_terms.term_reads_sequences(Declared(2))
    length, vocabulary, beams, batch = 6, 5, 3, 2
    table = random_table(7, length, vocabulary, peak=1.0)
    options = dict(beam_size=beams, max_length=length, bos_id=0, eos_id=EOS, pad_id=0)
    subclass = search(table_step_fn(table), initial_state(batch, beams), batch,
                      terms=[_MinLengthNoRepeat(2)], **options)
    builtin = search(table_step_fn(table), initial_state(batch, beams), batch,
                     terms=[score_terms.MinLength(2), score_terms.RecentTokenBlocking(1)],
                     **options)
    sequences = numpy(subclass["sequences"])
    np.testing.assert_array_equal(sequences, numpy(builtin["sequences"]))
    np.testing.assert_allclose(numpy(subclass["scores"]), numpy(builtin["scores"]), atol=1e-6)
    for b in range(batch):  # the blocking took effect: no token repeats the one before it
        for k in range(beams):
            n = numpy(subclass["lengths"])[b, k]
            assert n > 0 and not (np.diff(sequences[b, k, :n]) == 0).any(), (b, k)
