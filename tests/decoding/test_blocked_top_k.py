"""`blocked_top_k` (issue 57: a decode step's top-k over B·K rows of V
scores in many short rows on a GPU) returns what one `top_k` returns, ties
included: checked against a stable numpy sort, the order `top_k`
documents (the lower index first among equals).

`blocked_top_k` lives in `keras_hsum.decoding.top_k` and reads `TOP_K_BLOCK`
and `_gpu_visible` from there: the tests that trace as on a GPU set them on
that module (`TOP_K_MODULE`), and check that blocks were cut.
"""

import importlib

import numpy as np
import pytest
from keras import ops

from keras_hsum.decoding.terms import NEG_INF
from keras_hsum.decoding.top_k import blocked_top_k

TOP_K_MODULE = importlib.import_module("keras_hsum.decoding.top_k")


def record_top_k_shapes(monkeypatch):
    """The shapes `ops.top_k` is called on from now on (a list that grows)."""
    shapes = []
    original = ops.top_k

    def recording(x, k, *args, **kwargs):
        shapes.append(tuple(x.shape))
        return original(x, k, *args, **kwargs)

    monkeypatch.setattr(ops, "top_k", recording)
    return shapes


def reference(x, k):
    """The best k of each row, best first, the lower index first among
    equal values (a stable sort of -x)."""
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, axis=-1), order


@pytest.mark.parametrize("shape,k,block,distinct", [
    ((2, 3, 1000), 6, 64, 5),       # many ties; 1000 = 15 blocks of 64 + 40 padded
    ((1, 5, 3200), 10, 512, 1000),  # a paper-like row cut into 7 blocks (the last padded)
    ((4, 700), 3, 100, 2),          # two values only: ties decide every place
    ((3, 129), 7, 64, 50),          # just over two blocks
    ((2, 2, 2, 640), 8, 32, 4),     # rank 4, 20 blocks, none padded
])
def test_blocked_top_k_equals_a_stable_sort(shape, k, block, distinct):
    rng = np.random.default_rng(sum(shape) + k)
    x = rng.integers(0, distinct, shape).astype("float32") / 7.0
    values, indices = blocked_top_k(ops.convert_to_tensor(x), k, block=block)
    want_values, want_indices = reference(x, k)
    np.testing.assert_array_equal(ops.convert_to_numpy(indices), want_indices)
    np.testing.assert_array_equal(ops.convert_to_numpy(values), want_values)
    # and one top_k's, the function it stands for
    top_values, top_indices = ops.top_k(ops.convert_to_tensor(x), k)
    np.testing.assert_array_equal(ops.convert_to_numpy(indices), ops.convert_to_numpy(top_indices))


def test_blocked_top_k_with_blocked_and_infinite_scores():
    """Rows where most scores are the search's NEG_INF or -inf (blocked
    tokens, dead beams) and fewer than k are finite: the padding (-inf)
    never displaces a real element, whose index is lower."""
    rng = np.random.default_rng(3)
    x = np.full((3, 2, 300), NEG_INF, "float32")
    x[0, 0, [5, 250]] = [-1.0, -2.0]
    x[1] = -np.inf
    x[1, 1, 299] = 0.0
    x[2] = rng.normal(size=(2, 300)).astype("float32")
    x[2, :, ::3] = -np.inf
    values, indices = blocked_top_k(ops.convert_to_tensor(x), 5, block=64)
    want_values, want_indices = reference(x, 5)
    np.testing.assert_array_equal(ops.convert_to_numpy(indices), want_indices)
    np.testing.assert_array_equal(ops.convert_to_numpy(values), want_values)
    assert ops.convert_to_numpy(indices).max() < 300


def test_short_rows_and_large_k_take_one_top_k(monkeypatch):
    """Rows of at most two blocks, or k over a block, are one `top_k`; so is
    every row where no GPU is visible and no block is given."""
    x = np.arange(24, dtype="float32").reshape(2, 12)[:, ::-1].copy()
    for k, block in ((3, 6), (8, 4)):
        values, indices = blocked_top_k(ops.convert_to_tensor(x), k, block=block)
        want_values, want_indices = reference(x, k)
        np.testing.assert_array_equal(ops.convert_to_numpy(indices), want_indices)
        np.testing.assert_array_equal(ops.convert_to_numpy(values), want_values)
        assert str(ops.convert_to_numpy(indices).dtype) == "int32"
    shapes = record_top_k_shapes(monkeypatch)
    monkeypatch.setattr(TOP_K_MODULE, "_gpu_visible", lambda: False)
    blocked_top_k(ops.convert_to_tensor(np.zeros((2, 5000), "float32")), 4)
    assert shapes == [(2, 5000)]  # one top-k of the whole rows
    monkeypatch.setattr(TOP_K_MODULE, "_gpu_visible", lambda: True)
    blocked_top_k(ops.convert_to_tensor(np.zeros((2, 5000), "float32")), 4)
    # blocks of TOP_K_BLOCK (512: 10 blocks, the last padded), then their candidates
    assert shapes == [(2, 5000), (2, 10, 512), (2, 40)]


