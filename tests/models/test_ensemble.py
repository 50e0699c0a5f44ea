"""SummarizerEnsemble: the mixture of the members' next-token distributions,
checked against a numpy transcription, through the searches, and saved."""

import keras
import numpy as np
import pytest

from keras_hsum.decoding import beam_search
from keras_hsum.decoding import greedy_search
from keras_hsum.models import DiscourseSummarizer
from keras_hsum.models import FlatTransformer
from keras_hsum.models import HierarchicalTransformer
from keras_hsum.models import SummarizerEnsemble
from model_test_case import assert_save_reload
from model_test_case import assert_step_matches_call
from model_test_case import assert_step_matches_call_in_graph
from model_test_case import decode_teacher_forced
from model_test_case import random_flat_inputs
from model_test_case import to_numpy

V = 40


def flat(seed, **overrides):
    keras.utils.set_random_seed(seed)
    options = dict(vocabulary_size=V, hidden_dim=16, num_heads=2, intermediate_dim=32,
                   num_encoder_layers=1, num_decoder_layers=2, dropout=0.0)
    options.update(overrides)
    return FlatTransformer(**options)


def inputs(seed=0):
    return random_flat_inputs(seed, target=7, vocabulary=V)


def numpy_mixture(log_probs, weights):
    """log Σ_i w_i softmax(x_i), one member's [..., V'] logits per entry."""
    weights = np.asarray(weights, np.float64) / np.sum(weights)
    total = 0.0
    for w, x in zip(weights, log_probs):
        x = np.asarray(x, np.float64)
        p = np.exp(x - x.max(-1, keepdims=True))
        total = total + w * p / p.sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        return np.log(total)


def built(model, features):
    model(features)
    return model


@pytest.mark.parametrize("copy", [False, True])
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_step_and_call_are_the_numpy_mixture(copy):
    features = inputs()
    options = {"pointer_generator": True} if copy else {}
    members = [built(flat(seed, **options), features) for seed in (0, 1, 2)]
    weights = [0.5, 0.2, 0.3]
    ensemble = SummarizerEnsemble(members, member_weights=[5, 2, 3])
    length = features["decoder_tokens"].shape[1]
    stepped = [decode_teacher_forced(m, features, length)[0] for m in members]
    expected = numpy_mixture(stepped, weights)
    actual, _ = decode_teacher_forced(ensemble, features, length)
    real = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(actual), real)
    np.testing.assert_allclose(actual[real], expected[real], atol=2e-5)
    called = [to_numpy(m(features)) for m in members]
    np.testing.assert_allclose(to_numpy(ensemble(features))[real],
                               numpy_mixture(called, weights)[real], atol=2e-5)
    assert_step_matches_call(ensemble, features)
    assert_step_matches_call_in_graph(ensemble, features)


@pytest.mark.jax_slow  # 13 s under JAX (compiles whole searches): the slow set's JAX pass
def test_one_member_and_equal_members_decode_as_the_member():
    features = inputs()
    model = built(flat(0), features)
    source = {k: v for k, v in features.items() if k != "decoder_tokens"}
    alone = beam_search(model, source, beam_size=3, max_length=8)
    for members in ([model], [model, model, model]):
        out = beam_search(SummarizerEnsemble(members), source, beam_size=3, max_length=8)
        np.testing.assert_array_equal(to_numpy(out["sequences"]), to_numpy(alone["sequences"]))
        np.testing.assert_allclose(to_numpy(out["scores"]), to_numpy(alone["scores"]),
                                   atol=1e-5)


@pytest.mark.jax_slow  # 18 s under JAX (compiles whole searches): the slow set's JAX pass
@pytest.mark.slow  # default-suite budget (docs/testing.md): runs in the slow set
def test_greedy_follows_the_mixture_not_a_member():
    """Brute force: greedy decoding of the ensemble takes, at each step, the
    argmax of the numpy mixture of the members' own steps on its prefix."""
    features = inputs(seed=3)
    source = {k: v for k, v in features.items() if k != "decoder_tokens"}
    distinct = 0
    for seeds in ((4, 5), (6, 7), (8, 9)):
        members = [built(flat(seed), features) for seed in seeds]
        out = greedy_search(SummarizerEnsemble(members), source, max_length=6)
        sequences = to_numpy(out["sequences"])[:, 0]
        prefix = np.concatenate([np.full((2, 1), 2, "int32"), sequences[:, :-1]], axis=1)
        teacher = dict(source, decoder_tokens=prefix)
        mixed = numpy_mixture(
            [decode_teacher_forced(m, teacher, prefix.shape[1])[0] for m in members], [1, 1])
        lengths = to_numpy(out["lengths"])[:, 0]
        for row in range(2):
            n = int(lengths[row])
            np.testing.assert_array_equal(sequences[row, :n], mixed[row, :n].argmax(-1))
        alone = [to_numpy(greedy_search(m, source, max_length=6)["sequences"])[:, 0]
                 for m in members]
        distinct += all(not np.array_equal(sequences, a) for a in alone)
    # In some pair the mixture decodes what neither member alone does (else
    # the test could not tell the mixture from a member).
    assert distinct >= 1