@pytest.mark.jax_slow  # each search compiles under JAX
@pytest.mark.parametrize("seed,beams,terms", [(0, 2, "none"), (1, 3, "length+trigram")])
def test_a_search_with_every_top_k_blocked_returns_the_reference(monkeypatch, seed, beams, terms):
    """Blocks of 2·K elements, so that the search's three top-k sites (each
    beam's candidates over V' = 13, the stop check's and the final pool's
    over the L·(C + K) finished scores) all run blocked, with some blocks
    padded: ids equal to 1c4cd50's search (`reference_search`, one top-k
    over K·V'), scores to 1e-5, on a random and a tied table."""
    from keras_hsum.decoding import LengthNormalization
    from keras_hsum.decoding import NgramBlocking
    from keras_hsum.decoding import search
    from probability_table import EOS, initial_state, random_table, table_step_fn
    from reference_search import reference_search

    monkeypatch.setattr(TOP_K_MODULE, "TOP_K_BLOCK", 2 * beams)
    monkeypatch.setattr(TOP_K_MODULE, "_gpu_visible", lambda: True)  # blocks as on a GPU
    length, vocabulary = 9, 13
    term_list = [] if terms == "none" else [LengthNormalization(0.6), NgramBlocking(3)]
    shapes = record_top_k_shapes(monkeypatch)
    rng = np.random.default_rng(seed)
    tied = rng.integers(-2, 1, (length, 1, 1, vocabulary)).astype("float32")
    tied[..., 0] = -1e4  # pad
    tables = [random_table(seed, length, vocabulary, peak=1.0),
              np.broadcast_to(tied - np.log(np.exp(tied).sum(-1, keepdims=True)),
                              (length, vocabulary, vocabulary, vocabulary)).astype("float32")]
    for table in tables:
        step_fn = table_step_fn(table, None)
        expected, _ = reference_search(step_fn, initial_state(1, beams), 1, beam_size=beams,
                                       max_length=length, bos_id=0, eos_id=EOS,
                                       terms=term_list, greedy=False)
        out = search(step_fn, initial_state(1, beams), 1, beam_size=beams, max_length=length,
                     bos_id=0, eos_id=EOS, pad_id=0, terms=term_list)
        for key in ("sequences", "lengths"):
            np.testing.assert_array_equal(ops.convert_to_numpy(out[key]), expected[key])
        for key in ("scores", "log_probs"):
            np.testing.assert_allclose(ops.convert_to_numpy(out[key]), expected[key],
                                       rtol=1e-5, atol=1e-5)
    # the blocked path ran: each beam's V' = 13 candidates in blocks of 2·K
    blocks = (-(-vocabulary // (2 * beams)), 2 * beams)
    assert any(shape[-2:] == blocks for shape in shapes), shapes


@pytest.mark.tensorflow_only
@pytest.mark.slow  # 6.5 s (default-suite budget); the reference-search test above is the fast check
def test_blocked_candidates_match_tf_models_sequence_beam_search(monkeypatch):
    """A flat model's search (K = 4, V = 40) with each beam's candidates
    found in blocks of 8 (five blocks per beam) returns tf-models'
    `sequence_beam_search` result, as the unblocked search does
    (test_model_decoding)."""
    from test_model_decoding import test_matches_tf_models_sequence_beam_search

    module = importlib.import_module("keras_hsum.decoding.beam_search")  # not the function
    monkeypatch.setattr(TOP_K_MODULE, "TOP_K_BLOCK", 8)
    monkeypatch.setattr(TOP_K_MODULE, "_gpu_visible", lambda: True)  # blocks as on a GPU
    shapes = record_top_k_shapes(monkeypatch)
    calls = []
    original = module.blocked_top_k

    def recording(x, k, block=None):
        calls.append((tuple(x.shape), k))
        return original(x, k, block)

    monkeypatch.setattr(module, "blocked_top_k", recording)  # what the search calls
    test_matches_tf_models_sequence_beam_search(0.6)
    assert any(shape[-1] == 40 and k == 8 for shape, k in calls), calls  # each beam's candidates
    assert any(shape[-2:] == (5, 8) for shape in shapes), shapes  # in five blocks of 8


@pytest.mark.tensorflow_only
def test_blocked_top_k_in_a_graph_of_unknown_dimensions():
    """An exported search is traced with an unknown batch (a SavedModel
    signature): the blocks are cut from the static row length alone."""
    import tensorflow as tf

    x = np.random.default_rng(5).integers(0, 50, (3, 5, 3000)).astype("float32")
    traced = tf.function(lambda x: blocked_top_k(x, 10, block=512),
                         input_signature=[tf.TensorSpec([None, None, 3000], tf.float32)])
    values, indices = traced(x)
    want_values, want_indices = reference(x, 10)
    np.testing.assert_array_equal(indices.numpy(), want_indices)
    np.testing.assert_array_equal(values.numpy(), want_values)