def test_aux_is_the_weighted_mean():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, V, (2, 3, 5)).astype("int32")
    features = {"tokens": tokens, "token_mask": tokens != 0,
                "paragraph_mask": np.ones((2, 3), bool),
                "decoder_tokens": np.array([[2, 5, 6], [2, 7, 8]], "int32")}

    def ht(seed):
        keras.utils.set_random_seed(seed)
        return built(HierarchicalTransformer(
            vocabulary_size=V, hidden_dim=16, num_heads=2, intermediate_dim=32,
            layer_schedule="LG", num_decoder_layers=1, dropout=0.0),
            features)

    members = [ht(1), ht(2)]
    ensemble = SummarizerEnsemble(members, member_weights=[3, 1])
    _, auxes = decode_teacher_forced(ensemble, features, 3)
    member_auxes = [decode_teacher_forced(m, features, 3)[1] for m in members]
    for t, aux in enumerate(auxes):
        expected = (0.75 * member_auxes[0][t]["paragraph_attention"]
                    + 0.25 * member_auxes[1][t]["paragraph_attention"])
        np.testing.assert_allclose(aux["paragraph_attention"], expected, atol=1e-6)
    assert not np.allclose(member_auxes[0][1]["paragraph_attention"],
                           member_auxes[1][1]["paragraph_attention"])


def test_save_reload(tmp_path):
    """Members of one name (checkpoints of one run load so) save apart."""
    features = inputs()
    ensemble = SummarizerEnsemble([built(flat(0, name="flat"), features),
                                   built(flat(1, name="flat"), features)],
                                  member_weights=[1, 3])
    restored = assert_save_reload(ensemble, features, tmp_path)
    assert isinstance(restored, SummarizerEnsemble)
    assert restored.member_weights == [0.25, 0.75]
    assert [type(m) for m in restored.members] == [FlatTransformer, FlatTransformer]


def test_clear_errors():
    features = inputs()
    model = built(flat(0), features)
    with pytest.raises(ValueError, match="at least one member"):
        SummarizerEnsemble([])
    with pytest.raises(ValueError, match="member 1 is a Dense"):
        SummarizerEnsemble([model, keras.layers.Dense(2)])
    other = flat(1, vocabulary_size=V + 5)
    with pytest.raises(ValueError, match="vocabulary_size=40, member 1 has vocabulary_size=45"):
        SummarizerEnsemble([model, other])
    # Distributions over different extended vocabularies (V + num_oov source
    # OOVs) cannot be mixed id by id; neither can a plain model's and a
    # copy model's extended ids.
    def discourse(num_oov):
        return DiscourseSummarizer(vocabulary_size=V, hidden_dim=8, embedding_dim=6,
                                   num_oov=num_oov)
    with pytest.raises(ValueError, match="member 0 has num_oov=3, member 1 has num_oov=5"):
        SummarizerEnsemble([discourse(3), discourse(5)])
    with pytest.raises(ValueError, match="member 0 has num_oov=0, member 1 has num_oov=3"):
        SummarizerEnsemble([model, discourse(3)])
    SummarizerEnsemble([discourse(3), discourse(3)])
    for weights in ([1.0], [1.0, -1.0], [0, 0], [float("inf"), 1.0], [float("nan"), 1.0]):
        with pytest.raises(ValueError, match="2 finite non-negative numbers"):
            SummarizerEnsemble([model, model], member_weights=weights)
    # An ensemble of an unbuilt member cannot decode (the member's `step`
    # reads its layers' weights); the error says how to build it.
    unbuilt = SummarizerEnsemble([model, flat(2)])
    with pytest.raises(ValueError,
                       match=r"members \[.flat_transformer.*\]\) is not built.*teacher-forced"):
        greedy_search(unbuilt, features, max_length=3)
